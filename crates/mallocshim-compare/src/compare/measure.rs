//! What one cell measures beside the harness: sysbench's figures (qps, tps, p95, errors) as the
//! report needs them, the shim's JSON dump after SIGUSR1 moved into the output directory, and the
//! runner's own RSS sampler (/proc/<pid>/statm into a memlog CSV, for servers without the shim,
//! and as a fallback when the shim writes no memlog).

use mallocshim_format::memlog::{COLUMNS as MEMLOG_COLUMNS, HEADER as MEMLOG_HEADER};
use mallocshim_format::Dump;
use mallocshim_mariadb::{Error, Server, SysbenchReport};
use mallocshim_proc::statm;
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

/// The figures of a sysbench run from the harness's report (errors = ignored errors +
/// reconnects + FATAL lines, at least 1 when sysbench failed); a missing figure is an error.
pub fn figures(r: &SysbenchReport) -> Result<Sysbench, String> {
    match (r.queries, r.qps, r.tps, r.ignored_errors, r.reconnects) {
        (Some(queries), Some(qps), Some(tps), Some(_), Some(_)) => Ok(Sysbench {
            qps,
            tps,
            queries,
            p95_ms: r.p95_ms.unwrap_or(0.0),
            errors: if r.exit != 0 { r.errors.max(1) } else { r.errors },
        }),
        _ => Err(format!("sysbench printed no complete report (exit status {})", r.exit)),
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
        // One empty field per optional column: the reader wants the header's field count.
        let empty = ",".repeat(MEMLOG_COLUMNS.len() - 3);
        let handle = std::thread::spawn(move || loop {
            if let Some((rss, vsz)) = statm(pid) {
                let _ = writeln!(f, "{},{rss},{vsz}{empty}", unix_ms());
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

/// Asks the server for a JSON dump (SIGUSR1, up to 15 s for it to appear in `dir`), moves it to
/// `dest` and parses it.
pub fn take_dump(srv: &Server, dir: &Path, dest: &Path) -> Result<Dump, Error> {
    let (p, _) = srv.dump_now(dir, Duration::from_secs(15))?;
    crate::secure_write::move_into(&p, dest)
        .map_err(|e| format!("cannot move {} into place: {e}", p.display()))?;
    Ok(read_dump(dest)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_samplers_memlog_reads_back() {
        let dir = std::env::temp_dir().join(format!("mallocshim-compare-sampler-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.csv");
        let s = super::Sampler::start(std::process::id(), path.clone(), std::time::Duration::from_millis(10));
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(s);
        let rows = mallocshim_format::memlog::read(&path).expect("the format crate reads it");
        assert!(
            !rows.is_empty() && rows.iter().all(|r| r.rss_bytes > 0 && r.backend_allocated_bytes.is_none())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
