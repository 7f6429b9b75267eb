//! The recorded interleaving between replay threads (`--order recorded`, the default): the
//! window is cut into epochs of recorded time ([`EPOCH_NS`], 1 ms; longer when the window has
//! more than [`MAX_EPOCHS`]), and no thread starts a step of epoch `e` before every step of
//! every epoch before `e`, on every thread, is done. Phases that did not overlap in the recorded
//! process (threads joined before others start freeing) do not overlap in the replay, to within
//! one epoch; inside an epoch threads run as before (their own order, every free after its
//! allocation). Without it (`--order threads`) each thread keeps only its own order.
//!
//! How: the steps per epoch are counted once before the start (`count`); a thread leaving an
//! epoch adds the steps it ran there to `done[e]` (one atomic add per thread per epoch), and
//! whoever completes the lowest unfinished epoch moves the frontier past it and past the empty
//! epochs after it. It never deadlocks: the thread holding the globally lowest unfinished step
//! is at the frontier. A wait over the engine's limit gives up (counted), never a hang.
//!
//! Owns the epoch gate only; must not allocate (its tables are [`MmapVec`]s made before the
//! baseline), nor know about blocks or pages.

use crate::backoff::Backoff;
use crate::image::PlanView;
use crate::mem::MmapVec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One epoch of recorded time.
pub const EPOCH_NS: u64 = 1_000_000;
/// The most epochs kept (16 bytes each); a longer window gets longer epochs.
pub const MAX_EPOCHS: u64 = 1 << 20;

pub struct Epochs {
    /// Steps per epoch, over every thread.
    count: MmapVec<u64>,
    /// Steps done per epoch.
    done: MmapVec<u64>,
    /// The lowest epoch not finished.
    front: AtomicU64,
    epoch_ns: u64,
}

impl Epochs {
    /// The gate for the plan's threads `busy`; `None` when off (each thread's own order only).
    pub fn new(view: &PlanView, busy: &[usize], on: bool) -> Result<Option<Epochs>, String> {
        if !on {
            return Ok(None);
        }
        let window = view.summary().window_ns;
        let epoch_ns = EPOCH_NS.max(window / MAX_EPOCHS + 1);
        let n = (window / epoch_ns + 1) as usize;
        let mut count = MmapVec::<u64>::zeroed(n)?;
        for &i in busy {
            for s in view.thread(i) {
                count[((s.t_ns / epoch_ns) as usize).min(n - 1)] += 1;
            }
        }
        let e = Epochs { count, done: MmapVec::zeroed(n)?, front: AtomicU64::new(0), epoch_ns };
        e.advance();
        Ok(Some(e))
    }

    /// The effective epoch length, in µs.
    pub fn epoch_us(&self) -> u64 {
        self.epoch_ns / 1000
    }

    /// The epoch of a step recorded at `t_ns`.
    pub fn of(&self, t_ns: u64) -> u64 {
        (t_ns / self.epoch_ns).min(self.count.len() as u64 - 1)
    }

    /// Waits until every step of the epochs before `e` is done. False when the wait ran past
    /// `limit_ns` (the caller counts it and goes on) or `stop` was set (the run is ending).
    pub fn enter(&self, e: u64, limit_ns: u64, stop: &AtomicBool) -> bool {
        let mut b = Backoff::new(1024, std::time::Duration::from_micros(20), limit_ns);
        while self.front.load(Ordering::Acquire) < e {
            if stop.load(Ordering::Relaxed) || !b.wait() {
                return false;
            }
        }
        true
    }

    /// This thread ran `steps` steps of epoch `e` and leaves it.
    pub fn leave(&self, e: u64, steps: u64) {
        if steps > 0 {
            self.done.atomic(e as usize).fetch_add(steps, Ordering::AcqRel);
            self.advance();
        }
    }

    /// Moves the frontier past every finished (or empty) epoch at it.
    fn advance(&self) {
        loop {
            let f = self.front.load(Ordering::Acquire);
            let Some(&want) = self.count.get(f as usize) else { return };
            if self.done.atomic(f as usize).load(Ordering::Acquire) != want {
                return;
            }
            let _ = self.front.compare_exchange(f, f + 1, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}
