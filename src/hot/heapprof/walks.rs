//! Whole walks kept and checked: a sampled stack whose first frame and depth were walked before
//! is given the kept walk's frames when this stack holds the same words where that walk read
//! them, one load and compare per word, instead of unwound again (a mariadbd sample's ~27
//! frames cost ~2,300 instructions through the memo, ~1,500 replaying the memo's effects; its
//! large per-query buffers are sampled from a few call sites, at the same depth on every
//! connection thread).
//!
//! Owns a bank's walks ([`Walks`]: the table, and the walk being recorded), the recording hooks
//! [`super::cfi`] calls while it walks, and the check. Must not: allocate, lock, call into the
//! loader, or read outside `sp..hi` of the calling thread's stack.
//!
//! Why equal words give the walk's own frames. A kept walk unwound every frame by a
//! [`super::memo`] effect, a function of the frame's return address and the unwind state's
//! generation (the key has the generation; each return address is a checked word). An effect
//! computes the caller's stack pointer as sp + c or %rbp + 16, reads the caller's %rbp (kept,
//! or a word at sp + d or at %rbp) and the return address below the new stack pointer, and ends
//! the walk on a failed read, a zero return address, a %rbp of 0 or not above sp. So a walk
//! is fixed by: the first return address and stack pointer, the stack's top `hi` (reads past
//! it fail; the walk ends where sp reaches it), the return addresses read, and the %rbp values
//! used as addresses. The walk is kept only where it is unchanged when the whole stack moves
//! (another thread, another depth below the same caller): every read lies at or above the
//! first stack pointer `sp` and below `hi`, every %rbp used as an address lies in `sp..hi`. The
//! key holds `hi - sp`; each return address read is checked as it is, each %rbp used as an
//! address as an offset from `sp`, where it came from (the first frame's %rbp, or the stack
//! word it was read from). Every bound and end test is then the same, in offsets, as in the
//! kept walk. A walk that met anything else (a framehop call, a frame inside the shim, a module
//! to register, a read below `sp`) is not kept.
//!
//! What a check skips is the loader's module lookup: a module dlclose'd and another loaded at the
//! same address without a sample registering it since (that bumps the generation) could be given
//! the old module's frames where its stack holds the same words: a wrong caller in a profile,
//! never a read outside this thread's stack.

use super::memo::{Effect, Trace};

/// Walks kept per bank (direct-mapped by first frame and depth).
pub const WALKS: usize = 128;

/// One walk: its key, and the words to check, each at an offset from the first stack pointer:
/// the return addresses read (as they are; but for a last one that ended the walk, they are the
/// frames after the first) and the %rbp values used as addresses (as offsets from the first
/// stack pointer), one of which may be the first frame's %rbp register.
#[derive(Clone, Copy)]
pub struct Walk<const N: usize> {
    /// The first frame's return address (0: empty).
    ip: u64,
    /// `hi - sp` of the first frame.
    depth: u64,
    generation: u32,
    frames: u8,
    n_ra: u8,
    n_bp: u8,
    /// The first frame's %rbp is used as an address: `reg` is its offset from sp.
    has_reg: bool,
    reg: u64,
    /// Every offset checked + 8 is at most this.
    end: u64,
    /// The id of its frames' stack in `super::stacks`, + 1 (0: not known yet).
    stack: u32,
    ra_off: [u32; N],
    ra_val: [u64; N],
    bp_off: [u32; N],
    bp_val: [u64; N],
}

/// A bank's walks (stacks of at most `N` frames): those kept, and the one being recorded.
pub struct Walks<const N: usize> {
    kept: [Walk<N>; WALKS],
    rec: Walk<N>,
    /// The recorded walk can still be kept.
    ok: bool,
    /// Its first stack pointer.
    sp0: u64,
    /// Where its %rbp now comes from: the offset of the word it was read from, or None (the
    /// first frame's register).
    bp_src: Option<u32>,
    /// The frame being unwound: its return address's offset, and where the new %rbp comes from.
    pending: Option<(u32, Option<u32>)>,
}

#[inline]
fn slot(ip: u64, depth: u64) -> usize {
    let h = (ip ^ depth.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 57) as usize % WALKS
}

impl<const N: usize> Walks<N> {
    /// The frames of the walk kept for the first frame `ip` at stack pointer `sp` (%rbp `bp`)
    /// under stack top `hi` and `generation`, written to `out[n0..]` when this stack holds the
    /// words it checks: the new count and the kept walk's slot, or None (none kept, or another
    /// stack: walk it). A kept walk whose stack id is known ([`Self::stack`]) writes no frames
    /// when `n0` is 0: the id stands for the whole stack.
    #[inline]
    pub fn check(
        &self,
        (ip, sp, bp): (u64, u64, u64),
        hi: u64,
        generation: u32,
        out: &mut [usize; N],
        n0: usize,
    ) -> Option<(usize, usize)> {
        let depth = hi.checked_sub(sp)?;
        let at = slot(ip, depth);
        let k = &self.kept[at];
        let frames = k.frames as usize;
        let (n_ra, n_bp) = (k.n_ra as usize, k.n_bp as usize);
        let fits = n0 + frames <= N && n_ra <= N && n_bp <= N && frames <= n_ra + 1;
        if k.ip != ip || k.depth != depth || k.generation != generation || k.end > depth || !fits {
            return None;
        }
        let word = |off: u32| {
            // SAFETY: every offset kept is at most `end - 8` and `end <= depth` (checked above),
            // so sp + off .. sp + off + 8 lies in sp..hi, this thread's stack above the first
            // frame's stack pointer.
            unsafe { ((sp + off as u64) as *const u64).read_unaligned() }
        };
        let mut diff = if k.has_reg { bp.wrapping_sub(sp) ^ k.reg } else { 0 };
        for (off, val) in k.ra_off[..n_ra].iter().zip(&k.ra_val[..n_ra]) {
            diff |= word(*off) ^ val;
        }
        for (off, val) in k.bp_off[..n_bp].iter().zip(&k.bp_val[..n_bp]) {
            diff |= word(*off).wrapping_sub(sp) ^ val;
        }
        if diff != 0 {
            return None;
        }
        if k.stack == 0 || n0 != 0 {
            out[n0] = ip as usize;
            for (o, pc) in out[n0 + 1..n0 + frames].iter_mut().zip(&k.ra_val) {
                *o = *pc as usize;
            }
        }
        Some((n0 + frames, at))
    }

    /// The stack id remembered for the kept walk in `slot` (None: not known yet).
    #[inline]
    pub fn stack(&self, slot: usize) -> Option<u32> {
        self.kept[slot % WALKS].stack.checked_sub(1)
    }

    /// Remembers `id` as the stack of the kept walk in `slot` (its frames' id in `stacks`).
    pub fn set_stack(&mut self, slot: usize, id: u32) {
        self.kept[slot % WALKS].stack = id.wrapping_add(1);
    }

    /// A walk begins at the first frame `ip`, stack pointer `sp`, under stack top `hi` (its
    /// %rbp is the first source of %rbp).
    #[inline]
    pub fn start(&mut self, ip: u64, sp: u64, hi: u64) {
        let r = &mut self.rec;
        r.ip = ip;
        r.depth = hi.wrapping_sub(sp);
        (r.frames, r.n_ra, r.n_bp, r.has_reg, r.end) = (0, 0, 0, false, 0);
        self.ok = hi > sp;
        self.sp0 = sp;
        self.bp_src = None;
        self.pending = None;
    }

    /// The walk did something a check cannot stand for.
    #[inline]
    pub fn spoil(&mut self) {
        self.ok = false;
    }

    /// The offset of the word at `a` from the first stack pointer, when it lies in the stack
    /// above it (else the walk cannot be kept).
    fn off(&mut self, a: u64) -> Option<u32> {
        let o = a.wrapping_sub(self.sp0);
        let inside = a >= self.sp0 && o + 8 <= self.rec.depth && o <= u32::MAX as u64;
        if !inside {
            self.ok = false;
            return None;
        }
        self.rec.end = self.rec.end.max(o + 8);
        Some(o as u32)
    }

    /// The walk wrote the frame returning to `pc`, at stack pointer `sp` and %rbp `bp`, and
    /// unwinds it by the memo's `e`.
    #[inline]
    pub fn frame(&mut self, pc: u64, e: Effect, sp: u64, bp: u64) {
        self.pending = None;
        let r = &mut self.rec;
        let i = r.frames as usize;
        let expect = if i == 0 { r.ip } else { r.ra_val[i - 1] };
        if !self.ok || i >= N || r.n_ra as usize != i || pc != expect {
            self.ok = false;
            return;
        }
        r.frames += 1;
        let (uses_bp, bp_from, ra_at) = match e.trace(sp, bp) {
            Some(Trace::End) => return,
            Some(Trace::Frame { uses_bp, bp_from, ra_at }) => (uses_bp, bp_from, ra_at),
            None => return self.spoil(),
        };
        if uses_bp {
            let Some(_) = self.off(bp) else { return };
            let rel = bp.wrapping_sub(self.sp0);
            let r = &mut self.rec;
            match self.bp_src {
                None => (r.has_reg, r.reg) = (true, rel),
                Some(o) => {
                    let j = r.n_bp as usize;
                    (r.bp_off[j], r.bp_val[j]) = (o, rel);
                    r.n_bp += 1;
                }
            }
        }
        let next_bp = match bp_from {
            None => self.bp_src,
            Some(a) => match self.off(a) {
                Some(o) => Some(o),
                None => return,
            },
        };
        if let Some(ra) = self.off(ra_at) {
            self.pending = Some((ra, next_bp));
        }
    }

    /// The frame's unwinding gave `next` (its return address, or None: the walk ends): the
    /// return address's word is checked (also when it ended the walk: a zero), `read` being the
    /// walk's bounds-checked reader.
    #[inline]
    pub fn unwound<F: FnMut(u64) -> Result<u64, ()>>(&mut self, next: Option<u64>, read: &mut F) {
        let Some((ra, next_bp)) = self.pending.take() else { return };
        if !self.ok {
            return;
        }
        let v = match next {
            Some(v) => v,
            None => match read(self.sp0 + ra as u64) {
                Ok(v) => v,
                Err(()) => return,
            },
        };
        let r = &mut self.rec;
        let j = r.n_ra as usize;
        (r.ra_off[j], r.ra_val[j]) = (ra, v);
        r.n_ra += 1;
        if next.is_some() {
            self.bp_src = next_bp;
        }
    }

    /// The walk ended, having written `frames` frames under `generation`: kept when every
    /// frame was recorded (its slot returned; its stack not known yet).
    pub fn keep(&mut self, frames: usize, generation: u32) -> Option<usize> {
        if !self.ok || frames == 0 || frames != self.rec.frames as usize {
            return None;
        }
        self.rec.generation = generation;
        self.rec.stack = 0;
        let i = slot(self.rec.ip, self.rec.depth);
        self.kept[i] = self.rec;
        Some(i)
    }
}

/// An empty table, on the heap (under the guard: it allocates).
pub fn new_walks<const N: usize>() -> Box<Walks<N>> {
    // SAFETY: all-zero bytes are a valid `Walks` (integers and bools only; an empty kept walk
    // has ip 0, which no first frame has).
    unsafe { super::memo::zeroed_box() }
}

#[cfg(test)]
#[path = "walks_tests.rs"]
mod tests;
