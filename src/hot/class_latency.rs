//! The sampled latencies per op and size class, all threads together: [`STRIPES`] copies of the
//! histograms and their maxima, each thread writing the stripe its slot was given at claim
//! (`Slot::stripe`: the slot's index in the pool modulo [`STRIPES`], so threads that run at the
//! same time, holding different slots, write different copies). Readers add the stripes up.
//! Owns the stripes and the mark of which were ever written; must not allocate or lock.
//!
//! Why stripes: every timed call (1 in `MALLOCSHIM_SAMPLE`) adds one to a (op, class, bucket)
//! cell with `fetch_add`, and most calls of a workload fall in a few cells, so with one copy every
//! core wrote the same few cache lines (docs/results/scale.md, "What the 1 → 2 growth points
//! at"). A copy per thread would be 261 KiB a thread; a stripe is shared by the threads whose
//! slot indexes are equal modulo [`STRIPES`], at most `1/STRIPES` of the threads that run at once.
//! Memory: the stripes are zeroed statics (bss), 8 x 262 KiB of address space; a stripe's pages are
//! touched only by the cells its threads write (a page holds two (op, class) rows of buckets), so
//! a single-threaded program maps one stripe's pages and a server with at least [`STRIPES`] busy
//! threads about [`STRIPES`] times what one copy mapped. A reader reads only stripes marked
//! written ([`each_used`]), so a dump maps no page a thread never wrote (a page read but never
//! written maps the zero page, which a fork copies: docs/results/fork.md).

use crate::base::classes::{BUCKETS, CLASSES, OPS};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Number of copies; a power of two.
pub const STRIPES: usize = 8;

/// One copy of the per-class latency histograms (buckets by `base::classes::bucket_of`, in
/// clock ticks) and their maxima (ticks).
#[repr(C, align(64))]
pub struct Stripe {
    pub hist: [[[AtomicU64; BUCKETS]; CLASSES]; OPS],
    pub max: [[AtomicU64; CLASSES]; OPS],
}

// Initialisers of the static below, never shared: each use of a const is a fresh value, which is
// the point here, so clippy's warnings against interior-mutable and large consts do not apply.
#[allow(clippy::declare_interior_mutable_const)]
const Z: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const ZB: [AtomicU64; BUCKETS] = [Z; BUCKETS];
#[allow(clippy::declare_interior_mutable_const)]
const ZC: [AtomicU64; CLASSES] = [Z; CLASSES];
#[allow(clippy::declare_interior_mutable_const, clippy::large_const_arrays)]
const ZCB: [[AtomicU64; BUCKETS]; CLASSES] = [ZB; CLASSES];

static STRIPE: [Stripe; STRIPES] = [const { Stripe { hist: [ZCB; OPS], max: [ZC; OPS] } }; STRIPES];

/// Bit i set: stripe i was given to a slot (stripe 0, the shared sinks', is always read).
static USED: AtomicU32 = AtomicU32::new(1);

/// The stripe of the slot at pool index `index`, marked used (cold: a slot's claim).
pub fn stripe_for(index: usize) -> u32 {
    let i = index & (STRIPES - 1);
    if USED.load(Relaxed) & (1 << i) == 0 {
        USED.fetch_or(1 << i, Relaxed);
    }
    i as u32
}

/// Adds one timed call of `d` ticks in bucket `b` of op `o`, class `c`, to stripe `stripe`.
#[inline(always)]
pub fn add(stripe: u32, o: usize, c: usize, b: usize, d: u64) {
    // SAFETY: `stripe` is masked below STRIPES; `o` < OPS, `c` < CLASSES, `b` < BUCKETS by
    // construction of `Op`, `class_of` and `bucket_of` (the caller's).
    unsafe {
        let s = STRIPE.get_unchecked(stripe as usize & (STRIPES - 1));
        s.hist.get_unchecked(o).get_unchecked(c).get_unchecked(b).fetch_add(1, Relaxed);
        // Loaded first: `fetch_max` is a `lock cmpxchg` loop that takes the line exclusively
        // even when the maximum stands, which it almost always does.
        let m = s.max.get_unchecked(o).get_unchecked(c);
        if d > m.load(Relaxed) {
            m.fetch_max(d, Relaxed);
        }
    }
}

/// Calls `f` with each stripe ever given to a slot (and stripe 0).
pub fn each_used(mut f: impl FnMut(&Stripe)) {
    let used = USED.load(Relaxed);
    for (i, s) in STRIPE.iter().enumerate() {
        if used & (1 << i) != 0 {
            f(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::Ordering::Relaxed;

    #[test]
    fn indexes_spread_over_the_stripes_and_are_read_back() {
        let got: Vec<u32> = (0..2 * STRIPES).map(stripe_for).collect();
        assert_eq!(&got[..STRIPES], (0..STRIPES as u32).collect::<Vec<_>>().as_slice());
        assert_eq!(&got[STRIPES..], &got[..STRIPES]);
        add(3, 1, 2, 5, 70);
        add(5, 1, 2, 5, 90);
        add(5, 1, 2, 6, 10);
        let (mut n, mut max, mut seen) = (0, 0, 0);
        each_used(|s| {
            seen += 1;
            n += s.hist[1][2][5].load(Relaxed) + s.hist[1][2][6].load(Relaxed);
            max = max.max(s.max[1][2].load(Relaxed));
        });
        assert_eq!((seen, n, max), (STRIPES, 3, 90));
    }
}
