#!/usr/bin/env bash
# scripts/mtr.sh CONFIG: runs a subset of MariaDB's own test suite (Debian package mariadb-test,
# mariadb-test-run.pl = mtr) against Debian's mariadbd, once per call, and says what happened.
# CONFIG is `baseline` (no shim) or a backend: glibc | jemalloc | tcmalloc | mimalloc. Used by tests/mtr.rs.
#
# The subset: main.fulltext main.select main.subselect main.partition main.sp and every test of the
# innodb_fts suite (each suite/innodb_fts/t/*.test, named one by one so nothing else is collected).
# Under a backend, only the servers get the shim, through mtr's own option (passed by its
# my_safe_process to every mariadbd it starts, restarts included):
#   --mysqld-env=LD_PRELOAD=<libmallocshim.so> --mysqld-env=MALLOCSHIM_BACKEND=<b>
#   --mysqld-env=MALLOCSHIM_PROFILE=1 --mysqld-env=MALLOCSHIM_VERBOSE=1
#   --mysqld-env=MALLOCSHIM_DUMP_AT_EXIT=1 --mysqld-env=MALLOCSHIM_DUMP_DIR=<out>/dumps
#   --mysqld-env=MALLOCSHIM_DUMP_FORMATS=json
# (not --start-and-exit, which bypasses my_safe_process and so drops --mysqld-env). mtr itself and
# mariadb-test (the client) run without LD_PRELOAD and without any MALLOCSHIM_* variable.
# As root, mtr adds --user=root to mariadbd itself; tests that need a non-root user skip themselves
# (the same way in every configuration).
#
# Output directory: ${MTR_OUT:-<repo>/target/mtr}/CONFIG (emptied first):
#   mtr.log       mtr's whole output          cmd          the mtr command line
#   var/          mtr's --vardir (error logs: var/<worker>/log/mysqld.1.err)
#   report.xml    mtr's jUnit report (--xml-report)
#   results.txt   one line per test result, from report.xml: `<suite.test[,combination]> <result> [reason]`
#   procs.txt     every mariadbd seen in /proc during the run (sampled every 0.5 s): pid, whether
#                 libmallocshim.so is mapped, its LD_PRELOAD and MALLOCSHIM_BACKEND, its command line
#   dumps/        under a backend: the shim's exit dumps mallocshim.<pid>.<seq>.json
# stdout: `key=value` lines:
#   config mtrdir mtr_exit wall_s tests pass fail skipped disabled other
#   err_logs server_starts crash_reports
#   procs_seen procs_shim_mapped procs_other_preload sample_cmdline
#   shim_tables shim_tables_backend shim_profile_env summaries summaries_backend
#   dumps dumps_backend fallback_lines preload_errors
# then `result <name> <result>` per test (the content of results.txt without reasons).
# Exit status: mtr's (0 when no test failed); 2 on bad usage or a missing tool.
#
# Environment: MALLOCSHIM_SO (default <repo>/target/release/libmallocshim.so, not built here),
# MTR_PARALLEL (default 2), MTR_TESTCASE_TIMEOUT (minutes, default 10), MTR_SUITE_TIMEOUT
# (minutes, default 40), MTR_DIR (the mysql-test directory; found with dpkg otherwise),
# MDB_LOCK (default /tmp/mallocshim-mariadb.lock: held while mtr runs, as every mariadbd user does).
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
root=$(cd -- "$here/.." && pwd)

config=${1:-}
case $config in
baseline | glibc | jemalloc | tcmalloc | mimalloc) ;;
*)
    echo "usage: $0 baseline|glibc|jemalloc|tcmalloc|mimalloc" >&2
    exit 2
    ;;
esac

die() { echo "mtr.sh: $*" >&2; exit 2; }

# --- find mtr and the server
mtrdir=${MTR_DIR:-}
if [[ -z $mtrdir ]]; then
    for d in /usr/share/mysql/mysql-test /usr/share/mariadb/mysql-test /usr/mysql-test; do
        [[ -f $d/mariadb-test-run.pl ]] && { mtrdir=$d; break; }
    done
fi
if [[ -z $mtrdir ]] && command -v dpkg >/dev/null 2>&1; then
    f=$(dpkg -L mariadb-test 2>/dev/null | grep -m1 '/mariadb-test-run\.pl$')
    [[ -n $f ]] && mtrdir=$(dirname -- "$f")
fi
[[ -n $mtrdir && -f $mtrdir/mariadb-test-run.pl ]] ||
    die "mariadb-test-run.pl not found (package mariadb-test; run scripts/install-deps.sh)"
command -v mariadbd >/dev/null 2>&1 || die "mariadbd not found (package mariadb-server)"
command -v perl >/dev/null 2>&1 || die "perl not found"
command -v python3 >/dev/null 2>&1 || die "python3 not found (reads mtr's jUnit report)"
command -v flock >/dev/null 2>&1 || die "flock not found"

so=
if [[ $config != baseline ]]; then
    so=${MALLOCSHIM_SO:-$root/target/release/libmallocshim.so}
    [[ -f $so ]] || die "shim $so not found (run cargo build --release)"
    so=$(cd -- "$(dirname -- "$so")" && pwd)/$(basename -- "$so")
    if [[ $config == tcmalloc ]]; then
        [[ -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ]] ||
            die "libtcmalloc_minimal.so.4 missing (package libtcmalloc-minimal4)"
    fi
    if [[ $config == mimalloc ]]; then
        [[ -e /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 ]] ||
            die "libmimalloc.so.2 missing (package libmimalloc2.0)"
    fi
fi

# --- the subset
tests=(main.fulltext main.select main.subselect main.partition main.sp)
fts=()
for t in "$mtrdir"/suite/innodb_fts/t/*.test; do
    [[ -e $t ]] && fts+=("innodb_fts.$(basename -- "$t" .test)")
done
((${#fts[@]} > 0)) || die "no tests in $mtrdir/suite/innodb_fts/t"
tests+=("${fts[@]}")

# --- output directory
outroot=${MTR_OUT:-$root/target/mtr}
mkdir -p -- "$outroot" || die "cannot create $outroot"
out=$(cd -- "$outroot" && pwd)/$config
rm -rf -- "$out"
mkdir -p -- "$out" || die "cannot create $out"
var=$out/var

args=(perl ./mariadb-test-run.pl --vardir="$var" --force --max-test-fail=0 --retry=0
    --parallel="${MTR_PARALLEL:-2}" --testcase-timeout="${MTR_TESTCASE_TIMEOUT:-10}"
    --suite-timeout="${MTR_SUITE_TIMEOUT:-40}" --xml-report="$out/report.xml")
if [[ $config != baseline ]]; then
    mkdir -p "$out/dumps"
    args+=(--mysqld-env=LD_PRELOAD="$so" --mysqld-env=MALLOCSHIM_BACKEND="$config"
        --mysqld-env=MALLOCSHIM_PROFILE=1 --mysqld-env=MALLOCSHIM_VERBOSE=1
        --mysqld-env=MALLOCSHIM_DUMP_AT_EXIT=1 --mysqld-env=MALLOCSHIM_DUMP_DIR="$out/dumps"
        --mysqld-env=MALLOCSHIM_DUMP_FORMATS=json)
fi
args+=("${tests[@]}")

# mtr and its clients run without the shim: drop LD_PRELOAD and every MALLOCSHIM_* variable.
clean=(env -u LD_PRELOAD)
while IFS='=' read -r k _; do
    [[ $k == MALLOCSHIM_* ]] && clean+=(-u "$k")
done < <(env)

printf '%q ' "${clean[@]}" "${args[@]}" >"$out/cmd"
echo >>"$out/cmd"

exec 9>"${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}"
flock -w 1800 9 || die "could not take the lock ${MDB_LOCK:-/tmp/mallocshim-mariadb.lock} within 30 min"

# --- sample the servers of this run from /proc while mtr runs. A process that is exiting has its
# memory gone: cmdline, environ and maps read empty; such a sample is dropped (a server seen only
# then is not counted), and so is one taken before the loader has mapped libc (exec()ed but not
# yet loaded: no preload in maps yet), so every recorded line describes a live, loaded mariadbd.
sampler() {
    declare -A seen=()
    local pid cmd env maps pre be mapped
    while :; do
        for pid in $(pgrep -x mariadbd 2>/dev/null); do
            [[ -n ${seen[$pid]:-} ]] && continue
            { cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline"); } 2>/dev/null || continue
            [[ $cmd == *"$var"* ]] || continue
            { env=$(tr '\0' '\n' <"/proc/$pid/environ"); } 2>/dev/null || continue
            { maps=$(cat "/proc/$pid/maps"); } 2>/dev/null || continue
            [[ -n $env && -n $maps ]] || continue
            # Judged only once the loader has mapped the program's own libraries: between exec
            # and then, maps holds mariadbd and ld.so alone (no preload yet, issue 21 part 8).
            # The loader maps LD_PRELOAD before DT_NEEDED, so with libc mapped the preload is
            # too. Not marked seen: the next round (0.5 s) samples it again.
            [[ $maps == *"/libc.so"* ]] || continue
            pre=$(sed -n 's/^LD_PRELOAD=//p' <<<"$env")
            be=$(sed -n 's/^MALLOCSHIM_BACKEND=//p' <<<"$env")
            mapped=0
            [[ $maps == *libmallocshim.so* ]] && mapped=1
            seen[$pid]=1
            printf 'pid=%s shim_mapped=%s ld_preload=%s backend=%s cmdline=%s\n' \
                "$pid" "$mapped" "${pre:--}" "${be:--}" "$cmd" >>"$out/procs.txt"
        done
        sleep 0.5
    done
}
: >"$out/procs.txt"
sampler &
sampler_pid=$!
trap 'kill "$sampler_pid" 2>/dev/null' EXIT

echo "mtr.sh: $config: running mtr on ${#tests[@]} tests in $mtrdir (log $out/mtr.log)" >&2
t0=$(date +%s.%N)
(cd -- "$mtrdir" && "${clean[@]}" "${args[@]}") </dev/null >"$out/mtr.log" 2>&1
mtr_exit=$?
t1=$(date +%s.%N)
kill "$sampler_pid" 2>/dev/null
wait "$sampler_pid" 2>/dev/null
trap - EXIT

emit() { printf '%s=%s\n' "$1" "$2"; }
emit config "$config"
emit mtrdir "$mtrdir"
emit mtr_exit "$mtr_exit"
emit wall_s "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"

# --- per-test results, from mtr's jUnit report (written once, at the end, by the manager). Not
# from mtr.log: there the manager prints a result line in several writes, and a worker's own line
# (`worker[01] ...`) can land between them, so a result can be lost from the log (seen once in CI:
# innodb_fts.bug_32831765 under glibc). Without a report (mtr died) the results are empty.
python3 - "$out/report.xml" >"$out/results.txt" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as e:
    print(f"mtr.sh: no usable jUnit report {sys.argv[1]}: {e}", file=sys.stderr)
    sys.exit(0)
names = {"MTR_RES_PASSED": "pass", "MTR_RES_FAILED": "fail", "MTR_RES_SKIPPED": "skipped"}
for tc in root.iter("testcase"):
    name = tc.get("classname", "") + "." + tc.get("name", "")
    if tc.get("combinations"):
        name += "," + tc.get("combinations")
    res, why = names.get(tc.get("status", ""), tc.get("status", "?").lower()), ""
    for child in tc:
        if child.tag == "disabled":
            res = "disabled"
        why = child.get("message") or why
    print(name, res, " ".join(why.split()))
PY
count() { awk -v r="$1" '$2 == r { n++ } END { print n + 0 }' "$out/results.txt"; }
emit tests "$(wc -l <"$out/results.txt")"
emit pass "$(count pass)"
emit fail "$(awk '$2 ~ /fail/ { n++ } END { print n + 0 }' "$out/results.txt")"
emit skipped "$(count skipped)"
emit disabled "$(count disabled)"
emit other "$(awk '$2 !~ /fail/ && $2 != "pass" && $2 != "skipped" && $2 != "disabled" { n++ } END { print n + 0 }' "$out/results.txt")"

# --- the servers' error logs
mapfile -t errs < <(find "$var" -name 'mysqld.*.err' -type f 2>/dev/null | sort)
emit err_logs "${#errs[@]}"
sum_grep() { # PATTERN: total matching lines over the error logs
    local n=0 f c
    for f in "${errs[@]}"; do
        c=$(grep -cE -- "$1" "$f")
        n=$((n + c))
    done
    echo "$n"
}
emit server_starts "$(sum_grep '\[Note\] .*mariadbd: ready for connections')"
emit crash_reports "$(sum_grep 'got signal [0-9]+|Attempting backtrace|stack_bottom')"

# --- what /proc showed. Servers only: mtr runs its bootstrap (`--bootstrap`) and its feature
# probe (`mariadbd ... --verbose --help`, which prints and exits) without --mysqld-env, so neither
# has the shim. The probe lives a few ms on a quiet machine, long enough at load 25 to be sampled
# (issue 21 part 8: "servers without libmallocshim.so mapped").
servers() { grep -v -e '--bootstrap' -e ' --help' "$out/procs.txt"; }
serv=$(servers | grep -c .)
emit procs_seen "$serv"
emit procs_shim_mapped "$(servers | grep -c 'shim_mapped=1')"
emit procs_other_preload "$(servers |
    grep -v 'ld_preload=- ' | grep -vc "ld_preload=${so:-NONE} ")"
emit sample_cmdline "$(servers | head -n1 | sed 's/.* cmdline=//')"

# --- the shim's own evidence: options line at each start, summary at each clean exit, exit dumps
# (not anchored at the start of a line: a test may leave an unterminated line in the log, e.g.
# a lone `"` before the next line, seen in the baseline too)
emit shim_tables "$(sum_grep 'mallocshim: mallocshim .* options in effect')"
emit shim_tables_backend "$(sum_grep "mallocshim: mallocshim .* options in effect \\(backend ${config}\\)")"
# MALLOCSHIM_VERBOSE=1's one line names the options the environment set (MALLOCSHIM_PROFILE=on)
emit shim_profile_env "$(sum_grep 'mallocshim: mallocshim .* options in effect .* MALLOCSHIM_PROFILE=on[ ;]')"
emit summaries "$(sum_grep 'mallocshim: summary ')"
emit summaries_backend "$(sum_grep "mallocshim: summary backend=${config} ")"
emit fallback_lines "$(sum_grep 'mallocshim: .*continuing with glibc')"
emit preload_errors "$(sum_grep 'ld\.so: object .* cannot be preloaded')"
nd=0 ndb=0
if [[ -d $out/dumps ]]; then
    for f in "$out"/dumps/mallocshim.*.json; do
        [[ -e $f ]] || continue
        nd=$((nd + 1))
        grep -q "\"backend\": *\"$config\"" "$f" && ndb=$((ndb + 1))
    done
fi
emit dumps "$nd"
emit dumps_backend "$ndb"

awk '{ print "result " $1 " " $2 }' "$out/results.txt"
exit "$mtr_exit"
