//! Giving free memory back to the OS: one trim is the backend's own release call (glibc
//! `malloc_trim(0)`, jemalloc `arena.<all>.purge` or `.decay`, tcmalloc
//! `MallocExtension_ReleaseFreeMemory`), measured (duration, RSS before and after from
//! /proc/self/statm) and counted. The worker calls [`periodic`] every `MALLOCSHIM_TRIM_INTERVAL_MS`,
//! which skips the release while the backend holds less free memory than
//! `MALLOCSHIM_TRIM_MIN_BYTES`; `mallocshim_trim()` calls [`run`] directly.
//! Statistics are lock-free atomics, so a fork can never leave them locked. Never on the hot
//! path: callers hold the reentrancy guard (a trim reads files and may allocate).

use crate::backend::{self, MemStats};
use crate::classes::{bucket_of, BUCKETS};
use crate::report::Latency;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What one trim did. Sizes in bytes, time in ns.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    /// The backend's free bytes before the release (see [`MemStats::free`] for the source).
    pub free_before: u64,
    /// Resident set size before and after the release (/proc/self/statm).
    pub rss_before: u64,
    pub rss_after: u64,
    /// `rss_before - rss_after`, or 0 when RSS did not fall.
    pub released: u64,
    /// Wall time of the backend's release call.
    pub duration_ns: u64,
}

/// Counters over the process's life, for the dumps.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub interval_ms: u64,
    pub min_bytes: u64,
    /// Trims that ran (periodic and forced).
    pub runs: u64,
    /// Periodic trims skipped under the threshold.
    pub skipped: u64,
    /// Sum of [`Outcome::released`].
    pub released_bytes: u64,
    /// Wall-clock time of the last trim that ran, ms since the epoch; 0 = none yet.
    pub last_unix_ms: u64,
    /// Durations of the trims that ran (ns buckets; `ns_per_tick` is 1).
    pub duration: Latency,
}

static RUNS: AtomicU64 = AtomicU64::new(0);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static RELEASED: AtomicU64 = AtomicU64::new(0);
static LAST_UNIX_MS: AtomicU64 = AtomicU64::new(0);
static DUR_MAX_NS: AtomicU64 = AtomicU64::new(0);
static DUR_HIST: [AtomicU64; BUCKETS] = [const { AtomicU64::new(0) }; BUCKETS];

/// Runs the backend's release call now, whatever the backend holds, and records it.
/// Call under the reentrancy guard, once the shim is ready.
pub fn run() -> Outcome {
    run_with(backend::mem_stats())
}

fn run_with(before: MemStats) -> Outcome {
    let (rss_before, _) = crate::report::statm();
    let t0 = crate::clock::mono_ns();
    backend::release(0, crate::config::get().release);
    let duration_ns = crate::clock::mono_ns().saturating_sub(t0);
    let (rss_after, _) = crate::report::statm();
    let o = Outcome {
        free_before: before.free,
        rss_before,
        rss_after,
        released: rss_before.saturating_sub(rss_after),
        duration_ns,
    };
    RUNS.fetch_add(1, Relaxed);
    RELEASED.fetch_add(o.released, Relaxed);
    LAST_UNIX_MS.store(crate::report::unix_ms(), Relaxed);
    DUR_HIST[bucket_of(duration_ns)].fetch_add(1, Relaxed);
    DUR_MAX_NS.fetch_max(duration_ns, Relaxed);
    if crate::config::get().verbose >= 2 {
        crate::shim_warn!(
            "trim backend={} free_bytes={} rss_before={} rss_after={} released={} duration_us={}",
            backend::active().name(),
            o.free_before,
            o.rss_before,
            o.rss_after,
            o.released,
            o.duration_ns / 1000
        );
    }
    o
}

/// The periodic trim: skipped (and counted as such) while the backend's free bytes are under
/// `MALLOCSHIM_TRIM_MIN_BYTES`. Call under the reentrancy guard, from the worker.
pub fn periodic() -> Option<Outcome> {
    let cfg = crate::config::get();
    let m = backend::mem_stats();
    if m.free < cfg.trim_min_bytes {
        SKIPPED.fetch_add(1, Relaxed);
        if cfg.verbose >= 2 {
            crate::shim_warn!(
                "trim skipped backend={} free_bytes={} min_bytes={}",
                backend::active().name(),
                m.free,
                cfg.trim_min_bytes
            );
        }
        return None;
    }
    Some(run_with(m))
}

/// The counters so far.
pub fn stats() -> Stats {
    let cfg = crate::config::get();
    let buckets: Vec<u64> = DUR_HIST.iter().map(|b| b.load(Relaxed)).collect();
    let runs_seen = buckets.iter().any(|&n| n > 0);
    Stats {
        interval_ms: cfg.trim_interval_ms,
        min_bytes: cfg.trim_min_bytes,
        runs: RUNS.load(Relaxed),
        skipped: SKIPPED.load(Relaxed),
        released_bytes: RELEASED.load(Relaxed),
        last_unix_ms: LAST_UNIX_MS.load(Relaxed),
        duration: Latency {
            buckets,
            max_ns: if runs_seen { DUR_MAX_NS.load(Relaxed).max(1) } else { 0 },
            ns_per_tick: 1.0,
        },
    }
}

/// Totals of trims (`runs`, `released_bytes`) for the memlog.
pub fn totals() -> (u64, u64) {
    (RUNS.load(Relaxed), RELEASED.load(Relaxed))
}
