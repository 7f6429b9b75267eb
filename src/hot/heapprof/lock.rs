//! The lock of one shard of the heap profile's tables: a futex mutex (Drepper's three states:
//! 0 free, 1 held, 2 held with sleepers). A taker spins a short while, then sleeps in
//! FUTEX_WAIT until the holder's release wakes it, so a holder preempted on an oversubscribed
//! machine costs its waiters one sleep instead of a storm of `sched_yield` (issue 21, part 5).
//!
//! Owns nothing but the word. Never allocates, never panics; its syscalls are FUTEX_WAIT (only
//! when the lock is taken and stays taken past the spin) and FUTEX_WAKE (only when a waiter
//! slept): the exception to the hot-path rule stated in `heapprof`'s module doc. Not
//! reentrant: a holder never calls anything that could take a shard lock again.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering::*};

/// Spins before sleeping: about the length of a table update, so an uncontended handover
/// never reaches the syscall.
const SPINS: u32 = 100;

pub struct Lock(AtomicU32);

/// Releases the lock when dropped.
pub struct Held<'a>(&'a Lock);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.0 .0.swap(0, Release) == 2 {
            futex(&self.0 .0, libc::FUTEX_WAKE, 1);
        }
    }
}

fn futex(word: &AtomicU32, op: i32, val: u32) {
    // SAFETY: the word is a live, aligned u32 for the call's duration; FUTEX_WAIT with no
    // timeout and FUTEX_WAKE read nothing else. Errors (EAGAIN: the word changed; EINTR) are
    // handled by the caller's loop.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op | libc::FUTEX_PRIVATE_FLAG,
            val,
            core::ptr::null::<libc::timespec>(),
        );
    }
}

impl Lock {
    pub const fn new() -> Lock {
        Lock(AtomicU32::new(0))
    }

    #[inline]
    pub fn lock(&self) -> Held<'_> {
        if self.0.compare_exchange(0, 1, Acquire, Relaxed).is_ok() {
            return Held(self);
        }
        self.contended();
        Held(self)
    }

    #[cold]
    #[inline(never)]
    fn contended(&self) {
        for _ in 0..SPINS {
            core::hint::spin_loop();
            if self.0.load(Relaxed) == 0 && self.0.compare_exchange(0, 1, Acquire, Relaxed).is_ok() {
                return;
            }
        }
        // Mark it contended; whoever holds it wakes one sleeper on release.
        while self.0.swap(2, Acquire) != 0 {
            futex(&self.0, libc::FUTEX_WAIT, 2);
        }
    }

    /// In a forked child: whoever held it does not exist here. Writes only a held lock (in a
    /// child each page written is a copy, and most children exec or exit at once).
    pub fn reset(&self) {
        if self.0.load(Relaxed) != 0 {
            self.0.store(0, Release);
        }
    }
}

impl Default for Lock {
    fn default() -> Self {
        Self::new()
    }
}

/// One shard of a heap-profile table: its lock and the table it guards, on its own cache lines.
#[repr(align(128))]
pub struct Shard<T> {
    pub lock: Lock,
    pub t: UnsafeCell<T>,
}

impl<T> Shard<T> {
    pub const fn new(t: T) -> Shard<T> {
        Shard { lock: Lock::new(), t: UnsafeCell::new(t) }
    }
}

// SAFETY: every access to a shard's table goes through its lock (or happens before the tables
// are published: `live::ensure`, `records::attach`).
unsafe impl<T> Sync for Shard<T> {}
