#!/usr/bin/env bash
# scripts/trim-qps.sh ROUNDS SECONDS THREADS CONFIG...: sysbench oltp_read_only qps of mariadbd
# under the shim with different periodic-trim settings, in interleaved rounds (benches/trim.rs).
#
# One throwaway instance (scripts/mariadb.sh), one sysbench dataset (MDB_SB_TABLES x MDB_SB_ROWS,
# prepared once under a plain mariadbd). Round r runs every CONFIG once, in an order rotated by r:
# start mariadbd with LD_PRELOAD=<shim> MALLOCSHIM_BACKEND=$QPS_BACKEND (default glibc) plus the
# CONFIG's settings, 3 s of oltp_read_only to warm the buffer pool, SECONDS of oltp_read_only at
# THREADS (the measurement), a JSON dump at exit, mariadb-admin shutdown. A CONFIG is
#   NAME:INTERVAL_MS[:MIN_BYTES]   e.g. off:0  every1s:1000  every1s-min0:1000:0  default:10000
# (MIN_BYTES unset = the shim's default).
#
# stdout, one line per measurement:
#   run round=R config=NAME qps=Q errors=E trim_runs=N trim_skipped=N trim_p50_us=X trim_max_us=X mariadbd_exit=S
# and a last line ok=1 (every run: sysbench exit 0, 0 errors, mariadbd exit 0) or ok=0.
# MALLOCSHIM_SO as in mariadb-check.sh. Holds the flock ${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
root=$(cd -- "$here/.." && pwd)

rounds=${1:-}
secs=${2:-}
threads=${3:-}
shift 3 2>/dev/null || true
configs=("$@")
if [[ ! $rounds =~ ^[0-9]+$ || ! $secs =~ ^[0-9]+$ || ! $threads =~ ^[0-9]+$ || ${#configs[@]} -eq 0 ]]; then
    echo "usage: $0 ROUNDS SECONDS THREADS NAME:INTERVAL_MS[:MIN_BYTES]..." >&2
    exit 2
fi
for c in "${configs[@]}"; do
    [[ $c =~ ^[A-Za-z0-9_-]+:[0-9]+(:[0-9]+)?$ ]] || { echo "trim-qps: bad config $c" >&2; exit 2; }
done
QPS_BACKEND=${QPS_BACKEND:-glibc}
so=${MALLOCSHIM_SO:-$root/target/release/libmallocshim.so}
[[ -f $so ]] || { echo "trim-qps: shim $so not found (cargo build --release)" >&2; exit 2; }
so=$(cd -- "$(dirname -- "$so")" && pwd)/$(basename -- "$so")
cli=${MALLOCSHIM_CLI:-$root/target/release/mallocshim}
[[ -x $cli ]] || { echo "trim-qps: $cli not found (cargo build --release -p mallocshim-cli)" >&2; exit 2; }

exec 9>"${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}"
flock -w 1800 9 || { echo "trim-qps: could not take the lock" >&2; exit 2; }

# shellcheck source=scripts/mariadb.sh
source "$here/mariadb.sh"

mdb_clean_env base_env

mdb_create || exit 2
mdb_start "${base_env[@]}" || exit 2
mdb_sysbench_prepare || exit 2
mdb_stop || exit 2

ok=1
n=${#configs[@]}
for ((r = 0; r < rounds; r++)); do
    for ((i = 0; i < n; i++)); do
        c=${configs[$(((i + r) % n))]}
        IFS=: read -r name ms minb <<<"$c"
        dumpdir=$MDB_DIR/dumps-$r-$name
        mkdir -p "$dumpdir"
        prefix=("${base_env[@]}" LD_PRELOAD="$so" MALLOCSHIM_BACKEND="$QPS_BACKEND"
            MALLOCSHIM_TRIM_INTERVAL_MS="$ms" MALLOCSHIM_DUMP_AT_EXIT=1 MALLOCSHIM_DUMP_DIR="$dumpdir"
            MALLOCSHIM_DUMP_FORMATS=json)
        [[ -n $minb ]] && prefix+=(MALLOCSHIM_TRIM_MIN_BYTES="$minb")
        if ! mdb_start "${prefix[@]}"; then
            echo "run round=$r config=$name qps=0 errors=1 mariadbd_exit=start-failed"
            ok=0
            continue
        fi
        pid=$MDB_PID
        mdb_sysbench_run oltp_read_only 3 "$threads" >/dev/null 2>&1
        mdb_sysbench_run oltp_read_only "$secs" "$threads"
        sb=$SB_EXIT qps=$SB_QPS errors=$SB_ERRORS
        mdb_stop
        # The newest JSON dump of this pid, its trim figures on one line.
        trim=$("$cli" report --format kv --dir "$dumpdir" --pid "$pid" 2>/dev/null |
            grep -E '^trim_(runs|skipped|p50_us|max_us)=' | paste -sd' ')
        echo "run round=$r config=$name qps=$qps errors=$errors ${trim:-trim_runs=n/a} mariadbd_exit=$MDB_EXIT"
        [[ $sb == 0 && $errors == 0 && $MDB_EXIT == 0 && -n $trim ]] || ok=0
    done
done
echo "ok=$ok"
((ok)) || exit 1
