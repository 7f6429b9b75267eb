//! The heap profile's records (one per distinct stack and thread, with the weighted allocation
//! totals; append-only), keyed by the stack's id in [`super::stacks`] and the thread's tid, so a
//! lookup compares two integers. Sharded by the key's hash into [`SHARDS`] shards, each with its
//! own [`Lock`]: two threads sampling at different sites rarely meet. The bound is global and
//! exact ([`MAX_RECORDS`], one atomic count); each shard has room for twice its fair share, in
//! memory mapped once with MAP_NORESERVE and filled in order (pages are touched as records
//! arrive), so an uneven spread never drops a record the bound would keep.
//! Never allocates; nothing here runs under another shard's lock.

use super::lock::Shard;
use super::stacks;
use core::sync::atomic::{AtomicUsize, Ordering::*};

/// Shards (a power of two).
pub const SHARDS: usize = 16;
/// Most distinct (stack, thread) records, all shards together.
pub const MAX_RECORDS: usize = 1 << 15;
/// Records one shard can hold.
pub const SHARD_CAP: usize = MAX_RECORDS * 2 / SHARDS;
const HEADS: usize = (1 << 16) / SHARDS;

/// Records held, all shards together (the exact bound).
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// One (stack, thread) pair in the tables.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Entry {
    /// Its stack's id in [`stacks`].
    stack: u32,
    tid: u32,
    /// Next record in the same hash bucket (+1; 0 = none).
    next: u32,
    /// The thread's start routine (0 = unknown).
    role: usize,
    alloc_objects: f64,
    alloc_bytes: f64,
}

/// One (stack, thread) pair in a copy: where its frames are in the copy's frames, and what was
/// allocated there.
#[derive(Clone, Copy, Debug, Default)]
pub struct Record {
    pub frames_at: u32,
    pub nframes: u32,
    pub tid: u32,
    /// The thread's start routine (0 = unknown).
    pub role: usize,
    /// Weighted objects and bytes ever sampled here.
    pub alloc_objects: f64,
    pub alloc_bytes: f64,
}

struct Table {
    recs: *mut Entry,
    nrecs: usize,
    heads: *mut u32,
}

static S: [Shard<Table>; SHARDS] =
    [const { Shard::new(Table { recs: core::ptr::null_mut(), nrecs: 0, heads: core::ptr::null_mut() }) };
        SHARDS];

/// Maps the records' and the stacks' tables with `map` (zero-filled, never unmapped) and
/// hands each shard its part (once, before the tables are published). False when a mapping
/// failed.
pub fn map_tables(map: impl Fn(usize) -> *mut u8) -> bool {
    let recs = map(SHARDS * SHARD_CAP * core::mem::size_of::<Entry>());
    let heads = map(SHARDS * HEADS * 4);
    let [sb, hb, fb] = stacks::sizes();
    let st = [map(sb), map(hb), map(fb)];
    if recs.is_null() || heads.is_null() || st.iter().any(|p| p.is_null()) {
        return false;
    }
    stacks::attach(st[0], st[1], st[2]);
    for (i, s) in S.iter().enumerate() {
        let _l = s.lock.lock();
        // SAFETY: under the lock; each shard gets a disjoint part of the two mappings.
        unsafe {
            let t = &mut *s.t.get();
            t.recs = recs.cast::<Entry>().add(i * SHARD_CAP);
            t.heads = heads.cast::<u32>().add(i * HEADS);
        }
    }
    true
}

/// In a forked child: every shard's lock, the records' and the stacks'.
pub fn after_fork_child() {
    for s in &S {
        s.lock.reset();
    }
    stacks::after_fork_child();
}

#[inline]
fn key_hash(stack: u32, tid: u32) -> u64 {
    (((stack as u64) << 32) | tid as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Finds or creates the record of (`stack`, tid) and adds one sample's weight to it. Returns
/// its id (`shard * SHARD_CAP + index`), or None when the records are full.
pub fn sample(stack: u32, tid: u32, role: usize, scale: f64, size: u64) -> Option<u32> {
    let h = key_hash(stack, tid);
    let k = (h >> 60) as usize & (SHARDS - 1);
    let s = &S[k];
    let _l = s.lock.lock();
    // SAFETY: under the shard's lock.
    let t = unsafe { &mut *s.t.get() };
    let i = t.record(h, stack, tid, role)?;
    // SAFETY: i < t.nrecs.
    let r = unsafe { &mut *t.recs.add(i) };
    r.alloc_objects += scale;
    r.alloc_bytes += scale * size as f64;
    Some((k * SHARD_CAP + i) as u32)
}

impl Table {
    fn record(&mut self, h: u64, stack: u32, tid: u32, role: usize) -> Option<usize> {
        let b = (h >> 32) as usize & (HEADS - 1);
        // SAFETY: heads has HEADS entries, recs SHARD_CAP; every index is checked against them.
        unsafe {
            let mut i = *self.heads.add(b);
            let mut guard = 0;
            while i != 0 && guard < SHARD_CAP {
                let r = &*self.recs.add(i as usize - 1);
                if r.stack == stack && r.tid == tid {
                    return Some(i as usize - 1);
                }
                i = r.next;
                guard += 1;
            }
            if self.nrecs >= SHARD_CAP {
                return None;
            }
            if COUNT.fetch_update(Relaxed, Relaxed, |n| (n < MAX_RECORDS).then_some(n + 1)).is_err() {
                return None;
            }
            let idx = self.nrecs;
            *self.recs.add(idx) = Entry { stack, tid, next: *self.heads.add(b), role, ..Entry::default() };
            *self.heads.add(b) = idx as u32 + 1;
            self.nrecs += 1;
            Some(idx)
        }
    }
}

/// Records held, then stacks and frames held, all shards together (each shard read under its
/// lock).
pub fn counts() -> (usize, usize, usize) {
    let mut r = 0;
    for s in &S {
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock.
        r += unsafe { &*s.t.get() }.nrecs;
    }
    let (n, f) = stacks::counts();
    (r, n, f)
}

/// The allocating thread and start routine of each record id in `ids` (ascending, as
/// [`sample`] returns them), written to `out` (same length); (0, 0) for an id no shard holds.
/// Takes each shard's lock once, for reads only.
pub fn owners(ids: &[u32], out: &mut [(u32, usize)]) {
    let mut at = 0;
    while at < ids.len() {
        let k = ids[at] as usize / SHARD_CAP;
        let end = at + ids[at..].iter().take_while(|&&id| id as usize / SHARD_CAP == k).count();
        let Some(s) = S.get(k) else { break };
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock.
        let t = unsafe { &*s.t.get() };
        for (id, o) in ids[at..end].iter().zip(&mut out[at..end]) {
            let i = *id as usize % SHARD_CAP;
            // SAFETY: i < t.nrecs <= SHARD_CAP, within the shard's mapping.
            *o = if i < t.nrecs { unsafe { ((*t.recs.add(i)).tid, (*t.recs.add(i)).role) } } else { (0, 0) };
        }
        at = end;
    }
}

/// Appends every shard's records to `recs` and their stacks' frames to `frames` within their
/// capacity (never growing them: nothing allocates under a lock; the stacks' spans are reserved
/// here, fallibly, before any lock), frames_at pointing into `frames`. `first[k]` and `n[k]` get
/// where shard k's records start in `recs` and how many were copied (a whole prefix). Records
/// are copied before the stacks, so every record's stack is there (a stack is interned before
/// its first record); a record whose stack did not fit gets no frames. Returns true when
/// something was left out.
pub fn copy_into(
    recs: &mut Vec<Record>,
    frames: &mut Vec<usize>,
    first: &mut [u32; SHARDS],
    n: &mut [u32; SHARDS],
) -> bool {
    let mut ids: Vec<u32> = Vec::new();
    let mut spans: Vec<(u32, u32)> = Vec::new();
    let (nstacks, _) = stacks::counts();
    let room = recs.capacity() - recs.len();
    if ids.try_reserve_exact(room).is_err() || spans.try_reserve_exact(nstacks + nstacks / 8 + 64).is_err() {
        return true;
    }
    let mut left_out = false;
    for (k, s) in S.iter().enumerate() {
        first[k] = recs.len() as u32;
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock; reads within the count the table holds.
        let es = unsafe {
            let t = &*s.t.get();
            core::slice::from_raw_parts(t.recs, t.nrecs)
        };
        let mut nr = 0;
        for e in es {
            if recs.len() == recs.capacity() {
                left_out = true;
                break;
            }
            let (tid, role, alloc_objects, alloc_bytes) = (e.tid, e.role, e.alloc_objects, e.alloc_bytes);
            recs.push(Record { frames_at: 0, nframes: 0, tid, role, alloc_objects, alloc_bytes });
            ids.push(e.stack);
            nr += 1;
        }
        n[k] = nr;
    }
    let (spans, stacks_left_out) = stacks::copy_into(frames, spans);
    left_out |= stacks_left_out;
    let start = recs.len() - ids.len();
    for (r, id) in recs[start..].iter_mut().zip(ids) {
        match spans.of(id) {
            Some((at, len)) => (r.frames_at, r.nframes) = (at, len),
            None => left_out = true,
        }
    }
    left_out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_one_stack_and_thread_and_its_copy_has_the_stack_frames() {
        assert!(crate::hot::heapprof::tables_for_tests());
        let f: Vec<usize> = (0..12).map(|i| 0x7fed_0000_0000 + i * 16).collect();
        let st = stacks::intern(&f).unwrap();
        let r1 = sample(st, 4_000_001, 0, 2.0, 100).unwrap();
        assert_eq!(sample(st, 4_000_001, 0, 1.0, 50), Some(r1), "same stack and thread");
        let r2 = sample(st, 4_000_002, 7, 1.0, 10).unwrap();
        assert_ne!(r1, r2, "another thread, another record");
        let (nr, _, nf) = counts();
        let (mut recs, mut frames) = (Vec::with_capacity(nr + 64), Vec::with_capacity(nf + 64));
        let (mut first, mut n) = ([0; SHARDS], [0; SHARDS]);
        assert!(!copy_into(&mut recs, &mut frames, &mut first, &mut n));
        let at = |id: u32| {
            let (k, i) = (id as usize / SHARD_CAP, id as usize % SHARD_CAP);
            assert!((i as u32) < n[k]);
            recs[first[k] as usize + i]
        };
        let (a, b) = (at(r1), at(r2));
        assert_eq!((a.tid, a.alloc_objects, a.alloc_bytes), (4_000_001, 3.0, 250.0));
        assert_eq!((b.tid, b.role), (4_000_002, 7));
        for r in [a, b] {
            assert_eq!(&frames[r.frames_at as usize..(r.frames_at + r.nframes) as usize], &f[..]);
        }
    }
}
