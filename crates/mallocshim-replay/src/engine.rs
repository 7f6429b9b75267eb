//! The engine: one replay of a plan in this process, under the shim (`LD_PRELOAD`, the backend
//! chosen by `MALLOCSHIM_BACKEND`). One thread per recorded thread, started when its first step
//! is due and joined as the recorded one was (`launch.rs`), each step in recorded order;
//! a step that takes a block waits until the block's creator has published it (the block
//! table's entry, 0 until then: happens-before from the trace's order, which has every free
//! after its allocation, so the wait always ends); every page of each block is written once
//! after it is allocated. The pre-window heap is allocated by the main thread before the start.
//!
//! Order of one run: map the plan, map the block table and counters (resident before the
//! baseline), a dump (`mallocshim_dump`) and a trim, spawn the sampler and the launcher (parked
//! at a gate), baseline RSS, reset the peak, the pre-window heap, start (the launcher starts the
//! replay threads, the recorded main thread's steps run on this one); after the last step: end RSS, peak,
//! a second dump (the command subtracts the first: latency of the replayed calls only), a trim,
//! trimmed RSS.
//!
//! Must not allocate in the replay threads but through the replayed calls, nor panic there.
//! Long because: the engine's one loop per replay thread with its pacing, ordering and sampling, which share its locals; the order mode is apart in order.rs.

use crate::answer::{EngineOut, Errors};
use crate::backoff::Backoff;
use crate::image::PlanView;
use crate::launch::{self, Pacing, Span};
use crate::mem::{mapped_bytes, MmapVec};
use crate::order::Epochs;
use crate::plan::{self, Step, CALLOC, FREE, MALLOC, MEMALIGN, NONE, REALLOC};
use crate::selfproc::{self, Shim};
use mallocshim_format::classes::{class_of, CLASSES};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};

/// The block table's mark of an allocation the backend refused.
const FAILED: u64 = u64::MAX;
/// A wait for a block longer than this is an error (the step is skipped), never a hang.
const WAIT_LIMIT_NS: u64 = 120_000_000_000;
const PAGE: usize = 4096;
/// A replay thread's (and the launcher's) stack.
const STACK: usize = 256 << 10;

struct Ctx<'a> {
    blocks: &'a MmapVec<u64>,
    sizes: &'a [u64],
    curve: &'a MmapVec<u64>,
    start_ns: AtomicU64,
    /// The start gate: [`WAIT`] until the main thread says [`GO`] (or [`ABORT`]).
    gate: AtomicU8,
    recorded: bool,
    /// The recorded interleaving between threads (`--order recorded`), or None.
    epochs: Option<Epochs>,
    /// Requested bytes live now over every thread, and the most at once (the replay's own
    /// count as it runs, against the plan's `peak_live_bytes`).
    live: AtomicI64,
    peak_live: AtomicU64,
    /// Set when every replay thread has returned (the sampler stops).
    finished: AtomicBool,
    /// Set when a replay thread could not be started: every thread stops at its next step or
    /// wait, and the run is an error.
    stop: AtomicBool,
}

const WAIT: u8 = 0;
const GO: u8 = 1;
const ABORT: u8 = 2;

#[derive(Default)]
struct ThreadOut {
    calls: u64,
    alloc_failed: u64,
    wait_timeout: u64,
    live_blocks: i64,
    live_bytes: i64,
}

/// Writes one byte in every page of `[p, p + size)`.
fn touch(p: *mut u8, size: usize) {
    if p.is_null() || size == 0 {
        return;
    }
    let mut off = 0;
    while off < size {
        // SAFETY: `p` is a block of at least `size` bytes just returned by the allocator.
        unsafe { p.add(off).write_volatile(1) };
        off += PAGE;
    }
    // SAFETY: as above; the last byte (its page when the block ends past the last stride).
    unsafe { p.add(size - 1).write_volatile(1) };
}

impl<'a> Ctx<'a> {
    fn new(
        blocks: &'a MmapVec<u64>,
        sizes: &'a [u64],
        curve: &'a MmapVec<u64>,
        recorded: bool,
        epochs: Option<Epochs>,
    ) -> Self {
        Ctx {
            blocks,
            sizes,
            curve,
            start_ns: AtomicU64::new(0),
            gate: AtomicU8::new(WAIT),
            recorded,
            epochs,
            live: AtomicI64::new(0),
            peak_live: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }
    }

    fn add(&self, local: &mut [(i64, i64); CLASSES], sec: u64) {
        for (c, d) in local.iter_mut().enumerate() {
            if *d != (0, 0) {
                let i = (sec as usize * CLASSES + c) * 2;
                self.curve.atomic(i).fetch_add(d.0 as u64, Ordering::Relaxed);
                self.curve.atomic(i + 1).fetch_add(d.1 as u64, Ordering::Relaxed);
                *d = (0, 0);
            }
        }
    }

    /// The block's pointer once its creator published it; None when its allocation failed or
    /// the wait ran past [`WAIT_LIMIT_NS`].
    fn wait(&self, blk: u32, out: &mut ThreadOut) -> Option<*mut u8> {
        let a = self.blocks.atomic(blk as usize);
        let mut b = Backoff::new(4096, std::time::Duration::from_micros(50), WAIT_LIMIT_NS);
        loop {
            match a.load(Ordering::Acquire) {
                0 => {}
                FAILED => return None,
                p => return Some(p as *mut u8),
            }
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            if !b.wait() {
                out.wait_timeout += 1;
                return None;
            }
        }
    }

    fn publish(&self, blk: u32, p: *mut u8, out: &mut ThreadOut) {
        if p.is_null() {
            out.alloc_failed += 1;
            self.blocks.atomic(blk as usize).store(FAILED, Ordering::Release);
        } else {
            self.blocks.atomic(blk as usize).store(p as u64, Ordering::Release);
        }
    }

    /// One step: the recorded call, the page writes, the block table and the live counts.
    fn step(&self, s: &Step, local: &mut [(i64, i64); CLASSES], out: &mut ThreadOut) {
        let old = if s.old_blk != NONE { self.wait(s.old_blk, out) } else { None };
        if s.old_blk != NONE && old.is_none() && s.new_blk == NONE {
            return; // nothing to free: its allocation failed (counted there)
        }
        let size = s.size as usize;
        out.calls += 1;
        // SAFETY: the replayed calls, on pointers this process got from the same allocator and
        // has not freed (each block instance is taken by one step only).
        let p = unsafe {
            match s.op {
                MALLOC => libc::malloc(size),
                CALLOC => libc::calloc(1, size),
                MEMALIGN => libc::memalign((s.align as usize).max(16).next_power_of_two(), size),
                REALLOC => libc::realloc(old.unwrap_or(std::ptr::null_mut()).cast(), size),
                FREE => {
                    libc::free(old.unwrap_or(std::ptr::null_mut()).cast());
                    std::ptr::null_mut()
                }
                _ => std::ptr::null_mut(),
            }
        }
        .cast::<u8>();
        let mut delta = 0i64;
        if let Some(_o) = old {
            let sz = self.sizes[s.old_blk as usize];
            delta -= sz as i64;
            local[class_of(sz as usize)].0 -= 1;
            local[class_of(sz as usize)].1 -= sz as i64;
            out.live_blocks -= 1;
            out.live_bytes -= sz as i64;
        }
        if s.new_blk != NONE {
            touch(p, size);
            self.publish(s.new_blk, p, out);
            if !p.is_null() {
                delta += size as i64;
                local[class_of(size)].0 += 1;
                local[class_of(size)].1 += size as i64;
                out.live_blocks += 1;
                out.live_bytes += size as i64;
            } else if let (REALLOC, Some(o)) = (s.op, old) {
                // A refused realloc keeps the old block: free it, not to leak it ourselves.
                // SAFETY: `o` is still ours (realloc failed).
                unsafe { libc::free(o.cast()) };
            }
        }
        if delta != 0 {
            let now = self.live.fetch_add(delta, Ordering::Relaxed) + delta;
            self.peak_live.fetch_max(now.max(0) as u64, Ordering::Relaxed);
        }
    }

    /// Waits at the start gate: true at [`GO`], false at [`ABORT`].
    fn started(&self) -> bool {
        loop {
            match self.gate.load(Ordering::Acquire) {
                WAIT => std::thread::sleep(std::time::Duration::from_micros(200)),
                GO => return true,
                _ => return false,
            }
        }
    }

    fn run_thread(&self, steps: &[Step]) -> ThreadOut {
        let mut out = ThreadOut::default();
        if !self.started() {
            return out;
        }
        let mut local = [(0i64, 0i64); CLASSES];
        let start = self.start_ns.load(Ordering::Acquire);
        let mut sec = 0;
        let mut epoch = (u64::MAX, 0u64); // the epoch this thread is in, and its steps there
        for s in steps {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            if let Some(g) = &self.epochs {
                let e = g.of(s.t_ns);
                if e != epoch.0 {
                    if epoch.0 != u64::MAX {
                        g.leave(epoch.0, epoch.1);
                    }
                    if !g.enter(e, WAIT_LIMIT_NS, &self.stop) {
                        out.wait_timeout += 1;
                    }
                    epoch = (e, 0);
                }
                epoch.1 += 1;
            }
            if self.recorded {
                let target = start + s.t_ns;
                if target > selfproc::now_ns() + 20_000 {
                    selfproc::sleep_until(target);
                }
            }
            let ss = (s.t_ns / 1_000_000_000).min(plan::MAX_SECONDS);
            if ss != sec {
                self.add(&mut local, sec);
                sec = ss;
            }
            self.step(s, &mut local, &mut out);
        }
        self.add(&mut local, sec);
        if let (Some(g), true) = (&self.epochs, epoch.0 != u64::MAX) {
            g.leave(epoch.0, epoch.1);
        }
        out
    }

    /// Every [`SAMPLE_NS`] from the start until the replay threads are done: seconds since the
    /// start, live bytes (the replay's own count) and RSS, into `into` (3 values a sample).
    fn sample(&self, into: &MmapVec<u64>) -> usize {
        while self.gate.load(Ordering::Acquire) == WAIT {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        let start = self.start_ns.load(Ordering::Acquire);
        let mut n = 0;
        while self.gate.load(Ordering::Acquire) == GO && (n + 1) * 3 <= into.len() {
            let t = selfproc::now_ns();
            into.atomic(n * 3).store(t.saturating_sub(start), Ordering::Relaxed);
            into.atomic(n * 3 + 1).store(self.live.load(Ordering::Relaxed).max(0) as u64, Ordering::Relaxed);
            into.atomic(n * 3 + 2).store(selfproc::rss_bytes(), Ordering::Relaxed);
            n += 1;
            if self.finished.load(Ordering::Acquire) {
                break;
            }
            selfproc::sleep_until(start + n as u64 * SAMPLE_NS);
        }
        n
    }
}

/// The engine's live-bytes and RSS sampling period, and the most samples kept (about 2 hours).
const SAMPLE_NS: u64 = 50_000_000;
const MAX_SAMPLES: usize = 36_000;

/// Writes `text` to fd 1 without std's buffered stdout (no allocation before the replay).
fn say(text: &str) {
    // SAFETY: a valid buffer of `text.len()` bytes.
    unsafe { libc::write(1, text.as_ptr().cast(), text.len()) };
}

/// Replays the plan image at `plan_path`; `recorded` sleeps to the recorded timestamps;
/// `ordered` keeps the recorded interleaving between threads to within an epoch (`order.rs`).
pub fn run(plan_path: &Path, recorded: bool, ordered: bool) -> Result<EngineOut, String> {
    let shim = Shim::find().ok_or("the replay engine runs without libmallocshim.so (LD_PRELOAD)")?;
    let view = PlanView::map(plan_path)?;
    let sm = *view.summary();
    let blocks = MmapVec::<u64>::zeroed(sm.blocks as usize)?;
    let curve = MmapVec::<u64>::zeroed(sm.seconds as usize * CLASSES * 2)?;
    let samples = MmapVec::<u64>::zeroed(MAX_SAMPLES * 3)?;
    let busy: Vec<usize> = (0..sm.threads as usize).filter(|&i| !view.thread(i).is_empty()).collect();
    let epochs = Epochs::new(&view, &busy, ordered)?;
    // The recorded main thread runs on this one (the main arena, arena 0, the main heap); the
    // others each on a thread of their own.
    let on_main = busy.iter().copied().find(|&i| i as u64 == sm.main_thread);
    let ctx = Ctx::new(&blocks, view.block_sizes(), &curve, recorded, epochs);
    shim.dump();
    shim.trim();
    let mut o = EngineOut {
        backend: shim.backend(),
        pace: if recorded { "recorded" } else { "fast" }.into(),
        order: if ordered { "recorded" } else { "threads" }.into(),
        ..Default::default()
    };
    let mut taken = 0;
    let spans = launch::spans(&view, busy.iter().copied().filter(|&i| Some(i) != on_main));
    let pacing = Pacing { recorded, ordered };
    let run_span = |span: Span| ctx.run_thread(view.thread(span.thread));
    let outs: Vec<ThreadOut> = std::thread::scope(|sc| {
        let sampler = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn_scoped(sc, || ctx.sample(&samples))
            .map_err(|e| format!("cannot start the sampler thread: {e}"))?;
        let (ctx, spans, run_span) = (&ctx, &spans, &run_span);
        let launcher = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn_scoped(sc, move || {
                if !ctx.started() {
                    return Ok(Vec::new());
                }
                let start = ctx.start_ns.load(Ordering::Acquire);
                launch::launch(sc, spans, pacing, start, STACK, &ctx.stop, run_span)
            })
            .map_err(|e| format!("cannot start the launcher thread: {e}"));
        if launcher.is_err() {
            ctx.gate.store(ABORT, Ordering::Release);
        }
        o.baseline_rss_bytes = selfproc::rss_bytes();
        o.replayer_bytes = mapped_bytes() + view.mapped_len() as u64;
        selfproc::reset_peak();
        let pre = pre_window(ctx, &view);
        say("start\n");
        let cpu0 = selfproc::cpu_s();
        let t0 = selfproc::now_ns();
        ctx.start_ns.store(t0, Ordering::Release);
        if ctx.gate.load(Ordering::Relaxed) == WAIT {
            ctx.gate.store(GO, Ordering::Release);
        }
        let mut outs = vec![pre];
        if let Some(i) = on_main {
            outs.push(ctx.run_thread(view.thread(i)));
        }
        let launched =
            launcher.and_then(|h| h.join().unwrap_or_else(|_| Err("the launcher panicked".into())));
        o.wall_s = (selfproc::now_ns() - t0) as f64 / 1e9;
        o.cpu_s = selfproc::cpu_s() - cpu0;
        ctx.finished.store(true, Ordering::Release);
        taken = sampler.join().unwrap_or(0);
        launched.map(|l| {
            outs.extend(l);
            outs
        })
    })?;
    o.end_rss_bytes = selfproc::rss_bytes();
    o.peak_rss_bytes = selfproc::peak_rss_bytes().max(o.end_rss_bytes);
    shim.dump();
    shim.trim();
    o.trimmed_rss_bytes = selfproc::rss_bytes();
    fill(&mut o, &sm, &outs, &curve);
    measured(&mut o, &ctx, &samples, taken);
    Ok(o)
}

/// What the replay counted of itself: the epoch, its peak live bytes, the samples taken.
fn measured(o: &mut EngineOut, ctx: &Ctx, samples: &MmapVec<u64>, taken: usize) {
    o.epoch_us = ctx.epochs.as_ref().map_or(0, |e| e.epoch_us());
    o.replay_peak_live_bytes = ctx.peak_live.load(Ordering::Relaxed);
    o.live_samples = (0..taken)
        .map(|i| {
            let v = |k| samples.atomic(i * 3 + k).load(Ordering::Relaxed);
            (v(0) as f64 / 1e9, v(1), v(2))
        })
        .collect();
}

/// Allocates the pre-window blocks (the plan's last `pre_blocks` instances), pages written.
fn pre_window(ctx: &Ctx, view: &PlanView) -> ThreadOut {
    let sm = view.summary();
    let mut out = ThreadOut::default();
    let mut local = [(0i64, 0i64); CLASSES];
    for blk in (sm.blocks - sm.pre_blocks)..sm.blocks {
        let s = Step {
            size: ctx.sizes[blk as usize],
            new_blk: blk as u32,
            old_blk: NONE,
            op: MALLOC,
            ..Step::default()
        };
        ctx.step(&s, &mut local, &mut out);
    }
    ctx.add(&mut local, 0);
    out.calls = 0; // not a replayed call of the window
    out
}

fn fill(o: &mut EngineOut, sm: &plan::Summary, outs: &[ThreadOut], curve: &MmapVec<u64>) {
    o.events = sm.events;
    o.threads = sm.threads;
    o.window_s = sm.window_ns as f64 / 1e9;
    o.pre_window_blocks = sm.pre_blocks;
    o.pre_window_bytes = sm.pre_bytes;
    o.peak_live_bytes = sm.peak_live_bytes;
    o.trace_dropped = sm.dropped;
    o.calls = outs.iter().map(|t| t.calls).sum();
    o.live_end_blocks = outs.iter().map(|t| t.live_blocks).sum::<i64>().max(0) as u64;
    o.live_end_bytes = outs.iter().map(|t| t.live_bytes).sum::<i64>().max(0) as u64;
    o.errors = Errors {
        inconsistent: sm.inconsistent,
        alloc_failed: outs.iter().map(|t| t.alloc_failed).sum(),
        wait_timeout: outs.iter().map(|t| t.wait_timeout).sum(),
    };
    let deltas: Vec<[(i64, i64); CLASSES]> = (0..sm.seconds as usize)
        .map(|s| {
            let mut d = [(0i64, 0i64); CLASSES];
            for (c, x) in d.iter_mut().enumerate() {
                let i = (s * CLASSES + c) * 2;
                *x = (
                    curve.atomic(i).load(Ordering::Relaxed) as i64,
                    curve.atomic(i + 1).load(Ordering::Relaxed) as i64,
                );
            }
            d
        })
        .collect();
    o.live_curve = plan::curve(&deltas, sm.window_ns);
}
