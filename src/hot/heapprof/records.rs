//! The heap profile's records (one per distinct stack and thread, with the weighted allocation
//! totals; append-only) and their frames, sharded by stack hash into [`SHARDS`] shards, each
//! with its own [`Lock`]: two threads sampling at different sites rarely meet. The bound is
//! global and exact ([`MAX_RECORDS`], one atomic count); each shard has room for twice its fair
//! share, in memory mapped once with MAP_NORESERVE and filled in order (pages are touched as
//! records arrive), so an uneven spread never drops a record the bound would keep.
//! Never allocates; nothing here runs under another shard's lock.

use super::lock::Shard;
use super::unwind::MAX_FRAMES;
use core::sync::atomic::{AtomicUsize, Ordering::*};

/// Shards (a power of two).
pub const SHARDS: usize = 16;
/// Most distinct (stack, thread) records, all shards together.
pub const MAX_RECORDS: usize = 1 << 15;
/// Records one shard can hold.
pub const SHARD_CAP: usize = MAX_RECORDS * 2 / SHARDS;
const SHARD_FRAMES: usize = SHARD_CAP * MAX_FRAMES;
const HEADS: usize = (1 << 16) / SHARDS;

/// Records held, all shards together (the exact bound).
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// One (stack, thread) pair: where its frames are and what was allocated there.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Record {
    pub hash: u64,
    pub frames_at: u32,
    pub nframes: u32,
    pub tid: u32,
    /// Next record in the same hash bucket (+1; 0 = none).
    next: u32,
    /// The thread's start routine (0 = unknown).
    pub role: usize,
    /// Weighted objects and bytes ever sampled here.
    pub alloc_objects: f64,
    pub alloc_bytes: f64,
}

struct Table {
    recs: *mut Record,
    nrecs: usize,
    heads: *mut u32,
    frames: *mut usize,
    nframes: usize,
}

static S: [Shard<Table>; SHARDS] = [const {
    Shard::new(Table {
        recs: core::ptr::null_mut(),
        nrecs: 0,
        heads: core::ptr::null_mut(),
        frames: core::ptr::null_mut(),
        nframes: 0,
    })
}; SHARDS];

/// Bytes to map for the records, their hash heads and their frames.
pub const fn sizes() -> [usize; 3] {
    [
        SHARDS * SHARD_CAP * core::mem::size_of::<Record>(),
        SHARDS * HEADS * 4,
        SHARDS * SHARD_FRAMES * core::mem::size_of::<usize>(),
    ]
}

/// Hands each shard its part of the mappings (once, before the tables are published).
pub fn attach(recs: *mut u8, heads: *mut u8, frames: *mut u8) {
    for (i, s) in S.iter().enumerate() {
        let _l = s.lock.lock();
        // SAFETY: under the lock; each shard gets a disjoint part of mappings of `sizes()`.
        unsafe {
            let t = &mut *s.t.get();
            t.recs = recs.cast::<Record>().add(i * SHARD_CAP);
            t.heads = heads.cast::<u32>().add(i * HEADS);
            t.frames = frames.cast::<usize>().add(i * SHARD_FRAMES);
        }
    }
}

/// In a forked child: every shard's lock.
pub fn after_fork_child() {
    for s in &S {
        s.lock.reset();
    }
}

fn stack_hash(frames: &[usize], tid: u32) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ tid as u64;
    for &f in frames {
        h = (h ^ f as u64).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(17);
    }
    h
}

/// Finds or creates the record of (frames, tid) and adds one sample's weight to it. Returns its
/// id (`shard * SHARD_CAP + index`), or None when the records are full.
pub fn sample(frames: &[usize], tid: u32, role: usize, scale: f64, size: u64) -> Option<u32> {
    let h = stack_hash(frames, tid);
    let k = (h >> 60) as usize & (SHARDS - 1);
    let s = &S[k];
    let _l = s.lock.lock();
    // SAFETY: under the shard's lock.
    let t = unsafe { &mut *s.t.get() };
    let i = t.record(h, frames, tid, role)?;
    // SAFETY: i < t.nrecs.
    let r = unsafe { &mut *t.recs.add(i) };
    r.alloc_objects += scale;
    r.alloc_bytes += scale * size as f64;
    Some((k * SHARD_CAP + i) as u32)
}

impl Table {
    fn record(&mut self, h: u64, frames: &[usize], tid: u32, role: usize) -> Option<usize> {
        let b = (h as usize) & (HEADS - 1);
        // SAFETY: heads has HEADS entries, recs SHARD_CAP, frames SHARD_FRAMES; every index is
        // checked against those bounds.
        unsafe {
            let mut i = *self.heads.add(b);
            let mut guard = 0;
            while i != 0 && guard < SHARD_CAP {
                let r = &*self.recs.add(i as usize - 1);
                if r.hash == h && r.tid == tid && r.nframes as usize == frames.len() {
                    let f = core::slice::from_raw_parts(self.frames.add(r.frames_at as usize), frames.len());
                    if f == frames {
                        return Some(i as usize - 1);
                    }
                }
                i = r.next;
                guard += 1;
            }
            if self.nrecs >= SHARD_CAP || self.nframes + frames.len() > SHARD_FRAMES {
                return None;
            }
            if COUNT.fetch_update(Relaxed, Relaxed, |n| (n < MAX_RECORDS).then_some(n + 1)).is_err() {
                return None;
            }
            let at = self.nframes;
            core::ptr::copy_nonoverlapping(frames.as_ptr(), self.frames.add(at), frames.len());
            self.nframes += frames.len();
            let idx = self.nrecs;
            *self.recs.add(idx) = Record {
                hash: h,
                frames_at: at as u32,
                nframes: frames.len() as u32,
                tid,
                next: *self.heads.add(b),
                role,
                alloc_objects: 0.0,
                alloc_bytes: 0.0,
            };
            *self.heads.add(b) = idx as u32 + 1;
            self.nrecs += 1;
            Some(idx)
        }
    }
}

/// Records and frames held, all shards together (each shard read under its lock).
pub fn counts() -> (usize, usize) {
    let (mut r, mut f) = (0, 0);
    for s in &S {
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock.
        let t = unsafe { &*s.t.get() };
        r += t.nrecs;
        f += t.nframes;
    }
    (r, f)
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

/// Appends every shard's records and frames to `recs` and `frames` within their capacity (never
/// growing them: nothing allocates under a lock), frames_at rebased to `frames`. `first[k]` and
/// `n[k]` get where shard k's records start in `recs` and how many were copied (a whole prefix:
/// a record is copied only with all its frames). Returns true when something was left out.
pub fn copy_into(
    recs: &mut Vec<Record>,
    frames: &mut Vec<usize>,
    first: &mut [u32; SHARDS],
    n: &mut [u32; SHARDS],
) -> bool {
    let mut left_out = false;
    for (k, s) in S.iter().enumerate() {
        first[k] = recs.len() as u32;
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock; reads within the counts the table holds.
        let (rs, fs) = unsafe {
            let t = &*s.t.get();
            (core::slice::from_raw_parts(t.recs, t.nrecs), core::slice::from_raw_parts(t.frames, t.nframes))
        };
        let base = frames.len();
        let mut nf = 0;
        let mut nr = 0;
        for r in rs {
            let end = (r.frames_at + r.nframes) as usize;
            if recs.len() == recs.capacity() || base + end > frames.capacity() {
                left_out = true;
                break;
            }
            recs.push(Record { frames_at: (base + r.frames_at as usize) as u32, ..*r });
            nf = end;
            nr += 1;
        }
        frames.extend_from_slice(&fs[..nf]);
        n[k] = nr;
    }
    left_out
}
