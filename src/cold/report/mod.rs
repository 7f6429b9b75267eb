//! Reporting: a [`Snapshot`] of everything recorded, taken by the shim's own thread (or a C API
//! caller) under the reentrancy guard, and its serialisations — `json` (the contract tools read),
//! `prom` (Prometheus text exposition), `hdr` (HdrHistogram interval log), `text` (a table).
//! Kept apart from recording: nothing here runs on the hot path, and it may allocate.

pub mod hdr;
pub mod json;
pub mod prom;
mod routines;
pub mod text;

use crate::base::classes::{BUCKETS, CLASSES, OPS};
pub use crate::cold::latency::Latency;
pub use crate::cold::procfs::{statm, unix_ms};
use crate::hot::class_latency;
use crate::hot::slots;
use core::sync::atomic::Ordering::Relaxed;
use mallocshim_format::dump::{STATE_EXITED, STATE_LIVE};

/// Calls and bytes of one op (in one size class, or in one thread).
#[derive(Clone, Debug, Default)]
pub struct OpRow {
    pub count: u64,
    pub bytes: u64,
    /// Failed requests above 64 MiB (in a thread's row; 0 in size-class rows).
    pub failed: u64,
    pub latency: Latency,
}

/// One thread, live, or the aggregate of the exited threads of one start routine: the dump's own
/// row for what names the thread (`row`, its `ops` left empty: `json` fills them from `ops`),
/// and the recorded calls and latencies per op (index `classes::Op`), which the other formats
/// render too.
#[derive(Clone, Debug)]
pub struct ThreadRow {
    pub row: mallocshim_format::ThreadRow,
    pub ops: Vec<OpRow>,
}

/// Memory figures at snapshot time, in bytes: the dump's own type (see [`crate::cold::account`]).
pub use mallocshim_format::Memory;

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

    /// Failed requests above 64 MiB per op, over all threads.
    pub fn failed(&self) -> Vec<u64> {
        (0..OPS).map(|o| self.threads.iter().map(|t| t.ops[o].failed).sum()).collect()
    }
}

fn thread_name(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// The name of the exited row of unknown start routines (the main thread's kind, a full table
/// of routines, calls of threads without a slot); the other exited rows are named
/// `exited threads of <routine>`.
pub const EXITED_OTHER: &str = "exited threads of other routines";

/// Rows per op and size class holding only the sampled latencies, all stripes added up.
fn class_latencies(npt: f64) -> Vec<Vec<OpRow>> {
    let empty = OpRow {
        latency: Latency { buckets: vec![0; BUCKETS], max_ns: 0, ns_per_tick: npt },
        ..OpRow::default()
    };
    let mut classes: Vec<Vec<OpRow>> = (0..OPS).map(|_| vec![empty.clone(); CLASSES]).collect();
    class_latency::each_row(|o, c, hist, max| {
        classes[o][c].latency.add(&Latency::from_atomics(hist, max, npt));
    });
    classes
}

/// Takes a snapshot. Call under the reentrancy guard. The walk over the slots only copies
/// numbers: thread names (/proc) and start routines (the files' symbols, never the loader) are
/// looked up after it, when no exiting thread's fold is held up by it (`slots`).
pub fn snapshot() -> Snapshot {
    let npt = crate::base::clock::ns_per_tick();
    let mut threads = Vec::new();
    // Latencies first, counts second: a call finishing in between is counted but not sampled,
    // never sampled but not counted.
    let mut classes = class_latencies(npt);
    let mut routines = Vec::new();
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
            row.failed = s.failed[o].load(Relaxed);
            ops.push(row);
        }
        routines.push(s.start_routine.load(Relaxed));
        let row = mallocshim_format::ThreadRow {
            tid: if live { tid } else { 0 },
            comm: String::new(),
            name: String::new(),
            state: if live { STATE_LIVE } else { STATE_EXITED }.to_string(),
            ops: Default::default(),
            start_routine: None,
            creator_tid: s.creator_tid.load(Relaxed),
            start_unix_ms: s.start_unix_ms.load(Relaxed),
            exited_threads: (!live).then(|| s.folded_threads.load(Relaxed)),
            live_bytes: None,
        };
        threads.push(ThreadRow { row, ops });
    });
    let known: Vec<usize> = routines.iter().copied().filter(|&r| r != 0).collect();
    let names = routines::names(&known);
    let routines_of = routines.clone();
    for (t, r) in threads.iter_mut().zip(routines) {
        let row = &mut t.row;
        row.start_routine = (r != 0).then(|| names.get(&r).cloned().unwrap_or_else(|| format!("{r:#x}")));
        row.name = match (row.state == STATE_LIVE, &row.start_routine) {
            (true, _) => thread_name(row.tid),
            (false, Some(r)) => format!("exited threads of {r}"),
            (false, None) => EXITED_OTHER.to_string(),
        };
        row.comm = row.name.clone();
    }
    let (_, vsz) = statm();
    let memory = Memory { vsz_bytes: vsz, ..crate::cold::account::measure() };
    // After the account: its walk's buffers, freed on a program's thread to the backend, may sit
    // in a thread cache (jemalloc counts those as allocated) and must not read as the program's.
    charge_live(&mut threads, &routines_of);
    let now_ms = unix_ms();
    let up = crate::base::clock::mono_ms().saturating_sub(crate::base::clock::start_ms());
    Snapshot {
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() } as u32,
        backend: crate::backend::active().name(),
        unix_time_ms: now_ms,
        uptime_s: up as f64 / 1000.0,
        sample_every: crate::hot::config::current().sample_every,
        profiling: crate::hot::config::get().profile,
        classes,
        threads,
        memory,
        live_by_class: crate::hot::heapprof::live_by_class(),
        trim: crate::cold::trim::stats(),
    }
}

/// Fills each row's `live_bytes` from the heap profile's live samples per allocating thread
/// (None everywhere while sampling is off): a live thread's row gets its tid's; the blocks of
/// threads that exited go to the exited row of their start routine (`routines[i]` is row i's),
/// else to the row of other routines, made when the dump has none.
fn charge_live(threads: &mut Vec<ThreadRow>, routines: &[usize]) {
    let Some(by) = crate::hot::heapprof::live_by_thread() else { return };
    for t in threads.iter_mut() {
        t.row.live_bytes = Some(0);
    }
    for (tid, role, bytes) in by {
        let live = threads.iter().position(|t| t.row.state == STATE_LIVE && t.row.tid == tid && tid != 0);
        let exited = || {
            let of = |want: usize| {
                threads
                    .iter()
                    .zip(routines.iter().chain(core::iter::repeat(&0)))
                    .position(|(t, &r)| t.row.state != STATE_LIVE && r == want)
            };
            of(role).or_else(|| of(0))
        };
        let i = match live.or_else(exited) {
            Some(i) => i,
            None => {
                let row = mallocshim_format::ThreadRow {
                    tid: 0,
                    name: EXITED_OTHER.to_string(),
                    comm: EXITED_OTHER.to_string(),
                    state: STATE_EXITED.to_string(),
                    ops: Default::default(),
                    start_routine: None,
                    creator_tid: 0,
                    start_unix_ms: 0,
                    exited_threads: Some(0),
                    live_bytes: Some(0),
                };
                threads.push(ThreadRow { row, ops: vec![OpRow::default(); OPS] });
                threads.len() - 1
            }
        };
        *threads[i].row.live_bytes.get_or_insert(0) += bytes;
    }
}

/// Merges op rows of one thread for the top-thread listings.
pub fn thread_total(t: &ThreadRow) -> (u64, Latency) {
    let mut l = Latency::default();
    for r in &t.ops {
        l.add(&r.latency);
    }
    (t.ops.iter().map(|r| r.count).sum(), l)
}
