//! `mallocshim users PID --mysql-socket PATH`: the heap held per user of the server, once as a
//! table or, with --textfile-dir, as a node_exporter textfile rewritten every --interval seconds
//! (`mallocshim_<instance>_users.prom`): per user, not per connection, so the series stay bounded
//! however many connections come and go. Each figure is `held::rows(.., By::User)`: the dump's
//! per-thread `live_bytes` (through the control channel: no file) joined with the server's
//! PROCESSLIST read at the same moment. Owns the textfile's text and its atomic publication
//! (a temporary file in the same directory, mode 0644, renamed over the name); never writes
//! elsewhere.

use crate::dump_cmd::Fail;
use crate::held::{self, By, Row};
use crate::processlist::Conns;
use mallocshim_format::Dump;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Debug)]
#[command(
    about = "The heap held per user of the server (heap profiles + PROCESSLIST), as a table or a Prometheus textfile",
    long_about = "Read process PID's dump through its control channel (no file is written) and the \
                  server's connections through --mysql-socket, and sum per user the bytes held by \
                  the live blocks its connections' threads allocated (the heap profile's sampled \
                  estimate, as `top --by user` shows it), with its connections and the server's \
                  MEMORY_USED summed. Server threads are the user `(server threads)`, exited \
                  threads `(exited threads)`. Without --textfile-dir: one table, then exit. With \
                  --textfile-dir DIR: write DIR/mallocshim_<instance>_users.prom (node_exporter's \
                  textfile collector) every --interval seconds until interrupted or the process \
                  ends, then remove it (a reading that fails after the first, as while the server \
                  shuts down, is said once on stderr, the file removed, and retried); the series: mallocshim_user_held_bytes, \
                  mallocshim_user_held_bytes_stderr (one standard error of the sampling), \
                  mallocshim_user_connections and mallocshim_user_memory_used_bytes, each with \
                  instance and user. The file is written whole (a temporary file renamed over \
                  it), mode 0644.\n\n\
                  Exit status: 0 (with --textfile-dir: after an interrupt or the process's end); \
                  1 the process could not be read; 2 bad arguments, the connections could not be \
                  read, or the file could not be written.",
    after_help = "Examples:\n  mallocshim users $(pgrep -o -x mariadbd) --mysql-socket /run/mysqld/mysqld.sock\n  \
                  mallocshim users $(pgrep -o -x mariadbd) --mysql-socket /run/mysqld/mysqld.sock \
                  --textfile-dir /var/lib/prometheus/node-exporter"
)]
pub struct Args {
    /// The server's process.
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// Write the textfile into this directory (node_exporter's --collector.textfile.directory).
    #[arg(long, value_name = "DIR")]
    pub textfile_dir: Option<PathBuf>,
    /// Seconds between rewrites of the textfile.
    #[arg(long, value_name = "S", default_value_t = 15.0)]
    pub interval: f64,
    /// The instance label and file name (default: the process's MALLOCSHIM_INSTANCE, else its pid).
    #[arg(long, value_name = "NAME")]
    pub instance: Option<String>,
    #[command(flatten)]
    pub conn: crate::pfs::ConnArgs,
}

/// The process's dump through its channel (no fallback to files: this may run for months).
fn take(pid: u32) -> Result<Dump, Fail> {
    let t = Duration::from_secs(10);
    let s = crate::ctl_client::connect(pid, Duration::from_secs(2))?.ok_or_else(|| Fail {
        code: 1,
        msg: format!("process {pid} has no control channel (docs/control.md)"),
    })?;
    let body = crate::ctl_client::request_on(s, pid, "json", t)?;
    Dump::parse(&body).map_err(|e| Fail { code: 1, msg: format!("process {pid}: {e}") })
}

/// The dump, the connections and the rows per user, read now.
fn per_user(args: &Args) -> Result<(Dump, Conns, Vec<Row>), Fail> {
    let conns = crate::processlist::query(&args.conn)
        .map_err(|e| Fail { code: 2, msg: format!("the server's connections: {e}") })?
        .unwrap_or_default();
    crate::processlist::check_server(args.pid, &conns).map_err(|msg| Fail { code: 2, msg })?;
    let d = take(args.pid)?;
    let rows = held::rows(&held::held(None, &d), &conns, By::User);
    Ok((d, conns, rows))
}

/// A label value with Prometheus's escapes (backslash, double quote, newline).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// One gauge family: name, help, its value for a row (None: no sample for it).
type Family<'a> = (&'static str, &'static str, &'a dyn Fn(&Row) -> Option<f64>);

/// The textfile's text for `rows` (per user) of process `pid`, sampled at mean gap `mean` bytes.
pub fn text(pid: u32, mean: u64, rows: &[Row], conns: &Conns, instance: &str) -> String {
    let mut o = format!("# mallocshim users pid {pid}\n");
    let per_conn = |user: &str| conns.values().flatten().filter(|c| c.user == user).count();
    let families: [Family; 4] = [
        (
            "mallocshim_user_held_bytes",
            "Bytes held by the live blocks the user's connections allocated (heap profile estimate).",
            &|r| Some(r.live as f64),
        ),
        (
            "mallocshim_user_held_bytes_stderr",
            "One standard error of mallocshim_user_held_bytes from the sampling: sqrt(held x mean gap).",
            &|r| Some(crate::heap::by::std_error(r.live as i64, mean as i64) as f64),
        ),
        ("mallocshim_user_connections", "The user's connections (information_schema.PROCESSLIST).", &|r| {
            Some(per_conn(&r.who[0]) as f64)
        }),
        (
            "mallocshim_user_memory_used_bytes",
            "The server's own MEMORY_USED summed over the user's connections.",
            &|r| r.memory_used.map(|m| m as f64),
        ),
    ];
    for (name, help, f) in families {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        for r in rows {
            if let Some(v) = f(r) {
                let _ =
                    writeln!(o, "{name}{{instance=\"{}\",user=\"{}\"}} {v}", esc(instance), esc(&r.who[0]));
            }
        }
    }
    o
}

/// Writes `text` to `path` whole: a new temporary file beside it (O_EXCL, mode 0644), renamed over.
fn publish(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("users"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let res = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o644)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res.map_err(|e| format!("cannot write {}: {e}", path.display()))
}

pub fn run(args: &Args) -> Result<String, Fail> {
    let bad = |msg: String| Fail { code: 2, msg };
    if args.conn.mysql_socket.is_none() {
        return Err(bad("needs --mysql-socket (the server's connections name the users)".into()));
    }
    if !(args.interval.is_finite() && args.interval >= 1.0) {
        return Err(bad(format!("--interval wants at least 1 second, got {}", args.interval)));
    }
    let Some(dir) = &args.textfile_dir else {
        let (d, conns, rows) = per_user(args)?;
        let mut o = held::view(&d, &rows, &conns, By::User, None, 24 + rows.len(), 200, false);
        let n: usize = conns.values().map(Vec::len).sum();
        let _ = writeln!(o, "\n{n} connections");
        return Ok(o);
    };
    let instance = args
        .instance
        .clone()
        .or_else(|| mallocshim_proc::environ_var(args.pid, "MALLOCSHIM_INSTANCE"))
        .unwrap_or_else(|| args.pid.to_string());
    if instance.is_empty() || !instance.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
        return Err(bad(format!("--instance {instance:?}: letters, digits, '.', '_', '-' only")));
    }
    let path = dir.join(format!("mallocshim_{instance}_users.prom"));
    static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let _ = ctrlc::set_handler(|| STOP.store(true, std::sync::atomic::Ordering::Relaxed));
    let alive =
        || Path::new(&format!("/proc/{}", args.pid)).exists() && !crate::procstate::is_zombie(args.pid);
    // The first reading must work (wrong input is one line and exit 2); later failures (the
    // server restarting its listener, shutting down) are said once and retried every interval.
    let mut first = true;
    let mut said = false;
    let result = loop {
        match per_user(args) {
            Ok((d, conns, rows)) => {
                if let Err(e) = publish(&path, &text(d.pid, d.prof_sample_bytes, &rows, &conns, &instance)) {
                    break Err(bad(e));
                }
                said = false;
            }
            Err(_) if !alive() => break Ok(String::new()),
            Err(f) if first => break Err(f),
            Err(f) => {
                if !said {
                    eprintln!(
                        "mallocshim users: {} (the file is removed; retrying every {}s)",
                        f.msg, args.interval
                    );
                    said = true;
                }
                let _ = std::fs::remove_file(&path);
            }
        }
        first = false;
        let end = std::time::Instant::now() + Duration::from_secs_f64(args.interval);
        while std::time::Instant::now() < end && !STOP.load(std::sync::atomic::Ordering::Relaxed) && alive() {
            std::thread::sleep(Duration::from_millis(100));
        }
        if STOP.load(std::sync::atomic::Ordering::Relaxed) || !alive() {
            break Ok(String::new());
        }
    };
    let _ = std::fs::remove_file(&path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_series_per_user_and_family() {
        let rows = vec![
            Row { who: vec!["app".into()], live: 200 << 20, alloc: 0, memory_used: Some(210 << 20) },
            Row { who: vec!["(server threads)".into()], live: 1 << 20, alloc: 0, memory_used: None },
            Row { who: vec!["we\"ird\\".into()], live: 0, alloc: 0, memory_used: Some(0) },
        ];
        let mut conns = Conns::new();
        let c = |id, u: &str| crate::processlist::Conn { id, user: u.into(), ..Default::default() };
        conns.insert(1, vec![c(5, "app"), c(6, "app")]);
        let t = text(7, 524_288, &rows, &conns, "db1");
        assert!(t.starts_with("# mallocshim users pid 7\n"), "{t}");
        assert!(t.contains("mallocshim_user_held_bytes{instance=\"db1\",user=\"app\"} 209715200\n"), "{t}");
        assert!(t.contains("mallocshim_user_connections{instance=\"db1\",user=\"app\"} 2\n"), "{t}");
        assert!(
            t.contains("mallocshim_user_held_bytes_stderr{instance=\"db1\",user=\"app\"} 10485760\n"),
            "{t}"
        );
        assert!(t.contains("user=\"we\\\"ird\\\\\"}"), "escaped: {t}");
        assert!(
            !t.contains("mallocshim_user_memory_used_bytes{instance=\"db1\",user=\"(server threads)\"}"),
            "{t}"
        );
        assert_eq!(t.matches("# TYPE ").count(), 4);
    }
}
