//! The shim's own thread: created with every signal blocked, it sleeps in poll() on a pipe and
//! writes a dump when woken (by the dump signal's handler, which only writes one byte: async-
//! signal-safe) and every `MALLOCSHIM_DUMP_INTERVAL_S`. A burst of wake-ups while a dump runs is
//! drained into one more dump. Its allocations bypass recording (its guard is always set).
//! After fork the child closes the inherited pipe (a signal to the child must not dump the
//! parent); the child has no worker.

use crate::tls::{self, Reentry};
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering::*};

static WAKE_RD: AtomicI32 = AtomicI32::new(-1);
static WAKE_WR: AtomicI32 = AtomicI32::new(-1);
static STARTED: AtomicBool = AtomicBool::new(false);

/// Asks the worker for a dump. Async-signal-safe: one non-blocking write(2).
pub fn request_dump() {
    let fd = WAKE_WR.load(Relaxed);
    if fd >= 0 {
        // SAFETY: writing one byte from a static buffer; a full pipe already holds a request.
        unsafe { libc::write(fd, b"d".as_ptr().cast(), 1) };
    }
}

/// Starts the worker once (from the library constructor, after initialisation).
pub fn start() {
    let cfg = crate::config::get();
    if cfg.dump_signal == 0 && cfg.dump_interval_s == 0 {
        return;
    }
    if STARTED.swap(true, AcqRel) {
        return;
    }
    let _g = Reentry::enter();
    let mut fds = [0; 2];
    // SAFETY: a valid two-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        crate::shim_warn!("cannot create the worker's pipe: no dumps on signal");
        return;
    }
    WAKE_RD.store(fds[0], Relaxed);
    WAKE_WR.store(fds[1], Relaxed);
    // SAFETY: sigset operations on local, initialised sets; the old mask is restored below.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = std::thread::Builder::new().name("mallocshim".into()).spawn(run);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        if r.is_err() {
            crate::shim_warn!("cannot start the worker thread: no dumps on signal");
        }
    }
    // SAFETY: registering plain extern "C" functions.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
}

extern "C" fn after_fork_child() {
    for a in [&WAKE_RD, &WAKE_WR] {
        let fd = a.swap(-1, Relaxed);
        if fd >= 0 {
            // SAFETY: closing a descriptor this module owns; async-signal-safe.
            unsafe { libc::close(fd) };
        }
    }
}

fn run() {
    // SAFETY: this thread's TLS: everything it allocates goes straight to the backend.
    unsafe { (*tls::state()).guard = 1 };
    let interval_ms = crate::config::get().dump_interval_s.saturating_mul(1000);
    let mut next = crate::clock::mono_ns() / 1_000_000 + interval_ms;
    loop {
        let rd = WAKE_RD.load(Relaxed);
        if rd < 0 {
            return;
        }
        let now = crate::clock::mono_ns() / 1_000_000;
        let timeout = if interval_ms == 0 { -1 } else { next.saturating_sub(now).min(i32::MAX as u64) as i32 };
        let mut p = libc::pollfd { fd: rd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, timeout) };
        let mut want = false;
        if n > 0 {
            let mut buf = [0u8; 256];
            // Drain every pending request: a burst is one dump.
            // SAFETY: reading into a local buffer from our non-blocking pipe.
            while unsafe { libc::read(rd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {
                want = true;
            }
        }
        if interval_ms != 0 && crate::clock::mono_ns() / 1_000_000 >= next {
            want = true;
            next += interval_ms;
        }
        if want {
            let _ = crate::dump::write_all();
        }
    }
}
