//! Held-bytes checkpoints: what each thread's sampled live blocks held, taken by the shim's
//! thread when it starts and every twelfth of the memory history's span after (5 minutes at the
//! default 1 s period), the last [`HELD_CHECKPOINTS`] kept, so that a dump tells which threads (and, joined with the
//! server's processlist, which connections) grew over the history's window
//! (`Dump::held_checkpoints`, `mallocshim diagnose PID`).
//!
//! Only while someone looks: the periodic checkpoints run for one history span (an hour) after a
//! control-channel request or a dump ([`arm`]); a process nobody asked pays only the one taken
//! at the start (a walk of a nearly empty live set), and `diagnose PID` then compares with it
//! ("over the last N s": since the start).
//!
//! Each checkpoint is one walk of the heap profile's live samples (`heapprof::live_by_thread`,
//! as a dump's per-thread sums: each shard's lock in turn, briefly), summed per tid, the
//! [`HELD_CHECKPOINT_THREADS`] largest kept. Its cost grows with the live samples (heap size /
//! mean gap), not with the calls; with heap profiles off nothing runs.
//!
//! Owns the kept checkpoints (the worker's heap, behind a mutex that neither side waits on:
//! `try_lock`, so a fork that copied it locked costs the child its checkpoints, never a hang).
//! Must not run on the hot path or in a signal handler: it allocates.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use mallocshim_format::dump::{HeldCheckpoint, HeldThread, HELD_CHECKPOINTS, HELD_CHECKPOINT_THREADS};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Until when (CLOCK_MONOTONIC ms) the periodic checkpoints run; 0: nobody asked yet.
static ARMED_UNTIL_MS: AtomicU64 = AtomicU64::new(0);

/// Someone looks (a control-channel request, a dump): the periodic checkpoints run for the next
/// history span. Any thread; one atomic store.
pub fn arm() {
    let span = period_ms().saturating_mul(PER_SPAN);
    ARMED_UNTIL_MS.store(crate::base::clock::mono_ms().saturating_add(span), Relaxed);
}

/// Whether a periodic checkpoint is due to be taken now (armed and not expired).
pub fn armed() -> bool {
    crate::base::clock::mono_ms() < ARMED_UNTIL_MS.load(Relaxed)
}

/// Checkpoints per memory-history span.
const PER_SPAN: u64 = 12;

struct Kept {
    /// The process that took them (a forked child reads none of its parent's).
    pid: u32,
    v: VecDeque<HeldCheckpoint>,
}

static KEPT: Mutex<Kept> = Mutex::new(Kept { pid: 0, v: VecDeque::new() });

/// The period in ms: the history's span over [`PER_SPAN`] (0: history off).
pub fn period_ms() -> u64 {
    crate::cold::history::period_ms().saturating_mul(crate::cold::history::CAPACITY as u64) / PER_SPAN
}

fn pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// Takes a checkpoint now (the shim's thread, under its guard); nothing while heap profiles are
/// off or while a reader holds the checkpoints.
pub fn take() {
    let Some(by) = crate::hot::heapprof::live_by_thread() else { return };
    let mut per: std::collections::BTreeMap<u32, u64> = Default::default();
    for (tid, _, bytes) in by.into_iter().filter(|e| e.0 != 0 && e.2 > 0) {
        *per.entry(tid).or_default() += bytes;
    }
    let mut threads: Vec<HeldThread> =
        per.into_iter().map(|(tid, live_bytes)| HeldThread { tid, live_bytes }).collect();
    threads.sort_unstable_by(|a, b| b.live_bytes.cmp(&a.live_bytes).then(a.tid.cmp(&b.tid)));
    threads.truncate(HELD_CHECKPOINT_THREADS);
    let c = HeldCheckpoint { unix_time_ms: crate::cold::procfs::unix_ms(), threads };
    let Ok(mut k) = KEPT.try_lock() else { return };
    if k.pid != pid() {
        k.pid = pid();
        k.v.clear();
    }
    if k.v.len() == HELD_CHECKPOINTS {
        k.v.pop_front();
    }
    k.v.push_back(c);
}

/// The kept checkpoints, oldest first (empty in a forked child, or while the shim's thread
/// writes one).
pub fn read() -> Vec<HeldCheckpoint> {
    match KEPT.try_lock() {
        Ok(k) if k.pid == pid() => k.v.iter().cloned().collect(),
        _ => Vec::new(),
    }
}
