//! Writing dumps: one snapshot rendered in every configured format to
//! `MALLOCSHIM_DUMP_DIR/mallocshim.<pid>.<seq>.<ext>`. Each file is written to an unnamed
//! O_TMPFILE file (0600) linked into place when complete, or, on a filesystem without
//! O_TMPFILE, under a temporary name created 0600 with O_CREAT|O_EXCL|O_NOFOLLOW, then renamed with RENAME_NOREPLACE, so a
//! planted symlink or another user's file is never followed or overwritten; a name already taken (a
//! file left by an earlier process with the same pid) moves the dump to the next free sequence
//! number ([`free_seq`]), so it never costs a dump. Failures give one
//! `mallocshim:` line and are otherwise ignored. Runs under the reentrancy guard; dumps are
//! serialised by an atomic flag (never taken on the hot path) that a forked child resets, so a
//! dump in progress in the parent at fork time can never leave the child's dumps locked.
//! An unusable directory is reported once: checked at start ([`check_dir`]), and a failed dump
//! prints its line only if nothing was reported before. At exit ([`finish_at_exit`]) no new dump
//! starts and the one in progress on another thread is waited for (up to 5 s, then its
//! temporary files are removed), so exit never leaves a `.mallocshim.*.tmp` behind nor cuts the
//! last dump short. In a secure-execution process (AT_SECURE: setuid, setgid, file
//! capabilities) the environment cannot configure `MALLOCSHIM_DUMP_DIR` (path variables are
//! ignored there, see `config`), and no dump is written without a configured directory: dumps
//! are off (said at start under `MALLOCSHIM_VERBOSE=1`).
//! Long because: the dump's whole life (request, directory choice, serial numbering, temporary file and rename, exit dump) in one place; its renderers are in report/.

use crate::cold::report;
use crate::hot::config;
use crate::hot::mailbox;
use crate::hot::tls::Reentry;
use mallocshim_format::Fmt;
use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

#[link_section = ".data.mallocshim_fork"]
static SEQ: AtomicU64 = AtomicU64::new(0);
/// Kernel tid of the thread writing a dump (0: none).
#[link_section = ".data.mallocshim_fork"]
static BUSY: AtomicU32 = AtomicU32::new(0);
/// The process is exiting: no new dump starts (but the exit dump).
static EXITING: AtomicBool = AtomicBool::new(false);
/// A dump failure (or the unusable directory) has been reported.
static REPORTED: AtomicBool = AtomicBool::new(false);

fn tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Holds the dump flag; released on drop.
struct Serial;

impl Serial {
    /// Waits for the flag; None when this thread already holds it (a signal handler or exit
    /// interrupting its own dump) or `deadline_ms` passed.
    fn take(deadline_ms: Option<u64>) -> Option<Serial> {
        let me = tid();
        let mut waited = 0;
        loop {
            match BUSY.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(Serial),
                Err(t) if t == me => return None,
                Err(_) => {}
            }
            if deadline_ms.is_some_and(|d| waited >= d) {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            waited += 1;
        }
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        BUSY.store(0, Ordering::Release);
    }
}

/// In a forked child (async-signal-safe: loads and stores): the thread that was dumping in the
/// parent does not exist here, the parent's worker pipe is closed, and the child numbers its
/// dumps from 0 as a new process does (its files carry its own pid). Writes only what changes
/// (a write costs a forked child a page copy).
pub fn after_fork_child() {
    if BUSY.load(Ordering::Relaxed) != 0 {
        BUSY.store(0, Ordering::Release);
    }
    if SEQ.load(Ordering::Relaxed) != 0 {
        SEQ.store(0, Ordering::Relaxed);
    }
    if mailbox::has_waker() {
        mailbox::set_waker(-1);
    }
}

/// True when dumps are off: a secure-execution process without a configured directory.
fn off() -> bool {
    // SAFETY: getauxval has no preconditions.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    secure && config::cstr_bytes(&config::get().dump_dir).is_empty()
}

/// At start (from the library constructor): one line when dumps are off (secure execution) or
/// when the dump directory is not a writable directory. Later failures then print nothing more.
pub fn check_dir() {
    let _g = Reentry::enter();
    let c = config::get();
    if c.dump_signal == 0 && c.dump_interval_s == 0 && !c.dump_at_exit {
        return;
    }
    if off() {
        REPORTED.store(true, Ordering::Relaxed);
        if c.verbose > 0 {
            crate::base::diag::warn!(
                "secure-execution process: dumps are off (no dump directory configured)"
            );
        }
        return;
    }
    let d = dir();
    let Ok(c) = CString::new(d.as_os_str().as_bytes()) else { return };
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 || !d.is_dir() {
        let e = std::io::Error::last_os_error();
        REPORTED.store(true, Ordering::Relaxed);
        crate::base::diag::warn!("dump directory {} is not usable ({}): dumps will fail", d.display(), e);
    }
}

/// At exit: stops new dumps and waits for one in progress on another thread (at most 5 s; then
/// removes this process's temporary dump files).
pub fn finish_at_exit() {
    EXITING.store(true, Ordering::Release);
    if let Some(s) = Serial::take(Some(5000)) {
        drop(s);
        return;
    }
    if BUSY.load(Ordering::Acquire) == tid() {
        return;
    }
    let prefix = format!(".mallocshim.{}.", std::process::id());
    if let Ok(rd) = std::fs::read_dir(dir()) {
        for e in rd.flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            if n.starts_with(&prefix) && n.ends_with(".tmp") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// A refused dump directory was reported (one line for the life of the process).
static DIR_REFUSED: AtomicBool = AtomicBool::new(false);

/// The dump directory: the variable, else `$TMPDIR` (not in secure-execution), else `/tmp`;
/// a relative one, or one inside the datadir (the working directory, when it is a MariaDB or
/// MySQL datadir: mysqld chdirs there at start), is passed over with one `mallocshim:` line
/// (`mallocshim_format::dumpdir`, shared with the command that looks for the files). Decided at
/// each call (the working directory changes after start): a getcwd and a few stats.
pub fn dir() -> PathBuf {
    use mallocshim_format::dumpdir::{choose, Refused};
    let d = config::cstr_bytes(&config::get().dump_dir);
    let d = (!d.is_empty()).then(|| PathBuf::from(OsString::from_vec(d.to_vec())));
    // SAFETY: getauxval has no preconditions.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    let tmp = std::env::var_os("TMPDIR").filter(|_| !secure).map(PathBuf::from);
    let cwd = cwd();
    let (chosen, refused) = choose([d.as_deref(), tmp.as_deref()], cwd.as_deref());
    if let Some((r, why)) = refused {
        if !DIR_REFUSED.swap(true, Ordering::Relaxed) {
            let why = match why {
                Refused::Relative => {
                    "is relative (it would follow the working directory, mariadbd's datadir)"
                }
                Refused::InDatadir => "is inside the datadir (the working directory)",
            };
            crate::base::diag::warn!(
                "dump directory {} {why}: dumps go to {}",
                r.display(),
                chosen.display()
            );
        }
    }
    chosen
}

/// The working directory, read into a stack buffer: `std::env::current_dir` allocates 512 bytes
/// and shrinks them with realloc, whose freed tail (a 496-byte chunk) sat in the caller's glibc
/// thread cache, where glibc counts it as in use: a program's next `malloc(480)` took it without
/// `mallinfo2().uordblks` growing (glibc's tst-mallinfo2, `tests/counters.rs`).
fn cwd() -> Option<PathBuf> {
    let mut buf = [0u8; 4096];
    // SAFETY: getcwd writes at most buf.len() bytes, NUL-terminated, into our buffer.
    let p = unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
    if p.is_null() {
        return None;
    }
    let n = buf.iter().position(|&b| b == 0)?;
    Some(PathBuf::from(OsString::from_vec(buf[..n].to_vec())))
}

/// Why a dump was not written (whole).
#[derive(Debug)]
pub enum DumpError {
    /// The process is exiting: only the exit dump is written.
    Exiting,
    /// A secure-execution process without a configured directory: dumps are off.
    Off,
    /// This thread is already writing a dump (a signal handler or exit interrupting it).
    Busy,
    /// The backend refused the probe block: memory has run out.
    OutOfMemory { probe_bytes: usize },
    /// A file could not be written (files written before it stay).
    Write { dir: PathBuf, name: String, source: std::io::Error },
}

impl std::fmt::Display for DumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DumpError::Exiting => f.write_str("the process is exiting"),
            DumpError::Off => f.write_str("dumps are off in a secure-execution process"),
            DumpError::Busy => f.write_str("a dump is already being written by this thread"),
            DumpError::OutOfMemory { probe_bytes } => write!(
                f,
                "dump skipped: malloc returned NULL for a {} KiB probe (out of memory); ask again when memory is free",
                probe_bytes >> 10
            ),
            DumpError::Write { dir, name, source } => {
                write!(f, "cannot write dump {}/{}: {}", dir.display(), name, source)
            }
        }
    }
}

impl std::error::Error for DumpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DumpError::Write { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Writes one dump in every configured format; returns the paths written.
pub fn write_all() -> Result<Vec<PathBuf>, DumpError> {
    if EXITING.load(Ordering::Acquire) {
        return Err(DumpError::Exiting);
    }
    write(false)
}

/// The exit dump (`MALLOCSHIM_DUMP_AT_EXIT`, or a request no thread has written yet).
pub fn write_at_exit() -> Result<Vec<PathBuf>, DumpError> {
    write(true)
}

/// One format's rendering of the snapshot: the renderer of each row of the format table.
fn render(fmt: Fmt, snap: &report::Snapshot) -> Vec<u8> {
    match fmt {
        Fmt::Json => report::json::render(snap).into_bytes(),
        Fmt::Prom => report::prom::render(snap).into_bytes(),
        Fmt::Hdr => report::hdr::render(snap),
        Fmt::Text => report::text::render(snap).into_bytes(),
        Fmt::Pprof => crate::cold::pprof::render(crate::hot::heapprof::frees_tracked()),
    }
}

fn write(at_exit: bool) -> Result<Vec<PathBuf>, DumpError> {
    crate::cold::held_history::arm();
    let _g = Reentry::enter();
    if off() {
        clear_pending();
        return Err(DumpError::Off);
    }
    let Some(_l) = Serial::take(at_exit.then_some(5000)) else {
        return Err(DumpError::Busy);
    };
    // This dump answers any request still waiting for a thread to write it.
    clear_pending();
    if !memory_to_spare() {
        let e = DumpError::OutOfMemory { probe_bytes: PROBE_BYTES };
        crate::base::diag::warn!("{}", e);
        return Err(e);
    }
    let reserve_before = crate::base::own_heap::counts();
    let formats = config::current().dump_formats;
    let snap = report::snapshot();
    let dir = dir();
    let seq = free_seq(&dir, snap.pid, formats);
    let mut written = Vec::new();
    for fmt in Fmt::ALL.into_iter().filter(|f| formats & f.bit() != 0) {
        let body = render(fmt, &snap);
        match publish_free(&dir, snap.pid, seq, fmt, &body) {
            Ok(p) => written.push(p),
            Err(e) => {
                if !REPORTED.swap(true, Ordering::Relaxed) {
                    crate::base::diag::warn!("{}", e);
                }
                crate::cold::dumpbound::retain(&dir, &written);
                return Err(e);
            }
        }
    }
    crate::cold::dumpbound::retain(&dir, &written);
    let (served, refused) = crate::base::own_heap::counts();
    if (served, refused) != reserve_before {
        crate::base::diag::warn!(
            "memory ran out while writing dump {}: {} of its allocations came from the shim's reserve, {} did not fit (symbols or parts left out)",
            seq,
            served - reserve_before.0,
            refused - reserve_before.1
        );
    }
    Ok(written)
}

/// Publishes one format's file under sequence number `seq`, or, when a file was created under
/// that name since `free_seq` looked, under the next free number.
fn publish_free(
    dir: &std::path::Path,
    pid: u32,
    seq: u64,
    fmt: Fmt,
    body: &[u8],
) -> Result<PathBuf, DumpError> {
    let ext = fmt.row().ext;
    let mut name = mallocshim_format::dump_file_name(pid, seq, ext);
    let mut r = publish(dir, &name, body);
    for _ in 0..SEQ_TRIES {
        if !matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists) {
            break;
        }
        name = mallocshim_format::dump_file_name(pid, free_seq(dir, pid, fmt.bit()), ext);
        r = publish(dir, &name, body);
    }
    r.map_err(|source| DumpError::Write { dir: dir.to_path_buf(), name, source })
}

/// The block a dump asks the shim's allocator for before it starts (on the worker, its own
/// heap; elsewhere, the backend): a sign that the dump's allocations can still be served (what
/// fails later comes from the reserve; symbol files are read fallibly).
const PROBE_BYTES: usize = 256 << 10;

/// False when the shim's allocator (`own_heap`) cannot give a [`PROBE_BYTES`] block: memory has
/// run out (an exhausted `RLIMIT_AS`, strict overcommit), and a dump would have to live on the
/// shim's small reserve (`reserve`) or fail. Not `libc::malloc`: on the worker that would make
/// glibc set up an arena for it (`base::worker_heap`). Nothing is written: the probe costs no RSS.
fn memory_to_spare() -> bool {
    // SAFETY: a non-zero size and a power-of-two alignment.
    let l = unsafe { std::alloc::Layout::from_size_align_unchecked(PROBE_BYTES, 16) };
    // SAFETY: an allocation of a non-zero size, freed with its layout (black_box: the compiler
    // removes an unused allocation and would call the probe a success).
    unsafe {
        let p = core::hint::black_box(std::alloc::alloc(l));
        if p.is_null() {
            return false;
        }
        let spare = !crate::base::own_heap::in_reserve(p);
        std::alloc::dealloc(p, l);
        spare
    }
}

/// Sequence numbers tried past files that already exist before a dump gives up with EEXIST.
const SEQ_TRIES: u32 = 64;

/// The next sequence number under which no file of the `formats` exists in `dir`. A file of
/// this pid's name can predate the process (an earlier process with the same pid, a copied
/// directory): it is skipped, never overwritten, and does not cost the dump. Bounded: after
/// [`SEQ_TRIES`] taken numbers, the next one is returned and the link reports EEXIST.
fn free_seq(dir: &std::path::Path, pid: u32, formats: u8) -> u64 {
    for _ in 0..SEQ_TRIES {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let taken = Fmt::ALL.into_iter().any(|f| {
            formats & f.bit() != 0
                && std::fs::symlink_metadata(dir.join(mallocshim_format::dump_file_name(
                    pid,
                    seq,
                    f.row().ext,
                )))
                .is_ok()
        });
        if !taken {
            return seq;
        }
    }
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// Writes `body` to `dir/name`: through an unnamed O_TMPFILE file linked into place (nothing
/// visible until complete, nothing left if the process dies mid-write, even by `_exit` or a
/// signal), or, where the filesystem has no O_TMPFILE, through a named temporary file.
fn publish(dir: &std::path::Path, name: &str, body: &[u8]) -> std::io::Result<PathBuf> {
    let dst = dir.join(name);
    let cdir = CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: a valid NUL-terminated path; the descriptor is owned by `f` below.
    let fd = unsafe { libc::open(cdir.as_ptr(), libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC, 0o600) };
    if fd >= 0 {
        use std::os::fd::FromRawFd;
        // SAFETY: a descriptor this function just opened and nothing else owns.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        f.write_all(body)?;
        let proc_path = CString::new(format!("/proc/self/fd/{fd}"))?;
        let d = CString::new(dst.as_os_str().as_bytes())?;
        // SAFETY: valid NUL-terminated paths; linkat refuses an existing destination.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc_path.as_ptr(),
                libc::AT_FDCWD,
                d.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc == 0 {
            return Ok(dst);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) {
            return Err(e);
        }
        // No /proc: the named temporary below.
    }
    publish_named(dir, name, body)
}

fn publish_named(dir: &std::path::Path, name: &str, body: &[u8]) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let dst = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    let r = f.write_all(body).and_then(|_| f.flush());
    drop(f);
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let (t, d) = (CString::new(tmp.as_os_str().as_bytes())?, CString::new(dst.as_os_str().as_bytes())?);
    // SAFETY: valid NUL-terminated paths; RENAME_NOREPLACE refuses an existing destination.
    let rc = unsafe {
        libc::renameat2(libc::AT_FDCWD, t.as_ptr(), libc::AT_FDCWD, d.as_ptr(), libc::RENAME_NOREPLACE)
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(dst)
}

// Dump requests: the dump signal's handler (or the C API) posts a request; the shim's thread is
// woken through its pipe (registered with `set_waker`), or, before that thread exists, the
// request waits in `hot::mailbox` for the next sampled call of any thread (which calls
// `write_pending`, registered there by the library constructor) or for exit.

/// A request the worker deferred to the end of the rate-limit interval (`dumpbound`): when it
/// is due, in CLOCK_MONOTONIC ms (0: none).
#[link_section = ".data.mallocshim_fork"]
static DEFERRED: AtomicU64 = AtomicU64::new(0);

/// The worker's wake-up pipe (`-1`: none, e.g. in a forked child before its worker starts).
pub fn set_waker(fd: i32) {
    mailbox::set_waker(fd);
}

/// Asks for a dump (async-signal-safe; see `hot::mailbox::request`).
pub fn request() {
    mailbox::request();
}

/// True when a dump request waits for a thread to write it.
pub fn pending() -> bool {
    mailbox::pending()
}

/// A dump is being written: a pending request is answered by it.
pub fn clear_pending() {
    mailbox::clear();
}

/// True when a request waits for the end of the rate-limit interval (for the exit dump).
pub fn deferred() -> bool {
    DEFERRED.load(Ordering::Relaxed) != 0
}

/// Writes a pending dump on the calling thread (a sampled call outside the shim), unless the
/// rate limit defers it: it then stays pending for a later call, or for exit.
#[cold]
#[inline(never)]
pub fn write_pending() {
    if !mailbox::pending() {
        return;
    }
    let now = crate::cold::dumpbound::now_ms();
    if crate::cold::dumpbound::gate(now).is_some() {
        return;
    }
    if mailbox::take() {
        let _g = Reentry::enter();
        crate::cold::dumpbound::started(now);
        let _ = write_all();
    }
}

/// The worker's start: takes a request made before it existed (or before a fork).
pub fn take_waiting() -> bool {
    mailbox::take() | (DEFERRED.swap(0, Ordering::Relaxed) != 0)
}

/// The worker, after `asked` (new requests came through its pipe) at `now` (ms): true when a
/// requested dump is due now (write it with [`write_requested`]); otherwise a request waiting
/// for the end of the rate-limit interval is recorded for [`deferred_wait`].
pub fn requested_due(asked: bool, now: u64) -> bool {
    let d = DEFERRED.load(Ordering::Relaxed);
    if !asked && (d == 0 || now < d) {
        return false;
    }
    match crate::cold::dumpbound::gate(now) {
        Some(until) => {
            DEFERRED.store(until, Ordering::Relaxed);
            false
        }
        None => {
            DEFERRED.store(0, Ordering::Relaxed);
            true
        }
    }
}

/// Milliseconds from `now` until a deferred request is due; None without one.
pub fn deferred_wait(now: u64) -> Option<u64> {
    let d = DEFERRED.load(Ordering::Relaxed);
    (d != 0).then(|| d.saturating_sub(now))
}

/// The worker writes a requested dump (answering every request so far).
pub fn write_requested(now: u64) {
    crate::cold::dumpbound::started(now);
    let _ = write_all();
}

/// In a forked child (no worker yet): a request still pending or deferred is asked again, so
/// that the child's thread answers it at its next recorded call (or its worker, once it has one).
pub fn repost_pending() {
    // Loads before the swap: in a forked child an unneeded write costs a page copy.
    let deferred = DEFERRED.load(Ordering::Relaxed) != 0 && DEFERRED.swap(0, Ordering::Relaxed) != 0;
    if mailbox::pending() | deferred {
        request();
    }
}
