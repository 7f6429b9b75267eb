//! Issue 24, recording: a C program with known calls (tests/c/record_calls.c) recorded with
//! `MALLOCSHIM_RECORD` under every backend and setting, its trace decoded with the format
//! crate's reader: exact counts per op, thread, size and alignment, and block ids that hold
//! together (every free and realloc names a block allocated earlier and not freed since, or a
//! pre-window block). Then the hard cases: the size budget, exit and fork mid-window, threads
//! by the thousand, the SIGUSR1 storm, and a cut or corrupt file (a burst that fills its ring:
//! tests/record_burst.rs).
//! On the old shim `MALLOCSHIM_RECORD` is an unknown variable and no trace is written: every
//! test here fails there at its first read.

mod common;

use common::storm;
use common::trace::*;
use common::*;
use mallocshim_format::trace::{self, EndReason, Event, TraceError, TraceOp, PRE_WINDOW};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

fn check_known_calls(t: &Trace, out: &str, what: &str) {
    let (h, threads, events, f) = t;
    assert_eq!(f.ended, EndReason::Exit, "{what}: {f:?}");
    // Nothing dropped from a ring; a few calls of exiting threads after their slot was
    // released (glibc's own thread teardown) have no ring and count in `dropped` only.
    assert!(f.dropped_per_thread.is_empty() && f.dropped < 16, "{what}: {f:?}");
    assert_eq!(f.events as usize, events.len());
    assert!(h.pid > 0 && !h.backend.is_empty(), "{what}: {h:?}");
    check_ids(events, what);
    let tid = |k: &str| kv(out.lines().find(|l| l.starts_with("tid")).unwrap_or(""), k).unwrap() as u32;
    let (main, worker) = (thread_of(threads, tid("main"), what), thread_of(threads, tid("worker"), what));
    assert_ne!(main, worker);
    // 100 malloc(1000+i), each freed on main.
    let m = count(events, TraceOp::Malloc, main, 1000..1100);
    assert_eq!(m.len(), 100, "{what}: malloc(1000..1100) on main");
    let ids: HashSet<u64> = m.iter().map(|e| e.id).collect();
    let freed = events
        .iter()
        .filter(|e| e.op == TraceOp::Free && e.thread == main && ids.contains(&e.old_id))
        .count();
    assert_eq!(freed, 100, "{what}: frees of those blocks on main");
    // 10 calloc(7, 111+i).
    let c: Vec<u64> = count(events, TraceOp::Calloc, main, 777..1000).iter().map(|e| e.size).collect();
    assert_eq!(c, (0..10).map(|i| 7 * (111 + i)).collect::<Vec<_>>(), "{what}: callocs");
    // The realloc chain: 3000 -> 3001..3010, each from the previous block.
    let first = count(events, TraceOp::Malloc, main, 3000..3001);
    assert_eq!(first.len(), 1, "{what}: malloc(3000)");
    let r = count(events, TraceOp::Realloc, main, 3001..3011);
    assert_eq!(r.len(), 10, "{what}: reallocs");
    let mut prev = first[0].id;
    for e in &r {
        assert_eq!(e.old_id, prev, "{what}: realloc chain {e:?}");
        prev = e.id;
    }
    // The aligned family.
    let al: Vec<(u64, u32)> =
        count(events, TraceOp::Memalign, main, 3000..8000).iter().map(|e| (e.size, e.align)).collect();
    let mut want = Vec::new();
    for i in 0..5 {
        want.push((3100 + i, 64));
        want.push((4096, 256));
    }
    want.extend([(5000, 128), (6000, 4096), (7000, 4096)]);
    assert_eq!(al, want, "{what}: aligned allocations");
    // The worker's 50 blocks, freed on main (cross-thread).
    let w = count(events, TraceOp::Malloc, worker, 2000..2050);
    assert_eq!(
        w.iter().map(|e| e.size).collect::<Vec<_>>(),
        (2000..2050).collect::<Vec<_>>(),
        "{what}: worker's mallocs"
    );
    let wids: HashSet<u64> = w.iter().map(|e| e.id).collect();
    let xfree =
        events.iter().filter(|e| e.op == TraceOp::Free && wids.contains(&e.old_id)).collect::<Vec<_>>();
    assert_eq!(xfree.len(), 50, "{what}: cross-thread frees");
    assert!(xfree.iter().all(|e| e.thread == main), "{what}: cross-thread frees on main");
    // Time order, and each free after its allocation.
    assert!(events.windows(2).all(|p| p[0].t_ns <= p[1].t_ns), "{what}: time order");
}

#[test]
fn known_calls_every_backend_and_setting() {
    let p = prog();
    for b in BACKENDS {
        for (name, env) in storm::settings() {
            let what = format!("{b}, {name}");
            let d = dir(&format!("calls.{b}.{}", name.replace(['=', ' '], "_")));
            let file = d.join("t.mst");
            let mut cmd = preloaded(&p, b);
            cmd.envs(env.iter().copied()).env("MALLOCSHIM_RECORD", &file).arg("calls");
            let o = run_ok(cmd, &what);
            assert!(shim_lines(&o).is_empty(), "{what}: {}", describe(&o));
            let t = read(&file, &what);
            assert_eq!(t.0.backend, b, "{what}");
            check_known_calls(&t, &stdout(&o), &what);
        }
    }
}

#[test]
fn budget_ends_the_window_and_says_so() {
    let p = prog();
    for b in BACKENDS {
        let what = format!("{b}, budget 64K");
        let d = dir(&format!("budget.{b}"));
        let file = d.join("t.mst");
        let mut cmd = preloaded(&p, b);
        cmd.env("MALLOCSHIM_RECORD", &file).env("MALLOCSHIM_RECORD_MAX_BYTES", "64K").args(["busy", "1500"]);
        let o = run_ok(cmd, &what);
        let lines = shim_lines(&o);
        assert_eq!(lines.len(), 1, "{what}: {}", describe(&o));
        assert!(lines[0].contains("size budget"), "{what}: {lines:?}");
        let size = std::fs::metadata(&file).unwrap().len();
        assert!(size <= 65536, "{what}: file of {size} bytes over its 64K budget");
        let t = read(&file, &what);
        assert_eq!(t.3.ended, EndReason::MaxBytes, "{what}");
        assert!(t.2.len() > 1000, "{what}: {} events", t.2.len());
        check_ids(&t.2, &what);
    }
}

#[test]
fn seconds_end_the_window() {
    let p = prog();
    let d = dir("seconds");
    let file = d.join("t.mst");
    let mut cmd = preloaded(&p, "glibc");
    cmd.env("MALLOCSHIM_RECORD", &file).env("MALLOCSHIM_RECORD_SECONDS", "1").args(["busy", "2500"]);
    run_ok(cmd, "seconds");
    let t = read(&file, "seconds");
    assert_eq!(t.3.ended, EndReason::Seconds);
    // Closed by the drain after 1 s (later on a loaded machine), well before the program's end.
    let last = t.2.last().unwrap().t_ns;
    assert!(t.3.window_ns >= 1_000_000_000 && last < 2_400_000_000, "last event at {last} ns, {:?}", t.3);
}

#[test]
fn exit_mid_window_closes_the_trace() {
    let p = prog();
    for (b, name, env) in matrix() {
        let what = format!("{b}, {name}, exit");
        let d = dir(&format!("exit.{b}.{}", name.replace(['=', ' '], "_")));
        let file = d.join("t.%p.mst");
        let mut cmd = preloaded(&p, b);
        cmd.envs(env.iter().copied()).env("MALLOCSHIM_RECORD", &file).arg("exit");
        let o = run_ok(cmd, &what);
        let files: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 1, "{what}: {files:?}");
        let t = read(&files[0], &what);
        assert_eq!(t.3.ended, EndReason::Exit, "{what}");
        assert!(t.3.dropped_per_thread.is_empty(), "{what}: {:?} {}", t.3, describe(&o));
        assert!(
            t.2.iter().filter(|e| e.op == TraceOp::Malloc && (100..600).contains(&e.size)).count() > 10_000
        );
        check_ids(&t.2, &what);
    }
}

#[test]
fn fork_mid_window_child_records_nothing() {
    let p = prog();
    for (b, name, env) in matrix() {
        let what = format!("{b}, {name}, fork");
        let d = dir(&format!("fork.{b}.{}", name.replace(['=', ' '], "_")));
        let file = d.join("t.%p.mst");
        let mut cmd = preloaded(&p, b);
        cmd.envs(env.iter().copied()).env("MALLOCSHIM_RECORD", &file).arg("fork");
        let o = run_ok(cmd, &what);
        let files: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 1, "{what}: the child wrote a trace: {files:?}");
        let t = read(&files[0], &what);
        assert_eq!(t.3.ended, EndReason::Exit, "{what}: {}", describe(&o));
        let n = |s| t.2.iter().filter(|e| e.op == TraceOp::Malloc && e.size == s).count();
        assert_eq!((n(6666), n(8888), n(7777)), (100, 0, 100), "{what}");
        check_ids(&t.2, &what);
    }
}

#[test]
fn thousands_of_short_threads() {
    let p = prog();
    for b in BACKENDS {
        let what = format!("{b}, churn");
        let d = dir(&format!("churn.{b}"));
        let file = d.join("t.mst");
        let mut cmd = preloaded(&p, b);
        cmd.env("MALLOCSHIM_RECORD", &file).args(["churn", "3000"]);
        let (o, _) = storm::run_stormed(cmd, &what, false, Duration::from_secs(120));
        assert!(o.status.success(), "{what}: {}", describe(&o));
        let t = read(&file, &what);
        let mallocs: Vec<&Event> = t.2.iter().filter(|e| e.op == TraceOp::Malloc && e.size == 4321).collect();
        assert_eq!(mallocs.len(), 3008, "{what}: {:?}", t.3);
        let threads: HashSet<u32> = mallocs.iter().map(|e| e.thread).collect();
        assert_eq!(threads.len(), 3008, "{what}: one thread index per short thread");
        let ids: HashSet<u64> = mallocs.iter().map(|e| e.id).collect();
        let freed: HashMap<u32, u64> =
            t.2.iter()
                .filter(|e| e.op == TraceOp::Free && ids.contains(&e.old_id))
                .map(|e| (e.thread, e.old_id))
                .collect();
        // A free published over 250 ms late (its thread descheduled between the clock and the
        // ring) after another thread was served its address again is written on that thread
        // (drain's orphans): only as many as the footer counts out of order.
        let elsewhere = 3008 - freed.len() as u64;
        assert!(elsewhere <= t.3.reordered, "{what}: {elsewhere} not freed on their thread: {:?}", t.3);
        check_ids(&t.2, &what);
    }
}

#[test]
fn sigusr1_storm_during_a_recording() {
    let p = prog();
    for (b, name, env) in matrix() {
        let what = format!("{b}, {name}, storm");
        let d = dir(&format!("storm.{b}.{}", name.replace(['=', ' '], "_")));
        let file = d.join("t.mst");
        let mut cmd = preloaded(&p, b);
        cmd.envs(env.iter().copied())
            .env("MALLOCSHIM_RECORD", &file)
            .env("MALLOCSHIM_DUMP_DIR", &d)
            .env("MALLOCSHIM_DUMP_MIN_INTERVAL_MS", "0")
            .args(["busy", "700"]);
        let (o, _) = storm::run_stormed(cmd, &what, true, Duration::from_secs(60));
        assert!(o.status.success(), "{what}: {}", describe(&o));
        let t = read(&file, &what);
        assert_eq!(t.3.ended, EndReason::Exit, "{what}");
        check_ids(&t.2, &what);
    }
}

#[test]
fn cut_or_corrupt_trace_gives_one_typed_error() {
    let p = prog();
    let d = dir("cut");
    let file = d.join("t.mst");
    let mut cmd = preloaded(&p, "glibc");
    cmd.env("MALLOCSHIM_RECORD", &file).args(["busy", "300"]);
    run_ok(cmd, "cut");
    let bytes = std::fs::read(&file).unwrap();
    let full = read(&file, "cut").2.len();
    for cut in [0, 5, 11, 12, 20, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        let r = trace::TraceReader::new(&bytes[..cut]).and_then(|mut r| r.read_all());
        assert!(
            matches!(r, Err(TraceError::Truncated | TraceError::Corrupt { .. })),
            "cut at {cut}: {:?}",
            r.map(|e| e.len())
        );
    }
    for at in [12, 40, bytes.len() / 2, bytes.len() - 2] {
        let mut b = bytes.clone();
        b[at] ^= 0x5a;
        let r = trace::TraceReader::new(&b[..]).and_then(|mut r| r.read_all());
        assert!(
            r.is_err() || r.as_ref().unwrap().len() == full,
            "flip at {at} read a different trace without error"
        );
    }
    let mut b = bytes.clone();
    b[8] = 9;
    assert!(matches!(trace::TraceReader::new(&b[..]), Err(TraceError::Version { found: 9, .. })));
}

#[test]
fn record_command_through_the_control_channel() {
    let p = prog();
    let cli = cli_bin();
    for b in BACKENDS {
        let what = format!("{b}, mallocshim record");
        let d = dir(&format!("cli.{b}"));
        let file = d.join("t.mst");
        let mut cmd = preloaded(&p, b);
        cmd.args(["busy", "4000"]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
        let child = cmd.spawn().unwrap();
        let pid = child.id();
        let t0 = std::time::Instant::now();
        while !storm::catches_usr1(pid as i32) && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(200));
        let o = std::process::Command::new(&cli)
            .args(["record", &pid.to_string(), "--seconds", "1", "--out"])
            .arg(&file)
            .output()
            .unwrap();
        let st = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{what}: {}\n--- child\n{}", describe(&o), describe(&st));
        assert!(stdout(&o).contains(" calls of "), "{what}: {}", describe(&o));
        let t = read(&file, &what);
        assert_eq!(t.0.pid, pid, "{what}");
        assert_eq!(t.3.ended, EndReason::Seconds, "{what}");
        // The busy threads' blocks of before the window: in the header, freed as pre-window.
        assert!(!t.0.preexisting.is_empty(), "{what}: {:?}", t.0);
        assert!(
            t.2.iter().any(|e| e.old_id & PRE_WINDOW != 0 && e.old_size > 0),
            "{what}: no pre-window free"
        );
        // A realloc of a block of before the window carries its usable size (the old code wrote
        // 0: the ring's realloc entry has no room for it; now an entry of its own precedes it).
        let pre_re: Vec<&Event> =
            t.2.iter().filter(|e| e.op == TraceOp::Realloc && e.old_id & PRE_WINDOW != 0).collect();
        assert!(!pre_re.is_empty(), "{what}: no realloc of a pre-window block");
        assert!(
            pre_re.iter().all(|e| e.old_size >= 16),
            "{what}: pre-window realloc without its size: {pre_re:?}"
        );
        assert!(t.2.len() > 10_000, "{what}: {} events", t.2.len());
        check_ids(&t.2, &what);
        assert!(st.status.success(), "{what}: {}", describe(&st));
    }
}
