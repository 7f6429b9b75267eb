//! The fleet path end to end, on Debian's real `prometheus` and `prometheus-node-exporter`: two
//! mariadbd servers under the shim (instance `a` on glibc, `b` on jemalloc) write
//! `mallocshim_<instance>.prom` every 2 s into one fresh 0755 directory; node_exporter, running as
//! the `prometheus` user with only the textfile collector, reads it (so the file mode is tested);
//! Prometheus scrapes node_exporter every 3 s for more than a minute under sysbench load on both
//! servers, across a clean restart of `a` (its file must disappear at shutdown and reappear after
//! the restart). Asserted through Prometheus's HTTP API: no textfile scrape error over the whole
//! window, both `exported_instance` values with their backends, two start times for `a`, and every
//! query of the shipped Grafana dashboard (`$host`/`$server` = `.*`, `$__rate_interval` = 30s)
//! returns at least one finite value; `promtool check metrics` accepts both files. Everything runs
//! on loopback; every process started here is killed by a Drop guard. A missing program or the
//! missing `prometheus` user is a failure, never a skip. Beside `b`, `mallocshim users --textfile-dir`
//! writes `mallocshim_b_users.prom` (per-user held bytes): node_exporter reads it (mode 0644),
//! Prometheus has root's (sysbench's) held bytes and 2 connections, promtool accepts it, the
//! dashboard's per-user panel returns data, and the command ends with `b`, removing its file.
//!
//! Long because: one test binary per feature: its cases share the server and scrape helpers.

mod common;

use mallocshim_mariadb::{Instance, Launch, Options, Server};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Seconds of sysbench per phase (a before and after its restart; b across both).
const PHASE_S: u64 = 25;
/// Transactions per second of each load (16 queries each): real load, but not all of both cores.
/// Two unthrottled loads starved node_exporter and Prometheus on 2 cores: 3 and 4 of 21 scrapes
/// timed out (the 3 s scrape timeout) in 2 of 4 full test runs, in a row, while loads started.
const LOAD_TPS: u32 = 150;
/// Minimum seconds between Prometheus's start and the final queries.
const MIN_SCRAPE_S: u64 = 68;

/// A child process killed (SIGTERM, SIGKILL after 10 s) when dropped.
struct Proc {
    name: &'static str,
    child: Child,
}

impl Proc {
    fn spawn(name: &'static str, mut c: Command, log: &Path) -> Proc {
        let f = std::fs::File::create(log).unwrap();
        c.stdin(Stdio::null()).stdout(f.try_clone().unwrap()).stderr(f);
        // SAFETY: prctl(2), sigemptyset(3) and sigprocmask(2) are async-signal-safe; this runs
        // after the uid change (which clears the parent-death signal).
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The harness may block signals in this process; the child must see SIGTERM.
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        let child = c.spawn().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { name, child }
    }

    /// Nice -10 for every thread of the process (a Linux nice value is per thread, and threads
    /// inherit it from their creator): the monitoring stack must not be starved by the load it
    /// watches (two mariadbd under sysbench on 2 shared cores). A raised priority, as an
    /// operator would give it, keeps a scrape's timeout about the scrape, not the CPU queue.
    fn raise_priority(&self) {
        let pid = self.child.id();
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            if let Ok(tid) = t.file_name().to_string_lossy().parse::<u32>() {
                // SAFETY: setpriority(2) on a thread of our own child; failure leaves the default.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, -10) };
            }
        }
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// Waits (at most `limit`) for the process to end; its exit status.
    fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Some(st) = self.child.try_wait().ok().flatten() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.running() {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe {
                libc::kill(self.child.id() as i32, libc::SIGTERM);
            }
            if self.wait(Duration::from_secs(10)).is_none() {
                eprintln!("fleet: killing {} (SIGKILL)", self.name);
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

/// A directory removed when dropped.
struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn user_ids(user: &str) -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let o = Command::new("id").args([flag, user]).output().expect("run id");
        assert!(o.status.success(), "the `{user}` user does not exist: run scripts/install-deps.sh");
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// HTTP/1.0 GET on loopback: (status, body).
fn http_get(port: u16, path: &str) -> std::io::Result<(u32, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let status = buf.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

struct Prom {
    port: u16,
}

impl Prom {
    /// `/api/v1/<api>?<params>`: the `data.result` array (panics on an error status).
    fn api(&self, api: &str, params: &[(&str, String)]) -> Vec<Value> {
        let q: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
        let path = format!("/api/v1/{api}?{}", q.join("&"));
        let (st, body) = http_get(self.port, &path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"));
        assert!(st == 200 && v["status"] == "success", "GET {path}: HTTP {st}: {body}");
        match &v["data"]["result"] {
            Value::Array(a) => a.clone(),
            _ => match &v["data"] {
                Value::Array(a) => a.clone(),
                other => panic!("GET {path}: unexpected data {other}"),
            },
        }
    }

    fn query(&self, q: &str) -> Vec<Value> {
        self.api("query", &[("query", q.to_string())])
    }

    fn query_range(&self, q: &str, start: f64, end: f64) -> Vec<Value> {
        self.api(
            "query_range",
            &[
                ("query", q.to_string()),
                ("start", format!("{start:.3}")),
                ("end", format!("{end:.3}")),
                ("step", "2".into()),
            ],
        )
    }
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The value of an instant-vector sample.
fn val(s: &Value) -> f64 {
    s["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

fn label<'a>(s: &'a Value, name: &str) -> &'a str {
    s["metric"][name].as_str().unwrap_or("")
}

/// Background sysbench oltp_read_only on `srv` for `secs`.
fn load(srv: &Server<'_>, secs: u64, log: &Path) -> Proc {
    let inst = srv.instance();
    let o = &inst.options;
    let mut c = Command::new(&inst.tools.sysbench);
    mallocshim_mariadb::clean_env(&mut c);
    c.arg("oltp_read_only")
        .args(["--db-driver=mysql", "--mysql-user=root", "--mysql-password=", "--mysql-db=sbtest"])
        .arg(format!("--mysql-socket={}", inst.socket.display()))
        .arg(format!("--tables={}", o.sb_tables))
        .arg(format!("--table-size={}", o.sb_rows))
        .args(["--threads=2", &format!("--time={secs}"), "--report-interval=0"])
        .arg(format!("--rate={LOAD_TPS}"))
        .arg("run");
    Proc::spawn("sysbench", c, log)
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {} s", limit.as_secs());
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn promtool_check(promtool: &Path, file: &Path) -> (bool, String) {
    let text = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut c = Command::new(promtool);
    c.args(["check", "metrics"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("run promtool");
    child.stdin.take().unwrap().write_all(&text).unwrap();
    let o = child.wait_with_output().unwrap();
    (
        o.status.success(),
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
    )
}

fn sysbench_ok(mut p: Proc, log: &Path) {
    let code = p.wait(Duration::from_secs(PHASE_S * 3)).map(|st| st.code());
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert_eq!(code, Some(Some(0)), "sysbench failed ({code:?}):\n{text}");
    assert!(text.contains("queries:"), "no sysbench report:\n{text}");
}

// Long because: one scenario across processes (two mariadbd, node_exporter, prometheus, a restart),
// each step's scrape checked where it happens.
#[test]
fn prometheus_node_exporter_two_servers_across_a_restart() {
    let prometheus = common::require("prometheus");
    let node_exporter = common::require("prometheus-node-exporter");
    let promtool = common::require("promtool");
    let (uid, gid) = user_ids("prometheus");
    let so = common::shim();
    let cli = common::cli_bin();

    let root = Dir(std::env::temp_dir().join(format!("mallocshim-fleet.{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&root.0);
    let textdir = root.0.join("textfile");
    let tsdb = root.0.join("tsdb");
    for d in [&root.0, &textdir, &tsdb] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::os::unix::fs::chown(&tsdb, Some(uid), Some(gid)).unwrap();

    let ne_port = free_port();
    let mut c = Command::new(&node_exporter);
    c.args(["--collector.disable-defaults", "--collector.textfile"])
        .arg(format!("--collector.textfile.directory={}", textdir.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{ne_port}"))
        .uid(uid)
        .gid(gid);
    let mut ne = Proc::spawn("prometheus-node-exporter", c, &root.0.join("node-exporter.log"));

    wait_for("node_exporter ready", Duration::from_secs(30), || {
        assert!(ne.running(), "node_exporter exited");
        http_get(ne_port, "/metrics").is_ok_and(|(s, _)| s == 200)
    });
    ne.raise_priority();
    let prom_port = free_port();
    let cfg = root.0.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 3s\n  evaluation_interval: 3s\nscrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:{ne_port}']\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut c = Command::new(&prometheus);
    c.arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--storage.tsdb.path={}", tsdb.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .uid(uid)
        .gid(gid);
    let prom_log = root.0.join("prometheus.log");
    let mut pr = Proc::spawn("prometheus", c, &prom_log);
    let prom = Prom { port: prom_port };
    wait_for("Prometheus ready", Duration::from_secs(60), || {
        assert!(
            pr.running(),
            "prometheus exited:\n{}",
            std::fs::read_to_string(&prom_log).unwrap_or_default()
        );
        assert!(ne.running(), "node_exporter exited");
        http_get(prom_port, "/-/ready").is_ok_and(|(s, _)| s == 200)
    });
    pr.raise_priority();
    let t_start = now();
    let clock = Instant::now();

    let opts = Options { buffer_pool: "128M".into(), ..Options::default() };
    let inst_a = Instance::create(opts.clone()).unwrap_or_else(|e| panic!("{e}"));
    let inst_b = inst_a.sibling(opts).unwrap_or_else(|e| panic!("{e}"));
    let launch = |backend: &str, name: &str| {
        Launch::shim(&so, backend)
            .var("MALLOCSHIM_PROM_TEXTFILE_DIR", textdir.display().to_string())
            .var("MALLOCSHIM_PROM_INTERVAL_S", "2")
            .var("MALLOCSHIM_INSTANCE", name)
    };
    let (launch_a, launch_b) = (launch("glibc", "a"), launch("jemalloc", "b"));
    let file_a = textdir.join("mallocshim_a.prom");
    let file_b = textdir.join("mallocshim_b.prom");

    let srv_a = inst_a.start(&launch_a).unwrap_or_else(|e| panic!("{e}"));
    let srv_b = inst_b.start(&launch_b).unwrap_or_else(|e| panic!("{e}"));
    srv_a.sysbench_prepare().unwrap_or_else(|e| panic!("{e}"));
    srv_b.sysbench_prepare().unwrap_or_else(|e| panic!("{e}"));

    // Per user (issue 39 item 4): `mallocshim users` beside b, as root, writing its own textfile.
    let users_b = textdir.join("mallocshim_b_users.prom");
    let mut c = Command::new(&cli);
    c.args(["users", &srv_b.pid().to_string(), "--mysql-user", "root", "--interval", "2", "--mysql-socket"])
        .arg(&inst_b.socket)
        .arg("--textfile-dir")
        .arg(&textdir);
    let mut users = Proc::spawn("mallocshim users", c, &root.0.join("users.log"));
    let logs = |n: &str| root.0.join(format!("sysbench-{n}.out"));
    let load_b = load(&srv_b, 2 * PHASE_S + 10, &logs("b"));
    let load_a1 = load(&srv_a, PHASE_S, &logs("a1"));
    wait_for("the three files written", Duration::from_secs(10), || {
        assert!(
            users.running(),
            "mallocshim users exited:\n{}",
            std::fs::read_to_string(root.0.join("users.log")).unwrap_or_default()
        );
        file_a.exists() && file_b.exists() && users_b.exists()
    });
    for f in [&file_a, &file_b, &users_b] {
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o644, "{}: mode {mode:o}", f.display());
    }
    wait_for("both servers in Prometheus", Duration::from_secs(30), || {
        prom.query("count by (exported_instance) (mallocshim_build_info)").len() == 2
    });
    sysbench_ok(load_a1, &logs("a1"));

    // The clean restart of `a`: its file goes at shutdown and comes back with the new process.
    let promtool_a = promtool_check(&promtool, &file_a);
    let stopped = srv_a.shutdown().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stopped.status, 0, "mariadbd a's exit status");
    assert!(!file_a.exists(), "{} still there after a clean shutdown", file_a.display());
    assert!(file_b.exists(), "b's file went with a's");
    let t_down = now();
    std::thread::sleep(Duration::from_secs(4)); // two scrapes without `a`
    let down = prom.query("count by (exported_instance) (mallocshim_build_info)");
    let srv_a = inst_a.start(&launch_a).unwrap_or_else(|e| panic!("{e}"));
    wait_for("a's file after the restart", Duration::from_secs(10), || file_a.exists());
    let t_up = now();
    let load_a2 = load(&srv_a, PHASE_S, &logs("a2"));
    sysbench_ok(load_a2, &logs("a2"));
    sysbench_ok(load_b, &logs("b"));
    let rest = Duration::from_secs(MIN_SCRAPE_S).saturating_sub(clock.elapsed());
    std::thread::sleep(rest);
    let t_end = now();
    let window = (t_end - t_start).ceil() as u64 + 4;

    // Zero textfile scrape errors over the whole window, sample by sample.
    let err = prom.query(&format!("max_over_time(node_textfile_scrape_error[{window}s])"));
    assert_eq!(err.len(), 1, "node_textfile_scrape_error: {err:?}");
    assert_eq!(val(&err[0]), 0.0, "textfile scrape errors in the window: {err:?}");
    let range = prom.query_range("node_textfile_scrape_error", t_start, t_end);
    let samples: Vec<f64> = range
        .iter()
        .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
        .map(|p| p[1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN))
        .collect();
    // The raw scrapes: their count, span and largest gap.
    let raw = prom.query(&format!("up[{window}s]"));
    let points: Vec<(f64, bool)> = raw
        .first()
        .and_then(|s| s["values"].as_array())
        .map(|v| v.iter().filter_map(|p| Some((p[0].as_f64()?, p[1] == "1"))).collect())
        .unwrap_or_default();
    let ts: Vec<f64> = points.iter().map(|p| p.0).collect();
    // A scrape that times out (scrape_timeout = the 3 s interval) on 2 loaded cores is the
    // machine's, not the shim's: at most one in ten, and never a textfile error.
    let failed_at: Vec<String> =
        points.iter().filter(|p| !p.1).map(|p| format!("+{:.0} s", p.0 - t_start)).collect();
    let failed = failed_at.len();
    assert!(failed * 10 <= points.len(), "{failed} of {} scrapes failed: {failed_at:?}", points.len());
    let span = ts.last().zip(ts.first()).map(|(l, f)| l - f).unwrap_or(0.0);
    let gap = ts.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    let scrapes = ts.len();
    assert!(
        span >= 60.0 && scrapes >= 18,
        "scraping spans {span:.1} s with {scrapes} scrapes (goal: 60 s; {} range points)",
        samples.len()
    );
    assert!(samples.iter().all(|&v| v == 0.0), "a textfile scrape error: {samples:?}");

    // Both servers, with their backends; `a` absent while down, then with a second start time.
    let info = prom.query("mallocshim_build_info");
    let mut seen: Vec<(String, String)> =
        info.iter().map(|s| (label(s, "exported_instance").into(), label(s, "backend").into())).collect();
    seen.sort();
    assert_eq!(seen, [("a".into(), "glibc".into()), ("b".into(), "jemalloc".into())], "{info:?}");
    let names: Vec<&str> = down.iter().map(|s| label(s, "exported_instance")).collect();
    assert_eq!(names, ["b"], "while `a` was down Prometheus still saw it (stale file?): {down:?}");
    let starts =
        prom.query_range("mallocshim_process_start_time_seconds{exported_instance=\"a\"}", t_start, t_end);
    let mut distinct: Vec<String> = starts
        .iter()
        .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
        .map(|p| p[1].as_str().unwrap_or("").to_string())
        .collect();
    distinct.dedup();
    assert_eq!(distinct.len(), 2, "a's start times across the restart: {distinct:?}");
    let mtime = prom.query("node_textfile_mtime_seconds");
    assert_eq!(mtime.len(), 3, "node_exporter (as `prometheus`) read the three files: {mtime:?}");
    // sysbench's user (root) holds bytes on b, and its connections are counted.
    let held = prom.query(&format!(
        "max_over_time(mallocshim_user_held_bytes{{exported_instance=\"b\",user=\"root\"}}[{window}s])"
    ));
    assert!(held.len() == 1 && val(&held[0]) > 0.0, "root's held bytes on b: {held:?}");
    let n = prom.query(&format!(
        "max_over_time(mallocshim_user_connections{{exported_instance=\"b\",user=\"root\"}}[{window}s])"
    ));
    assert!(n.len() == 1 && val(&n[0]) >= 2.0, "root's connections on b (sysbench's 2): {n:?}");

    // promtool accepts both files.
    let users_check = promtool_check(&promtool, &users_b);
    for (name, (ok, out)) in
        [("a", promtool_a), ("b", promtool_check(&promtool, &file_b)), ("b_users", users_check)]
    {
        assert!(ok, "promtool check metrics rejects mallocshim_{name}.prom:\n{out}");
    }

    // Every query of the shipped dashboard returns data.
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("examples/grafana/mallocshim-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    let mut report = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = t["expr"].as_str() else { continue };
            let q = expr.replace("$host", ".*").replace("$server", ".*").replace("$__rate_interval", "30s");
            let r = prom.query(&q);
            let finite = r.iter().filter(|s| val(s).is_finite()).count();
            report.push(format!("{}: {} series, {finite} finite: {q}", panel["title"], r.len()));
            assert!(finite > 0, "dashboard panel {} returns no data: {q}\n{r:?}", panel["title"]);
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} dashboard queries found");
    let servers = prom.api("label/exported_instance/values", &[("match[]", "mallocshim_build_info".into())]);
    assert_eq!(servers.len(), 2, "the Server variable's values: {servers:?}");

    // The end: both clean shutdowns remove both files, and `users` ends with b, removing its own.
    for srv in [srv_a, srv_b] {
        assert_eq!(srv.shutdown().unwrap_or_else(|e| panic!("{e}")).status, 0);
    }
    let st = users.wait(Duration::from_secs(10));
    assert!(st.is_some_and(|s| s.success()), "mallocshim users at b's end: {st:?}");
    let left: Vec<_> = std::fs::read_dir(&textdir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "files left in the textfile directory: {left:?}");
    eprintln!(
        "fleet: {span:.1} s of scraping, {scrapes} node_exporter scrapes ({failed} failed, at {failed_at:?}; largest gap {gap:.1} s), 0 textfile errors, a's file absent {:.1} s across the restart, {checked} dashboard queries:\n  {}",
        t_up - t_down,
        report.join("\n  ")
    );
}
