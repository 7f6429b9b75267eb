//! Reporting: a [`Snapshot`] of everything recorded, taken by the shim's own thread (or a C API
//! caller) under the reentrancy guard, and its serialisations — `json` (the contract tools read),
//! `prom` (Prometheus text exposition), `hdr` (HdrHistogram interval log), `text` (a table).
//! Kept apart from recording: nothing here runs on the hot path, and it may allocate.

pub mod hdr;
pub mod json;
pub mod prom;
pub mod text;

use crate::base::classes::{CLASSES, OPS};
pub use crate::cold::latency::Latency;
pub use crate::cold::procfs::{statm, unix_ms};
use crate::hot::slots::{self, CLASS_HIST, CLASS_MAX};
use core::sync::atomic::Ordering::Relaxed;

/// Calls and bytes of one op (in one size class, or in one thread).
#[derive(Clone, Debug, Default)]
pub struct OpRow {
    pub count: u64,
    pub bytes: u64,
    pub latency: Latency,
}

/// One thread, live or the aggregate of exited ones.
#[derive(Clone, Debug)]
pub struct ThreadRow {
    pub tid: u32,
    pub name: String,
    pub live: bool,
    pub ops: Vec<OpRow>,
    /// Start routine, `symbol+0xoffset` (or `object+0xoffset`) resolved with dladdr(3) at dump
    /// time; None when unknown (the main thread, threads of unknown routines folded together).
    pub start_routine: Option<String>,
    /// Kernel thread id of the creating thread (live threads; 0 unknown).
    pub creator_tid: u32,
    /// Thread start, ms since the epoch (live threads; 0 unknown).
    pub start_unix_ms: u64,
    /// Exited rows: how many threads were folded in.
    pub exited_threads: u64,
}

/// Memory figures at snapshot time, in bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    /// Resident set size (/proc/self/status `VmRSS`, as in `account`).
    pub rss_bytes: u64,
    /// Virtual size from /proc/self/statm.
    pub vsz_bytes: u64,
    pub backend: crate::backend::MemStats,
    /// The RSS account (see [`crate::cold::account`]).
    pub account: crate::cold::account::Account,
}

/// Everything recorded, at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub pid: u32,
    pub backend: &'static str,
    pub unix_time_ms: u64,
    pub uptime_s: f64,
    pub sample_every: u32,
    /// `MALLOCSHIM_PROFILE`: false when calls are neither counted nor timed.
    pub profiling: bool,
    /// Per op (index `classes::Op`) and size class.
    pub classes: Vec<Vec<OpRow>>,
    pub threads: Vec<ThreadRow>,
    pub memory: Memory,
    /// Trims so far (`MALLOCSHIM_TRIM_*`, `mallocshim_trim()`).
    pub trim: crate::cold::trim::Stats,
    /// Live bytes per size class estimated by the heap profile (None: heap profiles off).
    pub live_by_class: Option<[u64; crate::base::classes::CLASSES]>,
}

impl Snapshot {
    /// Totals per op over all size classes.
    pub fn totals(&self) -> Vec<(u64, u64)> {
        self.classes
            .iter()
            .map(|cs| (cs.iter().map(|r| r.count).sum(), cs.iter().map(|r| r.bytes).sum()))
            .collect()
    }
}

fn thread_name(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// Takes a snapshot. Call under the reentrancy guard.
pub fn snapshot() -> Snapshot {
    let npt = crate::base::clock::ns_per_tick();
    let mut threads = Vec::new();
    let mut symbols = std::collections::HashMap::new();
    let mut classes: Vec<Vec<OpRow>> = (0..OPS).map(|_| vec![OpRow::default(); CLASSES]).collect();
    // Latencies first, counts second: a call finishing in between is counted but not sampled,
    // never sampled but not counted.
    for (o, cs) in classes.iter_mut().enumerate() {
        for (c, row) in cs.iter_mut().enumerate() {
            row.latency = Latency::from_atomics(&CLASS_HIST[o][c], CLASS_MAX[o][c].load(Relaxed), npt);
        }
    }
    slots::for_each(|s, live| {
        let tid = s.tid.load(Relaxed);
        let mut ops = Vec::with_capacity(OPS);
        for (o, cls) in classes.iter_mut().enumerate() {
            let mut row = OpRow {
                latency: Latency::from_atomics(&s.hist[o], s.max[o].load(Relaxed), npt),
                ..OpRow::default()
            };
            for (cell, t) in cls.iter_mut().zip(&s.tally[o]) {
                let (n, b) = (t.count.load(Relaxed), t.bytes.load(Relaxed));
                row.count += n;
                row.bytes += b;
                cell.count += n;
                cell.bytes += b;
            }
            ops.push(row);
        }
        let name = if live { thread_name(tid) } else { "exited threads".to_string() };
        let routine = s.start_routine.load(Relaxed);
        threads.push(ThreadRow {
            tid: if live { tid } else { 0 },
            name,
            live,
            ops,
            start_routine: (routine != 0).then(|| symbolize(routine, &mut symbols)),
            creator_tid: s.creator_tid.load(Relaxed),
            start_unix_ms: s.start_unix_ms.load(Relaxed),
            exited_threads: if live { 0 } else { s.folded_threads.load(Relaxed) },
        });
    });
    let (_, vsz) = statm();
    let (account, backend_stats) = crate::cold::account::measure();
    let now_ms = unix_ms();
    let up = (crate::base::clock::mono_ns() / 1_000_000).saturating_sub(crate::base::clock::start_ms());
    Snapshot {
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() } as u32,
        backend: crate::backend::active().name(),
        unix_time_ms: now_ms,
        uptime_s: up as f64 / 1000.0,
        sample_every: crate::hot::config::get().sample_every,
        profiling: crate::hot::config::get().profile,
        classes,
        threads,
        memory: Memory { rss_bytes: account.rss_bytes, vsz_bytes: vsz, backend: backend_stats, account },
        live_by_class: crate::hot::heapprof::live_by_class(),
        trim: crate::cold::trim::stats(),
    }
}

/// `symbol+0xoffset` for a code address, by dladdr(3) (the object's file name and offset when
/// no symbol covers it, e.g. a static function of a stripped binary; the bare address when no
/// object does). Cached per snapshot: dladdr scans symbol tables. Dump time only.
fn symbolize(addr: usize, cache: &mut std::collections::HashMap<usize, String>) -> String {
    cache
        .entry(addr)
        .or_insert_with(|| {
            // SAFETY: Dl_info is plain data; all-zero is a valid value.
            let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
            // SAFETY: dladdr only reads the loader's tables and fills the out-struct `info`.
            if unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) } == 0 {
                return format!("{addr:#x}");
            }
            let cstr = |p: *const libc::c_char| {
                // SAFETY: dladdr's strings are NUL-terminated and live while the object is loaded.
                (!p.is_null()).then(|| unsafe { core::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
            };
            match (cstr(info.dli_sname), info.dli_saddr as usize) {
                (Some(name), base) if base != 0 => format!("{name}+{:#x}", addr - base),
                _ => {
                    let file = cstr(info.dli_fname).unwrap_or_default();
                    let file = file.rsplit('/').next().unwrap_or("").to_string();
                    format!("{file}+{:#x}", addr.wrapping_sub(info.dli_fbase as usize))
                }
            }
        })
        .clone()
}

/// Merges op rows of one thread for the top-thread listings.
pub fn thread_total(t: &ThreadRow) -> (u64, Latency) {
    let mut l = Latency::default();
    for r in &t.ops {
        l.add(&r.latency);
    }
    (t.ops.iter().map(|r| r.count).sum(), l)
}
