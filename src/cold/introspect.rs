//! What a program asks the allocator about itself — mallinfo, mallinfo2, malloc_trim,
//! malloc_stats, malloc_info, and jemalloc's `mallctl` — answered for the active backend (under
//! glibc, glibc's own functions). Each runs under the reentrancy guard: stdio and the backends' statistics may
//! allocate. Not on the hot path.

use crate::backend::glibc::{self, Mallinfo, Mallinfo2};
use crate::backend::{self, Backend};
use crate::base::diag::LineBuf;
use crate::hot::tls::Reentry;
use core::ffi::c_int;
use core::fmt::Write;

fn active_ready() -> Backend {
    crate::hot::init::ensure();
    backend::active()
}

/// `mallinfo2` for the active backend: `arena` = resident bytes, `uordblks` = allocated bytes,
/// `fordblks` = free bytes held by the backend (see [`backend::MemStats`] for each source).
pub fn mallinfo2() -> Mallinfo2 {
    let _g = Reentry::enter();
    match active_ready() {
        Backend::Glibc => glibc::mallinfo2(),
        _ => {
            let s = backend::mem_stats();
            Mallinfo2 {
                arena: s.resident as usize,
                uordblks: s.allocated as usize,
                fordblks: s.free as usize,
                ..Mallinfo2::default()
            }
        }
    }
}

/// Legacy `mallinfo`: as [`mallinfo2`], each field clamped to `INT_MAX`.
pub fn mallinfo() -> Mallinfo {
    if active_ready() == Backend::Glibc {
        let _g = Reentry::enter();
        if let Some(f) = glibc::real().mallinfo {
            // SAFETY: glibc's own mallinfo, found by dlsym with this signature.
            return unsafe { f() };
        }
    }
    let m = mallinfo2();
    let c = |v: usize| v.min(c_int::MAX as usize) as c_int;
    Mallinfo {
        arena: c(m.arena),
        ordblks: c(m.ordblks),
        smblks: c(m.smblks),
        hblks: c(m.hblks),
        hblkhd: c(m.hblkhd),
        usmblks: c(m.usmblks),
        fsmblks: c(m.fsmblks),
        uordblks: c(m.uordblks),
        fordblks: c(m.fordblks),
        keepcost: c(m.keepcost),
    }
}

/// `malloc_trim(pad)`: 1 when memory was (or may have been) released, as glibc returns.
pub fn malloc_trim(pad: usize) -> c_int {
    let _g = Reentry::enter();
    active_ready();
    backend::release(pad, crate::hot::config::get().release) as c_int
}

/// `malloc_stats()`: glibc's own report under glibc; otherwise the same layout on stderr for
/// the active backend, ending with glibc's `max mmap regions` and `max mmap bytes` lines.
/// Neither jemalloc nor tcmalloc keeps glibc's peak count of mmap()ed chunks (glibc's
/// `max_n_mmaps`, `max_mmapped_mem`): both lines read 0 there.
pub fn malloc_stats() {
    let _g = Reentry::enter();
    let b = active_ready();
    if b == Backend::Glibc {
        if let Some(f) = glibc::real().malloc_stats {
            // SAFETY: glibc's own malloc_stats.
            unsafe { f() };
            return;
        }
    }
    let s = backend::mem_stats();
    let mut v = LineBuf::new();
    backend::version(&mut v);
    let mut o = LineBuf::new();
    let _ = write!(
        o,
        "Backend {} ({}):\nTotal (incl. mmap):\nsystem bytes     = {:10}\nin use bytes     = {:10}\nfree bytes       = {:10}\nmax mmap regions = {:10}\nmax mmap bytes   = {:10}\n",
        b.name(),
        crate::hot::config::Lossy(v.as_bytes()),
        s.resident,
        s.allocated,
        s.free,
        0,
        0
    );
    o.write_to(2);
}

/// `malloc_info(options, fp)`: -1 with EINVAL when `options` is not 0 (as glibc); glibc's XML
/// under glibc; otherwise a `<malloc version="1">` document with the backend's totals.
///
/// # Safety
/// `fp` must be a valid open `FILE *`.
pub unsafe fn malloc_info(options: c_int, fp: *mut libc::FILE) -> c_int {
    if options != 0 {
        crate::base::sys::set_errno(libc::EINVAL);
        return -1;
    }
    let _g = Reentry::enter();
    let b = active_ready();
    if b == Backend::Glibc {
        if let Some(f) = glibc::real().malloc_info {
            // SAFETY: glibc's own malloc_info with the caller's stream.
            return unsafe { f(options, fp) };
        }
    }
    let s = backend::mem_stats();
    let mut v = LineBuf::new();
    backend::version(&mut v);
    let mut o = LineBuf::new();
    let _ = write!(
        o,
        "<malloc version=\"1\">\n<backend name=\"{}\" version=\"{}\"/>\n<total type=\"allocated\" size=\"{}\"/>\n\
         <total type=\"resident\" size=\"{}\"/>\n<total type=\"free\" size=\"{}\"/>\n</malloc>\n\0",
        b.name(),
        crate::hot::config::Lossy(v.as_bytes()),
        s.allocated,
        s.resident,
        s.free
    );
    // SAFETY: `o` ends with the NUL written above; `fp` is the caller's stream.
    if unsafe { libc::fputs(o.as_bytes().as_ptr().cast(), fp) } < 0 {
        return -1;
    }
    0
}

/// The version string `mallctl("version")` reports whatever the backend:
/// `mallocshim <version> (<backend> <backend version>)`.
pub fn version_string() -> &'static core::ffi::CStr {
    static V: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    let _g = Reentry::enter();
    crate::hot::init::ensure();
    V.get_or_init(|| {
        let mut b = LineBuf::new();
        let _ = write!(b, "mallocshim {} (", env!("CARGO_PKG_VERSION"));
        backend::version(&mut b);
        b.put(b")");
        std::ffi::CString::new(b.as_bytes().iter().copied().filter(|&c| c != 0).collect::<Vec<u8>>())
            .unwrap_or_default()
    })
}

/// jemalloc's `mallctl` through the shim, so that a server probing for it (MariaDB's
/// `@@version_malloc_library` looks up `mallctl` and reads `"version"`) learns what actually
/// serves its calls: `"version"` gives [`version_string`] under every backend; every other name
/// goes to jemalloc under the jemalloc backend and fails with `ENOENT` under the others.
///
/// # Safety
/// The caller passes mallctl's arguments as jemalloc documents them.
pub unsafe fn mallctl(
    name: *const core::ffi::c_char,
    oldp: *mut core::ffi::c_void,
    oldlenp: *mut usize,
    newp: *mut core::ffi::c_void,
    newlen: usize,
) -> c_int {
    if name.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a NUL-terminated name (caller's contract).
    if unsafe { core::ffi::CStr::from_ptr(name) }.to_bytes() == b"version" {
        if !newp.is_null() {
            return libc::EPERM;
        }
        if !oldp.is_null() {
            // SAFETY: oldlenp/oldp as mallctl documents them (caller's contract).
            unsafe {
                if oldlenp.is_null() || *oldlenp != core::mem::size_of::<*const core::ffi::c_char>() {
                    return libc::EINVAL;
                }
                *(oldp as *mut *const core::ffi::c_char) = version_string().as_ptr();
            }
        }
        return 0;
    }
    match active_ready() {
        // SAFETY: forwarded as given (caller's contract).
        Backend::Jemalloc => unsafe { crate::backend::jemalloc::mallctl(name, oldp, oldlenp, newp, newlen) },
        _ => libc::ENOENT,
    }
}
