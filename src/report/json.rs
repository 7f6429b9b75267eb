//! The JSON dump, written through the typed schema of the format crate
//! (`mallocshim_format::Dump`; every field, its unit and its source: docs/dump-format.md). This
//! module only fills the schema from a [`Snapshot`]: percentiles and max are 0 where `sampled`
//! is 0; `max_bytes` is null for the last (>64 MiB) class; free is classed by the block's usable
//! size (free(NULL) counts in the <=16 B class with 0 bytes). Runs on the shim's own thread (or a
//! C API caller) under the reentrancy guard: it allocates.

use super::Snapshot;
use crate::classes::{class_range, OP_NAMES};
use mallocshim_format::dump::{STATE_EXITED, STATE_LIVE};
use mallocshim_format::{ClassRow, Dump, DurationUs, Memory, ThreadOp, ThreadRow, Total, Trim};

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
                    };
                    (OP_NAMES[o].to_string(), op)
                })
                .collect();
            let state = if t.live { STATE_LIVE } else { STATE_EXITED };
            ThreadRow { tid: t.tid, name: t.name.clone(), state: state.into(), ops }
        })
        .collect();
    let m = &s.memory;
    let t = &s.trim;
    let d = t.duration.percentiles(&[0.5, 0.99]);
    let us = |ns: u64| ns as f64 / 1000.0;
    Dump {
        format: mallocshim_format::FORMAT.into(),
        version: mallocshim_format::VERSION,
        pid: s.pid,
        backend: s.backend.into(),
        unix_time_ms: s.unix_time_ms,
        uptime_s: s.uptime_s,
        sample_every: s.sample_every.into(),
        totals,
        size_classes,
        threads,
        memory: Memory {
            rss_bytes: m.rss_bytes,
            vsz_bytes: m.vsz_bytes,
            backend_allocated_bytes: m.backend.allocated,
            backend_resident_bytes: m.backend.resident,
            backend_free_bytes: m.backend.free,
        },
        trim: Trim {
            interval_ms: t.interval_ms,
            min_bytes: t.min_bytes,
            runs: t.runs,
            skipped: t.skipped,
            released_bytes: t.released_bytes,
            duration_us: DurationUs { p50: us(d[0]), p99: us(d[1]), max: us(t.duration.max_ns) },
            last_unix_ms: t.last_unix_ms,
        },
    }
}

/// The dump of `s` as the file's text: pretty JSON and a final newline.
pub fn render(s: &Snapshot) -> String {
    dump(s).to_json()
}
