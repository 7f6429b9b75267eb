//! How a replay thread waits for another one (a block's creator to publish it, the threads
//! behind to finish an epoch): spin, then yield, then sleep, giving up after a time limit so a
//! replay never hangs. Owns only the waiting; what is waited for is the caller's.

use crate::selfproc;
use std::time::Duration;

/// One wait: `spin` busy rounds, then yields up to `yields` rounds in all, then sleeps of
/// `sleep`, until `limit_ns` has passed since the first sleep.
pub struct Backoff {
    spins: u64,
    since: u64,
    yields: u64,
    sleep: Duration,
    limit_ns: u64,
}

/// Busy rounds before the first yield.
const SPINS: u64 = 64;

impl Backoff {
    pub fn new(yields: u64, sleep: Duration, limit_ns: u64) -> Self {
        Backoff { spins: 0, since: 0, yields, sleep, limit_ns }
    }

    /// Waits one round; false once the limit has passed (the caller gives up).
    pub fn wait(&mut self) -> bool {
        self.spins += 1;
        if self.spins < SPINS {
            std::hint::spin_loop();
        } else if self.spins < self.yields {
            std::thread::yield_now();
        } else {
            if self.since == 0 {
                self.since = selfproc::now_ns();
            } else if selfproc::now_ns() - self.since > self.limit_ns {
                return false;
            }
            std::thread::sleep(self.sleep);
        }
        true
    }
}
