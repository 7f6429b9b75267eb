#!/usr/bin/env bash
# scripts/mariadb-check.sh BACKEND [SECONDS] [THREADS]: one end-to-end check of mariadbd under the
# shim, used by tests/mariadb.rs (and handy by hand). In a fresh throwaway instance
# (scripts/mariadb.sh) it starts mariadbd with
#   LD_PRELOAD=<libmallocshim.so> MALLOCSHIM_BACKEND=BACKEND MALLOCSHIM_VERBOSE=1
# prepares sysbench's dataset, runs oltp_read_only for SECONDS (default 10) at THREADS (default 4),
# sends `kill -USR1` half-way through the load and times the dump (signal sent -> JSON file
# present), reads @@version_malloc_library, shuts mariadbd down with mariadb-admin and inspects
# its error log.
#
# stdout: `key=value` lines (one per line; summary_line's value is the whole summary line):
#   backend seconds threads sysbench_exit qps tps errors reconnects p95_ms mariadbd_exit
#   crash(0/1) crash_lines error_lines preload_failed(0/1) shim_lines summary(0/1) summary_backend
#   malloc free ... free_aligned_sized allocated_bytes resident_bytes total_calls summary_line
#   dump_ms (signal to JSON file, ms; n/a if none within 10 s) dump_threads dump_live_threads
#   dump_threads_with_calls (live threads with counts > 0)
#   dump_malloc (count in the dump) version_malloc_library ok(0/1)
# stderr: progress, and on a failed check the reasons plus the error log's tail.
# Exit status: 0 when every check passed (sysbench exit 0, errors=0, qps>0, mariadbd exit 0, no
# crash report, summary line present with backend=BACKEND and malloc>0), 1 when a check failed,
# 2 on bad usage or a missing shim.
#
# The shim is $MALLOCSHIM_SO if set, else <repo>/target/release/libmallocshim.so (not built here:
# the test builds it with common::shim(), main-job.sh with cargo). Runs are serialized across
# processes with flock on ${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}. MDB_KEEP=1 keeps the instance
# directory for inspection.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
root=$(cd -- "$here/.." && pwd)

backend=${1:-}
secs=${2:-10}
threads=${3:-4}
if [[ -z $backend || ! $secs =~ ^[0-9]+$ || ! $threads =~ ^[0-9]+$ ]]; then
    echo "usage: $0 BACKEND (glibc|jemalloc|tcmalloc|mimalloc) [SECONDS] [THREADS]" >&2
    exit 2
fi
so=${MALLOCSHIM_SO:-$root/target/release/libmallocshim.so}
if [[ ! -f $so ]]; then
    echo "mariadb-check: shim $so not found (run cargo build --release)" >&2
    exit 2
fi
so=$(cd -- "$(dirname -- "$so")" && pwd)/$(basename -- "$so")
# The dump is read by the mallocshim command ($MALLOCSHIM_CLI, default <repo>/target/release/
# mallocshim; the test builds it with common::cli_bin(), main-job.sh with cargo).
cli=${MALLOCSHIM_CLI:-$root/target/release/mallocshim}
if [[ ! -x $cli ]]; then
    echo "mariadb-check: $cli not found (run cargo build --release -p mallocshim-cli)" >&2
    exit 2
fi

exec 9>"${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}"
flock -w 900 9 || { echo "mariadb-check: could not take the lock" >&2; exit 2; }

# shellcheck source=scripts/mariadb.sh
source "$here/mariadb.sh"

fail=()
emit() { printf '%s=%s\n' "$1" "$2"; }

emit backend "$backend"
emit seconds "$secs"
emit threads "$threads"

mdb_create || exit 1
# Only mariadbd is preloaded; other MALLOCSHIM_* settings of the caller's environment are dropped.
mdb_clean_env prefix
dumpdir=$MDB_DIR/dumps
mkdir -p "$dumpdir"
prefix+=(LD_PRELOAD="$so" MALLOCSHIM_BACKEND="$backend" MALLOCSHIM_VERBOSE=1 MALLOCSHIM_DUMP_DIR="$dumpdir"
    MALLOCSHIM_DUMP_FORMATS=json)

if ! mdb_start "${prefix[@]}"; then
    emit mariadbd_exit "n/a"
    emit ok 0
    echo "mariadb-check: mariadbd did not start under the shim (backend $backend)" >&2
    exit 1
fi
# Half-way through the load: kill -USR1, then poll (10 ms) for the dump's JSON file.
usr1() {
    sleep "$(((secs + 1) / 2))"
    local t0 t1 f
    t0=$(date +%s%N)
    kill -USR1 "$MDB_PID" || return 1
    for _ in $(seq 1000); do
        f=$(find "$dumpdir" -name "mallocshim.$MDB_PID.*.json" | head -n 1)
        if [[ -n $f ]]; then
            t1=$(date +%s%N)
            echo "$(((t1 - t0) / 1000000)) $f" >"$dumpdir/usr1.result"
            return 0
        fi
        sleep 0.01
    done
    return 1
}
if mdb_sysbench_prepare; then
    usr1 &
    dumper=$!
    mdb_sysbench_run oltp_read_only "$secs" "$threads"
    wait "$dumper" || fail+=("no dump within 10 s of kill -USR1")
else
    SB_EXIT=prepare-failed SB_QPS=n/a SB_TPS=n/a SB_ERRORS=1 SB_RECONNECTS=n/a SB_P95=n/a
fi
vml=$(mdb_sql 'SELECT @@version_malloc_library' | tail -n 1) || vml=n/a
emit version_malloc_library "$vml"
if [[ -f $dumpdir/usr1.result ]]; then
    read -r dump_ms dump_file <"$dumpdir/usr1.result"
    emit dump_ms "$dump_ms"
    if facts=$("$cli" report --format kv "$dump_file"); then
        while IFS='=' read -r k v; do
            case $k in
            threads | live_threads | threads_with_calls | backend) emit "dump_$k" "$v" ;;
            calls_malloc) emit dump_malloc "$v" ;;
            esac
        done <<<"$facts"
    else
        fail+=("the dump does not read as a mallocshim dump")
    fi
else
    emit dump_ms n/a
fi
mdb_stop
emit sysbench_exit "$SB_EXIT"
emit qps "$SB_QPS"
emit tps "$SB_TPS"
emit errors "$SB_ERRORS"
emit reconnects "$SB_RECONNECTS"
emit p95_ms "$SB_P95"
emit mariadbd_exit "$MDB_EXIT"
[[ $SB_EXIT == 0 ]] || fail+=("sysbench exit status $SB_EXIT")
[[ $SB_ERRORS == 0 ]] || fail+=("sysbench errors $SB_ERRORS")
awk -v q="$SB_QPS" 'BEGIN { exit !(q + 0 > 0) }' || fail+=("qps $SB_QPS is not > 0")
[[ $MDB_EXIT == 0 ]] || fail+=("mariadbd exit status $MDB_EXIT")

crash=$(mdb_crash_report)
if [[ -n $crash ]]; then
    emit crash 1
    fail+=("crash report in the error log")
else
    emit crash 0
fi
emit crash_lines "$(printf '%s' "$crash" | grep -c .)"
emit error_lines "$(mdb_error_lines | grep -c .)"
if grep -q 'cannot be preloaded' "$MDB_ERRLOG"; then
    emit preload_failed 1
    fail+=("ld.so could not preload $so")
else
    emit preload_failed 0
fi
emit shim_lines "$(grep -c '^mallocshim:' "$MDB_ERRLOG")"

if line=$(mdb_shim_summary); then
    emit summary 1
    sb=$(mdb_kv "$line" backend) || sb=
    emit summary_backend "$sb"
    for k in "${MDB_SHIM_COUNTS[@]}" allocated_bytes resident_bytes; do
        v=$(mdb_kv "$line" "$k") || v=n/a
        emit "$k" "$v"
    done
    emit total_calls "$(mdb_shim_total "$line")"
    emit summary_line "$line"
    [[ $sb == "$backend" ]] || fail+=("summary names backend '$sb', not '$backend'")
    m=$(mdb_kv "$line" malloc) || m=0
    [[ $m =~ ^[0-9]+$ && $m -gt 0 ]] || fail+=("summary malloc=$m is not > 0")
else
    emit summary 0
    emit summary_backend "n/a"
    fail+=("no 'mallocshim: summary' line in the error log")
fi

if ((${#fail[@]})); then
    emit ok 0
    printf 'mariadb-check (%s): FAILED: %s\n' "$backend" "$(IFS=';'; echo "${fail[*]}")" >&2
    [[ -n $crash ]] && printf '%s\n' "$crash" >&2
    grep '^mallocshim:' "$MDB_ERRLOG" >&2
    mdb_tail_log "$MDB_ERRLOG" 60
    exit 1
fi
emit ok 1
echo "mariadb-check ($backend): ok (qps $SB_QPS, mariadbd exit 0)" >&2
