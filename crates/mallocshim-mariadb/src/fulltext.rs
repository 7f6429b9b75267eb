//! The InnoDB FULLTEXT load: RSS of a real mariadbd after concurrent phrase searches, under the
//! shim with its periodic trim off and on. One instance; the data set (`rows` documents of `words`
//! words from a 4096-word vocabulary, word k drawn with k = 4096 r^3 so a few words are in most
//! documents) is loaded with LOAD DATA and indexed under a plain mariadbd. Then, per config, a
//! fresh mariadbd: `threads` sysbench threads of phrase searches (`workloads/fulltext-phrase.lua`,
//! the same word(k)) for `seconds`, `idle` seconds idle, VmRSS sampled every second, a clean
//! shutdown; the verbose trim lines and the exit dump's `trim` object are collected.

use crate::error::fail;
use crate::{
    newest_json_dump, procfs, read_dump, ErrorLog, Instance, Launch, Options, Result, Server, Sysbench,
    SysbenchReport,
};
use mallocshim_format::Trim;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The sysbench workload: one phrase search per event.
pub const PHRASE_LUA: &str = include_str!("../workloads/fulltext-phrase.lua");

/// The vocabulary's word k: three syllables picked by the bits of k (as in the lua script).
pub fn word(k: usize) -> String {
    const SYL: [&str; 16] =
        ["ka", "lo", "mi", "ne", "pu", "ra", "si", "to", "vu", "ze", "bo", "da", "fe", "gi", "hu", "ja"];
    format!("{}{}{}", SYL[k & 15], SYL[(k >> 4) & 15], SYL[(k >> 8) & 15])
}

/// One run's configuration: `none` (no preload), `off` (trim interval 0), `on` (the settings'
/// interval) or `on:MS`, optionally `@BACKEND`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    pub spec: String,
    /// None for `none`; else the trim interval in ms.
    pub trim_ms: Option<u64>,
    pub backend: Option<String>,
}

impl RunConfig {
    pub fn parse(spec: &str, default_trim_ms: u64) -> Result<RunConfig> {
        let (mode, backend) = match spec.split_once('@') {
            Some((m, b)) if crate::BACKENDS.contains(&b) => (m, Some(b.to_string())),
            Some(_) => fail!(
                "{spec}: unknown backend (none|off|on|on:MS, then @ and one of {})",
                crate::BACKENDS.join(", ")
            ),
            None => (spec, None),
        };
        let trim_ms = match mode {
            "none" if backend.is_none() => None,
            "off" => Some(0),
            "on" => Some(default_trim_ms),
            m => match m.strip_prefix("on:").and_then(|n| n.parse().ok()) {
                Some(n) => Some(n),
                None => fail!("{spec}: not none|off|on|on:MS[@BACKEND]"),
            },
        };
        Ok(RunConfig { spec: spec.into(), trim_ms, backend })
    }

    /// The name of its results: `on:500@jemalloc` -> `on500_jemalloc`.
    pub fn name(&self) -> String {
        self.spec.replace(':', "").replace('@', "_")
    }
}

/// The load's settings (defaults: those of the test).
#[derive(Clone, Debug)]
pub struct Settings {
    pub shim: PathBuf,
    /// The backend of shim configs without their own.
    pub backend: String,
    pub rows: u64,
    pub words: u64,
    pub threads: u32,
    pub seconds: u64,
    pub idle: u64,
    /// The `on` configs' trim interval.
    pub trim_ms: u64,
    /// `MALLOCSHIM_TRIM_MIN_BYTES` for shim configs (None: the shim's default).
    pub min_bytes: Option<u64>,
    /// Each shim config writes its memlog to `<dir>/<name>.csv`.
    pub memlog_dir: Option<PathBuf>,
}

impl Settings {
    pub fn new(shim: PathBuf) -> Settings {
        Settings {
            shim,
            backend: "glibc".into(),
            rows: 300_000,
            words: 30,
            threads: 4,
            seconds: 20,
            idle: 10,
            trim_ms: 1000,
            min_bytes: None,
            memlog_dir: None,
        }
    }
}

impl Settings {
    /// These settings with `FT_BACKEND`, `FT_ROWS`, `FT_WORDS`, `FT_THREADS`, `FT_SECONDS`,
    /// `FT_IDLE`, `FT_TRIM_MS`, `FT_MIN_BYTES` and `FT_MEMLOG_DIR` of the environment applied.
    pub fn with_env(mut self) -> Result<Settings> {
        let var = |k: &str| std::env::var(k).ok();
        let num = |k: &str| -> Result<Option<u64>> {
            match var(k) {
                Some(v) => v.trim().parse().map(Some).map_err(|_| format!("{k}={v} is not a number").into()),
                None => Ok(None),
            }
        };
        if let Some(b) = var("FT_BACKEND") {
            self.backend = b;
        }
        self.rows = num("FT_ROWS")?.unwrap_or(self.rows);
        self.words = num("FT_WORDS")?.unwrap_or(self.words);
        self.threads = num("FT_THREADS")?.map_or(self.threads, |t| t as u32);
        self.seconds = num("FT_SECONDS")?.unwrap_or(self.seconds);
        self.idle = num("FT_IDLE")?.unwrap_or(self.idle);
        self.trim_ms = num("FT_TRIM_MS")?.unwrap_or(self.trim_ms);
        self.min_bytes = num("FT_MIN_BYTES")?.or(self.min_bytes);
        self.memlog_dir = var("FT_MEMLOG_DIR").map(PathBuf::from).or(self.memlog_dir);
        Ok(self)
    }
}

/// What one config's run measured.
#[derive(Clone, Debug)]
pub struct Run {
    pub config: RunConfig,
    pub backend: Option<String>,
    pub sysbench: SysbenchReport,
    /// VmRSS in bytes: at the start, the peak, at the end of the searches, after the idle time,
    /// and once a second from the start of the searches.
    pub rss_start: u64,
    pub rss_peak: u64,
    pub rss_end_load: u64,
    pub rss_final: u64,
    pub rss_series: Vec<u64>,
    pub mariadbd_exit: i32,
    pub crash_lines: Vec<String>,
    /// Verbose lines: trims run, trims skipped, the sum of their `released=`, their `duration_us=`.
    pub trim_lines: u64,
    pub skip_lines: u64,
    pub trim_released: u64,
    pub trim_durations_us: Vec<u64>,
    /// The exit dump's `trim` object (shim configs).
    pub dump_trim: Option<Trim>,
    pub ok: bool,
}

/// The whole load's results.
#[derive(Clone, Debug, Default)]
pub struct Results {
    pub load_s: f64,
    pub index_s: f64,
    pub runs: Vec<Run>,
    /// Every config: zero query errors, sysbench exit 0, mariadbd exit 0, no crash report, and
    /// for shim configs a dump with a trim object.
    pub ok: bool,
}

impl Results {
    pub fn run(&self, name: &str) -> Option<&Run> {
        self.runs.iter().find(|r| r.config.name() == name)
    }
}

/// Generates the data set of `s` (`rows` documents of `words` words), loads it into `ft.docs` with
/// LOAD DATA and adds the FULLTEXT index; returns the load and index times in seconds.
pub fn load(srv: &Server, s: &Settings) -> Result<(f64, f64)> {
    let t0 = Instant::now();
    let tsv = srv.instance().dir().join("tmp/docs.tsv");
    {
        let f = std::fs::File::create(&tsv).map_err(|e| format!("{}: {e}", tsv.display()))?;
        let mut w = std::io::BufWriter::new(f);
        let vocab: Vec<String> = (0..4096).map(word).collect();
        let mut rng = fastrand::Rng::with_seed(20240611);
        for i in 1..=s.rows {
            let doc: Vec<&str> =
                (0..s.words).map(|_| vocab[(4096.0 * rng.f64().powi(3)) as usize].as_str()).collect();
            writeln!(w, "{i}\t{}", doc.join(" ")).map_err(|e| format!("{}: {e}", tsv.display()))?;
        }
        w.flush().map_err(|e| format!("{}: {e}", tsv.display()))?;
    }
    srv.sql("CREATE DATABASE ft; CREATE TABLE ft.docs (id INT UNSIGNED NOT NULL PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB")?;
    let mut c = srv.client();
    c.arg("--local-infile=1").arg("-e").arg(format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE ft.docs FIELDS TERMINATED BY '\\t' (id, body)",
        tsv.display()
    ));
    let out = c.output().map_err(|e| format!("mariadb client: {e}"))?;
    if !out.status.success() {
        fail!("LOAD DATA failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let _ = std::fs::remove_file(&tsv);
    let load_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    srv.sql("ALTER TABLE ft.docs ADD FULLTEXT INDEX ft_body (body)")?;
    let index_s = t1.elapsed().as_secs_f64();
    let n = srv.sql_value("SELECT COUNT(*) FROM ft.docs")?;
    if n != s.rows.to_string() {
        fail!("docs holds {n} rows, not {}", s.rows);
    }
    Ok((load_s, index_s))
}

/// Loads the data set, then runs every config in turn.
pub fn run(s: &Settings, configs: &[RunConfig]) -> Result<Results> {
    let inst = Instance::create(Options::default())?;
    let lua = inst.dir().join("fulltext-phrase.lua");
    std::fs::write(&lua, PHRASE_LUA).map_err(|e| format!("{}: {e}", lua.display()))?;
    let plain = inst.start(&Launch::plain())?;
    let (load_s, index_s) = load(&plain, s)?;
    if plain.shutdown()?.status != 0 {
        fail!("the plain mariadbd did not stop cleanly");
    }
    eprintln!("fulltext: {} documents loaded in {load_s:.0} s, indexed in {index_s:.0} s", s.rows);
    let mut res = Results { load_s, index_s, runs: Vec::new(), ok: true };
    for c in configs {
        let run = one(&inst, s, c, &lua)?;
        res.ok &= run.ok;
        res.runs.push(run);
    }
    Ok(res)
}

/// The server's launch: plain for the baseline, else under the shim with the run's trim interval,
/// an exit dump into `dumpdir` and (if asked) the minimum and a memlog.
fn launch_for(s: &Settings, c: &RunConfig, name: &str, backend: Option<&str>, dumpdir: &Path) -> Launch {
    let (Some(ms), Some(b)) = (c.trim_ms, backend) else {
        return Launch::plain();
    };
    let mut launch = Launch::shim(&s.shim, b)
        .var("MALLOCSHIM_VERBOSE", "2")
        .var("MALLOCSHIM_TRIM_INTERVAL_MS", ms.to_string())
        .var("MALLOCSHIM_DUMP_AT_EXIT", "1")
        .var("MALLOCSHIM_DUMP_DIR", dumpdir.display().to_string())
        .var("MALLOCSHIM_DUMP_FORMATS", "json");
    if let Some(m) = s.min_bytes {
        launch = launch.var("MALLOCSHIM_TRIM_MIN_BYTES", m.to_string());
    }
    if let Some(d) = &s.memlog_dir {
        launch = launch.var("MALLOCSHIM_MEMLOG", d.join(format!("{name}.csv")).display().to_string());
    }
    launch
}

/// Runs the sysbench load on `srv` while a thread samples its RSS about every second; returns
/// the report and the samples (bytes).
fn load_sampling_rss(srv: &Server, s: &Settings, lua: &Path) -> (Result<SysbenchReport>, Vec<u64>) {
    let pid = srv.pid();
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let sampler = sc.spawn(|| {
            let mut v = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                v.extend(procfs::vm_rss(pid));
                for _ in 0..20 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            v
        });
        let sb = Sysbench::new(lua.display().to_string(), s.threads).time(s.seconds).db("ft");
        let r = srv.sysbench(&sb);
        stop.store(true, Ordering::SeqCst);
        (r, sampler.join().unwrap_or_default())
    })
}

fn one(inst: &Instance, s: &Settings, c: &RunConfig, lua: &Path) -> Result<Run> {
    let name = c.name();
    let dumpdir = inst.subdir(&format!("dumps-{name}"))?;
    let backend = c.trim_ms.map(|_| c.backend.clone().unwrap_or_else(|| s.backend.clone()));
    let launch = launch_for(s, c, &name, backend.as_deref(), &dumpdir);
    let srv = inst.start(&launch)?;
    let pid = srv.pid();
    let rss = || procfs::vm_rss(pid).unwrap_or(0);
    let rss_start = rss();
    let (sysbench, mut series) = load_sampling_rss(&srv, s, lua);
    let sysbench = sysbench?;
    let rss_end_load = rss();
    for _ in 0..s.idle {
        std::thread::sleep(Duration::from_secs(1));
        series.extend(procfs::vm_rss(pid));
    }
    let rss_final = rss();
    let st = srv.shutdown()?;
    let log = ErrorLog::read(&st.errlog);
    let trims = log.trim_lines();
    let num = |m: &std::collections::BTreeMap<String, String>, k: &str| {
        m.get(k).and_then(|v| v.parse::<u64>().ok())
    };
    let dump_trim = if c.trim_ms.is_some() {
        newest_json_dump(&dumpdir, pid).and_then(|p| read_dump(&p).ok()).map(|d| d.trim)
    } else {
        None
    };
    let mut run = Run {
        config: c.clone(),
        backend,
        rss_start,
        rss_peak: series.iter().copied().max().unwrap_or(0),
        rss_end_load,
        rss_final,
        rss_series: series,
        mariadbd_exit: st.status,
        crash_lines: log.crash_lines().into_iter().map(String::from).collect(),
        trim_lines: trims.len() as u64,
        skip_lines: log.trim_skipped_lines() as u64,
        trim_released: trims.iter().filter_map(|m| num(m, "released")).sum(),
        trim_durations_us: trims.iter().filter_map(|m| num(m, "duration_us")).collect(),
        dump_trim,
        sysbench,
        ok: true,
    };
    run.ok = run.sysbench.ok()
        && run.mariadbd_exit == 0
        && run.crash_lines.is_empty()
        && (c.trim_ms.is_none() || run.dump_trim.is_some());
    for l in &run.crash_lines {
        eprintln!("{l}");
    }
    eprintln!(
        "fulltext: {name}: qps {} errors {} peak {} MiB, end of load {} MiB, final {} MiB, mariadbd exit {}",
        run.sysbench.qps_text(),
        run.sysbench.errors,
        run.rss_peak >> 20,
        run.rss_end_load >> 20,
        run.rss_final >> 20,
        run.mariadbd_exit
    );
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs() {
        let c = RunConfig::parse("on:500@jemalloc", 1000).unwrap();
        assert_eq!(
            (c.trim_ms, c.backend.as_deref(), c.name().as_str()),
            (Some(500), Some("jemalloc"), "on500_jemalloc")
        );
        assert_eq!(RunConfig::parse("on", 1000).unwrap().trim_ms, Some(1000));
        assert_eq!(RunConfig::parse("off", 1000).unwrap().trim_ms, Some(0));
        assert_eq!(RunConfig::parse("none", 1000).unwrap().trim_ms, None);
        for bad in ["none@glibc", "on@nosuch", "sometimes", "on:x"] {
            assert!(RunConfig::parse(bad, 1000).is_err(), "{bad}");
        }
        assert_eq!(word(0), "kakaka");
        assert_eq!(word(0x123), "nemilo");
    }
}
