//! The replay plan: a trace (read through `mallocshim_format::trace`, the one schema shared with
//! the recorder) resolved into per-thread steps over block instances, built once by the command
//! (`mallocshim replay`, not preloaded) and handed to each engine process as a memory image
//! ([`Plan::write`] / [`PlanView::map`](crate::PlanView::map): plain `repr(C)` arrays, mapped read-only, so the engine
//! decodes nothing and calls malloc for nothing before the replay starts). Not a trace format:
//! the file lives for one `mallocshim replay` run, next to the dumps, and is removed after.
//!
//! Block instances: the window's blocks are instances `0..window_blocks` (trace id − 1: ids are
//! dense from 1 and never reused); pre-window blocks follow. The trace header gives the
//! pre-window heap as count and bytes per size class; each of those blocks gets its class's mean
//! size. A free of pre-window block (its usable size given) takes one of those of its size class
//! (or the class below: usable size rounds the request up); when none is left, an extra
//! pre-window block of the usable size is allocated at start (`pre_extra_blocks`).
//!
//! Owns the resolution of the trace's order into steps; must not decode bytes itself.

use crate::answer::{ClassLive, LiveSecond};
use mallocshim_format::classes::{class_of, class_range, CLASSES};
use mallocshim_format::trace::{TraceError, TraceOp, TraceReader, PRE_WINDOW};
use std::path::Path;

/// No block.
pub const NONE: u32 = u32::MAX;
/// The most seconds of window the per-second curve keeps (longer windows fold into the last).
pub const MAX_SECONDS: u64 = 24 * 3600;

/// Step ops (what the engine calls).
pub const MALLOC: u8 = 0;
pub const CALLOC: u8 = 1;
pub const REALLOC: u8 = 2;
pub const FREE: u8 = 3;
pub const MEMALIGN: u8 = 4;

/// One call of one thread, over block instances.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// ns since the window opened.
    pub t_ns: u64,
    /// Bytes requested (0 for free).
    pub size: u64,
    /// The block the call creates, or [`NONE`].
    pub new_blk: u32,
    /// The block the call takes (free, realloc), or [`NONE`].
    pub old_blk: u32,
    pub align: u32,
    pub op: u8,
    pub _pad: [u8; 3],
}

/// The plan's figures, first in the image.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    pub magic: u64,
    pub threads: u64,
    pub steps: u64,
    pub blocks: u64,
    /// Pre-window instances (the last `pre_blocks` of `blocks`), and how many were extra.
    pub pre_blocks: u64,
    pub pre_extra_blocks: u64,
    pub pre_bytes: u64,
    pub events: u64,
    pub window_ns: u64,
    pub seconds: u64,
    pub peak_live_bytes: u64,
    pub inconsistent: u64,
    pub dropped: u64,
    /// The recorded main thread's index, or [`NO_THREAD`].
    pub main_thread: u64,
}

const MAGIC: u64 = u64::from_le_bytes(*b"MSHPLAN1");

/// The plan as the command builds it.
pub struct Plan {
    pub summary: Summary,
    /// Per thread, its steps in recorded order.
    pub threads: Vec<Vec<Step>>,
    /// Requested bytes per block instance.
    pub block_size: Vec<u64>,
    /// The recorded process's backend and why the window ended (trace header and footer).
    pub backend: String,
    pub end_reason: String,
    /// The trace has no footer: it ends at its last whole block (`end_reason` says where).
    pub cut_short: bool,
    /// The footer's calls whose order the recorder could not restore (taken as freed where the
    /// address came back).
    pub reordered: u64,
    /// The live heap per second as the trace has it (same rule as the engine's count).
    pub curve: Vec<LiveSecond>,
}

/// Pre-window blocks of one class: the first index and the count left to hand out.
struct PreClass {
    next: u64,
    end: u64,
}

struct Builder {
    threads: Vec<Vec<Step>>,
    window_size: Vec<u64>,
    alive: Vec<bool>,
    pre_size: Vec<u64>,
    pre_class: Vec<PreClass>,
    pre_extra: u64,
    live: u64,
    peak: u64,
    inconsistent: u64,
    deltas: Vec<[(i64, i64); CLASSES]>,
}

impl Builder {
    fn delta(&mut self, t_ns: u64, size: u64, sign: i64) {
        let s = (t_ns / 1_000_000_000).min(MAX_SECONDS) as usize;
        if self.deltas.len() <= s {
            self.deltas.resize(s + 1, [(0, 0); CLASSES]);
        }
        let c = &mut self.deltas[s][class_of(size as usize)];
        c.0 += sign;
        c.1 += sign * size as i64;
        if sign > 0 {
            self.live += size;
            self.peak = self.peak.max(self.live);
        } else {
            self.live = self.live.saturating_sub(size);
        }
    }

    /// The instance a free or realloc takes (pre-window instances tagged, fixed in `finish`).
    fn take(&mut self, old_id: u64, old_size: u64) -> Option<u32> {
        if old_id & PRE_WINDOW != 0 {
            let c = class_of(old_size as usize);
            for k in [c, c.saturating_sub(1)] {
                let p = &mut self.pre_class[k];
                if p.next < p.end {
                    p.next += 1;
                    return Some(PRE_TAG | (p.next - 1) as u32);
                }
            }
            self.pre_size.push(old_size);
            self.pre_extra += 1;
            return Some(PRE_TAG | (self.pre_size.len() - 1) as u32);
        }
        let i = (old_id - 1) as usize;
        match self.alive.get_mut(i) {
            Some(a) if *a => {
                *a = false;
                Some(i as u32)
            }
            _ => None,
        }
    }

    fn size_of(&self, blk: u32) -> u64 {
        if blk & PRE_TAG != 0 {
            self.pre_size[(blk & !PRE_TAG) as usize]
        } else {
            self.window_size[blk as usize]
        }
    }
}

const PRE_TAG: u32 = 1 << 31;

// Long because: one pass over the trace that maps every event to its thread's steps, with the pre-window blocks and the happens-before edges kept in the pass's locals.
/// Reads the whole trace (a truncated or corrupt file is one error, the reader's) and resolves it.
pub fn build(path: &Path) -> Result<Plan, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rd =
        TraceReader::new(std::io::BufReader::new(f)).map_err(|e| format!("{}: {e}", path.display()))?;
    let header = rd.header().clone();
    let mut b = Builder {
        threads: Vec::new(),
        window_size: Vec::new(),
        alive: Vec::new(),
        pre_size: Vec::new(),
        pre_class: Vec::new(),
        pre_extra: 0,
        live: 0,
        peak: 0,
        inconsistent: 0,
        deltas: vec![[(0, 0); CLASSES]],
    };
    for c in 0..CLASSES {
        let start = b.pre_size.len() as u64;
        if let Some(p) = header.preexisting.iter().find(|p| p.class as usize == c && p.count > 0) {
            for j in 0..p.count.min(1 << 28) {
                let size = p.bytes / p.count + u64::from(j < p.bytes % p.count);
                b.pre_size.push(size);
                b.delta(0, size, 1);
            }
        }
        b.pre_class.push(PreClass { next: start, end: b.pre_size.len() as u64 });
    }
    let mut events = 0u64;
    let mut last_t = 0u64;
    let mut cut = false;
    for e in rd.by_ref() {
        let e = match e {
            Ok(e) => e,
            // A trace cut short (its writer killed, its disk full: a `.part` file) replays up to
            // its last whole block; one cut before any is an error.
            Err(TraceError::Truncated) if events > 0 => {
                cut = true;
                break;
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        events += 1;
        last_t = e.t_ns;
        let mut step = Step {
            t_ns: e.t_ns,
            size: e.size,
            new_blk: NONE,
            old_blk: NONE,
            align: e.align,
            op: 0,
            _pad: [0; 3],
        };
        step.op = match e.op {
            TraceOp::Malloc => MALLOC,
            TraceOp::Calloc => CALLOC,
            TraceOp::Realloc => REALLOC,
            TraceOp::Free => FREE,
            TraceOp::Memalign => MEMALIGN,
        };
        if e.op.takes_block() && e.old_id != 0 {
            // A realloc that returned NULL for a non-zero size failed: its block stays live.
            if e.op == TraceOp::Realloc && e.id == 0 && e.size != 0 {
                continue;
            }
            match b.take(e.old_id, e.old_size) {
                Some(blk) => {
                    let size = b.size_of(blk);
                    b.delta(e.t_ns, size, -1);
                    step.old_blk = blk;
                }
                None => {
                    b.inconsistent += 1;
                    if !e.op.allocates() || e.id == 0 {
                        continue;
                    }
                }
            }
        }
        if e.op.allocates() && e.id != 0 {
            if e.id != b.window_size.len() as u64 + 1 {
                return Err(format!("{}: trace corrupt: block id {} out of sequence", path.display(), e.id));
            }
            b.window_size.push(e.size);
            b.alive.push(true);
            step.new_blk = (e.id - 1) as u32;
            b.delta(e.t_ns, e.size, 1);
        }
        if step.new_blk == NONE && step.old_blk == NONE {
            continue; // free(NULL), a failed allocation: nothing to replay
        }
        let t = e.thread as usize;
        if b.threads.len() <= t {
            b.threads.resize_with(t + 1, Vec::new);
        }
        b.threads[t].push(step);
    }
    let footer = rd.footer().cloned().unwrap_or_default();
    // The recorded process's main thread (its tid is the pid): the engine replays it on its own
    // main thread, which holds the main arena (glibc), arena 0 (jemalloc), the main heap.
    let main = rd.threads().iter().find(|t| t.tid != 0 && t.tid == header.pid).map(|t| t.index as u64);
    let mut plan = finish(
        b,
        events,
        last_t.max(footer.window_ns),
        footer.dropped,
        header.backend,
        if cut {
            format!(
                "cut short after {events} calls, {:.1} s into the window (no footer)",
                last_t as f64 / 1e9
            )
        } else {
            footer.ended.name().into()
        },
    )?;
    plan.cut_short = cut;
    plan.summary.main_thread = main.filter(|&m| m < plan.summary.threads).unwrap_or(NO_THREAD);
    plan.reordered = footer.reordered;
    Ok(plan)
}

/// [`Summary::main_thread`] when the trace does not say which thread was the main one.
pub const NO_THREAD: u64 = u64::MAX;

fn finish(
    mut b: Builder,
    events: u64,
    window_ns: u64,
    dropped: u64,
    backend: String,
    end: String,
) -> Result<Plan, String> {
    let window_blocks = b.window_size.len() as u64;
    if window_blocks + b.pre_size.len() as u64 >= NONE as u64 || b.pre_size.len() as u64 >= PRE_TAG as u64 {
        return Err("trace has more blocks than the replay can address (2^31)".into());
    }
    for st in b.threads.iter_mut().flatten() {
        for blk in [&mut st.new_blk, &mut st.old_blk] {
            if *blk != NONE && *blk & PRE_TAG != 0 {
                *blk = window_blocks as u32 + (*blk & !PRE_TAG);
            }
        }
    }
    let curve = curve(&b.deltas, window_ns);
    let pre_bytes = b.pre_size.iter().sum();
    let pre_blocks = b.pre_size.len() as u64;
    let steps = b.threads.iter().map(|t| t.len() as u64).sum();
    let mut block_size = std::mem::take(&mut b.window_size);
    block_size.extend_from_slice(&b.pre_size);
    Ok(Plan {
        summary: Summary {
            magic: MAGIC,
            threads: b.threads.len() as u64,
            steps,
            blocks: block_size.len() as u64,
            pre_blocks,
            pre_extra_blocks: b.pre_extra,
            pre_bytes,
            events,
            window_ns,
            seconds: seconds(window_ns),
            peak_live_bytes: b.peak,
            inconsistent: b.inconsistent,
            dropped,
            main_thread: NO_THREAD,
        },
        threads: b.threads,
        block_size,
        backend,
        end_reason: end,
        cut_short: false,
        reordered: 0,
        curve,
    })
}

/// Seconds the per-second curve has for a window of `window_ns`.
pub fn seconds(window_ns: u64) -> u64 {
    (window_ns / 1_000_000_000).min(MAX_SECONDS) + 1
}

/// The cumulative live heap per second from per-second deltas (classes with blocks only).
pub fn curve(deltas: &[[(i64, i64); CLASSES]], window_ns: u64) -> Vec<LiveSecond> {
    let mut acc = [(0i64, 0i64); CLASSES];
    (0..seconds(window_ns) as usize)
        .map(|s| {
            if let Some(d) = deltas.get(s) {
                for c in 0..CLASSES {
                    acc[c].0 += d[c].0;
                    acc[c].1 += d[c].1;
                }
            }
            let classes = (0..CLASSES)
                .filter(|&c| acc[c].0 != 0 || acc[c].1 != 0)
                .map(|c| {
                    let (min_bytes, max_bytes) = class_range(c);
                    ClassLive {
                        min_bytes,
                        max_bytes,
                        blocks: acc[c].0.max(0) as u64,
                        bytes: acc[c].1.max(0) as u64,
                    }
                })
                .collect();
            LiveSecond { second: s as u64, classes }
        })
        .collect()
}
