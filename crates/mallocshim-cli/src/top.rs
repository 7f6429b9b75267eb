//! `mallocshim top PID`: a live view of one process under the shim. Every --interval seconds
//! it reads the process's dump JSON through the control channel (`ctl_client`: no file is
//! written) and shows the interval since the previous one (the subtraction `diff` uses): calls/s
//! and p50/p99 by size class and by thread, busiest first, cut to the terminal (80x24 by
//! default; what does not fit is one summary line per table). On a terminal it clears the
//! screen between views and reads keys in raw mode (`q` quits; the mode is restored on every
//! exit). Without a channel it falls back to `mallocshim dump` and removes the files it
//! triggered, unless --keep.

use crate::dump_cmd::{dump, Fail};
use crate::interval::{class_row, interval, rate, thread_row, Interval, Row};
use crate::table::{describe, mib, Align, Format, Table};
use mallocshim_format::Dump;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
#[command(
    about = "Live view of one process: per-interval calls/s and latencies by size class and thread",
    long_about = "Read the dump of process PID every --interval seconds through its control channel \
                  (docs/control.md: nothing is written to disk) and show the interval since the \
                  previous one: calls/s from the exact counts and p50/p99 latency (ns) from the \
                  subtracted sampled buckets, by op and size class and by live thread (busiest \
                  first), and RSS. The view fits the terminal (80x24 when its size is unknown): \
                  rows that do not fit are summarised in one line per table. On a terminal, q \
                  quits. Runs until q, an interrupt, --count views or the end of the process. \
                  Without a channel (a process without the shim's thread) each view is one \
                  `mallocshim dump`, whose files are removed unless --keep.\n\n\
                  With --by thread|connection|user the view is who holds the heap instead: the \
                  bytes held by the live blocks each thread allocated (the heap profile's sampled \
                  estimate, charged to the allocating thread whichever thread frees; ± one \
                  standard error), the bytes it allocated per second over the interval (exact \
                  counts), and with --mysql-socket each thread's connection from the server's \
                  information_schema.PROCESSLIST (id, user@host, db, command, MEMORY_USED, the \
                  statement's first characters), read at each view; server threads keep their \
                  names. The first such view comes at once.\n\n\
                  Exit status: 0 after q, --count views or at the end of the process; 1 the \
                  process could not be read (see mallocshim dump); 2 bad arguments (also: the \
                  server's connections could not be read through --mysql-socket).",
    after_help = "Examples:\n  mallocshim top $(pgrep -o -x mariadbd) --interval 5\n  \
                  mallocshim top $(pgrep -o -x mariadbd) --by connection --mysql-socket /run/mysqld/mysqld.sock"
)]
pub struct Args {
    /// The process to watch.
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// Seconds between views.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    pub interval: f64,
    /// Stop after this many views (default: run until q or interrupted).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Where the process writes its dumps (the fallback without a channel).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// At most this many thread rows per view (fewer when the terminal is smaller).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub threads: usize,
    /// Seconds to wait for each dump.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub timeout: f64,
    /// Keep the dump files of the fallback (without a channel no file is written anyway).
    #[arg(long)]
    pub keep: bool,
    /// Show who holds the heap instead: bytes held by the live blocks each thread, connection
    /// or user allocated (heap profiles; connection and user need --mysql-socket), most first.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub by: Option<crate::held::By>,
    #[command(flatten)]
    pub conn: crate::pfs::ConnArgs,
}

/// One `--by` view of `cur` (`prev`: the previous dump, None for the first view).
fn held_view(
    args: &Args,
    by: crate::held::By,
    prev: Option<&Dump>,
    cur: &Dump,
    tty: bool,
) -> Result<String, Fail> {
    use crate::held as h;
    let conns = match by {
        h::By::Thread => Default::default(),
        _ => crate::processlist::query(&args.conn)
            .map_err(|e| Fail { code: 2, msg: format!("the server's connections: {e}") })?
            .unwrap_or_default(),
    };
    crate::processlist::check_server(args.pid, &conns).map_err(|msg| Fail { code: 2, msg })?;
    let rows = h::rows(&h::held(prev, cur), &conns, by);
    let secs = prev.map(|p| cur.uptime_s - p.uptime_s).filter(|s| *s > 0.0);
    let (lines, cols) = term_size();
    Ok(h::view(cur, &rows, &conns, by, secs, lines.saturating_sub(1), cols, tty))
}

fn take(args: &Args) -> Result<Dump, Fail> {
    let t = Duration::from_secs_f64(args.timeout);
    if let Some(s) = crate::ctl_client::connect(args.pid, t.min(Duration::from_secs(2)))? {
        let body = crate::ctl_client::request_on(s, args.pid, "json", t)?;
        return Dump::parse(&body).map_err(|e| Fail { code: 1, msg: format!("process {}: {e}", args.pid) });
    }
    let files = dump(args.pid, args.dir.as_deref(), args.timeout)?;
    let json = files.iter().find(|p| p.extension().is_some_and(|e| e == "json")).cloned();
    let d = json.as_deref().map(Dump::read);
    if !args.keep {
        for f in &files {
            let _ = std::fs::remove_file(f);
        }
    }
    match d {
        Some(Ok(d)) => Ok(d),
        Some(Err(e)) => Err(Fail { code: 1, msg: e.to_string() }),
        None => Err(Fail {
            code: 1,
            msg: format!(
                "process {} writes no JSON dump (set MALLOCSHIM_DUMP_FORMATS to include json)",
                args.pid
            ),
        }),
    }
}

/// The terminal's rows and columns (80x24 when unknown).
fn term_size() -> (usize, usize) {
    // SAFETY: TIOCGWINSZ into a zeroed local winsize.
    let mut ws: libc::winsize = unsafe { core::mem::zeroed() };
    let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_row > 0 && ws.ws_col > 0;
    if ok {
        (ws.ws_row as usize, ws.ws_col as usize)
    } else {
        (24, 80)
    }
}

/// The terminal in raw mode (no echo, no line buffering; signals kept) while it lives.
struct Raw(Option<libc::termios>);

impl Raw {
    fn enter() -> Raw {
        if !std::io::stdin().is_terminal() {
            return Raw(None);
        }
        // SAFETY: tcgetattr/tcsetattr on fd 0 with local, initialised termios structs.
        unsafe {
            let mut old: libc::termios = core::mem::zeroed();
            if libc::tcgetattr(0, &mut old) != 0 {
                return Raw(None);
            }
            let mut raw = old;
            raw.c_lflag &= !(libc::ICANON | libc::ECHO);
            raw.c_cc[libc::VMIN] = 0;
            raw.c_cc[libc::VTIME] = 0;
            libc::tcsetattr(0, libc::TCSANOW, &raw);
            Raw(Some(old))
        }
    }

    /// Waits up to `d` for a key; true when it was q (or Q).
    fn quit_within(&self, d: Duration, stop: &std::sync::atomic::AtomicBool) -> bool {
        let end = Instant::now() + d;
        loop {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if self.0.is_none() {
                std::thread::sleep(left.min(Duration::from_millis(100)));
                continue;
            }
            let mut p = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; a read of one byte into a local.
            unsafe {
                if libc::poll(&mut p, 1, left.as_millis().min(100) as i32) > 0 {
                    let mut b = 0u8;
                    if libc::read(0, (&mut b as *mut u8).cast(), 1) == 1 && (b == b'q' || b == b'Q') {
                        return true;
                    }
                }
            }
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            // SAFETY: restoring the attributes read in `enter`.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &old) };
        }
    }
}

fn size_label(min: u64, max: Option<u64>) -> String {
    let h = |b: u64| match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    };
    match max {
        None => format!(">{}", h(min.saturating_sub(1))),
        Some(m) => format!("<={}", h(m)),
    }
}

/// The line under a table: what did not fit, nothing when every row did, or that the interval
/// had no calls (an idle process).
fn rest_line(all: usize, shown: usize, what: &str, rate: String) -> String {
    match all - shown {
        _ if all == 0 => "(no calls in this interval)\n".into(),
        0 => String::new(),
        n => format!("({n} more {what}, {rate} calls/s)\n"),
    }
}

/// One view, at most `rows` lines of at most `cols` characters.
fn view(cur: &Dump, iv: &Interval, rows: usize, cols: usize, max_threads: usize, tty: bool) -> String {
    let s = iv.elapsed_s;
    let mut head = format!(
        "{}\nRSS {} MiB, live {} MiB; interval {s:.1}s{}\n",
        describe(cur),
        mib(iv.rss_bytes.1),
        mib(iv.live_bytes.1),
        if tty { "; q quits" } else { "" }
    );
    // Fixed lines: 2 of header, then per table a heading, 2 of column header, 1 of summary.
    let budget = rows.saturating_sub(2 + 2 * 4 + 1);
    let mut classes: Vec<(&crate::interval::ClassKey, &Row)> = iv.classes.iter().collect();
    classes.sort_by_key(|c| std::cmp::Reverse(c.1.calls));
    let threads: Vec<_> = iv.threads.iter().take(max_threads).collect();
    let c_n = classes.len().min(budget.saturating_sub(threads.len().min(budget / 2)).max(budget / 2));
    let t_n = threads.len().min(budget - c_n.min(budget));
    let mut t = Table::new(&[
        ("op", Align::Left),
        ("size", Align::Right),
        ("calls/s", Align::Right),
        ("sampled", Align::Right),
        ("p50 ns", Align::Right),
        ("p99 ns", Align::Right),
    ]);
    for (((_, op), min, max), r) in classes.iter().take(c_n) {
        t.row(class_row(op, size_label(*min, *max), r, s, false));
    }
    head.push_str("by op and size class, busiest first\n");
    t.render(Format::Text, &mut head);
    let rest: u64 = classes.iter().skip(c_n).map(|c| c.1.calls).sum();
    head.push_str(&rest_line(classes.len(), c_n, "size-class rows", rate(rest, s)));
    let mut t = Table::new(&[
        ("tid", Align::Right),
        ("thread", Align::Left),
        ("op", Align::Left),
        ("calls/s", Align::Right),
        ("p50 ns", Align::Right),
        ("p99 ns", Align::Right),
    ]);
    for (tid, name, op, r) in threads.iter().take(t_n) {
        let name: String = name.chars().take(24).collect();
        t.row(thread_row(*tid, name, op, r, s));
    }
    head.push_str("by live thread, busiest first\n");
    t.render(Format::Text, &mut head);
    let rest: u64 = iv.threads.iter().skip(t_n).map(|t| t.3.calls).sum();
    head.push_str(rest_line(iv.threads.len(), t_n, "thread rows", rate(rest, s)).trim_end());
    head.lines().take(rows).map(|l| l.chars().take(cols).collect::<String>()).collect::<Vec<_>>().join("\n")
}

pub fn run(args: &Args) -> Result<String, Fail> {
    if !(args.interval.is_finite() && args.interval > 0.0) {
        return Err(Fail {
            code: 2,
            msg: format!("--interval wants seconds above 0, got {}", args.interval),
        });
    }
    if args.count == Some(0) {
        return Err(Fail { code: 2, msg: "--count wants at least 1".into() });
    }
    if matches!(args.by, Some(b) if b != crate::held::By::Thread) && args.conn.mysql_socket.is_none() {
        return Err(Fail {
            code: 2,
            msg: "--by connection and --by user need --mysql-socket (the server's connections name the threads)".into(),
        });
    }
    let tty = std::io::stdout().is_terminal();
    static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let _ = ctrlc::set_handler(|| STOP.store(true, std::sync::atomic::Ordering::Relaxed));
    let raw = Raw::enter();
    let mut prev = take(args)?;
    let mut shown = 0u64;
    let show = |body: String| {
        let clear = if tty { "\x1b[H\x1b[2J" } else { "" };
        crate::print(&format!("{clear}{body}\n")).map_err(|msg| Fail { code: 2, msg })
    };
    if let Some(by) = args.by {
        // Who holds what needs no interval: the first view comes at once.
        show(held_view(args, by, None, &prev, tty)?)?;
        shown += 1;
        if args.count.is_some_and(|c| shown >= c) {
            return Ok(String::new());
        }
    }
    loop {
        if raw.quit_within(Duration::from_secs_f64(args.interval), &STOP) {
            return Ok(String::new());
        }
        let cur = match take(args) {
            Ok(d) => d,
            Err(_) if !std::path::Path::new(&format!("/proc/{}", args.pid)).exists() => {
                eprintln!("mallocshim top: process {} exited", args.pid);
                return Ok(String::new());
            }
            Err(f) => return Err(f),
        };
        let (rows, cols) = term_size();
        show(match args.by {
            None => view(&cur, &interval(&prev, &cur), rows.saturating_sub(1), cols, args.threads, tty),
            Some(by) => held_view(args, by, Some(&prev), &cur, tty)?,
        })?;
        shown += 1;
        if args.count.is_some_and(|c| shown >= c) {
            return Ok(String::new());
        }
        prev = cur;
    }
}
