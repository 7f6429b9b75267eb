//! The loader's identity of the module holding an address ([`find`]: glibc's lock-free
//! `_dl_find_object`), a mapped module's unwind sections, copied out for [`super::cfi`], and a
//! mark of its function table ([`mark`]): `.eh_frame_hdr` (from the
//! address the loader reports, its `PT_GNU_EH_FRAME`) and the `.eh_frame` it points to, whose
//! end is found by walking its records up to the zero terminator, never past the end of the
//! `PT_LOAD` segment holding it (read from the module's own program headers).
//!
//! Must only be called while the module stays mapped (a live return address into it on the
//! calling thread's stack), under the reentrancy guard (it allocates, fallibly). Never keeps a
//! pointer into the mapping. Anything unexpected (not ELF, an `.eh_frame_hdr` encoding other
//! than the one GNU ld and lld write) gives None: that module is unwound by frame pointer.

use super::cfi::Sections;
use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// glibc's `struct dl_find_object` (dlfcn.h, 2.35).
#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 7],
}

type FindFn = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> i32;

/// `_dl_find_object`, or 0 when this glibc has none.
pub static FIND: AtomicUsize = AtomicUsize::new(0);

/// A module's identity: where the loader reports it, and a mark of its function table.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub hdr: u64,
    /// [`super::ehframe::mark`] of its `.eh_frame_hdr`: a library dlopen'd where a dlclose'd one of the same
    /// size was has the same four addresses above, but not the same functions.
    pub mark: u64,
}

/// The loader's identity of the module holding `pc`, or None (not in any module).
pub fn find(pc: u64) -> Option<Key> {
    let f = FIND.load(Relaxed);
    if f == 0 {
        return None;
    }
    // SAFETY: `f` is `_dl_find_object` (dlsym'd), called with a local result it fills.
    unsafe {
        let f: FindFn = core::mem::transmute(f);
        let mut r: DlFindObject = core::mem::zeroed();
        if f(pc as *mut c_void, &mut r) != 0 || r.link_map.is_null() {
            return None;
        }
        // `l_addr` is the first field of the public `struct link_map`.
        let bias = *(r.link_map as *const u64);
        let (start, end, hdr) = (r.map_start as u64, r.map_end as u64, r.eh_frame as u64);
        Some(Key { start, end, bias, hdr, mark: mark(hdr, end) })
    }
}

/// Reads `len` bytes at `a`, fallibly allocated.
///
/// # Safety
/// `a..a + len` is mapped and readable.
unsafe fn copy(a: u64, len: usize) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    // SAFETY: the caller's range; `v` has room for `len` bytes.
    unsafe {
        core::ptr::copy_nonoverlapping(a as *const u8, v.as_mut_ptr(), len);
        v.set_len(len);
    }
    Some(v)
}

/// The end (run-time address) of the `PT_LOAD` segment of the module at `start` (its ELF
/// header) with load bias `bias` that holds run-time address `a`.
///
/// # Safety
/// The module is mapped and `start` is its first loaded byte.
unsafe fn segment_end(start: u64, bias: u64, a: u64) -> Option<u64> {
    // SAFETY: the ELF header and program headers lie in the first PT_LOAD (offset 0), checked
    // by the magic and by e_phoff being within the first page before they are read.
    unsafe {
        let eh = &*(start as *const libc::Elf64_Ehdr);
        if eh.e_ident[..4] != *b"\x7fELF" || eh.e_phoff == 0 || eh.e_phoff + eh.e_phnum as u64 * 56 > 4096 {
            return None;
        }
        let ph = (start + eh.e_phoff) as *const libc::Elf64_Phdr;
        for i in 0..eh.e_phnum as usize {
            let p = &*ph.add(i);
            let lo = bias.wrapping_add(p.p_vaddr);
            if p.p_type == libc::PT_LOAD && a >= lo && a < lo + p.p_filesz {
                return Some(lo + p.p_filesz);
            }
        }
    }
    None
}

/// The two sections of the module at `start` (load bias `bias`) whose `.eh_frame_hdr` is at
/// run-time address `hdr`.
pub fn sections(start: u64, bias: u64, hdr: u64) -> Option<Sections> {
    if hdr == 0 {
        return None;
    }
    // SAFETY: the module is mapped (module doc); every read below is bounded by the end of the
    // PT_LOAD segment that holds it.
    unsafe {
        let hdr_end = segment_end(start, bias, hdr)?;
        if hdr + 12 > hdr_end {
            return None;
        }
        let h = hdr as *const u8;
        // version 1; eh_frame_ptr pcrel|sdata4; fde_count udata4; table datarel|sdata4.
        if *h != 1 || *h.add(1) != 0x1b || *h.add(2) != 0x03 || *h.add(3) != 0x3b {
            return None;
        }
        let eh = (hdr + 4).wrapping_add_signed((h.add(4) as *const i32).read_unaligned() as i64);
        let count = (h.add(8) as *const u32).read_unaligned() as u64;
        let hdr_len = 12 + 8 * count;
        if hdr + hdr_len > hdr_end {
            return None;
        }
        let eh_end = segment_end(start, bias, eh)?;
        let mut off = eh;
        while off + 4 <= eh_end {
            let len = (off as *const u32).read_unaligned() as u64;
            if len == 0 {
                off += 4;
                break;
            }
            let next = if len == 0xffff_ffff {
                if off + 12 > eh_end {
                    break;
                }
                (off + 12).checked_add(
                    (off as *const u64).add(0).cast::<u8>().add(4).cast::<u64>().read_unaligned(),
                )
            } else {
                Some(off + 4 + len)
            };
            match next {
                Some(x) if x <= eh_end => off = x,
                _ => break,
            }
        }
        let eh_len = off - eh;
        Some(Sections {
            base_svma: 0,
            eh_frame_hdr_svma: Some(hdr - bias..hdr - bias + hdr_len),
            eh_frame_hdr: Some(copy(hdr, hdr_len as usize)?),
            eh_frame_svma: Some(eh - bias..eh - bias + eh_len),
            eh_frame: Some(copy(eh, eh_len as usize)?),
            ..Default::default()
        })
    }
}

/// The FDE count and last table entry (the last function's start, its FDE's offset) of the
/// mapped `.eh_frame_hdr` at `hdr`, or 0 when its encoding is not GNU ld's and lld's (such a
/// module is never registered: see [`sections`]).
///
/// # Safety
/// `hdr` is the loader's `.eh_frame_hdr` address of a module that stays mapped (a live return
/// address into it), ending before `end`. The table is read as far as its own count says, as
/// libgcc's unwinder does, and never at or past `end`.
pub unsafe fn mark(hdr: u64, end: u64) -> u64 {
    if hdr == 0 || hdr.saturating_add(12) > end {
        return 0;
    }
    // SAFETY: the caller's; the header's 12 bytes, then one entry below `end`.
    unsafe {
        let h = hdr as *const u8;
        if *h != 1 || *h.add(1) != 0x1b || *h.add(2) != 0x03 || *h.add(3) != 0x3b {
            return 0;
        }
        let count = (h.add(8) as *const u32).read_unaligned() as u64;
        let last = hdr + 12 + 8 * count.saturating_sub(1);
        if count == 0 || last.saturating_add(8) > end {
            return count;
        }
        (last as *const u64).read_unaligned().rotate_left(20) ^ count
    }
}
