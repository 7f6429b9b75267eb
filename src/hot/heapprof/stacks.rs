//! The heap profile's stacks, each distinct one held once and named by a stable id (interned;
//! append-only), sharded by the frames' hash into [`SHARDS`] shards, each with its own
//! [`Lock`]. A record ([`super::records`]) names its stack by id, so that a sample whose stack
//! is already known (a kept walk remembers the id of the stack it gives: `super::walks`) finds
//! its record by two integers, without hashing or comparing its frames; and a stack sampled on
//! 64 connection threads keeps its frames once, not 64 times.
//!
//! Bounds: at most [`MAX_STACKS`] stacks (one atomic count); each shard has room for twice its
//! fair share, in memory mapped once with MAP_NORESERVE and filled in order. Never allocates;
//! nothing here runs under another shard's lock (nor under a record shard's).

use super::lock::Shard;
use core::sync::atomic::{AtomicUsize, Ordering::*};

/// Deepest stack kept, in frames (the walk's bound too: `super::unwind`).
pub const MAX_FRAMES: usize = 64;
/// Shards (a power of two).
pub const SHARDS: usize = 16;
/// Most distinct stacks, all shards together.
pub const MAX_STACKS: usize = 1 << 15;
/// Stacks one shard can hold.
pub const SHARD_CAP: usize = MAX_STACKS * 2 / SHARDS;
const SHARD_FRAMES: usize = SHARD_CAP * MAX_FRAMES;
const HEADS: usize = (1 << 16) / SHARDS;

/// Stacks held, all shards together (the exact bound).
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// One stack: its hash, where its frames are in the shard's frames, and the next stack of its
/// hash bucket (+1; 0 = none).
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Stack {
    hash: u64,
    frames_at: u32,
    nframes: u32,
    next: u32,
}

struct Table {
    stacks: *mut Stack,
    nstacks: usize,
    heads: *mut u32,
    frames: *mut usize,
    nframes: usize,
}

static S: [Shard<Table>; SHARDS] = [const {
    Shard::new(Table {
        stacks: core::ptr::null_mut(),
        nstacks: 0,
        heads: core::ptr::null_mut(),
        frames: core::ptr::null_mut(),
        nframes: 0,
    })
}; SHARDS];

/// Bytes to map for the stacks, their hash heads and their frames.
pub const fn sizes() -> [usize; 3] {
    [
        SHARDS * SHARD_CAP * core::mem::size_of::<Stack>(),
        SHARDS * HEADS * 4,
        SHARDS * SHARD_FRAMES * core::mem::size_of::<usize>(),
    ]
}

/// Hands each shard its part of the mappings (once, before the tables are published).
pub fn attach(stacks: *mut u8, heads: *mut u8, frames: *mut u8) {
    for (i, s) in S.iter().enumerate() {
        let _l = s.lock.lock();
        // SAFETY: under the lock; each shard gets a disjoint part of mappings of `sizes()`.
        unsafe {
            let t = &mut *s.t.get();
            t.stacks = stacks.cast::<Stack>().add(i * SHARD_CAP);
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

fn hash(frames: &[usize]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ frames.len() as u64;
    for &f in frames {
        h = (h ^ f as u64).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(17);
    }
    h
}

/// The id of the stack `frames` (`shard * SHARD_CAP + index`), added when new; None when the
/// stacks are full.
pub fn intern(frames: &[usize]) -> Option<u32> {
    let h = hash(frames);
    let k = (h >> 60) as usize & (SHARDS - 1);
    let s = &S[k];
    let _l = s.lock.lock();
    // SAFETY: under the shard's lock.
    let t = unsafe { &mut *s.t.get() };
    if t.stacks.is_null() {
        return None;
    }
    let i = t.find_or_add(h, frames)?;
    Some((k * SHARD_CAP + i) as u32)
}

impl Table {
    fn find_or_add(&mut self, h: u64, frames: &[usize]) -> Option<usize> {
        let b = (h as usize) & (HEADS - 1);
        // SAFETY: heads has HEADS entries, stacks SHARD_CAP, frames SHARD_FRAMES; every index is
        // checked against those bounds.
        unsafe {
            let mut i = *self.heads.add(b);
            let mut guard = 0;
            while i != 0 && guard < SHARD_CAP {
                let st = &*self.stacks.add(i as usize - 1);
                if st.hash == h && st.nframes as usize == frames.len() {
                    let f = core::slice::from_raw_parts(self.frames.add(st.frames_at as usize), frames.len());
                    if f == frames {
                        return Some(i as usize - 1);
                    }
                }
                i = st.next;
                guard += 1;
            }
            if self.nstacks >= SHARD_CAP || self.nframes + frames.len() > SHARD_FRAMES {
                return None;
            }
            if COUNT.fetch_update(Relaxed, Relaxed, |n| (n < MAX_STACKS).then_some(n + 1)).is_err() {
                return None;
            }
            let at = self.nframes;
            core::ptr::copy_nonoverlapping(frames.as_ptr(), self.frames.add(at), frames.len());
            self.nframes += frames.len();
            let idx = self.nstacks;
            *self.stacks.add(idx) = Stack {
                hash: h,
                frames_at: at as u32,
                nframes: frames.len() as u32,
                next: *self.heads.add(b),
            };
            *self.heads.add(b) = idx as u32 + 1;
            self.nstacks += 1;
            Some(idx)
        }
    }
}

/// Stacks and frames held, all shards together (each shard read under its lock).
pub fn counts() -> (usize, usize) {
    let (mut n, mut f) = (0, 0);
    for s in &S {
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock.
        let t = unsafe { &*s.t.get() };
        n += t.nstacks;
        f += t.nframes;
    }
    (n, f)
}

/// Where each stack's frames went in a copy: `spans[first[k] + i]` is stack `k * SHARD_CAP + i`'s
/// (start in the copy's frames, count), for i below `n[k]`.
pub struct Spans {
    pub spans: Vec<(u32, u32)>,
    pub first: [u32; SHARDS],
    pub n: [u32; SHARDS],
}

impl Spans {
    /// The (start, count) of stack `id` in the copy, or None when it was left out.
    pub fn of(&self, id: u32) -> Option<(u32, u32)> {
        let (k, i) = (id as usize / SHARD_CAP, (id as usize % SHARD_CAP) as u32);
        (k < SHARDS && i < self.n[k]).then(|| self.spans[(self.first[k] + i) as usize])
    }
}

/// Appends every shard's frames to `frames` within its capacity, and their spans to `spans`
/// within its capacity (never growing either: nothing allocates under a lock); a whole prefix
/// of each shard's stacks. Returns the spans and whether something was left out.
pub fn copy_into(frames: &mut Vec<usize>, mut spans: Vec<(u32, u32)>) -> (Spans, bool) {
    let (mut first, mut n) = ([0u32; SHARDS], [0u32; SHARDS]);
    let mut left_out = false;
    for (k, s) in S.iter().enumerate() {
        first[k] = spans.len() as u32;
        let _l = s.lock.lock();
        // SAFETY: under the shard's lock; reads within the counts the table holds.
        let (st, fs) = unsafe {
            let t = &*s.t.get();
            (
                core::slice::from_raw_parts(t.stacks, t.nstacks),
                core::slice::from_raw_parts(t.frames, t.nframes),
            )
        };
        let base = frames.len();
        let (mut nf, mut ns) = (0, 0);
        for x in st {
            let end = (x.frames_at + x.nframes) as usize;
            if spans.len() == spans.capacity() || base + end > frames.capacity() {
                left_out = true;
                break;
            }
            spans.push(((base + x.frames_at as usize) as u32, x.nframes));
            nf = end;
            ns += 1;
        }
        frames.extend_from_slice(&fs[..nf]);
        n[k] = ns;
    }
    (Spans { spans, first, n }, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Return addresses no stack of this test process (profiled itself) will hold.
    fn frames(seed: usize, n: usize) -> Vec<usize> {
        (0..n).map(|i| 0x7fee_0000_0000 + seed * 0x1000 + i * 8).collect()
    }

    #[test]
    fn a_stack_is_held_once_and_its_copy_gives_its_frames() {
        assert!(crate::hot::heapprof::tables_for_tests());
        let (a, b) = (frames(1, 30), frames(2, 30));
        let ia = intern(&a).unwrap();
        assert_eq!(intern(&a), Some(ia), "the same frames, the same id");
        let ib = intern(&b).unwrap();
        assert_ne!(ia, ib);
        assert_ne!(intern(&a[..29]), Some(ia), "a prefix is another stack");
        let empty = intern(&[]).unwrap();
        assert_eq!(intern(&[]), Some(empty));
        let (n, f) = counts();
        let mut copied = Vec::with_capacity(f + 64);
        let (spans, left_out) = copy_into(&mut copied, Vec::with_capacity(n + 64));
        assert!(!left_out);
        for (id, want) in [(ia, &a[..]), (ib, &b[..]), (empty, &[][..])] {
            let (at, len) = spans.of(id).unwrap();
            assert_eq!(&copied[at as usize..(at + len) as usize], want, "stack {id}");
        }
        assert_eq!(spans.of((SHARDS * SHARD_CAP) as u32), None);
    }
}
