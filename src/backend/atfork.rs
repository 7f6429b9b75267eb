//! Fork handlers: the backend's, registered on its behalf with glibc's fork rules, and the shim's
//! own registrations. Owns the exported `pthread_atfork`; must not allocate or lock in a handler.
//!
//! - **Only the chosen backend registers.** The built-in jemalloc has no load-time constructor
//!   (build.rs strips it), so it initialises, and calls `pthread_atfork`, only when the jemalloc
//!   backend loads it; tcmalloc registers when it is dlopen()ed. Under the glibc backend the shim
//!   adds no prepare or parent handler at all: glibc's own fork rules stand.
//! - **glibc's single-threaded rule.** glibc's fork takes its malloc locks only when the process is
//!   multi-threaded, so that a fork from a signal handler that interrupted malloc (or fork) works
//!   in a single-threaded program. jemalloc's and tcmalloc's prepare handlers take their locks
//!   unconditionally and self-deadlock there. The shim therefore adopts the backend's handlers
//!   (the `pthread_atfork` calls made while the backend loads, on the initialising thread) and
//!   registers one wrapper trio whose prepare and parent handlers skip the backend's while
//!   `__libc_single_threaded` is set: no other thread can hold a backend lock then. Unlike
//!   glibc's malloc, which takes no lock at all in a single-threaded process, jemalloc and
//!   tcmalloc lock even then, so the child handler always runs the backend's: it resets the
//!   locks that the interrupted code may have held when the signal handler forked.
//! - **stdio before the allocator.** glibc's fork takes the stdio list lock and then its malloc
//!   locks; a backend whose prepare handler locks first deadlocks against a thread in
//!   `fflush(NULL)` (it holds the list lock and waits for a FILE whose owner waits in malloc).
//!   The wrapper's prepare takes the list lock itself (`_IO_list_lock`, exported by glibc, a
//!   recursive lock, so fork's own `_IO_list_lock` re-takes it) before the backend's handler, and
//!   the parent handler releases it after the backend's; in a multi-threaded child glibc resets
//!   the list lock itself (`_IO_list_resetlock`, posix/fork.c of glibc 2.36, before the child
//!   handlers run), so the child handler leaves it alone.
//! - **A single-threaded parent's child runs the backend's child handler lazily.** After a fork
//!   whose prepare skipped the backend's handlers, [`child`] only marks the handler owed
//!   ([`deferred`]); `hot::postfork` moves the child to its post-fork entry table, whose first
//!   call runs it ([`settle`]) and moves back. Every other way into the backend settles first:
//!   the cold-path dispatch in `backend` (figures, release, version), `mallctl`,
//!   `pthread_create`, the slot release at thread exit, a later fork's prepare. A child that
//!   execs or `_exit`s at once never runs it: under tcmalloc its `CentralCacheUnlockAll` (one
//!   spin lock per size class, each on its own cache line) was 44% of such a child's page
//!   faults, and under jemalloc the re-initialisation of every arena's mutexes most of the rest.
//!   A multi-threaded parent's child still runs it at once: its prepare handler took the locks,
//!   and thread-exit destructors of the backend (which the shim does not see) would wait on them.
//! - Every other `pthread_atfork` call that reaches the shim's export (programs and libraries
//!   bound to the dynamic symbol; most link glibc's static stub instead) is forwarded unchanged.
//!   The shim's own child handlers (`slots`, `worker`) go through [`register_child`].

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::*};

/// A fork handler as glibc takes it.
pub type Handler = Option<unsafe extern "C" fn()>;

extern "C" {
    /// glibc's registration behind `pthread_atfork` (libc.so.6, GLIBC_2.3.2); the DSO handle
    /// unregisters the handlers when that DSO is dlclose()d (NULL: never).
    fn __register_atfork(prepare: Handler, parent: Handler, child: Handler, dso: *mut c_void) -> c_int;
    /// Non-zero while the process has never had a second thread (glibc 2.32).
    static __libc_single_threaded: c_char;
    fn _IO_list_lock();
    fn _IO_list_unlock();
}

/// The adopted backend handlers (function addresses, 0 = none).
static PREPARE: AtomicUsize = AtomicUsize::new(0);
static PARENT: AtomicUsize = AtomicUsize::new(0);
static CHILD: AtomicUsize = AtomicUsize::new(0);
/// Kernel tid of the thread loading the backend (0: no backend is loading).
static LOADING: AtomicU32 = AtomicU32::new(0);
/// The current fork skipped the backend's handlers (single-threaded).
static SKIPPED: AtomicBool = AtomicBool::new(false);
/// The wrapper trio is registered.
static WRAPPED: AtomicBool = AtomicBool::new(false);
/// The backend's child handler in a forked child: [`NONE`] (ran, or nothing owed), [`OWED`]
/// (deferred by [`child`]), else the `pthread_self` of the thread running it.
#[link_section = ".data.mallocshim_fork"]
static CHILD_STATE: AtomicUsize = AtomicUsize::new(NONE);
const NONE: usize = 0;
const OWED: usize = 1;

// Aligns `.data.mallocshim_fork` (the statics the child handlers write, about 120 bytes) to 256
// bytes, more than the section holds, so that it never straddles a page whatever precedes it in
// `.data`: the linker starts `.data` at the page offset the file layout gives it (0xf80 in one
// build, where the section crossed into the next page; `tests/fork.rs`
// `child_handlers_write_one_page`). Assembly, because a Rust static cannot raise a section's
// alignment without growing it by as much, and a `#[used]` one gets a section of its own.
core::arch::global_asm!(".pushsection .data.mallocshim_fork,\"aw\",@progbits", ".p2align 8", ".popsection");

fn call(h: &AtomicUsize) {
    let f = h.load(Acquire);
    if f != 0 {
        // SAFETY: a non-zero value is a handler the backend passed to pthread_atfork.
        unsafe { core::mem::transmute::<usize, unsafe extern "C" fn()>(f)() };
    }
}

fn single_threaded() -> bool {
    // SAFETY: a byte glibc exports for this purpose; read volatile as glibc may change it.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(__libc_single_threaded)) != 0 }
}

unsafe extern "C" fn prepare() {
    let skip = single_threaded();
    if !skip {
        // A child that became multi-threaded without allocating (raw clone): its heap first.
        settle();
    }
    // Written only when it changes: a write here is a copy-on-write fault in the parent.
    if SKIPPED.load(Relaxed) != skip {
        SKIPPED.store(skip, Relaxed);
    }
    if skip {
        return;
    }
    // SAFETY: glibc's recursive stdio list lock, released in `parent` (reset by glibc in a child).
    unsafe { _IO_list_lock() };
    call(&PREPARE);
}

unsafe extern "C" fn parent() {
    if SKIPPED.load(Relaxed) {
        return;
    }
    call(&PARENT);
    // SAFETY: taken by this thread in `prepare`.
    unsafe { _IO_list_unlock() };
}

/// Runs the backend's child handler in a single-threaded child too: it re-initialises (jemalloc)
/// or releases (tcmalloc) the backend's locks without needing the prepare handler to have taken
/// them, so a lock held by the code a signal handler interrupted does not block the child. When
/// the prepare was skipped (single-threaded parent) it only marks the handler owed: the child's
/// first way into the backend runs it ([`settle`]). Writes only when the state changes.
#[link_section = ".text.mallocshim_fork"]
unsafe extern "C" fn child() {
    if SKIPPED.load(Relaxed) && CHILD.load(Relaxed) != 0 {
        if CHILD_STATE.load(Relaxed) != OWED {
            CHILD_STATE.store(OWED, Relaxed);
        }
        return;
    }
    call(&CHILD);
}

/// A fork deferred the backend's child handler and nothing has run it yet.
pub fn deferred() -> bool {
    CHILD_STATE.load(Acquire) == OWED
}

/// Runs the backend's child handler if a fork deferred it (once; another thread arriving
/// meanwhile waits for it, which only a program that made a thread without `pthread_create`
/// can). Returns true when nothing is owed any more; false when this thread is the one running
/// it (a signal handler interrupted it): the caller goes on as the eager handler's would.
/// Async-signal-safe: loads, compare-and-swap, `sched_yield`.
#[inline]
pub fn settle() -> bool {
    if CHILD_STATE.load(Acquire) == NONE {
        return true;
    }
    settle_slow()
}

#[cold]
fn settle_slow() -> bool {
    // SAFETY: pthread_self reads the thread pointer; no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    loop {
        match CHILD_STATE.load(Acquire) {
            NONE => return true,
            OWED => {
                if CHILD_STATE.compare_exchange(OWED, me, AcqRel, Acquire).is_ok() {
                    call(&CHILD);
                    CHILD_STATE.store(NONE, Release);
                    return true;
                }
            }
            running if running == me => return false,
            _ => {
                // SAFETY: no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
}

/// Runs `load` (a backend's loading) with its `pthread_atfork` calls adopted, then registers the
/// wrapper trio if it registered anything. Initialisation only (one thread).
pub fn loading_backend<R>(load: impl FnOnce() -> R) -> R {
    // SAFETY: gettid has no preconditions.
    LOADING.store(unsafe { libc::gettid() } as u32, SeqCst);
    let r = load();
    LOADING.store(0, SeqCst);
    let any = [&PREPARE, &PARENT, &CHILD].iter().any(|h| h.load(Acquire) != 0);
    if any && !WRAPPED.swap(true, AcqRel) {
        // SAFETY: plain extern "C" handlers that live as long as the process.
        if unsafe { __register_atfork(Some(prepare), Some(parent), Some(child), core::ptr::null_mut()) } != 0
        {
            crate::base::diag::warn!(
                "cannot register the backend's fork handlers: fork may leave its heap locked"
            );
        }
    }
    r
}

/// Registers one of the shim's own child handlers (they take no lock).
pub fn register_child(child: unsafe extern "C" fn()) {
    // SAFETY: a plain extern "C" function that lives as long as the process.
    unsafe { __register_atfork(None, None, Some(child), core::ptr::null_mut()) };
}

/// The exported `pthread_atfork`: adopts the handlers of the backend being loaded (a call from
/// the initialising thread while [`loading_backend`] runs), forwards every other call.
///
/// # Safety
/// pthread_atfork's contract.
pub unsafe fn pthread_atfork(prepare: Handler, parent: Handler, child: Handler) -> c_int {
    let loading = LOADING.load(SeqCst);
    // SAFETY: gettid has no preconditions.
    if loading != 0 && loading == unsafe { libc::gettid() } as u32 && PREPARE.load(Relaxed) == 0 {
        PREPARE.store(prepare.map_or(0, |f| f as usize), Release);
        PARENT.store(parent.map_or(0, |f| f as usize), Release);
        CHILD.store(child.map_or(0, |f| f as usize), Release);
        return 0;
    }
    // SAFETY: forwarded as given.
    unsafe { __register_atfork(prepare, parent, child, core::ptr::null_mut()) }
}
