#!/usr/bin/env python3
"""Interleaved A/B of fork+wait CPU cost (issue 21; docs/results/fork.md).

usage: scripts/fork-ab.py ROUNDS FORKS THREADS MALLOC -- LABEL:VAR=VAL,VAR=VAL ...

Runs tests/c/fork_wait.c (built with gcc into $TMPDIR unless FW names a binary) once per label
per round, the labels interleaved within each round, each with its environment added (e.g.
`new:LD_PRELOAD=/path/libmallocshim.so,MALLOCSHIM_BACKEND=mimalloc`; `alone:` for none).
Prints per label the median CPU µs per fork+wait (process and children, getrusage), the median
over rounds of that round's ratio to the first label, and the median minor faults per fork+wait.
Ratios of one run only: on a 2-core machine they move by a few hundredths between runs.
"""
import os
import statistics
import subprocess
import sys
import tempfile


def fork_wait():
    fw = os.environ.get("FW")
    if fw:
        return fw
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "c", "fork_wait.c")
    out = os.path.join(tempfile.gettempdir(), "mallocshim-fork-ab-fork_wait")
    subprocess.run(["gcc", "-O2", "-pthread", "-o", out, src], check=True)
    return out


def main():
    if len(sys.argv) < 7 or sys.argv[5] != "--":
        sys.exit(__doc__.strip().splitlines()[2])
    rounds, forks, threads, use_malloc = (int(x) for x in sys.argv[1:5])
    labels = []
    for arg in sys.argv[6:]:
        label, _, env = arg.partition(":")
        labels.append((label, dict(kv.split("=", 1) for kv in env.split(",") if kv)))
    prog = fork_wait()
    runs = {label: [] for label, _ in labels}
    for _ in range(rounds):
        for label, extra in labels:
            env = dict(os.environ, **extra)
            args = [prog, str(forks), str(threads), "0", str(use_malloc)]
            out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
            kv = dict(w.split("=", 1) for w in out.split())
            runs[label].append((float(kv["cpu_ns_per_fork"]), float(kv["faults_per_fork"])))
    base = runs[labels[0][0]]
    for label, _ in labels:
        r = runs[label]
        ratio = statistics.median(a[0] / b[0] for a, b in zip(r, base))
        cpu = statistics.median(x[0] for x in r) / 1000
        faults = statistics.median(x[1] for x in r)
        print(f"{label:16s} cpu_us={cpu:7.1f} ratio={ratio:.3f} faults={faults:.1f}")


main()
