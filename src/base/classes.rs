//! The recording vocabulary: operations, power-of-two size classes and log-linear latency
//! buckets (8 sub-buckets per power of two: at most 12.5% relative error). Pure index arithmetic,
//! shared by the hot path and the reporters; no state, no allocation.

/// Operations recorded per size class. The aligned family (posix_memalign, aligned_alloc,
/// memalign, valloc, pvalloc) is one op; reallocarray is realloc; free_sized and
/// free_aligned_sized are free.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(usize)]
pub enum Op {
    Malloc,
    Calloc,
    Realloc,
    Free,
    Memalign,
}

/// Number of [`Op`] values.
pub const OPS: usize = mallocshim_format::classes::OPS;
/// Op names as they appear in dumps, indexed by [`Op`]; the size classes, their bounds and
/// labels: one table in the format crate, shared with every reader.
pub use mallocshim_format::classes::{class_label, class_of, class_range, CLASSES, OP_NAMES};

/// Latency buckets: values 0..7 exactly, then 8 per power of two up to 2^36 clock ticks.
pub const BUCKETS: usize = 272;

/// The bucket of a latency of `v` clock ticks.
#[inline(always)]
pub fn bucket_of(v: u64) -> usize {
    if v < 8 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize; // floor(log2 v) >= 3
    let b = 8 * (e - 2) + ((v >> (e - 3)) & 7) as usize;
    b.min(BUCKETS - 1)
}

/// The lowest value of bucket `b`, in ticks.
pub fn bucket_low(b: usize) -> u64 {
    if b < 8 {
        return b as u64;
    }
    let e = b / 8 + 2;
    (8 + (b % 8) as u64) << (e - 3)
}

/// The value reported for bucket `b` (its midpoint), in ticks.
pub fn bucket_mid(b: usize) -> u64 {
    if b < 8 {
        return b as u64;
    }
    let e = b / 8 + 2;
    bucket_low(b) + (1u64 << (e - 3)) / 2
}
