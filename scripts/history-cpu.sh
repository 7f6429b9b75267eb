#!/bin/sh
# CPU time of the shim's own thread (comm "mallocshim") in an idle process holding GIB GiB of
# heap (tests/c/idle_heap.c), over S seconds, under each backend: ns of CPU per second from
# /proc/PID/task/TID/schedstat (its first field, ns on CPU), and as % of one core.
# Usage: scripts/history-cpu.sh GIB [S] [BACKEND...]   (extra MALLOCSHIM_* from the environment)
# docs/history.md gives the figures. Needs gcc and target/release/libmallocshim.so.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
gib=${1:-1}; secs=${2:-30}; shift 2 2>/dev/null || shift $#
backends=${*:-glibc jemalloc tcmalloc mimalloc}
prog=${TMPDIR:-/tmp}/mallocshim-idle-heap.$$
gcc -O1 -pthread -o "$prog" "$root/tests/c/idle_heap.c"
for b in $backends; do
    fifo=$prog.in; rm -f "$fifo"; mkfifo "$fifo"
    out=$prog.out
    LD_PRELOAD=$root/target/release/libmallocshim.so MALLOCSHIM_BACKEND=$b "$prog" "$gib" <"$fifo" >"$out" &
    pid=$!
    exec 3>"$fifo"
    while ! grep -q ready "$out" 2>/dev/null; do sleep 0.2; done
    sleep 2
    tid=$(grep -l '^mallocshim$' /proc/$pid/task/*/comm | head -1 | cut -d/ -f5)
    a=$(cut -d' ' -f1 /proc/$pid/task/$tid/schedstat)
    sleep "$secs"
    z=$(cut -d' ' -f1 /proc/$pid/task/$tid/schedstat)
    rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
    exec 3>&-
    wait $pid || true
    awk -v b="$b" -v g="$gib" -v s="$secs" -v a="$a" -v z="$z" -v r="$rss" 'BEGIN {
        ns = (z - a) / s; printf "%-9s heap %5s GiB rss %6.0f MiB: %9.0f ns/s = %.4f%% of one core\n", b, g, r / 1024, ns, ns / 1e7 }'
    rm -f "$fifo" "$out"
done
rm -f "$prog"
