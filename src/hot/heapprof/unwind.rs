//! The stack of a sampled allocation: a frame-pointer walk through the shim's own frames, then
//! the CFI unwinder of [`super::cfi`] from the first frame outside the shim (frame pointers
//! again where the CFI is unavailable, [`fp_walk`]). The walk starts from the sampling function's own
//! frame (the shim is built with `-C force-frame-pointers=yes`, see .cargo/config.toml), at
//! most [`MAX_FRAMES`] return addresses, leading frames inside the shim skipped, so the first
//! frame is the code that called malloc (or `operator new`, which the shim interposes: see
//! [`crate::boundary::cxx`]). Every frame pointer is checked against the thread's stack before it is
//! read — above the current stack pointer, below the stack's top, aligned, strictly
//! increasing — so a garbage %rbp (code built without frame pointers) ends the walk and can
//! never fault. Never allocates, never calls into the dynamic loader: the shim's text range
//! comes from its own ELF header (`__ehdr_start`), read once at initialisation.

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

pub use super::stacks::MAX_FRAMES;

static SHIM_LO: AtomicUsize = AtomicUsize::new(0);
static SHIM_HI: AtomicUsize = AtomicUsize::new(0);

extern "C" {
    /// The shim's ELF header, as mapped (defined by the linker).
    static __ehdr_start: libc::Elf64_Ehdr;
}

/// Reads the shim's loaded range from its program headers (initialisation).
pub fn init() {
    // SAFETY: the linker points `__ehdr_start` at this object's mapped ELF header, whose
    // program headers lie in the same read-only mapping (`e_phoff` from it).
    unsafe {
        let eh = &raw const __ehdr_start;
        let base = eh as usize;
        let ph = (base + (*eh).e_phoff as usize) as *const libc::Elf64_Phdr;
        let (mut lo, mut hi) = (usize::MAX, 0usize);
        for i in 0..(*eh).e_phnum as usize {
            let p = &*ph.add(i);
            if p.p_type == libc::PT_LOAD {
                lo = lo.min(p.p_vaddr as usize);
                hi = hi.max((p.p_vaddr + p.p_memsz) as usize);
            }
        }
        if hi > lo {
            // `__ehdr_start` is the first PT_LOAD's start (vaddr 0 for a shared object).
            SHIM_LO.store(base, Relaxed);
            SHIM_HI.store(base + (hi - lo), Relaxed);
        }
    }
}

/// True when `pc` lies in the shim's own mapping.
#[inline]
pub fn in_shim(pc: usize) -> bool {
    pc >= SHIM_LO.load(Relaxed) && pc < SHIM_HI.load(Relaxed)
}

/// Walks the calling thread's frame pointers into `out`; `lo..hi` is the thread's stack, `stop`
/// (0: none) where a walk from below it ends (the start routine's caller's stack pointer: see
/// `heapprof::thread_started`; a thread-exit destructor runs above it, and walks to `hi`).
/// Returns the number of frames written (0 when the thread runs outside that stack, e.g. on a
/// signal stack or a coroutine's), and the stack's id in [`super::stacks`] when a kept walk
/// knew it (then `out` holds no frames: the id stands for them; else the caller interns them).
#[inline(never)]
pub fn capture(lo: usize, hi: usize, stop: usize, out: &mut [usize; MAX_FRAMES]) -> (usize, Option<u32>) {
    let (mut fp, sp): (usize, usize);
    // SAFETY: reads two registers; this function keeps a frame pointer (forced for the crate).
    unsafe {
        core::arch::asm!("mov {fp}, rbp", "mov {sp}, rsp", fp = out(reg) fp, sp = out(reg) sp,
            options(nomem, nostack, preserves_flags));
    }
    if sp < lo || sp >= hi || hi < 16 {
        return (0, None);
    }
    let hi = if sp < stop { stop } else { hi };
    // The shim's own frames keep frame pointers: walk them to the first frame outside it,
    // then unwind from the CFI (`cfi`), or on by frame pointer when that is unavailable.
    for _ in 0..MAX_FRAMES * 4 {
        if fp < sp || fp > hi - 16 || fp & 7 != 0 {
            return (0, None);
        }
        // SAFETY: fp..fp+16 lies between this thread's stack pointer and the top of its
        // stack, which is mapped memory of this thread.
        let (next, ret) =
            unsafe { ((fp as *const usize).read_volatile(), ((fp + 8) as *const usize).read_volatile()) };
        if ret == 0 {
            return (0, None);
        }
        if !in_shim(ret) {
            if let Some(r) = super::cfi::walk(ret, fp + 16, next, sp, hi, out, 0) {
                return r;
            }
            out[0] = ret;
            return (fp_walk(next, sp, hi, out, 1), None);
        }
        if next <= fp {
            return (0, None);
        }
        fp = next;
    }
    (0, None)
}

/// Follows the frame-pointer chain from `fp` into `out[n..]`, reading only `lo..hi` (this
/// thread's stack above its stack pointer); frames inside the shim are left out. Returns the
/// new count.
pub fn fp_walk(mut fp: usize, lo: usize, hi: usize, out: &mut [usize; MAX_FRAMES], mut n: usize) -> usize {
    for _ in 0..MAX_FRAMES * 4 {
        if n >= MAX_FRAMES || fp < lo || fp > hi.saturating_sub(16) || fp & 7 != 0 {
            break;
        }
        // SAFETY: fp..fp+16 lies within this thread's stack above its stack pointer.
        let (next, ret) =
            unsafe { ((fp as *const usize).read_volatile(), ((fp + 8) as *const usize).read_volatile()) };
        if ret == 0 {
            break;
        }
        if !in_shim(ret) {
            out[n] = ret;
            n += 1;
        }
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}
