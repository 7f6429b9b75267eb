//! `mallocshim replay`, black box: synthetic traces written with the format crate's writer (a
//! phase of threads freeing each other's blocks, a phase of 80 MB transient heaps, pre-window
//! blocks and their frees) replayed by the command under every backend and profiling setting:
//! zero replay errors, the replay's live heap per size class at every second of the window
//! equal to the curve computed here from the events written, RSS at least the live bytes and
//! within reason. A truncated, corrupt or foreign file: one `mallocshim replay:` line, exit 2,
//! no panic. An inconsistent trace (a double free): its errors counted, exit 1, no crash.
//! Long because: the planted trace, the recorded C++ program and the corrupt-file cases share the trace builders and the answer checks.

mod common;

use mallocshim_format::classes::{class_of, class_range, CLASSES};
use mallocshim_format::trace::{
    ClassLive, EndReason, Event, Footer, Header, Thread, TraceOp, TraceWriter, PRE_WINDOW,
};
use mallocshim_replay::answer::{Answer, ClassLive as Live, LiveSecond};
use std::path::{Path, PathBuf};
use std::process::Output;

const MIB: u64 = 1 << 20;

/// The events of a planted workload and what the test expects of them.
struct Planted {
    header: Header,
    threads: u32,
    events: Vec<Event>,
}

/// A small deterministic generator (xorshift), for sizes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

// Long because: one planted trace written event by event, phase by phase, so the expected live curve is read beside it.
/// Phase 1 (0-1.5 s): 8 threads allocate 2,000 blocks each (16 B-64 KiB); phase 2 (1.5-2.5 s):
/// each thread frees the blocks of the next thread (cross-thread frees), keeps 1 in 4; phase 3
/// (2.5-4.5 s): thread 0 builds and frees an 80 MB heap (1 MiB blocks) three times, the others
/// reallocate some of theirs. Pre-window: 300 blocks of 100 B and 20 of 40 KiB; 150 and 10 of
/// them freed in the window.
fn planted() -> Planted {
    let threads = 8u32;
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut ev: Vec<(u64, u32, TraceOp, u64, u64, u64)> = Vec::new(); // t, thread, op, size, new(1-based or 0), old
    let mut next_id = 0u64;
    let mut owned: Vec<Vec<(u64, u64)>> = vec![Vec::new(); threads as usize];
    let per = 2000u64;
    for i in 0..per {
        for th in 0..threads {
            let size = 16u64 << (rng.next() % 13);
            let size = size - rng.next() % (size / 2);
            next_id += 1;
            let t = (i * threads as u64 + th as u64) * 1_500_000_000 / (per * threads as u64);
            ev.push((t, th, if i % 5 == 0 { TraceOp::Calloc } else { TraceOp::Malloc }, size, next_id, 0));
            owned[th as usize].push((next_id, size));
        }
    }
    let mut pre_next = 0u64;
    let mut pre_free = |t: u64, th: u32, size: u64, ev: &mut Vec<_>| {
        pre_next += 1;
        ev.push((t, th, TraceOp::Free, size, 0, PRE_WINDOW | pre_next));
    };
    for (k, th) in (0..threads).enumerate() {
        let victim = ((th + 1) % threads) as usize;
        let blocks: Vec<(u64, u64)> = owned[victim].clone();
        let n = blocks.len() as u64;
        for (j, &(id, _)) in blocks.iter().enumerate() {
            if j % 4 == 0 {
                continue;
            }
            let t =
                1_500_000_000 + (j as u64 * threads as u64 + k as u64) * 1_000_000_000 / (n * threads as u64);
            ev.push((t, th, TraceOp::Free, 0, 0, id));
        }
        owned[victim].retain(|&(id, _)| blocks.iter().position(|b| b.0 == id).unwrap() % 4 == 0);
    }
    for i in 0..160 {
        let t = 1_500_000_000 + i * 6_000_000;
        pre_free(t, (i % threads as u64) as u32, if i < 150 { 112 } else { 40 * 1024 + 16 }, &mut ev);
    }
    for round in 0..3u64 {
        let base = 2_500_000_000 + round * 650_000_000;
        let mut heap = Vec::new();
        for j in 0..80u64 {
            next_id += 1;
            ev.push((base + j * 3_000_000, 0, TraceOp::Malloc, MIB, next_id, 0));
            heap.push(next_id);
        }
        for (j, id) in heap.into_iter().enumerate() {
            ev.push((base + 300_000_000 + j as u64 * 1_000_000, 0, TraceOp::Free, 0, 0, id));
        }
    }
    for th in 1..threads {
        let keep: Vec<(u64, u64)> = owned[th as usize].iter().take(100).copied().collect();
        for (j, (id, size)) in keep.into_iter().enumerate() {
            next_id += 1;
            let t = 2_600_000_000 + (j as u64 * 8 + th as u64) * 1_000_000;
            ev.push((t, th, TraceOp::Realloc, size * 2 + 1, next_id, id));
        }
    }
    // Time order (stable: same-time events keep their order), then ids dense in that order.
    ev.sort_by_key(|e| e.0);
    let mut renum = std::collections::HashMap::new();
    let mut n = 0u64;
    let events = ev
        .into_iter()
        .map(|(t_ns, thread, op, size, new, old)| {
            let id = if new != 0 {
                n += 1;
                renum.insert(new, n);
                n
            } else {
                0
            };
            let old_size = if old & PRE_WINDOW != 0 { size } else { 0 };
            let old_id = if old & PRE_WINDOW != 0 || old == 0 { old } else { renum[&old] };
            let size = if op == TraceOp::Free { 0 } else { size };
            Event { t_ns, thread, op, size, align: 0, id, old_id, old_size }
        })
        .collect();
    let header = Header {
        backend: "glibc".into(),
        tick_ns: 1,
        preexisting: vec![
            ClassLive { class: class_of(100) as u8, count: 300, bytes: 300 * 100 },
            ClassLive { class: class_of(40 * 1024) as u8, count: 20, bytes: 20 * 40 * 1024 },
        ],
        ..Header::default()
    };
    Planted { header, threads, events }
}

fn write_trace(p: &Planted, path: &Path) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = TraceWriter::new(f, &p.header).unwrap();
    let mut seen = vec![false; p.threads as usize];
    for e in &p.events {
        if !seen[e.thread as usize] {
            seen[e.thread as usize] = true;
            w.thread(&Thread { index: e.thread, tid: 1000 + e.thread, name: format!("t{}", e.thread) })
                .unwrap();
        }
        w.write(e).unwrap();
    }
    let window_ns = p.events.last().map_or(0, |e| e.t_ns);
    w.finish(&Footer { ended: EndReason::Seconds, window_ns, ..Footer::default() }).unwrap();
}

/// The live heap per second, computed here from the events (independently of the replayer):
/// a pre-window free takes one block of the header's class of its usable size, of the class's
/// mean size.
fn expected_curve(p: &Planted) -> Vec<LiveSecond> {
    let mut sizes = std::collections::HashMap::new();
    let mut live = [(0i64, 0i64); CLASSES];
    let mean =
        |c: usize| p.header.preexisting.iter().find(|x| x.class as usize == c).map(|x| x.bytes / x.count);
    for x in &p.header.preexisting {
        live[x.class as usize] = (x.count as i64, x.bytes as i64);
    }
    let last = p.events.last().map_or(0, |e| e.t_ns);
    let mut out = Vec::new();
    let mut it = p.events.iter().peekable();
    for s in 0..=last / 1_000_000_000 {
        while let Some(e) = it.next_if(|e| e.t_ns < (s + 1) * 1_000_000_000) {
            if e.old_id != 0 {
                let sz = if e.old_id & PRE_WINDOW != 0 {
                    mean(class_of(e.old_size as usize)).unwrap()
                } else {
                    sizes[&e.old_id]
                };
                live[class_of(sz as usize)].0 -= 1;
                live[class_of(sz as usize)].1 -= sz as i64;
            }
            if e.id != 0 {
                sizes.insert(e.id, e.size);
                live[class_of(e.size as usize)].0 += 1;
                live[class_of(e.size as usize)].1 += e.size as i64;
            }
        }
        let classes = (0..CLASSES)
            .filter(|&c| live[c] != (0, 0))
            .map(|c| {
                let (min_bytes, max_bytes) = class_range(c);
                Live { min_bytes, max_bytes, blocks: live[c].0 as u64, bytes: live[c].1 as u64 }
            })
            .collect();
        out.push(LiveSecond { second: s, classes });
    }
    out
}

fn dir(name: &str) -> PathBuf {
    let d = common::work_dir().join(format!("replay-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn replay(trace: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = common::plain(common::cli_bin());
    c.env("MALLOCSHIM_LIB", common::shim()).arg("replay").arg(trace).args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn planted_trace_replays_exactly_under_every_backend_and_setting() {
    for b in ["tcmalloc", "mimalloc"] {
        common::require_file(common::direct_lib(b).unwrap());
    }
    let d = dir("planted");
    let p = planted();
    let trace = d.join("planted.trace");
    write_trace(&p, &trace);
    let want = expected_curve(&p);
    let settings: [(&str, &[(&str, &str)]); 4] = [
        ("profiling on", &[]),
        ("MALLOCSHIM_PROFILE=off", &[("MALLOCSHIM_PROFILE", "off")]),
        ("MALLOCSHIM_SAMPLE=1", &[("MALLOCSHIM_SAMPLE", "1")]),
        ("MALLOCSHIM_PROF_SAMPLE_BYTES=1", &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")]),
    ];
    for (i, (name, env)) in settings.iter().enumerate() {
        let json = d.join(format!("answer{i}.json"));
        let plot = d.join(format!("rss{i}.svg"));
        let o = replay(&trace, &["--json", json.to_str().unwrap(), "--plot", plot.to_str().unwrap()], env);
        assert!(o.status.success(), "{name}: {}", common::describe(&o));
        let a: Answer = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(a.trace_live_curve, want, "{name}: the plan's curve against the events'");
        assert_eq!(a.backends.len(), 4, "{name}");
        let last = want.last().unwrap();
        let live_end: u64 = last.classes.iter().map(|c| c.bytes).sum();
        let blocks_end: u64 = last.classes.iter().map(|c| c.blocks).sum();
        for b in &a.backends {
            let e = &b.engine;
            let what = format!("{name}, {}", e.backend);
            assert_eq!(e.errors.total(), 0, "{what}: {:?}", e.errors);
            assert_eq!(e.live_curve, want, "{what}: live heap per class per second");
            assert_eq!((e.live_end_bytes, e.live_end_blocks), (live_end, blocks_end), "{what}");
            assert_eq!(e.calls as usize, p.events.len(), "{what}: every event replayed once");
            assert_eq!(e.threads, p.threads as u64, "{what}");
            assert_eq!(e.pre_window_blocks, 320, "{what}: pre-window blocks from the header");
            // RSS is real: the 80 MB heaps were written (peak at least 80 MiB over the baseline),
            // and not absurd (under 3x the peak live bytes plus 64 MiB).
            assert!(e.peak_live_bytes >= 80 * MIB, "{what}: peak live {}", e.peak_live_bytes);
            // The recorded interleaving (the default order): the replay's own count of live bytes
            // peaks where the trace's does (phase 1's blocks all live before phase 2 frees them).
            assert_eq!((e.order.as_str(), e.epoch_us), ("recorded", 1000), "{what}");
            assert!(
                e.replay_peak_live_bytes.abs_diff(e.peak_live_bytes) <= e.peak_live_bytes / 100,
                "{what}: the replay's peak live {} against the trace's {}",
                e.replay_peak_live_bytes,
                e.peak_live_bytes
            );
            assert!(!e.live_samples.is_empty(), "{what}: the engine's live and RSS samples");
            assert!(b.net_peak_rss_bytes >= 80 * MIB, "{what}: net peak RSS {}", b.net_peak_rss_bytes);
            assert!(
                b.net_peak_rss_bytes < 3 * e.peak_live_bytes + 64 * MIB,
                "{what}: net peak RSS {}",
                b.net_peak_rss_bytes
            );
            assert!(e.trimmed_rss_bytes <= e.end_rss_bytes + 4 * MIB, "{what}: trim raised RSS");
            assert!(e.replayer_bytes > 0 && e.baseline_rss_bytes > e.replayer_bytes / 2, "{what}");
            assert!(!b.rss_samples.is_empty() && b.calls_per_s > 0.0, "{what}");
            if !env.iter().any(|kv| kv.1 == "off") {
                let allocs: u64 = b.latency.iter().filter(|r| r.op != "free").map(|r| r.calls).sum();
                let want = p.events.iter().filter(|e| e.op.allocates()).count() as u64;
                assert!(allocs >= want, "{what}: allocations in the shim's dumps: {allocs}, trace {want}");
            }
        }
        let text = common::stdout(&o);
        assert!(text.contains("verdict: on this window"), "{name}: {text}");
        assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"), "{name}");
    }
}

#[test]
fn recorded_pace_follows_the_timestamps() {
    let d = dir("paced");
    let p = planted();
    let trace = d.join("paced.trace");
    write_trace(&p, &trace);
    let json = d.join("answer.json");
    let o = replay(
        &trace,
        &["--backends", "jemalloc", "--pace", "recorded", "--json", json.to_str().unwrap()],
        &[],
    );
    assert!(o.status.success(), "{}", common::describe(&o));
    let a: Answer = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let e = &a.backends[0].engine;
    assert_eq!(e.errors.total(), 0);
    assert!(e.wall_s >= e.window_s * 0.95, "recorded pace took {} s for a {} s window", e.wall_s, e.window_s);
}

/// One `mallocshim replay:` line on stderr, exit 2, no panic, nothing on stdout.
fn assert_one_error(o: &Output, what: &str, want: &str) {
    let err = common::stderr(o);
    assert_eq!(o.status.code(), Some(2), "{what}: {}", common::describe(o));
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert!(err.starts_with("mallocshim replay: ") && err.contains(want), "{what}: {err}");
    assert!(!err.contains("panicked") && common::stdout(o).is_empty(), "{what}: {}", common::describe(o));
}

#[test]
fn truncated_corrupt_and_foreign_files_give_one_error() {
    let d = dir("bad");
    let p = planted();
    let good = d.join("good.trace");
    write_trace(&p, &good);
    let bytes = std::fs::read(&good).unwrap();
    for (name, data, want) in [
        ("half", bytes[..bytes.len() / 2].to_vec(), "trace"),
        ("header only", bytes[..40.min(bytes.len())].to_vec(), "trace"),
        ("empty", Vec::new(), "trace"),
        ("not a trace", b"{\"format\":\"mallocshim\"}\n".repeat(10), "not a mallocshim trace"),
    ] {
        let f = d.join(format!("{}.trace", name.replace(' ', "-")));
        std::fs::write(&f, &data).unwrap();
        assert_one_error(&replay(&f, &[], &[]), name, want);
    }
    for k in [20usize, bytes.len() / 3, bytes.len() - 10] {
        let mut data = bytes.clone();
        data[k] ^= 0x5a;
        let f = d.join(format!("flip{k}.trace"));
        std::fs::write(&f, &data).unwrap();
        assert_one_error(&replay(&f, &["--backends", "glibc"], &[]), &format!("byte {k} flipped"), "trace");
    }
    assert_one_error(&replay(&d.join("missing.trace"), &[], &[]), "missing", "missing.trace");
}

#[test]
fn inconsistent_trace_counts_errors_without_crashing() {
    let d = dir("inconsistent");
    let header = Header { backend: "glibc".into(), tick_ns: 1, ..Header::default() };
    let ev = |t_ns, op, size, id, old_id| Event {
        t_ns,
        thread: ((t_ns + 1) % 2) as u32,
        op,
        size,
        align: 0,
        id,
        old_id,
        old_size: 0,
    };
    let events = [
        ev(1, TraceOp::Malloc, 100, 1, 0),
        ev(2, TraceOp::Free, 0, 0, 1),
        ev(3, TraceOp::Free, 0, 0, 1), // a double free: the trace's own inconsistency
        ev(4, TraceOp::Malloc, 200, 2, 0),
    ];
    let p = Planted { header, threads: 2, events: events.to_vec() };
    let trace = d.join("double-free.trace");
    write_trace(&p, &trace);
    let json = d.join("answer.json");
    let o = replay(&trace, &["--json", json.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", common::describe(&o));
    assert!(common::stderr(&o).contains("replay errors"), "{}", common::describe(&o));
    let a: Answer = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for b in &a.backends {
        assert_eq!(b.engine.errors.inconsistent, 1, "{}", b.engine.backend);
        assert_eq!((b.engine.live_end_bytes, b.engine.calls), (200, 3), "{}", b.engine.backend);
    }
}

/// mimalloc decommits freed memory after delays (10-500 ms in 2.0) run when a thread next calls
/// it, so its peak depends on when its threads call relative to those timers: over 5 runs the
/// planted program's own net peak was 432-498 MiB, and its replays 461-502 MiB in recorded pace
/// (492-530 fast). With the delays at 0, original and replay both peak at 432 MiB: the RSS
/// comparison runs mimalloc so, to judge the replay rather than the timers (docs/replay.md).
const MIMALLOC_NO_DELAYS: [(&str, &str); 3] = [
    ("MIMALLOC_DECOMMIT_DELAY", "0"),
    ("MIMALLOC_SEGMENT_DECOMMIT_DELAY", "0"),
    ("MIMALLOC_RESET_DELAY", "0"),
];

fn delays(backend: &str) -> &'static [(&'static str, &'static str)] {
    if backend == "mimalloc" {
        &MIMALLOC_NO_DELAYS
    } else {
        &[]
    }
}

/// Runs tests/c/replay_planted.cc under `backend` (recorded into `trace` when given) and
/// returns its line's figures: (baseline, peak, end RSS, kept bytes).
fn planted_program(backend: &str, trace: Option<&Path>) -> (u64, u64, u64, u64) {
    let prog = common::cc("replay_planted.cc", "replay_planted", &["-O1"]);
    let mut c = common::preloaded(&prog, backend);
    c.envs(delays(backend).iter().copied());
    if let Some(t) = trace {
        c.env("MALLOCSHIM_RECORD", t);
    }
    let o = common::run_ok(c, &format!("replay_planted under {backend}"));
    let out = common::stdout(&o);
    let line = out.lines().find(|l| l.starts_with("baseline_rss=")).unwrap_or_else(|| panic!("{out}"));
    let k = |key| common::kv(line, key).unwrap_or_else(|| panic!("{key} in {line}"));
    (k("baseline_rss"), k("peak_rss"), k("end_rss"), k("kept_bytes"))
}

// Long because: one scenario per backend (record, replay, compare curve and RSS) whose steps share the recorded run's figures.
#[test]
fn recorded_program_replays_its_live_heap_and_rss_under_every_backend() {
    let d = dir("recorded");
    let mut devs = Vec::new();
    for b in common::BACKENDS {
        let trace = d.join(format!("{b}.trace"));
        // A trace without drops, if three tries give one: the recorder drops calls when its
        // rings fill while the shim's thread is descheduled (23,376 in one run of the whole
        // suite), and a dropped allocation whose free was recorded becomes a pre-window block
        // the replay allocates up front, which moves both the curve and the RSS.
        let mut kept = 0;
        for _ in 0..3 {
            kept = planted_program(b, Some(&trace)).3;
            let (_, _, _, f) = mallocshim_format::trace::read_file(&trace).expect("read the trace");
            if f.dropped == 0 {
                break;
            }
        }
        // Live at the end: the kept blocks, the program's two 1.3 MB tables and the C++ runtime's.
        // The original run's figures: the same program without recording (the recorder's own
        // buffers are not the allocator's).
        let (base, peak, _, _) = planted_program(b, None);
        let orig = peak - base;
        let json = d.join(format!("{b}.json"));
        // Recorded pace and order (the defaults' order): phases apart in the program stay apart
        // in the replay, and its 250 ms pauses stay pauses (mimalloc purges freed pages after a
        // delay: in fast pace its three 80 MB heaps may follow each other before the purge: -8%
        // to +23% off the original's peak over 6 runs).
        let args = ["--backends", b, "--pace", "recorded", "--json", json.to_str().unwrap()];
        let o = replay(&trace, &args, delays(b));
        assert!(o.status.success(), "{b}: {}", common::describe(&o));
        let a: Answer = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let r = &a.backends[0];
        let e = &r.engine;
        assert_eq!(a.recorded_backend, b);
        // Calls the recorder dropped (the footer's count: libraries' TSD destructors after a
        // thread's slot was released) are not in the trace; the replay reproduces the trace.
        assert_eq!(e.errors.total(), 0, "{b}: {:?} (recorder dropped {})", e.errors, e.trace_dropped);
        if e.trace_dropped == 0 {
            assert_eq!(e.live_curve, a.trace_live_curve, "{b}: live heap per class at every second");
        } else {
            // Calls the recorder dropped (its rings full under load) turn some frees into frees
            // of pre-window blocks, which the replay serves from its pre-window heap: the curve
            // is then only close (4.8% more in one class in the final run of session 11).
            let total = |c: &[mallocshim_replay::answer::LiveSecond]| -> Vec<u64> {
                c.iter().map(|s| s.classes.iter().map(|k| k.bytes).sum()).collect()
            };
            // The bound is tests/record_mariadb.rs's: the pre-window heap's bytes (which the
            // replay counts live and the trace's curve does not) plus 10% (measured: 72.7 MB
            // against 36.6 MB at second 0 with 23,376 calls dropped).
            let (x, y) = (total(&e.live_curve), total(&a.trace_live_curve));
            assert_eq!(x.len(), y.len(), "{b}: seconds of the live curve");
            for (i, (x, y)) in x.iter().zip(&y).enumerate() {
                assert!(
                    x.abs_diff(*y) <= e.pre_window_bytes + y / 10,
                    "{b}: live bytes at second {i}: replay {x}, trace {y}, pre-window heap {} ({} dropped)",
                    e.pre_window_bytes,
                    e.trace_dropped
                );
            }
        }
        // The replay's own count: the live bytes peaked as high as in the trace (in each thread's
        // own order only, `--order threads`, they peaked up to 28% lower under jemalloc): not
        // more than 1% lower. Higher is the interleaving inside one 1 ms epoch, which recorded
        // order leaves free (threads' allocations of an epoch may run before another's frees):
        // measured up to +1.5% (329.2 MB against 324.2 MB, glibc, session 13's whole-suite run on
        // a fresh clone); bounded at +5%.
        // A trace with drops (three tries all dropped, under load) has a lower peak of its own and
        // a pre-window heap the replay holds besides: the curve's bound then (seen: 319.5 MB
        // against 284.6 MB in a whole-suite run beside the main job).
        let (got, want) = (e.replay_peak_live_bytes, e.peak_live_bytes);
        let slack = if e.trace_dropped == 0 { 0 } else { e.pre_window_bytes + want / 10 };
        assert!(
            got + want / 100 + slack >= want && got <= want + want / 20 + slack,
            "{b}: the replay's peak live {got} against the trace's {want} (at most 1% lower, 5% higher; \
             {} calls dropped, pre-window heap {})",
            e.trace_dropped,
            e.pre_window_bytes
        );
        // Live at the end: the kept blocks plus at most 4 MiB (the tables and the C++ runtime's).
        // A trace with drops (rings full under load) may miss a kept block's allocation (then
        // fewer live bytes) or hold a pre-window heap: the curve's bound applies instead.
        let slack = if e.trace_dropped == 0 { 0 } else { e.pre_window_bytes + kept / 10 };
        assert!(
            e.live_end_bytes + slack >= kept && e.live_end_bytes <= kept + 4 * MIB + slack,
            "{b}: live {} kept {kept} ({} calls dropped, pre-window heap {})",
            e.live_end_bytes,
            e.trace_dropped,
            e.pre_window_bytes
        );
        let mut dev = (r.net_peak_rss_bytes as f64 - orig as f64).abs() / orig as f64;
        let (mut orig, mut replayed) = (orig, r.net_peak_rss_bytes);
        if dev > 0.15 {
            // Both sides are noisy (jemalloc's original alone peaked at 380-422 MiB between runs,
            // its replay at 416-433 with every thread started at once, 383-410 with each started
            // when due): past the bound, two more pairs, judged by the median.
            let mut runs = vec![(dev, orig, replayed)];
            for _ in 0..2 {
                let (base, peak, _, _) = planted_program(b, None);
                let o = replay(&trace, &args, delays(b));
                assert!(o.status.success(), "{b}: {}", common::describe(&o));
                let a: Answer = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
                let (orig, got) = (peak - base, a.backends[0].net_peak_rss_bytes);
                eprintln!("{b}: again: original net peak RSS {} MiB, replay {} MiB", orig / MIB, got / MIB);
                runs.push(((got as f64 - orig as f64).abs() / orig as f64, orig, got));
            }
            runs.sort_by(|x, y| x.0.total_cmp(&y.0));
            (dev, orig, replayed) = runs[1];
        }
        let r_net = replayed;
        eprintln!(
            "{b}: original net peak RSS {} MiB, replay {} MiB ({:+.1}%)",
            orig / MIB,
            r_net / MIB,
            100.0 * (r_net as f64 / orig as f64 - 1.0)
        );
        devs.push((b, orig, r_net, dev));
    }
    // Every backend replayed before any RSS bound is judged, so one run shows them all. The
    // issue's goal: the allocator's resident bytes (net peak RSS: VmHWM minus RSS before the
    // first call, on both sides) within 15% of the original run (a backend past it in the first
    // pair is judged by the median of three pairs). Medians of 3 runs, recorded
    // pace and order (docs/replay.md), with each replay thread started when due: glibc -0.2%,
    // jemalloc -1.9% (-9.2 to +3.3, median of 6 runs; its original itself peaks at 396, 409 or 422
    // MiB), tcmalloc -0.6%, mimalloc 0.0%. With every thread started before the start, jemalloc's
    // threads were bound to arenas the recorded ones had not shared: +3% to +16%. Each thread in
    // its own order only (`--order threads`, session 11's engine) it was -27% to +13%.
    for (b, orig, replayed, dev) in devs {
        assert!(
            dev <= 0.15,
            "{b}: net peak RSS original {orig}, replay {replayed} ({:.0}% off, bound 15%)",
            dev * 100.0
        );
    }
}
