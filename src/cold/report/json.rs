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
use mallocshim_format::dump::{STATE_EXITED, STATE_LIVE};
use mallocshim_format::{
    Buckets, ClassRow, Dump, DurationUs, LatencyBuckets, Memory, ThreadOp, ThreadRow, Total, Trim,
    TrimReasons,
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
        .enumerate()
        .map(|(o, (count, bytes))| (OP_NAMES[o].to_string(), Total { count, bytes }))
        .collect();
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
    let threads = s
        .threads
        .iter()
        .map(|t| {
            let ops = t
                .ops
                .iter()
                .enumerate()
                .filter(|(_, r)| r.count > 0)
                .map(|(o, r)| {
                    let p = r.latency.percentiles(&[0.5, 0.99]);
                    let op = ThreadOp {
                        count: r.count,
                        bytes: r.bytes,
                        sampled: r.latency.sampled(),
                        p50_ns: p[0],
                        p99_ns: p[1],
                        max_ns: r.latency.max_ns,
                        buckets: buckets(&r.latency),
                    };
                    (OP_NAMES[o].to_string(), op)
                })
                .collect();
            let state = if t.live { STATE_LIVE } else { STATE_EXITED };
            ThreadRow {
                tid: t.tid,
                name: t.name.clone(),
                state: state.into(),
                ops,
                comm: t.name.clone(),
                start_routine: t.start_routine.clone(),
                creator_tid: t.creator_tid,
                start_unix_ms: t.start_unix_ms,
                exited_threads: (!t.live).then_some(t.exited_threads),
            }
        })
        .collect();
    let m = &s.memory;
    let a = &m.account;
    let t = &s.trim;
    let d = t.duration.percentiles(&[0.5, 0.99]);
    let us = |ns: u64| ns as f64 / 1000.0;
    let [periodic, ceiling, pressure, api] = t.by_reason;
    Dump {
        format: mallocshim_format::FORMAT.into(),
        version: mallocshim_format::VERSION,
        pid: s.pid,
        backend: s.backend.into(),
        unix_time_ms: s.unix_time_ms,
        uptime_s: s.uptime_s,
        sample_every: s.sample_every.into(),
        profiling: s.profiling,
        totals,
        size_classes,
        threads,
        memory: Memory {
            rss_bytes: m.rss_bytes,
            vsz_bytes: m.vsz_bytes,
            backend_allocated_bytes: m.backend.allocated,
            backend_resident_bytes: m.backend.resident,
            backend_free_bytes: m.backend.free,
            rss_anon_bytes: a.rss_anon_bytes,
            rss_file_bytes: a.rss_file_bytes,
            rss_shmem_bytes: a.rss_shmem_bytes,
            live_bytes: a.live_bytes,
            allocator_free_bytes: a.allocator_free_bytes,
            allocator_metadata_bytes: a.allocator_metadata_bytes,
            allocator_resident_bytes: a.allocator_resident_bytes,
            non_heap_bytes: a.non_heap_bytes,
        },
        trim: Trim {
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
        },
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
    }
}

/// The dump of `s` as the file's text: pretty JSON and a final newline.
pub fn render(s: &Snapshot) -> String {
    dump(s).to_json()
}
