//! The drain: reads every thread's trace ring (`hot::tracebuf`), merges the calls by time,
//! maps addresses to dense block ids and hands the events to the trace writer. Runs on the
//! shim's thread (or, in a process without it, on the thread whose ring filled), under the
//! reentrancy guard, with the recorder's lock held. Owns the address map; never touches a ring
//! beyond its tail and head.
//! Order: a call is written once it is older than [`HOLD_NS`], so that a call timed just before
//! a pass but published just after it still sorts in; one published later than that (its
//! thread was descheduled between the clock and the store for longer) is written at the time of
//! the last event written, and counted in the footer's `reordered`.
//! A late call that gives up an address allocated again since is matched to the block it gave
//! up ([`orphans`](super::orphans)), not to the new one.

use super::orphans::{Late, Orphan, Orphans};
use crate::hot::tracebuf::{self, Buf, Entry, ENDED, FREE};
use mallocshim_format::trace::{Event, Thread, TraceError, TraceOp, TraceWriter, PRE_WINDOW};
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::Ordering::*;

/// How old a call must be before it is written, ns.
pub const HOLD_NS: u64 = 20_000_000;
/// Events written between two reads of the rings while a pass writes (about 0.5 ms of the
/// drain's time): passes that wrote 10 ms of a FULLTEXT burst took 20-40 ms on 2 cores, and the
/// rings were not read meanwhile (docs/record.md, "Bursts").
const REFILL_EVENTS: usize = 2048;
/// ... as long as it holds fewer calls than this for the next pass (3.5 MiB): threads that call
/// faster than the drain writes then wait and drop as they would without it, instead of
/// growing the backlog (and each pass, and the one at exit) without bound.
const REFILL_BACKLOG: usize = 1 << 16;

/// The block map's hash: keeps neighbours together and mixes the rest. The low 12 bits are the
/// address's 16-byte granule within its 64 KiB region, as is, so blocks allocated one after
/// another (an arena's top chunk, a size class's run) land in neighbouring buckets and their
/// lookups share cache lines; the region number is multiplied, which spreads the regions and
/// gives hashbrown's tag (the top 7 bits) from mixed bits. A multiply of the whole address
/// (until issue 36) sent every lookup to a random cache line: half the drain's time on
/// mariadbd's FULLTEXT load, in cache misses (docs/record.md). SipHash, the default, costs
/// several times more per call.
#[derive(Default, Clone, Copy)]
pub struct AddrHash(u64);

impl std::hash::Hasher for AddrHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = (self.0 ^ x as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        let region = (v >> 16).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = (region & !0xfff) | ((v >> 4) & 0xfff);
    }
}

type Blocks = HashMap<u64, u64, std::hash::BuildHasherDefault<AddrHash>>;

/// One call read from a ring, with its thread index.
#[derive(Clone, Copy)]
struct Raw {
    rel: u64,
    seq: u64,
    thread: u32,
    e: Entry,
}

/// The drain's state for one window.
pub struct Drain {
    window: u64,
    ns_per_tick: f64,
    /// Claim number of a ring → thread index.
    threads: HashMap<u64, u32>,
    /// Calls dropped per thread index (a full ring), as last read.
    pub dropped: Vec<u64>,
    /// Per thread index: the block and usable size of its last [`tracebuf::OLD_SIZE`] entry
    /// (the block its next realloc takes).
    old_size: Vec<(u64, u64)>,
    pending: Vec<Raw>,
    seq: u64,
    blocks: Blocks,
    /// Orphans by address (few: a late or lost free whose address was reused).
    orphans: Orphans,
    ids: u64,
    pre: u64,
    last_ns: u64,
    /// Calls written out of their time order (late) or whose block had to be taken as freed.
    pub reordered: u64,
    /// The most calls one ring held at the last [`Drain::collect`] (how full the fullest was).
    pub fullest: u64,
}

impl Drain {
    pub fn new(window: u64) -> Drain {
        Drain {
            window,
            ns_per_tick: crate::base::clock::ns_per_tick(),
            threads: HashMap::new(),
            dropped: Vec::new(),
            old_size: Vec::new(),
            pending: Vec::new(),
            seq: 0,
            blocks: Blocks::with_capacity_and_hasher(1 << 16, Default::default()),
            orphans: Orphans::default(),
            ids: 0,
            pre: 0,
            last_ns: 0,
            reordered: 0,
            fullest: 0,
        }
    }

    /// Reads every ring of the window into the pending calls (declaring new threads to `w`),
    /// and frees the rings of exited threads once read.
    pub fn collect<W: Write>(&mut self, w: &mut TraceWriter<W>) -> Result<(), TraceError> {
        self.fullest = 0;
        for b in tracebuf::buffers() {
            let state = b.state.load(Acquire);
            if state == FREE {
                continue;
            }
            if b.window.load(Acquire) != self.window {
                // A ring of an earlier window whose thread has exited: nobody reads it now.
                if state == ENDED {
                    b.state.store(FREE, Release);
                }
                continue;
            }
            // The head first: a ring freed and claimed again since the state was read has
            // its new owner's claim number stored before any entry it published (release),
            // so the claim read after the head names the thread of the entries below it.
            let head = b.head.load(Acquire);
            if head != b.tail.load(Relaxed) {
                let t = self.thread_of(b, w)?;
                self.read_ring(b, t, head);
            }
            if state == ENDED {
                b.state.store(FREE, Release);
            }
        }
        Ok(())
    }

    fn thread_of<W: Write>(&mut self, b: &Buf, w: &mut TraceWriter<W>) -> Result<u32, TraceError> {
        let claim = b.claim.load(Relaxed);
        if let Some(&t) = self.threads.get(&claim) {
            return Ok(t);
        }
        let index = self.threads.len() as u32;
        let tid = b.tid.load(Relaxed);
        let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
        w.thread(&Thread { index, tid, name: name.trim_end().to_string() })?;
        self.threads.insert(claim, index);
        self.dropped.push(0);
        self.old_size.push((0, 0));
        Ok(index)
    }

    fn read_ring(&mut self, b: &Buf, thread: u32, head: u64) {
        let tail = b.tail.load(Relaxed);
        self.fullest = self.fullest.max(head.saturating_sub(tail));
        for i in tail..head {
            // SAFETY: an entry below the head the owner published (release), not yet freed.
            let e = unsafe { b.entry(i).read() };
            let mut rel = e.w0 >> 8;
            // Timed a hair before the window's start was published: at the start.
            if rel >= 1 << 55 {
                rel = 0;
            }
            self.pending.push(Raw { rel, seq: self.seq, thread, e });
            self.seq += 1;
        }
        b.tail.store(head, Release);
        self.dropped[thread as usize] = b.dropped.load(Relaxed);
    }

    /// Writes the pending calls older than [`HOLD_NS`] before `now_rel` ticks (all with
    /// `all`), in time order. `stop(w)` is asked before each event: true ends the writing
    /// (the size budget), and the rest is discarded; returns whether it stopped.
    pub fn emit<W: Write>(
        &mut self,
        w: &mut TraceWriter<W>,
        now_rel: u64,
        all: bool,
        mut stop: impl FnMut(&mut TraceWriter<W>) -> Result<bool, TraceError>,
    ) -> Result<bool, TraceError> {
        // The pending calls are a few runs already in time order (each ring is one thread's,
        // timed in order, after the sorted rest of the last pass): the stable sort finds the
        // runs and merges them; the unstable one re-sorted everything, the drain's largest cost
        // on mariadbd (docs/record.md). The key is unique, so the order is the same.
        self.pending.sort_by_key(|r| (r.rel, r.seq));
        let hold = (HOLD_NS as f64 / self.ns_per_tick) as u64;
        let cut = if all { u64::MAX } else { now_rel.saturating_sub(hold) };
        let n = self.pending.partition_point(|r| r.rel <= cut);
        // Written in place, then removed at once (a Vec per pass cost page faults).
        for i in 0..n {
            if stop(w)? {
                self.pending.clear();
                return Ok(true);
            }
            if i % REFILL_EVENTS == REFILL_EVENTS - 1 && self.pending.len() - n < REFILL_BACKLOG {
                // A long write keeps reading the rings, whose threads wait when one is full
                // (`tracebuf`); what it reads is appended after `n`, for the next pass.
                self.collect(w)?;
            }
            let r = self.pending[i];
            self.write_one(w, &r)?;
        }
        self.pending.drain(..n);
        self.expire(w, all)?;
        Ok(false)
    }

    /// Takes as freed the orphans whose wait is over (every one with `all`).
    fn expire<W: Write>(&mut self, w: &mut TraceWriter<W>, all: bool) -> Result<(), TraceError> {
        let now = self.last_ns;
        for o in self.orphans.due(now, all) {
            self.write_taken(w, o, now)?;
        }
        Ok(())
    }

    /// Writes an orphan's free: at `t_ns`, on the thread that reused its address.
    fn write_taken<W: Write>(
        &mut self,
        w: &mut TraceWriter<W>,
        o: Orphan,
        t_ns: u64,
    ) -> Result<(), TraceError> {
        self.reordered += 1;
        let f = Event {
            t_ns,
            thread: o.thread,
            op: TraceOp::Free,
            size: 0,
            align: 0,
            id: 0,
            old_id: o.id,
            old_size: 0,
        };
        w.write(&f)
    }

    fn write_one<W: Write>(&mut self, w: &mut TraceWriter<W>, r: &Raw) -> Result<(), TraceError> {
        if (r.e.w0 & 7) as u8 == tracebuf::OLD_SIZE {
            self.old_size[r.thread as usize] = (r.e.old, r.e.size);
            return Ok(());
        }
        let mut t_ns = (r.rel as f64 * self.ns_per_tick) as u64;
        let late = t_ns < self.last_ns;
        if late {
            self.reordered += 1;
            t_ns = self.last_ns;
        }
        self.last_ns = t_ns;
        let Some(op) = TraceOp::from_u8((r.e.w0 & 7) as u8) else {
            return Ok(());
        };
        let align = if op == TraceOp::Memalign { 1u32 << ((r.e.w0 >> 3) & 31) } else { 0 };
        let mut ev =
            Event { t_ns, thread: r.thread, op, size: r.e.size, align, id: 0, old_id: 0, old_size: 0 };
        let mut orphan = None;
        if op.takes_block() && r.e.old != 0 {
            // A late call that gives up a reused address gives up the orphan, not the new block.
            let found = match if late { self.orphans.late(r.e.old) } else { Late::None } {
                Late::Live(o) => {
                    orphan = Some(o);
                    Some(o.id)
                }
                // Its free is written already: a late free adds nothing, a late realloc's
                // block is taken as a pre-window one.
                Late::Taken if op == TraceOp::Free => return Ok(()),
                Late::Taken => None,
                Late::None => self.blocks.remove(&r.e.old),
            };
            match found {
                Some(id) => ev.old_id = id,
                None => {
                    self.pre += 1;
                    ev.old_id = PRE_WINDOW | self.pre;
                    // A free's entry carries the block's usable size; a realloc's came in the
                    // thread's entry just before it (0 if that one was dropped).
                    ev.old_size = match self.old_size[r.thread as usize] {
                        _ if op == TraceOp::Free => r.e.size,
                        (a, u) if a == r.e.old => u,
                        _ => 0,
                    };
                }
            }
        }
        if op == TraceOp::Free {
            ev.size = 0;
        }
        if op.allocates() && r.e.addr != 0 {
            self.ids += 1;
            ev.id = self.ids;
            // One probe of the map for the lookup and the insert (two cost a cache miss each).
            if let Some(stale) = self.blocks.insert(r.e.addr, ev.id) {
                // Allocated again before its free was read: an orphan, waiting for a late free.
                if let Some(before) = self.orphans.adopt(r.e.addr, stale, t_ns, r.thread) {
                    // A third use of the address: the first orphan's free is not coming.
                    self.write_taken(w, before, t_ns)?;
                }
            }
        } else if op == TraceOp::Realloc && r.e.size != 0 && ev.old_id != 0 && ev.old_id & PRE_WINDOW == 0 {
            // A failed realloc leaves its block live, under the same id (a pre-window block's
            // next use is taken as another pre-window block); an orphan stays one.
            match orphan {
                Some(o) => self.orphans.restore(r.e.old, o),
                None => {
                    self.blocks.insert(r.e.old, ev.old_id);
                }
            }
        }
        w.write(&ev)
    }

    /// Calls dropped per thread (threads with none left out).
    pub fn dropped_per_thread(&self) -> Vec<(u32, u64)> {
        self.dropped
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(t, &n)| (t as u32, n))
            .take(256)
            .collect()
    }
}

#[cfg(test)]
#[path = "drain_tests.rs"]
mod tests;
