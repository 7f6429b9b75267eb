//! Loading a dlopen()ed backend: `dlopen(lib, RTLD_NOW | RTLD_LOCAL)` (RTLD_LOCAL because such
//! a library exports `malloc` itself, which must not capture anyone's calls) and the lookup of
//! the entry points it must have, with the reason of a failure written into the caller's line.
//! Initialisation only, under the reentrancy guard: what dlopen allocates comes from the
//! bootstrap pool. It owns no state and never touches the hot path; the backend transmutes the
//! symbols it gets to their C signatures.

use core::ffi::{c_void, CStr};
use core::fmt::Write;

/// A library opened by [`open`]: kept open for the life of the process.
pub(super) struct Lib(*mut c_void);

impl Lib {
    /// The address of symbol `name`, null when the library has none (an optional entry point).
    pub(super) fn sym(&self, name: &CStr) -> *mut c_void {
        // SAFETY: a handle dlopen returned and a valid NUL-terminated name.
        unsafe { libc::dlsym(self.0, name.as_ptr()) }
    }
}

/// dlopen()s `lib` RTLD_NOW | RTLD_LOCAL (running its constructors) and resolves every symbol in
/// `need`, in order. On failure writes the reason into `why` (dlerror's text, or `<lib> has no
/// symbol <name>`) and returns None.
///
/// # Safety
/// Initialisation only, under the reentrancy guard.
pub(super) unsafe fn open<const N: usize>(
    lib: &CStr,
    need: [&CStr; N],
    why: &mut crate::base::diag::LineBuf,
) -> Option<(Lib, [*mut c_void; N])> {
    // SAFETY: dlopen/dlerror with a valid NUL-terminated string; dlerror's text is read before
    // any other dl call can replace it.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
        let msg = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                &b"unknown error"[..]
            } else {
                CStr::from_ptr(e).to_bytes()
            }
        };
        let _ = write!(why, "{}", crate::base::diag::Lossy(msg));
        return None;
    }
    let l = Lib(h);
    let mut p = [core::ptr::null_mut(); N];
    for (slot, n) in p.iter_mut().zip(need) {
        *slot = l.sym(n);
        if slot.is_null() {
            let _ = write!(
                why,
                "{} has no symbol {}",
                crate::base::diag::Lossy(lib.to_bytes()),
                crate::base::diag::Lossy(n.to_bytes())
            );
            return None;
        }
    }
    Some((l, p))
}
