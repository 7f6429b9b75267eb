//! A memo of what framehop's unwind rule for one return address does, so that a frame seen
//! before is unwound by a few instructions of our own instead of a framehop call (its rule
//! cache lookup, its rule's execution through a closure and a large `Result`: ~100
//! instructions per frame, ~26 frames per mariadbd sample).
//!
//! Owns the memo table of a cache bank ([`Memo`]), the probe that learns an address's effect
//! from framehop and its replay. Must not: allocate, lock, or call into the loader; replay an
//! effect it did not learn from framehop for the same address and unwinder generation.
//!
//! - framehop 0.16 keeps its rules private (`UnwindRuleX86_64` is public, no lookup returns
//!   it), so the effect is observed: after framehop unwound a frame, [`learn`] runs the same
//!   rule twice more on a synthetic stack (sp and rbp at two far-apart, differently aligned
//!   places, every word reading as its own address tagged) and reads the effect back: the new
//!   stack pointer is `sp + c` or `rbp + 16`; the new %rbp unchanged, `*(sp + d)` or `*rbp`; the
//!   return address `*(new sp - 8)`, or the end of the stack. Both probes must agree (an
//!   alignment mask or a dereference in a CFA expression would not): anything else is not
//!   memoised and that address is unwound by framehop every time.
//! - Every rule framehop executes for a non-first frame is one of these (`UnwindRuleX86_64`:
//!   `JustReturn`, `OffsetSp`, `OffsetSpAndRestoreBp`, `OffsetSpAndPopRegisters`,
//!   `UseFramePointer`, `EndOfStack`), and its DWARF fallback reads only ip, sp and %rbp, so a
//!   replay ([`Effect::unwind`]) gives the caller framehop gives, and ends the walk where
//!   framehop's ends (a failed read, an overflow, a frame pointer that moved backwards, no
//!   progress, a zero return address); only on degenerate frames of the DWARF fallback (an
//!   unreadable saved %rbp, which it keeps; a frame pointer that did not move) a replay ends
//!   a walk that framehop would have continued on a garbage frame.
//! - Entries are keyed by the return address and the generation of the published unwind state
//!   (`cfi`), so a module registered or replaced invalidates them all. Direct-mapped,
//!   [`MEMO`] entries per bank; a bank is used by one thread at a time.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, MustNotAllocateDuringUnwind, Unwinder};

/// Entries per bank (direct-mapped by return address).
pub const MEMO: usize = 8192;

/// What one frame's unwinding does to (sp, %rbp) and where the return address is.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Effect {
    /// 0 empty, 1 end of stack, 2 new sp = sp + `cfa`, 3 new sp = %rbp + 16, 4 not memoisable.
    kind: u8,
    /// 0 %rbp unchanged, 1 new %rbp = *(sp + `bp_at`), 2 new %rbp = *%rbp.
    bp: u8,
    bp_at: i32,
    cfa: u32,
}

#[derive(Clone, Copy, Default)]
pub struct Entry {
    addr: u64,
    generation: u32,
    effect: Effect,
}

pub type Memo = [Entry; MEMO];

/// A zeroed (all empty) table, on the heap (under the guard: it allocates).
pub fn new_memo() -> Box<Memo> {
    // SAFETY: all-zero bytes are a valid `Memo` (integers only).
    unsafe { zeroed_box() }
}

/// A zeroed `T` on the heap (under the guard: it allocates).
///
/// # Safety
/// All-zero bytes must be a valid `T`.
pub unsafe fn zeroed_box<T>() -> Box<T> {
    let layout = std::alloc::Layout::new::<T>();
    // SAFETY: a non-zero-sized layout (the tables here); all-zero bytes are a valid `T` (the
    // caller's); the block is owned by the Box from here.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut T;
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(p)
    }
}

#[inline]
fn slot(look: u64) -> usize {
    ((look ^ (look >> 13)) as usize) & (MEMO - 1)
}

/// The memoised effect for the frame whose return address is `look + 1`, if learnt under
/// `generation` (one that is not [`Effect::replayable`]: framehop's, without learning again).
#[inline]
pub fn get(m: &Memo, look: u64, generation: u32) -> Option<Effect> {
    let e = &m[slot(look)];
    (e.addr == look && e.generation == generation && e.effect.kind != 0).then_some(e.effect)
}

impl Effect {
    /// False for an address whose probes did not agree on an effect (framehop unwinds it).
    #[inline]
    pub fn replayable(self) -> bool {
        self.kind != 4
    }

    /// What unwinding the frame at (`sp`, `bp`) by this effect reads and uses ([`Effect::unwind`]
    /// reads what this says, and [`super::walks`] checks it); None for an effect framehop runs
    /// (not memoised) or an address overflow.
    #[inline]
    pub fn trace(self, sp: u64, bp: u64) -> Option<Trace> {
        let (uses_bp, new_sp) = match self.kind {
            1 => return Some(Trace::End),
            2 => (false, sp.checked_add(self.cfa as u64)?),
            3 => (true, bp.checked_add(16)?),
            _ => return None,
        };
        let bp_from = match self.bp {
            0 => None,
            1 => Some(sp.checked_add_signed(self.bp_at as i64)?),
            _ => Some(bp),
        };
        Some(Trace::Frame { uses_bp, bp_from, ra_at: new_sp.checked_sub(8)? })
    }

    /// A "new sp = sp + `cfa`" effect, %rbp unchanged (tests).
    #[cfg(test)]
    pub fn offset_sp(cfa: u32) -> Effect {
        Effect { kind: 2, cfa, ..Effect::default() }
    }

    /// A "new sp = %rbp + 16" effect (tests).
    #[cfg(test)]
    pub fn frame_pointer() -> Effect {
        Effect { kind: 3, bp: 2, ..Effect::default() }
    }

    /// Unwinds one frame as framehop's rule would: the caller's return address, or None where
    /// framehop's walk ends (Ok(None) or an error).
    #[inline]
    pub fn unwind<F: FnMut(u64) -> Result<u64, ()>>(
        self,
        regs: &mut UnwindRegsX86_64,
        read: &mut F,
    ) -> Option<u64> {
        let (sp, bp) = (regs.sp(), regs.bp());
        let Trace::Frame { uses_bp, bp_from, ra_at } = self.trace(sp, bp)? else { return None };
        let new_sp = ra_at + 8;
        if uses_bp && (bp == 0 || new_sp <= sp) {
            return None;
        }
        let new_bp = match bp_from {
            None => bp,
            Some(a) => read(a).ok()?,
        };
        let ret = read(ra_at).ok()?;
        if ret == 0 || (new_sp == sp && ret == regs.ip()) {
            return None;
        }
        regs.set_ip(ret);
        regs.set_sp(new_sp);
        regs.set_bp(new_bp);
        Some(ret)
    }
}

/// What one effect does with the stack, as [`Effect::trace`] tells it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Trace {
    /// The end of the stack: nothing read.
    End,
    /// `uses_bp`: the new stack pointer is %rbp + 16 (%rbp used as an address); `bp_from`: the
    /// address the new %rbp is read from (None: unchanged); `ra_at`: the return address's.
    Frame { uses_bp: bool, bp_from: Option<u64>, ra_at: u64 },
}

/// A word of the synthetic stack: its address, tagged (never 0, never a probe's sp or %rbp).
const TAG: u64 = 0x5a5a_0000_0000_0000;

/// (sp, %rbp) of the two probes: far apart, differently aligned.
const PROBES: [(u64, u64); 2] = [(0x1000_0000_0000, 0x2000_0000_0000), (0x1000_0123_4568, 0x3000_0045_6788)];

fn probe(
    u: &UnwinderX86_64<Vec<u8>, MustNotAllocateDuringUnwind>,
    cache: &mut CacheX86_64<MustNotAllocateDuringUnwind>,
    pc: u64,
    (sp, bp): (u64, u64),
) -> Option<Effect> {
    let mut regs = UnwindRegsX86_64::new(pc, sp, bp);
    let mut read = |a: u64| -> Result<u64, ()> { Ok(a ^ TAG) };
    let addr = FrameAddress::from_return_address(pc)?;
    let next = match u.unwind_frame(addr, &mut regs, cache, &mut read) {
        Ok(None) => return Some(Effect { kind: 1, ..Effect::default() }),
        Ok(Some(n)) => n,
        Err(_) => return None,
    };
    let (nsp, nbp) = (regs.sp(), regs.bp());
    if next != (nsp.wrapping_sub(8) ^ TAG) {
        return None;
    }
    let d = nsp.wrapping_sub(sp);
    let mut e = if (8..=1 << 20).contains(&d) && d % 8 == 0 {
        Effect { kind: 2, cfa: d as u32, ..Effect::default() }
    } else if nsp == bp.wrapping_add(16) {
        Effect { kind: 3, ..Effect::default() }
    } else {
        return None;
    };
    if nbp == bp {
        return Some(e);
    }
    let at = nbp ^ TAG;
    let off = at.wrapping_sub(sp) as i64;
    if e.kind == 3 && at == bp {
        e.bp = 2;
    } else if e.kind == 2 && (-(1 << 16)..=1 << 20).contains(&off) && off % 8 == 0 {
        e.bp = 1;
        e.bp_at = off as i32;
    } else {
        return None;
    }
    Some(e)
}

/// Learns what framehop does for the frame returning to `pc` (after framehop unwound it for
/// real: its rule is in `cache`) and keeps it under `generation`, when both probes agree on
/// one of the effects above.
#[cold]
pub fn learn(
    m: &mut Memo,
    u: &UnwinderX86_64<Vec<u8>, MustNotAllocateDuringUnwind>,
    cache: &mut CacheX86_64<MustNotAllocateDuringUnwind>,
    pc: u64,
    generation: u32,
) {
    let a = probe(u, cache, pc, PROBES[0]);
    let b = probe(u, cache, pc, PROBES[1]);
    let effect = match (a, b) {
        (Some(a), Some(b)) if a == b => a,
        // Not memoisable: kept as such, so it is not probed again.
        _ => Effect { kind: 4, ..Effect::default() },
    };
    m[slot(pc - 1)] = Entry { addr: pc - 1, generation, effect };
}
