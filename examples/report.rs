//! `report`: reads the JSON dumps the shim writes (`MALLOCSHIM_DUMP_FORMATS=json`, the default,
//! files `mallocshim.<pid>.<seq>.json`) and prints them as tables. It never links the shim (the
//! crate is a cdylib only); the dump format described in `src/report/json.rs` is the contract.
//!
//! ```text
//! cargo run --release --example report -- DUMP.json               # one dump
//! cargo run --release --example report -- A.json B.json           # A against B, ratios B/A
//! cargo run --release --example report -- --format markdown A.json B.json --labels glibc,jemalloc
//! cargo run --release --example report -- plot --out mem.png glibc.csv jemalloc.csv tcmalloc.csv
//! ```
//!
//! `plot` draws memlog CSVs (`MALLOCSHIM_MEMLOG`) with the chart code it shares with the
//! comparison runner (src/bin/mallocshim-compare/plot.rs). The image is a new file of mode 0600
//! (src/bin/mallocshim-compare/secure_write.rs): a symlink, a directory or another user's file at
//! `--out` is an error and stays untouched; a regular file of ours there is replaced.
//!
//! Exit status: 0 on success, 2 on any error (unreadable file, invalid JSON, a file that is not a
//! version-1 `mallocshim-dump`, bad arguments); errors are one line prefixed `report:`.

use clap::{Parser, Subcommand, ValueEnum};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The ops in the order the shim uses; ops a newer dump adds sort after these, by name.
const OPS: [&str; 5] = ["malloc", "calloc", "realloc", "free", "memalign"];
const FORMAT: &str = "mallocshim-dump";

#[path = "../src/bin/mallocshim-compare/plot.rs"]
mod plot;
#[path = "../src/bin/mallocshim-compare/secure_write.rs"]
mod secure_write;
const VERSION: u64 = 1;

// ---------------------------------------------------------------------------------------------
// Command line

#[derive(Parser, Debug)]
#[command(
    name = "report",
    about = "Print a mallocshim JSON dump as a table, or compare two dumps side by side",
    long_about = "Print a mallocshim JSON dump (mallocshim.<pid>.<seq>.json, written by the shim \
                  with MALLOCSHIM_DUMP_AT_EXIT=1, MALLOCSHIM_DUMP_SIGNAL or \
                  MALLOCSHIM_DUMP_INTERVAL_S) as tables.\n\n\
                  With one dump: calls, bytes, sampled calls and p50/p99/max latency (ns) per op \
                  and size class; the top threads by calls with their malloc and free p50/p99; \
                  then memory (RSS and the backend's allocated/resident/free, in MiB).\n\n\
                  With two dumps A and B: per op and size class, calls and p50/p99 of each side \
                  and the ratios B/A (above 1.00: B is slower). A row present in only one dump \
                  shows \"-\" for the other side. Latencies are sampled (1 call in sample_every); \
                  a row without samples shows \"-\" for its percentiles.\n\n\
                  Exit status: 0 on success, 2 on any error (message prefixed \"report:\").",
    after_help = "Examples:\n  report /tmp/mallocshim.1234.0.json\n  report --top 20 --format markdown dump.json\n  \
                  report glibc.json jemalloc.json --labels glibc,jemalloc\n  \
                  report plot --out mem.png glibc.csv jemalloc.csv tcmalloc.csv",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,

    /// One dump to print, or two dumps (A then B) to compare; ratios are B/A.
    #[arg(value_name = "DUMP.json", num_args = 1..=2, required = true)]
    dumps: Vec<PathBuf>,

    /// Output format: aligned plain-text columns, or GitHub-flavoured Markdown tables.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,

    /// With one dump: how many threads to list, busiest (most calls) first; 0 hides the list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,

    /// With two dumps: names for A and B in the column headers, as "A,B" (default
    /// "<backend>:<pid>" of each dump).
    #[arg(long, value_name = "A,B")]
    labels: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Draw memlog CSVs (MALLOCSHIM_MEMLOG) as one figure: RSS and the backend's allocated bytes
    /// over time (seconds since each file's first line), one line per CSV.
    #[command(after_help = "Example:\n  report plot --out mem.png glibc.csv jemalloc.csv tcmalloc.csv")]
    Plot {
        /// Output image: SVG when the name ends in .svg, PNG otherwise.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Legend labels, comma-separated, one per CSV (default: each file's stem).
        #[arg(long, value_name = "A,B,...")]
        label: Option<String>,
        /// Figure title.
        #[arg(long, default_value = "mallocshim memlog")]
        title: String,
        /// Memlog CSV files (header unix_ms,rss_bytes,...), one line each on the plot.
        #[arg(value_name = "MEMLOG.csv", required = true)]
        csvs: Vec<PathBuf>,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Aligned columns for a terminal.
    Text,
    /// Markdown tables (pipes), for issues and pull requests.
    Markdown,
}

// ---------------------------------------------------------------------------------------------
// Errors

#[derive(Debug)]
enum ReportError {
    /// The file could not be read.
    Read { path: PathBuf, err: std::io::Error },
    /// Not JSON, or JSON whose fields do not have the dump's types.
    Json { path: PathBuf, err: serde_json::Error },
    /// A JSON file that is not a mallocshim dump (`format` missing or different).
    NotADump { path: PathBuf, found: Option<String> },
    /// A mallocshim dump of a version this tool does not read.
    Version { path: PathBuf, found: Option<u64> },
    /// `--labels` not of the form `A,B`.
    Labels(String),
    /// An option that does not apply to the given number of dumps.
    Usage(&'static str),
    /// Writing the output failed (other than a closed pipe).
    Write(std::io::Error),
    /// `plot`: a CSV that cannot be read, or the image cannot be drawn.
    Plot(String),
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Read { path, err } => write!(f, "cannot read {}: {err}", path.display()),
            ReportError::Json { path, err } => {
                write!(f, "{}: not a valid mallocshim dump: {err}", path.display())
            }
            ReportError::NotADump { path, found: Some(s) } => {
                write!(
                    f,
                    "{}: not a mallocshim dump: \"format\" is {s:?}, expected {FORMAT:?}",
                    path.display()
                )
            }
            ReportError::NotADump { path, found: None } => {
                write!(f, "{}: not a mallocshim dump: no \"format\": {FORMAT:?} field", path.display())
            }
            ReportError::Version { path, found: Some(v) } => {
                write!(
                    f,
                    "{}: unsupported dump version {v} (this tool reads version {VERSION})",
                    path.display()
                )
            }
            ReportError::Version { path, found: None } => {
                write!(
                    f,
                    "{}: dump has no numeric \"version\" (this tool reads version {VERSION})",
                    path.display()
                )
            }
            ReportError::Labels(s) => write!(f, "--labels wants two non-empty names \"A,B\", got {s:?}"),
            ReportError::Usage(s) => f.write_str(s),
            ReportError::Write(e) => write!(f, "cannot write output: {e}"),
            ReportError::Plot(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for ReportError {}

// ---------------------------------------------------------------------------------------------
// The dump (src/report/json.rs). Unknown fields are ignored: the format may add fields.

#[derive(Deserialize, Debug)]
#[allow(dead_code)] // every field of the contract is read, not all are printed
struct Dump {
    format: String,
    version: u64,
    pid: u32,
    backend: String,
    unix_time_ms: u64,
    uptime_s: f64,
    sample_every: u64,
    totals: BTreeMap<String, Total>,
    size_classes: Vec<ClassRow>,
    threads: Vec<ThreadRow>,
    memory: Memory,
}

#[derive(Deserialize, Debug, Clone, Copy)]
struct Total {
    count: u64,
    bytes: u64,
}

#[derive(Deserialize, Debug, Clone)]
#[allow(dead_code)]
struct ClassRow {
    op: String,
    min_bytes: u64,
    max_bytes: u64,
    count: u64,
    bytes: u64,
    sampled: u64,
    p50_ns: u64,
    p90_ns: u64,
    p99_ns: u64,
    p999_ns: u64,
    max_ns: u64,
}

#[derive(Deserialize, Debug)]
#[allow(dead_code)]
struct ThreadRow {
    tid: u64,
    name: String,
    state: String,
    ops: BTreeMap<String, ThreadOp>,
}

#[derive(Deserialize, Debug, Clone, Copy)]
#[allow(dead_code)]
struct ThreadOp {
    count: u64,
    bytes: u64,
    sampled: u64,
    p50_ns: u64,
    p99_ns: u64,
    max_ns: u64,
}

#[derive(Deserialize, Debug, Clone, Copy)]
struct Memory {
    rss_bytes: u64,
    vsz_bytes: u64,
    backend_allocated_bytes: u64,
    backend_resident_bytes: u64,
    backend_free_bytes: u64,
}

fn load(path: &Path) -> Result<Dump, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|err| ReportError::Read { path: path.into(), err })?;
    // "format" and "version" first, alone, so a foreign JSON file or another version gets a clear
    // message rather than a missing-field one.
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|err| ReportError::Json { path: path.into(), err })?;
    match v.get("format") {
        Some(serde_json::Value::String(s)) if s == FORMAT => {}
        Some(serde_json::Value::String(s)) => {
            return Err(ReportError::NotADump { path: path.into(), found: Some(s.clone()) })
        }
        Some(other) => {
            return Err(ReportError::NotADump { path: path.into(), found: Some(other.to_string()) })
        }
        None => return Err(ReportError::NotADump { path: path.into(), found: None }),
    }
    match v.get("version").and_then(|x| x.as_u64()) {
        Some(VERSION) => {}
        found => return Err(ReportError::Version { path: path.into(), found }),
    }
    // Parsed again from the text (not the Value) so type errors carry a line and column.
    serde_json::from_str(&text).map_err(|err| ReportError::Json { path: path.into(), err })
}

// ---------------------------------------------------------------------------------------------
// Formatting helpers

/// Sort key of an op: the shim's order, then unknown ops by name.
fn op_rank(op: &str) -> (usize, String) {
    (OPS.iter().position(|o| *o == op).unwrap_or(OPS.len()), op.to_string())
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// A size class as `<=64`, `<=4K`, or `>64M` for the open-ended last class.
fn class_label(min: u64, max: u64) -> String {
    if max == u64::MAX {
        format!(">{}", human_bytes(min.saturating_sub(1)))
    } else {
        format!("<={}", human_bytes(max))
    }
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1u64 << 20) as f64)
}

/// A percentile, or "-" when the row has no samples (the dump writes 0 then).
fn pct(sampled: u64, ns: u64) -> String {
    if sampled == 0 {
        "-".into()
    } else {
        ns.to_string()
    }
}

/// B/A with two decimals; "-" when either side is missing or has no samples.
fn ratio(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> String {
    match (a, b) {
        (Some((sa, va)), Some((sb, vb))) if sa > 0 && sb > 0 && va > 0 => {
            format!("{:.2}", vb as f64 / va as f64)
        }
        _ => "-".into(),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// A table rendered as aligned text or as Markdown.
struct Table {
    head: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(cols: &[(&str, Align)]) -> Table {
        Table {
            head: cols.iter().map(|c| c.0.to_string()).collect(),
            align: cols.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.head.len());
        self.rows.push(cells);
    }

    fn render(&self, fmt: Format, out: &mut String) {
        let esc = |s: &str| if fmt == Format::Markdown { s.replace('|', "\\|") } else { s.to_string() };
        let head: Vec<String> = self.head.iter().map(|s| esc(s)).collect();
        let rows: Vec<Vec<String>> = self.rows.iter().map(|r| r.iter().map(|s| esc(s)).collect()).collect();
        let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String], out: &mut String| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| match self.align[i] {
                    Align::Left => format!("{c:<width$}", width = w[i]),
                    Align::Right => format!("{c:>width$}", width = w[i]),
                })
                .collect();
            match fmt {
                Format::Text => out.push_str(parts.join("  ").trim_end()),
                Format::Markdown => {
                    out.push_str("| ");
                    out.push_str(&parts.join(" | "));
                    out.push_str(" |");
                }
            }
            out.push('\n');
        };
        line(&head, out);
        match fmt {
            Format::Text => {
                let rule: Vec<String> = w.iter().map(|&n| "-".repeat(n)).collect();
                out.push_str(&rule.join("  "));
                out.push('\n');
            }
            Format::Markdown => {
                let rule: Vec<String> = w
                    .iter()
                    .zip(&self.align)
                    .map(|(&n, a)| match a {
                        Align::Left => format!(":{}", "-".repeat(n.max(2) - 1)),
                        Align::Right => format!("{}:", "-".repeat(n.max(2) - 1)),
                    })
                    .collect();
                out.push_str("| ");
                out.push_str(&rule.join(" | "));
                out.push_str(" |\n");
            }
        }
        for r in &rows {
            line(r, out);
        }
    }
}

fn heading(fmt: Format, text: &str, out: &mut String) {
    match fmt {
        Format::Text => {
            out.push_str(text);
            out.push('\n');
        }
        Format::Markdown => {
            out.push_str("### ");
            out.push_str(text);
            out.push_str("\n\n");
        }
    }
}

fn describe(d: &Dump) -> String {
    format!(
        "backend {} pid {}, uptime {:.1}s, sampling 1 call in {}",
        d.backend, d.pid, d.uptime_s, d.sample_every
    )
}

fn sorted_classes(d: &Dump) -> Vec<&ClassRow> {
    let mut v: Vec<&ClassRow> = d.size_classes.iter().collect();
    v.sort_by(|a, b| op_rank(&a.op).cmp(&op_rank(&b.op)).then(a.min_bytes.cmp(&b.min_bytes)));
    v
}

// ---------------------------------------------------------------------------------------------
// One dump

fn single(d: &Dump, path: &Path, top: usize, fmt: Format) -> String {
    let mut o = String::new();
    let title = format!("mallocshim dump {}: {}", path.display(), describe(d));
    match fmt {
        Format::Text => o.push_str(&format!("{title}\n\n")),
        Format::Markdown => o.push_str(&format!("## {title}\n\n")),
    }

    heading(fmt, "calls by op and size class (latencies in ns, from sampled calls)", &mut o);
    let mut t = Table::new(&[
        ("op", Align::Left),
        ("size", Align::Right),
        ("calls", Align::Right),
        ("bytes", Align::Right),
        ("sampled", Align::Right),
        ("p50", Align::Right),
        ("p99", Align::Right),
        ("max", Align::Right),
    ]);
    for r in sorted_classes(d) {
        t.row(vec![
            r.op.clone(),
            class_label(r.min_bytes, r.max_bytes),
            r.count.to_string(),
            r.bytes.to_string(),
            r.sampled.to_string(),
            pct(r.sampled, r.p50_ns),
            pct(r.sampled, r.p99_ns),
            pct(r.sampled, r.max_ns),
        ]);
    }
    t.render(fmt, &mut o);

    let mut tot: Vec<(&String, &Total)> = d.totals.iter().collect();
    tot.sort_by_key(|(op, _)| op_rank(op));
    let parts: Vec<String> =
        tot.iter().map(|(op, t)| format!("{op} {} calls {} MiB", t.count, mib(t.bytes))).collect();
    o.push_str(&format!("\ntotals: {}\n", if parts.is_empty() { "-".to_string() } else { parts.join(", ") }));

    if top > 0 {
        let mut ts: Vec<(u64, &ThreadRow)> =
            d.threads.iter().map(|t| (t.ops.values().map(|o| o.count).sum(), t)).collect();
        ts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.tid.cmp(&b.1.tid)));
        o.push('\n');
        heading(fmt, &format!("top {} of {} threads by calls (ns)", top.min(ts.len()), ts.len()), &mut o);
        let mut t = Table::new(&[
            ("tid", Align::Right),
            ("name", Align::Left),
            ("state", Align::Left),
            ("calls", Align::Right),
            ("malloc p50", Align::Right),
            ("malloc p99", Align::Right),
            ("free p50", Align::Right),
            ("free p99", Align::Right),
        ]);
        for (calls, th) in ts.into_iter().take(top) {
            let m = th.ops.get("malloc");
            let f = th.ops.get("free");
            t.row(vec![
                th.tid.to_string(),
                if th.name.is_empty() { "-".into() } else { th.name.clone() },
                th.state.clone(),
                calls.to_string(),
                opt(m.map(|x| pct(x.sampled, x.p50_ns))),
                opt(m.map(|x| pct(x.sampled, x.p99_ns))),
                opt(f.map(|x| pct(x.sampled, x.p50_ns))),
                opt(f.map(|x| pct(x.sampled, x.p99_ns))),
            ]);
        }
        t.render(fmt, &mut o);
    }

    o.push('\n');
    heading(fmt, "memory (MiB)", &mut o);
    let m = &d.memory;
    let mut t = Table::new(&[("", Align::Left), ("MiB", Align::Right)]);
    t.row(vec!["rss".into(), mib(m.rss_bytes)]);
    t.row(vec!["vsz".into(), mib(m.vsz_bytes)]);
    t.row(vec![format!("{} allocated", d.backend), mib(m.backend_allocated_bytes)]);
    t.row(vec![format!("{} resident", d.backend), mib(m.backend_resident_bytes)]);
    t.row(vec![format!("{} free", d.backend), mib(m.backend_free_bytes)]);
    t.render(fmt, &mut o);
    o
}

// ---------------------------------------------------------------------------------------------
// Two dumps

fn compare(a: &Dump, pa: &Path, b: &Dump, pb: &Path, labels: (String, String), fmt: Format) -> String {
    let (la, lb) = labels;
    let mut o = String::new();
    let title = format!("mallocshim dumps: A = {la}, B = {lb} (ratios B/A; above 1.00 means B is slower)");
    match fmt {
        Format::Text => o.push_str(&format!("{title}\n")),
        Format::Markdown => o.push_str(&format!("## {title}\n\n")),
    }
    let sep = if fmt == Format::Markdown { "\n\n" } else { "\n" };
    o.push_str(&format!("A: {} ({}){sep}", describe(a), pa.display()));
    o.push_str(&format!("B: {} ({}){sep}", describe(b), pb.display()));
    if a.sample_every != b.sample_every {
        o.push_str(&format!(
            "note: sampling differs (1 in {} against 1 in {}); percentiles are still comparable, sampled counts are not{sep}",
            a.sample_every, b.sample_every
        ));
    }
    if fmt == Format::Text {
        o.push('\n');
    }

    type Key = ((usize, String), u64, u64);
    let mut rows: BTreeMap<Key, (Option<&ClassRow>, Option<&ClassRow>)> = BTreeMap::new();
    for r in &a.size_classes {
        rows.entry((op_rank(&r.op), r.min_bytes, r.max_bytes)).or_default().0 = Some(r);
    }
    for r in &b.size_classes {
        rows.entry((op_rank(&r.op), r.min_bytes, r.max_bytes)).or_default().1 = Some(r);
    }
    let h = |what: &str, l: &str| format!("{what} {l}");
    let (c_a, c_b, p50a, p50b, p99a, p99b) =
        (h("calls", &la), h("calls", &lb), h("p50", &la), h("p50", &lb), h("p99", &la), h("p99", &lb));
    let mut t = Table::new(&[
        ("op", Align::Left),
        ("size", Align::Right),
        (&c_a, Align::Right),
        (&c_b, Align::Right),
        (&p50a, Align::Right),
        (&p50b, Align::Right),
        ("p50 B/A", Align::Right),
        (&p99a, Align::Right),
        (&p99b, Align::Right),
        ("p99 B/A", Align::Right),
    ]);
    for (((_, op), min, max), (ra, rb)) in &rows {
        let p50 = |r: Option<&ClassRow>| r.map(|r| (r.sampled, r.p50_ns));
        let p99 = |r: Option<&ClassRow>| r.map(|r| (r.sampled, r.p99_ns));
        t.row(vec![
            op.clone(),
            class_label(*min, *max),
            opt(ra.map(|r| r.count)),
            opt(rb.map(|r| r.count)),
            opt(ra.map(|r| pct(r.sampled, r.p50_ns))),
            opt(rb.map(|r| pct(r.sampled, r.p50_ns))),
            ratio(p50(*ra), p50(*rb)),
            opt(ra.map(|r| pct(r.sampled, r.p99_ns))),
            opt(rb.map(|r| pct(r.sampled, r.p99_ns))),
            ratio(p99(*ra), p99(*rb)),
        ]);
    }
    heading(fmt, "calls and latency (ns) by op and size class", &mut o);
    t.render(fmt, &mut o);

    o.push('\n');
    heading(fmt, "memory (MiB)", &mut o);
    let mut t =
        Table::new(&[("", Align::Left), (&la, Align::Right), (&lb, Align::Right), ("B/A", Align::Right)]);
    let (ma, mb) = (&a.memory, &b.memory);
    for (name, x, y) in [
        ("rss", ma.rss_bytes, mb.rss_bytes),
        ("vsz", ma.vsz_bytes, mb.vsz_bytes),
        ("backend allocated", ma.backend_allocated_bytes, mb.backend_allocated_bytes),
        ("backend resident", ma.backend_resident_bytes, mb.backend_resident_bytes),
        ("backend free", ma.backend_free_bytes, mb.backend_free_bytes),
    ] {
        t.row(vec![name.into(), mib(x), mib(y), ratio(Some((1, x)), Some((1, y)))]);
    }
    t.render(fmt, &mut o);
    o
}

// ---------------------------------------------------------------------------------------------

/// `report plot`: reads every CSV, then draws them on one figure; prints the image's path.
fn plot_cmd(out: &Path, label: Option<&str>, title: &str, csvs: &[PathBuf]) -> Result<String, ReportError> {
    let labels: Vec<String> = match label {
        Some(l) => {
            let v: Vec<String> = l.split(',').map(|s| s.trim().to_string()).collect();
            if v.len() != csvs.len() || v.iter().any(|s| s.is_empty()) {
                return Err(ReportError::Plot(format!(
                    "--label wants {} non-empty names separated by commas (one per CSV), got {l:?}",
                    csvs.len()
                )));
            }
            v
        }
        None => csvs
            .iter()
            .map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default())
            .collect(),
    };
    let mut files = Vec::new();
    for (p, l) in csvs.iter().zip(labels) {
        let rows = plot::read_memlog(p).map_err(ReportError::Plot)?;
        if rows.is_empty() {
            return Err(ReportError::Plot(format!("{}: no data lines after the header", p.display())));
        }
        files.push((l, rows));
    }
    plot::draw(out, title, &plot::memlog_figure(&files)).map_err(ReportError::Plot)?;
    Ok(format!("wrote {} ({} lines)\n", out.display(), files.len()))
}

fn run(args: Args) -> Result<String, ReportError> {
    if let Some(Cmd::Plot { out, label, title, csvs }) = &args.cmd {
        return plot_cmd(out, label.as_deref(), title, csvs);
    }
    let dumps: Vec<Dump> = args.dumps.iter().map(|p| load(p)).collect::<Result<_, _>>()?;
    match dumps.as_slice() {
        [d] => {
            if args.labels.is_some() {
                return Err(ReportError::Usage("--labels needs two dumps to compare"));
            }
            Ok(single(d, &args.dumps[0], args.top, args.format))
        }
        [a, b] => {
            let labels = match &args.labels {
                Some(s) => match s.split_once(',') {
                    Some((x, y)) if !x.trim().is_empty() && !y.trim().is_empty() && !y.contains(',') => {
                        (x.trim().to_string(), y.trim().to_string())
                    }
                    _ => return Err(ReportError::Labels(s.clone())),
                },
                None => (format!("{}:{}", a.backend, a.pid), format!("{}:{}", b.backend, b.pid)),
            };
            Ok(compare(a, &args.dumps[0], b, &args.dumps[1], labels, args.format))
        }
        _ => Err(ReportError::Usage("give one dump, or two to compare")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let res = run(args).and_then(|text| {
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
            // A reader that stops early (`report x.json | head`) is not an error.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            r => r.map_err(ReportError::Write),
        }
    });
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("report: {e}");
            ExitCode::from(2)
        }
    }
}
