//! The dump-request mailbox, the one piece of the dump machinery the hot path and the dump
//! signal's handler touch: the worker's wake-up pipe ([`request`] writes one byte to it), a flag
//! set when a dump is asked for while the shim's thread does not exist yet (single-threaded
//! process, forked child before its worker starts), and the writer the cold path registers
//! (`cold::dump::write_pending`, by the library constructor). The out-of-line recording path
//! reads the flag and, when set, calls the registered writer through its pointer, so a sampled
//! call can still answer a request as before without the hot path importing the cold one.
//! Everything here is async-signal-safe: relaxed atomics and one TLS store.

use crate::hot::tls;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering::Relaxed};

/// The write end of the worker's wake-up pipe; -1 without a worker.
#[link_section = ".data.mallocshim_fork"]
static WAKER: AtomicI32 = AtomicI32::new(-1);

/// The worker's wake-up pipe (`-1`: none, e.g. in a forked child before its worker starts).
pub fn set_waker(fd: i32) {
    WAKER.store(fd, Relaxed);
}

/// True when a worker's pipe is registered.
pub fn has_waker() -> bool {
    WAKER.load(Relaxed) >= 0
}

/// Wakes the shim's thread to drain the trace rings now (a recording thread's ring is full):
/// one non-blocking write(2) of `r` to its pipe, which asks for nothing else (`cold::worker`).
/// False, writing nothing, when there is no worker. Async-signal-safe.
pub fn wake_drain() -> bool {
    poke(b"r")
}

/// Writes `byte` to the worker's pipe (non-blocking: a full pipe already wakes it); false,
/// writing nothing, when there is no worker. Async-signal-safe.
fn poke(byte: &'static [u8; 1]) -> bool {
    let fd = WAKER.load(Relaxed);
    if fd < 0 {
        return false;
    }
    // SAFETY: writing one byte from a static buffer to the worker's pipe.
    unsafe { libc::write(fd, byte.as_ptr().cast(), 1) };
    true
}

/// Asks for a dump. Async-signal-safe: one non-blocking write(2) to the worker's pipe; without a
/// worker, two stores (the request and this thread's sample countdown, so that its next recorded
/// call takes the out-of-line path and sees the request).
pub fn request() {
    ASKED.fetch_add(1, Relaxed);
    if !poke(b"d") {
        post();
    }
}

/// Asks the worker to open the control channel (`cold::ctl`): one byte `a` to its pipe.
/// Async-signal-safe. Without a worker (a single-threaded process) nothing happens: the channel
/// is served by the shim's thread, and the client falls back to the plain signal.
pub fn attach() {
    poke(b"a");
}

/// Requests ever made (`cold::dumpbound` compares it with those answered, to say when requests
/// were merged).
static ASKED: AtomicU64 = AtomicU64::new(0);

/// Requests ever made.
pub fn asked() -> u64 {
    ASKED.load(Relaxed)
}

/// A dump was requested while there was no worker.
static PENDING: AtomicBool = AtomicBool::new(false);
/// The cold path's writer of a pending request (a `fn()`); null until registered.
static WRITER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Posts a request for the next sampled call of any thread (or exit) to write, and makes this
/// thread's next recorded call take the out-of-line path, which sees it.
pub fn post() {
    PENDING.store(true, Relaxed);
    // SAFETY: this thread's TLS block.
    unsafe { (*tls::state()).countdown = 0 };
}

/// True when a dump request waits for a thread to write it.
#[inline(always)]
pub fn pending() -> bool {
    PENDING.load(Relaxed)
}

/// Takes the pending request (true when there was one); the caller answers it.
pub fn take() -> bool {
    PENDING.swap(false, Relaxed)
}

/// A dump is being written: a pending request is answered by it.
pub fn clear() {
    PENDING.store(false, Relaxed);
}

/// Registers the cold path's writer of a pending request.
pub fn register_writer(f: fn()) {
    WRITER.store(f as *mut (), Relaxed);
}

/// Runs the registered writer on the calling thread (it takes the request itself). Before one
/// is registered the request stays pending.
#[cold]
#[inline(never)]
pub fn write_pending() {
    let w = WRITER.load(Relaxed);
    if !w.is_null() {
        // SAFETY: the only non-null value stored is a `fn()` (`register_writer`), and `fn()`
        // has the size and representation of a data pointer on the targets Rust supports here.
        let f: fn() = unsafe { core::mem::transmute::<*mut (), fn()>(w) };
        f();
    }
}
