//! Bounds on dumps, so that nothing that sends signals can keep the shim writing or fill a
//! directory (glibc's tst-mallocfork2, which sends itself SIGUSR1 thousands of times, made
//! 19,992 dump files): requested dumps (the dump signal, through `hot::mailbox::request`) are merged
//! while one is written and rate-limited to one per `MALLOCSHIM_DUMP_MIN_INTERVAL_MS`, a request
//! inside the interval waiting for its end (deferred, never dropped: the last request is always
//! answered, at exit at the latest); and each process keeps only its newest
//! `MALLOCSHIM_DUMP_KEEP` dumps, removing its own older files and nobody else's (each file is
//! removed only while it is still the very file this process wrote: same device and inode).
//! One `mallocshim:` line, once, when requests are first merged or deferred, and one when a file
//! is first removed.
//! Must not: block, or run in a signal handler at all (the signal handler's count of requests is `hot::mailbox`'s). [`retain`]
//! runs with the dump flag held (`dump::write`), which serialises every access to its list.

use crate::hot::config;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// CLOCK_MONOTONIC ms at the start of the last requested dump (0: none yet).
static LAST_MS: AtomicU64 = AtomicU64::new(0);
/// Requests made, and requests answered by a dump that has started.
static ANSWERED: AtomicU64 = AtomicU64::new(0);
static MERGED_SAID: AtomicBool = AtomicBool::new(false);
static REMOVED_SAID: AtomicBool = AtomicBool::new(false);

/// CLOCK_MONOTONIC in ms.
pub fn now_ms() -> u64 {
    crate::base::clock::mono_ms()
}

/// None when a requested dump may start at `now` (ms); `Some(t)` when it must wait until `t`.
pub fn gate(now: u64) -> Option<u64> {
    let min = config::current().dump_min_interval_ms;
    let last = LAST_MS.load(Relaxed);
    let until = last.saturating_add(min);
    if min == 0 || last == 0 || now >= until {
        return None;
    }
    say_merged();
    Some(until)
}

/// A dump that answers the requests made so far starts at `now` (ms).
pub fn started(now: u64) {
    LAST_MS.store(now.max(1), Relaxed);
    let n = crate::hot::mailbox::asked();
    if n.saturating_sub(ANSWERED.swap(n, Relaxed)) > 1 {
        say_merged();
    }
}

fn say_merged() {
    if !MERGED_SAID.swap(true, Relaxed) {
        crate::base::diag::warn!(
            "dump requests came while a dump was being written or within MALLOCSHIM_DUMP_MIN_INTERVAL_MS={} ms of the last: they are merged, and the last is answered at the end of the interval (said once)",
            config::current().dump_min_interval_ms
        );
    }
}

/// The files of one dump, each with its device and inode.
type Files = Vec<(PathBuf, u64, u64)>;

/// The dumps this process wrote, oldest first.
struct Kept {
    pid: u32,
    dumps: VecDeque<Files>,
}

struct KeptCell(UnsafeCell<Option<Kept>>);
// SAFETY: only `retain` touches it, with the dump flag held (one thread at a time).
unsafe impl Sync for KeptCell {}

static KEPT: KeptCell = KeptCell(UnsafeCell::new(None));

/// After a dump wrote `written` into `dir` (called with the dump flag held): records its files
/// and removes this process's oldest dumps beyond `MALLOCSHIM_DUMP_KEEP`.
pub fn retain(dir: &Path, written: &[PathBuf]) {
    let keep = config::current().dump_keep as usize;
    if keep == 0 || written.is_empty() {
        return;
    }
    // SAFETY: see `KeptCell`: the caller holds the dump flag.
    let kept = unsafe { &mut *KEPT.0.get() };
    let pid = std::process::id();
    if kept.as_ref().is_some_and(|k| k.pid != pid) {
        // A forked child: the list is its parent's (maybe caught mid-update by fork): left as is.
        core::mem::forget(kept.take());
    }
    let k = kept.get_or_insert_with(|| Kept { pid, dumps: VecDeque::new() });
    let files: Files = written
        .iter()
        .filter_map(|p| std::fs::symlink_metadata(p).ok().map(|m| (p.clone(), m.dev(), m.ino())))
        .collect();
    k.dumps.push_back(files);
    while k.dumps.len() > keep {
        for (p, dev, ino) in k.dumps.pop_front().unwrap_or_default() {
            let ours = std::fs::symlink_metadata(&p)
                .is_ok_and(|m| m.file_type().is_file() && m.dev() == dev && m.ino() == ino);
            if ours && std::fs::remove_file(&p).is_ok() && !REMOVED_SAID.swap(true, Relaxed) {
                crate::base::diag::warn!(
                    "keeping the newest {} dumps of this process in {} (MALLOCSHIM_DUMP_KEEP): its older dump files are removed (said once)",
                    keep,
                    dir.display()
                );
            }
        }
    }
}
