//! The plan's memory image: how the command hands a [`Plan`] to each engine process. Layout
//! (native endian, all 8-byte aligned): [`Summary`], `threads + 1` step offsets (u64), the
//! steps ([`Step`], grouped by thread), the block sizes (u64). Written once per
//! `mallocshim replay` run, mapped read-only by the engine with `MAP_POPULATE` (resident before
//! the replay's baseline RSS is taken), never parsed field by field: not a file format.
//!
//! Owns the layout; must not call malloc on the engine side ([`PlanView::map`]).

use crate::plan::{Plan, Step, Summary};
use std::io::Write;
use std::path::Path;

fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: `T` is a `repr(C)` plain value type here (u64, Step, Summary): any byte is readable.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

impl Plan {
    /// Writes the image to `path` (a new file).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let err = |e: std::io::Error| format!("cannot write the replay plan {}: {e}", path.display());
        let f = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(err)?;
        let mut w = std::io::BufWriter::new(f);
        let mut off = Vec::with_capacity(self.threads.len() + 1);
        let mut n = 0u64;
        off.push(0);
        for t in &self.threads {
            n += t.len() as u64;
            off.push(n);
        }
        w.write_all(bytes_of(std::slice::from_ref(&self.summary))).map_err(err)?;
        w.write_all(bytes_of(&off)).map_err(err)?;
        for t in &self.threads {
            w.write_all(bytes_of(t)).map_err(err)?;
        }
        w.write_all(bytes_of(&self.block_size)).map_err(err)?;
        w.flush().map_err(err)
    }
}

/// The image mapped by the engine.
pub struct PlanView {
    base: *const u8,
    len: usize,
    summary: Summary,
    off: *const u64,
    steps: *const Step,
    sizes: *const u64,
}

// SAFETY: a read-only mapping, only read.
unsafe impl Send for PlanView {}
// SAFETY: as above.
unsafe impl Sync for PlanView {}

impl PlanView {
    /// Maps the image at `path` (read-only, populated) and checks its sizes against its summary.
    pub fn map(path: &Path) -> Result<PlanView, String> {
        use std::os::unix::io::AsRawFd;
        let bad = |what: &str| format!("replay plan {}: {what}", path.display());
        let f = std::fs::File::open(path).map_err(|e| bad(&e.to_string()))?;
        let len = f.metadata().map_err(|e| bad(&e.to_string()))?.len() as usize;
        if len < size_of::<Summary>() {
            return Err(bad("too short"));
        }
        // SAFETY: a private read-only mapping of a file we opened; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(bad(&std::io::Error::last_os_error().to_string()));
        }
        let base = p as *const u8;
        // SAFETY: `len >= size_of::<Summary>()` and the mapping is page-aligned.
        let summary = unsafe { base.cast::<Summary>().read() };
        let need = size_of::<Summary>() as u64
            + 8 * (summary.threads + 1)
            + size_of::<Step>() as u64 * summary.steps
            + 8 * summary.blocks;
        let view = |o: u64| base.wrapping_add(o as usize);
        let off = view(size_of::<Summary>() as u64).cast::<u64>();
        let steps = view(size_of::<Summary>() as u64 + 8 * (summary.threads + 1)).cast::<Step>();
        let sizes =
            view(size_of::<Summary>() as u64 + 8 * (summary.threads + 1) + 32 * summary.steps).cast::<u64>();
        let v = PlanView { base, len, summary, off, steps, sizes };
        if need != len as u64 || size_of::<Step>() != 32 {
            return Err(bad("sizes do not match its summary"));
        }
        Ok(v)
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Thread `i`'s steps.
    pub fn thread(&self, i: usize) -> &[Step] {
        // SAFETY: `i < threads` (callers iterate 0..threads); offsets were written increasing
        // and the mapping's size was checked against the summary.
        unsafe {
            let a = *self.off.add(i) as usize;
            let b = *self.off.add(i + 1) as usize;
            std::slice::from_raw_parts(
                self.steps.add(a),
                b.saturating_sub(a).min((self.summary.steps as usize).saturating_sub(a)),
            )
        }
    }

    /// Requested bytes per block instance.
    pub fn block_sizes(&self) -> &[u64] {
        // SAFETY: `blocks` u64s at `sizes`, inside the checked mapping.
        unsafe { std::slice::from_raw_parts(self.sizes, self.summary.blocks as usize) }
    }

    /// Bytes mapped.
    pub fn mapped_len(&self) -> usize {
        self.len
    }
}

impl Drop for PlanView {
    fn drop(&mut self) {
        // SAFETY: our mapping; nothing borrows it past `self`.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
    }
}
