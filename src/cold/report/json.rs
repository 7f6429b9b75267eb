//! The JSON dump, written through the typed schema of the format crate
//! (`mallocshim_format::Dump`; every field, its unit and its source: docs/dump-format.md). This
//! module only fills the schema from a [`Snapshot`]: percentiles and max are 0 where `sampled`
//! is 0; `max_bytes` is null for the last (>64 MiB) class; free is classed by the block's usable
//! size (free(NULL) counts in the <=16 B class with 0 bytes); raw latency bucket counts go with
//! every size-class row and thread op, and `latency_buckets` gives each bucket's value in ns, so
//! two dumps of one process subtract into the interval between them. Runs on the shim's own
//! thread (or a C API caller) under the reentrancy guard: it allocates.

use super::{Latency, Snapshot};
use crate::base::classes::{class_range, OP_NAMES};
use mallocshim_format::{
    Buckets, ClassRow, Dump, DurationUs, LatencyBuckets, ThreadOp, ThreadRow, Total, Trim, TrimReasons,
};

/// Raw sampled-latency counts, `[bucket, count]` for the non-zero buckets.
fn buckets(l: &Latency) -> Buckets {
    l.buckets.iter().enumerate().filter(|(_, &n)| n > 0).map(|(b, &n)| (b, n)).collect()
}

/// The clock's ns per tick and each bucket's value in ns (its midpoint).
fn latency_buckets(ns_per_tick: f64) -> LatencyBuckets {
    let l = Latency { buckets: Vec::new(), max_ns: 0, ns_per_tick };
    LatencyBuckets { ns_per_tick, bucket_ns: (0..crate::base::classes::BUCKETS).map(|b| l.ns(b)).collect() }
}

/// The dump of `s` in the schema.
pub fn dump(s: &Snapshot) -> Dump {
    let totals = s
        .totals()
        .into_iter()
        .zip(s.failed())
        .enumerate()
        .map(|(o, ((count, bytes), failed))| (OP_NAMES[o].to_string(), Total { count, bytes, failed }))
        .collect();
    Dump {
        format: mallocshim_format::FORMAT.into(),
        version: mallocshim_format::VERSION,
        pid: s.pid,
        backend: s.backend.into(),
        unix_time_ms: s.unix_time_ms,
        uptime_s: s.uptime_s,
        sample_every: s.sample_every.into(),
        profiling: s.profiling,
        prof_sample_bytes: crate::hot::heapprof::rate(),
        totals,
        size_classes: size_classes(s),
        threads: threads(s),
        memory: s.memory,
        trim: trim(&s.trim),
        latency_buckets: latency_buckets(crate::base::clock::ns_per_tick()),
        live_by_class: s
            .live_by_class
            .iter()
            .flat_map(|v| v.iter().enumerate())
            .filter(|(_, &b)| b > 0)
            .map(|(c, &live_bytes)| {
                let (min_bytes, max_bytes) = crate::base::classes::class_range(c);
                mallocshim_format::LiveClass { min_bytes, max_bytes, live_bytes }
            })
            .collect(),
        held_checkpoints: crate::cold::held_history::read(),
        history: crate::cold::history::read(),
    }
}

/// One row per op and size class with a call or a sample.
fn size_classes(s: &Snapshot) -> Vec<ClassRow> {
    let mut size_classes = Vec::new();
    for (o, cs) in s.classes.iter().enumerate() {
        for (c, r) in cs.iter().enumerate() {
            let sampled = r.latency.sampled();
            if r.count == 0 && sampled == 0 {
                continue;
            }
            let (min_bytes, max_bytes) = class_range(c);
            let p = r.latency.percentiles(&[0.5, 0.9, 0.99, 0.999]);
            size_classes.push(ClassRow {
                op: OP_NAMES[o].to_string(),
                min_bytes,
                max_bytes,
                count: r.count,
                bytes: r.bytes,
                sampled,
                p50_ns: p[0],
                p90_ns: p[1],
                p99_ns: p[2],
                p999_ns: p[3],
                max_ns: r.latency.max_ns,
                buckets: buckets(&r.latency),
            });
        }
    }
    size_classes
}

/// The threads' rows: the snapshot's, with their ops filled.
fn threads(s: &Snapshot) -> Vec<ThreadRow> {
    s.threads
        .iter()
        .map(|t| {
            let ops = t
                .ops
                .iter()
                .enumerate()
                .filter(|(_, r)| r.count > 0 || r.failed > 0)
                .map(|(o, r)| {
                    let p = r.latency.percentiles(&[0.5, 0.99]);
                    let op = ThreadOp {
                        count: r.count,
                        bytes: r.bytes,
                        failed: r.failed,
                        sampled: r.latency.sampled(),
                        p50_ns: p[0],
                        p99_ns: p[1],
                        max_ns: r.latency.max_ns,
                        buckets: buckets(&r.latency),
                    };
                    (OP_NAMES[o].to_string(), op)
                })
                .collect();
            ThreadRow { ops, ..t.row.clone() }
        })
        .collect()
}

/// The trims so far.
fn trim(t: &crate::cold::trim::Stats) -> Trim {
    let d = t.duration.percentiles(&[0.5, 0.99]);
    let us = |ns: u64| ns as f64 / 1000.0;
    let [periodic, ceiling, pressure, api] = t.by_reason;
    Trim {
        interval_ms: t.interval_ms,
        min_bytes: t.min_bytes,
        runs: t.runs,
        skipped: t.skipped,
        released_bytes: t.released_bytes,
        duration_us: DurationUs { p50: us(d[0]), p99: us(d[1]), max: us(t.duration.max_ns) },
        last_unix_ms: t.last_unix_ms,
        by_reason: TrimReasons { periodic, ceiling, pressure, api },
        above_rss_bytes: t.above_rss_bytes,
        pressure_pct: t.pressure_pct,
        glibc_trim_threshold_bytes: t.glibc_trim_threshold_bytes,
    }
}

/// The dump of `s` as the file's text: pretty JSON and a final newline.
pub fn render(s: &Snapshot) -> String {
    dump(s).to_json()
}
