//! `mallocshim report`: one JSON dump (`mallocshim.<pid>.<seq>.json`) as tables — calls, bytes,
//! sampled calls and p50/p99/max latency (ns) per op and size class; the busiest threads; memory
//! — or as `key=value` lines (`--format kv`) or one line of JSON (`--format json`) for scripts.
//! Reads through the format crate; never links the shim.

use crate::pfs::PsThreads;
use crate::table::{describe, heading, mib, opt, pct, Align, Format, Table};
use mallocshim_format::classes::{op_rank, range_label, OP_NAMES};
use mallocshim_format::{Dump, ThreadRow, Total};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
#[command(
    about = "Print one mallocshim JSON dump as tables",
    long_about = "Print a mallocshim JSON dump (mallocshim.<pid>.<seq>.json, written by the shim \
                  with MALLOCSHIM_DUMP_AT_EXIT=1, MALLOCSHIM_DUMP_SIGNAL or \
                  MALLOCSHIM_DUMP_INTERVAL_S) as tables: first the RSS account (rss = live + allocator free + allocator \
                  metadata + non-heap + file + shmem, MiB), then calls, bytes, sampled calls and \
                  p50/p99/max latency (ns) of the busiest op and size classes (--full: every \
                  one); the top threads by calls with their malloc and free p50/p99; then the \
                  backend's own allocated/resident/free (MiB) and, with heap profiles on, the \
                  size classes holding the most live bytes by the heap profile's estimate \
                  (--full: a table of every class). Latencies are sampled (1 call in \
                  sample_every); a row without samples shows \"-\" for its percentiles.\n\n\
                  --format kv prints key=value lines (pid, backend, threads, calls_<op>, \
                  bytes_<op>, the memory figures, trim_*) and --format json the dump on one line, \
                  for scripts.\n\n\
                  With --mysql-socket, the threads are joined with the server's \
                  performance_schema.threads (THREAD_OS_ID = tid) through the mariadb/mysql \
                  client in batch mode, and the thread table gains its NAME, PROCESSLIST_ID and \
                  PROCESSLIST_USER (MariaDB needs performance_schema=ON).\n\n\
                  Exit status: 0 on success, 2 on any error (one line, prefixed \"mallocshim report:\").",
    after_help = "Examples:\n  mallocshim report /tmp/mallocshim.1234.0.json\n  \
                  mallocshim report --full --top 20 --format markdown dump.json\n  \
                  mallocshim report --dir /var/tmp --pid 1234 --format kv\n  \
                  mallocshim report --mysql-socket /run/mysqld/mysqld.sock dump.json"
)]
pub struct Args {
    /// The dump to print (or give --pid, with --dir, for that process's newest dump).
    #[arg(value_name = "DUMP.json", required_unless_present = "pid", conflicts_with = "pid")]
    pub dump: Option<PathBuf>,

    /// Print the newest JSON dump of this process in --dir.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,

    /// Where --pid's dumps are (MALLOCSHIM_DUMP_DIR; default the current directory).
    #[arg(long, value_name = "DIR", requires = "pid", default_value = ".")]
    pub dir: PathBuf,

    /// Output: aligned text, Markdown tables, key=value lines, or the dump as one JSON line.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,

    /// How many threads to list, busiest (most calls) first; 0 hides the list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// Every size class: the whole calls table and the live bytes table (without it, the
    /// 5 busiest classes and one line of the classes holding the most live bytes).
    #[arg(long)]
    pub full: bool,

    #[command(flatten)]
    pub conn: crate::pfs::ConnArgs,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// Aligned columns for a terminal.
    Text,
    /// Markdown tables (pipes), for issues and pull requests.
    Markdown,
    /// key=value lines, one fact each, for shell scripts.
    Kv,
    /// The dump as one line of JSON (normalised through the schema).
    Json,
}

/// The dump's path: the one given, or the newest of `--pid` in `--dir`.
pub fn resolve(args: &Args) -> Result<PathBuf, String> {
    match (&args.dump, args.pid) {
        (Some(p), _) => Ok(p.clone()),
        (None, Some(pid)) => mallocshim_format::newest_dump(&args.dir, pid, "json")
            .map_err(|e| format!("cannot read {}: {e}", args.dir.display()))?
            .ok_or_else(|| format!("no mallocshim.{pid}.*.json in {}", args.dir.display())),
        (None, None) => Err("give a dump, or --pid".into()),
    }
}

pub fn run(args: &Args) -> Result<String, String> {
    let path = resolve(args)?;
    let d = Dump::read(&path).map_err(|e| e.to_string())?;
    let ps = crate::pfs::query(&args.conn)?;
    Ok(match args.format {
        ReportFormat::Text => tables(&d, &path, args, Format::Text, ps.as_ref()),
        ReportFormat::Markdown => tables(&d, &path, args, Format::Markdown, ps.as_ref()),
        ReportFormat::Kv => kv(&d, &path, ps.as_ref()),
        ReportFormat::Json => serde_json::to_string(&d).map_err(|e| e.to_string())? + "\n",
    })
}

/// `key=value` lines: the dump's scalar facts, for scripts.
fn kv(d: &Dump, path: &Path, ps: Option<&PsThreads>) -> String {
    let mut o = String::new();
    let mut put = |k: &str, v: &dyn std::fmt::Display| {
        let _ = writeln!(o, "{k}={v}");
    };
    put("file", &path.display());
    put("pid", &d.pid);
    put("backend", &d.backend);
    put("unix_time_ms", &d.unix_time_ms);
    put("uptime_s", &d.uptime_s);
    put("sample_every", &d.sample_every);
    put("threads", &d.threads.len());
    put("live_threads", &d.live_threads().count());
    put("threads_with_calls", &d.live_threads().filter(|t| t.calls() > 0).count());
    if let Some(ps) = ps {
        put("ps_threads_joined", &d.live_threads().filter(|t| ps.contains_key(&t.tid)).count());
    }
    for op in OP_NAMES {
        put(&format!("calls_{op}"), &d.count(op));
        put(&format!("bytes_{op}"), &d.bytes(op));
    }
    let m = &d.memory;
    put("rss_bytes", &m.rss_bytes);
    put("vsz_bytes", &m.vsz_bytes);
    put("backend_allocated_bytes", &m.backend_allocated_bytes);
    put("backend_resident_bytes", &m.backend_resident_bytes);
    put("backend_free_bytes", &m.backend_free_bytes);
    put("live_bytes", &m.live_bytes);
    put("allocator_free_bytes", &m.allocator_free_bytes);
    put("allocator_metadata_bytes", &m.allocator_metadata_bytes.map_or_else(String::new, |v| v.to_string()));
    put("allocator_resident_bytes", &m.allocator_resident_bytes);
    put("non_heap_bytes", &m.non_heap_bytes);
    put("rss_file_bytes", &m.rss_file_bytes);
    put("rss_shmem_bytes", &m.rss_shmem_bytes);
    let t = &d.trim;
    put("trim_interval_ms", &t.interval_ms);
    put("trim_min_bytes", &t.min_bytes);
    put("trim_runs", &t.runs);
    put("trim_skipped", &t.skipped);
    put("trim_released_bytes", &t.released_bytes);
    put("trim_p50_us", &t.duration_us.p50);
    put("trim_p99_us", &t.duration_us.p99);
    put("trim_max_us", &t.duration_us.max);
    put("trim_last_unix_ms", &t.last_unix_ms);
    o
}

/// Size-class rows shown without `--full`.
const FOLDED: usize = 5;

fn tables(d: &Dump, path: &Path, args: &Args, fmt: Format, ps: Option<&PsThreads>) -> String {
    let (top, full) = (args.top, args.full);
    let mut o = String::new();
    let title = format!("mallocshim dump {}: {}", path.display(), describe(d));
    match fmt {
        Format::Text => o.push_str(&format!("{title}\n\n")),
        Format::Markdown => o.push_str(&format!("## {title}\n\n")),
    }
    account_table(d, fmt, &mut o);
    o.push('\n');
    class_table(d, fmt, full, &mut o);
    if top > 0 {
        thread_table(d, top, fmt, ps, &mut o);
    }
    o.push('\n');
    own_stats_table(d, fmt, &mut o);
    if full {
        live_class_table(d, fmt, &mut o);
    } else {
        live_class_line(d, &mut o);
    }
    o
}

/// Calls by op and size class with their sampled latencies (every row with `full`, else the
/// [`FOLDED`] busiest), then the totals line.
fn class_table(d: &Dump, fmt: Format, full: bool, o: &mut String) {
    let mut rows = d.sorted_classes();
    let n = rows.len();
    if full || n <= FOLDED {
        heading(fmt, "calls by op and size class (latencies in ns, from sampled calls)", o);
    } else {
        rows.sort_by_key(|r| std::cmp::Reverse(r.count));
        rows.truncate(FOLDED);
        heading(
            fmt,
            &format!(
                "the {FOLDED} busiest of {n} op and size classes (latencies in ns, from sampled calls; --full lists all)"
            ),
            o,
        );
    }
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
    for r in rows {
        t.row(vec![
            r.op.clone(),
            r.label(),
            r.count.to_string(),
            r.bytes.to_string(),
            r.sampled.to_string(),
            pct(r.sampled, r.p50_ns),
            pct(r.sampled, r.p99_ns),
            pct(r.sampled, r.max_ns),
        ]);
    }
    t.render(fmt, o);

    let mut tot: Vec<(&String, &Total)> = d.totals.iter().collect();
    tot.sort_by(|a, b| op_rank(a.0).cmp(&op_rank(b.0)));
    let parts: Vec<String> =
        tot.iter().map(|(op, t)| format!("{op} {} calls {} MiB", t.count, mib(t.bytes))).collect();
    o.push_str(&format!("\ntotals: {}\n", if parts.is_empty() { "-".to_string() } else { parts.join(", ") }));
}

/// The `top` threads by calls, with their malloc and free latencies.
fn thread_table(d: &Dump, top: usize, fmt: Format, ps: Option<&PsThreads>, o: &mut String) {
    let mut ts: Vec<(u64, &ThreadRow)> = d.threads.iter().map(|t| (t.calls(), t)).collect();
    ts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.tid.cmp(&b.1.tid)));
    o.push('\n');
    heading(fmt, &format!("top {} of {} threads by calls (ns)", top.min(ts.len()), ts.len()), o);
    let mut cols = vec![("tid", Align::Right), ("name", Align::Left), ("routine", Align::Left)];
    if ps.is_some() {
        cols.push(("performance_schema", Align::Left));
    }
    cols.extend([
        ("state", Align::Left),
        ("calls", Align::Right),
        ("malloc p50", Align::Right),
        ("malloc p99", Align::Right),
        ("free p50", Align::Right),
        ("free p99", Align::Right),
    ]);
    let mut t = Table::new(&cols);
    for (calls, th) in ts.into_iter().take(top) {
        let m = th.ops.get("malloc");
        let f = th.ops.get("free");
        let mut row = vec![
            th.tid.to_string(),
            if th.name.is_empty() { "-".into() } else { th.name.clone() },
            th.start_routine.clone().filter(|r| !r.is_empty()).unwrap_or_else(|| "-".into()),
        ];
        if let Some(ps) = ps {
            let live = th.state == mallocshim_format::dump::STATE_LIVE;
            row.push(ps.get(&th.tid).filter(|_| live).map_or_else(|| "-".into(), |p| p.label()));
        }
        row.extend([
            th.state.clone(),
            calls.to_string(),
            opt(m.map(|x| pct(x.sampled, x.p50_ns))),
            opt(m.map(|x| pct(x.sampled, x.p99_ns))),
            opt(f.map(|x| pct(x.sampled, x.p50_ns))),
            opt(f.map(|x| pct(x.sampled, x.p99_ns))),
        ]);
        t.row(row);
    }
    t.render(fmt, o);
}

/// The backend's own statistics (the account above is what to read).
fn own_stats_table(d: &Dump, fmt: Format, o: &mut String) {
    heading(fmt, &format!("{}'s own statistics (MiB; the account above is what to read)", d.backend), o);
    let m = &d.memory;
    let mut t = Table::new(&[("", Align::Left), ("MiB", Align::Right)]);
    t.row(vec![format!("{} allocated", d.backend), mib(m.backend_allocated_bytes)]);
    t.row(vec![format!("{} resident", d.backend), mib(m.backend_resident_bytes)]);
    t.row(vec![format!("{} free", d.backend), mib(m.backend_free_bytes)]);
    t.render(fmt, o);
    if let Some(note) = own_stats_note(&d.backend) {
        let _ = writeln!(o, "({note})");
    }
}

/// Without `--full`: one line of the classes holding the most live bytes (heap-profile
/// estimate), when the dump has it.
fn live_class_line(d: &Dump, o: &mut String) {
    if d.live_by_class.is_empty() {
        return;
    }
    let mut cs: Vec<_> = d.live_by_class.iter().collect();
    cs.sort_by_key(|c| std::cmp::Reverse(c.live_bytes));
    let shown: Vec<String> = cs
        .iter()
        .take(3)
        .map(|c| format!("{} {}", range_label(c.min_bytes, c.max_bytes), mib(c.live_bytes)))
        .collect();
    let _ = writeln!(
        o,
        "\nlive bytes by size class (heap-profile estimate, MiB), largest: {} (--full lists all {})",
        shown.join(", "),
        cs.len()
    );
}

/// Live bytes by size class, when the dump has the heap profile's estimate.
fn live_class_table(d: &Dump, fmt: Format, o: &mut String) {
    if !d.live_by_class.is_empty() {
        o.push('\n');
        heading(fmt, "live bytes by size class (heap-profile estimate, MiB)", o);
        let mut t = Table::new(&[("size class", Align::Left), ("live MiB", Align::Right)]);
        for c in &d.live_by_class {
            t.row(vec![range_label(c.min_bytes, c.max_bytes), mib(c.live_bytes)]);
        }
        t.render(fmt, o);
    }
}

/// The RSS account first (docs/memory-account.md): where the resident memory is, each part a
/// row, summing to RSS.
fn account_table(d: &Dump, fmt: Format, o: &mut String) {
    let m = &d.memory;
    heading(
        fmt,
        "RSS account (MiB): rss = live + allocator free + allocator metadata + non-heap + file + shmem",
        o,
    );
    let mut t = Table::new(&[("", Align::Left), ("MiB", Align::Right)]);
    t.row(vec!["rss".into(), mib(m.rss_bytes)]);
    t.row(vec!["live (the program's blocks)".into(), mib(m.live_bytes)]);
    t.row(vec!["allocator free (resident, unused)".into(), mib(m.allocator_free_bytes)]);
    t.row(vec!["allocator metadata".into(), m.allocator_metadata_bytes.map_or_else(|| "-".into(), mib)]);
    t.row(vec!["non-heap (buffer pool, stacks, other mmaps)".into(), mib(m.non_heap_bytes)]);
    t.row(vec!["file-backed".into(), mib(m.rss_file_bytes)]);
    t.row(vec!["shared memory".into(), mib(m.rss_shmem_bytes)]);
    t.render(fmt, o);
}

/// How the backend's own figures differ from the account, where they do.
fn own_stats_note(backend: &str) -> Option<&'static str> {
    match backend {
        "glibc" => Some("glibc free is mallinfo2 fordblks: free chunks, resident or not; the account counts resident pages only"),
        "tcmalloc" => Some("tcmalloc free is the page heap's free bytes; the account's allocator free also holds the central and thread caches"),
        "mimalloc" => Some("mimalloc resident and free are its committed bytes; the account counts the pages of its segments found resident"),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
