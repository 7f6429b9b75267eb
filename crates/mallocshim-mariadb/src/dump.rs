//! The shim's dump files in a directory (`mallocshim.<pid>.<seq>.<ext>`, complete once they have
//! their name: the shim renames them into place), asking for one with SIGUSR1, and a summary of a
//! JSON dump. Dumps are read through the typed schema (`mallocshim_format::Dump`), never as
//! untyped JSON.

use crate::error::fail;
use crate::Result;
use mallocshim_format::Dump;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The dumps of `pid` with extension `ext` in `dir`, as (seq, path), by seq.
pub fn dumps(dir: &Path, pid: u32, ext: &str) -> Vec<(u64, PathBuf)> {
    let prefix = format!("mallocshim.{pid}.");
    let suffix = format!(".{ext}");
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let n = p.file_name()?.to_str()?;
            let seq = n.strip_prefix(&prefix)?.strip_suffix(&suffix)?.parse().ok()?;
            Some((seq, p))
        })
        .collect();
    v.sort();
    v
}

/// The JSON dumps of `pid` in `dir`, by seq.
pub fn json_dumps(dir: &Path, pid: u32) -> Vec<PathBuf> {
    dumps(dir, pid, "json").into_iter().map(|(_, p)| p).collect()
}

/// The JSON dump of `pid` with the highest seq in `dir`.
pub fn newest_json_dump(dir: &Path, pid: u32) -> Option<PathBuf> {
    json_dumps(dir, pid).pop()
}

/// Reads a JSON dump through the typed schema (format and version checked first).
pub fn read_dump(path: &Path) -> Result<Dump> {
    Ok(Dump::read(path).map_err(|e| e.to_string())?)
}

/// Sends SIGUSR1 to a server after a delay, on its own thread, and waits for the new JSON dump.
pub struct DumpWaiter(JoinHandle<Result<(PathBuf, Duration)>>);

impl DumpWaiter {
    /// After `delay`: SIGUSR1 to `pid`, then polls `dir` every 10 ms for a JSON dump of `pid` that
    /// was not there before, up to `timeout`. [`DumpWaiter::wait`] gives its path and the time
    /// from the signal to the file.
    pub fn after(pid: u32, dir: &Path, delay: Duration, timeout: Duration) -> DumpWaiter {
        let dir = dir.to_path_buf();
        DumpWaiter(std::thread::spawn(move || {
            std::thread::sleep(delay);
            let before = json_dumps(&dir, pid);
            let t0 = Instant::now();
            // SAFETY: kill(2) on the server we started (still our unreaped child).
            if unsafe { libc::kill(pid as i32, libc::SIGUSR1) } != 0 {
                fail!("kill -USR1 {pid}: {}", std::io::Error::last_os_error());
            }
            loop {
                if let Some(p) = json_dumps(&dir, pid).into_iter().find(|p| !before.contains(p)) {
                    return Ok((p, t0.elapsed()));
                }
                if t0.elapsed() > timeout {
                    fail!(
                        "no JSON dump of pid {pid} in {} within {} s of kill -USR1",
                        dir.display(),
                        timeout.as_secs()
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }))
    }

    /// The dump's path and the time from SIGUSR1 to the file.
    pub fn wait(self) -> Result<(PathBuf, Duration)> {
        self.0.join().unwrap_or_else(|_| Err("the dump waiter panicked".to_string().into()))
    }
}

/// What a JSON dump says in a few figures.
#[derive(Clone, Debug, Default)]
pub struct DumpSummary {
    pub backend: String,
    /// Every thread entry, the live ones, and the live ones that made calls.
    pub threads: usize,
    pub live_threads: usize,
    pub live_threads_with_calls: usize,
    /// (op, calls, bytes) from `totals`, ops with calls only, by calls.
    pub totals: Vec<(String, u64, u64)>,
    /// (op, size class label, calls, p50 ns, p99 ns) of the size classes with the most calls.
    pub busiest: Vec<(String, String, u64, u64, u64)>,
    /// `memory.backend_allocated_bytes` and `memory.rss_bytes` (0 in a dump without `memory`).
    pub allocated_bytes: u64,
    pub rss_bytes: u64,
}

impl DumpSummary {
    pub fn of(d: &Dump) -> DumpSummary {
        let live: Vec<_> = d.live_threads().collect();
        let mut totals: Vec<(String, u64, u64)> = d
            .totals
            .iter()
            .filter(|(_, t)| t.count > 0)
            .map(|(k, t)| (k.clone(), t.count, t.bytes))
            .collect();
        totals.sort_by_key(|t| std::cmp::Reverse(t.1));
        let mut busiest: Vec<(String, String, u64, u64, u64)> = d
            .size_classes
            .iter()
            .filter(|c| c.count > 0)
            .map(|c| {
                let label = format!("{}..{}", human(c.min_bytes), c.max_bytes.map(human).unwrap_or_default());
                (c.op.clone(), label, c.count, c.p50_ns, c.p99_ns)
            })
            .collect();
        busiest.sort_by_key(|c| std::cmp::Reverse(c.2));
        busiest.truncate(6);
        DumpSummary {
            backend: d.backend.clone(),
            threads: d.threads.len(),
            live_threads: live.len(),
            live_threads_with_calls: live.iter().filter(|t| t.calls() > 0).count(),
            totals,
            busiest,
            allocated_bytes: d.memory.backend_allocated_bytes,
            rss_bytes: d.memory.rss_bytes,
        }
    }

    /// Calls of one op in `totals` (0 when absent).
    pub fn count(&self, op: &str) -> u64 {
        self.totals.iter().find(|t| t.0 == op).map(|t| t.1).unwrap_or(0)
    }
}

/// 4096 -> "4 KiB", 100 -> "100 B" (exact binary multiples only; others in bytes).
fn human(b: u64) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{} {unit}", b >> shift);
        }
    }
    format!("{b} B")
}
