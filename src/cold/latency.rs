//! Sampled latencies as the reporting side sees them: raw log-linear bucket counts converted to
//! ns, percentiles through hdrhistogram. Used by `report` (per op, size class and thread) and by
//! `trim` (trim durations). Off the hot path: it allocates.

use crate::base::classes::{bucket_mid, BUCKETS};
use core::sync::atomic::Ordering::Relaxed;
use hdrhistogram::Histogram;

/// Sampled latencies of one row, converted to nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct Latency {
    /// Samples per bucket (`classes::BUCKETS` entries; bucket midpoints via `ns`).
    pub buckets: Vec<u64>,
    /// Largest sample, in ns.
    pub max_ns: u64,
    /// ns per clock tick used for the conversion.
    pub ns_per_tick: f64,
}

impl Latency {
    pub(crate) fn from_atomics(
        b: &[core::sync::atomic::AtomicU64],
        max_ticks: u64,
        ns_per_tick: f64,
    ) -> Latency {
        let buckets: Vec<u64> = b.iter().map(|x| x.load(Relaxed)).collect();
        // Rounded as bucket values are (at least 1 ns once sampled), so p50 <= ... <= max holds.
        let max_ns =
            if buckets.iter().any(|&n| n > 0) { ((max_ticks as f64 * ns_per_tick) as u64).max(1) } else { 0 };
        Latency { buckets, max_ns, ns_per_tick }
    }

    pub(crate) fn add(&mut self, o: &Latency) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; BUCKETS];
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.max_ns = self.max_ns.max(o.max_ns);
        self.ns_per_tick = o.ns_per_tick;
    }

    /// Number of sampled calls.
    pub fn sampled(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The value reported for bucket `b`, in ns (its midpoint; at least 1).
    pub fn ns(&self, b: usize) -> u64 {
        ((bucket_mid(b) as f64 * self.ns_per_tick) as u64).max(1)
    }

    /// An HdrHistogram of the samples (ns, 2 significant digits: finer than the 12.5% of the
    /// recording buckets). Auto-resizing, so it only spans the values seen: a fixed 1 ns..100 s
    /// range would zero ~200 KB per histogram, and a dump makes one per thread and op.
    pub fn histogram(&self) -> Histogram<u64> {
        let mut h = Histogram::<u64>::new(2).expect("valid hdrhistogram precision");
        for (b, &n) in self.buckets.iter().enumerate() {
            if n > 0 {
                let _ = h.record_n(self.ns(b).min(100_000_000_000), n);
            }
        }
        h
    }

    /// Percentiles (q in 0..=1) from hdrhistogram, capped at the exact maximum; 0 without samples.
    pub fn percentiles(&self, qs: &[f64]) -> Vec<u64> {
        if self.sampled() == 0 {
            return vec![0; qs.len()];
        }
        let h = self.histogram();
        qs.iter().map(|&q| h.value_at_quantile(q).min(self.max_ns.max(1))).collect()
    }
}
