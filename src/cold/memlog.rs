//! The memory time series (`MALLOCSHIM_MEMLOG=PATH`): the worker appends one CSV line every
//! `MALLOCSHIM_MEMLOG_INTERVAL_MS` — the columns of `mallocshim_format::memlog` (unix_ms, RSS,
//! VSZ, the backend's allocated/resident/free bytes, trims, released bytes, then the RSS account of
//! [`crate::cold::account`] and the trims per reason) — after its header line when the file is new.
//! `%p` in PATH becomes the pid, so a forked child logs to its own file (a child of
//! a PATH without `%p` does not log: the parent's file stays one process's series).
//! The file is opened O_APPEND|O_CREAT|O_NOFOLLOW, mode 0600, and kept only if it is a regular
//! file owned by this user with a single link: a symlink or another user's file planted at the
//! name is neither followed nor written. Worker-only (under the reentrancy guard); each line is
//! one write(2), so lines never interleave.

use core::sync::atomic::{AtomicI32, Ordering::Relaxed};

#[link_section = ".data.mallocshim_fork"]
static FD: AtomicI32 = AtomicI32::new(-1);
/// The `child` of the last [`open`] (for [`reopen`]).
static CHILD: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// The configured path with `%p` expanded; None when the memlog is off, or when `child` is set
/// and the path has no `%p`.
fn path(child: bool) -> Option<std::ffi::CString> {
    let raw = crate::hot::config::cstr_bytes(&crate::hot::config::current().memlog);
    if raw.is_empty() {
        return None;
    }
    let has_pid = raw.windows(2).any(|w| w == b"%p");
    if child && !has_pid {
        return None;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() }.to_string();
    let mut out = Vec::with_capacity(raw.len() + 8);
    let mut i = 0;
    while i < raw.len() {
        if raw[i..].starts_with(b"%p") {
            out.extend_from_slice(pid.as_bytes());
            i += 2;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    std::ffi::CString::new(out).ok()
}

/// Opens the memlog (worker start; `child` after fork). One `mallocshim:` line when it cannot.
pub fn open(child: bool) {
    CHILD.store(child, Relaxed);
    let Some(p) = path(child) else { return };
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(p.as_ptr(), flags, 0o600 as libc::c_uint) };
    let shown = crate::hot::config::Lossy(p.to_bytes());
    if fd < 0 {
        crate::base::diag::warn!(
            "MALLOCSHIM_MEMLOG={}: cannot open ({}); no memlog",
            shown,
            std::io::Error::last_os_error()
        );
        return;
    }
    // SAFETY: fstat into a zeroed local struct of an open descriptor.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above: our open descriptor, a live local struct.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0
        && st.st_mode & libc::S_IFMT == libc::S_IFREG
        // SAFETY: geteuid has no preconditions.
        && st.st_uid == unsafe { libc::geteuid() }
        && st.st_nlink == 1;
    if !ok {
        crate::base::diag::warn!(
            "MALLOCSHIM_MEMLOG={}: not a regular file of ours with one link; no memlog",
            shown
        );
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        return;
    }
    if st.st_size == 0 {
        let mut h = Vec::with_capacity(128);
        h.extend_from_slice(mallocshim_format::memlog::HEADER.as_bytes());
        h.push(b'\n');
        write_fd(fd, &h);
    }
    FD.store(fd, Relaxed);
}

fn write_fd(fd: i32, b: &[u8]) {
    // SAFETY: writing a live buffer to our descriptor; O_APPEND makes the line one atomic append.
    unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
}

/// True when a memlog file is open.
pub fn active() -> bool {
    FD.load(Relaxed) >= 0
}

/// Appends one line. Worker-only, under the reentrancy guard.
pub fn sample() {
    let fd = FD.load(Relaxed);
    if fd < 0 {
        return;
    }
    // The line's time is its start: reading the backend's figures can take milliseconds (glibc's
    // mallinfo2 walks every free chunk), and a late stamp could equal the next line's.
    let ms = crate::cold::procfs::unix_ms();
    let (_, vsz) = crate::cold::procfs::statm();
    let a = crate::cold::account::measure();
    let (trims, released) = crate::cold::trim::totals();
    let r = crate::cold::trim::by_reason();
    let mut line = Vec::with_capacity(256);
    let row = mallocshim_format::MemRow {
        unix_ms: ms,
        rss_bytes: a.rss_bytes,
        vsz_bytes: vsz,
        backend_allocated_bytes: Some(a.backend_allocated_bytes),
        backend_resident_bytes: Some(a.backend_resident_bytes),
        backend_free_bytes: Some(a.backend_free_bytes),
        trims: Some(trims),
        released_bytes: Some(released),
        rss_anon_bytes: Some(a.rss_anon_bytes),
        rss_file_bytes: Some(a.rss_file_bytes),
        rss_shmem_bytes: Some(a.rss_shmem_bytes),
        live_bytes: Some(a.live_bytes),
        allocator_free_bytes: Some(a.allocator_free_bytes),
        allocator_metadata_bytes: a.allocator_metadata_bytes,
        allocator_resident_bytes: Some(a.allocator_resident_bytes),
        non_heap_bytes: Some(a.non_heap_bytes),
        trims_periodic: Some(r[0]),
        trims_ceiling: Some(r[1]),
        trims_pressure: Some(r[2]),
        trims_api: Some(r[3]),
    };
    let _ = row.write_line(&mut line);
    write_fd(fd, &line);
}

/// `MALLOCSHIM_MEMLOG` changed at run time (the control channel; worker-only): closes the file
/// and opens the new one, if any.
pub fn reopen() {
    let fd = FD.swap(-1, Relaxed);
    if fd >= 0 {
        // SAFETY: closing a descriptor this module owns (the worker is its only writer).
        unsafe { libc::close(fd) };
    }
    open(CHILD.load(Relaxed));
}

/// In a forked child: drop the parent's file (async-signal-safe: close only).
pub fn after_fork_child() {
    if FD.load(Relaxed) < 0 {
        return;
    }
    let fd = FD.swap(-1, Relaxed);
    if fd >= 0 {
        // A descriptor this module owns (the system call: no libc page for the child to fault).
        crate::base::sys::close_raw(fd);
    }
}
