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
pub const OPS: usize = 5;
/// Op names as they appear in dumps, indexed by [`Op`].
pub const OP_NAMES: [&str; OPS] = ["malloc", "calloc", "realloc", "free", "memalign"];

/// Number of size classes: `<=16 B`, then `(2^k, 2^(k+1)]` up to 64 MiB, then `>64 MiB`.
pub const CLASSES: usize = 24;

/// The size class of a request of `size` bytes (free: the block's usable size).
#[inline(always)]
pub fn class_of(size: usize) -> usize {
    // Branch-free: (size - 1) | 15, with 0 kept at 0, is at least 15, so its floor(log2) is at
    // least 3 and equals ceil(log2(size)) - 1 above 16.
    let x = (size.saturating_sub(1) | 15) as u64;
    let floor_log2 = (63 - x.leading_zeros()) as usize;
    (floor_log2 - 3).min(CLASSES - 1)
}

/// Smallest and largest request size of class `c`, in bytes (`usize::MAX` for the last).
pub fn class_bounds(c: usize) -> (u64, u64) {
    match c {
        0 => (0, 16),
        c if c >= CLASSES - 1 => ((1u64 << 26) + 1, u64::MAX),
        c => ((1u64 << (c + 3)) + 1, 1u64 << (c + 4)),
    }
}

/// A short label for class `c`: `16`, `32`, ... `64M`, `inf` (its upper bound).
pub fn class_label(c: usize) -> String {
    let (_, hi) = class_bounds(c);
    match hi {
        u64::MAX => "inf".into(),
        h if h >= 1 << 20 => format!("{}M", h >> 20),
        h if h >= 1 << 10 => format!("{}K", h >> 10),
        h => h.to_string(),
    }
}

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
