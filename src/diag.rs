//! Diagnostics without allocation: one `mallocshim: ...` line formatted into a stack buffer and
//! written to fd 2 with a single `write(2)`. Used during start-up and from the allocator paths, so
//! it must never call malloc, take a lock or panic; a line longer than the buffer is truncated.

use core::fmt::{self, Write};

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
}

/// `shim_warn!("...", args)`: one `mallocshim:` line on stderr, no allocation.
#[macro_export]
macro_rules! shim_warn {
    ($($t:tt)*) => { $crate::diag::line(format_args!($($t)*)) };
}

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
