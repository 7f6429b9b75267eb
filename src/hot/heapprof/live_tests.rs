//! The live set's table as it grows and shrinks: every sample kept is found, the filter bit of
//! a bucket stays set while a sample of it lives and is cleared after the last one, and the
//! pages written follow the samples (a table of the first size for a few samples).

use super::*;

/// Addresses no allocation of this test process (whose own calls go through the shim, heap
/// profiles on) will have: high in the address space, 16-byte aligned, spread by the hash.
fn addr(i: u64) -> u64 {
    0x7ff0_0000_0000 + i * 0x1_0010
}

fn shard_table(a: u64) -> (usize, u64) {
    let s = shard_of(a);
    let _l = s.lock.lock();
    // SAFETY: under the shard's lock.
    let t = unsafe { &*s.t.get() };
    (t.cap, t.written)
}

#[test]
fn the_table_grows_with_its_samples_and_the_filter_follows_them() {
    assert!(ensure());
    let n = 20_000u64;
    let live = |i: u64| Live { addr: addr(i), size: 64, scale: 1.0, rec: 0, _pad: 0 };
    // A few samples: the first size, one page written.
    for i in 0..4 {
        put(live(i));
    }
    let (cap, written) = shard_table(addr(0));
    assert_eq!(cap, PAGE_SLOTS, "a table of one page for a few samples");
    assert_eq!(written, 1);
    for i in 4..n {
        put(live(i));
    }
    assert!((0..n).all(|i| filter_hit(addr(i) as usize)));
    // 20,000 over 16 shards: each grew to 2,048 or 4,096 slots.
    let (cap, _) = shard_table(addr(0));
    assert!((2048..=SHARD_SLOTS).contains(&cap), "cap {cap}");
    // Take every other one out: the rest still found, each removed one gone.
    for i in (0..n).step_by(2) {
        assert_eq!(remove(addr(i) as usize).map(|e| e.addr), Some(addr(i)), "{i}");
        assert!(remove(addr(i) as usize).is_none());
    }
    for i in (1..n).step_by(2) {
        assert!(filter_hit(addr(i) as usize), "{i}: its bit was cleared with a sample alive");
    }
    for i in (1..n).step_by(2) {
        assert_eq!(remove(addr(i) as usize).map(|e| e.size), Some(64), "{i}");
    }
    // No sample of these buckets left: no bit set, unless a sample of the process itself
    // (whose heap profile is on) hashes to the same bucket, which 20,000 buckets out of 2^19
    // make rare.
    let still = (0..n).filter(|&i| filter_hit(addr(i) as usize)).count();
    assert!(still < 20, "{still} filter bits still set after every sample left");
}
