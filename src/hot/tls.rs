//! Per-thread state of the shim: a slot pointer, a sample countdown and the reentrancy guard, in
//! 16 bytes of initial-exec TLS. Initial-exec keeps `__tls_get_addr` (which may call malloc after a
//! later dlopen) off the hot path, and nothing here has a destructor, so no `__cxa_thread_atexit`
//! either. Owns the RAII [`Reentry`] guard. Must not grow beyond a pointer and two counters.

use core::ptr;

/// The calling thread's state. Zero-initialised in every new thread (it lives in `.tbss`).
#[repr(C)]
pub struct ThreadState {
    /// This thread's counter slot; null before its first recorded call.
    pub slot: *mut crate::hot::slots::Slot,
    /// Calls left until the next timed sample. Non-zero only while the thread records into its
    /// own slot outside the guard: zero sends every call to the recorder's out-of-line path.
    pub countdown: u32,
    /// Non-zero while the shim itself runs code that may allocate: such calls go straight to
    /// the backend, unrecorded.
    pub guard: u32,
}

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 4",
    ".type __mallocshim_tls_state,@object",
    ".size __mallocshim_tls_state,16",
    "__mallocshim_tls_state:",
    ".zero 16",
    ".popsection",
);

/// Address of the calling thread's [`ThreadState`] (initial-exec TLS: `%fs:0` plus a GOT offset).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn state() -> *mut ThreadState {
    crate::base::sys::tls_address!("__mallocshim_tls_state").cast()
}

#[cfg(not(target_arch = "x86_64"))]
std::thread_local! {
    static STATE: core::cell::UnsafeCell<ThreadState> = const {
        core::cell::UnsafeCell::new(ThreadState { slot: ptr::null_mut(), countdown: 0, guard: 0 })
    };
}

/// Address of the calling thread's [`ThreadState`] (a const thread-local without Drop).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn state() -> *mut ThreadState {
    STATE.with(|s| s.get())
}

/// True when the calling thread is inside the shim's own code.
#[inline(always)]
pub fn guarded() -> bool {
    // SAFETY: `state()` points to this thread's live TLS block.
    unsafe { (*state()).guard != 0 }
}

/// RAII reentrancy guard: while alive, allocations made by this thread bypass recording (and,
/// during start-up, come from the bootstrap pool). It also zeroes the sample countdown, which
/// sends the thread's calls to the recorder's out-of-line path where the guard is tested, so
/// the inline path tests the countdown alone; both are restored on drop.
pub struct Reentry {
    st: *mut ThreadState,
    prev: u32,
    countdown: u32,
}

impl Reentry {
    #[inline]
    pub fn enter() -> Reentry {
        let st = state();
        // SAFETY: `st` is this thread's TLS block; only this thread touches it.
        unsafe {
            let prev = ptr::replace(ptr::addr_of_mut!((*st).guard), 1);
            let countdown = ptr::replace(ptr::addr_of_mut!((*st).countdown), 0);
            Reentry { st, prev, countdown }
        }
    }
}

impl Drop for Reentry {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in `enter`; the guard is restored on the same thread that set it.
        unsafe {
            (*self.st).guard = self.prev;
            (*self.st).countdown = self.countdown;
        }
    }
}
