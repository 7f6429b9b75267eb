//! Diagnostics without allocation: one `mallocshim: ...` line formatted into a stack buffer and
//! written to fd 2 with a single `write(2)`. Used during start-up and from the allocator paths, so
//! it must never call malloc, take a lock or panic; a line longer than the buffer is truncated.
//!
//! Start-up lines (those written until the library constructor ends, such as a backend fallback
//! or an unusable dump directory) are
//! also kept in a static buffer (bounded: [`SAVED_MAX`] bytes, whole lines only), with the
//! identity (st_dev, st_ino) of fd 2 at that point. A server that reopens stderr
//! onto its error log later (mariadbd's `--log-error` does `freopen` on fd 2) would otherwise
//! never show them there: the worker calls [`replay_if_stderr_moved`], which writes them again,
//! once, when fd 2 has become another file.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// A fixed-size line buffer implementing [`fmt::Write`]; excess text is dropped, never an error.
pub struct LineBuf {
    buf: [u8; 1024],
    len: usize,
}

impl LineBuf {
    pub const fn new() -> Self {
        LineBuf { buf: [0; 1024], len: 0 }
    }

    /// Appends raw bytes (truncated at the buffer's end).
    pub fn put(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Writes the buffer to `fd` with one `write(2)`; errors are ignored (stderr may be closed).
    pub fn write_to(&self, fd: libc::c_int) {
        // SAFETY: the pointer and length describe initialised bytes of `self.buf`.
        unsafe {
            libc::write(fd, self.buf.as_ptr().cast(), self.len);
        }
    }
}

impl Default for LineBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.put(s.as_bytes());
        Ok(())
    }
}

/// Writes `mallocshim: <args>\n` to stderr in one `write(2)`.
pub fn line(args: fmt::Arguments<'_>) {
    let mut b = LineBuf::new();
    let _ = b.write_str("mallocshim: ");
    let _ = b.write_fmt(args);
    if b.len == b.buf.len() {
        b.len -= 1;
    }
    let _ = b.write_str("\n");
    b.write_to(2);
    save(b.as_bytes());
}

/// Bytes of start-up lines kept for [`replay_if_stderr_moved`].
pub const SAVED_MAX: usize = 2048;

struct Saved(core::cell::UnsafeCell<[u8; SAVED_MAX]>);
// SAFETY: bytes are written only into a range reserved by one `fetch_add` on `SAVED_LEN` (no two
// writers share bytes), during initialisation; they are read only after `RECORDING` is cleared
// (release) and seen cleared (acquire).
unsafe impl Sync for Saved {}

static SAVED: Saved = Saved(core::cell::UnsafeCell::new([0; SAVED_MAX]));
/// Bytes reserved in `SAVED` (may exceed `SAVED_MAX` when lines were dropped; see `SAVED_USED`).
static SAVED_LEN: AtomicUsize = AtomicUsize::new(0);
/// Bytes of whole lines stored in `SAVED`.
static SAVED_USED: AtomicUsize = AtomicUsize::new(0);
/// True until initialisation ends: lines are kept.
static RECORDING: AtomicBool = AtomicBool::new(true);
/// fd 2's st_dev and st_ino at the end of initialisation (0, 0: unknown).
static STDERR_DEV: AtomicU64 = AtomicU64::new(0);
static STDERR_INO: AtomicU64 = AtomicU64::new(0);
/// The kept lines were written again (or there is nothing to write).
static REPLAYED: AtomicBool = AtomicBool::new(false);

fn save(line: &[u8]) {
    if !RECORDING.load(Ordering::Acquire) {
        return;
    }
    let at = SAVED_LEN.fetch_add(line.len(), Ordering::Relaxed);
    if at + line.len() > SAVED_MAX {
        return;
    }
    // SAFETY: [at, at + len) was reserved for this call alone and lies inside the buffer.
    unsafe { core::ptr::copy_nonoverlapping(line.as_ptr(), SAVED.0.get().cast::<u8>().add(at), line.len()) };
    SAVED_USED.fetch_max(at + line.len(), Ordering::Relaxed);
}

/// fd 2's (st_dev, st_ino), or None when fd 2 is closed.
fn stderr_id() -> Option<(u64, u64)> {
    // SAFETY: fstat writes into a local stat buffer; no allocation.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        (libc::fstat(2, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// End of start-up (the library constructor, after initialisation and the dump directory
/// check): stops keeping lines and notes which file fd 2 is.
pub fn startup_done() {
    if let Some((dev, ino)) = stderr_id() {
        STDERR_DEV.store(dev, Ordering::Relaxed);
        STDERR_INO.store(ino, Ordering::Relaxed);
    } else {
        REPLAYED.store(true, Ordering::Relaxed);
    }
    RECORDING.store(false, Ordering::Release);
    if SAVED_USED.load(Ordering::Relaxed) == 0 {
        REPLAYED.store(true, Ordering::Relaxed);
    }
}

/// True while start-up lines wait to be written again (the worker then checks fd 2 each second).
pub fn replay_pending() -> bool {
    !RECORDING.load(Ordering::Acquire) && !REPLAYED.load(Ordering::Relaxed)
}

/// From the worker: when fd 2 is now another file than at the end of initialisation, writes the
/// kept start-up lines to it, once (one `write(2)`, then one line saying why they repeat).
pub fn replay_if_stderr_moved() {
    if !replay_pending() {
        return;
    }
    let Some((dev, ino)) = stderr_id() else { return };
    if dev == STDERR_DEV.load(Ordering::Relaxed) && ino == STDERR_INO.load(Ordering::Relaxed) {
        return;
    }
    if REPLAYED.swap(true, Ordering::Relaxed) {
        return;
    }
    let n = SAVED_USED.load(Ordering::Relaxed).min(SAVED_MAX);
    // SAFETY: RECORDING is cleared (acquire in replay_pending), so no writer touches the buffer;
    // the first `n` bytes are whole lines.
    unsafe { libc::write(2, SAVED.0.get().cast::<libc::c_void>(), n) };
    crate::base::diag::warn!("(the lines above were written at start-up, before stderr was reopened)");
}

/// `crate::base::diag::warn!("...", args)`: one `mallocshim:` line on stderr, no allocation.
/// Path-scoped (not `#[macro_export]`), so its users import this leaf, not the crate root.
macro_rules! warn_line {
    ($($t:tt)*) => { $crate::base::diag::line(format_args!($($t)*)) };
}
pub(crate) use warn_line as warn;

/// Displays bytes as UTF-8, replacing what is not.
pub struct Lossy<'a>(pub &'a [u8]);

impl core::fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if let Ok(s) = core::str::from_utf8(self.0) {
            return f.pad(s);
        }
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{fffd}")?;
            }
        }
        Ok(())
    }
}
