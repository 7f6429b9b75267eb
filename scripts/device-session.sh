#!/usr/bin/env bash
# scripts/device-session.sh: one device call for issue 36 on the 16-core machine, in three timed
# parts, each under its own limit so that one that runs late still leaves the others' results:
#   1. the scaling bench (scripts/scale-device.sh run; SCALE_* below), before and after when
#      .device/scale/before.so was packed (BEFORE=... scripts/scale-device.sh prepare);
#   2. perf c2c of the bench's program at 16 threads with every call timed, under before.so when
#      packed (else the shim): which cache lines the cores fight over (needs the kernel's
#      memory-load events; when perf cannot, its one-line error is kept);
#   3. `mallocshim compare --direct` on mariadbd (COMPARE_ARGS), paired rounds with intervals.
# Prepare here: `BEFORE=... bash scripts/scale-device.sh prepare`; call the device tool's run with
# carry [".device"] and `bash scripts/device-session.sh` (the environment below in front).
# Writes to $OUT at most 8 files: scale-small.md, scale-small.json, machine.txt, log.txt,
# c2c.txt, report.md, cells.csv, answer.txt.
#
# Environment: SCALE_LIMIT_S (default 150; 0 skips part 1), SCALE_THREADS (1,2,4,8,16),
# SCALE_ROUNDS (3), SCALE_CONFIGS (shim,shim-profile-off,shim-every-call-timed, and before,
# before-every-call-timed when before.so is packed), C2C_S (default 8 seconds of recording; 0 skips),
# COMPARE_LIMIT_S (default 280; 0 skips part 3), COMPARE_ARGS (default: glibc and jemalloc,
# oltp_point_select, 64 connections, 4 s cells after 1 s of warm-up, --rounds auto stopping at
# +-1% or the time limit less 20 s).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
R=${R:-/opt/r}
export OUT R
log() { echo "device-session: $(date +%T) $*" >>"$OUT/log.txt"; }
mkdir -p "$OUT"
before=
[ -e .device/scale/before.so ] && before=1

if [ "${SCALE_LIMIT_S:-150}" != 0 ]; then
    configs=shim,shim-profile-off,shim-every-call-timed
    [ -n "$before" ] && configs=$configs,before,before-every-call-timed
    log "scale: start"
    THREADS=${SCALE_THREADS:-1,2,4,8,16} ROUNDS=${SCALE_ROUNDS:-3} LIMIT_S=${SCALE_LIMIT_S:-150} \
        MIXES=small CONFIGS=${SCALE_CONFIGS:-$configs} bash scripts/scale-device.sh run >/dev/null 2>&1
    log "scale: exit $?"
else
    bash .device/run.sh true
fi

if [ "${C2C_S:-8}" != 0 ]; then
    lib=/opt/mallocshim/libmallocshim.so
    [ -n "$before" ] && lib=/opt/mallocshim/before.so
    cp .device/scale/scale .device/scale/before.so "$R/opt/mallocshim/" 2>/dev/null
    log "c2c: start ($lib)"
    bash .device/run.sh "cd /tmp && timeout $((${C2C_S:-8} + 30)) perf c2c record -o /tmp/c2c.data -- \
        timeout ${C2C_S:-8} env LD_PRELOAD=$lib MALLOCSHIM_SAMPLE=1 MALLOCSHIM_PROF_SAMPLE_BYTES=0 \
        scale small 16 200000000 >/tmp/c2c.log 2>&1; \
        { tail -n 5 /tmp/c2c.log; timeout 60 perf c2c report -i /tmp/c2c.data --stdio -N --full-symbols 2>&1 | head -n 400; } \
        >/out/c2c.txt 2>&1" >>"$OUT/log.txt" 2>&1
    log "c2c: exit $?"
fi

if [ "${COMPARE_LIMIT_S:-280}" != 0 ]; then
    lim=${COMPARE_LIMIT_S:-280}
    args=${COMPARE_ARGS:-"--backends glibc,jemalloc --workloads oltp_point_select --threads 64 --time 4 --warmup 1"}
    log "compare: start ($args)"
    bash .device/run.sh "rm -rf /tmp/cmp; timeout -s INT $lim mallocshim compare $args --direct --rounds auto \
        --target-pct 1 --budget-s $((lim - 20)) --out /tmp/cmp >/tmp/cmp.log 2>&1; echo rc=\$? >>/tmp/cmp.log; \
        cp /tmp/cmp/report.md /tmp/cmp/cells.csv /out/; tail -n 40 /tmp/cmp.log >/out/answer.txt" \
        >>"$OUT/log.txt" 2>&1
    log "compare: exit $?"
fi
tail -n 8 "$OUT/log.txt"
