//! Issue 24 on a real server: a mariadbd under the shim (glibc) runs sysbench oltp_read_write
//! (4 threads, `REC_MDB_RW_SECONDS`, default 30 s) then the FULLTEXT phase (phrase searches,
//! `workloads/fulltext-phrase.lua`, 4 threads, `REC_MDB_FT_SECONDS`, default 10 s, on
//! `REC_MDB_FT_ROWS` documents, default 100,000); the whole workload is recorded through the
//! control channel (`mallocshim record PID --seconds …`). Then `mallocshim replay FILE --json`
//! under all four backends. Asserted (what is robust): the recording holds calls of the
//! workload's threads and ends by its seconds; the trace costs at most 4 bytes per call (the
//! issue's bound, printed); at most 1% of the window's calls dropped (threads wait for the
//! drain when their ring is full: 0-0.12% measured on 2 cores; 6-10% when they did not, 21-26%
//! before issue 36's drain changes, when replay refused the trace); every backend replays every call with zero errors, and its live
//! bytes per class at every second equal the trace's; drops are reported (the footer's count,
//! printed, and what the replay makes of them). Printed, not asserted: the peak-RSS ranking of
//! the replay beside the ranking of the live servers: the same workload on a fresh server per
//! backend under the shim, VmRSS sampled every 100 ms as `mallocshim compare` samples it (the
//! recorded glibc server is glibc's live run). docs/replay.md compares and explains them.
//! `REC_MDB_LIVE=0` skips the three live runs (the replay half only).

mod common;

use mallocshim_mariadb::fulltext::{self, Settings, PHRASE_LUA};
use mallocshim_mariadb::{procfs, Instance, Launch, Options, Server, Sysbench, BACKENDS};
use mallocshim_replay::answer::{Answer, LiveSecond};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One live run: the workload's sysbench reports and the server's RSS.
struct Live {
    backend: &'static str,
    rss_start: u64,
    rss_peak: u64,
    rw_qps: String,
    ft_qps: String,
}

/// Runs the workload (oltp_read_write, then the phrase searches) on `srv`, sampling VmRSS every
/// 100 ms; asserts both sysbench runs are clean.
fn workload(srv: &Server, backend: &'static str, lua: &Path, rw_s: u64, ft_s: u64) -> Live {
    let pid = srv.pid();
    let rss_start = procfs::vm_rss(pid).unwrap_or(0);
    let stop = AtomicBool::new(false);
    let (rw, ft, peak) = std::thread::scope(|sc| {
        let sampler = sc.spawn(|| {
            let mut peak = 0;
            while !stop.load(Ordering::SeqCst) {
                peak = peak.max(procfs::vm_rss(pid).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(100));
            }
            peak
        });
        let rw = srv.sysbench(&Sysbench::new("oltp_read_write", 4).time(rw_s));
        let ft = srv.sysbench(&Sysbench::new(lua.display().to_string(), 4).time(ft_s).db("ft"));
        stop.store(true, Ordering::SeqCst);
        (rw, ft, sampler.join().unwrap())
    });
    let (rw, ft) = (rw.unwrap_or_else(|e| panic!("{e}")), ft.unwrap_or_else(|e| panic!("{e}")));
    // oltp_read_write's ignored errors are InnoDB deadlocks between its own transactions
    // (sysbench retries them): normal under concurrency; a fatal line or a reconnect is not.
    let clean =
        |r: &mallocshim_mariadb::SysbenchReport| r.exit == 0 && r.fatal_lines == 0 && r.reconnects == Some(0);
    assert!(clean(&rw) && ft.ok(), "{backend}: sysbench failed: {rw:?} {ft:?}");
    eprintln!("live {backend}: RSS at start {:.1} MiB, peak {:.1} MiB", mib(rss_start), mib(peak));
    Live { backend, rss_start, rss_peak: peak, rw_qps: rw.qps_text(), ft_qps: ft.qps_text() }
}

/// Live bytes per second of a live curve (all classes).
fn total(c: &[LiveSecond]) -> Vec<u64> {
    c.iter().map(|s| s.classes.iter().map(|k| k.bytes).sum()).collect()
}

fn cli(args: &[&str]) -> Output {
    Command::new(common::cli_bin()).args(args).output().expect("run mallocshim")
}

fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

/// Backend names ordered by the given figure, lowest first.
fn ranking(v: &[(&str, u64)]) -> String {
    let mut v = v.to_vec();
    v.sort_by_key(|x| x.1);
    v.iter().map(|(b, x)| format!("{b} {:.1}", mib(*x))).collect::<Vec<_>>().join(" < ")
}

/// The recorded glibc server: the workload inside a window opened through the channel.
fn record(inst: &Instance, lua: &Path, rw_s: u64, ft_s: u64, trace: &Path) -> (Live, Output) {
    let ctl = inst.dir().join("ctl");
    let launch = Launch::shim(common::shim(), "glibc").var("MALLOCSHIM_CTL_DIR", ctl.display().to_string());
    let srv = inst.start(&launch).unwrap_or_else(|e| panic!("mariadbd under the shim: {e}"));
    let pid = srv.pid().to_string();
    // The window spans the workload and a second of margin on either side.
    let secs = (rw_s + ft_s + 2).to_string();
    let out = trace.display().to_string();
    let rec = std::thread::spawn(move || cli(&["record", &pid, "--seconds", &secs, "--out", &out]));
    std::thread::sleep(Duration::from_secs(1));
    let live = workload(&srv, "glibc", lua, rw_s, ft_s);
    let o = rec.join().unwrap();
    let st = srv.shutdown().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(st.status, 0, "the recorded mariadbd's exit status");
    (live, o)
}

// Long because: one end-to-end scenario (record a live server, run the live servers, replay under every backend, compare) whose steps share the trace and the figures.
#[test]
fn mariadbd_window_replays_under_every_backend() {
    // Built first: `mallocshim record` must start at once when the workload does.
    let (shim, _) = (common::shim(), common::cli_bin());
    let t0 = Instant::now();
    let rw_s = common::env_u64("REC_MDB_RW_SECONDS", 30);
    let ft_s = common::env_u64("REC_MDB_FT_SECONDS", 10);
    let inst = Instance::create(Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let lua = inst.dir().join("fulltext-phrase.lua");
    std::fs::write(&lua, PHRASE_LUA).unwrap();
    let plain = inst.start(&Launch::plain()).unwrap_or_else(|e| panic!("plain mariadbd: {e}"));
    plain.sysbench_prepare().unwrap_or_else(|e| panic!("{e}"));
    let mut s = Settings::new(shim.clone());
    s.rows = common::env_u64("REC_MDB_FT_ROWS", 100_000);
    fulltext::load(&plain, &s).unwrap_or_else(|e| panic!("FULLTEXT load: {e}"));
    plain.shutdown().unwrap_or_else(|e| panic!("{e}"));
    let prep_s = t0.elapsed().as_secs_f64();

    let trace: PathBuf = inst.subdir("trace").unwrap().join("mariadbd.mst");
    let (glibc, o) = record(&inst, &lua, rw_s, ft_s, &trace);
    assert!(o.status.success(), "mallocshim record: {}", common::describe(&o));
    eprint!("{}", common::stdout(&o));
    let mut lives = vec![glibc];
    if common::env_u64("REC_MDB_LIVE", 1) == 1 {
        for b in BACKENDS.iter().filter(|b| **b != "glibc") {
            let srv = inst.start(&Launch::shim(&shim, b)).unwrap_or_else(|e| panic!("{b}: {e}"));
            lives.push(workload(&srv, b, &lua, rw_s, ft_s));
            assert_eq!(srv.shutdown().unwrap_or_else(|e| panic!("{e}")).status, 0, "{b}: exit status");
        }
    }
    let live_s = t0.elapsed().as_secs_f64() - prep_s;

    let (h, th, ev, f) = mallocshim_format::trace::read_file(&trace).expect("read the trace");
    let bytes = std::fs::metadata(&trace).unwrap().len();
    let per_call = bytes as f64 / ev.len().max(1) as f64;
    let ring_full: u64 = f.dropped_per_thread.iter().map(|d| d.1).sum();
    eprintln!(
        "trace: {} calls, {} threads, {bytes} bytes, {per_call:.2} bytes/call, {} dropped ({ring_full} from \
         full rings, the rest from threads without one), {} reordered, {} pre-window classes, ended {}",
        ev.len(),
        th.len(),
        f.dropped,
        f.reordered,
        h.preexisting.len(),
        f.ended.name()
    );
    assert!(ev.len() > 100_000, "only {} calls recorded in {} s of sysbench", ev.len(), rw_s + ft_s);
    assert!(th.len() >= 4, "{} threads recorded", th.len());
    assert_eq!(f.ended.name(), "seconds", "the window ends by its seconds");
    assert!(per_call <= 4.0, "the trace costs {per_call:.2} bytes per call (issue: at most 4)");
    // The FULLTEXT bursts fill rings faster than the drain reads them on 2 cores; their threads
    // wait for it (MALLOCSHIM_RECORD_WAIT_MS), so next to nothing is dropped: 0-0.12% measured
    // (5.6-10.3% when a full ring dropped at once, 21-26% before issue 36's drain changes, when
    // replay refused the trace; docs/record.md, "Bursts").
    let dropped = f.dropped as f64 / (ev.len() as f64 + f.dropped as f64);
    assert!(dropped <= 0.01, "{:.2}% of the window's calls dropped (at most 1%)", dropped * 100.0);

    let t1 = Instant::now();
    let json = inst.dir().join("answer.json");
    let o = cli(&["replay", &trace.display().to_string(), "--json", &json.display().to_string()]);
    eprint!("{}", common::stdout(&o));
    assert!(o.status.success(), "mallocshim replay: {}", common::describe(&o));
    let replay_s = t1.elapsed().as_secs_f64();
    let a: Answer = serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("the answer's JSON");
    assert_eq!(
        a.backends.iter().map(|b| b.engine.backend.as_str()).collect::<Vec<_>>(),
        BACKENDS.to_vec(),
        "every backend replayed"
    );
    // Both rankings first: printed even when an assertion below fails.
    eprintln!("verdict: {}", a.verdict);
    let replay: Vec<(&str, u64)> =
        a.backends.iter().map(|b| (b.engine.backend.as_str(), b.net_peak_rss_bytes)).collect();
    let peak: Vec<(&str, u64)> = lives.iter().map(|l| (l.backend, l.rss_peak)).collect();
    let growth: Vec<(&str, u64)> =
        lives.iter().map(|l| (l.backend, l.rss_peak.saturating_sub(l.rss_start))).collect();
    for l in &lives {
        eprintln!(
            "live {}: RSS at start {:.1} MiB, peak {:.1} MiB; qps oltp_read_write {}, phrase searches {}",
            l.backend,
            mib(l.rss_start),
            mib(l.rss_peak),
            l.rw_qps,
            l.ft_qps
        );
    }
    eprintln!("ranking, replay net peak RSS (MiB): {}", ranking(&replay));
    eprintln!("ranking, live peak RSS (MiB):        {}", ranking(&peak));
    eprintln!("ranking, live peak - start (MiB):    {}", ranking(&growth));
    for b in &a.backends {
        let e = &b.engine;
        eprintln!(
            "replay {}: {} calls in {:.1} s ({:.1}x the {:.1} s window), net peak RSS {:.1} MiB, end {:.1}, \
             trimmed {:.1}, peak/live {:.2}, {:.0} ns CPU/call, errors {:?}, trace dropped {}",
            e.backend,
            e.calls,
            e.wall_s,
            b.speedup,
            e.window_s,
            mib(b.net_peak_rss_bytes),
            mib(b.net_end_rss_bytes),
            mib(b.net_trimmed_rss_bytes),
            b.peak_rss_per_live,
            b.cpu_ns_per_call,
            e.errors,
            e.trace_dropped
        );
        assert_eq!(e.trace_dropped, f.dropped, "{}: the answer reports the trace's drops", e.backend);
        // A dropped call can leave a free without its allocation: counted as inconsistent, so
        // the bound is the footer's count; with nothing dropped, zero.
        assert!(
            e.errors.alloc_failed == 0 && e.errors.wait_timeout == 0 && e.errors.inconsistent <= f.dropped,
            "{}: replay errors {:?} ({} dropped)",
            e.backend,
            e.errors,
            f.dropped
        );
        assert_eq!(e.events, ev.len() as u64, "{}: every event of the trace planned", e.backend);
        if f.dropped == 0 {
            assert_eq!(e.live_curve, a.trace_live_curve, "{}: the live heap per class per second", e.backend);
        } else {
            // Dropped calls (rings full under load) turn frees of blocks allocated in the window
            // into frees of pre-window blocks; the replay allocates those up front (its
            // pre-window heap, `pre_window_bytes`) and counts them live, the trace's curve does
            // not: the replay's total live bytes per second are within the pre-window heap's
            // bytes plus 10% of the trace's (measured: 99.1 MB against 50.2 MB at second 0 with
            // 116,962 calls dropped and a 99 MB pre-window heap).
            let (x, y) = (total(&e.live_curve), total(&a.trace_live_curve));
            assert_eq!(x.len(), y.len(), "{}: seconds of the live curve", e.backend);
            for (i, (x, y)) in x.iter().zip(&y).enumerate() {
                let d = x.abs_diff(*y);
                eprintln!("{}: live bytes at second {i}: replay {x}, trace {y}", e.backend);
                assert!(
                    d <= e.pre_window_bytes + y / 10,
                    "{}: live bytes at second {i}: replay {x}, trace {y}, pre-window heap {}",
                    e.backend,
                    e.pre_window_bytes
                );
            }
        }
    }
    assert_eq!(a.trace_reordered, f.reordered, "the answer reports the footer's reordered calls");
    if f.dropped == 0 {
        assert!(o.status.success(), "mallocshim replay: {}", common::describe(&o));
    }
    eprintln!(
        "runtime: preparation {prep_s:.0} s, live servers {live_s:.0} s, replay {replay_s:.0} s, total {:.0} s",
        t0.elapsed().as_secs_f64()
    );
}
