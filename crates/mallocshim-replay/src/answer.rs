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

/// The verdict over the backends: the one with the lowest net peak plus net end RSS (the peak,
/// and what the window leaves resident at its end: "RSS keeps growing" asks about the end)
/// against the first backend, with both figures and the CPU per call.
pub fn verdict(bs: &[BackendAnswer]) -> String {
    let Some(first) = bs.first() else { return "no backend replayed".into() };
    let weight = |b: &BackendAnswer| b.net_peak_rss_bytes + b.net_end_rss_bytes;
    let Some(best) = bs.iter().min_by_key(|b| weight(b)) else { return String::new() };
    if bs.len() == 1 {
        return format!(
            "on this window {} peaks at {} MiB and ends at {} MiB over the baseline",
            first.engine.backend,
            mib(first.net_peak_rss_bytes),
            mib(first.net_end_rss_bytes)
        );
    }
    let cpu = if first.cpu_ns_per_call > 0.0 { best.cpu_ns_per_call / first.cpu_ns_per_call } else { 1.0 };
    let cost = if (0.9..=1.1).contains(&cpu) {
        "at equal CPU".to_string()
    } else {
        format!("at {cpu:.2}x the CPU per call")
    };
    if std::ptr::eq(best, first) || weight(best) == weight(first) {
        let others: Vec<&str> = bs[1..].iter().map(|b| b.engine.backend.as_str()).collect();
        return format!(
            "on this window {} keeps the least RSS (peak {} MiB, {} MiB at the end); {} keep more",
            first.engine.backend,
            mib(first.net_peak_rss_bytes),
            mib(first.net_end_rss_bytes),
            others.join(", ")
        );
    }
    format!(
        "on this window {} ends {} and peaks {} in RSS than {} (end {} vs {} MiB, peak {} vs {} MiB) {cost}",
        best.engine.backend,
        rel(best.net_end_rss_bytes, first.net_end_rss_bytes, "lower", "higher"),
        rel(best.net_peak_rss_bytes, first.net_peak_rss_bytes, "lower", "higher"),
        first.engine.backend,
        mib(best.net_end_rss_bytes),
        mib(first.net_end_rss_bytes),
        mib(best.net_peak_rss_bytes),
        mib(first.net_peak_rss_bytes)
    )
}

/// `a` against `b` in words: "12% lower", "5% higher", "no lower".
fn rel(a: u64, b: u64, lower: &str, higher: &str) -> String {
    let pct = 100.0 * (a as f64 - b as f64) / b.max(1) as f64;
    match pct.round() as i64 {
        0 => format!("no {lower}"),
        p if p < 0 => format!("{}% {lower}", -p),
        p => format!("{p}% {higher}"),
    }
}

/// More dropped calls than this share (%) of the recorded window qualifies the verdict ...
pub const DROPS_QUALIFY_PCT: f64 = 1.0;
/// ... and more than this refuses it without `--force`: the replay is then not the workload.
pub const DROPS_REFUSE_PCT: f64 = 25.0;

/// The share of the window's calls the recorder dropped, %.
pub fn dropped_pct(events: u64, dropped: u64) -> f64 {
    100.0 * dropped as f64 / (events + dropped).max(1) as f64
}

/// The verdict qualified for a trace that dropped calls (above [`DROPS_QUALIFY_PCT`]).
pub fn qualify(verdict: String, events: u64, dropped: u64) -> String {
    let pct = dropped_pct(events, dropped);
    if pct <= DROPS_QUALIFY_PCT {
        return verdict;
    }
    format!(
        "{verdict}; qualified: the trace misses {pct:.1}% of the window's calls ({dropped} dropped while recording), so its \
         heap is not the process's: a dropped free leaves its block live in the replay, a dropped allocation's free frees \
         a pre-window block (docs/replay.md, Drops)"
    )
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(name: &str, peak: u64, end: u64) -> BackendAnswer {
        BackendAnswer {
            engine: EngineOut { backend: name.into(), ..Default::default() },
            net_peak_rss_bytes: peak << 20,
            net_end_rss_bytes: end << 20,
            ..Default::default()
        }
    }

    #[test]
    fn the_end_of_the_window_weighs_with_the_peak() {
        // jemalloc peaks a little higher but ends far lower: it wins, and both figures show.
        let v = verdict(&[b("glibc", 100, 90), b("jemalloc", 105, 20)]);
        assert!(
            v.starts_with("on this window jemalloc ends 78% lower and peaks 5% higher in RSS than glibc"),
            "{v}"
        );
        assert!(verdict(&[b("glibc", 100, 20), b("jemalloc", 90, 95)]).contains("glibc keeps the least RSS"));
        assert!(verdict(&[b("glibc", 10, 5)]).contains("ends at 5.0 MiB"));
    }

    #[test]
    fn drops_qualify_the_verdict_above_one_percent() {
        assert_eq!(qualify("v".into(), 1000, 10), "v");
        let q = qualify("v".into(), 1000, 4556);
        assert!(q.starts_with("v; qualified: the trace misses 82.0% of the window's calls"), "{q}");
    }
}
