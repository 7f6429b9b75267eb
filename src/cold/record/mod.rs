//! Trace recording's cold half (issue 24): opens a window (`MALLOCSHIM_RECORD` from start, or
//! a request from `mallocshim record`), drains the threads' rings every [`DRAIN_MS`] (every
//! [`BUSY_DRAIN_MS`] while a ring comes back more than an eighth full) on the shim's thread
//! ([`drain`]), writes the trace file (`mallocshim_format::trace`, zstd) and closes
//! the window at its planned end, at its byte budget, at exit or on request. One window at a
//! time. Owns the recorder's state behind a lock that only the shim's own code takes (the
//! shim's thread, the exit path, and in a process without that thread the thread whose ring
//! filled), always under the reentrancy guard; the hot path never waits for it.
//! Fork: the child records nothing: its handler ends the window in the child (`tracebuf`, the
//! traced table) and the recorder's state, a copy of the parent's, is never used there (every
//! entry point checks the pid).
//! The file: written as `PATH.part` and renamed to PATH when whole, never replacing a file or
//! another recording ([`file`]: a taken PATH becomes `PATH.<pid>`, said in one line).

pub mod drain;
pub mod file;
pub mod orphans;

use crate::base::{clock, diag};
use crate::hot::{route, tls::Reentry, tracebuf};
use drain::Drain;
use mallocshim_format::trace::{ClassLive, EndReason, Footer, Header, TraceError, TraceWriter};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::Mutex;

/// Milliseconds between drains while a window is open.
pub const DRAIN_MS: u64 = 10;
/// ... and while the last drain found a ring more than an eighth full (a burst: mariadbd's
/// FULLTEXT searches make over 2 million calls a second on one thread, which fill a ring in 8 ms).
pub const BUSY_DRAIN_MS: u64 = 1;
/// The next drain's wait, ms: [`DRAIN_MS`] or [`BUSY_DRAIN_MS`], set by each pass.
static NEXT_MS: AtomicU64 = AtomicU64::new(DRAIN_MS);
/// Bytes kept free under the budget for the footer and zstd's last block and checksum.
const RESERVE: u64 = 4096;
/// Flush (end a zstd block) at least this often, ns: a killed process's file keeps all but
/// the last second.
const FLUSH_NS: u64 = 1_000_000_000;

struct Recorder {
    w: TraceWriter<File>,
    /// Where the trace is written until it is whole.
    path: PathBuf,
    /// The name it gets then.
    target: PathBuf,
    drain: Drain,
    seconds: u64,
    max_bytes: u64,
    opened_ns: u64,
    flushed_ns: u64,
    /// When the pending calls were last written (every [`DRAIN_MS`]; a 1 ms pass only reads).
    emitted_ns: u64,
    ended: Option<EndReason>,
}

static STATE: Mutex<Option<Recorder>> = Mutex::new(None);
/// The pid that owns the recorder (a forked child's copy is not its own).
static OWNER: AtomicU32 = AtomicU32::new(0);
static WINDOWS: AtomicU64 = AtomicU64::new(0);

fn pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// Whether a window is open in this process.
pub fn active() -> bool {
    tracebuf::WINDOW.load(Relaxed) != 0 && OWNER.load(Relaxed) == pid()
}

/// Whether `MALLOCSHIM_RECORD` asks for a recording (the worker is wanted).
pub fn configured() -> bool {
    !crate::hot::config::cstr_bytes(&crate::hot::config::get().record).is_empty()
}

/// The worker's next drain, ms from now: while a window is open.
pub fn wait_ms() -> Option<u64> {
    active().then(|| NEXT_MS.load(Relaxed))
}

/// `MALLOCSHIM_RECORD` with `%p` expanded.
fn env_path() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let raw = crate::hot::config::cstr_bytes(&crate::hot::config::get().record);
    if raw.is_empty() {
        return None;
    }
    let s = String::from_utf8_lossy(raw).replace("%p", &pid().to_string());
    let p = PathBuf::from(std::ffi::OsStr::from_bytes(s.as_bytes()));
    // Absolute, so that a program that changes its directory still renames the right file.
    Some(if p.is_absolute() { p } else { std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p) })
}

/// From the library constructor: opens the whole-run window `MALLOCSHIM_RECORD` asks for.
pub fn start_from_env() {
    let Some(path) = env_path() else { return };
    let c = crate::hot::config::get();
    if let Err(e) = open(&path, c.record_seconds, c.record_max_bytes) {
        diag::warn!("cannot record to {}: {e}", path.display());
    }
}

/// The blocks live now per size class, from the shim's counts (allocations minus frees per
/// class: an estimate, see docs/record.md); empty when profiling is off.
fn live_by_class() -> Vec<ClassLive> {
    use crate::base::classes::{Op, CLASSES};
    if !crate::hot::config::get().profile {
        return Vec::new();
    }
    let mut net = [(0i128, 0i128); CLASSES];
    crate::hot::slots::for_each(|s, _| {
        for (o, row) in s.tally.iter().enumerate() {
            let sign = if o == Op::Free as usize { -1 } else { 1 };
            for (c, t) in row.iter().enumerate() {
                net[c].0 += sign * t.count.load(Relaxed) as i128;
                net[c].1 += sign * t.bytes.load(Relaxed) as i128;
            }
        }
    });
    net.iter()
        .enumerate()
        .filter(|(_, (n, _))| *n > 0)
        .map(|(c, (n, b))| ClassLive { class: c as u8, count: *n as u64, bytes: (*b).max(0) as u64 })
        .collect()
}

/// Opens a window recording for `seconds` (0 = until exit or stop) within `max_bytes` into
/// `path`, or `PATH.<pid>` when `path` is taken ([`file`]; created 0600, never following a
/// symlink, never replacing a file): returns the name the trace will have when whole.
pub fn open(path: &Path, seconds: u64, max_bytes: u64) -> Result<PathBuf, String> {
    let _g = Reentry::enter();
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if active() {
        return Err("a recording is already running".into());
    }
    let claimed = file::claim(path, pid())?;
    if let Some(note) = &claimed.note {
        diag::warn!("{note}");
    }
    let f = claimed.file;
    let window = WINDOWS.fetch_add(1, Relaxed) + 1;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let header = Header {
        version: mallocshim_format::trace::VERSION,
        pid: pid(),
        backend: crate::backend::active().name().into(),
        start_unix_ns: now.as_nanos() as u64,
        tick_ns: 1,
        preexisting: live_by_class(),
        max_bytes,
        seconds,
        shim_version: env!("CARGO_PKG_VERSION").into(),
    };
    let mut w = TraceWriter::new(f, &header).map_err(|e| e.to_string())?;
    // The header on disk now: a later process reads whose `.part` this is (`file`).
    w.flush().map_err(|e| e.to_string())?;
    let opened_ns = clock::mono_ns();
    let target = claimed.target.clone();
    *st = Some(Recorder {
        w,
        path: claimed.part,
        target: claimed.target,
        drain: Drain::new(window),
        seconds,
        max_bytes: max_bytes.max(crate::hot::config::RECORD_MIN_BYTES),
        opened_ns,
        flushed_ns: opened_ns,
        emitted_ns: opened_ns,
        ended: None,
    });
    OWNER.store(pid(), Relaxed);
    tracebuf::T0.store(clock::ticks(), Relaxed);
    tracebuf::WINDOW.store(window, Release);
    // No worker yet (its pipe is registered when it starts): a full ring drains on the spot.
    if !crate::hot::mailbox::has_waker() {
        tracebuf::set_inline_drain(Some(inline_drain));
    }
    route::set_traced(true);
    Ok(target)
}

/// A drain pass from a full ring in a process without the shim's thread.
fn inline_drain() {
    if let Ok(mut st) = STATE.try_lock() {
        if OWNER.load(Relaxed) == pid() {
            pass(&mut st, false);
        }
    }
}

/// The worker's periodic pass: drains, and closes the window when it is due.
pub fn tick() {
    if !active() {
        return;
    }
    let _g = Reentry::enter();
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    pass(&mut st, false);
}

/// Ends the window on request (`mallocshim record --stop`, the control channel).
pub fn stop() {
    end_with(EndReason::Stopped);
}

/// The exit path: the window ends, every call recorded so far is written, the file closed.
pub fn at_exit() {
    end_with(EndReason::Exit);
}

fn end_with(reason: EndReason) {
    if !active() {
        return;
    }
    let _g = Reentry::enter();
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = st.as_mut() {
        r.ended.get_or_insert(reason);
    }
    pass(&mut st, true);
}

/// A forked child: no window (the parent's trace goes on in the parent).
pub fn after_fork_child() {
    tracebuf::after_fork_child();
    route::set_traced(false);
}

/// One drain pass; closes the window when it has ended (or `closing`).
fn pass(st: &mut Option<Recorder>, closing: bool) {
    let Some(r) = st.as_mut() else { return };
    let now = clock::mono_ns();
    if r.ended.is_none()
        && r.seconds != 0
        && now.saturating_sub(r.opened_ns) >= r.seconds.saturating_mul(1_000_000_000)
    {
        r.ended = Some(EndReason::Seconds);
    }
    let closing = closing || r.ended.is_some();
    if closing {
        // No new call enters a ring; what is in them is read below.
        tracebuf::WINDOW.store(0, Release);
        route::set_traced(false);
        tracebuf::set_inline_drain(None);
    }
    if let Err(e) = step(r, closing) {
        r.ended = Some(EndReason::Error);
        diag::warn!("recording to {} failed: {e}; the trace ends there", r.path.display());
        tracebuf::WINDOW.store(0, Release);
        route::set_traced(false);
    }
    if closing || r.ended.is_some() {
        tracebuf::WINDOW.store(0, Release);
        route::set_traced(false);
        if let Some(r) = st.take() {
            finish(r);
        }
    }
}

fn step(r: &mut Recorder, all: bool) -> Result<(), TraceError> {
    r.drain.collect(&mut r.w)?;
    let busy = r.drain.fullest > tracebuf::CAP as u64 / 8;
    NEXT_MS.store(if busy { BUSY_DRAIN_MS } else { DRAIN_MS }, Relaxed);
    // A busy pass only empties the rings: sorting and writing every 1 ms would sort and move
    // the 20 ms held back (HOLD_NS) twenty times over.
    let now = clock::mono_ns();
    if !all && now.saturating_sub(r.emitted_ns) < DRAIN_MS * 1_000_000 {
        return Ok(());
    }
    r.emitted_ns = now;
    let now_rel = clock::ticks().wrapping_sub(tracebuf::T0.load(Relaxed));
    let max = r.max_bytes;
    let stopped = r.drain.emit(&mut r.w, now_rel, all, |w| {
        if w.size_bound() + RESERVE < max {
            return Ok(false);
        }
        w.flush()?;
        Ok(w.size_bound() + RESERVE >= max)
    })?;
    if stopped {
        r.ended = Some(EndReason::MaxBytes);
        return Ok(());
    }
    let now = clock::mono_ns();
    if now.saturating_sub(r.flushed_ns) >= FLUSH_NS {
        r.w.flush()?;
        r.flushed_ns = now;
    }
    Ok(())
}

fn finish(r: Recorder) {
    let Recorder { w, path, target, drain, opened_ns, ended, max_bytes, .. } = r;
    let ended = ended.unwrap_or(EndReason::Stopped);
    let no_buffer = tracebuf::NO_BUFFER.swap(0, Relaxed);
    let footer = Footer {
        events: 0,
        dropped: drain.dropped.iter().sum::<u64>() + no_buffer,
        dropped_per_thread: drain.dropped_per_thread(),
        reordered: drain.reordered,
        ended,
        window_ns: clock::mono_ns().saturating_sub(opened_ns),
    };
    let events = w.events();
    let (bytes, f) = match w.finish(&footer) {
        Ok(done) if ended != EndReason::Error => done,
        Ok(_) => {
            return diag::warn!(
                "the trace cut short stays in {} (replays up to its last whole block)",
                path.display()
            )
        }
        Err(e) => {
            return diag::warn!(
                "recording to {}: cannot write its end: {e}; the trace cut short stays there",
                path.display()
            )
        }
    };
    // Renamed while this process still holds the `.part`'s lock.
    let named = match file::publish(&path, &target, pid()) {
        Ok((named, note)) => {
            if let Some(note) = note {
                diag::warn!("{note}");
            }
            named
        }
        Err(e) => return diag::warn!("recording: {e}"),
    };
    drop(f);
    if ended == EndReason::MaxBytes {
        diag::warn!(
            "recording to {} stopped at its size budget ({max_bytes} bytes, MALLOCSHIM_RECORD_MAX_BYTES / --max-bytes): {events} calls in {bytes} bytes",
            named.display()
        );
    }
}
