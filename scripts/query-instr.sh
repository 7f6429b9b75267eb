#!/usr/bin/env bash
# scripts/query-instr.sh: instructions per query executed by mariadbd's query threads, counted by
# valgrind's callgrind, with the shim against preloading the same allocator directly
# (benches/query_instr.rs runs it and renders the table).
#
# mariadbd runs under
#   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='do_command(THD*, bool)'
# so only instructions executed inside do_command (one client command: parse, execute, send the
# result, and every malloc/free made meanwhile, through the shim or the preloaded allocator) are
# counted, per thread; start-up, InnoDB's background threads and the shim's own thread are not.
#
# One throwaway instance (scripts/mariadb.sh), its sysbench dataset prepared once under a plain
# mariadbd. A "config" is BACKEND:MODE, MODE one of
#   direct   glibc: no preload; jemalloc: LD_PRELOAD=libjemalloc.so.2; tcmalloc: LD_PRELOAD=libtcmalloc_minimal.so.4;
#            mimalloc: LD_PRELOAD=libmimalloc.so.2
#   shim     LD_PRELOAD=libmallocshim.so MALLOCSHIM_BACKEND=BACKEND (profiling on, every other default)
#   routing  the same with MALLOCSHIM_PROFILE=off
# Round r starts each config once, in an order rotated by r. For each started server:
# `SELECT @@version_malloc_library` (checked against the config) and /proc/PID/maps; then for
# each WORKLOAD and THREADS: a warm-up sysbench run of N/4 events, `callgrind_control -z`, a run
# of N events, `callgrind_control -d` (dump A), a run of 2N events, `callgrind_control -d`
# (dump B; a dump resets the counters, so B holds the second run only). Then
#   instructions per query = (Ir(B) - Ir(A)) / (queries(B) - queries(A))
# so what each sysbench run does once (connect, prepare its statements, quit) cancels out.
# Finally mariadb-admin shutdown (exit status must be 0, no crash report in the error log).
#
# Environment:
#   QI_BACKENDS   default "glibc jemalloc tcmalloc" (mimalloc too on request)
#   QI_MODES      default "direct shim routing"
#   QI_WORKLOADS  default "oltp_point_select oltp_read_only"
#   QI_THREADS    default "2 8" (sysbench --threads)
#   QI_ROUNDS     default 1
#   QI_PS_EVENTS  N for oltp_point_select (1 query per event), default 8000
#   QI_RO_EVENTS  N for oltp_read_only and any other workload (16 queries per event), default 500
#   QI_OUT        directory for the callgrind files and logs (default target/query-instr)
#   MALLOCSHIM_SO the shim (default target/release/libmallocshim.so)
#   MDB_SB_TABLES / MDB_SB_ROWS as in mariadb.sh (defaults here 4 x 10000); MDB_BUFFER_POOL (64M)
#
# stdout: one line per measured cell
#   cell round=R backend=B mode=M workload=W threads=T n=N q1=Q ir1=I q2=Q ir2=I ir_per_query=X errors=E
# one line per server
#   server round=R backend=B mode=M pid=P malloc_lib=LIB start_s=S mariadbd_exit=X crash=0|1 loaded=yes|no
# and a last line ok=1 (every sysbench run exit 0 with 0 errors, every dump read, the expected
# allocator in every server, every mariadbd exit 0 without crash report) or ok=0 (exit 1).
# Exit 2 when a required program or library is missing. Holds the flock
# ${MDB_LOCK:-/tmp/mallocshim-mariadb.lock} for the whole run.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
root=$(cd -- "$here/.." && pwd)

die2() { echo "query-instr: $*" >&2; exit 2; }

JEMALLOC_LIB=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
TCMALLOC_LIB=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
MIMALLOC_LIB=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2
read -r -a backends <<<"${QI_BACKENDS:-glibc jemalloc tcmalloc}"
read -r -a modes <<<"${QI_MODES:-direct shim routing}"
read -r -a workloads <<<"${QI_WORKLOADS:-oltp_point_select oltp_read_only}"
read -r -a threads_list <<<"${QI_THREADS:-2 8}"
rounds=${QI_ROUNDS:-1}
ps_events=${QI_PS_EVENTS:-8000}
ro_events=${QI_RO_EVENTS:-500}
out=${QI_OUT:-$root/target/query-instr}
so=${MALLOCSHIM_SO:-$root/target/release/libmallocshim.so}

for t in valgrind callgrind_control mariadbd sysbench flock nm; do
    command -v "$t" >/dev/null 2>&1 || die2 "required program $t is not installed (run scripts/install-deps.sh)"
done
for f in "$JEMALLOC_LIB" "$TCMALLOC_LIB"; do
    [[ -f $f ]] || die2 "required library $f is missing (run scripts/install-deps.sh)"
done
[[ -f $so ]] || die2 "shim $so not found (cargo build --release)"
so=$(cd -- "$(dirname -- "$so")" && pwd)/$(basename -- "$so")
for n in "$rounds" "$ps_events" "$ro_events" "${threads_list[@]}"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die2 "bad number $n (QI_ROUNDS, QI_PS_EVENTS, QI_RO_EVENTS, QI_THREADS)"
done
for b in "${backends[@]}"; do [[ $b =~ ^(glibc|jemalloc|tcmalloc|mimalloc)$ ]] || die2 "unknown backend $b"; done
if [[ " ${backends[*]} " == *" mimalloc "* && ! -f $MIMALLOC_LIB ]]; then
    die2 "required library $MIMALLOC_LIB is missing (run scripts/install-deps.sh)"
fi
for m in "${modes[@]}"; do [[ $m =~ ^(direct|shim|routing)$ ]] || die2 "unknown mode $m"; done
syms=$(nm -D "$(command -v mariadbd)" 2>/dev/null)
grep -q ' T _Z10do_commandP3THDb$' <<<"$syms" ||
    die2 "mariadbd does not export do_command(THD*, bool) (_Z10do_commandP3THDb): the toggle would count nothing"

mkdir -p "$out" || die2 "cannot create $out"
out=$(cd -- "$out" && pwd)

exec 9>"${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}"
flock -w 1800 9 || die2 "could not take the lock"

MDB_BUFFER_POOL=${MDB_BUFFER_POOL:-64M}
MDB_START_TIMEOUT=${MDB_START_TIMEOUT:-600}
MDB_STOP_TIMEOUT=${MDB_STOP_TIMEOUT:-600}
# shellcheck source=scripts/mariadb.sh
source "$here/mariadb.sh"

mdb_clean_env base_env

mdb_create || exit 2
# Under valgrind: no io_uring/libaio, and no 8 TiB address-space reservation for the buffer pool
# (10.11's innodb_buffer_pool_size_max default; valgrind cannot map it). Same for every config.
MDB_OPTS+=(--innodb-use-native-aio=0 --innodb-buffer-pool-size-max="$MDB_BUFFER_POOL")
mdb_start "${base_env[@]}" || exit 2
mdb_sysbench_prepare || exit 2
mdb_stop || exit 2

# events WORKLOAD: N for that workload.
events() {
    if [[ $1 == oltp_point_select ]]; then echo "$ps_events"; else echo "$ro_events"; fi
}

# queries FILE: sysbench's total query count ("queries: N (x per sec.)").
queries() {
    sed -nE 's/^ *queries: *([0-9]+) +\(.*/\1/p' "$1" | head -n1
}

# dump PID K: asks callgrind for dump number K and prints its total Ir (empty on failure).
dump() {
    local pid=$1 k=$2 f="$cgdir/cg.$1.$2" i
    callgrind_control -d "$pid" >>"$cgdir/control.log" 2>&1 || return 1
    for ((i = 0; i < 300; i++)); do
        if [[ -s $f ]] && grep -q '^totals:' "$f"; then
            sed -nE 's/^totals: *([0-9]+).*/\1/p' "$f" | head -n1
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# expect_lib BACKEND MODE: an extended regex @@version_malloc_library must match.
expect_lib() {
    case $2:$1 in
    direct:glibc) echo '^system$' ;;
    direct:jemalloc) echo '^jemalloc 5\.' ;;
    direct:tcmalloc) echo '^tcmalloc gperftools' ;;
    direct:mimalloc) echo '^system$' ;; # mimalloc exports neither tc_version nor mallctl
    *:glibc) echo '^jemalloc mallocshim .*\(glibc ' ;;
    *:jemalloc) echo '^jemalloc mallocshim .*\(jemalloc ' ;;
    *:tcmalloc) echo '^jemalloc mallocshim .*\(tcmalloc ' ;;
    *:mimalloc) echo '^jemalloc mallocshim .*\(mimalloc ' ;;
    esac
}

configs=()
for b in "${backends[@]}"; do
    for m in "${modes[@]}"; do configs+=("$b:$m"); done
done

ok=1
n=${#configs[@]}
for ((r = 0; r < rounds; r++)); do
    for ((i = 0; i < n; i++)); do
        IFS=: read -r b m <<<"${configs[$(((i + r) % n))]}"
        cgdir=$out/r$r-$b-$m
        rm -rf -- "$cgdir"
        mkdir -p "$cgdir"
        prefix=("${base_env[@]}")
        lib=
        case $m in
        direct)
            case $b in
            jemalloc) lib=$JEMALLOC_LIB ;;
            tcmalloc) lib=$TCMALLOC_LIB ;;
            mimalloc) lib=$MIMALLOC_LIB ;;
            esac
            [[ -n $lib ]] && prefix+=(LD_PRELOAD="$lib")
            ;;
        shim)
            lib=$so
            prefix+=(LD_PRELOAD="$so" MALLOCSHIM_BACKEND="$b")
            ;;
        routing)
            lib=$so
            prefix+=(LD_PRELOAD="$so" MALLOCSHIM_BACKEND="$b" MALLOCSHIM_PROFILE=off)
            ;;
        esac
        prefix+=(valgrind --tool=callgrind --callgrind-out-file="$cgdir/cg.%p" --collect-atstart=no
            "--toggle-collect=do_command(THD*, bool)")
        t0=$SECONDS
        if ! mdb_start "${prefix[@]}"; then
            echo "server round=$r backend=$b mode=$m pid=0 malloc_lib=n/a start_s=$((SECONDS - t0)) mariadbd_exit=start-failed crash=1 loaded=no"
            ok=0
            continue
        fi
        start_s=$((SECONDS - t0))
        pid=$MDB_PID
        malloc_lib=$(mdb_sql 'SELECT @@version_malloc_library' 2>/dev/null | tail -n1)
        loaded=yes
        if [[ -n $lib ]]; then
            grep -qF -- "$lib" "/proc/$pid/maps" || loaded=no
        else
            grep -qE 'libjemalloc|libtcmalloc|libmimalloc|libmallocshim' "/proc/$pid/maps" && loaded=no
        fi
        if ! [[ $malloc_lib =~ $(expect_lib "$b" "$m") ]]; then
            echo "query-instr: $b/$m: @@version_malloc_library is '$malloc_lib'" >&2
            loaded=no
        fi
        [[ $loaded == yes ]] || ok=0
        k=0
        for w in "${workloads[@]}"; do
            for t in "${threads_list[@]}"; do
                ev=$(events "$w")
                errors=0
                mdb_sysbench_run "$w" 0 "$t" --events=$((ev / 4 > 0 ? ev / 4 : 1)) >/dev/null 2>&1 || errors=$((errors + 1))
                errors=$((errors + SB_ERRORS))
                callgrind_control -z "$pid" >>"$cgdir/control.log" 2>&1 || { echo "query-instr: callgrind_control -z $pid failed" >&2; errors=$((errors + 1)); }
                q=() ir=()
                for mult in 1 2; do
                    mdb_sysbench_run "$w" 0 "$t" --events=$((mult * ev)) || errors=$((errors + 1))
                    errors=$((errors + SB_ERRORS))
                    cp -- "$SB_OUT" "$cgdir/sysbench-$w-$t-$mult.out"
                    q+=("$(queries "$SB_OUT")")
                    k=$((k + 1))
                    ir+=("$(dump "$pid" "$k")") || true
                done
                per=n/a
                if [[ ${q[0]} =~ ^[0-9]+$ && ${q[1]} =~ ^[0-9]+$ && ${ir[0]} =~ ^[0-9]+$ && ${ir[1]} =~ ^[0-9]+$ ]] && ((q[1] > q[0])); then
                    per=$(awk -v a="${ir[0]}" -v b="${ir[1]}" -v x="${q[0]}" -v y="${q[1]}" 'BEGIN { printf "%.1f", (b - a) / (y - x) }')
                else
                    echo "query-instr: $b/$m $w $t: missing figures (queries ${q[*]}, Ir ${ir[*]})" >&2
                    errors=$((errors + 1))
                fi
                echo "cell round=$r backend=$b mode=$m workload=$w threads=$t n=$ev q1=${q[0]:-n/a} ir1=${ir[0]:-n/a} q2=${q[1]:-n/a} ir2=${ir[1]:-n/a} ir_per_query=$per errors=$errors"
                ((errors == 0)) || ok=0
            done
        done
        mdb_stop
        crash=0
        mdb_crash_report "$MDB_ERRLOG" >&2 && crash=1
        cp -- "$MDB_ERRLOG" "$cgdir/mariadbd.err"
        echo "server round=$r backend=$b mode=$m pid=$pid malloc_lib=${malloc_lib// /_} start_s=$start_s mariadbd_exit=$MDB_EXIT crash=$crash loaded=$loaded"
        [[ $MDB_EXIT == 0 && $crash == 0 ]] || ok=0
    done
done
echo "ok=$ok"
((ok)) || exit 1
