//! The shim's dump files in a directory (`mallocshim.<pid>.<seq>.<ext>`, complete once they have
//! their name: the shim renames them into place), asking for one with SIGUSR1, and a summary of a
//! JSON dump. Dumps are read as untyped JSON here until the typed schema crate is in.

use crate::error::fail;
use crate::Result;
use serde_json::Value;
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

/// Reads and parses a JSON dump.
pub fn read_json(path: &Path) -> Result<Value> {
    let t = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(serde_json::from_str(&t).map_err(|e| format!("{}: not valid JSON: {e}", path.display()))?)
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
    /// `memory.backend_allocated_bytes` and `memory.rss_bytes` when present.
    pub allocated_bytes: Option<u64>,
    pub rss_bytes: Option<u64>,
}

impl DumpSummary {
    pub fn of(d: &Value) -> DumpSummary {
        let threads = d["threads"].as_array().cloned().unwrap_or_default();
        let live: Vec<&Value> = threads.iter().filter(|t| t["state"] == "live").collect();
        let calls = |t: &Value| -> u64 {
            t["ops"].as_object().map(|o| o.values().filter_map(|v| v["count"].as_u64()).sum()).unwrap_or(0)
        };
        let mut totals: Vec<(String, u64, u64)> = d["totals"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| {
                        (k.clone(), v["count"].as_u64().unwrap_or(0), v["bytes"].as_u64().unwrap_or(0))
                    })
                    .filter(|t| t.1 > 0)
                    .collect()
            })
            .unwrap_or_default();
        totals.sort_by_key(|t| std::cmp::Reverse(t.1));
        let mut busiest: Vec<(String, String, u64, u64, u64)> = d["size_classes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| {
                        let label = format!(
                            "{}..{}",
                            human(c["min_bytes"].as_u64().unwrap_or(0)),
                            c["max_bytes"].as_u64().map(human).unwrap_or_else(|| "".into())
                        );
                        let n = |k: &str| c[k].as_u64().unwrap_or(0);
                        (
                            c["op"].as_str().unwrap_or("?").to_string(),
                            label,
                            n("count"),
                            n("p50_ns"),
                            n("p99_ns"),
                        )
                    })
                    .filter(|c| c.2 > 0)
                    .collect()
            })
            .unwrap_or_default();
        busiest.sort_by_key(|c| std::cmp::Reverse(c.2));
        busiest.truncate(6);
        DumpSummary {
            backend: d["backend"].as_str().unwrap_or("").to_string(),
            threads: threads.len(),
            live_threads: live.len(),
            live_threads_with_calls: live.iter().filter(|t| calls(t) > 0).count(),
            totals,
            busiest,
            allocated_bytes: d["memory"]["backend_allocated_bytes"].as_u64(),
            rss_bytes: d["memory"]["rss_bytes"].as_u64(),
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
