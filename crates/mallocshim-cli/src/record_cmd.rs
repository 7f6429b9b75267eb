//! `mallocshim record PID --seconds N [--out FILE] [--max-bytes B]` (issue 24): asks a running
//! process, through its control channel (`record` row, docs/control.md), to record every
//! allocator call for N seconds into FILE (by default a new name in the process's dump
//! directory), waits for the window to close and prints what the trace holds (calls, threads,
//! size, bytes per call, why it ended), with a warning and its remedy when more than
//! [`DROP_WARN_PCT`] of the calls were dropped. A file the process cannot create is named with
//! the process's user and the reason. `--stop` ends a window early. The trace format is
//! `mallocshim_format::trace` (docs/trace-format.md). Owns nothing else.

use crate::ctl_client::{request, request_if_open};
use crate::dump_cmd::Fail;
use mallocshim_format::trace;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `mallocshim record PID`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Record a window of a running process's allocator calls into a trace file (for mallocshim replay)",
    long_about = "Through the control channel (docs/control.md), make process PID record every \
                  allocator call of every thread (op, size, alignment, thread, block id, time; no \
                  data) for --seconds into --out (zstd, docs/trace-format.md), then print what \
                  the trace holds. The process creates the file itself, as its own user: by \
                  default in its dump directory (MALLOCSHIM_DUMP_DIR, else TMPDIR, else /tmp) as \
                  mallocshim.<pid>.<unix seconds>.mst; a file it cannot create is named with its \
                  user and the reason. More than 1% of the window's calls dropped (the shim's \
                  thread fell behind) is a warning with its remedy. The window ends early at \
                  --max-bytes, when the process exits, or with --stop. Cost and safety: \
                  docs/record.md.\n\n\
                  Exit status: 0 recorded; 1 refused, no channel or no complete trace; 2 bad arguments.",
    after_help = "Examples:\n  mallocshim record $(pgrep -o -x mariadbd) --seconds 30\n  \
                  mallocshim record $(pgrep -o -x mariadbd) --seconds 30 --out /var/tmp/mysqld.mst"
)]
pub struct RecordArgs {
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// Seconds to record (0: until --stop or the process exits; the command does not wait then).
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub seconds: u64,
    /// The trace file, created 0600 by the process itself, as its user (default: the process's
    /// dump directory, mallocshim.<pid>.<unix seconds>.mst).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Size budget of the file (bytes, or a K, M or G suffix; at least 64K).
    #[arg(long, value_name = "B", default_value = "1G")]
    pub max_bytes: String,
    /// End the process's window now.
    #[arg(long)]
    pub stop: bool,
    /// Seconds to wait for the channel and for each reply.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub timeout: f64,
}

fn fail(code: u8, msg: String) -> Fail {
    Fail { code, msg }
}

/// A byte count with an optional K, M or G suffix.
fn parse_size(v: &str) -> Option<u64> {
    let (num, shift) = match v.as_bytes().last()? {
        b'K' | b'k' => (&v[..v.len() - 1], 10),
        b'M' | b'm' => (&v[..v.len() - 1], 20),
        b'G' | b'g' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    num.parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn absolute(p: &Path) -> Result<PathBuf, Fail> {
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| fail(1, e.to_string()))?.join(p)
    };
    if p.to_str().is_none_or(|s| s.contains(char::is_whitespace)) {
        return Err(fail(2, format!("--out {}: the path must be UTF-8 without spaces", p.display())));
    }
    Ok(p)
}

pub fn run(a: &RecordArgs) -> Result<String, Fail> {
    if a.stop {
        return request(a.pid, "record stop", a.timeout);
    }
    let max = parse_size(&a.max_bytes)
        .filter(|&b| b >= 64 << 10)
        .ok_or_else(|| fail(2, format!("--max-bytes {}: expected a size of at least 64K", a.max_bytes)))?;
    let out = match a.out.as_deref() {
        Some(p) => absolute(p)?,
        None => default_out(a.pid)?,
    };
    let reply = request(a.pid, &format!("record {} {} {max}", out.display(), a.seconds), a.timeout)
        .map_err(|f| Fail { msg: not_created(a.pid, &out, &f.msg).unwrap_or(f.msg), ..f })?;
    // The process may record elsewhere (a path taken: PATH.<pid>; it is PATH.part until
    // whole); its reply names the file.
    let named = reply
        .lines()
        .find_map(|l| l.strip_prefix("recording="))
        .map(|p| PathBuf::from(p.trim()))
        .filter(|p| p.is_absolute());
    let out = match named {
        Some(n) if n != out => {
            eprintln!(
                "mallocshim record: {} is taken; process {} records to {}",
                out.display(),
                a.pid,
                n.display()
            );
            n
        }
        _ => out,
    };
    if a.seconds == 0 {
        return Ok(format!(
            "recording process {} into {} until `mallocshim record {} --stop` or exit\n",
            a.pid,
            out.display(),
            a.pid
        ));
    }
    // The window closes within a drain (10 ms) of its end; the process may also exit first.
    // Until then only the channel's `record status` is asked (one short request): reading the
    // growing file instead decoded every event so far five times a second, up to a third of a
    // core at mariadbd's 80,000 calls/s, taken from the server being recorded (docs/record.md).
    let planned = Instant::now() + Duration::from_secs(a.seconds);
    let deadline = planned + Duration::from_secs_f64(a.timeout.max(5.0));
    loop {
        std::thread::sleep(Duration::from_millis(200));
        if Instant::now() < planned && still_recording(a.pid, a.timeout) {
            continue;
        }
        match trace::read_file(&out) {
            Ok((h, threads, events, f)) => {
                return Ok(summary(&out, &h, threads.len(), events.len() as u64, &f))
            }
            Err(e) if Instant::now() > deadline => {
                return Err(fail(
                    1,
                    format!("{}: no complete trace after {} s: {e}", out.display(), a.seconds),
                ))
            }
            Err(_) => {}
        }
    }
}

/// More dropped calls than this share (%) of the window's calls is a warning with its remedy.
pub const DROP_WARN_PCT: f64 = 1.0;

/// A new trace name in the process's dump directory.
fn default_out(pid: u32) -> Result<PathBuf, Fail> {
    let dir = crate::dump_cmd::dump_dir(pid);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    absolute(&dir.join(format!("mallocshim.{pid}.{now}.mst")))
}

/// A refusal to create the file, in words: the path, the process's user, the reason and what to
/// give instead. None for other errors.
fn not_created(pid: u32, out: &Path, msg: &str) -> Option<String> {
    let reason = msg.strip_prefix("record: ").filter(|r| r.contains("(os error"))?;
    let uid = crate::procstate::euid(pid)?;
    let user = crate::procstate::user_name(uid);
    let parent = out.parent().unwrap_or(Path::new("/"));
    let mode = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(parent)
            .map(|m| {
                format!(
                    "{} is owned by {}, mode {:04o}",
                    parent.display(),
                    crate::procstate::user_name(m.uid()),
                    m.mode() & 0o7777
                )
            })
            .unwrap_or_else(|e| format!("{}: {e}", parent.display()))
    };
    Some(format!(
        "process {pid} could not create {}: {reason}. The process creates the trace itself, as its user {user} (uid {uid}), \
         and {mode}: give --out in a directory {user} may write, or leave --out out for its dump directory ({})",
        out.display(),
        crate::dump_cmd::dump_dir(pid).display()
    ))
}

/// Whether the process's window is still open, by its channel's `record status`; a process
/// gone, a channel closed or an answer of another kind: no (the file is read then).
fn still_recording(pid: u32, timeout: f64) -> bool {
    let t = Duration::from_secs_f64(timeout.clamp(0.1, 10.0));
    matches!(request_if_open(pid, "record status", t), Some(Ok(r)) if r.trim() == "recording=1")
}

fn summary(out: &Path, h: &trace::Header, threads: usize, events: u64, f: &trace::Footer) -> String {
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    format!(
        "{}: {events} calls of {threads} threads in {:.1} s of process {} ({}), {bytes} bytes ({:.2} bytes per call); ended: {}{}\n",
        out.display(),
        f.window_ns as f64 / 1e9,
        h.pid,
        h.backend,
        bytes as f64 / events.max(1) as f64,
        f.ended.name(),
        if f.dropped > 0 { format!("; {} calls dropped (full buffers)", f.dropped) } else { String::new() }
    ) + &drop_warning(events, f.dropped)
}

/// The warning line for a trace that dropped more than [`DROP_WARN_PCT`] of its calls.
pub fn drop_warning(events: u64, dropped: u64) -> String {
    let pct = 100.0 * dropped as f64 / (events + dropped).max(1) as f64;
    if pct <= DROP_WARN_PCT {
        return String::new();
    }
    format!(
        "warning: {pct:.1}% of the window's calls were dropped ({dropped} of {}): the shim's thread, which drains each \
         thread's ring every 10 ms, fell behind for longer than the threads wait for it (a busy or loaded machine), so \
         the trace misses them and `mallocshim replay` qualifies its verdict. Remedy: record again when the server has \
         a core to spare (a quieter hour, or fewer client threads), with a shorter --seconds, or after `mallocshim set \
         PID RECORD_WAIT_MS=50` (its threads then wait longer for the drain instead); docs/record.md\n",
        events + dropped
    )
}
