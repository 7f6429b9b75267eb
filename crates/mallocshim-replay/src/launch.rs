//! When each replay thread starts and when it is joined (the launcher). A recorded thread's
//! replay thread is started when its first step is due, not with the others before the start:
//! an allocator binds a thread to its arena (jemalloc, tcmalloc's per-thread cache, glibc's
//! arenas) when the thread first allocates, and a Rust thread allocates as it starts (its TLS
//! destructor list). Started together, the threads of phases that followed each other in the
//! recorded process would be bound to different arenas and the later ones could not reuse the
//! earlier ones' freed pages (jemalloc's replay peaked 3-16% above the original's RSS; with one
//! arena the two were equal). In recorded order, a thread whose last step came before this one's
//! first is joined before this one starts, as the recorded process had joined it.
//!
//! Owns the start times and the joins only; the steps are the engine's. The launcher is a thread
//! of its own (the recorded main thread's steps run on the main thread): it allocates through the
//! backend what a spawn takes (std's thread handle and packet, glibc's TLS vector: under 1 KiB a
//! thread), as the recorded process's creating thread did.

use crate::image::PlanView;
use crate::selfproc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{Scope, ScopedJoinHandle};

/// A recorded thread's first and last step times (ns since the window opened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub first_ns: u64,
    pub last_ns: u64,
    pub thread: usize,
}

/// The spans of `threads` (each with at least one step), by first step (then thread index).
pub fn spans(view: &PlanView, threads: impl Iterator<Item = usize>) -> Vec<Span> {
    let mut v: Vec<Span> = threads
        .filter_map(|i| {
            let s = view.thread(i);
            Some(Span { first_ns: s.first()?.t_ns, last_ns: s.last()?.t_ns, thread: i })
        })
        .collect();
    v.sort_by_key(|s| (s.first_ns, s.thread));
    v
}

/// How early before its first step a thread is started in recorded pace (a start takes tens of
/// µs; the thread then sleeps to its first step).
const LEAD_NS: u64 = 1_000_000;
/// The longest sleep between two looks at `stop`.
const NAP_NS: u64 = 50_000_000;

/// How the launcher paces the starts.
#[derive(Clone, Copy, Debug)]
pub struct Pacing {
    /// Start each thread `LEAD_NS` (1 ms) before its first step's recorded time.
    pub recorded: bool,
    /// Join the threads that ended before a thread's first step before starting it.
    pub ordered: bool,
}

/// Starts `run(span)` on a thread of `stack` bytes for each span in turn, paced by `pacing`
/// from `start_ns` (CLOCK_MONOTONIC); returns every thread's result, or the first start error
/// (after which `stop` is set, no thread is started, and the running ones are joined).
pub fn launch<'scope, 'env, T, F>(
    sc: &'scope Scope<'scope, 'env>,
    spans: &[Span],
    pacing: Pacing,
    start_ns: u64,
    stack: usize,
    stop: &AtomicBool,
    run: &'scope F,
) -> Result<Vec<T>, String>
where
    T: Send + Default + 'scope,
    F: Fn(Span) -> T + Sync,
{
    let mut outs = Vec::with_capacity(spans.len());
    let mut running: Vec<(u64, ScopedJoinHandle<'scope, T>)> = Vec::new();
    let mut err = None;
    for &span in spans {
        if pacing.recorded && !nap_until(start_ns + span.first_ns.saturating_sub(LEAD_NS), stop) {
            break;
        }
        // Joined now: in recorded order the threads that ended before this one's first step
        // (waited for), in any order those already returned (their stacks given back).
        let ordered = pacing.ordered;
        let (ended, live): (Vec<_>, Vec<_>) =
            running.into_iter().partition(|(last, h)| (ordered && *last < span.first_ns) || h.is_finished());
        running = live;
        outs.extend(ended.into_iter().map(|(_, h)| h.join().unwrap_or_default()));
        match std::thread::Builder::new().stack_size(stack).spawn_scoped(sc, move || run(span)) {
            Ok(h) => running.push((span.last_ns, h)),
            Err(e) => {
                stop.store(true, Ordering::Release);
                err = Some(format!("cannot start a replay thread: {e}"));
                break;
            }
        }
    }
    outs.extend(running.into_iter().map(|(_, h)| h.join().unwrap_or_default()));
    err.map_or(Ok(outs), Err)
}

/// Sleeps until `t_ns`, looking at `stop` at least every [`NAP_NS`]; false when stopped.
fn nap_until(t_ns: u64, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        let now = selfproc::now_ns();
        if now >= t_ns {
            return true;
        }
        selfproc::sleep_until(t_ns.min(now + NAP_NS));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    fn span(first_ns: u64, last_ns: u64, thread: usize) -> Span {
        Span { first_ns, last_ns, thread }
    }

    /// In recorded order a thread whose steps ended before another's began has returned before
    /// that one starts; overlapping threads run at once.
    #[test]
    fn ordered_joins_what_ended_before() {
        let spans = [span(0, 10, 0), span(5, 30, 1), span(20, 40, 2)];
        let running = AtomicUsize::new(0);
        let seen = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        let run = |s: Span| {
            // How many others run as this one starts.
            seen.lock().unwrap().push((s.thread, running.fetch_add(1, Ordering::SeqCst)));
            std::thread::sleep(std::time::Duration::from_millis(if s.thread == 1 { 200 } else { 20 }));
            running.fetch_sub(1, Ordering::SeqCst);
            s.thread
        };
        let pacing = Pacing { recorded: false, ordered: true };
        let mut outs = std::thread::scope(|sc| launch(sc, &spans, pacing, 0, 64 << 10, &stop, &run)).unwrap();
        outs.sort();
        assert_eq!(outs, vec![0, 1, 2]);
        let seen = seen.into_inner().unwrap();
        // Thread 2 starts after thread 0 was joined, while thread 1 (200 ms) still runs.
        let two = seen.iter().find(|(t, _)| *t == 2).unwrap();
        assert_eq!(two.1, 1, "{seen:?}");
    }

    /// Recorded pace: each thread starts about LEAD_NS before its first step, not before.
    #[test]
    fn recorded_pace_starts_each_thread_when_due() {
        let spans = [span(0, 0, 0), span(60_000_000, 60_000_000, 1)];
        let stop = AtomicBool::new(false);
        let start = selfproc::now_ns();
        let run = |_: Span| selfproc::now_ns() - start;
        let pacing = Pacing { recorded: true, ordered: false };
        let outs = std::thread::scope(|sc| launch(sc, &spans, pacing, start, 64 << 10, &stop, &run)).unwrap();
        assert!(outs[0] < 50_000_000, "{outs:?}");
        assert!(outs[1] >= 60_000_000 - LEAD_NS, "{outs:?}");
    }

    /// A thread that cannot be started (a stack no mapping can hold) is an error, sets `stop`,
    /// and no later thread starts.
    #[test]
    fn a_failed_start_stops_the_run() {
        let spans = [span(0, 1, 0), span(2, 3, 1)];
        let stop = AtomicBool::new(false);
        let started = AtomicUsize::new(0);
        let run = |_: Span| started.fetch_add(1, Ordering::SeqCst);
        let pacing = Pacing { recorded: false, ordered: true };
        let r = std::thread::scope(|sc| launch(sc, &spans, pacing, 0, 1 << 62, &stop, &run));
        assert!(r.unwrap_err().starts_with("cannot start a replay thread"));
        assert!(stop.load(Ordering::SeqCst));
        assert_eq!(started.load(Ordering::SeqCst), 0);
    }
}
