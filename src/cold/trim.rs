//! Giving free memory back to the OS: one trim is the backend's own release call (glibc
//! `malloc_trim(0)`, jemalloc `arena.<all>.purge` or `.decay`, tcmalloc
//! `MallocExtension_ReleaseFreeMemory`), measured (duration, RSS before and after from
//! /proc/self/statm) and counted. The worker calls [`periodic`] every `MALLOCSHIM_TRIM_INTERVAL_MS`,
//! which skips the release while the backend holds less free memory than
//! `MALLOCSHIM_TRIM_MIN_BYTES`; `mallocshim_trim()` calls [`run`] directly.
//! Statistics are lock-free atomics, so a fork can never leave them locked. Never on the hot
//! path: callers hold the reentrancy guard (a trim reads files and may allocate).

use crate::backend::{self, MemStats};
use crate::base::classes::{bucket_of, BUCKETS};
use crate::cold::latency::Latency;
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
    /// Trims that ran, per [`Reason`].
    pub by_reason: [u64; 4],
    /// `MALLOCSHIM_TRIM_ABOVE_RSS` in bytes; 0 = off.
    pub above_rss_bytes: u64,
    /// PSI `some avg10` threshold in percent (`MALLOCSHIM_TRIM_ON_PRESSURE`); 0 = off.
    pub pressure_pct: u32,
    /// `MALLOCSHIM_GLIBC_TRIM_THRESHOLD` in bytes; 0 = glibc's own.
    pub glibc_trim_threshold_bytes: u64,
}

/// Why a trim ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Reason {
    /// `MALLOCSHIM_TRIM_INTERVAL_MS`.
    Periodic,
    /// RSS above `MALLOCSHIM_TRIM_ABOVE_RSS`.
    Ceiling,
    /// PSI memory pressure (`MALLOCSHIM_TRIM_ON_PRESSURE`).
    Pressure,
    /// `mallocshim_trim()`.
    Api,
}

/// Reason names as they appear in the dumps and the memlog header, indexed by [`Reason`].
pub const REASON_NAMES: [&str; 4] = ["periodic", "ceiling", "pressure", "api"];

/// How often the worker checks RSS and pressure, in ms (when either trigger is on).
pub const WATCH_MS: u64 = 250;
/// Shortest gap between two ceiling trims, ms.
pub const CEILING_GAP_MS: u64 = 1000;
/// Shortest gap between two pressure trims, ms (PSI's avg10 is a 10-second average).
pub const PRESSURE_GAP_MS: u64 = 10_000;
/// Longest gap the back-off reaches, ms.
pub const MAX_GAP_MS: u64 = 60_000;

static RUNS: AtomicU64 = AtomicU64::new(0);
static BY_REASON: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static RELEASED: AtomicU64 = AtomicU64::new(0);
static LAST_UNIX_MS: AtomicU64 = AtomicU64::new(0);
static DUR_MAX_NS: AtomicU64 = AtomicU64::new(0);
static DUR_HIST: [AtomicU64; BUCKETS] = [const { AtomicU64::new(0) }; BUCKETS];

/// Runs the backend's release call now, whatever the backend holds, and records it.
/// Call under the reentrancy guard, once the shim is ready.
pub fn run(reason: Reason) -> Outcome {
    run_with(backend::mem_stats(), reason)
}

fn run_with(before: MemStats, reason: Reason) -> Outcome {
    let (rss_before, _) = crate::cold::procfs::statm();
    let t0 = crate::base::clock::mono_ns();
    backend::release(0, crate::hot::config::current().release);
    let duration_ns = crate::base::clock::mono_ns().saturating_sub(t0);
    let (rss_after, _) = crate::cold::procfs::statm();
    let o = Outcome {
        free_before: before.free,
        rss_before,
        rss_after,
        released: rss_before.saturating_sub(rss_after),
        duration_ns,
    };
    RUNS.fetch_add(1, Relaxed);
    BY_REASON[reason as usize].fetch_add(1, Relaxed);
    RELEASED.fetch_add(o.released, Relaxed);
    LAST_UNIX_MS.store(crate::cold::procfs::unix_ms(), Relaxed);
    DUR_HIST[bucket_of(duration_ns)].fetch_add(1, Relaxed);
    DUR_MAX_NS.fetch_max(duration_ns, Relaxed);
    if crate::hot::config::current().verbose >= 2 {
        crate::base::diag::warn!(
            "trim backend={} free_bytes={} rss_before={} rss_after={} released={} duration_us={} reason={}",
            backend::active().name(),
            o.free_before,
            o.rss_before,
            o.rss_after,
            o.released,
            o.duration_ns / 1000,
            REASON_NAMES[reason as usize]
        );
    }
    o
}

/// The periodic trim: skipped (and counted as such) while the backend's free bytes are under
/// `MALLOCSHIM_TRIM_MIN_BYTES`. Free bytes that are not resident cannot be given back, so the
/// figure is capped at the process's anonymous RSS (/proc/self/status `RssAnon`): mimalloc's
/// committed-but-unused reserve read ~64 MiB free in a 23 MiB process, and the shim thread's
/// own first allocations tipped it over the default threshold. Call under the reentrancy guard,
/// from the worker.
pub fn periodic() -> Option<Outcome> {
    let cfg = crate::hot::config::current();
    let m = backend::mem_stats();
    let free = match crate::cold::account::status_rss() {
        (_, 0, _, _) => m.free,
        (_, anon, _, _) => m.free.min(anon),
    };
    if free < cfg.trim_min_bytes {
        SKIPPED.fetch_add(1, Relaxed);
        if cfg.verbose >= 2 {
            crate::base::diag::warn!(
                "trim skipped backend={} free_bytes={} min_bytes={}",
                backend::active().name(),
                free,
                cfg.trim_min_bytes
            );
        }
        return None;
    }
    Some(run_with(m, Reason::Periodic))
}

/// State of one rate-limited trigger (worker-only).
#[derive(Default)]
pub struct Gate {
    /// Monotonic ms of the trigger's last trim.
    last_at: u64,
    /// Current gap, ms (0: no trim yet, or the condition cleared since).
    gap: u64,
    /// The condition's figure right after the last trim (ceiling: RSS).
    last_after: u64,
}

impl Gate {
    /// True when the trigger may trim at `now`, the condition's figure being `v`: after the
    /// current gap, or after the base gap when `v` has grown by 1/16 since the last trim (new
    /// memory that may since have been freed).
    fn open(&self, now: u64, base: u64, v: u64) -> bool {
        let gap = if v > self.last_after + self.last_after / 16 { base.min(self.gap) } else { self.gap };
        self.gap == 0 || now >= self.last_at + gap
    }

    /// After a trim at `now` that left the figure at `after`: the gap doubles while the
    /// condition stays (`still`), up to [`MAX_GAP_MS`].
    fn after(&mut self, now: u64, base: u64, still: bool, after: u64) {
        self.gap = if still && self.gap != 0 { (self.gap * 2).min(MAX_GAP_MS) } else { base };
        self.last_at = now;
        self.last_after = after;
    }
}

/// The worker's state for [`watch`].
#[derive(Default)]
pub struct Watch {
    ceiling: Gate,
    pressure: Gate,
    /// The PSI file chosen at the first check (cgroup v2 memory.pressure, else
    /// /proc/pressure/memory); None when neither exists.
    psi: Option<Option<std::path::PathBuf>>,
}

/// Checks the ceiling and pressure triggers and trims when one fires. Worker-only, under the
/// reentrancy guard; `now` is monotonic ms.
pub fn watch(w: &mut Watch, now: u64) {
    let cfg = crate::hot::config::current();
    if cfg.trim_above_rss != 0 {
        let (rss, _) = crate::cold::procfs::statm();
        if rss <= cfg.trim_above_rss {
            w.ceiling.gap = 0;
        } else if w.ceiling.open(now, CEILING_GAP_MS, rss) {
            let o = run(Reason::Ceiling);
            let end = crate::base::clock::mono_ms();
            w.ceiling.after(end, CEILING_GAP_MS, o.rss_after > cfg.trim_above_rss, o.rss_after);
        }
    }
    if cfg.trim_on_pressure != 0 && w.pressure.open(now, PRESSURE_GAP_MS, 0) {
        let path = w.psi.get_or_insert_with(psi_path);
        if let Some(avg10) = path.as_deref().and_then(some_avg10) {
            if avg10 >= cfg.trim_on_pressure as f64 {
                run(Reason::Pressure);
                w.pressure.after(crate::base::clock::mono_ms(), PRESSURE_GAP_MS, true, 0);
            } else {
                w.pressure.gap = 0;
            }
        }
    }
}

/// The PSI memory file for this process: its cgroup v2 `memory.pressure` (from
/// /proc/self/cgroup's `0::` line), else the system-wide /proc/pressure/memory.
pub fn psi_path() -> Option<std::path::PathBuf> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if let Some(rel) = cg.lines().find_map(|l| l.strip_prefix("0::")) {
        let p =
            std::path::Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/')).join("memory.pressure");
        if std::fs::metadata(&p).is_ok() {
            return Some(p);
        }
    }
    let sys = std::path::PathBuf::from("/proc/pressure/memory");
    std::fs::metadata(&sys).is_ok().then_some(sys)
}

/// `some avg10=` of a PSI file, in percent.
pub fn some_avg10(p: &std::path::Path) -> Option<f64> {
    let s = std::fs::read_to_string(p).ok()?;
    let line = s.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|w| w.strip_prefix("avg10=")).and_then(|v| v.parse().ok())
}

/// The counters so far.
pub fn stats() -> Stats {
    let cfg = crate::hot::config::current();
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
        by_reason: by_reason(),
        above_rss_bytes: cfg.trim_above_rss,
        pressure_pct: cfg.trim_on_pressure,
        glibc_trim_threshold_bytes: cfg.glibc_trim_threshold,
    }
}

/// Trims that ran, per [`Reason`].
pub fn by_reason() -> [u64; 4] {
    core::array::from_fn(|i| BY_REASON[i].load(Relaxed))
}

/// Totals of trims (`runs`, `released_bytes`) for the memlog.
pub fn totals() -> (u64, u64) {
    (RUNS.load(Relaxed), RELEASED.load(Relaxed))
}
