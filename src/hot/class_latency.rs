//! The sampled latencies per op and size class, all threads together: [`STRIPES`] copies of the
//! histograms and their maxima. A timed call writes the stripe of the CPU it runs on (read from
//! the kernel's rseq area that glibc 2.35+ registers for every thread: `base::sys::cpu_hint`, one
//! load), or, without rseq, the stripe its slot was given at claim (`Slot::stripe`: the slot's
//! index in the pool modulo [`STRIPES`]).
//! Readers add the stripes up. Owns the stripes and the mark of which were ever written; must
//! not allocate or lock.
//!
//! Why stripes: every timed call (1 in `MALLOCSHIM_SAMPLE`) adds one to a (op, class, bucket)
//! cell with `fetch_add`, and most calls of a workload fall in a few cells, so with one copy every
//! core wrote the same few cache lines. On 16 cores, every call timed, what the shim added per
//! malloc/free pair grew from +145 ns at 1 thread to +530 ns at 16 under jemalloc with one copy,
//! and stayed at +146..+159 ns from 1 to 8 threads with 8 copies by slot, +250 ns at 16 (two
//! threads a copy): docs/results/scale.md. A copy per thread would be 261 KiB a thread; by CPU,
//! the threads that run at once write different copies on up to [`STRIPES`] CPUs, whatever the
//! number of threads, and a thread moved between the CPU's reading and the add only shares a
//! line for that add (the adds are atomic: a stale CPU costs time, never a count).
//! Memory: the stripes are zeroed statics (bss), 16 x 262 KiB of address space; a stripe's pages
//! are touched only by the cells written there (a page holds two (op, class) rows of buckets), so
//! a program that runs on one CPU maps one stripe's pages and a server busy on 16 CPUs or more
//! about 16 times what one copy mapped (a few hundred KiB each). A reader reads only stripes
//! marked written ([`each_used`]), so a dump maps no page no call wrote (a page read but never
//! written maps the zero page, which a fork copies: docs/results/fork.md).

use crate::base::classes::{BUCKETS, CLASSES, OPS};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Number of copies; a power of two.
pub const STRIPES: usize = 16;

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

/// Bit i set: stripe i was written (read by every timed call, written once per stripe).
static USED: AtomicU32 = AtomicU32::new(0);

/// The stripe of the slot at pool index `index` (a slot's claim): used without rseq.
pub fn stripe_for(index: usize) -> u32 {
    (index & (STRIPES - 1)) as u32
}

/// Adds one timed call of `d` ticks in bucket `b` of op `o`, class `c`, to stripe
/// `stripe % STRIPES` (a CPU number or a slot's stripe).
#[inline(always)]
pub fn add(stripe: u32, o: usize, c: usize, b: usize, d: u64) {
    let i = stripe as usize & (STRIPES - 1);
    if USED.load(Relaxed) & (1 << i) == 0 {
        USED.fetch_or(1 << i, Relaxed);
    }
    // SAFETY: `i` is masked below STRIPES; `o` < OPS, `c` < CLASSES, `b` < BUCKETS by
    // construction of `Op`, `class_of` and `bucket_of` (the caller's).
    unsafe {
        let s = STRIPE.get_unchecked(i);
        s.hist.get_unchecked(o).get_unchecked(c).get_unchecked(b).fetch_add(1, Relaxed);
        // Loaded first: `fetch_max` is a `lock cmpxchg` loop that takes the line exclusively
        // even when the maximum stands, which it almost always does.
        let m = s.max.get_unchecked(o).get_unchecked(c);
        if d > m.load(Relaxed) {
            m.fetch_max(d, Relaxed);
        }
    }
}

/// Calls `f` with each stripe ever written.
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
        // The open class's slowest bucket: no real call of this test process (whose own
        // allocations go through the shim) lands there.
        let (o, c, b, d) = (1, CLASSES - 1, BUCKETS - 1, u64::MAX / 2);
        let sum = || {
            let (mut n, mut max, mut seen) = (0, 0, 0u32);
            each_used(|s| {
                n += s.hist[o][c][b].load(Relaxed);
                max = max.max(s.max[o][c].load(Relaxed));
            });
            for i in [3, 5] {
                seen += (USED.load(Relaxed) >> i) & 1;
            }
            (n, max, seen)
        };
        let n0 = sum().0;
        add(3, o, c, b, d - 1);
        add(5 + STRIPES as u32, o, c, b, d);
        add(5, o, c, b, 10);
        // Both stripes written are read; a CPU number wraps onto its stripe.
        assert_eq!(sum(), (n0 + 3, d, 2));
        assert_eq!(STRIPE[5].hist[o][c][b].load(Relaxed), 2);
    }
}
