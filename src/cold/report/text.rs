//! The human table: ops x size classes with count, p50, p99 and max, then the top threads by
//! calls.

use super::{thread_total, Snapshot};
use crate::base::classes::class_label;
use crate::base::classes::OP_NAMES;
use core::fmt::Write;

/// The text dump: a header, the table per op and size class, memory and the RSS account, the
/// busiest threads.
// Long because: one table written top to bottom, each section a few `writeln!`s; split, each
// part would only move a heading away from its rows.
pub fn render(s: &Snapshot) -> String {
    let mut o = String::new();
    let m = &s.memory;
    let _ = writeln!(
        o,
        "mallocshim dump: pid {} backend {} uptime {:.1}s sample 1/{}  rss {} MiB  backend allocated {} MiB resident {} MiB",
        s.pid,
        s.backend,
        s.uptime_s,
        s.sample_every,
        m.rss_bytes >> 20,
        m.backend_allocated_bytes >> 20,
        m.backend_resident_bytes >> 20
    );
    let a = m;
    let mib = |v: u64| v as f64 / 1048576.0;
    let _ = writeln!(
        o,
        "memory: rss {:.1} MiB = live {:.1} + allocator free {:.1} + allocator metadata {} + non-heap {:.1} + file {:.1} + shmem {:.1} (MiB; allocator resident {:.1})",
        mib(a.rss_bytes),
        mib(a.live_bytes),
        mib(a.allocator_free_bytes),
        a.allocator_metadata_bytes.map(|v| format!("{:.1}", mib(v))).unwrap_or_else(|| "n/a".into()),
        mib(a.non_heap_bytes),
        mib(a.rss_file_bytes),
        mib(a.rss_shmem_bytes),
        mib(a.allocator_resident_bytes)
    );
    let t = &s.trim;
    let d = t.duration.percentiles(&[0.5, 0.99]);
    let _ = writeln!(
        o,
        "trims: {} run ({}), {} skipped (interval {} ms, min {} MiB free), released {} MiB, duration p50 {} us p99 {} us max {} us",
        t.runs,
        crate::cold::trim::REASON_NAMES
            .iter()
            .zip(t.by_reason)
            .map(|(n, v)| format!("{n} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        t.skipped,
        t.interval_ms,
        t.min_bytes >> 20,
        t.released_bytes >> 20,
        d[0] / 1000,
        d[1] / 1000,
        t.duration.max_ns / 1000
    );
    let _ = writeln!(
        o,
        "{:<9} {:>6} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "op", "size", "calls", "sampled", "p50_ns", "p99_ns", "max_ns"
    );
    for (op, cs) in s.classes.iter().enumerate() {
        for (c, r) in cs.iter().enumerate() {
            if r.count == 0 {
                continue;
            }
            let p = r.latency.percentiles(&[0.5, 0.99]);
            let _ = writeln!(
                o,
                "{:<9} {:>6} {:>12} {:>9} {:>9} {:>9} {:>9}",
                OP_NAMES[op],
                class_label(c),
                r.count,
                r.latency.sampled(),
                p[0],
                p[1],
                r.latency.max_ns
            );
        }
    }
    let mut ts: Vec<_> = s.threads.iter().map(|t| (thread_total(t), t)).collect();
    ts.sort_by_key(|t| core::cmp::Reverse(t.0 .0));
    let _ = writeln!(
        o,
        "\ntop threads by calls:\n{:>8} {:<16} {:<7} {:>12} {:>9} {:>9}  start routine",
        "tid", "name", "state", "calls", "p50_ns", "p99_ns"
    );
    for ((calls, lat), t) in ts.into_iter().take(15) {
        let p = lat.percentiles(&[0.5, 0.99]);
        let _ = writeln!(
            o,
            "{:>8} {:<16} {:<7} {:>12} {:>9} {:>9}  {}",
            t.row.tid,
            t.row.name,
            t.row.state,
            calls,
            p[0],
            p[1],
            routine(t)
        );
    }
    o
}

/// The start routine column: `routine` for a live thread, `routine: N exited threads` for an
/// exited row (`other` when the routine is unknown or the table of routines was full).
fn routine(t: &super::ThreadRow) -> String {
    let t = &t.row;
    let r = t.start_routine.as_deref().unwrap_or(if t.is_live() { "-" } else { "other" });
    match t.exited_threads {
        Some(n) => format!("{r}: {n} exited threads"),
        None => r.to_string(),
    }
}
