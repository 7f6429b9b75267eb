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
//! Added since: `memory` carries the RSS account ([`memory`]: `rss_anon_bytes`, `rss_file_bytes`,
//! `rss_shmem_bytes`, `live_bytes`, `allocator_free_bytes`, `allocator_metadata_bytes` (null
//! where the backend reports none), `allocator_resident_bytes`, `non_heap_bytes`); `trim` carries
//! `by_reason:{periodic,ceiling,pressure,api}`, `above_rss_bytes`, `pressure_pct`; threads carry
//! `comm` (= `name`), `start_routine` (`symbol+0xoff`, or null), `creator_tid`, `start_unix_ms`,
//! and, for exited rows (one per start routine, the `start_routine: null` row gathering the
//! rest), `exited_threads`; every size-class row and thread op carries `buckets`, the raw
//! sampled-latency counts as `[[bucket, count], ...]` (non-zero buckets only), and
//! `latency_buckets:{ns_per_tick,bucket_ns}` gives each bucket's value in ns, so two dumps of one
//! process subtract into the interval between them.

use super::Snapshot;
use super::{Latency, Memory};
use crate::classes::class_bounds;
use crate::classes::OP_NAMES;
use crate::trim::{Stats, REASON_NAMES};
use serde_json::{json, Map, Value};

/// The `memory` object: the old backend figures and the RSS account.
pub fn memory(m: &Memory) -> Value {
    let a = &m.account;
    json!({"rss_bytes": m.rss_bytes, "vsz_bytes": m.vsz_bytes,
           "backend_allocated_bytes": m.backend.allocated, "backend_resident_bytes": m.backend.resident,
           "backend_free_bytes": m.backend.free,
           "rss_anon_bytes": a.rss_anon_bytes, "rss_file_bytes": a.rss_file_bytes,
           "rss_shmem_bytes": a.rss_shmem_bytes, "live_bytes": a.live_bytes,
           "allocator_free_bytes": a.allocator_free_bytes,
           "allocator_metadata_bytes": a.allocator_metadata_bytes,
           "allocator_resident_bytes": a.allocator_resident_bytes, "non_heap_bytes": a.non_heap_bytes})
}

/// The `trim` object.
pub fn trim(t: &Stats) -> Value {
    let d = t.duration.percentiles(&[0.5, 0.99]);
    let us = |ns: u64| ns as f64 / 1000.0;
    let by: Map<String, Value> =
        REASON_NAMES.iter().zip(t.by_reason).map(|(n, v)| (n.to_string(), json!(v))).collect();
    json!({"interval_ms": t.interval_ms, "min_bytes": t.min_bytes, "runs": t.runs, "skipped": t.skipped,
           "released_bytes": t.released_bytes,
           "duration_us": {"p50": us(d[0]), "p99": us(d[1]), "max": us(t.duration.max_ns)},
           "last_unix_ms": t.last_unix_ms, "by_reason": by, "above_rss_bytes": t.above_rss_bytes,
           "pressure_pct": t.pressure_pct})
}

/// Raw sampled-latency counts, `[[bucket, count], ...]` for the non-zero buckets.
pub fn buckets(l: &Latency) -> Value {
    Value::Array(l.buckets.iter().enumerate().filter(|(_, &n)| n > 0).map(|(b, &n)| json!([b, n])).collect())
}

/// `latency_buckets`: the clock's ns per tick and each bucket's value in ns (its midpoint).
pub fn latency_buckets(ns_per_tick: f64) -> Value {
    let l = Latency { buckets: Vec::new(), max_ns: 0, ns_per_tick };
    let ns: Vec<u64> = (0..crate::classes::BUCKETS).map(|b| l.ns(b)).collect();
    json!({"ns_per_tick": ns_per_tick, "bucket_ns": ns})
}

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
                "max_ns": r.latency.max_ns, "buckets": buckets(&r.latency),
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
                           "p50_ns": p[0], "p99_ns": p[1], "max_ns": r.latency.max_ns,
                           "buckets": buckets(&r.latency)}),
                );
            }
            let mut v = json!({"tid": t.tid, "name": t.name, "comm": t.name,
                               "state": if t.live { "live" } else { "exited" }, "ops": ops,
                               "start_routine": t.start_routine, "creator_tid": t.creator_tid,
                               "start_unix_ms": t.start_unix_ms});
            if !t.live {
                v["exited_threads"] = json!(t.exited_threads);
            }
            v
        })
        .collect();
    let npt = crate::clock::ns_per_tick();
    let v = json!({
        "format": "mallocshim-dump", "version": 1, "pid": s.pid, "backend": s.backend,
        "unix_time_ms": s.unix_time_ms, "uptime_s": s.uptime_s, "sample_every": s.sample_every,
        "totals": totals, "size_classes": classes, "threads": threads,
        "memory": memory(&s.memory), "trim": trim(&s.trim), "latency_buckets": latency_buckets(npt),
    });
    let mut out = serde_json::to_string_pretty(&v).unwrap_or_default();
    out.push('\n');
    out
}
