//! What one cell measures: sysbench's report (qps, tps, p95, errors), the server's CPU time from
//! /proc/<pid>/stat, the shim's JSON dump after SIGUSR1 (calls and latency per size class), and
//! the runner's own RSS sampler (/proc/<pid>/statm into a memlog CSV, for servers without the
//! shim, and as a fallback when the shim writes no memlog).

use super::server::{Error, Res};
use mallocshim_format::memlog::HEADER as MEMLOG_HEADER;
use mallocshim_format::Dump;
use mallocshim_mariadb::procfs::statm;
use mallocshim_mariadb::SysbenchReport;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// sysbench 1.0's figures.
#[derive(Clone, Debug, Default)]
pub struct Sysbench {
    pub qps: f64,
    pub tps: f64,
    pub queries: u64,
    pub p95_ms: f64,
    pub errors: u64,
}

/// Parses sysbench's report with the harness's parser (errors = ignored errors + reconnects +
/// FATAL lines); a missing figure is an error.
pub fn parse_sysbench(text: &str) -> Result<Sysbench, String> {
    let r = SysbenchReport::parse(text, 0, PathBuf::new());
    match (r.queries, r.qps, r.tps, r.ignored_errors, r.reconnects) {
        (Some(queries), Some(qps), Some(tps), Some(_), Some(_)) => {
            Ok(Sysbench { qps, tps, queries, p95_ms: r.p95_ms.unwrap_or(0.0), errors: r.errors })
        }
        _ => Err("sysbench printed no complete report".into()),
    }
}

/// A thread appending /proc/<pid>/statm to a memlog CSV (backend columns empty) every interval.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    pub fn start(pid: u32, path: PathBuf, interval: Duration) -> Result<Sampler, String> {
        let mut f = crate::secure_write::create(&path).map_err(|e| e.to_string())?;
        writeln!(f, "{MEMLOG_HEADER}").map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let handle = std::thread::spawn(move || loop {
            if let Some((rss, vsz)) = statm(pid) {
                let _ = writeln!(f, "{},{rss},{vsz},,,,,", unix_ms());
            }
            let end = Instant::now() + interval;
            while Instant::now() < end {
                if s2.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Ok(Sampler { stop, handle: Some(handle) })
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Reads a dump through the format crate.
pub fn read_dump(path: &Path) -> Result<Dump, String> {
    Dump::read(path).map_err(|e| e.to_string())
}

/// Sends SIGUSR1 to the server and waits (up to 15 s) for a new JSON dump of it in `dir`; moves
/// it to `dest` and parses it.
pub fn take_dump(pid: u32, dir: &Path, dest: &Path) -> Res<Dump> {
    let json_dumps = |dir: &Path| mallocshim_format::dumps_of(dir, pid, "json").unwrap_or_default();
    let before = json_dumps(dir);
    // SAFETY: kill(2) on the server we started.
    if unsafe { libc::kill(pid as i32, libc::SIGUSR1) } != 0 {
        return Err(Error::Failed(format!("cannot send SIGUSR1 to pid {pid}")));
    }
    let t0 = Instant::now();
    loop {
        let new: Vec<PathBuf> = json_dumps(dir).into_iter().filter(|p| !before.contains(p)).collect();
        if let Some(p) = new.into_iter().max() {
            crate::secure_write::move_into(&p, dest)
                .map_err(|e| format!("cannot move {} into place: {e}", p.display()))?;
            return Ok(read_dump(dest)?);
        }
        if t0.elapsed() > Duration::from_secs(15) {
            return Err(Error::Failed(format!(
                "no JSON dump appeared in {} within 15 s of SIGUSR1 to pid {pid}",
                dir.display()
            )));
        }
        super::server::nap(Duration::from_millis(50))?;
    }
}
