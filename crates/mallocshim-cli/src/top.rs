//! `mallocshim top PID`: a live view of one process under the shim. Every --interval seconds
//! it takes a dump through `mallocshim dump` (SIGUSR1 to that pid) and shows the interval since
//! the previous one (the subtraction `diff` uses): calls/s and p50/p99 by op, size class and
//! thread. Plain text; the screen is cleared between views only when stdout is a terminal.

use crate::dump_cmd::{dump, Fail};
use crate::interval::{interval, render};
use crate::table::{describe, Format};
use mallocshim_format::Dump;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
#[command(
    about = "Live view of one process: per-interval calls/s and latencies by op, size class and thread",
    long_about = "Take a dump of process PID every --interval seconds (as `mallocshim dump` does: \
                  SIGUSR1 to that pid, then its new JSON dump) and show the interval since the \
                  previous dump: calls/s from the exact counts and p50/p99 latency (ns) from the \
                  subtracted sampled buckets, by op and size class and by live thread, and RSS. \
                  Runs until interrupted, or for --count intervals. The screen is cleared between \
                  views only when stdout is a terminal. Each view costs the process one dump; the \
                  dump files stay in its dump directory.\n\n\
                  Exit status: 0 after --count views or at the end of the process; 1 the process \
                  could not be dumped (see mallocshim dump); 2 bad arguments.",
    after_help = "Example:\n  mallocshim top $(pgrep -o -x mariadbd) --interval 5"
)]
pub struct Args {
    /// The process to watch.
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// Seconds between dumps.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    pub interval: f64,
    /// Stop after this many views (default: run until interrupted).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Where the process writes its dumps (default: from its environment).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Thread rows shown per view.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub threads: usize,
    /// Seconds to wait for each dump.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub timeout: f64,
}

fn take(args: &Args) -> Result<Dump, Fail> {
    let files = dump(args.pid, args.dir.as_deref(), args.timeout)?;
    let json = files.iter().find(|p| p.extension().is_some_and(|e| e == "json")).ok_or_else(|| Fail {
        code: 1,
        msg: format!(
            "process {} writes no JSON dump (set MALLOCSHIM_DUMP_FORMATS to include json)",
            args.pid
        ),
    })?;
    Dump::read(json).map_err(|e| Fail { code: 1, msg: e.to_string() })
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
    let tty = std::io::stdout().is_terminal();
    let mut prev = take(args)?;
    let mut shown = 0u64;
    loop {
        let next_at = Instant::now() + Duration::from_secs_f64(args.interval);
        std::thread::sleep(next_at.saturating_duration_since(Instant::now()));
        let cur = match take(args) {
            Ok(d) => d,
            Err(f) if shown > 0 && !std::path::Path::new(&format!("/proc/{}", args.pid)).exists() => {
                eprintln!("mallocshim top: process {} exited", args.pid);
                let _ = f;
                return Ok(String::new());
            }
            Err(f) => return Err(f),
        };
        let mut o = String::new();
        if tty {
            o.push_str("\x1b[H\x1b[2J");
        }
        o.push_str(&format!("mallocshim top: {}\n\n", describe(&cur)));
        render(&interval(&prev, &cur), Format::Text, args.threads, &mut o);
        o.push('\n');
        crate::print(&o).map_err(|msg| Fail { code: 2, msg })?;
        shown += 1;
        if args.count.is_some_and(|c| shown >= c) {
            return Ok(String::new());
        }
        prev = cur;
    }
}
