//! The runner's outputs: cells.csv (one line per cell, appended and flushed as each cell ends),
//! report.md (the answer's headline lines from `answer`, medians over rounds, ratios against
//! glibc and shim against direct preload with their 95% intervals from `spread`, CPU per query,
//! p95, peak/final RSS, malloc/free latency per size class) and the plots (qps_<workload>.png via
//! `charts`, rss.png, latency.png). Also the lua script that runs an SQL file.
//!
//! Long because: report.md's writer (`write_report`, see there) and the CSV it reads back.

use super::answer;
use super::cli::Plan;
use super::measure::read_dump;
use super::spread;
use crate::plot::{self, Panel, Series};
use mallocshim_format::stats::median;
use mallocshim_format::Dump;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const CSV_HEADER: &str = "round,config,backend,mode,workload,threads,seconds,qps,tps,p95_ms,errors,queries,cpu_s,cpu_us_per_query,allocs_per_query,frees_per_query,rss_bytes,backend_allocated_bytes,dump";

/// One measured cell.
#[derive(Clone, Debug)]
pub struct Cell {
    pub round: u32,
    pub config: String,
    pub backend: String,
    pub mode: String,
    pub workload: String,
    pub threads: u32,
    pub seconds: u32,
    pub qps: f64,
    pub tps: f64,
    pub p95_ms: f64,
    pub errors: u64,
    pub queries: u64,
    pub cpu_s: f64,
    pub cpu_us_per_query: f64,
    pub allocs_per_query: Option<f64>,
    pub frees_per_query: Option<f64>,
    pub rss_bytes: u64,
    pub backend_allocated_bytes: Option<u64>,
    pub dump: String,
}

/// One server start (a round of one configuration).
pub struct ServerRun {
    pub round: u32,
    pub config: String,
    pub memlog: PathBuf,
    pub memlog_source: String,
    pub last_dump: Option<PathBuf>,
    pub exit: String,
    /// The highest RSS in its memlog, bytes (None without samples).
    pub peak_rss: Option<u64>,
}

pub struct CsvWriter {
    f: std::fs::File,
}

impl CsvWriter {
    pub fn create(path: &Path) -> Result<CsvWriter, String> {
        let mut f = crate::secure_write::create(path).map_err(|e| e.to_string())?;
        writeln!(f, "{CSV_HEADER}").map_err(|e| e.to_string())?;
        Ok(CsvWriter { f })
    }

    /// Appends a line and syncs it, so an interrupted run keeps it.
    pub fn append(&mut self, c: &Cell) -> Result<(), String> {
        let o = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_default();
        writeln!(
            self.f,
            "{},{},{},{},{},{},{},{:.2},{:.2},{:.2},{},{},{:.3},{:.3},{},{},{},{},{}",
            c.round,
            c.config,
            c.backend,
            c.mode,
            c.workload,
            c.threads,
            c.seconds,
            c.qps,
            c.tps,
            c.p95_ms,
            c.errors,
            c.queries,
            c.cpu_s,
            c.cpu_us_per_query,
            o(c.allocs_per_query),
            o(c.frees_per_query),
            c.rss_bytes,
            c.backend_allocated_bytes.map(|b| b.to_string()).unwrap_or_default(),
            c.dump
        )
        .and_then(|_| self.f.sync_data())
        .map_err(|e| format!("cannot write cells.csv: {e}"))
    }
}

/// Facts about the machine and the run for the report's header.
pub struct RunInfo {
    pub lines: Vec<String>,
}

impl RunInfo {
    pub fn collect(plan: &Plan, server_version: &str, cmdline: &[String]) -> RunInfo {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_default();
        let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
        let mem = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:").map(|r| r.trim().to_string()))
            .unwrap_or_default();
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let sb = std::process::Command::new("sysbench")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let a = &plan.args;
        let args: Vec<String> = cmdline.iter().skip(1).cloned().collect();
        RunInfo {
            lines: vec![
                format!(
                    "machine: {ncpu} CPUs ({model}), {mem} RAM; load average at start {}",
                    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
                ),
                format!("server: {server_version} ({})", plan.mysqld.display()),
                format!(
                    "client: {sb}; dataset {} tables x {} rows; {} s per cell{}; rounds: {}",
                    a.tables,
                    a.table_size,
                    a.time,
                    if a.warmup > 0 { format!(" after {} s warm-up", a.warmup) } else { String::new() },
                    match a.rounds {
                        super::rounds::Rounds::Fixed(n) => n.to_string(),
                        super::rounds::Rounds::Auto => format!(
                            "auto (3 to {}, until every headline interval is within ±{:.1}%)",
                            a.max_rounds, a.target_pct
                        ),
                    }
                ),
                format!("shim: {}", plan.shim.display()),
                format!("command: `mallocshim compare {}`", args.join(" ")),
            ],
        }
    }
}

/// A lua script for sysbench that runs the SQL file's statements (split at ';' ending a line)
/// once per event on each thread's own connection.
pub fn sql_to_lua(sql: &str) -> Result<String, String> {
    let mut stmts = Vec::new();
    let mut cur = String::new();
    for line in sql.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with("--") || t.starts_with('#')) {
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
        if t.ends_with(';') {
            let s = cur.trim().trim_end_matches(';').trim().to_string();
            if !s.is_empty() {
                stmts.push(s);
            }
            cur.clear();
        }
    }
    if !cur.trim().is_empty() {
        stmts.push(cur.trim().to_string());
    }
    if stmts.is_empty() {
        return Err("no SQL statements".into());
    }
    let mut lua = String::from(
        "-- generated by mallocshim compare: runs an SQL file's statements as one event\nlocal stmts = {\n",
    );
    for s in &stmts {
        if s.contains("]==]") {
            return Err("a statement contains ]==]".into());
        }
        let _ = writeln!(lua, "  [==[{s}]==],");
    }
    lua.push_str(
        "}\nfunction thread_init()\n  drv = sysbench.sql.driver()\n  con = drv:connect()\nend\n\
         function thread_done()\n  con:disconnect()\nend\n\
         function event()\n  for _, q in ipairs(stmts) do\n    con:query(q)\n  end\nend\n",
    );
    Ok(lua)
}

fn mib(b: f64) -> String {
    format!("{:.1}", b / (1u64 << 20) as f64)
}

// Long because: it writes report.md top to bottom from eight inputs, one section after another.
// The split (a Report struct of the eight inputs, one function per section) is the next step;
// only tests/compare.rs's mariadbd runs check this output, so it waits for a change that runs them.
#[allow(clippy::too_many_arguments)]
pub fn write_report(
    out: &Path,
    plan: &Plan,
    info: &RunInfo,
    cells: &[Cell],
    runs: &[ServerRun],
    notes: &[String],
    status: &str,
    elapsed: Duration,
) -> Result<(), String> {
    let configs: Vec<String> = plan.configs.iter().map(|c| c.name()).collect();
    let threads = &plan.args.threads;
    let workloads: Vec<String> = plan.workloads.iter().map(|w| w.name()).collect();
    let mut md = String::new();
    let _ = writeln!(md, "# mallocshim compare report\n");
    let _ = writeln!(md, "Run {status}, {} cells in {:.0} s.\n", cells.len(), elapsed.as_secs_f64());
    let _ = writeln!(md, "## Answer\n");
    let heads = answer::headlines(&plan.backends(), &plan.variant_names(), plan.args.direct, cells, runs);
    for h in &heads {
        let _ = writeln!(md, "- {}", h.render(plan.args.target_pct));
    }
    if heads.is_empty() {
        let _ = writeln!(md, "- nothing to compare yet: no configuration has a round paired with its baseline (glibc, or with --direct its own direct preload)");
    }
    let _ = writeln!(
        md,
        "\nEach line pools every workload and thread count of the run: per round the mean of the cells' \
         log-ratios, then the geometric mean over rounds with its 95% t-interval (rounds paired: each \
         round runs every configuration on the same dataset); `noise` means the interval includes no \
         change, `same` that it does and is within ±{:.1}% (--target-pct); [cells ...] is the range of \
         the single cells' ratios, tabled below.\n",
        plan.args.target_pct
    );
    for l in &info.lines {
        let _ = writeln!(md, "- {l}");
    }
    let _ = writeln!(
        md,
        "\nConfigurations: {}. \"<backend>\" runs mariadbd/mysqld under libmallocshim.so with MALLOCSHIM_BACKEND=<backend>; \
         \"<backend>-direct\" preloads the allocator itself without the shim (glibc-direct: no preload). \
         Backends alternate round by round (rotated order). Every number below is the median over rounds; \
         the per-round values are in cells.csv.{}\n",
        configs.join(", "),
        if plan.configs.iter().any(|c| c.is_live()) {
            " A --live variant (\"<backend>+NAME\") runs on its backend's own server, each cell beside \
             the backend's cell of the same workload and thread count (after it in odd rounds, before it in \
             even ones), with its setting made at run time through the control channel (mallocshim set) \
             and undone after: it has no server run of its own, so no RSS or memlog."
        } else {
            ""
        }
    );
    // (workload, config, threads) -> values over rounds
    let mut by: BTreeMap<(String, String, u32), Vec<&Cell>> = BTreeMap::new();
    for c in cells {
        by.entry((c.workload.clone(), c.config.clone(), c.threads)).or_default().push(c);
    }
    let med = |w: &str, cfg: &str, t: u32, f: &dyn Fn(&Cell) -> Option<f64>| -> Option<f64> {
        let v: Vec<f64> = by
            .get(&(w.to_string(), cfg.to_string(), t))
            .map(|cs| cs.iter().filter_map(|c| f(c)).collect())
            .unwrap_or_default();
        median(&v)
    };
    let vals = |w: &str, cfg: &str, t: u32, f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<(u32, f64)> {
        by.get(&(w.to_string(), cfg.to_string(), t))
            .map(|cs| cs.iter().filter_map(|c| f(c).map(|x| (c.round, x))).collect())
            .unwrap_or_default()
    };
    let fmt = |v: Option<f64>, d: usize| v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "-".into());
    let ratio = |w: &str, a: &str, b: &str, t: u32, f: &dyn Fn(&Cell) -> Option<f64>| {
        let iv = spread::paired(&vals(w, a, t, f), &vals(w, b, t, f));
        let need = iv.filter(|i| i.is_noise()).and_then(|i| i.rounds_to_resolve(plan.args.target_pct));
        let s = iv.map(|i| i.render()).unwrap_or_else(|| "-".into());
        need.map(|n| format!("{s} {n} rounds")).unwrap_or(s)
    };
    let rounds = cells.iter().map(|c| c.round).collect::<std::collections::BTreeSet<_>>().len();
    if rounds >= 2 {
        let _ = writeln!(
            md,
            "Ratios read `ratio (95% interval) mark`: the geometric mean of the per-round ratios (each round's \
             cell against the same round's baseline cell), then its 95% t-interval over the {rounds} paired \
             rounds; `{}` marks a ratio whose interval includes 1.000, which cannot be told from noise with \
             {rounds} rounds, followed by roughly how many rounds would tell it at the spread observed \
             (the interval excluding 1.000, or within ±{:.1}%).\n",
            spread::NOISE_MARK,
            plan.args.target_pct
        );
    } else {
        let _ = writeln!(
            md,
            "One round: the ratios have no spread and none can be told from noise; run `--rounds 3` or more \
             (or `--rounds auto`) for 95% intervals.\n"
        );
    }
    let errors: u64 = cells.iter().map(|c| c.errors).sum();
    let _ = writeln!(md, "sysbench errors over all cells: {errors}.\n");

    for w in &workloads {
        for (title, unit, f, dec) in [
            ("qps", "queries per second", (&|c: &Cell| Some(c.qps)) as &dyn Fn(&Cell) -> Option<f64>, 1usize),
            (
                "CPU/query",
                "mysqld CPU time (utime+stime) per query, microseconds",
                &|c: &Cell| Some(c.cpu_us_per_query),
                2,
            ),
            ("p95 latency", "sysbench's 95th percentile per transaction, ms", &|c: &Cell| Some(c.p95_ms), 2),
        ] {
            let rtxt = "; ratio = configuration / glibc (glibc-direct for the -direct ones), 95% interval";
            let _ = writeln!(md, "## {w}: {title}\n\n{unit}, median over rounds{rtxt}.\n");
            let mut head = vec!["threads".to_string()];
            for c in &configs {
                head.push(c.clone());
                if c != "glibc" && c != "glibc-direct" {
                    head.push(format!("{c}/glibc"));
                }
            }
            let _ = writeln!(md, "| {} |", head.join(" | "));
            let _ = writeln!(md, "|{}", "---:|".repeat(head.len()));
            for &t in threads {
                let mut row = vec![t.to_string()];
                for cfg in &plan.configs {
                    let c = cfg.name();
                    row.push(fmt(med(w, &c, t, f), dec));
                    if c != "glibc" && c != "glibc-direct" {
                        let base = if cfg.direct { "glibc-direct" } else { "glibc" };
                        row.push(ratio(w, &c, base, t, f));
                    }
                }
                let _ = writeln!(md, "| {} |", row.join(" | "));
            }
            md.push('\n');
        }
        if plan.args.direct {
            let _ = writeln!(md, "## {w}: shim overhead\n\nqps under the shim / qps with the same allocator preloaded directly (below 1: the shim costs throughput); CPU/query and p95 latency likewise (above 1: the shim costs CPU, latency); each with its 95% interval over paired rounds.\n");
            let mut head = vec!["threads".to_string()];
            let backends = plan.backends();
            for b in &backends {
                head.push(format!("{b} qps shim/direct"));
                head.push(format!("{b} CPU/query shim/direct"));
                head.push(format!("{b} p95 shim/direct"));
            }
            let _ = writeln!(md, "| {} |", head.join(" | "));
            let _ = writeln!(md, "|{}", "---:|".repeat(head.len()));
            for &t in threads {
                let mut row = vec![t.to_string()];
                for b in &backends {
                    let d = format!("{b}-direct");
                    row.push(ratio(w, b, &d, t, &|c| Some(c.qps)));
                    row.push(ratio(w, b, &d, t, &|c| Some(c.cpu_us_per_query)));
                    row.push(ratio(w, b, &d, t, &|c| Some(c.p95_ms)));
                }
                let _ = writeln!(md, "| {} |", row.join(" | "));
            }
            md.push('\n');
        }
        // allocation calls per query (shim configurations)
        let shim_cfgs: Vec<&String> = configs.iter().filter(|c| !c.ends_with("-direct")).collect();
        let _ = writeln!(md, "## {w}: allocator calls per query\n\nmalloc+calloc+realloc+memalign calls per query in the cell (difference of the shim's cumulative counters between the dumps before and after the cell), median over rounds.\n");
        let _ = writeln!(
            md,
            "| threads | {} |",
            shim_cfgs.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" | ")
        );
        let _ = writeln!(md, "|{}", "---:|".repeat(shim_cfgs.len() + 1));
        for &t in threads {
            let row: Vec<String> =
                shim_cfgs.iter().map(|c| fmt(med(w, c, t, &|x| x.allocs_per_query), 1)).collect();
            let _ = writeln!(md, "| {t} | {} |", row.join(" | "));
        }
        md.push('\n');
    }

    // memory
    let _ = writeln!(md, "## Memory (RSS over each server run)\n\nPeak and final RSS of mariadbd/mysqld over each server run (start, every cell, before shutdown), from the memlog (memlog/r<round>-<config>.csv), median over rounds; the peak's ratio to glibc's (glibc-direct's for the -direct ones) with its 95% interval over paired rounds; final backend-allocated bytes from the last dump (shim only).\n");
    let _ = writeln!(md, "| configuration | peak RSS MiB | peak / glibc | final RSS MiB | backend allocated MiB (last dump) | memlog source |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---|");
    let peaks_of = |c: &str| -> Vec<(u32, f64)> {
        runs.iter()
            .filter(|r| r.config == c)
            .filter_map(|r| r.peak_rss.map(|p| (r.round, p as f64)))
            .collect()
    };
    let mut mem_series: Vec<Series> = Vec::new();
    for (ci, c) in configs.iter().enumerate() {
        let mut peaks = Vec::new();
        let mut finals = Vec::new();
        let mut alloc = Vec::new();
        let mut src = String::new();
        for r in runs.iter().filter(|r| &r.config == c) {
            src = r.memlog_source.clone();
            if let Ok(rows) = mallocshim_format::memlog::read(&r.memlog) {
                if let (Some(p), Some(l)) = (rows.iter().map(|x| x.rss_bytes).max(), rows.last()) {
                    peaks.push(p as f64);
                    finals.push(l.rss_bytes as f64);
                }
                let t0 = rows.first().map(|x| x.unix_ms).unwrap_or(0);
                mem_series.push(Series {
                    label: format!("{c} r{}", r.round),
                    color: ci,
                    thin: r.round > 1,
                    points: rows
                        .iter()
                        .map(|x| ((x.unix_ms - t0) as f64 / 1000.0, x.rss_bytes as f64 / (1u64 << 20) as f64))
                        .collect(),
                });
            }
            if let Some(d) = r.last_dump.as_ref().and_then(|p| read_dump(p).ok()) {
                alloc.push(d.memory.backend_allocated_bytes as f64);
            }
        }
        let base = if c.ends_with("-direct") { "glibc-direct" } else { "glibc" };
        let _ = writeln!(
            md,
            "| {c} | {} | {} | {} | {} | {} |",
            median(&peaks).map(mib).unwrap_or("-".into()),
            if c == base { "-".into() } else { spread::cell(&peaks_of(c), &peaks_of(base)) },
            median(&finals).map(mib).unwrap_or("-".into()),
            median(&alloc).map(mib).unwrap_or("-".into()),
            if src.is_empty() { "-" } else { &src }
        );
    }
    md.push('\n');

    // latency per size class, from the last dump of each shim configuration
    let mut lat_dumps: Vec<(String, usize, Dump)> = Vec::new();
    for (ci, c) in configs.iter().enumerate() {
        if let Some(d) = runs
            .iter()
            .filter(|r| &r.config == c)
            .filter_map(|r| r.last_dump.as_ref())
            .next_back()
            .and_then(|p| read_dump(p).ok())
        {
            lat_dumps.push((c.clone(), ci, d));
        }
    }
    if !lat_dumps.is_empty() {
        let _ = writeln!(md, "## malloc and free latency per size class\n\nFrom the shim's JSON dump after the last cell of each configuration's last round: the percentiles are cumulative over that whole server run (all its workloads and thread counts), from sampled calls (1 in MALLOCSHIM_SAMPLE). ns; \"-\" = no samples.\n");
        for op in ["malloc", "free"] {
            let mut rows: BTreeMap<(u64, String), Vec<String>> = BTreeMap::new();
            for (i, (_, _, d)) in lat_dumps.iter().enumerate() {
                for r in d.size_classes.iter().filter(|r| r.op == op) {
                    let e = rows
                        .entry((r.min_bytes, r.label()))
                        .or_insert_with(|| vec!["-".to_string(); lat_dumps.len() * 3]);
                    e[i * 3] = r.count.to_string();
                    if r.sampled > 0 {
                        e[i * 3 + 1] = r.p50_ns.to_string();
                        e[i * 3 + 2] = r.p99_ns.to_string();
                    }
                }
            }
            let mut head = vec![format!("{op} size")];
            for (c, _, _) in &lat_dumps {
                head.push(format!("{c} calls"));
                head.push(format!("{c} p50"));
                head.push(format!("{c} p99"));
            }
            let _ = writeln!(md, "### {op}\n\n| {} |", head.join(" | "));
            let _ = writeln!(md, "|---|{}", "---:|".repeat(head.len() - 1));
            for ((_, label), v) in rows {
                let _ = writeln!(md, "| {label} | {} |", v.join(" | "));
            }
            md.push('\n');
        }
    }

    // plots
    let mut plots = Vec::new();
    let mut plot_err = Vec::new();
    for w in &workloads {
        let name = format!("qps_{w}.png");
        match super::charts::qps(&out.join(&name), plan, w, cells) {
            Ok(()) => plots.push(name),
            Err(e) => plot_err.push(e),
        }
    }
    if !mem_series.is_empty() {
        let panel = Panel {
            title: "RSS of the server over each run".into(),
            x_desc: "seconds since start".into(),
            y_desc: "MiB".into(),
            x_fmt: plot::fmt_plain,
            y_fmt: plot::fmt_plain,
            series: mem_series,
        };
        match plot::draw(&out.join("rss.png"), "RSS over time", &[panel]) {
            Ok(()) => plots.push("rss.png".into()),
            Err(e) => plot_err.push(e),
        }
    }
    if !lat_dumps.is_empty() {
        let mut panels = Vec::new();
        for op in ["malloc", "free"] {
            let mut series = Vec::new();
            for (c, ci, d) in &lat_dumps {
                for (p, thin) in [("p50", false), ("p99", true)] {
                    let pts: Vec<(f64, f64)> = d
                        .size_classes
                        .iter()
                        .filter(|r| r.op == op && r.sampled > 0)
                        .map(|r| {
                            let x = r.max_bytes.map(|m| (m as f64).log2()).unwrap_or(27.0);
                            let ns = if p == "p50" { r.p50_ns } else { r.p99_ns };
                            (x, (ns.max(1) as f64).log10())
                        })
                        .collect();
                    if !pts.is_empty() {
                        series.push(Series { label: format!("{c} {p}"), color: *ci, thin, points: pts });
                    }
                }
            }
            panels.push(Panel {
                title: format!("{op} latency per size class (upper bound)"),
                x_desc: "size class, bytes".into(),
                y_desc: "ns (log)".into(),
                x_fmt: plot::fmt_bytes_pow2,
                y_fmt: plot::fmt_pow10,
                series,
            });
        }
        match plot::draw(
            &out.join("latency.png"),
            "malloc/free latency per size class (p50 thick, p99 thin)",
            &panels,
        ) {
            Ok(()) => plots.push("latency.png".into()),
            Err(e) => plot_err.push(e),
        }
    }
    let _ = writeln!(md, "## Plots\n");
    for p in &plots {
        let _ = writeln!(md, "![{p}]({p})\n");
    }
    for e in &plot_err {
        let _ = writeln!(md, "- plot failed: {e}");
    }
    if !notes.is_empty() || runs.iter().any(|r| r.exit != "exit status: 0") {
        let _ = writeln!(md, "\n## Notes\n");
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
        for r in runs.iter().filter(|r| r.exit != "exit status: 0") {
            let _ = writeln!(md, "- r{}-{}: server {}", r.round, r.config, r.exit);
        }
    }
    crate::secure_write::write(&out.join("report.md"), md.as_bytes()).map_err(|e| e.to_string())?;
    if let Some(e) = plot_err.first() {
        return Err(e.clone());
    }
    Ok(())
}
