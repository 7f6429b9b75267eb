//! Folding exiting threads' slots versus walking the slots (`slots::for_each`): the exclusion
//! between the two, the retired list, and a forked child's hand-over. Owns `WALKING`, `FOLDING`,
//! the retired list and the process generation. The folding side never waits, allocates, locks
//! or calls the loader; the fork handler is async-signal-safe (stores and gettid).
//!
//! The choice (issue 21): an exiting thread never waits for a walk. It used to wait in its key
//! destructor until the walk ended, and a walk that called dladdr (to name start routines)
//! deadlocked against a `dlclose` whose library destructor joined that thread: dlclose held the
//! loader lock and waited for the thread, the thread waited for the walk, the walk for the
//! loader lock. Whatever a walk calls now, no thread's exit waits for it:
//! - folding side: `FOLDING += 1`; if `WALKING == 0`, fold, else `FOLDING -= 1` and push the
//!   slot, untouched, on the retired list (a lock-free stack through `Slot::retired_next`). It
//!   stays in use, so a walk running now counts it once, as a live row;
//! - walking side: `WALKING += 1`; if `FOLDING == 0`, walk, else `WALKING -= 1`, sleep 200 µs and
//!   try again. Folds never wait, so this wait is bounded;
//! - the end of every walk, and every thread that pushed, drains the list on the folding side
//!   when no walk runs. The two counters and the list head are SeqCst: a thread that pushed and
//!   then sees a walk running is followed, in that order, by that walk's end, whose drain sees
//!   the push; so the last of them folds every retired slot.
//!
//! Fork: the child has the forking thread only. Its handler bumps the generation, names the
//! survivor's slot in [`SURVIVOR`] and resets the counters and the list: a few stores on the one
//! page the child writes anyway, no walk over the pool (which touched its pages in every child:
//! 33 of the 59 page faults of a fork+exit under the shim, against 18 directly) and no write to
//! the survivor's slot (a copy of its page, and libc's `gettid` page, in every child of a
//! thread that allocates). The first drain in the child (its first walk, or a thread's exit)
//! gives the survivor's slot the child's generation and tid ([`adopt_survivor`]: a CAS on its
//! mark, so a slot folded or claimed again meanwhile is left alone), then folds the slots of the
//! threads the child does not have, which still carry an older generation, before any walk. A
//! heap-profile sample taken by the survivor before that adopts its slot first
//! ([`adopt_if_survivor`]), so that its records carry the child's tid.

use super::{each_in_use, exited_ptr, fold_and_free, Slot};
use crate::hot::tls;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering::*};

/// Readers walking the slots / threads folding a slot, right now.
#[link_section = ".data.mallocshim_fork"]
static WALKING: AtomicU32 = AtomicU32::new(0);
#[link_section = ".data.mallocshim_fork"]
static FOLDING: AtomicU32 = AtomicU32::new(0);
/// Slots of threads that exited during a walk, waiting to be folded.
#[link_section = ".data.mallocshim_fork"]
static RETIRED: AtomicPtr<Slot> = AtomicPtr::new(ptr::null_mut());
/// Forks in this process's line: a slot claimed now is marked `GEN + 1` ([`claim_mark`]).
#[link_section = ".data.mallocshim_fork"]
static GEN: AtomicU32 = AtomicU32::new(0);
/// In a forked child, until the slots of the threads it does not have are folded.
#[link_section = ".data.mallocshim_fork"]
static FORKED: AtomicBool = AtomicBool::new(false);
/// In a forked child, the forking thread's slot until it is adopted (null: none pending).
#[link_section = ".data.mallocshim_fork"]
static SURVIVOR: AtomicPtr<Slot> = AtomicPtr::new(ptr::null_mut());

/// The `in_use` mark of a slot claimed now (never 0).
pub(super) fn claim_mark() -> u32 {
    GEN.load(Relaxed).wrapping_add(1).max(1)
}

fn pause() {
    std::thread::sleep(std::time::Duration::from_micros(200));
}

/// Enters the folding side unless a walk runs; the caller leaves it with [`leave_folding`].
fn try_folding() -> bool {
    FOLDING.fetch_add(1, SeqCst);
    if WALKING.load(SeqCst) == 0 {
        return true;
    }
    FOLDING.fetch_sub(1, SeqCst);
    false
}

fn leave_folding() {
    FOLDING.fetch_sub(1, SeqCst);
}

/// An exiting thread's slot (its key destructor): folded now, or retired when a walk runs.
/// Never waits.
pub(super) fn retire(s: &Slot) {
    if try_folding() {
        fold_and_free(s);
        drain_folding();
        leave_folding();
        return;
    }
    let me = s as *const Slot as *mut Slot;
    let mut head = RETIRED.load(SeqCst);
    loop {
        s.retired_next.store(head, Relaxed);
        match RETIRED.compare_exchange_weak(head, me, SeqCst, SeqCst) {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    // The walk may have ended before the push: then no walk's end would see it.
    drain();
}

/// Folds the retired slots (and, in a forked child, the slots of the threads it does not have)
/// when no walk runs; otherwise leaves them to the running walk's end.
fn drain() {
    if RETIRED.load(SeqCst).is_null() && !FORKED.load(SeqCst) {
        return;
    }
    if try_folding() {
        drain_folding();
        leave_folding();
    }
}

/// [`drain`]'s work, on the folding side. Each retired slot is taken off the list by one
/// drainer (the whole list is swapped out), the fork's leftovers by one (`FORKED` swapped).
fn drain_folding() {
    if FORKED.load(SeqCst) && FORKED.swap(false, SeqCst) {
        adopt_survivor();
        let mark = claim_mark();
        each_in_use(|s, m| {
            if m != mark {
                fold_and_free(s);
            }
        });
    }
    let mut p = RETIRED.swap(ptr::null_mut(), SeqCst);
    while !p.is_null() {
        // SAFETY: slots live for the process's life; this drainer took the list alone.
        let s = unsafe { &*p };
        // Read before the fold frees the slot for reuse (and a new push rewrites the link).
        p = s.retired_next.load(Relaxed);
        fold_and_free(s);
    }
}

/// Gives the survivor's slot (see the module doc), if one is pending, the child's generation and
/// tid. Its mark moves by CAS from the parent's generation: a slot whose thread exited and
/// folded it (mark 0), or that a new thread claimed since (the child's mark), is left alone.
/// The survivor's tid is the child's pid (the forking thread is the child's main thread).
fn adopt_survivor() {
    let s = SURVIVOR.swap(ptr::null_mut(), SeqCst);
    if s.is_null() {
        return;
    }
    // SAFETY: slots live for the process's life.
    let s = unsafe { &*s };
    let mark = claim_mark();
    let m = s.in_use.load(Acquire);
    if m != 0 && m != mark && s.in_use.compare_exchange(m, mark, AcqRel, Relaxed).is_ok() {
        // SAFETY: getpid has no preconditions.
        s.tid.store(unsafe { libc::getpid() } as u32, Relaxed);
    }
}

/// Adopts `s` now when it is a forked child's pending survivor slot (the owner's heap-profile
/// sample, which records the slot's tid). One load otherwise.
pub(crate) fn adopt_if_survivor(s: &Slot) {
    if core::ptr::eq(SURVIVOR.load(Relaxed), s) {
        adopt_survivor();
    }
}

/// Starts a walk: settles what a fork or an earlier walk left, then waits for folds in
/// progress (bounded: folds never wait).
pub(super) fn enter_walk() {
    drain();
    loop {
        WALKING.fetch_add(1, SeqCst);
        if FOLDING.load(SeqCst) == 0 {
            return;
        }
        WALKING.fetch_sub(1, SeqCst);
        pause();
    }
}

/// Ends a walk and folds the slots of the threads that exited during it.
pub(super) fn leave_walk() {
    WALKING.fetch_sub(1, SeqCst);
    drain();
}

/// Writes the generation once in the parent (at initialisation), so that its page is present
/// there: a forked child's bump then costs one copy-on-write fault, not a read fault on an
/// untouched page and then a write fault (measured: 2 faults per fork before).
pub(super) fn settle_page() {
    GEN.store(GEN.load(Relaxed), Relaxed);
}

/// Fork child handler (single-threaded, before fork returns; async-signal-safe): no walk or fold
/// runs here; the survivor's slot is named for the first drain to adopt, every other slot in use
/// is left for that drain to fold. Writes only the fork page, and only what changes (each page
/// written costs the child a copy).
#[link_section = ".text.mallocshim_fork"]
pub(super) unsafe extern "C" fn after_fork_child() {
    for c in [&WALKING, &FOLDING] {
        if c.load(Relaxed) != 0 {
            c.store(0, Relaxed);
        }
    }
    if !RETIRED.load(Relaxed).is_null() {
        RETIRED.store(ptr::null_mut(), Relaxed);
    }
    GEN.store(GEN.load(Relaxed).wrapping_add(1), Relaxed);
    // SAFETY: this thread's TLS block.
    let own = unsafe { (*tls::state()).slot };
    // A survivor pending from an earlier fork is not this child's: its thread is gone.
    let want = if own.is_null() || own == exited_ptr() { ptr::null_mut() } else { own };
    if SURVIVOR.load(Relaxed) != want {
        SURVIVOR.store(want, SeqCst);
    }
    if !FORKED.load(SeqCst) {
        FORKED.store(true, SeqCst);
    }
}
