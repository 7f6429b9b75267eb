//! The JSON dump, the contract tools and tests read:
//! `{"format":"mallocshim-dump","version":1,"pid","backend","unix_time_ms","uptime_s",
//! "sample_every","totals":{op:{count,bytes}},"size_classes":[{op,min_bytes,max_bytes,count,bytes,
//! sampled,p50_ns,p90_ns,p99_ns,p999_ns,max_ns}],"threads":[{tid,name,state,ops:{op:{count,bytes,
//! sampled,p50_ns,p99_ns,max_ns}}}],"memory":{rss_bytes,vsz_bytes,backend_allocated_bytes,
//! backend_resident_bytes,backend_free_bytes},"trim":{interval_ms,min_bytes,runs,skipped,
//! released_bytes,duration_us:{p50,p99,max},last_unix_ms}}`. `released_bytes` sums each trim's
//! RSS drop (/proc/self/statm before and after the backend's release call); `last_unix_ms` is 0
//! before the first trim. Latencies in ns; sizes in bytes; percentiles and
//! max are 0 where `sampled` is 0; `max_bytes` is null for the last (>64 MiB) class; free is
//! classed by the block's usable size (free(NULL) counts in the <=16 B class with 0 bytes).
//! Fields may be added; these names and meanings stay.

use super::Snapshot;
use crate::classes::class_bounds;
use crate::classes::OP_NAMES;
use serde_json::{json, Map, Value};

pub fn render(s: &Snapshot) -> String {
    let mut totals = Map::new();
    for (o, (count, bytes)) in s.totals().into_iter().enumerate() {
        totals.insert(OP_NAMES[o].into(), json!({"count": count, "bytes": bytes}));
    }
    let mut classes = Vec::new();
    for (o, cs) in s.classes.iter().enumerate() {
        for (c, r) in cs.iter().enumerate() {
            let sampled = r.latency.sampled();
            if r.count == 0 && sampled == 0 {
                continue;
            }
            let (lo, hi) = class_bounds(c);
            // The last class has no upper bound: null (u64::MAX would lose precision in jq/JS).
            let hi = if hi == u64::MAX { Value::Null } else { json!(hi) };
            let p = r.latency.percentiles(&[0.5, 0.9, 0.99, 0.999]);
            classes.push(json!({
                "op": OP_NAMES[o], "min_bytes": lo, "max_bytes": hi, "count": r.count, "bytes": r.bytes,
                "sampled": sampled, "p50_ns": p[0], "p90_ns": p[1], "p99_ns": p[2], "p999_ns": p[3],
                "max_ns": r.latency.max_ns,
            }));
        }
    }
    let threads: Vec<Value> = s
        .threads
        .iter()
        .map(|t| {
            let mut ops = Map::new();
            for (o, r) in t.ops.iter().enumerate() {
                if r.count == 0 {
                    continue;
                }
                let p = r.latency.percentiles(&[0.5, 0.99]);
                ops.insert(
                    OP_NAMES[o].into(),
                    json!({"count": r.count, "bytes": r.bytes, "sampled": r.latency.sampled(),
                           "p50_ns": p[0], "p99_ns": p[1], "max_ns": r.latency.max_ns}),
                );
            }
            json!({"tid": t.tid, "name": t.name, "state": if t.live { "live" } else { "exited" }, "ops": ops})
        })
        .collect();
    let m = &s.memory;
    let t = &s.trim;
    let d = t.duration.percentiles(&[0.5, 0.99]);
    let us = |ns: u64| ns as f64 / 1000.0;
    let v = json!({
        "format": "mallocshim-dump", "version": 1, "pid": s.pid, "backend": s.backend,
        "unix_time_ms": s.unix_time_ms, "uptime_s": s.uptime_s, "sample_every": s.sample_every,
        "totals": totals, "size_classes": classes, "threads": threads,
        "memory": {"rss_bytes": m.rss_bytes, "vsz_bytes": m.vsz_bytes,
                   "backend_allocated_bytes": m.backend.allocated, "backend_resident_bytes": m.backend.resident,
                   "backend_free_bytes": m.backend.free},
        "trim": {"interval_ms": t.interval_ms, "min_bytes": t.min_bytes, "runs": t.runs, "skipped": t.skipped,
                 "released_bytes": t.released_bytes,
                 "duration_us": {"p50": us(d[0]), "p99": us(d[1]), "max": us(t.duration.max_ns)},
                 "last_unix_ms": t.last_unix_ms},
    });
    let mut out = serde_json::to_string_pretty(&v).unwrap_or_default();
    out.push('\n');
    out
}
