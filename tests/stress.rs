//! Stress under signals (issue 6): the programs `tests/c/stress_*.c` (producer/consumer, thread
//! recycling, realloc chains, calloc zeroing, the aligned family) run with 4 worker threads on this
//! 2-core machine, under every backend, with profiling on and every call timed
//! (`MALLOCSHIM_PROFILE=1`, `MALLOCSHIM_SAMPLE=1`: counts are exact at any period, 1 also times every
//! call, the heaviest recording path), `MALLOCSHIM_DUMP_AT_EXIT=1` (json), `MALLOCSHIM_VERBOSE=1`
//! (the exit summary line, per entry point), and SIGUSR1 sent to the process by this harness every
//! 10 ms from the moment the program prints `ready` (after the shim's constructor: earlier, the
//! signal's default action would kill it) until it has exited (waitid WNOWAIT, so the pid is
//! never reused under the sender). Each program checks the content of every object it frees
//! (patterns derived from the object's id, zeroes after calloc, alignment) and aborts with
//! `CORRUPTION:` on a mismatch.
//!
//! Asserted per program and backend: exit status 0; no `CORRUPTION`; no `mallocshim:` line other
//! than the options line and the summary; at least one dump from the signals plus the exit dump
//! (and besides them at most the `.tmp` file of a signal dump cut short by the exit),
//! every `mallocshim.<pid>.<seq>.json` parses and keeps the dump invariants (totals = sum over
//! threads = sum over size classes, `sampled` = `count` at SAMPLE=1 in the final dump); and the
//! counts are exact. That counts never decrease from one dump to the next is asserted separately,
//! by `dump_counts_never_decrease_under_thread_churn` (a shim bug makes it fail).
//!
//! How "counts equal to the calls made" is made exact. The shim counts every call in the
//! process, the program's and libc's own (stdio's buffer, the DTV glibc callocs in pthread_create
//! and frees at join, the free(NULL)s of glibc's thread-exit clean-up, per-thread set-up inside
//! tcmalloc...). Each program therefore counts its own calls per entry point (and the requested
//! bytes per op) in per-thread counters and prints them, and runs twice: with work scale 0 (the
//! baseline: the same threads, the same stdio, each thread's one malloc/free pair, no work) and
//! with work scale 1. Threads run on stacks the programs mmap themselves, so glibc's stack cache
//! never decides on its own when to allocate or free a DTV: libc's share is then the same in both
//! runs (checked by hand: the baseline's counts are identical run after run). The test asserts,
//! for every entry point of the exit summary and every op (count and bytes) of the final JSON
//! dump, `shim(run) - program(run) == shim(baseline) - program(baseline)`: not a single call more
//! or less, whatever the hundreds of dumps, signals and thread exits in between.
//! The final dump is the last one written (signals go on until the process is gone, so a signal
//! dump may follow the exit dump; nothing the program does comes after either); its counts equal
//! the summary's op by op, except for 2 frees the shim records of its own exit dump's result (a
//! shim bug, which the baseline difference above would hide): `exit_summary_equals_final_dump`
//! checks, with signals off, that nothing is recorded between the exit dump and the summary line
//! written right after it, and fails while that bug is there.
//!
//! Long because: one test binary per feature: its cases share the stressed runner and its checks.

mod common;

use common::*;
use mallocshim_format::Dump;
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The JSON dump's op for each entry point (None: counted per entry point only).
use mallocshim_format::classes::op_of_entry as op_of;
/// Entry points in the order of the shim's summary line and the programs' `calls.` keys.
use mallocshim_format::classes::ENTRY_NAMES as ENTRIES;

/// Frees the shim records after its exit dump, of that dump's result (`Vec<PathBuf>` with one
/// path: json only). A shim bug; see `exit_summary_equals_final_dump`.
const EXIT_DUMP_RESULT_FREES: u64 = 2;

/// Ops whose recorded bytes are the requested sizes (free records the block's usable size).
use mallocshim_format::classes::ALLOC_OPS as BYTE_OPS;
use mallocshim_format::OP_NAMES as OPS;

/// A program that runs longer than this is hung: its threads' stacks are taken with gdb.
const HANG: Duration = Duration::from_secs(180);
const PERIOD: Duration = Duration::from_millis(10);

struct Run {
    what: String,
    pid: u32,
    status: ExitStatus,
    stdout: String,
    stderr: String,
    dir: PathBuf,
    signals: u64,
    secs: f64,
}

fn bin(prog: &str) -> PathBuf {
    cc(&format!("stress_{prog}.c"), &format!("stress_{prog}"), &[])
}

/// Has `pid` (our child) exited? Does not reap it.
fn exited(pid: u32) -> bool {
    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
    unsafe {
        let mut si: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut si,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        rc == 0 && si.si_pid() == pid as i32
    }
}

fn gdb_backtrace(pid: u32) -> String {
    match Command::new("gdb").args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"]).output()
    {
        Ok(o) => format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
        Err(e) => format!("(gdb not available: {e})"),
    }
}

/// Runs `stress_<prog> <work>` under `backend` with SIGUSR1 every 10 ms while it runs.
fn run_stressed(prog: &str, backend: &str, work: u32, more: &[&str], signals_on: bool) -> Run {
    let what = format!("stress_{prog} {work} under {backend}");
    let dir = work_dir().join("stress").join(format!("{prog}-{backend}-{work}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create dump dir");
    let mut c = preloaded(bin(prog), backend);
    c.arg(work.to_string())
        .args(more)
        // One cell of `SETTINGS` on purpose: the counts asserted exact come from the dumps,
        // which profiling off does not record, and SAMPLE=1 is the heaviest recording path.
        .env("MALLOCSHIM_PROFILE", "1")
        .env("MALLOCSHIM_SAMPLE", "1")
        .env("MALLOCSHIM_VERBOSE", "1")
        .env("MALLOCSHIM_DUMP_AT_EXIT", "1")
        .env("MALLOCSHIM_DUMP_FORMATS", "json")
        .env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_DUMP_SIGNAL", if signals_on { "SIGUSR1" } else { "none" })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = c.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let pid = child.id();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(out).lines() {
            let line = line.unwrap_or_default();
            if line == "ready" {
                let _ = ready_tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    // Signals only once the program has printed `ready` (EOF first: it died; reported below).
    let ready = ready_rx.recv_timeout(HANG).is_ok();
    let mut signals = 0u64;
    let mut hung = None;
    if ready {
        let mut next = Instant::now();
        while !exited(pid) {
            if t0.elapsed() > HANG {
                hung = Some(gdb_backtrace(pid));
                let _ = child.kill();
                break;
            }
            if signals_on {
                // SAFETY: plain kill(2) to our own child, which has not been reaped.
                let rc = unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
                assert_eq!(rc, 0, "{what}: kill(SIGUSR1) failed: {}", std::io::Error::last_os_error());
                signals += 1;
            }
            next += PERIOD;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
        }
    } else if !exited(pid) {
        hung = Some(gdb_backtrace(pid));
        let _ = child.kill();
    }
    let status = child.wait().expect("wait");
    let secs = t0.elapsed().as_secs_f64();
    let stdout = out_reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    if let Some(bt) = hung {
        panic!("{what}: HUNG (no exit after {HANG:?}; ready={ready}); killed.\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- gdb\n{bt}");
    }
    Run { what, pid, status, stdout, stderr, dir, signals, secs }
}

/// `prefix<key>=N` lines of a program's stdout.
fn prog_values(stdout: &str, prefix: &str) -> BTreeMap<String, u64> {
    stdout
        .lines()
        .filter_map(|l| {
            let (k, v) = l.strip_prefix(prefix)?.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// The JSON dumps of `pid` in `dir` with their sequence numbers, oldest first.
fn json_dumps(dir: &Path, pid: u32) -> Vec<(u64, PathBuf)> {
    let v = mallocshim_format::dumps_of(dir, pid, "json").expect("read dump dir");
    v.into_iter()
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let seq = mallocshim_format::dump::parse_dump_file_name(name).expect("a dump name").1;
            (seq, p)
        })
        .collect()
}

/// The checked outcome of one run.
struct Checked {
    run: Run,
    /// The program's own calls per entry point and requested bytes per op.
    prog_calls: BTreeMap<String, u64>,
    prog_bytes: BTreeMap<String, u64>,
    /// The shim's exit summary, per entry point.
    summary: BTreeMap<String, u64>,
    /// The final JSON dump: (count, bytes) per op.
    last: BTreeMap<String, (u64, u64)>,
    dumps: usize,
    /// Ops whose count was lower in a dump than in the one before (asserted empty only by
    /// `dump_counts_never_decrease_under_thread_churn`: a known shim bug).
    decreases: Vec<String>,
    /// Temporary dump files left by a dump interrupted by the exit (0 or 1).
    tmp_left: usize,
}

/// Everything asserted of a single run (before the comparison with the baseline).
// Long because: every assertion of one stressed run (exit, signals, counters, dumps, leftovers) in
// order over the same outputs; the returned `Checked` is what the comparison needs.
fn check(run: Run, backend: &str) -> Checked {
    let w = &run.what;
    let all = format!("status {:?}\n--- stdout\n{}\n--- stderr\n{}", run.status, run.stdout, run.stderr);
    assert!(run.status.success(), "{w}: did not exit 0: {all}");
    assert!(!run.stderr.contains("CORRUPTION"), "{w}: corruption: {all}");
    let unexpected: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("mallocshim:"))
        .filter(|l| {
            !(l.starts_with("mallocshim:   MALLOCSHIM_")
                || l.starts_with("mallocshim: mallocshim ")
                || l.starts_with("mallocshim: summary ")
                // the signal storm's requests are merged and rate-limited (said once)
                || l.starts_with("mallocshim: dump requests came while"))
        })
        .collect();
    assert!(unexpected.is_empty(), "{w}: unexpected shim lines {unexpected:?}: {all}");
    let prog_calls = prog_values(&run.stdout, "calls.");
    let prog_bytes = prog_values(&run.stdout, "bytes.");
    for e in ENTRIES {
        assert!(prog_calls.contains_key(e), "{w}: the program did not print calls.{e}: {all}");
    }
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("mallocshim: summary "))
        .unwrap_or_else(|| panic!("{w}: no summary line: {all}"));
    assert_eq!(kv_str(line, "backend"), Some(backend), "{w}: {line}");
    let summary: BTreeMap<String, u64> = ENTRIES
        .iter()
        .map(|e| (e.to_string(), kv(line, e).unwrap_or_else(|| panic!("{w}: no {e}= in {line}"))))
        .collect();

    // Dumps: each complete and parseable, invariants kept, counts never decreasing with seq.
    let files = json_dumps(&run.dir, run.pid);
    // Besides the published dumps, at most the temporary file of the one dump the shim's thread
    // was writing when the process exited (exit_group ends it mid-write; never renamed).
    let (tmps, others): (Vec<String>, Vec<String>) = fs::read_dir(&run.dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| !(n.starts_with("mallocshim.") && n.ends_with(".json")))
        .partition(|n| n.starts_with(&format!(".mallocshim.{}.", run.pid)) && n.ends_with(".json.tmp"));
    assert!(
        others.is_empty() && tmps.len() <= 1,
        "{w}: files other than published JSON dumps in {}: {others:?} {tmps:?}",
        run.dir.display()
    );
    assert!(!files.is_empty(), "{w}: no dump at all in {}", run.dir.display());
    let mut prev: Option<BTreeMap<String, u64>> = None;
    let mut decreases = Vec::new();
    let mut last = BTreeMap::new();
    for (seq, p) in &files {
        // Complete and of the schema: the format crate reads it (a torn file would not parse).
        let d = Dump::read(p).unwrap_or_else(|e| panic!("{w}: {e}"));
        let dw = format!("{w}, dump seq {seq}");
        assert_eq!(d.pid, run.pid, "{dw}");
        assert_eq!(d.backend, backend, "{dw}");
        assert_eq!(d.sample_every, 1, "{dw}");
        let mut counts = BTreeMap::new();
        for op in OPS {
            let (n, b) = (d.count(op), d.bytes(op));
            let by_thread: u64 = d.threads.iter().map(|t| t.ops.get(op).map_or(0, |o| o.count)).sum();
            assert_eq!(by_thread, n, "{dw}: sum over threads of {op} != totals");
            let mine: Vec<_> = d.size_classes.iter().filter(|c| c.op == op).collect();
            let by_class: u64 = mine.iter().map(|c| c.count).sum();
            assert_eq!(by_class, n, "{dw}: sum over size classes of {op} != totals");
            let bytes_by_class: u64 = mine.iter().map(|c| c.bytes).sum();
            assert_eq!(bytes_by_class, b, "{dw}: bytes over size classes of {op} != totals");
            if *seq == files.last().unwrap().0 {
                // At exit nothing is in flight: with SAMPLE=1 every call was timed.
                let sampled: u64 = mine.iter().map(|c| c.sampled).sum();
                assert_eq!(
                    sampled, n,
                    "{dw}: MALLOCSHIM_SAMPLE=1 but {sampled} of {n} {op} calls were timed"
                );
                last.insert(op.to_string(), (n, b));
            }
            counts.insert(op.to_string(), n);
        }
        if let Some(p) = &prev {
            for op in OPS {
                if counts[op] < p[op] {
                    decreases.push(format!(
                        "dump seq {seq}: {op} count {} after {} in the dump before",
                        counts[op], p[op]
                    ));
                }
            }
        }
        prev = Some(counts);
    }
    // The final dump and the exit summary describe the same calls, op by op. One exception, a shim
    // bug that exit_summary_equals_final_dump pins down: after the exit dump the shim records the
    // frees of that dump's own result (a Vec of one path: 2 frees with json only), so the summary
    // has 2 frees more than the exit dump, and a signal dump written after the exit dump (the
    // signals continue until the process is gone) sees them too. The last dump is therefore
    // either the exit dump (2 frees short of the summary) or a later one (equal to the summary).
    for op in OPS {
        let s: u64 = ENTRIES.iter().filter(|e| op_of(e) == Some(op)).map(|e| summary[*e]).sum();
        if op == "free" {
            assert!(
                s == last[op].0 || s == last[op].0 + EXIT_DUMP_RESULT_FREES,
                "{w}: final dump free count {} vs exit summary {s}",
                last[op].0
            );
            last.get_mut(op).unwrap().0 = s;
        } else {
            assert_eq!(last[op].0, s, "{w}: final dump {op} count {} != exit summary {s}", last[op].0);
        }
    }
    let dumps = files.len();
    Checked { run, prog_calls, prog_bytes, summary, last, dumps, decreases, tmp_left: tmps.len() }
}

/// One program under every backend: the baseline (work 0) and the real run (work 1), both under
/// signals; every assertion of `check`, then the exact comparison.
// Long because: baseline and real run per backend, then the exact comparison and the failure table
// over all backends.
fn stress(prog: &str) {
    let mut report = Vec::new();
    for b in BACKENDS {
        let base = check(run_stressed(prog, b, 0, &[], true), b);
        let full = check(run_stressed(prog, b, 1, &[], true), b);
        let w = &full.run.what;
        assert!(
            full.dumps >= 2,
            "{w}: {} signals sent over {:.1} s but only {} dump(s) (the exit dump included)",
            full.run.signals,
            full.run.secs,
            full.dumps
        );
        assert!(
            full.dumps as u64 <= full.run.signals + 1,
            "{w}: {} dumps for {} signals",
            full.dumps,
            full.run.signals
        );
        let total: u64 = full.prog_calls.values().sum();
        assert!(total > 100_000, "{w}: the program made only {total} calls: {}", full.run.stdout);
        for e in ENTRIES {
            let noise_base = base.summary[e] as i64 - base.prog_calls[e] as i64;
            let noise_full = full.summary[e] as i64 - full.prog_calls[e] as i64;
            assert_eq!(
                noise_full, noise_base,
                "{w}: exit summary {e}={} with the program's own {e} calls {}: {noise_full} beyond them, \
                 but the baseline run (same threads and stdio, no work) had {noise_base} ({e}={} vs own {})",
                full.summary[e], full.prog_calls[e], base.summary[e], base.prog_calls[e]
            );
        }
        for op in OPS {
            let own = |c: &Checked| -> u64 {
                ENTRIES.iter().filter(|e| op_of(e) == Some(op)).map(|e| c.prog_calls[*e]).sum()
            };
            let (nb, nf) =
                (base.last[op].0 as i64 - own(&base) as i64, full.last[op].0 as i64 - own(&full) as i64);
            assert_eq!(
                nf,
                nb,
                "{w}: final dump {op} count {} = own {} + {nf}; baseline: {} = own {} + {nb}",
                full.last[op].0,
                own(&full),
                base.last[op].0,
                own(&base)
            );
        }
        for op in BYTE_OPS {
            let (nb, nf) = (
                base.last[op].1 as i64 - base.prog_bytes[op] as i64,
                full.last[op].1 as i64 - full.prog_bytes[op] as i64,
            );
            assert_eq!(
                nf, nb,
                "{w}: final dump {op} bytes {} = own {} + {nf}; baseline: own + {nb}",
                full.last[op].1, full.prog_bytes[op]
            );
        }
        let noise: Vec<String> = ENTRIES
            .iter()
            .filter(|e| base.summary[**e] != base.prog_calls[**e])
            .map(|e| format!("{e}+{}", base.summary[*e] - base.prog_calls[*e]))
            .collect();
        report.push(format!(
            "stress_{prog} {b}: {:.1} s, {} SIGUSR1, {} dumps, {} calls by the program ({}), {} objects / {} bytes verified; \
             libc+shim calls beyond the program's, equal in baseline and run: {}; baseline {:.1} s, {} SIGUSR1, {} dumps; \
             dumps with a count lower than the dump before: {}; interrupted dump left as .tmp: {}",
            full.run.secs,
            full.run.signals,
            full.dumps,
            total,
            ENTRIES.iter().filter(|e| full.prog_calls[**e] > 0).map(|e| format!("{e}={}", full.prog_calls[*e])).collect::<Vec<_>>().join(" "),
            prog_values(&full.run.stdout, "objects_")["verified"],
            prog_values(&full.run.stdout, "bytes_")["verified"],
            noise.join(" "),
            base.run.secs,
            base.run.signals,
            base.dumps,
            full.decreases.len(),
            full.tmp_left
        ));
    }
    for l in report {
        eprintln!("{l}");
    }
}

#[test]
fn stress_prodcons() {
    stress("prodcons");
}

#[test]
fn stress_recycle() {
    stress("recycle");
}

#[test]
fn stress_realloc() {
    stress("realloc");
}

#[test]
fn stress_calloc() {
    stress("calloc");
}

#[test]
fn stress_aligned() {
    stress("aligned");
}

/// The exit summary is written right after the exit dump, by the same exit handler, with every
/// other thread gone: it must count exactly the calls of that dump, frees included. Run without
/// signals (`MALLOCSHIM_DUMP_SIGNAL=none`) so that the only dump is the exit dump.
/// Fails today: the shim drops `dump::write_all()`'s result (`Vec<PathBuf>`) in `at_exit` after
/// the reentrancy guard is released, so its frees (1 + one per format) are recorded as the
/// program's; `mallocshim_dump()` does the same.
#[test]
fn exit_summary_equals_final_dump() {
    for b in BACKENDS {
        let r = run_stressed("prodcons", b, 0, &[], false);
        let files = json_dumps(&r.dir, r.pid);
        assert_eq!(files.len(), 1, "{}: signals off, so exactly the exit dump: {files:?}", r.what);
        let c = check(r, b);
        let s: u64 = ["free", "free_sized", "free_aligned_sized"].iter().map(|e| c.summary[*e]).sum();
        let d = Dump::read(&files[0].1).unwrap_or_else(|e| panic!("{e}")).count("free");
        assert_eq!(
            s,
            d,
            "{}: the exit summary counts {s} frees, the exit dump written just before it {d}: the shim \
             recorded {} free(s) of its own in between (the exit dump's result dropped outside the reentrancy guard)",
            c.run.what,
            s as i64 - d as i64
        );
    }
}

/// Counts in successive dumps never go down (Prometheus reads `mallocshim_calls_total` as a
/// counter: a decrease is a reset). Thread recycling with SIGUSR1 every 10 ms: 20,000 threads exit
/// while dumps are taken, 16 children in flight per worker (more live threads: a longer snapshot).
/// Fails today, intermittently: a dump reads the live threads' slots and then the exited
/// aggregate, so a thread that exits in between (its slot folded into the aggregate by the
/// pthread key destructor) is counted twice in that dump. That shows as a decrease only when the
/// double count exceeds the progress until the next dump: a worker exiting at the end, or a dump
/// right at the start, hence intermittent (failed 3 runs out of 3 with 16 in flight; with 2, in about
/// half the runs).
#[test]
fn dump_counts_never_decrease_under_thread_churn() {
    let mut seen = Vec::new();
    for b in BACKENDS {
        let c = check(run_stressed("recycle", b, 1, &["16"], true), b);
        for d in &c.decreases {
            seen.push(format!("{}: {d}", c.run.what));
        }
    }
    assert!(seen.is_empty(), "dump counts went down between consecutive dumps:\n{}", seen.join("\n"));
}
