//! The sampled latencies per op and size class, all threads together: [`STRIPES`] copies of the
//! histograms and their maxima. A timed call writes the stripe of the CPU it runs on (read from
//! the kernel's rseq area that glibc 2.35+ registers for every thread: `base::sys::cpu_hint`, one
//! load), or, without rseq, the stripe its slot was given at claim (`Slot::stripe`: the slot's
//! index in the pool modulo [`STRIPES`]).
//! Readers add the stripes up. Owns the stripes and the marks of which rows were ever written;
//! must not allocate or lock.
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
//! Memory: the stripes are taken at initialisation from the shim's reservation
//! (`base::region`, 16 x 262 KiB of address space, not the library's `.bss`, whose pages stay in
//! two 2 MiB ranges: tests/fork.rs); a stripe's pages are touched only by the cells written
//! there (a row of 272 buckets is 2,176 bytes, so a written row maps one or two pages), so a
//! program that runs on one CPU maps one stripe's pages and a server busy on 16 CPUs or more up
//! to 16 times that: mariadbd under sysbench writes 25-34 (op, class) rows, at most ~270 KiB a
//! stripe, ~4.3 MiB with all 16 written (one copy: at most 261 KiB). Each stripe marks the (op, class) rows it wrote, and a reader
//! reads only those ([`each_row`]), so a dump maps few pages no call wrote (a page read but never
//! written maps the zero page, which a fork copies: docs/results/fork.md). Without the
//! reservation's memory (an address-space limit) no per-class latency is kept; the per-thread
//! latencies are.

use crate::base::classes::{BUCKETS, CLASSES, OPS};
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::*};

/// Number of copies; a power of two.
pub const STRIPES: usize = 16;

/// One copy of the per-class latency histograms (buckets by `base::classes::bucket_of`, in
/// clock ticks) and their maxima (ticks), with the marks of the rows written.
#[repr(C, align(64))]
pub struct Stripe {
    /// Bit `o * CLASSES + c` set: row (o, c) was written.
    rows: [AtomicU64; ROW_WORDS],
    max: [[AtomicU64; CLASSES]; OPS],
    hist: [[[AtomicU64; BUCKETS]; CLASSES]; OPS],
}

const ROW_WORDS: usize = (OPS * CLASSES).div_ceil(64);

/// The stripes, `STRIPES` of them side by side (null until [`init`], or without memory).
static BASE: AtomicPtr<Stripe> = AtomicPtr::new(core::ptr::null_mut());

/// Takes the stripes' memory (initialisation, before any call is recorded).
pub fn init() {
    if BASE.load(Relaxed).is_null() {
        let p = crate::base::region::take(STRIPES * core::mem::size_of::<Stripe>());
        // Zeroed memory is a valid array of empty stripes.
        BASE.store(p.cast(), Release);
    }
}

/// The stripe of the slot at pool index `index` (a slot's claim): used without rseq.
pub fn stripe_for(index: usize) -> u32 {
    (index & (STRIPES - 1)) as u32
}

/// Adds one timed call of `d` ticks in bucket `b` of op `o`, class `c`, to stripe
/// `stripe % STRIPES` (a CPU number or a slot's stripe).
#[inline(always)]
pub fn add(stripe: u32, o: usize, c: usize, b: usize, d: u64) {
    let base = BASE.load(Acquire);
    if base.is_null() {
        return;
    }
    let row = o * CLASSES + c;
    // SAFETY: `base` holds STRIPES zeroed stripes for the life of the process and the index is
    // masked below STRIPES; `o` < OPS, `c` < CLASSES, `b` < BUCKETS by construction of `Op`,
    // `class_of` and `bucket_of` (the caller's), so `row / 64` < ROW_WORDS.
    unsafe {
        let s = &*base.add(stripe as usize & (STRIPES - 1));
        let mark = s.rows.get_unchecked(row / 64);
        if mark.load(Relaxed) & (1 << (row % 64)) == 0 {
            mark.fetch_or(1 << (row % 64), Relaxed);
        }
        s.hist.get_unchecked(o).get_unchecked(c).get_unchecked(b).fetch_add(1, Relaxed);
        // Loaded first: `fetch_max` is a `lock cmpxchg` loop that takes the line exclusively
        // even when the maximum stands, which it almost always does.
        let m = s.max.get_unchecked(o).get_unchecked(c);
        if d > m.load(Relaxed) {
            m.fetch_max(d, Relaxed);
        }
    }
}

/// Calls `f(o, c, buckets, max)` with each row of each stripe that a call wrote (a row is
/// marked before its first add, so a row read may still be all zeros).
pub fn each_row(mut f: impl FnMut(usize, usize, &[AtomicU64; BUCKETS], u64)) {
    let base = BASE.load(Acquire);
    if base.is_null() {
        return;
    }
    for i in 0..STRIPES {
        // SAFETY: as in `add`.
        let s = unsafe { &*base.add(i) };
        for o in 0..OPS {
            for c in 0..CLASSES {
                let row = o * CLASSES + c;
                if s.rows[row / 64].load(Relaxed) & (1 << (row % 64)) != 0 {
                    f(o, c, &s.hist[o][c], s.max[o][c].load(Relaxed));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_spread_over_the_stripes_and_are_read_back() {
        init();
        let got: Vec<u32> = (0..2 * STRIPES).map(stripe_for).collect();
        assert_eq!(&got[..STRIPES], (0..STRIPES as u32).collect::<Vec<_>>().as_slice());
        assert_eq!(&got[STRIPES..], &got[..STRIPES]);
        // The open class's slowest bucket: no real call of this test process (whose own
        // allocations go through the shim) lands there.
        let (o, c, b, d) = (1, CLASSES - 1, BUCKETS - 1, u64::MAX / 2);
        let sum = || {
            let (mut n, mut max, mut rows) = (0, 0, 0);
            each_row(|ro, rc, h, m| {
                if (ro, rc) == (o, c) {
                    rows += 1;
                    n += h[b].load(Relaxed);
                    max = max.max(m);
                }
            });
            (n, max, rows)
        };
        let n0 = sum().0;
        add(3, o, c, b, d - 1);
        add(5 + STRIPES as u32, o, c, b, d);
        add(5, o, c, b, 10);
        // Both stripes written are read, once each; a CPU number wraps onto its stripe.
        assert_eq!(sum(), (n0 + 3, d, 2));
    }
}
