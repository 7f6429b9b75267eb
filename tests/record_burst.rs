//! A burst that fills its ring (issue 36, item 3): a thread of tests/c/record_calls.c makes
//! malloc/free pairs far faster than the drain reads them, recorded with `MALLOCSHIM_RECORD`,
//! while a signal handler's traced `free(NULL)` lands in the middle of its appends and waits.
//! With `MALLOCSHIM_RECORD_WAIT_MS` long enough for a loaded machine nothing is lost and nothing
//! written over, under every backend and setting; with it at 0 the burst drops calls.

mod common;

use common::trace::*;
use common::*;
use mallocshim_format::trace::TraceOp;

/// One `burst` run (tests/c/record_calls.c) recorded with `MALLOCSHIM_RECORD_WAIT_MS=wait`:
/// its trace, and the burst thread's index and signal handler's calls.
fn burst_run(b: &str, env: &[(&str, &str)], wait: &str, pairs: u64, what: &str) -> (Trace, u32, u64) {
    let d = dir(&format!("burst.{b}.{wait}.{}", what.replace(['=', ' ', ','], "_")));
    let file = d.join("t.mst");
    let mut cmd = preloaded(prog(), b);
    cmd.envs(env.iter().copied())
        .env("MALLOCSHIM_RECORD", &file)
        .env("MALLOCSHIM_RECORD_WAIT_MS", wait)
        .args(["burst", &pairs.to_string()]);
    let o = run_ok(cmd, what);
    assert!(shim_lines(&o).is_empty(), "{what}: {}", describe(&o));
    let out = stdout(&o);
    let line = out.lines().find(|l| l.starts_with("tid burst=")).unwrap_or("");
    let (tid, handled) = (kv(line, "burst").unwrap() as u32, kv(line, "handled").unwrap());
    let t = read(&file, what);
    let th = thread_of(&t.1, tid, what);
    (t, th, handled)
}

/// A full ring waits for the drain (`MALLOCSHIM_RECORD_WAIT_MS`, src/hot/tracebuf.rs): a
/// thread's burst of malloc/free pairs fills its ring far faster than the drain reads it, while
/// a signal handler's `free(NULL)` (traced) lands in the middle of appends and waits; with a
/// wait long enough for a loaded machine, no call is lost and none is written over, under every
/// backend and setting. With the wait off the same burst drops calls, as before the wait (so the
/// first part can fail: the burst does outrun the drain).
#[test]
fn full_ring_waits_for_the_drain() {
    const PAIRS: u64 = 200_000;
    for (b, name, env) in matrix() {
        let what = format!("{b}, {name}, burst");
        let ((_, _, events, f), th, handled) = burst_run(b, env, "1000", PAIRS, &what);
        check_ids(&events, &what);
        let mallocs = count(&events, TraceOp::Malloc, th, 64..65);
        assert_eq!(mallocs.len() as u64, PAIRS, "{what}: malloc(64) on the burst thread");
        let frees: Vec<_> = events.iter().filter(|e| e.op == TraceOp::Free && e.thread == th).collect();
        let null = frees.iter().filter(|e| e.old_id == 0).count() as u64;
        assert_eq!(frees.len() as u64 - null, PAIRS, "{what}: frees of blocks on the burst thread");
        assert!(handled > 20, "{what}: {handled} signals landed");
        // A handler's free(NULL) is recorded, or dropped and counted when it landed inside the
        // thread's own append (the ring's busy mark) — but for those made while the shim's own
        // code held the thread's reentrancy guard (a heap-profile sample: never recorded, by
        // design); with profiling off there are none.
        let nested: u64 = f.dropped_per_thread.iter().filter(|d| d.0 == th).map(|d| d.1).sum();
        assert!(f.dropped - nested < 16, "{what}: dropped outside the burst thread's ring: {f:?}");
        let guarded = if name.contains("PROFILE=off") { 0 } else { 12 };
        let seen = null + nested;
        assert!(
            seen <= handled && handled - seen <= guarded,
            "{what}: {null} recorded and {nested} dropped of the handler's {handled} free(NULL); {f:?}"
        );
    }
    let what = "jemalloc, wait off, burst";
    let ((_, _, _, f), _, _) = burst_run("jemalloc", &[], "0", 1_000_000, what);
    assert!(f.dropped > 0, "{what}: nothing dropped, so the test above proves nothing: {f:?}");
}
