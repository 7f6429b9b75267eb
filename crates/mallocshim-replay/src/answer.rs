//! The answer of `mallocshim replay`, typed: what the engine process measures
//! ([`EngineOut`], one JSON line on its stdout), what the command adds per backend
//! ([`BackendAnswer`]: RSS samples, latency from the shim's dumps, derived ratios) and the whole
//! run ([`Answer`], written by `--json`). One schema for the command, the tests and scripts.
//!
//! Units are in the field names (`_bytes`, `_s`, `_ns`). Owns no I/O.

use serde::{Deserialize, Serialize};

/// The `format` field of [`Answer`].
pub const FORMAT: &str = "mallocshim-replay";
/// The answer's schema version; fields may be added, a change of meaning bumps it.
pub const VERSION: u64 = 1;

/// Live blocks of one size class (of the requested size) at one moment.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassLive {
    /// Smallest request size of the class, in bytes (`mallocshim_format::classes`).
    pub min_bytes: u64,
    /// Largest; `null` for the open last class (>64 MiB).
    pub max_bytes: Option<u64>,
    pub blocks: u64,
    pub bytes: u64,
}

/// The live heap at the end of one second of the recorded window (events with
/// `t < (second + 1) s` after the window's first event, pre-window blocks included); classes
/// with no live block are left out.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct LiveSecond {
    pub second: u64,
    pub classes: Vec<ClassLive>,
}

/// Events of the trace the replay did not or could not replay as recorded; all 0 in a good replay.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Errors {
    /// Events inconsistent with the trace itself (a free of a block never allocated and not
    /// pre-window, an id allocated twice while live): counted at planning, not replayed.
    pub inconsistent: u64,
    /// Allocations the backend refused (NULL) during the replay; their frees are skipped.
    pub alloc_failed: u64,
    /// Steps that waited over 120 s for their block's allocation (skipped, never a hang).
    pub wait_timeout: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.inconsistent + self.alloc_failed + self.wait_timeout
    }
}

/// What the engine process measured (one backend, one run). RSS figures are the process's
/// (`/proc/self/statm`; the peak `/proc/self/status` VmHWM, reset just before the pre-window heap
/// is allocated); `baseline_rss_bytes` is RSS just before that, with the replayer's own maps
/// (`replayer_bytes`) already resident, so `X_rss_bytes - baseline_rss_bytes` is the allocator's.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct EngineOut {
    /// The backend serving the calls (`mallocshim_backend_name()`).
    pub backend: String,
    /// `fast` or `recorded`.
    pub pace: String,
    /// `recorded`: threads keep the recorded interleaving to within one epoch of `epoch_us`
    /// recorded µs (no step of an epoch before every step of the earlier ones); `threads`: each
    /// thread keeps its own order only (and every free after its allocation).
    #[serde(default)]
    pub order: String,
    #[serde(default)]
    pub epoch_us: u64,
    /// Events in the trace, recorded threads, and the window's length (first to last event).
    pub events: u64,
    pub threads: u64,
    pub window_s: f64,
    /// Pre-window blocks allocated before the replay (from the trace header: count and bytes
    /// per size class; each block of a class gets the class's mean size).
    pub pre_window_blocks: u64,
    pub pre_window_bytes: u64,
    /// Allocator calls replayed (allocations, reallocs and frees) and their wall and CPU time
    /// (getrusage, user + system, of the whole process over the replay: the calls and the
    /// replay's page writes, the same writes under every backend).
    pub calls: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
    /// Bytes the replayer maps for itself (decoded steps, block table, counters), not malloc'ed.
    pub replayer_bytes: u64,
    pub baseline_rss_bytes: u64,
    pub peak_rss_bytes: u64,
    /// After the last replayed call, then after `mallocshim_trim()`.
    pub end_rss_bytes: u64,
    pub trimmed_rss_bytes: u64,
    /// Requested bytes and blocks live at the end of the replay (pre-window blocks included),
    /// counted by the replayer as it allocated and freed.
    pub live_end_bytes: u64,
    pub live_end_blocks: u64,
    /// The most requested bytes live at once over the trace (its global order), from the plan.
    pub peak_live_bytes: u64,
    /// The most requested bytes live at once in the replay as it ran (every thread's calls
    /// counted as they returned, pre-window heap included): below `peak_live_bytes` when
    /// phases that were apart in the recording overlapped in the replay.
    #[serde(default)]
    pub replay_peak_live_bytes: u64,
    /// `[seconds since the replay started, live requested bytes, RSS bytes]` every 50 ms,
    /// sampled inside the engine (RSS from /proc/self/statm, not net of the baseline).
    #[serde(default)]
    pub live_samples: Vec<(f64, u64, u64)>,
    pub errors: Errors,
    /// The trace footer's events dropped while recording and why the window ended.
    pub trace_dropped: u64,
    pub trace_end: String,
    /// The replay's live heap per second of the recorded window.
    pub live_curve: Vec<LiveSecond>,
}

/// One latency row of the replay (the interval between the shim's dump before the replay and
/// the one after: replayed calls only). Percentiles are `null` without sampled calls.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LatencyRow {
    pub op: String,
    pub min_bytes: u64,
    pub max_bytes: Option<u64>,
    pub calls: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
}

/// One backend's answer: the engine's figures, RSS over replay time and latency per class.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct BackendAnswer {
    #[serde(flatten)]
    pub engine: EngineOut,
    /// `[seconds since the replay started, VmRSS bytes]`, sampled by the command every 50 ms
    /// from /proc/PID/status.
    pub rss_samples: Vec<(f64, u64)>,
    pub latency: Vec<LatencyRow>,
    /// calls / wall_s.
    pub calls_per_s: f64,
    /// cpu_s / calls, in ns.
    pub cpu_ns_per_call: f64,
    /// The allocator's share: peak, end and trimmed RSS minus the baseline.
    pub net_peak_rss_bytes: u64,
    pub net_end_rss_bytes: u64,
    pub net_trimmed_rss_bytes: u64,
    /// Fragmentation: net end RSS over live bytes at the end, net peak RSS over peak live bytes.
    pub end_rss_per_live: f64,
    pub peak_rss_per_live: f64,
    /// window_s / wall_s: how much faster than recorded the replay ran.
    pub speedup: f64,
}

impl BackendAnswer {
    /// The derived figures from the engine's.
    pub fn new(engine: EngineOut, rss_samples: Vec<(f64, u64)>, latency: Vec<LatencyRow>) -> Self {
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let net = |x: u64| x.saturating_sub(engine.baseline_rss_bytes);
        BackendAnswer {
            calls_per_s: div(engine.calls as f64, engine.wall_s),
            cpu_ns_per_call: div(engine.cpu_s * 1e9, engine.calls as f64),
            net_peak_rss_bytes: net(engine.peak_rss_bytes),
            net_end_rss_bytes: net(engine.end_rss_bytes),
            net_trimmed_rss_bytes: net(engine.trimmed_rss_bytes),
            end_rss_per_live: div(net(engine.end_rss_bytes) as f64, engine.live_end_bytes as f64),
            peak_rss_per_live: div(net(engine.peak_rss_bytes) as f64, engine.peak_live_bytes as f64),
            speedup: div(engine.window_s, engine.wall_s),
            engine,
            rss_samples,
            latency,
        }
    }
}

/// The whole answer (`mallocshim replay --json`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Answer {
    pub format: String,
    pub version: u64,
    pub trace: String,
    /// The backend the recorded process ran under (trace header).
    pub recorded_backend: String,
    pub pace: String,
    /// The live heap per second as the trace has it (pre-window heap included): each
    /// backend's `live_curve` must equal it.
    pub trace_live_curve: Vec<LiveSecond>,
    pub backends: Vec<BackendAnswer>,
    /// The trace footer's reordered calls (recorded calls whose order the recorder could not
    /// restore; see docs/trace-format.md). 0 in answers written before this field.
    #[serde(default)]
    pub trace_reordered: u64,
    /// One sentence: which backend keeps the least peak RSS, against the first backend, and at
    /// what CPU per call.
    pub verdict: String,
}

/// The verdict over the backends: the one with the lowest net peak RSS against the first
/// (the reference, glibc by default). "at equal CPU" when CPU per call is within 10%.
pub fn verdict(bs: &[BackendAnswer]) -> String {
    let Some(first) = bs.first() else { return "no backend replayed".into() };
    let Some(best) = bs.iter().min_by_key(|b| b.net_peak_rss_bytes) else { return String::new() };
    if bs.len() == 1 {
        return format!(
            "on this window {} peaks at {} MiB over the baseline",
            first.engine.backend,
            mib(first.net_peak_rss_bytes)
        );
    }
    let cpu = if first.cpu_ns_per_call > 0.0 { best.cpu_ns_per_call / first.cpu_ns_per_call } else { 1.0 };
    let cost = if (0.9..=1.1).contains(&cpu) {
        "at equal CPU".to_string()
    } else {
        format!("at {cpu:.2}x the CPU per call")
    };
    if std::ptr::eq(best, first) || best.net_peak_rss_bytes == first.net_peak_rss_bytes {
        let others: Vec<&str> = bs[1..].iter().map(|b| b.engine.backend.as_str()).collect();
        return format!(
            "on this window {} keeps the least peak RSS ({} MiB); {} keep more",
            first.engine.backend,
            mib(first.net_peak_rss_bytes),
            others.join(", ")
        );
    }
    let less = 100.0 * (1.0 - best.net_peak_rss_bytes as f64 / first.net_peak_rss_bytes.max(1) as f64);
    format!(
        "on this window {} keeps {less:.0}% less peak RSS than {} ({} vs {} MiB) {cost}",
        best.engine.backend,
        first.engine.backend,
        mib(best.net_peak_rss_bytes),
        mib(first.net_peak_rss_bytes)
    )
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1u64 << 20) as f64)
}
