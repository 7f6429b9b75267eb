//! Prometheus text exposition (for node_exporter's textfile collector): real histogram families
//! with cumulative `_bucket{le}` rows ending at `+Inf` (equal to `_count`) and `_sum`, labelled by
//! backend, op and size class; counters of calls and bytes (`mallocshim_calls_total` is the
//! exact count beside the histogram's sampled `_count`); memory gauges and the RSS account
//! ([`account`]); trim counters, per reason too, and the trim duration histogram. Cumulative
//! since the process started, as Prometheus expects. No timestamps.

use super::Snapshot;
use crate::base::classes::class_label;
use crate::base::classes::OP_NAMES;
use core::fmt::Write;

/// Bucket upper bounds, in ns.
const LE_NS: [u64; 16] = [
    10,
    20,
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    50_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// The Prometheus text exposition of `s`: latency histograms, calls and bytes per op and size
/// class, memory gauges, the RSS account and the trims.
pub fn render(s: &Snapshot) -> String {
    render_with(s, true)
}

/// [`render`], with or without the latency histograms (the textfile's
/// `MALLOCSHIM_PROM_HISTOGRAMS=off` leaves them out; a dump's `.prom` always has them).
pub fn render_with(s: &Snapshot, histograms: bool) -> String {
    let mut o = String::new();
    if histograms {
        latency(&mut o, s);
    }
    calls_and_bytes(&mut o, s);
    memory(&mut o, s);
    account(&mut o, s);
    trims(&mut o, s);
    o
}

/// The sampled call latencies, one histogram per op and size class.
fn latency(o: &mut String, s: &Snapshot) {
    let b = s.backend;
    let _ = writeln!(o, "# HELP mallocshim_call_latency_seconds Latency of sampled allocator calls (1 in {} per thread), by op and size class.", s.sample_every);
    let _ = writeln!(o, "# TYPE mallocshim_call_latency_seconds histogram");
    for (op, cs) in s.classes.iter().enumerate() {
        for (c, r) in cs.iter().enumerate() {
            let n = r.latency.sampled();
            if n == 0 {
                continue;
            }
            let labels = format!("backend=\"{b}\",op=\"{}\",size_class=\"{}\"", OP_NAMES[op], class_label(c));
            let mut cum = vec![0u64; LE_NS.len()];
            let mut sum_ns = 0f64;
            for (k, &cnt) in r.latency.buckets.iter().enumerate() {
                if cnt == 0 {
                    continue;
                }
                let v = r.latency.ns(k);
                sum_ns += v as f64 * cnt as f64;
                for (i, &le) in LE_NS.iter().enumerate() {
                    if v <= le {
                        cum[i] += cnt;
                    }
                }
            }
            for (i, &le) in LE_NS.iter().enumerate() {
                let _ = writeln!(
                    o,
                    "mallocshim_call_latency_seconds_bucket{{{labels},le=\"{}\"}} {}",
                    le as f64 / 1e9,
                    cum[i]
                );
            }
            let _ = writeln!(o, "mallocshim_call_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {n}");
            let _ = writeln!(o, "mallocshim_call_latency_seconds_sum{{{labels}}} {}", sum_ns / 1e9);
            let _ = writeln!(o, "mallocshim_call_latency_seconds_count{{{labels}}} {n}");
        }
    }
}

/// Calls and bytes per op and size class.
fn calls_and_bytes(o: &mut String, s: &Snapshot) {
    let b = s.backend;
    for (name, help, pick) in [
        ("mallocshim_calls_total", "Allocator calls routed, by op and size class.", 0),
        ("mallocshim_bytes_total", "Bytes requested (free: usable size), by op and size class.", 1),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
        for (op, cs) in s.classes.iter().enumerate() {
            for (c, r) in cs.iter().enumerate() {
                if r.count == 0 {
                    continue;
                }
                let v = if pick == 0 { r.count } else { r.bytes };
                let _ = writeln!(
                    o,
                    "{name}{{backend=\"{b}\",op=\"{}\",size_class=\"{}\"}} {v}",
                    OP_NAMES[op],
                    class_label(c)
                );
            }
        }
    }
    let name = "mallocshim_failed_total";
    let _ = writeln!(o, "# HELP {name} Failed requests above 64 MiB (counted in no size class), by op.");
    let _ = writeln!(o, "# TYPE {name} counter");
    for (op, n) in s.failed().into_iter().enumerate() {
        let _ = writeln!(o, "{name}{{backend=\"{b}\",op=\"{}\"}} {n}", OP_NAMES[op]);
    }
}

/// RSS and the backend's own figures.
fn memory(o: &mut String, s: &Snapshot) {
    let b = s.backend;
    let m = &s.memory;
    for (name, help, v) in [
        ("mallocshim_rss_bytes", "Resident set size (/proc/self/status VmRSS).", m.rss_bytes),
        (
            "mallocshim_backend_allocated_bytes",
            "Bytes in live blocks, from the backend.",
            m.backend_allocated_bytes,
        ),
        ("mallocshim_backend_resident_bytes", "Bytes the backend holds in memory.", m.backend_resident_bytes),
        (
            "mallocshim_backend_free_bytes",
            "Free bytes the backend could return to the OS.",
            m.backend_free_bytes,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{backend=\"{b}\"}} {v}");
    }
}

/// Trims by reason, their totals and their durations.
fn trims(o: &mut String, s: &Snapshot) {
    let b = s.backend;
    let t = &s.trim;
    let name = "mallocshim_trims_total";
    let _ = writeln!(
        o,
        "# HELP {name} Trims run, by reason (periodic, ceiling, pressure, api).\n# TYPE {name} counter"
    );
    for (r, v) in crate::cold::trim::REASON_NAMES.iter().zip(t.by_reason) {
        let _ = writeln!(o, "{name}{{backend=\"{b}\",reason=\"{r}\"}} {v}");
    }
    for (name, help, v) in [
        (
            "mallocshim_trim_runs_total",
            "Trims run (backend release calls: periodic and mallocshim_trim()).",
            t.runs,
        ),
        (
            "mallocshim_trim_skipped_total",
            "Periodic trims skipped: backend free bytes under MALLOCSHIM_TRIM_MIN_BYTES.",
            t.skipped,
        ),
        (
            "mallocshim_trim_released_bytes_total",
            "Sum of RSS drops across trims (/proc/self/statm before and after).",
            t.released_bytes,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{backend=\"{b}\"}} {v}");
    }
    let name = "mallocshim_trim_duration_seconds";
    let _ =
        writeln!(o, "# HELP {name} Wall time of each trim's backend release call.\n# TYPE {name} histogram");
    let mut sum_ns = 0f64;
    let mut cum = [0u64; TRIM_LE_NS.len()];
    for (k, &cnt) in t.duration.buckets.iter().enumerate() {
        if cnt == 0 {
            continue;
        }
        let v = t.duration.ns(k).min(t.duration.max_ns.max(1));
        sum_ns += v as f64 * cnt as f64;
        for (i, &le) in TRIM_LE_NS.iter().enumerate() {
            if v <= le {
                cum[i] += cnt;
            }
        }
    }
    let n = t.duration.sampled();
    for (i, &le) in TRIM_LE_NS.iter().enumerate() {
        let _ = writeln!(o, "{name}_bucket{{backend=\"{b}\",le=\"{}\"}} {}", le as f64 / 1e9, cum[i]);
    }
    let _ = writeln!(o, "{name}_bucket{{backend=\"{b}\",le=\"+Inf\"}} {n}");
    let _ = writeln!(o, "{name}_sum{{backend=\"{b}\"}} {}", sum_ns / 1e9);
    let _ = writeln!(o, "{name}_count{{backend=\"{b}\"}} {n}");
}

/// The RSS account's gauges (sources in `crate::cold::account`); the metadata gauge only where the
/// backend reports it.
fn account(o: &mut String, s: &Snapshot) {
    let a = &s.memory;
    let b = s.backend;
    let rows = [
        (
            "mallocshim_rss_anon_bytes",
            "Anonymous resident memory (/proc/self/status RssAnon).",
            Some(a.rss_anon_bytes),
        ),
        (
            "mallocshim_rss_file_bytes",
            "File-backed resident memory (/proc/self/status RssFile).",
            Some(a.rss_file_bytes),
        ),
        (
            "mallocshim_rss_shmem_bytes",
            "Shared resident memory (/proc/self/status RssShmem).",
            Some(a.rss_shmem_bytes),
        ),
        (
            "mallocshim_live_bytes",
            "Bytes in blocks the program holds (the backend's exact figure).",
            Some(a.live_bytes),
        ),
        (
            "mallocshim_allocator_free_bytes",
            "Resident bytes the allocator keeps that hold no live block.",
            Some(a.allocator_free_bytes),
        ),
        (
            "mallocshim_allocator_metadata_bytes",
            "The allocator's own bookkeeping (jemalloc, tcmalloc).",
            a.allocator_metadata_bytes,
        ),
        (
            "mallocshim_allocator_resident_bytes",
            "Resident bytes of the allocator's memory, at most anonymous RSS.",
            Some(a.allocator_resident_bytes),
        ),
        (
            "mallocshim_non_heap_bytes",
            "Anonymous resident memory outside the allocator (mmaps, stacks).",
            Some(a.non_heap_bytes),
        ),
    ];
    for (name, help, v) in rows {
        if let Some(v) = v {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{backend=\"{b}\"}} {v}");
        }
    }
}

/// Trim duration bucket upper bounds, in ns (100 us to 10 s).
const TRIM_LE_NS: [u64; 10] = [
    100_000,
    500_000,
    1_000_000,
    5_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
    500_000_000,
    1_000_000_000,
    10_000_000_000,
];
