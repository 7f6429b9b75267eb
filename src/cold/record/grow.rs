//! Growing a thread's ring (issue 24): when the drain finds that a thread dropped calls since
//! its last pass, or read half a ring or more from it in one pass, it doubles the thread's
//! target of spare rings (1, 2, 4 … up to [`MAX_SPARES`]) and links that many spares behind
//! the thread's ring ([`tracebuf::Buf::next`]); the owner moves to a spare when its ring is
//! full (`tracebuf`), instead of dropping the call. Spares come from the rings' pool
//! (`tracebuf::take_free`: mmap'd on the shim's thread, never on the hot path), set up for the
//! thread's claim and window before they are linked (release), so that the owner and the drain
//! see one thread. Owns the per-thread targets; frees nothing itself but an unlinked spare.

use crate::hot::tracebuf::{self, Buf, CAP, FREE, SPARE};
use std::ptr;
use std::sync::atomic::Ordering::*;

/// Most spares linked behind one thread's ring (4 rings, 2 MiB, per thread at most): more lets
/// a thread that always outruns the drain (a flat-out loop) make every pass long, and the
/// window's end late.
pub const MAX_SPARES: u32 = 3;

/// Whether a pass that read `read` entries from a thread whose drop count went from `before`
/// to `after` asks for more room.
pub fn wants_more(read: u64, before: u64, after: u64) -> bool {
    after > before || read >= CAP as u64 / 2
}

/// Doubles `target` (at least 1, at most [`MAX_SPARES`]).
pub fn doubled(target: u32) -> u32 {
    (target * 2).clamp(1, MAX_SPARES)
}

/// Links spares behind `b` (a ring of the window, owned by a live thread) until `target` are
/// linked; stops early when the pool is exhausted or the owner took the last link meanwhile.
pub fn provide(b: &Buf, target: u32) {
    let mut last = b;
    let mut have = 0;
    loop {
        let n = last.next.load(Acquire);
        if n.is_null() {
            break;
        }
        have += 1;
        // SAFETY: linked spares are published buffers; they stay mapped.
        last = unsafe { &*n };
    }
    while have < target {
        let n = tracebuf::take_free();
        if n.is_null() {
            return;
        }
        // SAFETY: `n` is ours (OWNED by take_free) and mapped for the process's life.
        let r = unsafe { &*n };
        r.tid.store(b.tid.load(Relaxed), Relaxed);
        r.claim.store(b.claim.load(Relaxed), Relaxed);
        r.dropped.store(0, Relaxed);
        r.next.store(ptr::null_mut(), Relaxed);
        let h = r.head.load(Relaxed);
        r.tail.store(h, Relaxed);
        r.window.store(b.window.load(Relaxed), Relaxed);
        r.state.store(SPARE, Relaxed);
        if last.next.compare_exchange(ptr::null_mut(), n, AcqRel, Acquire).is_err() {
            // Cannot happen (only the drain links, from the chain's end), but never leak.
            r.state.store(FREE, Release);
            return;
        }
        last = r;
        have += 1;
    }
}
