//! Instructions per query executed by mariadbd's query threads (callgrind, counting inside
//! `do_command`), with the shim against preloading the same allocator directly. One instance, its
//! sysbench dataset prepared under a plain mariadbd; every config (backend x mode) started once
//! per round, in an order rotated by the round. Per server: `@@version_malloc_library` and
//! /proc/PID/maps checked against the config; per workload and thread count a warm-up of N/4
//! events, `callgrind_control -z`, a run of N events and a dump, a run of 2N events and a dump:
//! instructions per query = (Ir(2N) - Ir(N)) / (queries(2N) - queries(N)), so what each sysbench
//! run does once (connect, prepare, quit) cancels out. Then a clean shutdown. The modes and their
//! launches (the shim with heap profiles on or off, jemalloc's profiler, heaptrack) are
//! [`profilers`]'.

use crate::{callgrind, procfs, profilers, ErrorLog, Instance, Launch, Options, Result, Server, Sysbench};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Clone, Debug)]
pub struct Config {
    pub shim: PathBuf,
    pub backends: Vec<String>,
    /// Modes of [`profilers::MODES`]: `direct` (no preload / the allocator preloaded), `shim`,
    /// `routing` (`MALLOCSHIM_PROFILE=off`), `shim-heapprof` (and `-1m`, `-2m`: other means),
    /// `shim-noheapprof`, `jeprof`, `heaptrack`. Pairs that do not apply ([`profilers::valid`]) are left out.
    pub modes: Vec<String>,
    pub workloads: Vec<String>,
    pub threads: Vec<u32>,
    pub rounds: u32,
    /// N for oltp_point_select (1 query per event) and for any other workload.
    pub ps_events: u64,
    pub ro_events: u64,
    /// Callgrind files, sysbench reports and error logs, one directory per server.
    pub out: PathBuf,
}

/// One measured cell.
#[derive(Clone, Debug)]
pub struct Cell {
    pub round: u32,
    pub backend: String,
    pub mode: String,
    pub workload: String,
    pub threads: u32,
    pub n: u64,
    pub q1: u64,
    pub ir1: u64,
    pub q2: u64,
    pub ir2: u64,
    /// NaN when a figure is missing.
    pub per_query: f64,
    pub errors: u64,
}

/// One started server.
#[derive(Clone, Debug)]
pub struct ServerRow {
    pub round: u32,
    pub backend: String,
    pub mode: String,
    pub pid: u32,
    pub malloc_lib: String,
    pub start_s: u64,
    /// mariadbd's exit status; None when it did not start.
    pub exit: Option<i32>,
    pub crash: bool,
    /// What the profiler wrote: heaptrack's file size, or jemalloc's `prof_final` profiles
    /// (bytes); None for other modes.
    pub profile_bytes: Option<u64>,
    /// The expected allocator was seen (`@@version_malloc_library` and /proc/PID/maps).
    pub loaded: bool,
}

/// Everything measured; `ok` when every sysbench run had no error, every dump was read, every
/// server had the expected allocator and exited 0 without a crash report.
#[derive(Clone, Debug, Default)]
pub struct Results {
    pub cells: Vec<Cell>,
    pub servers: Vec<ServerRow>,
    pub ok: bool,
}

/// Whether `@@version_malloc_library` is what the config should show.
pub fn expected_lib(backend: &str, mode: &str, lib: &str) -> bool {
    profilers::expected_lib(backend, mode, lib)
}

/// Runs the whole measurement. Errors only when the instance cannot be set up; failures of a
/// config are in its rows and make `ok` false.
pub fn run(cfg: &Config) -> Result<Results> {
    for b in &cfg.backends {
        if let Some(lib) = crate::direct_lib(b) {
            crate::require_file(lib)?;
        }
    }
    callgrind::check(&crate::require("mariadbd")?)?;
    let bp = std::env::var("MDB_BUFFER_POOL").unwrap_or_else(|_| "64M".into());
    let opts = Options {
        buffer_pool: bp.clone(),
        start_timeout: Duration::from_secs(600),
        stop_timeout: Duration::from_secs(600),
        extra_opts: callgrind::server_opts(&bp),
        ..Options::default()
    };
    let inst = Instance::create(opts)?;
    let plain = inst.start(&Launch::plain())?;
    plain.sysbench_prepare()?;
    let st = plain.shutdown()?;
    if st.status != 0 {
        return Err(format!("the plain mariadbd (prepare run) exited with status {}", st.status).into());
    }
    let configs = configs(cfg);
    let mut res = Results { ok: true, ..Results::default() };
    for round in 0..cfg.rounds {
        for i in 0..configs.len() {
            let (b, m) = &configs[(i + round as usize) % configs.len()];
            one_server(cfg, &inst, round, b, m, &mut res)?;
        }
    }
    Ok(res)
}

/// The (backend, mode) pairs measured: every pair of the config that applies.
pub fn configs(cfg: &Config) -> Vec<(String, String)> {
    cfg.backends
        .iter()
        .flat_map(|b| cfg.modes.iter().map(move |m| (b.clone(), m.clone())))
        .filter(|(b, m)| profilers::valid(b, m))
        .collect()
}

/// One cell on the running server: a warm-up of n/4 events, callgrind's counters zeroed, then
/// runs of n and 2n events each followed by a callgrind dump (`k` numbers the dumps); the
/// instructions per query are the difference of the two over the difference of their queries.
fn measure_cell(
    srv: &Server,
    dir: &Path,
    (round, b, m): (u32, &str, &str),
    w: &str,
    t: u32,
    n: u64,
    k: &mut u32,
) -> Cell {
    let pid = srv.pid();
    let mut errors = 0u64;
    let run = |events: u64, errors: &mut u64| -> Option<u64> {
        match srv.sysbench(&Sysbench::new(w.to_string(), t).events(events)) {
            Ok(r) => {
                let _ = std::fs::copy(&r.output, dir.join(format!("sysbench-{w}-{t}-{events}.out")));
                *errors += r.errors + u64::from(r.exit != 0);
                r.queries
            }
            Err(e) => {
                eprintln!("query-instr: {e}");
                *errors += 1;
                None
            }
        }
    };
    run((n / 4).max(1), &mut errors);
    if let Err(e) = callgrind::zero(pid, dir) {
        eprintln!("query-instr: {e}");
        errors += 1;
    }
    let mut q = [None, None];
    let mut ir = [None, None];
    for (j, mult) in [1, 2].into_iter().enumerate() {
        q[j] = run(mult * n, &mut errors);
        *k += 1;
        ir[j] = callgrind::dump(pid, *k, dir).map_err(|e| eprintln!("query-instr: {e}")).ok();
    }
    let per = match (q, ir) {
        ([Some(q1), Some(q2)], [Some(i1), Some(i2)]) if q2 > q1 => (i2 as f64 - i1 as f64) / (q2 - q1) as f64,
        _ => {
            eprintln!("query-instr: {b}/{m} {w} {t}: missing figures (queries {q:?}, Ir {ir:?})");
            errors += 1;
            f64::NAN
        }
    };
    Cell {
        round,
        backend: b.into(),
        mode: m.into(),
        workload: w.to_string(),
        threads: t,
        n,
        q1: q[0].unwrap_or(0),
        ir1: ir[0].unwrap_or(0),
        q2: q[1].unwrap_or(0),
        ir2: ir[1].unwrap_or(0),
        per_query: per,
        errors,
    }
}

fn one_server(cfg: &Config, inst: &Instance, round: u32, b: &str, m: &str, res: &mut Results) -> Result<()> {
    let dir = cfg.out.join(format!("r{round}-{b}-{m}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let started = profilers::start(&cfg.shim, b, m, &dir)?;
    let (lib, heaptrack) = (started.lib, started.heaptrack);
    let launch = if heaptrack.is_some() {
        // heaptrack's preload must skip valgrind's launchers (see the function).
        callgrind::launch_preloading_guest(started.launch, &dir)?
    } else {
        started.launch.wrapper(callgrind::wrapper(&dir))
    };
    let t0 = Instant::now();
    let mut row = ServerRow {
        round,
        backend: b.into(),
        mode: m.into(),
        pid: 0,
        malloc_lib: "n/a".into(),
        start_s: 0,
        exit: None,
        crash: true,
        profile_bytes: None,
        loaded: false,
    };
    let srv = match inst.start(&launch) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("query-instr: {b}/{m}: {e}");
            row.start_s = t0.elapsed().as_secs();
            res.servers.push(row);
            res.ok = false;
            return Ok(());
        }
    };
    row.start_s = t0.elapsed().as_secs();
    row.pid = srv.pid();
    row.malloc_lib = srv.sql_value("SELECT @@version_malloc_library").unwrap_or_else(|_| "n/a".into());
    row.loaded = match &lib {
        Some(l) => procfs::maps_contains(row.pid, l) == Some(true),
        None => mallocshim_format::backends::TABLE
            .iter()
            .filter_map(|b| b.file_name().to_str().ok().filter(|f| !f.is_empty()))
            .chain(["libmallocshim"])
            .all(|n| procfs::maps_contains(row.pid, n) == Some(false)),
    };
    if !expected_lib(b, m, &row.malloc_lib) {
        eprintln!("query-instr: {b}/{m}: @@version_malloc_library is '{}'", row.malloc_lib);
        row.loaded = false;
    }
    res.ok &= row.loaded;
    let mut k = 0;
    for w in &cfg.workloads {
        for &t in &cfg.threads {
            let n = if w == "oltp_point_select" { cfg.ps_events } else { cfg.ro_events };
            let cell = measure_cell(&srv, &dir, (round, b, m), w, t, n, &mut k);
            eprintln!("query-instr: {cell:?}");
            res.ok &= cell.errors == 0;
            res.cells.push(cell);
        }
    }
    let st = srv.shutdown()?;
    let log = ErrorLog::read(&st.errlog);
    let crash = log.crash_lines();
    for l in &crash {
        eprintln!("{l}");
    }
    let _ = std::fs::copy(&st.errlog, dir.join("mariadbd.err"));
    row.exit = Some(st.status);
    row.crash = !crash.is_empty();
    res.ok &= st.status == 0 && !row.crash;
    row.profile_bytes = profile_bytes(m, &dir, heaptrack);
    if row.profile_bytes == Some(0) {
        eprintln!("query-instr: {b}/{m}: the profiler wrote nothing");
        res.ok = false;
    }
    eprintln!("query-instr: {row:?}");
    res.servers.push(row);
    Ok(())
}

/// What the profiler of mode `m` wrote into `dir` (None: not a profiler mode). Waits for
/// heaptrack's interpreter; 0 when nothing was written or it did not finish.
pub fn profile_bytes(m: &str, dir: &std::path::Path, heaptrack: Option<profilers::Heaptrack>) -> Option<u64> {
    match (m, heaptrack) {
        (_, Some(h)) => Some(h.finish(Duration::from_secs(600)).unwrap_or_else(|e| {
            eprintln!("query-instr: heaptrack: {e}");
            0
        })),
        ("jeprof", None) => Some(
            profilers::jeprof_files(dir)
                .iter()
                .filter_map(|p| std::fs::metadata(p).ok())
                .map(|m| m.len())
                .sum(),
        ),
        _ => None,
    }
}
