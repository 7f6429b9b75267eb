#!/usr/bin/env bash
# scripts/fulltext-check.sh [CONFIG...]: RSS of a real mariadbd after InnoDB FULLTEXT phrase
# searches, with the shim's periodic trim on and off (issue 4). Used by tests/trim_mariadb.rs and
# benches/trim.rs; handy by hand.
#
# In one throwaway instance (scripts/mariadb.sh) it generates FT_ROWS documents of FT_WORDS words
# (python3: a 4096-word vocabulary of three-syllable words, word k drawn with k = 4096 * r^3 so a
# few words are in most documents; the same word(k) as scripts/fulltext-phrase.lua), loads them
# with LOAD DATA into an InnoDB table `docs` and adds a FULLTEXT index, all under a plain mariadbd.
# Then, for each CONFIG in turn (default: `off on`), it starts mariadbd afresh:
#   none  no preload at all
#   off   LD_PRELOAD=<shim> MALLOCSHIM_BACKEND=$FT_BACKEND MALLOCSHIM_TRIM_INTERVAL_MS=0
#   on    the same with MALLOCSHIM_TRIM_INTERVAL_MS=$FT_TRIM_MS
#   on:N  the same with MALLOCSHIM_TRIM_INTERVAL_MS=N (reported under the name onN)
# and a shim config may name its own backend, MODE@BACKEND (e.g. on@jemalloc, reported as
# on_jemalloc); without one it is FT_BACKEND's.
# (shim configs also get MALLOCSHIM_VERBOSE=2 and a JSON dump at exit), runs FT_THREADS concurrent
# phrase searches (sysbench + fulltext-phrase.lua) for FT_SECONDS, stays idle FT_IDLE seconds,
# sampling mariadbd's VmRSS every second, then shuts it down with mariadb-admin.
#
# Environment: FT_BACKEND (glibc) FT_ROWS (300000) FT_WORDS (30) FT_THREADS (4) FT_SECONDS (20)
#   FT_IDLE (10) FT_TRIM_MS (1000) FT_MIN_BYTES (unset: the shim's default) MDB_BUFFER_POOL (256M)
#   FT_MEMLOG_DIR (unset; set: each shim config writes its memlog to FT_MEMLOG_DIR/<name>.csv)
#   MALLOCSHIM_SO (default <repo>/target/release/libmallocshim.so; not built here)
#   MALLOCSHIM_CLI (default <repo>/target/release/mallocshim; not built here) MDB_KEEP=1.
#
# stdout: key=value lines. Once: backend rows words threads seconds idle trim_ms load_s index_s.
# Per config C (suffix _C): qps errors sysbench_exit rss_start rss_peak rss_end_load rss_final
#   (bytes) rss_series (VmRSS in bytes, one per second from the start of the searches, comma-
#   separated) mariadbd_exit crash trim_lines skip_lines trim_released_lines (sum of the
#   verbose lines' released=) trim_durations_us (comma-separated, from the verbose lines)
#   dump (the newest JSON dump of the server, on one line, from `mallocshim report --format json`;
#   shim configs) ok.
# Last line: ok=1 when every config had zero query errors, sysbench exit 0, mariadbd exit 0 and
# no crash report (and, for shim configs, a dump with a trim object); ok=0 otherwise.
# stderr: progress. Exit status 0 when ok=1, 1 when a check failed, 2 on bad usage/setup.
# Holds the machine-wide flock ${MDB_LOCK:-/tmp/mallocshim-mariadb.lock} while it runs.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
root=$(cd -- "$here/.." && pwd)

FT_BACKEND=${FT_BACKEND:-glibc}
FT_ROWS=${FT_ROWS:-300000}
FT_WORDS=${FT_WORDS:-30}
FT_THREADS=${FT_THREADS:-4}
FT_SECONDS=${FT_SECONDS:-20}
FT_IDLE=${FT_IDLE:-10}
FT_TRIM_MS=${FT_TRIM_MS:-1000}
configs=("$@")
((${#configs[@]})) || configs=(off on)
for c in "${configs[@]}"; do
    [[ $c =~ ^(none|(off|on|on:[0-9]+)(@(glibc|jemalloc|tcmalloc|mimalloc))?)$ ]] ||
        { echo "usage: $0 [none|off|on|on:MS][@glibc|@jemalloc|@tcmalloc|@mimalloc]..." >&2; exit 2; }
done
for v in FT_ROWS FT_WORDS FT_THREADS FT_SECONDS FT_IDLE FT_TRIM_MS; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "fulltext-check: $v=${!v} is not a number" >&2; exit 2; }
done
so=${MALLOCSHIM_SO:-$root/target/release/libmallocshim.so}
[[ -f $so ]] || { echo "fulltext-check: shim $so not found (cargo build --release)" >&2; exit 2; }
so=$(cd -- "$(dirname -- "$so")" && pwd)/$(basename -- "$so")
cli=${MALLOCSHIM_CLI:-$root/target/release/mallocshim}
[[ -x $cli ]] || { echo "fulltext-check: $cli not found (cargo build --release -p mallocshim-cli)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "fulltext-check: python3 is required" >&2; exit 2; }

exec 9>"${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}"
flock -w 1800 9 || { echo "fulltext-check: could not take the lock" >&2; exit 2; }

# shellcheck source=scripts/mariadb.sh
source "$here/mariadb.sh"

emit() { printf '%s=%s\n' "$1" "$2"; }
log() { printf 'fulltext-check: %s\n' "$*" >&2; }
fail=()

emit backend "$FT_BACKEND"
emit rows "$FT_ROWS"
emit words "$FT_WORDS"
emit threads "$FT_THREADS"
emit seconds "$FT_SECONDS"
emit idle "$FT_IDLE"
emit trim_ms "$FT_TRIM_MS"

mdb_create || exit 2

# Every MALLOCSHIM_* of the caller's environment is dropped: only what a config sets applies.
mdb_clean_env base_env

# --- the data set, under a plain mariadbd --------------------------------------------------
mdb_start "${base_env[@]}" || exit 2
t0=$SECONDS
tsv=$MDB_DIR/tmp/docs.tsv
python3 - "$FT_ROWS" "$FT_WORDS" >"$tsv" <<'EOF' || { log "generator failed"; exit 2; }
import random, sys
rows, words = int(sys.argv[1]), int(sys.argv[2])
syl = ["ka", "lo", "mi", "ne", "pu", "ra", "si", "to", "vu", "ze", "bo", "da", "fe", "gi", "hu", "ja"]
vocab = [syl[k & 15] + syl[(k >> 4) & 15] + syl[(k >> 8) & 15] for k in range(4096)]
rnd = random.Random(20240611)
out = sys.stdout
for i in range(1, rows + 1):
    out.write("%d\t%s\n" % (i, " ".join(vocab[int(4096 * rnd.random() ** 3)] for _ in range(words))))
EOF
mdb_sql "CREATE DATABASE ft; CREATE TABLE ft.docs (id INT UNSIGNED NOT NULL PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB" ||
    { log "CREATE TABLE failed"; exit 2; }
mariadb --no-defaults --socket="$MDB_SOCKET" --user=root --local-infile=1 -e \
    "LOAD DATA LOCAL INFILE '$tsv' INTO TABLE ft.docs FIELDS TERMINATED BY '\t' (id, body)" ||
    { log "LOAD DATA failed"; exit 2; }
rm -f -- "$tsv"
emit load_s "$((SECONDS - t0))"
t0=$SECONDS
mdb_sql "ALTER TABLE ft.docs ADD FULLTEXT INDEX ft_body (body)" || { log "ADD FULLTEXT INDEX failed"; exit 2; }
emit index_s "$((SECONDS - t0))"
n=$(mdb_sql "SELECT COUNT(*) FROM ft.docs" | tail -n 1)
[[ $n == "$FT_ROWS" ]] || { log "docs holds $n rows, not $FT_ROWS"; exit 2; }
mdb_stop || { log "the plain mariadbd did not stop cleanly"; exit 2; }
log "$FT_ROWS documents loaded and indexed"

# vmrss PID: mariadbd's VmRSS in bytes (empty when the process is gone).
vmrss() {
    awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status" 2>/dev/null
}

# --- one run per config --------------------------------------------------------------------
for c in "${configs[@]}"; do
    name=${c/:/}
    name=${name/@/_}
    mode=${c%@*}
    backend=$FT_BACKEND
    [[ $c == *@* ]] && backend=${c#*@}
    dumpdir=$MDB_DIR/dumps-$name
    mkdir -p "$dumpdir"
    prefix=("${base_env[@]}")
    if [[ $c != none ]]; then
        ms=$FT_TRIM_MS
        [[ $mode == off ]] && ms=0
        [[ $mode == on:* ]] && ms=${mode#on:}
        prefix+=(LD_PRELOAD="$so" MALLOCSHIM_BACKEND="$backend" MALLOCSHIM_VERBOSE=2
            MALLOCSHIM_TRIM_INTERVAL_MS="$ms" MALLOCSHIM_DUMP_AT_EXIT=1 MALLOCSHIM_DUMP_DIR="$dumpdir"
            MALLOCSHIM_DUMP_FORMATS=json)
        [[ -n ${FT_MIN_BYTES:-} ]] && prefix+=(MALLOCSHIM_TRIM_MIN_BYTES="$FT_MIN_BYTES")
        [[ -n ${FT_MEMLOG_DIR:-} ]] && prefix+=(MALLOCSHIM_MEMLOG="$FT_MEMLOG_DIR/$name.csv")
    fi
    if ! mdb_start "${prefix[@]}"; then
        fail+=("$name: mariadbd did not start")
        emit "ok_$name" 0
        continue
    fi
    pid=$MDB_PID
    emit "rss_start_$name" "$(vmrss "$pid")"
    out=$MDB_DIR/sysbench-$name.out
    sysbench "$here/fulltext-phrase.lua" --db-driver=mysql --mysql-socket="$MDB_SOCKET" --mysql-user=root \
        --mysql-password= --mysql-db=ft --threads="$FT_THREADS" --time="$FT_SECONDS" --events=0 \
        --report-interval=0 --histogram=off run >"$out" 2>&1 &
    sb=$!
    series=() peak=0
    while kill -0 "$sb" 2>/dev/null; do
        r=$(vmrss "$pid")
        [[ -n $r ]] && { series+=("$r"); ((r > peak)) && peak=$r; }
        sleep 1
    done
    sb_exit=0
    wait "$sb" || sb_exit=$?
    end_load=$(vmrss "$pid")
    for ((i = 0; i < FT_IDLE; i++)); do
        sleep 1
        r=$(vmrss "$pid")
        [[ -n $r ]] && { series+=("$r"); ((r > peak)) && peak=$r; }
    done
    final=$(vmrss "$pid")
    mdb_sysbench_parse "$out"
    emit "qps_$name" "$SB_QPS"
    emit "errors_$name" "$SB_ERRORS"
    emit "sysbench_exit_$name" "$sb_exit"
    emit "rss_peak_$name" "$peak"
    emit "rss_end_load_$name" "$end_load"
    emit "rss_final_$name" "$final"
    emit "rss_series_$name" "$(IFS=,; echo "${series[*]}")"
    mdb_stop
    emit "mariadbd_exit_$name" "$MDB_EXIT"
    ok=1
    if [[ $sb_exit != 0 || $SB_ERRORS != 0 ]]; then
        ok=0
        fail+=("$name: sysbench exit $sb_exit, errors $SB_ERRORS")
        tail -n 20 "$out" >&2
    fi
    [[ $MDB_EXIT == 0 ]] || { ok=0; fail+=("$name: mariadbd exit status $MDB_EXIT"); }
    if crash=$(mdb_crash_report); then
        emit "crash_$name" 1
        ok=0
        fail+=("$name: crash report in the error log")
        printf '%s\n' "$crash" >&2
    else
        emit "crash_$name" 0
    fi
    emit "trim_lines_$name" "$(grep -c '^mallocshim: trim backend=' "$MDB_ERRLOG")"
    emit "skip_lines_$name" "$(grep -c '^mallocshim: trim skipped ' "$MDB_ERRLOG")"
    emit "trim_released_lines_$name" "$(sed -nE 's/^mallocshim: trim backend=.* released=([0-9]+).*/\1/p' "$MDB_ERRLOG" |
        awk '{ s += $1 } END { print s + 0 }')"
    emit "trim_durations_us_$name" "$(sed -nE 's/^mallocshim: trim backend=.* duration_us=([0-9]+).*/\1/p' "$MDB_ERRLOG" | paste -sd,)"
    if [[ $c != none ]]; then
        emit "backend_$name" "$backend"
        # The JSON dump with the highest seq for this pid, on one line.
        trim=$("$cli" report --format json --dir "$dumpdir" --pid "$pid" 2>/dev/null)
        if [[ -n $trim ]]; then
            emit "dump_$name" "$trim"
        else
            ok=0
            fail+=("$name: no readable JSON dump from pid $pid in $dumpdir")
        fi
    fi
    emit "ok_$name" "$ok"
    log "$name: qps $SB_QPS errors $SB_ERRORS peak $((peak >> 20)) MiB, end of load $((${end_load:-0} >> 20)) MiB, final $((${final:-0} >> 20)) MiB, mariadbd exit $MDB_EXIT"
done

if ((${#fail[@]})); then
    emit ok 0
    log "FAILED: $(IFS=';'; echo "${fail[*]}")"
    exit 1
fi
emit ok 1
