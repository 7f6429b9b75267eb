#!/usr/bin/env bash
# scripts/scale-device.sh: the scaling bench (benches/scale.rs, issue 36 item 1) at 1-16 threads,
# every backend, on the 16-core device machine, in one device call of at most ~8 minutes.
#
#   bash scripts/scale-device.sh prepare     # here: build, pack .device/ (the bundle + the bench)
#   bash scripts/scale-device.sh run         # there: the device tool's `run`, carry [".device"]
#
# prepare builds the release workspace and the bench, packs the Debian userland with
# ../shared/device/make-bundle.sh (the allocators, libmallocshim.so), and puts the bench's executable
# and benches/scale.c's program, debug info stripped, in .device/scale/ (make-bundle.sh is looked
# for in $SHARED/device, ../shared/device, ../../shared/device, /work/shared/device); it adds /.device/ to
# .git/info/exclude. run (as root on the device) unpacks the userland (run.sh), copies the two
# programs into it and runs the bench in the chroot, first the `small` mix, then `all`, each
# under its own time limit so that one that runs late still leaves the other's result; it
# writes to $OUT (at most 8 files come back): scale-small.{json,md}, scale-all.{json,md},
# machine.txt and log.txt. Paste the two .md files into docs/results/scale.md.
#
# Environment (run): THREADS (default 1,2,4,8,16), BACKENDS (default every backend), ROUNDS
# (default 5), TARGET_MS (default 150: glibc direct at T=1; a run at 16 threads takes longer),
# LIMIT_S (default 220: each mix's time limit, so two mixes stay under 8 minutes), MIXES
# (default "small all"), CONFIGS (the bench's --configs, default shim,shim-profile-off; e.g.
# shim,shim-every-call-timed,shim-heap-8k to see the two shared paths at 16 threads).
# Before and after in one run: `BEFORE=path/to/an/earlier/libmallocshim.so scale-device.sh prepare`
# packs that build as .device/scale/before.so, and run then passes it to the bench (--before), for
# CONFIGS naming before, before-every-call-timed and before-heap-8k.
# Estimate: 12 runs per T and round per mix (4 backends x 3 configurations); `run` here (2 CPUs,
# THREADS=1,2, the defaults otherwise) took 98 s for both mixes, ~0.2 s a run; every thread runs
# the same pairs, so 5 T take ~2.5x that where threads scale: ~125 s per mix, within LIMIT_S.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
prepare)
    nice -n 5 cargo build --release --workspace
    exe=$(nice -n 5 cargo bench --bench scale --no-run 2>&1 | sed -n 's/.*Executable benches\/scale.rs (\(.*\))/\1/p')
    [ -x "$exe" ] || { echo "scale-device.sh: cannot find the bench's executable" >&2; exit 1; }
    bundle=
    for d in ${SHARED:-} ../shared ../../shared /work/shared; do
        [ -f "$d/device/make-bundle.sh" ] && { bundle=$d/device/make-bundle.sh; break; }
    done
    [ -n "$bundle" ] || { echo "scale-device.sh: no shared/device/make-bundle.sh (set SHARED=the shared folder)" >&2; exit 1; }
    bash "$bundle" .device
    mkdir -p .device/scale
    strip --strip-debug -o .device/scale/scale-bench "$exe"
    gcc -O2 -Wall -pthread -o .device/scale/scale benches/scale.c
    rm -f .device/scale/before.so
    [ -z "${BEFORE:-}" ] || strip --strip-debug -o .device/scale/before.so "$BEFORE"
    ex=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$ex")"
    grep -qx '/.device/' "$ex" 2>/dev/null || echo '/.device/' >>"$ex"
    du -sh .device
    echo "scale-device.sh: ready; on the device: bash scripts/scale-device.sh run (carry .device)"
    ;;
run)
    OUT=${OUT:-/tmp/out}
    R=${R:-/opt/r}
    for f in .device/run.sh .device/userland.tar.gz .device/scale/scale-bench .device/scale/scale; do
        [ -e "$f" ] || { echo "scale-device.sh: $f is missing: run 'scripts/scale-device.sh prepare' here first" >&2; exit 1; }
    done
    export OUT R
    bash .device/run.sh true # unpack the userland and mount /proc, /dev, /sys, /out
    cp .device/scale/scale-bench .device/scale/scale "$R/opt/mallocshim/"
    args="--threads ${THREADS:-1,2,4,8,16} --rounds ${ROUNDS:-5} --target-ms ${TARGET_MS:-150}"
    args="$args --shim /opt/mallocshim/libmallocshim.so --prog /opt/mallocshim/scale"
    if [ -e .device/scale/before.so ]; then
        cp .device/scale/before.so "$R/opt/mallocshim/before.so"
        args="$args --before /opt/mallocshim/before.so"
    fi
    [ -n "${BACKENDS:-}" ] && args="$args --backends $BACKENDS"
    [ -n "${CONFIGS:-}" ] && args="$args --configs $CONFIGS"
    [ -n "${MIXES:-}" ] || MIXES="small all"
    rc=0
    for mix in $MIXES; do
        bash .device/run.sh "timeout ${LIMIT_S:-220} scale-bench $args --mix $mix \
            --json /out/scale-$mix.json --md /out/scale-$mix.md" >>"$OUT/log.txt" 2>&1 || rc=$?
        echo "scale-device.sh: mix $mix exit $rc" >>"$OUT/log.txt"
    done
    tail -n 5 "$OUT/log.txt"
    exit $rc
    ;;
*)
    echo "usage: scripts/scale-device.sh prepare|run" >&2
    exit 2
    ;;
esac
