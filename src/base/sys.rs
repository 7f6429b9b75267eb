//! Leaf helpers over libc shared by several rooms: errno (read and set, and its fixed offset
//! from the thread pointer, which lets the hot path keep errno around a backend's free without a
//! call), the thread pointer itself, the CPU a thread runs on from glibc's rseq area
//! ([`cpu_hint`]; its offset looked up once at initialisation with dlsym, which may allocate under
//! the guard), `environ` lookups ([`env_raw`]), anonymous mappings (the
//! shim's reservation, `region`, and what it cannot hold) and the `close` system call for fork
//! handlers ([`close_raw`]). Imports nothing of the shim; never allocates, locks or fails.

use core::ffi::c_int;
use core::sync::atomic::{AtomicIsize, Ordering};

#[inline(always)]
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

#[inline(always)]
pub fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}

/// Offset of glibc's `errno` from the thread pointer. libc's TLS block is in the static TLS
/// area, at the same offset from the thread pointer in every thread (what initial-exec TLS relies
/// on), so one reading at start-up gives every thread's errno without a call.
#[cfg(target_arch = "x86_64")]
static ERRNO_TPOFF: core::sync::atomic::AtomicIsize = core::sync::atomic::AtomicIsize::new(0);

/// The thread pointer (`%fs:0`, the TCB's self-pointer on x86-64 glibc).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn thread_pointer() -> usize {
    let p: usize;
    // SAFETY: `%fs:0` holds the thread's TCB address for the life of the thread.
    unsafe {
        core::arch::asm!("mov {p}, qword ptr fs:[0]", p = out(reg) p, options(nostack, pure, readonly));
    }
    p
}

/// Offset from the thread pointer of the rseq area's `cpu_id` (glibc 2.35+ registers one per
/// thread: `__rseq_offset`, `__rseq_size`); `isize::MIN` when there is none.
static RSEQ_CPU: AtomicIsize = AtomicIsize::new(isize::MIN);

/// Looks up glibc's rseq registration (initialisation, under the guard: dlsym).
pub fn init_cpu() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: dlsym with valid names; the symbols, where present, are glibc's `ptrdiff_t
        // __rseq_offset` and `unsigned int __rseq_size`, constant once the process runs.
        unsafe {
            let off = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) as *const isize;
            let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()) as *const u32;
            if !off.is_null() && !size.is_null() && *size >= 8 {
                // struct rseq { u32 cpu_id_start; u32 cpu_id; ... }
                RSEQ_CPU.store(*off + 4, Ordering::Relaxed);
            }
        }
    }
}

/// The CPU the calling thread runs on, from the kernel's rseq area (one load; no syscall), or
/// `None` without a registration. It may be stale as soon as it is read: a hint for spreading
/// writes over cache lines, never an identity.
#[inline(always)]
pub fn cpu_hint() -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    {
        let off = RSEQ_CPU.load(Ordering::Relaxed);
        if off != isize::MIN {
            // SAFETY: glibc keeps every thread's rseq area at this offset from the thread
            // pointer for the thread's life; the kernel writes `cpu_id` (negative until
            // registered), so it is read as a volatile i32.
            let cpu = unsafe { ((thread_pointer() as isize + off) as *const i32).read_volatile() };
            return u32::try_from(cpu).ok();
        }
    }
    None
}

/// The calling thread's address of the initial-exec TLS symbol `$sym` (x86-64), as `*mut u8`:
/// the thread pointer plus the offset the dynamic linker resolved into the GOT
/// (R_X86_64_TPOFF64). The shim has static TLS (`DF_STATIC_TLS`), so both are valid for the life
/// of the thread.
#[cfg(target_arch = "x86_64")]
macro_rules! tls_address {
    ($sym:literal) => {{
        let p: *mut u8;
        // SAFETY: reads the thread pointer and the GOT's TLS offset of the symbol; writes nothing.
        unsafe {
            core::arch::asm!(
                "mov {p}, qword ptr fs:[0]",
                concat!("add {p}, qword ptr [rip + ", $sym, "@GOTTPOFF]"),
                p = out(reg) p,
                options(nostack, pure, readonly),
            );
        }
        p
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use tls_address;

/// Records errno's offset from the thread pointer (initialisation, before any backend runs).
pub fn init_errno() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: __errno_location returns this thread's errno slot.
        let e = unsafe { libc::__errno_location() } as isize;
        ERRNO_TPOFF.store(e.wrapping_sub(thread_pointer() as isize), Ordering::Relaxed);
    }
}

/// This thread's errno slot, without a call (x86-64; `__errno_location` elsewhere).
#[inline(always)]
pub fn errno_slot() -> *mut c_int {
    #[cfg(target_arch = "x86_64")]
    {
        (thread_pointer() as isize).wrapping_add(ERRNO_TPOFF.load(Ordering::Relaxed)) as *mut c_int
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe {
        libc::__errno_location()
    }
}

/// A fresh anonymous private read-write mapping of `bytes` (zero-filled), or null when mmap
/// fails. `noreserve` adds `MAP_NORESERVE` (no swap reserved: address space that is touched as it
/// fills). Never calls an allocator.
pub fn map_anon(bytes: usize, noreserve: bool) -> *mut core::ffi::c_void {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if noreserve { libc::MAP_NORESERVE } else { 0 };
    // SAFETY: an anonymous mapping with no address hint; the result is checked for MAP_FAILED.
    let m =
        unsafe { libc::mmap(core::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if m == libc::MAP_FAILED {
        core::ptr::null_mut()
    } else {
        m
    }
}

/// Closes `fd` with the `close` system call itself, not libc's wrapper, and leaves errno as it
/// was (x86-64; libc's `close` elsewhere). For fork child handlers: libc's `close` sits on a
/// page of libc's code that a forked child has not mapped yet, one more page fault in every
/// child that the syscall instruction, on the handler's own page, does not cost.
#[inline(always)]
pub fn close_raw(fd: c_int) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the close system call (number 3) on a descriptor the caller owns; the kernel
    // clobbers rcx and r11 and writes the result to rax; no memory is read or written.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_close => _,
            in("rdi") fd,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: closing a descriptor the caller owns.
    unsafe {
        libc::close(fd);
    }
}

/// Marks `bytes` at `p` (page-aligned, from [`map_anon`]) wipe-on-fork: a forked child sees the
/// range zero-filled, and the fork copies none of its page tables (`MADV_WIPEONFORK`, Linux 4.14).
/// Only for memory whose zeroed state is valid in a child that never saw the parent's contents.
/// False when the kernel refuses (the range is then copied as before: still correct).
pub fn wipe_on_fork(p: *mut core::ffi::c_void, bytes: usize) -> bool {
    // SAFETY: advice on a range the caller mapped; it changes what a child sees, never this process.
    unsafe { libc::madvise(p, bytes, libc::MADV_WIPEONFORK) == 0 }
}

extern "C" {
    static environ: *const *const libc::c_char;
}

/// The value of environment variable `name` as the NUL-terminated string inside `environ` (valid
/// for the process's life unless the program rewrites its environment); None when unset or, as
/// `secure_getenv` does, in a secure-execution process. No allocation, no lock.
pub fn env_raw(name: &[u8]) -> Option<*const libc::c_char> {
    // SAFETY: getauxval does not allocate.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return None;
    }
    // SAFETY: `environ` is the NUL-terminated array libc set up before any constructor ran.
    let mut ep = unsafe { environ };
    if ep.is_null() {
        return None;
    }
    loop {
        // SAFETY: `ep` walks the array until its NULL terminator.
        let e = unsafe { *ep };
        if e.is_null() {
            return None;
        }
        // SAFETY: `e` was not the terminator, so the next element is still in the array.
        ep = unsafe { ep.add(1) };
        // SAFETY: each entry is a NUL-terminated C string.
        let entry = unsafe { core::ffi::CStr::from_ptr(e) }.to_bytes();
        if entry.len() > name.len() && entry.starts_with(name) && entry[name.len()] == b'=' {
            // SAFETY: the value starts after `name=`, inside the same C string.
            return Some(unsafe { e.add(name.len() + 1) });
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_cpu_hint_is_the_cpu_the_kernel_names() {
        super::init_cpu();
        // Debian 12's glibc (2.36) registers rseq for every thread; a migration between the two
        // readings can make one pair differ, not a hundred.
        let same = (0..100).any(|_| {
            // SAFETY: sched_getcpu has no preconditions.
            let k = unsafe { libc::sched_getcpu() };
            super::cpu_hint() == u32::try_from(k).ok()
        });
        // SAFETY: as above.
        let k = unsafe { libc::sched_getcpu() };
        assert!(same, "cpu_hint {:?}, sched_getcpu {k}", super::cpu_hint());
    }
}
