//! The memory history: a bounded in-memory ring of one row per `MALLOCSHIM_HISTORY_MS` (1 s by
//! default), [`CAPACITY`] rows (an hour at 1 s), each the RSS account (every `memory.*` field),
//! the trims so far and the calls per op so far; dumps carry it (`history`, docs/history.md)
//! and `mallocshim diagnose` reads its verdict from it without a memlog.
//!
//! Owns the ring (mapped once, [`RING_BYTES`], straight from the kernel: never the backend's
//! memory, never freed) and the rule that keeps it cheap: the allocator's own figures (the
//! backend's statistics and the residency probe, whose cost grows with the heap under glibc and
//! mimalloc) are measured in full only when the process moved (RssAnon or the shim's counted
//! bytes by more than 1/64 or [`MOVE_MIN_BYTES`], or a trim ran), and otherwise at most as often
//! as keeps their measured CPU time at [`IDLE_DUTY`] of the thread (at least every
//! [`MAX_CARRY_MS`]). Between two measurements a row takes RSS from /proc/self/status (cheap,
//! constant) and moves the last measured figures by what changed since: the allocator's resident
//! bytes by RssAnon's change, live bytes by the shim's counted bytes' change; `measured` says
//! which rows are which.
//!
//! Written by the shim's thread only ([`sample`]); read by whoever dumps ([`read`]). Must not
//! run on the hot path or in a signal handler; allocates (the /proc read) under the worker's
//! guard. A forked child starts with an empty ring (the ring is wipe-on-fork: a fork copies
//! none of it).

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::*};
use mallocshim_format::history::{self, History, COLUMNS};

/// Rows in the ring.
pub const CAPACITY: usize = history::CAPACITY;
const COLS: usize = COLUMNS.len();
/// Bytes of the ring: rows × columns × 8 (748,800 B: 731 KiB).
pub const RING_BYTES: usize = CAPACITY * COLS * 8;
const _: () = assert!(RING_BYTES <= crate::base::region::RING_MAX_BYTES);
/// Stands for "no figure" (None) in a cell.
const NONE: u64 = u64::MAX;
/// Share of the thread's time the full measurements may take on an idle process.
const IDLE_DUTY: f64 = 0.0005;
/// Share while the process moves (each move asks for a measurement).
const MOVING_DUTY: f64 = 0.005;
/// A measurement is never carried longer than this, however slow it is.
const MAX_CARRY_MS: u64 = 300_000;
/// A change in RssAnon or counted bytes below this never asks for a measurement.
const MOVE_MIN_BYTES: u64 = 1 << 20;

type Row = [AtomicU64; COLS];

/// The ring (null until the first sample maps it, or when mapping failed).
static RING: AtomicPtr<Row> = AtomicPtr::new(core::ptr::null_mut());
/// Rows written since the start (the next row goes to `HEAD % CAPACITY`).
#[link_section = ".data.mallocshim_fork"]
static HEAD: AtomicU64 = AtomicU64::new(0);

/// The period in ms (0: off), from the configuration (at least 10 ms).
pub fn period_ms() -> u64 {
    match crate::hot::config::get().history_ms {
        0 => 0,
        n => n.max(10),
    }
}

fn ring() -> Option<&'static [Row]> {
    let mut p = RING.load(Acquire);
    if p.is_null() {
        // In the shim's reservation, just above the worker's stack (one wipe-on-fork mapping with
        // it); its own mapping without the reservation.
        let m = crate::base::region::ring(RING_BYTES);
        if m.is_null() {
            return None;
        }
        // Wipe-on-fork (`region` marks it): a child starts with an empty ring (`HEAD` 0), zeroed
        // rows are as good as the parent's, and the fork copies none of the ring's page tables
        // (up to 183 written pages).
        p = m.cast();
        RING.store(p, Release);
    }
    // SAFETY: a private anonymous mapping of CAPACITY rows, zeroed (a valid AtomicU64 is any
    // bit pattern), never unmapped; only atomics are accessed through it.
    Some(unsafe { core::slice::from_raw_parts(p, CAPACITY) })
}

/// The last full measurement and what the cheap sources read then.
#[derive(Default)]
pub struct State {
    full: Option<crate::cold::account::Memory>,
    anon_at_full: u64,
    counted_at_full: i128,
    trims_at_full: u64,
    /// Earliest time (monotonic ms) of the next measurement when idle, and when moving.
    next_idle: u64,
    next_moving: u64,
}

/// Calls per op and counted bytes (allocated minus freed, i128) over every slot.
fn counts() -> ([u64; 5], i128) {
    use crate::base::classes::Op;
    let mut calls = [0u64; 5];
    let mut balance = 0i128;
    crate::hot::slots::for_each(|s, _| {
        for (o, cls) in s.tally.iter().enumerate() {
            for t in cls {
                calls[o] += t.count.load(Relaxed);
                let b = t.bytes.load(Relaxed) as i128;
                balance += if o == Op::Free as usize { -b } else { b };
            }
        }
    });
    (calls, balance)
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec for this thread's CPU clock.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn moved(now: u64, then: u64) -> bool {
    now.abs_diff(then) > (then / 64).max(MOVE_MIN_BYTES)
}

/// One row, now (the worker's job every [`period_ms`]).
pub fn sample(st: &mut State) {
    let Some(ring) = ring() else { return };
    let unix_ms = crate::cold::procfs::unix_ms();
    let mono = crate::base::clock::mono_ms();
    let (calls, counted) = counts();
    let (runs, released) = crate::cold::trim::totals();
    let (rss, anon, file, shmem, vsz) = crate::cold::account::status();
    let profiling = crate::hot::config::get().profile;
    let moving = runs != st.trims_at_full
        || moved(anon, st.anon_at_full)
        || (profiling && moved(counted.max(0) as u64, st.counted_at_full.max(0) as u64));
    let due = st.full.is_none() || mono >= st.next_idle || (moving && mono >= st.next_moving);
    let (m, measured) = if due {
        let t0 = thread_cpu_ns();
        let mut m = crate::cold::account::measure();
        let cost_ms = thread_cpu_ns().saturating_sub(t0) as f64 / 1e6;
        m.vsz_bytes = vsz;
        st.full = Some(m);
        st.anon_at_full = m.rss_anon_bytes;
        st.counted_at_full = counted;
        st.trims_at_full = runs;
        st.next_idle = mono + ((cost_ms / IDLE_DUTY) as u64).min(MAX_CARRY_MS);
        st.next_moving = mono + (cost_ms / MOVING_DUTY) as u64;
        (m, true)
    } else {
        (carried(st, counted, rss, anon, file, shmem, vsz), false)
    };
    let by = crate::cold::trim::by_reason();
    let opt = |v: Option<u64>| v.unwrap_or(NONE);
    let vals: [u64; COLS] = [
        unix_ms,
        m.rss_bytes,
        m.vsz_bytes,
        m.backend_allocated_bytes,
        m.backend_resident_bytes,
        m.backend_free_bytes,
        runs,
        released,
        m.rss_anon_bytes,
        m.rss_file_bytes,
        m.rss_shmem_bytes,
        m.live_bytes,
        m.allocator_free_bytes,
        opt(m.allocator_metadata_bytes),
        m.allocator_resident_bytes,
        m.non_heap_bytes,
        by[0],
        by[1],
        by[2],
        by[3],
        calls[0],
        calls[1],
        calls[2],
        calls[3],
        calls[4],
        measured as u64,
    ];
    let head = HEAD.load(Relaxed);
    let row = &ring[(head % CAPACITY as u64) as usize];
    // The row is invalid while written: readers skip the row at HEAD (see `read`).
    for (c, v) in row.iter().zip(vals) {
        c.store(v, Relaxed);
    }
    HEAD.store(head + 1, Release);
}

/// The last measurement moved by what the cheap sources saw since (module doc).
fn carried(
    st: &State,
    counted: i128,
    rss: u64,
    anon: u64,
    file: u64,
    shmem: u64,
    vsz: u64,
) -> crate::cold::account::Memory {
    let f = st.full.unwrap_or_default();
    let resident =
        (f.allocator_resident_bytes as i128 + anon as i128 - st.anon_at_full as i128).max(0) as u64;
    let live = if crate::hot::config::get().profile {
        (f.live_bytes as i128 + counted - st.counted_at_full).max(0) as u64
    } else if f.live_bytes >= f.allocator_resident_bytes {
        // No live figure at all (mimalloc unprofiled): everything resident counts as live.
        resident
    } else {
        f.live_bytes
    };
    crate::cold::account::Memory {
        vsz_bytes: vsz,
        backend_allocated_bytes: f.backend_allocated_bytes,
        backend_resident_bytes: f.backend_resident_bytes,
        backend_free_bytes: f.backend_free_bytes,
        ..crate::cold::account::compose(
            Some(live.min(resident.min(anon))),
            resident,
            f.allocator_metadata_bytes,
            rss,
            anon,
            file,
            shmem,
        )
    }
}

/// The ring's rows, oldest first, as the dump's `history` (empty columns when off).
pub fn read() -> History {
    let period_ms = period_ms();
    let p = RING.load(Acquire);
    if period_ms == 0 || p.is_null() {
        return History::default();
    }
    // SAFETY: as in `ring`: mapped once, never unmapped.
    let ring = unsafe { core::slice::from_raw_parts(p, CAPACITY) };
    let head = HEAD.load(Acquire);
    // The oldest row may be overwritten while read: leave one out once the ring has wrapped.
    let first = head.saturating_sub(CAPACITY as u64 - 1);
    let mut rows: Vec<Vec<Option<u64>>> = Vec::with_capacity((head - first) as usize);
    for i in first..head {
        let r = &ring[(i % CAPACITY as u64) as usize];
        rows.push(r.iter().map(|c| c.load(Relaxed)).map(|v| (v != NONE).then_some(v)).collect());
    }
    // Rows the writer overtook while they were read.
    let overtaken = HEAD.load(Acquire).saturating_sub(CAPACITY as u64 - 1).saturating_sub(first) as usize;
    rows.drain(..overtaken.min(rows.len()));
    History {
        period_ms,
        capacity: CAPACITY as u64,
        ring_bytes: RING_BYTES as u64,
        columns: COLUMNS.iter().map(|c| c.to_string()).collect(),
        rows,
    }
}

/// Fork child handler (async-signal-safe: one load, one store): the child's ring starts empty.
pub fn after_fork_child() {
    if HEAD.load(Relaxed) != 0 {
        HEAD.store(0, Relaxed);
    }
}
