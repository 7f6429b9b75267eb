//! The cheapest monotonic clock for sampled latencies: `rdtsc` on x86-64 (invariant TSC), the
//! vDSO `clock_gettime(CLOCK_MONOTONIC)` elsewhere. Ticks are converted to nanoseconds only when
//! reporting, with a ratio calibrated once against CLOCK_MONOTONIC over the process's lifetime
//! (at least 10 ms), so start-up pays nothing.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Reads the clock, in ticks.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc is available on every x86-64 CPU and has no side effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        mono_ns()
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in milliseconds (the cold path's periods and deadlines).
pub fn mono_ms() -> u64 {
    mono_ns() / 1_000_000
}

static T0: AtomicU64 = AtomicU64::new(0);
static N0: AtomicU64 = AtomicU64::new(0);
/// Calibrated nanoseconds per tick, as f64 bits (0 until calibrated).
static NS_PER_TICK: AtomicU64 = AtomicU64::new(0);

/// Records the calibration's starting point (initialisation).
pub fn start() {
    N0.store(mono_ns(), Relaxed);
    T0.store(ticks(), Relaxed);
}

/// CLOCK_MONOTONIC at [`start`] in milliseconds: the process start as the dumps' `uptime_s`
/// counts it.
pub fn start_ms() -> u64 {
    N0.load(Relaxed) / 1_000_000
}

/// Nanoseconds per tick, calibrated on first use (waits until 10 ms have passed since
/// [`start`]). Reporter threads only.
pub fn ns_per_tick() -> f64 {
    if cfg!(not(target_arch = "x86_64")) {
        return 1.0;
    }
    let v = NS_PER_TICK.load(Relaxed);
    if v != 0 {
        return f64::from_bits(v);
    }
    let (n0, t0) = (N0.load(Relaxed), T0.load(Relaxed));
    let mut n1 = mono_ns();
    while n1 < n0 + 10_000_000 {
        std::thread::sleep(std::time::Duration::from_millis(1));
        n1 = mono_ns();
    }
    let t1 = ticks();
    let r = if t1 > t0 { (n1 - n0) as f64 / (t1 - t0) as f64 } else { 1.0 };
    NS_PER_TICK.store(r.to_bits(), Relaxed);
    r
}
