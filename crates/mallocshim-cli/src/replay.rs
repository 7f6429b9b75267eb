//! `mallocshim replay FILE`: replays an allocation trace through each backend and answers which
//! keeps RSS lowest at what cost. Builds the plan once (`mallocshim_replay::plan`), then per
//! backend starts this program again as the hidden `replay-engine` under
//! `LD_PRELOAD=libmallocshim.so MALLOCSHIM_BACKEND=X` (the engine is `mallocshim_replay::engine`),
//! samples its RSS every 50 ms from /proc/PID/status, reads the engine's figures (one JSON line)
//! and the shim's two dumps around the replay (their interval: latency of the replayed calls),
//! and prints the table, the verdict, and optionally the JSON answer and the RSS plot.
//!
//! Owns the runs and the report; must not decode the trace itself nor link the shim.
//! Long because: the runs and their report (table, verdict, latency, plot) share the `Answer`
//! and the options; the report's renderers are the part to split out when it grows further.

use crate::dump_cmd::Fail;
use crate::plot::{self, Panel, Series};
use crate::table::{heading, mib, opt, Align, Format, Table};
use mallocshim_format::classes::range_label;
use mallocshim_format::Dump;
use mallocshim_replay::answer::{self, Answer, BackendAnswer, EngineOut, LatencyRow};
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
#[command(
    about = "Replay an allocation trace through each backend: RSS, fragmentation, CPU and latency per backend",
    long_about = "Replays an allocation trace (MALLOCSHIM_RECORD=FILE, mallocshim record) in a fresh process \
                  per backend, under libmallocshim.so: one thread per recorded thread, each call in its \
                  recorded order, every free after its allocation, the threads' interleaving kept to within \
                  1 ms of recorded time (--order), every page of each block written once, the pre-window \
                  heap allocated first. Per backend: peak RSS, RSS at the end and after a \
                  trim (MiB, minus the replayer's baseline), RSS over live bytes, calls/s, CPU per call, \
                  p50/p99 latency per op and size class, replay errors (must be 0); then the verdict. \
                  See docs/replay.md.\n\n\
                  The verdict weighs peak RSS and RSS at the end of the window (what \"RSS keeps \
                  growing\" asks); it is qualified when the trace dropped more than 1% of the window's \
                  calls, and refused above 25% without --force.\n\n\
                  Exit status: 0 on success, 1 when a replay had errors (the answer is printed), 2 on \
                  bad arguments, an unreadable, truncated or corrupt trace, a trace that dropped more \
                  than 25% of its calls (without --force), or a replay process that \
                  failed (one line, prefixed \"mallocshim replay:\").",
    after_help = "Example:\n  mallocshim replay mysqld.trace --backends glibc,jemalloc --json answer.json --plot rss.svg"
)]
pub struct Args {
    /// The trace file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Backends to replay through, in order (the first is the verdict's reference).
    #[arg(long, value_delimiter = ',', default_value = "glibc,jemalloc,tcmalloc,mimalloc")]
    pub backends: Vec<String>,
    /// fast: as fast as possible; recorded: sleep to the recorded timestamps (decay and
    /// periodic trims behave as recorded).
    #[arg(long, value_parser = ["fast", "recorded"], default_value = "fast")]
    pub pace: String,
    /// recorded: threads keep the recorded interleaving to within 1 ms of recorded time (no
    /// call of a millisecond before every call of the earlier ones: phases apart in the
    /// recording stay apart); threads: each thread keeps its own order only (every free after
    /// its allocation), faster, but phases may overlap that did not.
    #[arg(long, value_parser = ["recorded", "threads"], default_value = "recorded")]
    pub order: String,
    /// Write the answer as JSON here (a new file).
    #[arg(long, value_name = "OUT.json")]
    pub json: Option<PathBuf>,
    /// Draw RSS over replay time per backend here: SVG when it ends in .svg, PNG otherwise
    /// (OUT.png).
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    pub plot: Option<PathBuf>,
    /// Give a verdict even when the trace dropped more than 25% of its window's calls (the
    /// verdict is qualified above 1%).
    #[arg(long)]
    pub force: bool,
    /// Output format of the tables.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// The hidden engine subcommand's arguments (started by `replay` itself).
#[derive(clap::Args, Debug)]
pub struct EngineArgs {
    #[arg(long)]
    pub plan: PathBuf,
    #[arg(long, value_parser = ["fast", "recorded"], default_value = "fast")]
    pub pace: String,
    #[arg(long, value_parser = ["recorded", "threads"], default_value = "recorded")]
    pub order: String,
}

/// The engine process: one JSON line on stdout, or one error line.
pub fn engine(a: &EngineArgs) -> Result<String, String> {
    let o = mallocshim_replay::engine::run(&a.plan, a.pace == "recorded", a.order == "recorded")?;
    serde_json::to_string(&o).map(|s| s + "\n").map_err(|e| e.to_string())
}

fn fail(code: u8, msg: String) -> Fail {
    Fail { code, msg }
}

/// A private directory for the plan and the dumps, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, String> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        for i in 0..100 {
            let p = base.join(format!("mallocshim-replay.{}.{i}", std::process::id()));
            if std::fs::DirBuilder::new().mode(0o700).create(&p).is_ok() {
                return Ok(Scratch(p));
            }
        }
        Err(format!("cannot create a private directory in {}", base.display()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn run(a: &Args) -> Result<String, Fail> {
    for b in &a.backends {
        if mallocshim_format::backends::by_name(b).is_none() {
            return Err(fail(
                2,
                format!("unknown backend {b:?} (one of {})", mallocshim_format::BACKENDS.join(", ")),
            ));
        }
    }
    let shim = mallocshim_cli::shim_lib::find().map_err(|e| fail(2, e))?;
    let plan = mallocshim_replay::plan::build(&a.file).map_err(|e| fail(2, e))?;
    if plan.cut_short {
        eprintln!(
            "mallocshim replay: {}: the trace was {}; replaying up to there",
            a.file.display(),
            plan.end_reason
        );
    }
    let (events, dropped) = (plan.summary.events, plan.summary.dropped);
    let pct = answer::dropped_pct(events, dropped);
    if pct > answer::DROPS_REFUSE_PCT && !a.force {
        return Err(fail(
            2,
            format!(
                "{}: the recorder dropped {pct:.1}% of the window's calls ({dropped} of {}): a replay of the rest is not \
                 the workload, no verdict (--force gives one, qualified); record again with a core to spare (docs/record.md)",
                a.file.display(),
                events + dropped
            ),
        ));
    }
    let scratch = Scratch::new().map_err(|e| fail(2, e))?;
    let plan_path = scratch.0.join("plan.bin");
    plan.write(&plan_path).map_err(|e| fail(2, e))?;
    let mut backends = Vec::new();
    for b in &a.backends {
        let dir = scratch.0.join(b);
        std::fs::create_dir(&dir).map_err(|e| fail(2, format!("{}: {e}", dir.display())))?;
        let mut ans = run_one(&shim, &plan_path, &dir, b, [&a.pace, &a.order])
            .map_err(|e| fail(2, format!("{b}: {e}")))?;
        ans.engine.trace_end = plan.end_reason.clone();
        backends.push(ans);
    }
    let verdict = answer::qualify(answer::verdict(&backends), events, dropped);
    let answer = Answer {
        format: answer::FORMAT.into(),
        version: answer::VERSION,
        trace: a.file.display().to_string(),
        recorded_backend: plan.backend.clone(),
        pace: a.pace.clone(),
        trace_live_curve: plan.curve.clone(),
        backends,
        trace_reordered: plan.reordered,
        verdict,
    };
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&answer).map_err(|e| fail(2, e.to_string()))? + "\n";
        mallocshim_cli::secure_write::write(p, text.as_bytes())
            .map_err(|e| fail(2, format!("{}: {e}", p.display())))?;
    }
    if let Some(p) = &a.plot {
        plot::draw(p, &format!("RSS over replay time: {}", a.file.display()), &[rss_panel(&answer)])
            .map_err(|e| fail(2, e))?;
    }
    let text = render(&answer, a.format);
    let errors: u64 = answer.backends.iter().map(|b| b.engine.errors.total()).sum();
    if errors > 0 {
        crate::print(&text).map_err(|e| fail(2, e))?;
        return Err(fail(1, format!("{errors} replay errors (see the errors column and docs/replay.md)")));
    }
    Ok(text)
}

/// The environment a replay process must not inherit: another recording, other dumps.
const CLEARED: [&str; 6] = [
    "MALLOCSHIM_RECORD",
    "MALLOCSHIM_DUMP_AT_EXIT",
    "MALLOCSHIM_DUMP_INTERVAL_S",
    "MALLOCSHIM_MEMLOG",
    "MALLOCSHIM_LIB",
    "MALLOCSHIM_DUMP_KEEP",
];

/// One engine process; `mode` is `[pace, order]`.
fn run_one(
    shim: &Path,
    plan: &Path,
    dir: &Path,
    backend: &str,
    mode: [&str; 2],
) -> Result<BackendAnswer, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("replay-engine").arg("--plan").arg(plan).args(["--pace", mode[0], "--order", mode[1]]);
    for k in CLEARED {
        cmd.env_remove(k);
    }
    cmd.env("LD_PRELOAD", shim)
        .env("MALLOCSHIM_BACKEND", backend)
        .env("MALLOCSHIM_DUMP_DIR", dir)
        .env("MALLOCSHIM_DUMP_FORMATS", "json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the replay process: {e}"))?;
    let pid = child.id();
    let started = std::sync::Arc::new(std::sync::OnceLock::<Instant>::new());
    let out = child.stdout.take().ok_or("no stdout")?;
    let st = started.clone();
    let reader = std::thread::spawn(move || {
        let mut last = String::new();
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if line == "start" {
                let _ = st.set(Instant::now());
            } else {
                last = line;
            }
        }
        last
    });
    let mut err = child.stderr.take().ok_or("no stderr")?;
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut samples: Vec<(Instant, u64)> = Vec::new();
    let status = loop {
        if let Some(rss) = mallocshim_proc::vm_rss(pid) {
            samples.push((Instant::now(), rss));
        }
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for the replay process: {e}")),
        }
    };
    let last = reader.join().unwrap_or_default();
    let stderr = errs.join().unwrap_or_default();
    if !status.success() {
        let line = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        return Err(format!("replay process failed ({status}): {line}"));
    }
    let engine: EngineOut =
        serde_json::from_str(&last).map_err(|e| format!("unreadable replay result ({e}): {last:?}"))?;
    let t0 = started.get().copied().ok_or("the replay process never started its replay")?;
    let rss: Vec<(f64, u64)> =
        samples.iter().filter(|s| s.0 >= t0).map(|&(t, r)| ((t - t0).as_secs_f64(), r)).collect();
    Ok(BackendAnswer::new(engine, rss, latency(dir, pid)))
}

/// Per op and size class, the replayed calls' latency: the interval between the dump before
/// the replay and the one after. Empty when the dumps are missing or profiling was off.
fn latency(dir: &Path, pid: u32) -> Vec<LatencyRow> {
    let files = mallocshim_format::dumps_of(dir, pid, "json").unwrap_or_default();
    let (Some(a), Some(b)) = (files.first(), files.get(1)) else { return Vec::new() };
    let (Ok(a), Ok(b)) = (Dump::read(a), Dump::read(b)) else { return Vec::new() };
    let iv = crate::interval::interval(&a, &b);
    iv.classes
        .iter()
        .map(|(((_, op), min, max), r)| LatencyRow {
            op: op.clone(),
            min_bytes: *min,
            max_bytes: *max,
            calls: r.calls,
            p50_ns: r.p50_ns,
            p99_ns: r.p99_ns,
        })
        .collect()
}

fn rss_panel(a: &Answer) -> Panel {
    Panel {
        title: "RSS (VmRSS, every 50 ms)".into(),
        x_desc: "seconds since the replay started".into(),
        y_desc: "MiB".into(),
        x_fmt: plot::fmt_plain,
        y_fmt: plot::fmt_plain,
        series: a
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| Series {
                label: b.engine.backend.clone(),
                color: i,
                thin: false,
                points: b.rss_samples.iter().map(|&(t, r)| (t, r as f64 / (1u64 << 20) as f64)).collect(),
            })
            .collect(),
    }
}

fn render(a: &Answer, fmt: Format) -> String {
    let mut o = String::new();
    let b0 = a.backends.first().map(|b| &b.engine);
    let order = a.backends.first().map_or("", |b| b.engine.order.as_str());
    heading(fmt, &format!("Replay of {} ({} pace, {order} order)", a.trace, a.pace), &mut o);
    if let Some(e) = b0 {
        o += &format!(
            "{} events, {} threads, window {:.1} s (recorded under {}, ended: {}, {} calls dropped, {} reordered); \
             pre-window heap {} blocks, {} MiB\n",
            e.events,
            e.threads,
            e.window_s,
            a.recorded_backend,
            e.trace_end,
            e.trace_dropped,
            a.trace_reordered,
            e.pre_window_blocks,
            mib(e.pre_window_bytes)
        );
        o += &format!(
            "RSS below is the allocator's: the process's minus its baseline before the replay \
             ({} MiB, of which {} MiB the replayer's own maps, not malloc)\n\n",
            mib(e.baseline_rss_bytes),
            mib(e.replayer_bytes)
        );
    }
    let mut t = Table::new(&[
        ("backend", Align::Left),
        ("peak RSS MiB", Align::Right),
        ("end RSS MiB", Align::Right),
        ("trimmed MiB", Align::Right),
        ("live end MiB", Align::Right),
        ("peak live MiB", Align::Right),
        ("peak RSS/live", Align::Right),
        ("end RSS/live", Align::Right),
        ("calls/s", Align::Right),
        ("CPU ns/call", Align::Right),
        ("wall s", Align::Right),
        ("x recorded", Align::Right),
        ("errors", Align::Right),
    ]);
    for b in &a.backends {
        let e = &b.engine;
        t.row(vec![
            e.backend.clone(),
            mib(b.net_peak_rss_bytes),
            mib(b.net_end_rss_bytes),
            mib(b.net_trimmed_rss_bytes),
            mib(e.live_end_bytes),
            mib(e.replay_peak_live_bytes),
            format!("{:.2}", b.peak_rss_per_live),
            format!("{:.2}", b.end_rss_per_live),
            format!("{:.0}", b.calls_per_s),
            format!("{:.0}", b.cpu_ns_per_call),
            format!("{:.2}", e.wall_s),
            format!("{:.1}", b.speedup),
            e.errors.total().to_string(),
        ]);
    }
    t.render(fmt, &mut o);
    o += "\n";
    latency_table(a, fmt, &mut o);
    o += &format!("\nverdict: {}\n", a.verdict);
    o
}

fn latency_table(a: &Answer, fmt: Format, o: &mut String) {
    let mut keys: Vec<(String, u64, Option<u64>)> = Vec::new();
    for b in &a.backends {
        for r in &b.latency {
            let k = (r.op.clone(), r.min_bytes, r.max_bytes);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    if keys.is_empty() {
        return;
    }
    keys.sort_by_key(|k| (mallocshim_format::classes::op_rank(&k.0).0, k.1));
    heading(fmt, "Latency of the replayed calls, p50/p99 ns (sampled; the shim's dumps)", o);
    let mut cols: Vec<(String, Align)> = vec![("op".into(), Align::Left), ("size".into(), Align::Left)];
    for b in &a.backends {
        cols.push((b.engine.backend.clone(), Align::Right));
    }
    let cols_ref: Vec<(&str, Align)> = cols.iter().map(|(s, al)| (s.as_str(), *al)).collect();
    let mut t = Table::new(&cols_ref);
    for (op, min, max) in keys {
        let mut row = vec![op.clone(), range_label(min, max)];
        for b in &a.backends {
            let r = b.latency.iter().find(|r| r.op == op && r.min_bytes == min && r.max_bytes == max);
            row.push(r.map_or("-".into(), |r| format!("{}/{}", opt(r.p50_ns), opt(r.p99_ns))));
        }
        t.row(row);
    }
    t.render(fmt, o);
}
