//! What the shim counts: ops, entry points and power-of-two size classes. Pure arithmetic on
//! indexes and byte counts, shared by the shim's hot path (`class_of`, inlined there) and every
//! reader; no state, no allocation but the label strings.

/// Number of ops.
pub const OPS: usize = 5;
/// The ops a dump records per size class, in the shim's order (index = the shim's `Op`). The
/// aligned family (posix_memalign, aligned_alloc, memalign, valloc, pvalloc) is `memalign`;
/// reallocarray is `realloc`; free_sized and free_aligned_sized are `free`.
pub const OP_NAMES: [&str; OPS] = ["malloc", "calloc", "realloc", "free", "memalign"];
/// The ops that allocate (every op but free).
pub const ALLOC_OPS: [&str; 4] = ["malloc", "calloc", "realloc", "memalign"];

/// Number of exported entry points the shim counts per call.
pub const ENTRIES: usize = 13;
/// The exported entry points, in the shim's order (its summary line, `mallocshim_calls`).
pub const ENTRY_NAMES: [&str; ENTRIES] = [
    "malloc",
    "free",
    "calloc",
    "realloc",
    "reallocarray",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "malloc_usable_size",
    "free_sized",
    "free_aligned_sized",
];

/// The op an entry point is counted under; None for `malloc_usable_size` (counted per entry
/// point only).
pub fn op_of_entry(entry: &str) -> Option<&'static str> {
    Some(match entry {
        "malloc" => "malloc",
        "calloc" => "calloc",
        "realloc" | "reallocarray" => "realloc",
        "free" | "free_sized" | "free_aligned_sized" => "free",
        "posix_memalign" | "aligned_alloc" | "memalign" | "valloc" | "pvalloc" => "memalign",
        _ => return None,
    })
}

/// Sort key of an op name: the shim's order, then ops a newer dump adds, by name.
pub fn op_rank(op: &str) -> (usize, &str) {
    (OP_NAMES.iter().position(|o| *o == op).unwrap_or(OPS), op)
}

/// Number of size classes: `<=16 B`, then `(2^k, 2^(k+1)]` up to 64 MiB, then `>64 MiB`.
pub const CLASSES: usize = 24;

/// Upper bound of the last bounded class (64 MiB); requests above it fall in the open class.
pub const TOP_BOUNDED: u64 = 1 << 26;

/// The size class of a request of `size` bytes (free: the block's usable size).
#[inline(always)]
pub fn class_of(size: usize) -> usize {
    // Branch-free: (size - 1) | 15, with 0 kept at 0, is at least 15, so its floor(log2) is at
    // least 3 and equals ceil(log2(size)) - 1 above 16.
    let x = (size.saturating_sub(1) | 15) as u64;
    let floor_log2 = (63 - x.leading_zeros()) as usize;
    (floor_log2 - 3).min(CLASSES - 1)
}

/// Smallest and largest request size of class `c`, in bytes; None for the open last class
/// (`>64 MiB`), written `null` in the dump.
pub fn class_range(c: usize) -> (u64, Option<u64>) {
    match c {
        0 => (0, Some(16)),
        c if c >= CLASSES - 1 => (TOP_BOUNDED + 1, None),
        c => ((1u64 << (c + 3)) + 1, Some(1u64 << (c + 4))),
    }
}

/// Smallest and largest request size of class `c`, in bytes (`u64::MAX` for the last).
pub fn class_bounds(c: usize) -> (u64, u64) {
    let (lo, hi) = class_range(c);
    (lo, hi.unwrap_or(u64::MAX))
}

/// The class whose range is `min_bytes..=max_bytes` (as a dump row gives it), if any.
pub fn class_index(min_bytes: u64, max_bytes: Option<u64>) -> Option<usize> {
    (0..CLASSES).find(|&c| class_range(c) == (min_bytes, max_bytes))
}

/// A byte count as `64`, `4K`, `2M`, `1G` when it is a whole multiple; else plain bytes.
pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// The short label of class `c` in metric and tag names: its upper bound (`16`, `32`, ...
/// `64M`), `inf` for the open last class (Prometheus `size_class`, interval-log tags, text dump).
pub fn class_label(c: usize) -> String {
    match class_range(c).1 {
        None => "inf".into(),
        Some(h) => human_bytes(h),
    }
}

/// The label of a class for tables: `<=64`, `<=4K`, `>64M` for the open last class.
pub fn range_label(min_bytes: u64, max_bytes: Option<u64>) -> String {
    match max_bytes {
        Some(m) => format!("<={}", human_bytes(m)),
        None => format!(">{}", human_bytes(min_bytes.saturating_sub(1))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_tile_the_sizes() {
        assert_eq!(class_range(0), (0, Some(16)));
        for c in 1..CLASSES {
            let (lo, _) = class_range(c);
            assert_eq!(Some(lo - 1), class_range(c - 1).1, "class {c} starts after {}", c - 1);
        }
        assert_eq!(class_range(CLASSES - 2).1, Some(TOP_BOUNDED));
        assert_eq!(class_range(CLASSES - 1), (TOP_BOUNDED + 1, None));
    }

    #[test]
    fn class_of_matches_the_bounds() {
        for c in 0..CLASSES {
            let (lo, hi) = class_bounds(c);
            assert_eq!(class_of(lo as usize), c, "lower edge of {c}");
            if hi != u64::MAX {
                assert_eq!(class_of(hi as usize), c, "upper edge of {c}");
                assert_eq!(class_of(hi as usize + 1), c + 1, "past the upper edge of {c}");
            }
        }
        assert_eq!(class_of(0), 0);
        assert_eq!(class_of(usize::MAX), CLASSES - 1);
        assert_eq!(class_index(65, Some(128)), Some(3));
        assert_eq!(class_index(TOP_BOUNDED + 1, None), Some(CLASSES - 1));
        assert_eq!(class_index(3, Some(128)), None);
    }

    #[test]
    fn labels() {
        let short: Vec<String> = (0..CLASSES).map(class_label).collect();
        assert_eq!(&short[..4], ["16", "32", "64", "128"]);
        assert_eq!(short[6], "1K");
        assert_eq!(short[16], "1M");
        assert_eq!(short[CLASSES - 2], "64M");
        assert_eq!(short[CLASSES - 1], "inf");
        assert_eq!(range_label(0, Some(16)), "<=16");
        assert_eq!(range_label(2049, Some(4096)), "<=4K");
        assert_eq!(range_label(TOP_BOUNDED + 1, None), ">64M");
        assert_eq!(human_bytes(3 << 30), "3G");
        assert_eq!(human_bytes(1500), "1500");
    }

    #[test]
    fn entries_map_to_ops() {
        for e in ENTRY_NAMES {
            match op_of_entry(e) {
                Some(op) => assert!(OP_NAMES.contains(&op), "{e} -> {op}"),
                None => assert_eq!(e, "malloc_usable_size"),
            }
        }
        assert_eq!(op_rank("free"), (3, "free"));
        assert!(op_rank("zzz") > op_rank("memalign"));
    }
}
