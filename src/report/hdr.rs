//! HdrHistogram interval log (HistogramLogAnalyzer reads it; each tag is its own series): one
//! tagged histogram per op and size class (`malloc_64`, ...), values in ns, written by the
//! hdrhistogram crate's `interval_log` writer with V2+DEFLATE encoding.

use super::Snapshot;
use crate::classes::class_label;
use crate::classes::OP_NAMES;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use std::time::{Duration, SystemTime};

pub fn render(s: &Snapshot) -> Vec<u8> {
    let mut out = Vec::new();
    let start =
        SystemTime::UNIX_EPOCH + Duration::from_millis(s.unix_time_ms) - Duration::from_secs_f64(s.uptime_s);
    let mut ser = V2DeflateSerializer::new();
    let mut w = IntervalLogWriterBuilder::new()
        .add_comment(&format!(
            "mallocshim dump: pid {} backend {} sample 1 in {} (values in ns)",
            s.pid, s.backend, s.sample_every
        ))
        .with_start_time(start)
        .with_base_time(start)
        .with_max_value_divisor(1.0)
        .begin_log_with(&mut out, &mut ser)
        .expect("writing to a Vec cannot fail");
    for (op, cs) in s.classes.iter().enumerate() {
        for (c, r) in cs.iter().enumerate() {
            if r.latency.sampled() == 0 {
                continue;
            }
            let tag = format!("{}_{}", OP_NAMES[op], class_label(c));
            let h = r.latency.histogram();
            let _ = w.write_histogram(
                &h,
                Duration::ZERO,
                Duration::from_secs_f64(s.uptime_s.max(0.001)),
                Tag::new(&tag),
            );
        }
    }
    drop(w);
    out
}
