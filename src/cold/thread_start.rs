//! The interposed `pthread_create` and its trampoline, the new thread's first frame: it records
//! the thread's start routine, creator and start time in the thread's recording slot, and its
//! stack bounds for the heap profile's unwinder, then runs the program's routine.
//!
//! A thread that never allocates must not meet the backend because the shim started it (an
//! idle thread under glibc would otherwise get a thread cache and an arena: one more mapping,
//! page table and lock that every later fork copies and unlocks). So what the creator hands the
//! trampoline is a record from a static pool (claimed and released with one atomic each; a
//! block from the backend only when all [`POOL`] records are in flight, and always under
//! jemalloc, whose threads must meet it through a free before they exit:
//! `Backend::thread_needs_a_first_free`), and the new thread's
//! stack bounds are worked out from the thread pointer and the creation attributes rather than
//! asked of `pthread_getattr_np` (which allocates a CPU set). Both run under the reentrancy
//! guard; neither may lock. The shim's own thread (created under the guard) gets no slot.

use crate::hot::tls::{self, Reentry};
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};

/// What the interposed `pthread_create` hands its trampoline: the program's start routine and
/// argument, who created the thread when, and the stack it asked for.
struct Start {
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
    creator_tid: u32,
    unix_ms: u64,
    /// Created by the shim's own code (its worker): no slot, no record.
    own: bool,
    stack: Requested,
}

/// The stack the creation attributes ask for (read in the creator: no allocation).
#[derive(Clone, Copy)]
struct Requested {
    /// Bytes of stack (glibc's default when the attributes name none).
    size: usize,
    guard: usize,
    /// Lowest byte of a stack the program supplied (`pthread_attr_setstack`); 0: glibc's.
    user_lo: usize,
}

/// Start records in flight at once before the backend is asked for one.
const POOL: usize = 64;

struct Record {
    busy: AtomicBool,
    start: UnsafeCell<MaybeUninit<Start>>,
}

struct Records([Record; POOL]);

// SAFETY: a record's `start` is written only by the creator that claimed it (`busy` false to
// true) and read only by the thread it was handed to, which then releases it (`busy` false,
// Release; the next claim acquires).
unsafe impl Sync for Records {}

static RECORDS: Records = Records(
    [const { Record { busy: AtomicBool::new(false), start: UnsafeCell::new(MaybeUninit::uninit()) } }; POOL],
);
/// Where the next claim starts looking (spreads concurrent creators over the pool).
static HINT: AtomicUsize = AtomicUsize::new(0);

/// The pool record `p` is, if it is one.
fn pooled(p: *mut Start) -> Option<&'static Record> {
    RECORDS.0.iter().find(|r| core::ptr::eq(r.start.get().cast::<Start>(), p))
}

/// A record holding `s`: from the pool, else from the backend (under the caller's guard); null
/// when neither has one.
fn claim(s: Start) -> *mut Start {
    // Under a backend whose threads must meet it through a free before they exit (jemalloc:
    // `Backend::thread_needs_a_first_free`), the record is a block of the backend's, which the
    // new thread frees at its start.
    if !crate::backend::published().is_some_and(|b| b.thread_needs_a_first_free()) {
        let h = HINT.fetch_add(1, Relaxed);
        for i in 0..POOL {
            let r = &RECORDS.0[(h + i) % POOL];
            if !r.busy.load(Relaxed) && r.busy.compare_exchange(false, true, Acquire, Relaxed).is_ok() {
                // SAFETY: claimed just now: this thread alone writes it until it is handed over.
                return unsafe { (*r.start.get()).write(s) };
            }
        }
    }
    // SAFETY: a fresh block of the size of `Start` (malloc aligns to 16), written once.
    unsafe {
        let b = libc::malloc(core::mem::size_of::<Start>()) as *mut Start;
        if !b.is_null() {
            b.write(s);
        }
        b
    }
}

/// Reads the record and gives it back (to the pool, or to the backend under the caller's guard).
///
/// # Safety
/// `p` came from [`claim`] and is read once.
unsafe fn take(p: *mut Start) -> Start {
    // SAFETY: the caller's contract: a record written by `claim`, read once.
    let s = unsafe { core::ptr::read(p) };
    match pooled(p) {
        Some(r) => r.busy.store(false, Release),
        // SAFETY: a block `claim` took from the backend.
        None => unsafe { libc::free(p.cast()) },
    }
    s
}

/// The stack `attr` asks for (null: glibc's defaults). No allocation: `pthread_attr_init` and
/// the getters only copy fields.
fn requested(attr: *const libc::pthread_attr_t) -> Requested {
    // SAFETY: `attr` is the caller's initialised attribute object or null; `own` is a local
    // initialised here and destroyed below.
    unsafe {
        let mut own: libc::pthread_attr_t = core::mem::zeroed();
        let a = if attr.is_null() {
            if libc::pthread_attr_init(&mut own) != 0 {
                return Requested { size: 0, guard: 0, user_lo: 0 };
            }
            &own as *const libc::pthread_attr_t
        } else {
            attr
        };
        let (mut size, mut guard, mut lo) = (0usize, 0usize, core::ptr::null_mut::<c_void>());
        let mut lo_size = 0usize;
        libc::pthread_attr_getstacksize(a, &mut size);
        libc::pthread_attr_getguardsize(a, &mut guard);
        libc::pthread_attr_getstack(a, &mut lo, &mut lo_size);
        if attr.is_null() {
            libc::pthread_attr_destroy(&mut own);
        }
        // glibc reports a stack address for attributes without one too: its (null) top minus
        // the size, which wraps to 0.
        let user_lo = if (lo as usize).wrapping_add(lo_size) == 0 { 0 } else { lo as usize };
        Requested { size, guard, user_lo }
    }
}

/// The running thread's stack bounds from its thread pointer and what its creator asked for,
/// as `pthread_getattr_np` would give them but without its allocation. glibc keeps the thread's
/// descriptor (at the thread pointer) and static TLS (just below it) at the top of the stack
/// block, so `hi` is the thread pointer (tighter than glibc's, which ends at the block's end);
/// `lo` is at or above the lowest usable byte: the block is at least the requested size (plus
/// its guard on glibc 2.27 and later), and a page covers the descriptor and the alignment. `lo`
/// only decides whether a sample's stack pointer is on this stack; reads stay between the stack
/// pointer and `hi`.
fn bounds(req: Requested) -> Option<(usize, usize)> {
    let hi = crate::base::sys::thread_pointer();
    let lo = if req.user_lo != 0 {
        req.user_lo
    } else {
        hi.checked_sub(req.size)?.checked_add(req.guard + 4096)?
    };
    (req.size > 0 && lo < hi).then_some((lo, hi))
}

/// The new thread's first frame: records its start routine, creator and start time in the
/// thread's recording slot (claimed now, under the guard), then runs the program's routine.
extern "C" fn trampoline(p: *mut c_void) -> *mut c_void {
    // This frame's stack pointer, which is the one at the start routine's call below (fixed
    // for the body): a sampled stack ends there, above the start routine (heapprof::thread_started).
    let stop: usize;
    // SAFETY: reads one register.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) stop, options(nomem, nostack, preserves_flags)) };
    let st = {
        let _g = Reentry::enter();
        // SAFETY: `p` is the record `pthread_create` claimed for this thread alone; read once.
        let st = unsafe { take(p.cast()) };
        if let Some(b) = crate::backend::published() {
            b.thread_started();
        }
        if !st.own && crate::hot::init::ready() && crate::hot::config::get().profile {
            // SAFETY: this thread's TLS block; a new thread has no slot yet.
            let slot = unsafe {
                let ts = tls::state();
                if (*ts).slot.is_null() {
                    crate::hot::slots::claim(ts)
                } else {
                    (*ts).slot
                }
            };
            if slot != crate::hot::slots::exited_ptr() {
                // SAFETY: the slot this thread just claimed; it lives for the process's life.
                let s = unsafe { &*slot };
                s.start_routine.store(st.start as usize, Relaxed);
                s.creator_tid.store(st.creator_tid, Relaxed);
                s.start_unix_ms.store(st.unix_ms, Relaxed);
                crate::hot::heapprof::thread_started(s, stop, bounds(st.stack));
            }
        }
        st
    };
    // Not a tail call: the start routine must run below `stop`, inside this frame (black_box
    // keeps the compiler from jumping to it with this frame already popped).
    core::hint::black_box((st.start)(st.arg))
}

type PthreadCreateFn = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C" fn(*mut c_void) -> *mut c_void,
    *mut c_void,
) -> c_int;
static REAL_PTHREAD_CREATE: AtomicUsize = AtomicUsize::new(0);

/// The interposed `pthread_create`: starts the worker before the program's first thread, then
/// forwards to glibc's with a trampoline that records the thread's start routine, creator and
/// start time (a pool record, or a small block allocated under the guard, given back by the
/// new thread). When no record can be had, the call is forwarded unchanged. (The worker's own
/// creation comes back here and is forwarded.)
///
/// # Safety
/// pthread_create's contract.
pub unsafe fn pthread_create(
    t: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    // A forked child's owed backend fork handler runs before its second thread exists.
    crate::backend::atfork::settle();
    crate::cold::worker::on_thread_create();
    let f = crate::hot::real::next(&REAL_PTHREAD_CREATE, c"pthread_create");
    if f == 0 {
        return libc::EAGAIN;
    }
    // SAFETY: glibc's pthread_create, resolved by name.
    let real = unsafe { core::mem::transmute::<usize, PthreadCreateFn>(f) };
    let own = tls::guarded();
    let rec = {
        let _g = Reentry::enter();
        // SAFETY: gettid has no preconditions.
        let creator_tid = unsafe { libc::gettid() } as u32;
        let stack = requested(attr);
        claim(Start { start, arg, creator_tid, unix_ms: crate::cold::procfs::unix_ms(), own, stack })
    };
    if rec.is_null() {
        // SAFETY: glibc's pthread_create with the caller's arguments, unchanged.
        return unsafe { real(t, attr, start, arg) };
    }
    // SAFETY: glibc's pthread_create with the caller's thread and attributes.
    let rc = unsafe { real(t, attr, trampoline, rec.cast()) };
    if rc != 0 {
        let _g = Reentry::enter();
        // SAFETY: the thread was not created: the record is still ours, given back once.
        let _ = unsafe { take(rec) };
    }
    rc
}
