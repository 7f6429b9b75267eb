//! The dump signal inside servers that use it themselves. The shim installs its own handler for
//! `MALLOCSHIM_DUMP_SIGNAL` and interposes `sigaction` and `signal` so that an application
//! replacing the handler (MariaDB's thr_alarm does, for SIGUSR1) only changes what the shim
//! chains to: the kernel keeps the shim's handler, which asks for a dump only for a
//! process-directed signal (si_code SI_USER or SI_QUEUE, as `kill -USR1 PID` sends; never for
//! pthread_kill) and then runs the application's handler as before. Programs that block the
//! signal and take it with `sigwait`/`sigwaitinfo`/`sigtimedwait` (MySQL 8) are served by
//! interposing those: the application still receives the signal. A program that never touches
//! the signal gets a dump instead of dying; SIG_IGN stays ignored (and still dumps).
//! The handler is async-signal-safe: it writes one byte to the worker's pipe (`a` when the
//! signal was queued with the control channel's attach value, see `cold::ctl`).

use core::ffi::{c_int, c_void};
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::*};
use libc::{sigaction as Sigaction, siginfo_t, sigset_t, timespec};
use mallocshim_format::ctl::ATTACH_MAGIC;

const SI_USER: c_int = 0;
const SI_QUEUE: c_int = -1;
const SI_TKILL: c_int = -6;

static DUMP_SIG: AtomicI32 = AtomicI32::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// What the application believes is installed: handler, flags, mask.
static APP_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static APP_FLAGS: AtomicI32 = AtomicI32::new(0);
static APP_MASK: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];
static LOCK: AtomicBool = AtomicBool::new(false);

type SigactionFn = unsafe extern "C" fn(c_int, *const Sigaction, *mut Sigaction) -> c_int;
type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGNAL: AtomicUsize = AtomicUsize::new(0);

unsafe fn real_sigaction(sig: c_int, act: *const Sigaction, old: *mut Sigaction) -> c_int {
    let f = crate::hot::real::next(&REAL_SIGACTION, c"sigaction");
    if f == 0 {
        crate::base::sys::set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: glibc's sigaction, resolved by name, with the caller's arguments.
    unsafe { core::mem::transmute::<usize, SigactionFn>(f)(sig, act, old) }
}

struct Spin;
impl Spin {
    fn lock() -> Spin {
        while LOCK.swap(true, Acquire) {
            core::hint::spin_loop();
        }
        Spin
    }
}
impl Drop for Spin {
    fn drop(&mut self) {
        LOCK.store(false, Release);
    }
}

fn store_mask(m: &sigset_t) {
    // SAFETY: sigset_t is plain data of 128 bytes = 16 words.
    let words: &[usize; 16] = unsafe { &*(m as *const sigset_t as *const [usize; 16]) };
    for (a, w) in APP_MASK.iter().zip(words) {
        a.store(*w, Relaxed);
    }
}

fn load_mask(m: &mut sigset_t) {
    // SAFETY: as in `store_mask`.
    let words: &mut [usize; 16] = unsafe { &mut *(m as *mut sigset_t as *mut [usize; 16]) };
    for (a, w) in APP_MASK.iter().zip(words.iter_mut()) {
        *w = a.load(Relaxed);
    }
}

/// Installs the shim's handler for `sig` (initialisation, under the guard), remembering what was
/// there as the application's action (the load-time handler of `sigearly` counts as SIG_DFL); a
/// signal that `sigearly` caught before this becomes a dump request.
pub fn install(sig: c_int) {
    if sig != 0 {
        install_handler(sig);
    }
    if crate::boundary::sigearly::take_over(sig) {
        crate::hot::mailbox::request();
    }
}

fn install_handler(sig: c_int) {
    // SAFETY: zeroed sigaction structs are valid; real_sigaction gets valid pointers.
    unsafe {
        let mut old: Sigaction = core::mem::zeroed();
        if real_sigaction(sig, ptr::null(), &mut old) != 0 {
            crate::base::diag::warn!("cannot read the action of signal {}: no dumps on signal", sig);
            return;
        }
        if crate::boundary::sigearly::is_early(old.sa_sigaction) {
            old = core::mem::zeroed();
            old.sa_sigaction = libc::SIG_DFL;
        }
        APP_HANDLER.store(old.sa_sigaction, Relaxed);
        APP_FLAGS.store(old.sa_flags, Relaxed);
        store_mask(&old.sa_mask);
        let mut ours: Sigaction = core::mem::zeroed();
        ours.sa_sigaction = handler as *const () as usize;
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut ours.sa_mask);
        if real_sigaction(sig, &ours, ptr::null_mut()) != 0 {
            crate::base::diag::warn!("cannot install the handler of signal {}: no dumps on signal", sig);
            return;
        }
    }
    DUMP_SIG.store(sig, Relaxed);
    INSTALLED.store(true, Release);
}

#[inline]
fn is_dump_request(sig: c_int, info: *const siginfo_t) -> bool {
    if sig != DUMP_SIG.load(Relaxed) || sig == 0 {
        return false;
    }
    // SAFETY: the kernel's siginfo for this signal (checked non-null).
    let code = if info.is_null() { SI_USER } else { unsafe { (*info).si_code } };
    code == SI_USER || code == SI_QUEUE
}

/// A dump-signal request carrying the control channel's attach value (`sigqueue` with
/// `mallocshim_format::ctl::ATTACH_MAGIC`): open the channel instead of writing a dump.
#[inline]
fn is_attach(info: *const siginfo_t) -> bool {
    // SAFETY: the kernel's siginfo (checked non-null); si_value is valid for SI_QUEUE.
    !info.is_null()
        && unsafe { (*info).si_code == SI_QUEUE && (*info).si_value().sival_ptr as usize == ATTACH_MAGIC }
}

/// Answers a process-directed dump signal: the channel or a dump.
#[inline]
fn ask(info: *const siginfo_t) {
    if is_attach(info) {
        crate::hot::mailbox::attach();
    } else {
        crate::hot::mailbox::request();
    }
}

extern "C" fn handler(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let e = crate::base::sys::errno();
    if is_dump_request(sig, info) {
        ask(info);
    }
    let h = APP_HANDLER.load(Relaxed);
    let flags = APP_FLAGS.load(Relaxed);
    crate::base::sys::set_errno(e);
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return;
    }
    if flags & libc::SA_RESETHAND != 0 {
        APP_HANDLER.store(libc::SIG_DFL, Relaxed);
    }
    // SAFETY: the application's handler, called with the signature its flags declare.
    unsafe {
        if flags & libc::SA_SIGINFO != 0 {
            core::mem::transmute::<usize, extern "C" fn(c_int, *mut siginfo_t, *mut c_void)>(h)(
                sig, info, ctx,
            );
        } else {
            core::mem::transmute::<usize, extern "C" fn(c_int)>(h)(sig);
        }
    }
}

/// Interposed `sigaction`: for the dump signal, reads and writes the application's view and
/// keeps the shim's handler installed with the application's mask and flags.
pub unsafe fn sigaction(sig: c_int, act: *const Sigaction, old: *mut Sigaction) -> c_int {
    crate::hot::init::ensure();
    if !INSTALLED.load(Acquire) || sig != DUMP_SIG.load(Relaxed) {
        // SAFETY: forwarded.
        return unsafe { real_sigaction(sig, act, old) };
    }
    let _s = Spin::lock();
    // SAFETY: the caller's pointers (NULL allowed); zeroed sigaction structs are valid.
    unsafe {
        if !old.is_null() {
            let mut cur: Sigaction = core::mem::zeroed();
            real_sigaction(sig, ptr::null(), &mut cur);
            cur.sa_sigaction = APP_HANDLER.load(Relaxed);
            cur.sa_flags = APP_FLAGS.load(Relaxed);
            load_mask(&mut cur.sa_mask);
            *old = cur;
        }
        if !act.is_null() {
            let a = *act;
            let mut ours = a;
            ours.sa_sigaction = handler as *const () as usize;
            ours.sa_flags = (a.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
            if real_sigaction(sig, &ours, ptr::null_mut()) != 0 {
                return -1;
            }
            APP_FLAGS.store(a.sa_flags, Relaxed);
            store_mask(&a.sa_mask);
            APP_HANDLER.store(a.sa_sigaction, Relaxed);
        }
    }
    0
}

/// Interposed `signal`: glibc's BSD semantics (SA_RESTART, the signal blocked in its handler)
/// through the interposed `sigaction` for the dump signal; glibc's own for the others.
pub unsafe fn signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    crate::hot::init::ensure();
    if !INSTALLED.load(Acquire) || sig != DUMP_SIG.load(Relaxed) {
        let f = crate::hot::real::next(&REAL_SIGNAL, c"signal");
        if f == 0 {
            return libc::SIG_ERR;
        }
        // SAFETY: glibc's signal, resolved by name.
        return unsafe { core::mem::transmute::<usize, SignalFn>(f)(sig, h) };
    }
    // SAFETY: zeroed sigaction structs are valid; pointers are local.
    unsafe {
        let mut act: Sigaction = core::mem::zeroed();
        let mut old: Sigaction = core::mem::zeroed();
        act.sa_sigaction = h;
        act.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaddset(&mut act.sa_mask, sig);
        if sigaction(sig, &act, &mut old) != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }
}

/// Interposed `sigtimedwait` (and through it `sigwaitinfo` and `sigwait`): a process-directed
/// dump signal taken here also asks for a dump; the caller receives it unchanged. The kernel's
/// `rt_sigtimedwait` is called directly because glibc's wrapper rewrites SI_TKILL to SI_USER,
/// which would make a `pthread_kill` look like `kill -USR1`; the same rewrite is then applied for
/// the caller. (Unlike glibc's wrapper, this is not a pthread cancellation point.)
pub unsafe fn sigtimedwait(set: *const sigset_t, info: *mut siginfo_t, timeout: *const timespec) -> c_int {
    // SAFETY: zeroed siginfo is valid; the kernel call gets the caller's set and timeout and a
    // valid siginfo pointer; sigset size is the kernel's 8 bytes.
    unsafe {
        let mut local: siginfo_t = core::mem::zeroed();
        let ip = if info.is_null() { &mut local as *mut siginfo_t } else { info };
        let r = libc::syscall(libc::SYS_rt_sigtimedwait, set, ip, timeout, 8usize) as c_int;
        if r > 0 {
            if is_dump_request(r, ip) {
                ask(ip);
            }
            if (*ip).si_code == SI_TKILL {
                (*ip).si_code = SI_USER;
            }
        }
        r
    }
}

pub unsafe fn sigwaitinfo(set: *const sigset_t, info: *mut siginfo_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { sigtimedwait(set, info, ptr::null()) }
}

/// `sigwait`: returns the error number (0 on success), retrying on EINTR as glibc does.
pub unsafe fn sigwait(set: *const sigset_t, sig: *mut c_int) -> c_int {
    loop {
        // SAFETY: forwarded.
        let r = unsafe { sigtimedwait(set, ptr::null_mut(), ptr::null()) };
        if r > 0 {
            // SAFETY: the caller's out-pointer.
            unsafe { *sig = r };
            return 0;
        }
        let e = crate::base::sys::errno();
        if e != libc::EINTR {
            return e;
        }
    }
}
