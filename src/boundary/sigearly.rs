//! The dump signal caught from the loader's relocation of this library, before any constructor
//! or allocation runs: the window in which a `kill -USR1` used to kill a program that has the
//! shim mapped (mariadbd: 20–50 ms at load between the mapping and the shim's first call, spent
//! mapping and relocating its 20 libraries and its 190,000 relocations).
//!
//! The library carries one `R_X86_64_IRELATIVE` relocation (a local `gnu_indirect_function`
//! referenced from a retained data word). The loader calls its resolver while it relocates this
//! library — after the libraries loaded after it, before the program itself and before every
//! constructor — and the resolver installs [`handler`] for the signal that
//! `MALLOCSHIM_DUMP_SIGNAL` names in the initial environment (read from the process's initial
//! stack through the loader's `__libc_stack_end`), if that signal's action is still SIG_DFL.
//! The handler only remembers that a process-directed signal came; `signals::install`, at
//! initialisation, takes the signal over (the early handler counts as SIG_DFL for the
//! application) and turns a remembered signal into a dump request.
//!
//! Must not: call into libc or allocate in the resolver or the handler (they run before the
//! loader has finished, in a signal handler): they make raw system calls (`rt_sigaction`, with
//! the kernel's `sa_restorer` trampoline of their own) and touch only this module's atomics. A
//! signal sent before the loader maps the library at all cannot be caught by anything in the
//! process; `mallocshim dump` waits for the signal to be caught (`SigCgt`).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering::*};

/// The signal the early handler was installed for (0: none).
static SIG: AtomicI32 = AtomicI32::new(0);
/// A process-directed signal arrived while the early handler was in place.
static ASKED: AtomicBool = AtomicBool::new(false);

const SA_RESTORER: u64 = 0x0400_0000;
const SI_USER: c_int = 0;
const SI_QUEUE: c_int = -1;
/// Longest environment scanned, in entries (a bound, not a limit any real program reaches).
const MAX_ENV: usize = 1 << 20;

/// The kernel's `struct sigaction` for `rt_sigaction` on x86-64.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

// The signal-return trampoline (glibc's `__restore_rt`, byte for byte: `mov $15,%rax; syscall`,
// which unwinders and debuggers recognise as a signal frame), and the IRELATIVE relocation whose
// resolver runs at load. The data word lives in a retained section so --gc-sections keeps it.
core::arch::global_asm!(
    ".pushsection .text.mallocshim_restore_rt,\"ax\",@progbits",
    ".p2align 4",
    ".globl mallocshim_restore_rt",
    ".hidden mallocshim_restore_rt",
    ".type mallocshim_restore_rt,@function",
    "mallocshim_restore_rt:",
    ".byte 0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05",
    ".size mallocshim_restore_rt, . - mallocshim_restore_rt",
    ".popsection",
    ".type mallocshim_early_ifunc,@gnu_indirect_function",
    ".set mallocshim_early_ifunc, {resolver}",
    ".pushsection .data.rel.ro.mallocshim_early,\"awR\",@progbits",
    ".p2align 3",
    ".quad mallocshim_early_ifunc",
    ".popsection",
    resolver = sym resolver,
);

extern "C" {
    fn mallocshim_restore_rt();
    /// The loader's pointer to the initial stack (argc, argv, NULL, envp, NULL, auxv).
    static __libc_stack_end: *const c_void;
}

/// What the IRELATIVE relocation resolves to; never called.
extern "C" fn unused() {}

/// The IFUNC resolver, called by the loader while it relocates this library.
extern "C" fn resolver() -> usize {
    install(configured());
    unused as *const () as usize
}

/// `rt_sigaction(2)` as a raw system call; 0 or -errno.
fn rt_sigaction(sig: c_int, act: *const KernelSigaction, old: *mut KernelSigaction) -> i64 {
    let r: i64;
    // SAFETY: the rt_sigaction system call with pointers to live structs (or NULL) and the
    // kernel's 8-byte signal set; it clobbers rcx and r11 only.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_rt_sigaction => r,
            in("rdi") sig as i64,
            in("rsi") act,
            in("rdx") old,
            in("r10") 8u64,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    r
}

/// The dump signal the initial environment names (its default, SIGUSR1, when unset or bad).
fn configured() -> c_int {
    // SAFETY: the loader sets `__libc_stack_end` before relocating anything; the initial stack
    // holds argc, argc argv pointers and a NULL, then the environment up to a NULL.
    unsafe {
        let sp = __libc_stack_end as *const usize;
        if sp.is_null() {
            return libc::SIGUSR1;
        }
        let argc = *sp;
        if argc > MAX_ENV {
            return libc::SIGUSR1;
        }
        let mut ep = sp.add(argc + 2) as *const *const u8;
        for _ in 0..MAX_ENV {
            let e = *ep;
            if e.is_null() {
                break;
            }
            if let Some(v) = value_of(e, b"MALLOCSHIM_DUMP_SIGNAL=") {
                return crate::hot::config::parse_dump_signal(v).unwrap_or(libc::SIGUSR1);
            }
            ep = ep.add(1);
        }
    }
    libc::SIGUSR1
}

/// The value of a `NAME=value` C string when it starts with `prefix` (at most 32 bytes long).
///
/// # Safety
/// `e` is a NUL-terminated string.
unsafe fn value_of(e: *const u8, prefix: &[u8]) -> Option<&'static [u8]> {
    let mut i = 0;
    while i < prefix.len() {
        // SAFETY: bytes up to the NUL are readable; a mismatch (the NUL included) stops here.
        if unsafe { *e.add(i) } != prefix[i] {
            return None;
        }
        i += 1;
    }
    let mut n = 0;
    // SAFETY: as above, up to the NUL or 32 bytes.
    while n < 32 && unsafe { *e.add(i + n) } != 0 {
        n += 1;
    }
    // SAFETY: `n` readable bytes after the prefix; the environment lives as long as the process.
    Some(unsafe { core::slice::from_raw_parts(e.add(i), n) })
}

/// Installs [`handler`] for `sig` if the signal's action is SIG_DFL.
fn install(sig: c_int) {
    if sig <= 0 {
        return;
    }
    let mut old = KernelSigaction { handler: 0, flags: 0, restorer: 0, mask: 0 };
    if rt_sigaction(sig, core::ptr::null(), &mut old) != 0 || old.handler != libc::SIG_DFL {
        return;
    }
    let act = KernelSigaction {
        handler: handler as *const () as usize,
        flags: (libc::SA_SIGINFO | libc::SA_RESTART) as u64 | SA_RESTORER,
        restorer: mallocshim_restore_rt as *const () as usize,
        mask: 0,
    };
    if rt_sigaction(sig, &act, core::ptr::null_mut()) == 0 {
        SIG.store(sig, Release);
    }
}

/// Remembers a process-directed signal (kill, sigqueue); nothing else is safe this early.
extern "C" fn handler(_sig: c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SAFETY: the kernel's siginfo for this signal (checked non-null).
    let code = if info.is_null() { SI_USER } else { unsafe { (*info).si_code } };
    if code == SI_USER || code == SI_QUEUE {
        ASKED.store(true, Relaxed);
    }
}

/// True when `h` (a handler address read from the kernel) is the early handler.
pub fn is_early(h: usize) -> bool {
    h == handler as *const () as usize
}

/// Called once the shim's own handler is installed for `sig` (0: none), or could not be: a
/// remembered signal becomes true once (the caller asks for a dump); the early handler left on
/// another signal (the configuration changed between the two readings) goes back to SIG_DFL.
pub fn take_over(sig: c_int) -> bool {
    let early = SIG.swap(0, AcqRel);
    if early != 0 && early != sig {
        let mut cur = KernelSigaction { handler: 0, flags: 0, restorer: 0, mask: 0 };
        if rt_sigaction(early, core::ptr::null(), &mut cur) == 0 && is_early(cur.handler) {
            let dfl = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
            rt_sigaction(early, &dfl, core::ptr::null_mut());
        }
    }
    ASKED.swap(false, AcqRel) && early == sig
}
