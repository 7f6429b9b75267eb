//! HdrHistogram interval log (HistogramLogAnalyzer reads it; each tag is its own series): one
//! tagged histogram per op and size class (`malloc_64`, ...), values in ns, written by the
//! hdrhistogram crate's `interval_log` writer with V2+DEFLATE encoding. Each dump holds the
//! interval since the previous dump of this process (the first: since the process started):
//! the sampled counts of this dump minus those of the previous one, stamped with the interval's
//! start (seconds since the process start, the log's `BaseTime`) and length. The previous
//! counts are kept here, updated by each dump (dumps are serialised by `crate::cold::dump`); a dump
//! that finds them busy (only possible in a child forked mid-dump) writes the cumulative
//! counts since the process started.

use super::{Latency, Snapshot};
use crate::base::classes::class_label;
use crate::base::classes::OP_NAMES;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The previous dump: its time (seconds since the process start) and bucket counts per op and
/// size class.
struct Prev {
    at_s: f64,
    buckets: Vec<Vec<Vec<u64>>>,
}

static PREV: Mutex<Option<Prev>> = Mutex::new(None);

pub fn render(s: &Snapshot) -> Vec<u8> {
    let mut out = Vec::new();
    let start =
        SystemTime::UNIX_EPOCH + Duration::from_millis(s.unix_time_ms) - Duration::from_secs_f64(s.uptime_s);
    let now: Vec<Vec<Vec<u64>>> =
        s.classes.iter().map(|cs| cs.iter().map(|r| r.latency.buckets.clone()).collect()).collect();
    let mut guard = PREV.try_lock().ok();
    let prev = guard.as_mut().and_then(|g| g.take());
    let from_s = prev.as_ref().map(|p| p.at_s.min(s.uptime_s)).unwrap_or(0.0);
    let mut ser = V2DeflateSerializer::new();
    let mut w = IntervalLogWriterBuilder::new()
        .add_comment(&format!(
            "mallocshim dump: pid {} backend {} sample 1 in {} (values in ns); interval {:.3}-{:.3} s since the process start",
            s.pid, s.backend, s.sample_every, from_s, s.uptime_s
        ))
        .with_start_time(start)
        .with_base_time(start)
        .with_max_value_divisor(1.0)
        .begin_log_with(&mut out, &mut ser)
        .expect("writing to a Vec cannot fail");
    for (op, cs) in s.classes.iter().enumerate() {
        for (c, r) in cs.iter().enumerate() {
            let before = prev.as_ref().and_then(|p| p.buckets.get(op)).and_then(|x| x.get(c));
            let buckets: Vec<u64> = r
                .latency
                .buckets
                .iter()
                .enumerate()
                .map(|(b, &n)| n.saturating_sub(before.and_then(|v| v.get(b)).copied().unwrap_or(0)))
                .collect();
            let interval = Latency { buckets, max_ns: r.latency.max_ns, ns_per_tick: r.latency.ns_per_tick };
            if interval.sampled() == 0 {
                continue;
            }
            let tag = format!("{}_{}", OP_NAMES[op], class_label(c));
            let h = interval.histogram();
            let _ = w.write_histogram(
                &h,
                Duration::from_secs_f64(from_s),
                Duration::from_secs_f64((s.uptime_s - from_s).max(0.001)),
                Tag::new(&tag),
            );
        }
    }
    drop(w);
    if let Some(g) = guard.as_mut() {
        **g = Some(Prev { at_s: s.uptime_s, buckets: now });
    }
    out
}
