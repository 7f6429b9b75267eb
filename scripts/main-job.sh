#!/usr/bin/env bash
# scripts/main-job.sh: the README's main job. Installs what is missing (scripts/install-deps.sh),
# builds the shim (cargo build --release), then runs one throwaway MariaDB datadir (prepared once
# with sysbench, 4 tables x 10000 rows, by a mariadbd without the shim) under each backend:
#   env LD_PRELOAD=<abs>/target/release/libmallocshim.so MALLOCSHIM_BACKEND=<b> MALLOCSHIM_VERBOSE=1 mariadbd ...
# sysbench oltp_read_only for MAIN_SECONDS (8) at MAIN_THREADS (4), a clean mariadb-admin shutdown,
# and prints a table of sysbench's and the shim's figures (the latter from the
# `mallocshim: summary` line the shim writes to mariadbd's error log at exit), then, per backend,
# the latency table of the dump taken with `kill -USR1` half-way through the load.
# Exits non-zero when anything went wrong: build, mariadbd start/exit status, a crash report,
# sysbench errors, a missing summary line, or a summary naming another backend than requested
# (a silent fallback to glibc).
# Environment: MAIN_BACKENDS ("glibc jemalloc tcmalloc"), MAIN_SECONDS, MAIN_THREADS,
# MAIN_SKIP_BUILD=1 (use the existing .so), MALLOCSHIM_ALLOW_NO_SUMMARY=1 (a missing summary line
# prints n/a and only warns), MDB_KEEP=1 (keep the instance directory and its logs).
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
root=$(cd -- "$here/.." && pwd)
cd "$root" || exit 1

read -r -a backends <<<"${MAIN_BACKENDS:-glibc jemalloc tcmalloc}"
secs=${MAIN_SECONDS:-8}
threads=${MAIN_THREADS:-4}
allow_no_summary=${MALLOCSHIM_ALLOW_NO_SUMMARY:-0}
t_start=$SECONDS

bash "$here/install-deps.sh" || { echo "main-job: install-deps failed" >&2; exit 1; }

if [[ ${MAIN_SKIP_BUILD:-0} != 1 ]]; then
    echo "main-job: cargo build --release" >&2
    cargo build --release || { echo "main-job: cargo build --release failed" >&2; exit 1; }
fi
so=${CARGO_TARGET_DIR:-$root/target}/release/libmallocshim.so
so=$(cd -- "$(dirname -- "$so")" 2>/dev/null && pwd)/$(basename -- "$so")
[[ -f $so ]] || { echo "main-job: $so missing after the build" >&2; exit 1; }

exec 9>"${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}"
flock -w 900 9 || { echo "main-job: could not take ${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}" >&2; exit 1; }

# shellcheck source=scripts/mariadb.sh
source "$here/mariadb.sh"

problems=()
mdb_create || exit 1
# The dataset is prepared once, by a mariadbd without the shim, and reused by every backend.
mdb_start || exit 1
mdb_sysbench_prepare || { mdb_kill; exit 1; }
mdb_stop || { echo "main-job: the unpreloaded mariadbd (prepare run) exited with status $MDB_EXIT" >&2; exit 1; }

# A clean environment for mariadbd: none of the caller's MALLOCSHIM_* settings.
mdb_clean_env base_prefix

declare -A R
for b in "${backends[@]}"; do
    echo "main-job: === backend $b ===" >&2
    R[$b, qps]=n/a R[$b, errors]=n/a R[$b, p95]=n/a R[$b, exit]=n/a R[$b, calls]=n/a
    R[$b, malloc]=n/a R[$b, free]=n/a R[$b, alloc]=n/a R[$b, rss]=n/a R[$b, seen]=n/a R[$b, dump]=
    dumpdir=$MDB_DIR/dumps-$b
    mkdir -p "$dumpdir"
    if ! mdb_start "${base_prefix[@]}" LD_PRELOAD="$so" MALLOCSHIM_BACKEND="$b" MALLOCSHIM_VERBOSE=1 \
        MALLOCSHIM_DUMP_DIR="$dumpdir" MALLOCSHIM_DUMP_FORMATS=json,text; then
        problems+=("$b: mariadbd did not start under the shim")
        continue
    fi
    # Half-way through the load, ask the running server for a dump, as a DBA would.
    (sleep "$(((secs + 1) / 2))" && kill -USR1 "$MDB_PID") &
    dumper=$!
    mdb_sysbench_run oltp_read_only "$secs" "$threads" || problems+=("$b: sysbench exit status $SB_EXIT")
    wait "$dumper" || problems+=("$b: kill -USR1 failed")
    R[$b, dump]=$(find "$dumpdir" -name 'mallocshim.*.text' | sort | head -n 1)
    [[ -n ${R[$b, dump]} ]] || problems+=("$b: no dump in $dumpdir after kill -USR1")
    mdb_stop
    R[$b, qps]=$SB_QPS R[$b, errors]=$SB_ERRORS R[$b, p95]=$SB_P95 R[$b, exit]=$MDB_EXIT
    [[ $SB_ERRORS == 0 ]] || problems+=("$b: sysbench errors $SB_ERRORS")
    [[ $MDB_EXIT == 0 ]] || problems+=("$b: mariadbd exit status $MDB_EXIT")
    if crash=$(mdb_crash_report); then
        problems+=("$b: crash report in the error log")
        printf '%s\n' "$crash" >&2
    fi
    if grep -q 'cannot be preloaded' "$MDB_ERRLOG"; then
        problems+=("$b: ld.so could not preload $so")
    fi
    grep '^mallocshim:' "$MDB_ERRLOG" | grep -v '^mallocshim: summary ' | sed 's/^/main-job:   /' >&2
    if line=$(mdb_shim_summary); then
        R[$b, seen]=$(mdb_kv "$line" backend) || R[$b, seen]=?
        R[$b, calls]=$(mdb_shim_total "$line")
        R[$b, malloc]=$(mdb_kv "$line" malloc) || R[$b, malloc]=n/a
        R[$b, free]=$(mdb_kv "$line" free) || R[$b, free]=n/a
        R[$b, alloc]=$(mdb_kv "$line" allocated_bytes) || R[$b, alloc]=n/a
        R[$b, rss]=$(mdb_kv "$line" resident_bytes) || R[$b, rss]=n/a
        if [[ ${R[$b, seen]} != "$b" ]]; then
            echo "main-job: WARNING: requested backend $b but the shim's summary says backend=${R[$b, seen]} (fallback)" >&2
            problems+=("$b: the shim ran backend ${R[$b, seen]} instead")
        fi
    elif [[ $allow_no_summary == 1 ]]; then
        echo "main-job: WARNING: no 'mallocshim: summary' line in $MDB_ERRLOG (tolerated: MALLOCSHIM_ALLOW_NO_SUMMARY=1)" >&2
    else
        problems+=("$b: no 'mallocshim: summary' line in the error log")
    fi
    if ((${#problems[@]})) && [[ ${problems[-1]} == "$b:"* ]]; then
        mdb_tail_log "$MDB_ERRLOG" 30
    fi
done

echo
echo "mariadbd $(mariadbd --version | awk '{print $3}') under $so: sysbench oltp_read_only, $threads threads, $secs s, $MDB_SB_TABLES x $MDB_SB_ROWS rows"
fmt='%-9s %11s %6s %8s %5s %-9s %13s %12s %12s %16s %16s\n'
# shellcheck disable=SC2059
printf "$fmt" backend qps errors p95_ms exit summary total_calls malloc free allocated_bytes resident_bytes
for b in "${backends[@]}"; do
    # shellcheck disable=SC2059
    printf "$fmt" "$b" "${R[$b, qps]}" "${R[$b, errors]}" "${R[$b, p95]}" "${R[$b, exit]}" "${R[$b, seen]}" \
        "${R[$b, calls]}" "${R[$b, malloc]}" "${R[$b, free]}" "${R[$b, alloc]}" "${R[$b, rss]}"
done
echo "(summary = the backend named by the shim's summary line; exit = mariadbd's exit status)"
for b in "${backends[@]}"; do
    [[ -n ${R[$b, dump]:-} && -f ${R[$b, dump]} ]] || continue
    echo
    echo "=== $b: latency per op and size class, from the dump taken with kill -USR1 during the load ==="
    cat "${R[$b, dump]}"
done
echo "main-job: took $((SECONDS - t_start)) s"

if ((${#problems[@]})); then
    echo "main-job: FAILED:" >&2
    printf '  %s\n' "${problems[@]}" >&2
    exit 1
fi
echo "main-job: ok"
