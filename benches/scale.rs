//! Scaling benchmark without a server (issue 36, item 1): what the shim adds per malloc/free pair
//! at T threads, one per CPU, against the same allocator preloaded directly, and how that grows
//! with T. It owns the runner and the report; the workload is `benches/scale.c`; it measures
//! only, asserting nothing but that every run ran the allocator it claims.
//!
//! `cargo bench --bench scale -- [--threads 1,2,4,8,16] [--backends glibc,jemalloc,...]
//! [--mix all,small] [--configs shim,shim-profile-off] [--rounds 5] [--target-ms 200]
//! [--iters N] [--nopin] [--json PATH] [--md PATH] [--plot PATH] [--shim PATH] [--before PATH]
//! [--prog PATH] [--from JSON]`
//!
//! Per backend the configurations: `direct` (the backend's library preloaded without the shim;
//! glibc: no preload; always measured), `shim` (libmallocshim.so at all defaults) and
//! `shim-profile-off` (`MALLOCSHIM_PROFILE=off`: routing only); `--configs` may add
//! `shim-heap-profiles-off` (`MALLOCSHIM_PROF_SAMPLE_BYTES=0`: counting and latency sampling,
//! no heap profiles), to tell the two apart, and two that magnify one path each to show what
//! it does under threads: `shim-every-call-timed` (heap profiles off, `MALLOCSHIM_SAMPLE=1`:
//! the latency path on every call) and `shim-heap-8k` (`MALLOCSHIM_PROF_SAMPLE_BYTES=8192`:
//! one heap-profile sample in ~6 pairs of the `small` mix). With `--before PATH` (an earlier
//! build of libmallocshim.so), `before`, `before-every-call-timed` and `before-heap-8k` run that
//! build as `shim`, `shim-every-call-timed` and `shim-heap-8k` do, in the same rounds: a change's
//! before and after in one run.
//! Per mix (`all`: mariadbd's size mix with its
//! 64 KiB-2 MiB per-query buffers; `small`: its classes up to 32 KiB; see scale.c) and thread
//! count T (default 1, 2, 4, 8, 16 capped to the CPUs this process may use; `--threads` is
//! taken as given), every thread runs the same number of pairs: `--iters`, else calibrated once
//! per mix so that glibc direct at T=1 takes `--target-ms` of wall time. Rounds are
//! interleaved: round r runs every (T, configuration) of a mix once, in an order rotated by r,
//! one process per run.
//!
//! Reported per metric (`cpu`: each thread's CPU time, which a busy shared machine leaves
//! intact; `wall`: CLOCK_MONOTONIC, which also sees waits on a futex): the median ns per pair
//! (mean over threads of time / pairs) over rounds; what the shim adds per pair at each T (the
//! median over rounds of shim - direct of the same round); and the ratio added(T) / added(1)
//! (goal: at most 1.10 at 16 threads, every backend). Output: Markdown on stdout and in `--md`
//! (default target/bench/scale.md), JSON in `--json` (default target/bench/scale.json, schema
//! [`Report`]); with `--plot`, a chart per mix (PNG, or SVG by the extension: benches/scale_parts/plot.rs)
//! of the direct ns per pair and of what the shim adds, against T. `--from JSON` measures nothing:
//! it reads an earlier run's JSON (the 16-core machine's, say) and writes its Markdown and chart.
//! `--shim` and `--prog` take prebuilt files (the 16-core machine has no cargo or
//! gcc: scripts/scale-device.sh); otherwise both are built.
//!
//! Long because: the options, the interleaved runner and the report in two forms (Markdown and
//! JSON) of one bench; the C program is apart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use serde::{Deserialize, Serialize};

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "scale_parts/plot.rs"]
mod plot;
use common::median_or_nan;

/// The configurations `--configs` may name; `direct` is always measured, first (the base).
const KINDS: [&str; 9] = [
    "direct",
    "shim",
    "shim-profile-off",
    "shim-heap-profiles-off",
    "shim-every-call-timed",
    "shim-heap-8k",
    "before",
    "before-every-call-timed",
    "before-heap-8k",
];

/// The shim's environment of each configuration of [`KINDS`] but `direct`.
fn kind_env(kind: &str) -> &'static [(&'static str, &'static str)] {
    match kind {
        "shim-profile-off" => &[("MALLOCSHIM_PROFILE", "off")],
        "shim-heap-profiles-off" => &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "0")],
        "shim-every-call-timed" | "before-every-call-timed" => {
            &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "0"), ("MALLOCSHIM_SAMPLE", "1")]
        }
        "shim-heap-8k" | "before-heap-8k" => &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "8192")],
        _ => &[],
    }
}
/// `cpu`: the thread's CPU time per pair (blind to time a thread waits descheduled, so a busy
/// shared machine still gives the cost of the code); `wall`: CLOCK_MONOTONIC ns per pair.
const METRICS: [&str; 2] = ["cpu", "wall"];

/// The bench's options, from the command line.
struct Opts {
    threads: Vec<u32>,
    backends: Vec<String>,
    mixes: Vec<String>,
    kinds: Vec<&'static str>,
    rounds: usize,
    target_ms: u64,
    iters: Option<u64>,
    pin: bool,
    json: PathBuf,
    md: PathBuf,
    plot: Option<PathBuf>,
    from: Option<PathBuf>,
    shim: Option<PathBuf>,
    before: Option<PathBuf>,
    prog: Option<PathBuf>,
}

/// The JSON form of one run of the bench (`--json`), read back by `--from`.
#[derive(Serialize, Deserialize)]
struct Report {
    schema: String,
    machine: String,
    cpus: usize,
    load_before: String,
    load_after: String,
    command: String,
    rounds: usize,
    pinned: bool,
    cells: Vec<Cell>,
}

/// One (mix, metric, backend, configuration, T): ns per pair and, for shim rows, what the shim
/// adds.
#[derive(Serialize, Deserialize)]
struct Cell {
    mix: String,
    metric: String,
    backend: String,
    config: String,
    threads: u32,
    /// Pairs per thread in each run.
    iters: u64,
    /// Median over rounds of the blocks freed by another thread than their allocator's.
    xfer_frees: f64,
    /// Median over rounds of the mean over threads of ns per pair.
    ns_per_pair: f64,
    samples: Vec<f64>,
    /// Shim rows: median over rounds of (this - direct) ns per pair, same round and T.
    added_ns: Option<f64>,
    added_samples: Vec<f64>,
    /// Shim rows: added_ns / added_ns at T = 1 (when T = 1 was measured).
    added_ratio_to_t1: Option<f64>,
}

fn fail(msg: &str) -> ! {
    eprintln!("mallocshim scale bench: {msg}");
    std::process::exit(2)
}

fn list(v: &str) -> Vec<String> {
    v.split([',', ' ']).filter(|s| !s.is_empty()).map(String::from).collect()
}

fn number(flag: &str, v: &str) -> u64 {
    v.parse().unwrap_or_else(|_| fail(&format!("{flag} wants a number, not {v:?}")))
}

fn parse_opts() -> Opts {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as u32;
    let out = common::target_dir().join("bench");
    let mut o = Opts {
        threads: [1, 2, 4, 8, 16].into_iter().filter(|&t| t <= cpus.max(1)).collect(),
        backends: common::BACKENDS.iter().map(|s| s.to_string()).collect(),
        mixes: vec!["all".into(), "small".into()],
        kinds: KINDS[..3].to_vec(),
        rounds: 5,
        target_ms: 200,
        iters: None,
        pin: true,
        json: out.join("scale.json"),
        md: out.join("scale.md"),
        plot: None,
        from: None,
        shim: None,
        before: None,
        prog: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| fail(&format!("{a} wants a value")));
        match a.as_str() {
            "--bench" => {}
            "--nopin" => o.pin = false,
            "--threads" => o.threads = list(&val()).iter().map(|t| number("--threads", t) as u32).collect(),
            "--backends" => o.backends = list(&val()),
            "--mix" => o.mixes = list(&val()),
            "--configs" => o.kinds = configs(&val()),
            "--rounds" => o.rounds = number("--rounds", &val()).max(1) as usize,
            "--target-ms" => o.target_ms = number("--target-ms", &val()).max(1),
            "--iters" => o.iters = Some(number("--iters", &val()).max(1)),
            "--json" => o.json = val().into(),
            "--md" => o.md = val().into(),
            "--plot" => o.plot = Some(val().into()),
            "--from" => o.from = Some(val().into()),
            "--shim" => o.shim = Some(val().into()),
            "--before" => o.before = Some(val().into()),
            "--prog" => o.prog = Some(val().into()),
            other => fail(&format!("unknown argument {other:?} (see the header of benches/scale.rs)")),
        }
    }
    if o.threads.is_empty() || o.threads.iter().any(|&t| !(1..=256).contains(&t)) {
        fail("--threads wants counts between 1 and 256");
    }
    if let Some(b) = o.backends.iter().find(|b| !common::BACKENDS.contains(&b.as_str())) {
        fail(&format!("unknown backend {b:?} (known: {})", common::BACKENDS.join(", ")));
    }
    if let Some(m) = o.mixes.iter().find(|m| *m != "all" && *m != "small") {
        fail(&format!("unknown mix {m:?} (all or small)"));
    }
    if o.before.is_none() && o.kinds.iter().any(|k| k.starts_with("before")) {
        fail("the configurations before* want --before PATH (an earlier build of libmallocshim.so)");
    }
    o
}

/// `--configs`: the named configurations of [`KINDS`], `direct` first whether named or not.
fn configs(v: &str) -> Vec<&'static str> {
    let named = list(v);
    if let Some(c) = named.iter().find(|c| !KINDS.contains(&c.as_str())) {
        fail(&format!("unknown configuration {c:?} (known: {})", KINDS.join(", ")));
    }
    KINDS.into_iter().filter(|k| *k == "direct" || named.iter().any(|c| c == k)).collect()
}

fn build_prog() -> PathBuf {
    let gcc = common::require("gcc");
    let dir = common::target_dir().join("bench");
    std::fs::create_dir_all(&dir).expect("create target/bench");
    let dst = dir.join("scale");
    let src = common::root().join("benches/scale.c");
    let o = Command::new(gcc).args(["-O2", "-g", "-Wall", "-pthread", "-o"]).arg(&dst).arg(&src).output();
    let o = o.expect("run gcc");
    assert!(o.status.success(), "gcc scale.c failed:\n{}", String::from_utf8_lossy(&o.stderr));
    dst
}

/// What one run printed: ns per pair by [`METRICS`], and the blocks another thread freed.
struct Run {
    ns: [f64; 2],
    xfer: u64,
}

struct Runner {
    prog: PathBuf,
    shim: PathBuf,
    before: Option<PathBuf>,
    pin: bool,
}

impl Runner {
    fn command(&self, backend: &str, kind: &str, mix: &str, t: u32, iters: u64) -> Command {
        let mut c = common::plain(&self.prog);
        c.args([mix, &t.to_string(), &iters.to_string()]);
        if !self.pin {
            c.arg("nopin");
        }
        if kind == "direct" {
            if let Some(lib) = common::direct_lib(backend) {
                c.env("LD_PRELOAD", common::require_file(lib));
            }
        } else {
            let lib = match &self.before {
                Some(b) if kind.starts_with("before") => b,
                _ => &self.shim,
            };
            c.env("LD_PRELOAD", lib).env("MALLOCSHIM_BACKEND", backend);
            c.envs(kind_env(kind).iter().copied());
        }
        c
    }

    /// One run; checks that `malloc` resolved into the object the configuration claims.
    fn run(&self, backend: &str, kind: &str, mix: &str, t: u32, iters: u64) -> Run {
        let what = format!("{backend} {kind} mix={mix} T={t} iters={iters}");
        let o = common::run_ok(self.command(backend, kind, mix, t, iters), &what);
        let (out, err) = (common::stdout(&o), common::stderr(&o));
        let lib = err.lines().find_map(|l| l.strip_prefix("malloc_lib=")).unwrap_or("?");
        let want = match (kind, backend) {
            ("direct", "glibc") => "libc.so".to_string(),
            ("direct", b) => format!("lib{b}"),
            (k, _) => match &self.before {
                Some(b) if k.starts_with("before") => b.to_string_lossy().into_owned(),
                _ => "libmallocshim".to_string(),
            },
        };
        assert!(lib.contains(&want), "{what}: malloc resolves into {lib}, not {want}\n{err}");
        let line =
            out.lines().find(|l| l.starts_with("ns_per_pair=")).unwrap_or_else(|| panic!("{what}: {out}"));
        let num = |k: &str| -> f64 {
            let v = common::kv_str(line, k).and_then(|v| v.parse().ok());
            v.unwrap_or_else(|| panic!("{what}: no {k} in {line:?}"))
        };
        Run { ns: [num("cpu_ns_per_pair"), num("ns_per_pair")], xfer: num("xfer_frees") as u64 }
    }
}

/// Pairs per thread for `mix`: glibc direct at T=1 takes about `target_ms`.
fn calibrate(r: &Runner, mix: &str, target_ms: u64) -> u64 {
    let probe = 20_000;
    let ns = r.run("glibc", "direct", mix, 1, probe).ns[1].max(1.0);
    ((target_ms as f64 * 1e6 / ns) as u64).clamp(probe, 50_000_000)
}

/// The samples of one mix: (metric index, T, backend index, kind index) -> ns per pair, one per
/// round; metric index 2 holds the blocks freed by another thread.
type Samples = BTreeMap<(usize, u32, usize, usize), Vec<f64>>;

fn measure(r: &Runner, o: &Opts, mix: &str, iters: u64) -> Samples {
    let mut s = Samples::new();
    let runs: Vec<(usize, usize)> =
        (0..o.backends.len()).flat_map(|b| (0..o.kinds.len()).map(move |k| (b, k))).collect();
    for round in 0..o.rounds {
        for &t in &o.threads {
            for i in 0..runs.len() {
                let (b, k) = runs[(i + round) % runs.len()];
                let run = r.run(&o.backends[b], o.kinds[k], mix, t, iters);
                assert!(
                    run.xfer > 0 || iters < 64,
                    "{} {} T={t}: no block was handed over",
                    o.backends[b],
                    o.kinds[k]
                );
                for (m, v) in run.ns.into_iter().chain([run.xfer as f64]).enumerate() {
                    s.entry((m, t, b, k)).or_default().push(v);
                }
            }
        }
        eprintln!("scale: mix {mix} round {}/{} done", round + 1, o.rounds);
    }
    s
}

fn cells(o: &Opts, mix: &str, iters: u64, s: &Samples) -> Vec<Cell> {
    let mut v = Vec::new();
    for (m, metric) in METRICS.iter().enumerate() {
        for (b, backend) in o.backends.iter().enumerate() {
            for (k, kind) in o.kinds.iter().enumerate() {
                let added_at = |t: u32| -> Vec<f64> {
                    let (mine, direct) = (&s[&(m, t, b, k)], &s[&(m, t, b, 0)]);
                    mine.iter().zip(direct).map(|(a, d)| a - d).collect()
                };
                let base = o.threads.contains(&1).then(|| median_or_nan(added_at(1)));
                for &t in &o.threads {
                    let samples = s[&(m, t, b, k)].clone();
                    let added_samples = if k == 0 { Vec::new() } else { added_at(t) };
                    let added_ns = (k > 0).then(|| median_or_nan(&added_samples));
                    v.push(Cell {
                        mix: mix.to_string(),
                        metric: metric.to_string(),
                        backend: backend.clone(),
                        config: kind.to_string(),
                        threads: t,
                        iters,
                        xfer_frees: median_or_nan(&s[&(2, t, b, k)]),
                        ns_per_pair: median_or_nan(&samples),
                        samples,
                        added_ns,
                        added_samples,
                        added_ratio_to_t1: added_ns.zip(base).map(|(a, b1)| a / b1),
                    });
                }
            }
        }
    }
    v
}

fn markdown(o: &Opts, rep: &Report) -> String {
    let mut md = String::new();
    let cols: String = o.threads.iter().map(|t| format!(" T={t} |")).collect();
    let rule: String = o.threads.iter().map(|_| "---:|").collect();
    writeln!(md, "# Scaling without a server (benches/scale.rs)\n").unwrap();
    writeln!(
        md,
        "- machine: {} ({} CPUs); load before {}, after {}",
        rep.machine, rep.cpus, rep.load_before, rep.load_after
    )
    .unwrap();
    writeln!(
        md,
        "- command: `{}`; {} interleaved rounds; threads pinned: {}",
        rep.command, rep.rounds, rep.pinned
    )
    .unwrap();
    for (mix, metric) in o.mixes.iter().flat_map(|m| METRICS.map(|x| (m, x))) {
        let mine: Vec<&Cell> = rep.cells.iter().filter(|c| &c.mix == mix && c.metric == metric).collect();
        let iters = mine.first().map_or(0, |c| c.iters);
        writeln!(
            md,
            "\n## mix `{mix}`, {metric}: ns per pair, median of {} rounds ({iters} pairs per thread)\n",
            rep.rounds
        )
        .unwrap();
        writeln!(md, "| backend | config |{cols}\n|---|---|{rule}").unwrap();
        for row in mine.chunks(o.threads.len()) {
            let vals: String = row.iter().map(|c| format!(" {:.2} |", c.ns_per_pair)).collect();
            writeln!(md, "| {} | {} |{vals}", row[0].backend, row[0].config).unwrap();
        }
        writeln!(
            md,
            "\n## mix `{mix}`, {metric}: what the shim adds per pair (ns, median of per-round shim - direct; min..max)\n\n\
             | backend | config |{cols} added(T={0})/added(T=1) |\n|---|---|{rule}---:|",
            o.threads.last().unwrap()
        )
        .unwrap();
        for row in mine.chunks(o.threads.len()).filter(|r| r[0].config != "direct") {
            let vals: String = row.iter().map(|c| format!(" {} |", spread(c))).collect();
            let ratio =
                row.last().and_then(|c| c.added_ratio_to_t1).map_or("-".into(), |r| format!("{r:.2}"));
            writeln!(md, "| {} | {} |{vals} {ratio} |", row[0].backend, row[0].config).unwrap();
        }
        md.push_str(&verdict(&mine));
    }
    md
}

/// The goal of issue 36 for the `shim` rows of one table: added(T) / added(1) at the largest T
/// measured, at most 1.10 (the goal is stated at T = 16).
fn verdict(cells: &[&Cell]) -> String {
    let tmax = cells.iter().map(|c| c.threads).max().unwrap_or(1);
    let mut parts = Vec::new();
    for c in cells.iter().filter(|c| c.config == "shim" && c.threads == tmax && tmax > 1) {
        let r = c.added_ratio_to_t1.unwrap_or(f64::NAN);
        parts.push(format!("{} {r:.3} ({})", c.backend, if r <= 1.10 { "met" } else { "missed" }));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!(
        "\nGoal, shim at defaults, added(T={tmax})/added(T=1) <= 1.10 (stated at T=16): {}.\n",
        parts.join(", ")
    )
}

fn spread(c: &Cell) -> String {
    let lo = c.added_samples.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = c.added_samples.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    format!("{:+.2} ({lo:+.1}..{hi:+.1})", c.added_ns.unwrap_or(f64::NAN))
}

fn loadavg() -> String {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{}, Linux {}", model.unwrap_or("?"), kernel.trim())
}

/// How this run was started: `cargo bench --bench scale -- ARGS` under cargo (argv[0] in
/// target/*/deps), else the program's own name (the device's copy) and its arguments.
fn command_line() -> String {
    let mut args = std::env::args();
    let argv0 = args.next().unwrap_or_default();
    let start = if argv0.contains("/deps/scale-") {
        "cargo bench --bench scale --".to_string()
    } else {
        argv0.rsplit('/').next().unwrap_or("scale").to_string()
    };
    args.filter(|a| a != "--bench").fold(start, |c, a| c + " " + &a)
}

fn main() {
    let mut o = parse_opts();
    let rep = match &o.from {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", f.display())));
            let rep: Report = serde_json::from_str(&text)
                .unwrap_or_else(|e| fail(&format!("{}: not a scale report: {e}", f.display())));
            // The tables follow the report's own thread counts and mixes.
            o.threads = rep
                .cells
                .iter()
                .map(|c| c.threads)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            o.mixes.clear();
            for c in &rep.cells {
                if !o.mixes.contains(&c.mix) {
                    o.mixes.push(c.mix.clone());
                }
            }
            rep
        }
        None => run_all(&o),
    };
    let md = markdown(&o, &rep);
    print!("{md}");
    for p in [&o.json, &o.md] {
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).expect("create the output folder");
        }
    }
    std::fs::write(&o.md, &md).unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", o.md.display())));
    if o.from.is_none() {
        let json = serde_json::to_string_pretty(&rep).expect("serialise the report");
        std::fs::write(&o.json, json)
            .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", o.json.display())));
        eprintln!("scale: wrote {} and {}", o.md.display(), o.json.display());
    } else {
        eprintln!("scale: wrote {}", o.md.display());
    }
    if let Some(p) = &o.plot {
        plot::draw(p, &rep).unwrap_or_else(|e| fail(&e));
        eprintln!("scale: drew {}", p.display());
    }
}

/// Measures every mix; the report.
fn run_all(o: &Opts) -> Report {
    let load_before = loadavg();
    let shim =
        o.shim.clone().map(|p| common::require_file(&p.to_string_lossy())).unwrap_or_else(common::shim);
    let prog = o.prog.clone().map(|p| common::require_file(&p.to_string_lossy())).unwrap_or_else(build_prog);
    let before = o.before.as_ref().map(|p| common::require_file(&p.to_string_lossy()));
    let r = Runner { prog, shim, before, pin: o.pin };
    let mut all = Vec::new();
    for mix in &o.mixes {
        for b in &o.backends {
            for &k in &o.kinds {
                r.run(b, k, mix, 2, 2_000);
            }
        }
        let iters = o.iters.unwrap_or_else(|| calibrate(&r, mix, o.target_ms));
        let s = measure(&r, o, mix, iters);
        all.extend(cells(o, mix, iters, &s));
    }
    Report {
        schema: "mallocshim-scale/1".into(),
        machine: machine(),
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        load_before,
        load_after: loadavg(),
        command: command_line(),
        rounds: o.rounds,
        pinned: o.pin,
        cells: all,
    }
}
