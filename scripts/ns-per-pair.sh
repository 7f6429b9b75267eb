#!/usr/bin/env bash
# scripts/ns-per-pair.sh: ns per 64 B malloc/free pair, routing only and everything on, against
# jemalloc and tcmalloc preloaded directly (issue 20; docs/results/speed.md). Runs the routing
# bench's microbench (build it first: `cargo bench --bench routing` leaves it in target/bench/)
# `pair64 1 N` pinned to the last CPU, one process per measurement, in ROUNDS interleaved rounds
# (round r runs the six configurations in an order rotated by r). Prints one CSV line per run
# (round,config,ns_per_pair) and, last, per configuration the median, min and max, with the load
# average before and after. Environment: ROUNDS (default 21), N (default 5000000), SHIM_BEFORE
# (another build of libmallocshim.so, e.g. an older commit's: adds its routing and all-on runs,
# `-before`, to every round).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-21}
N=${N:-5000000}
BENCH=target/bench/microbench
SHIM=target/release/libmallocshim.so
JE=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
TC=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
SHIM_BEFORE=${SHIM_BEFORE:-}
for f in "$BENCH" "$SHIM" "$JE" "$TC" ${SHIM_BEFORE:+"$SHIM_BEFORE"}; do
    [ -e "$f" ] || { echo "ns-per-pair.sh: $f is missing" >&2; exit 1; }
done
CPU=$(( $(nproc) - 1 ))
NAMES=(je-direct tc-direct je-routing tc-routing je-all-on tc-all-on)
[ -n "$SHIM_BEFORE" ] && NAMES+=(je-routing-before tc-routing-before je-all-on-before tc-all-on-before)
run() {
    local env=(env -u MALLOCSHIM_PROFILE -u MALLOCSHIM_PROF_SAMPLE_BYTES -u MALLOCSHIM_BACKEND)
    local SHIM=$SHIM
    case $1 in *-before) SHIM=$SHIM_BEFORE ;; esac
    case ${1%-before} in
    je-direct) env+=(LD_PRELOAD=$JE) ;;
    tc-direct) env+=(LD_PRELOAD=$TC) ;;
    je-routing) env+=(LD_PRELOAD=$SHIM MALLOCSHIM_BACKEND=jemalloc MALLOCSHIM_PROFILE=off MALLOCSHIM_PROF_SAMPLE_BYTES=0) ;;
    tc-routing) env+=(LD_PRELOAD=$SHIM MALLOCSHIM_BACKEND=tcmalloc MALLOCSHIM_PROFILE=off MALLOCSHIM_PROF_SAMPLE_BYTES=0) ;;
    je-all-on) env+=(LD_PRELOAD=$SHIM MALLOCSHIM_BACKEND=jemalloc) ;;
    tc-all-on) env+=(LD_PRELOAD=$SHIM MALLOCSHIM_BACKEND=tcmalloc) ;;
    esac
    "${env[@]}" taskset -c "$CPU" "$BENCH" pair64 1 "$N" | sed -n 's/^ns_per_pair=//p'
}
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(mktemp)
for ((r = 0; r < ROUNDS; r++)); do
    for ((k = 0; k < ${#NAMES[@]}; k++)); do
        c=${NAMES[$(((k + r) % ${#NAMES[@]}))]}
        echo "$r,$c,$(run "$c")" | tee -a "$out"
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for c in "${NAMES[@]}"; do
    grep ",$c," "$out" | cut -d, -f3 | sort -g |
        awk -v c="$c" '{v[NR]=$1} END {printf "%s median %.2f min %.2f max %.2f (n=%d)\n", c, (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2), v[1], v[NR], NR}'
done
rm -f "$out"
