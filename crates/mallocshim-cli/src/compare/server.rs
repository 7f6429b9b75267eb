//! The throwaway server and the child processes: the machine-wide MariaDB lock, the datadir
//! (mariadb-install-db or mysqld --initialize-insecure), starting mariadbd/mysqld in its own
//! process group under an environment (the shim, or an allocator preloaded directly), waiting
//! for it, stopping it (SIGTERM = clean shutdown, SIGKILL after a timeout), and running any child
//! so that Ctrl-C (the INTERRUPTED flag) kills it at once. The logic follows the harness crate (crates/mallocshim-mariadb).

use mallocshim_mariadb::clean_env;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by the Ctrl-C / SIGTERM handler.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

#[derive(Debug)]
pub enum Error {
    Interrupted,
    Failed(String),
}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::Failed(s)
    }
}

pub type Res<T> = Result<T, Error>;

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sleeps up to `d`, returning Err(Interrupted) early on Ctrl-C.
pub fn nap(d: Duration) -> Res<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if interrupted() {
            return Err(Error::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(20).min(end - Instant::now()));
    }
    if interrupted() {
        return Err(Error::Interrupted);
    }
    Ok(())
}

fn signal_group(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a process group we created (the child is its leader).
    unsafe {
        libc::kill(-(pid as i32), sig);
    }
}

/// Runs `cmd` in its own process group with output to `log`, waiting for it; on Ctrl-C kills
/// the group and returns Interrupted; after `timeout` kills it and fails.
pub fn run_logged(mut cmd: Command, log: &Path, what: &str, timeout: Duration) -> Res<ExitStatus> {
    let f = super::secure_write::create(log).map_err(|e| e.to_string())?;
    let f2 = f.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(f).stderr(f2).process_group(0);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start {what}: {e}"))?;
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().map_err(|e| format!("{what}: {e}"))? {
            return Ok(st);
        }
        if interrupted() || t0.elapsed() > timeout {
            signal_group(child.id(), libc::SIGTERM);
            let t1 = Instant::now();
            while child.try_wait().ok().flatten().is_none() && t1.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            signal_group(child.id(), libc::SIGKILL);
            let _ = child.wait();
            if interrupted() {
                return Err(Error::Interrupted);
            }
            return Err(Error::Failed(format!(
                "{what} did not finish within {} s (log {})",
                timeout.as_secs(),
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `n` lines of a file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let t = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Takes the machine-wide MariaDB lock through the harness (blocking; says so when it has to
/// wait; Ctrl-C ends the wait). Held until the returned file is dropped (or the process exits).
pub fn take_lock() -> Res<File> {
    mallocshim_mariadb::take_lock_unless(interrupted)
        .map_err(|e| Error::Failed(e.to_string()))?
        .ok_or(Error::Interrupted)
}

/// Which kind of server, and the programs that go with it.
pub struct Tools {
    pub mysqld: PathBuf,
    pub mariadb: bool,
    pub version: String,
    /// mariadb-install-db (MariaDB only).
    pub install_db: Option<PathBuf>,
    /// mariadb / mysql client.
    pub client: PathBuf,
    /// mariadb-admin / mysqladmin.
    pub admin: PathBuf,
}

/// Asks the server binary for its version (the only thing run before the checks end) and finds
/// the programs that go with it.
pub fn tools(mysqld: &Path) -> Result<Tools, String> {
    let out = Command::new(mysqld)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {} --version: {e}", mysqld.display()))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || version.is_empty() {
        return Err(format!("{} --version failed: not a mysqld/mariadbd?", mysqld.display()));
    }
    let mariadb = version.contains("MariaDB");
    let beside = |n: &str| -> Option<PathBuf> {
        let d = mysqld.parent()?;
        [d.join(n), d.join("../bin").join(n), d.join("../scripts").join(n)]
            .into_iter()
            .find(|p| super::cli::is_exec(p))
    };
    let pick = |names: &[&str]| -> Result<PathBuf, String> {
        names.iter().find_map(|n| beside(n)).map(Ok).unwrap_or_else(|| super::cli::find_tool(names))
    };
    let install_db = if mariadb { Some(pick(&["mariadb-install-db", "mysql_install_db"])?) } else { None };
    let client = pick(if mariadb { &["mariadb", "mysql"] } else { &["mysql", "mariadb"] })?;
    let admin =
        pick(if mariadb { &["mariadb-admin", "mysqladmin"] } else { &["mysqladmin", "mariadb-admin"] })?;
    Ok(Tools { mysqld: mysqld.to_path_buf(), mariadb, version, install_db, client, admin })
}

/// A free TCP port on 127.0.0.1 (bound then released).
fn free_port() -> Res<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// The instance: a work directory with the datadir, socket and logs.
pub struct Instance {
    pub dir: PathBuf,
    pub datadir: PathBuf,
    pub socket: PathBuf,
    pub tools: Tools,
    pub opts: Vec<String>,
    pub runs: u32,
}

impl Instance {
    /// Creates the work directory and the datadir.
    pub fn create(
        dir: PathBuf,
        tools: Tools,
        buffer_pool: &str,
        max_conn: u32,
        user_opts: &[String],
    ) -> Res<Instance> {
        std::fs::create_dir_all(dir.join("tmp"))
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let datadir = dir.join("data");
        let socket = dir.join("mysqld.sock");
        let port = free_port()?;
        let mut opts = vec![
            "--no-defaults".to_string(),
            "--user=root".into(),
            format!("--datadir={}", datadir.display()),
            format!("--tmpdir={}", dir.join("tmp").display()),
            format!("--socket={}", socket.display()),
            format!("--port={port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--pid-file={}", dir.join("mysqld.pid").display()),
            "--skip-name-resolve".into(),
            format!("--innodb-buffer-pool-size={buffer_pool}"),
            "--innodb-flush-log-at-trx-commit=2".into(),
            format!("--max-connections={max_conn}"),
        ];
        if tools.mariadb {
            opts.push("--innodb-log-file-size=64M".into());
        } else {
            opts.push("--mysqlx=OFF".into());
        }
        opts.extend(user_opts.iter().cloned());
        let log = dir.join("install-db.log");
        let t0 = Instant::now();
        let st = if let Some(install) = &tools.install_db {
            let mut c = Command::new(install);
            c.args(["--no-defaults", "--auth-root-authentication-method=normal", "--user=root"])
                .arg(format!("--datadir={}", datadir.display()))
                .args(["--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=64M"]);
            clean_env(&mut c);
            run_logged(c, &log, "mariadb-install-db", Duration::from_secs(300))?
        } else {
            let mut c = Command::new(&tools.mysqld);
            c.args(["--no-defaults", "--initialize-insecure", "--user=root"])
                .arg(format!("--datadir={}", datadir.display()));
            clean_env(&mut c);
            run_logged(c, &log, "mysqld --initialize-insecure", Duration::from_secs(300))?
        };
        if !st.success() {
            return Err(Error::Failed(format!(
                "creating the datadir failed ({st}); log {}:\n{}",
                log.display(),
                tail(&log, 30)
            )));
        }
        eprintln!(
            "mallocshim compare: datadir {} created in {:.1} s",
            datadir.display(),
            t0.elapsed().as_secs_f64()
        );
        Ok(Instance { dir, datadir, socket, tools, opts, runs: 0 })
    }

    /// Starts the server with `env` (added to a clean environment) and waits until it answers.
    pub fn start(&mut self, env: &[(String, String)], label: &str) -> Res<Server> {
        self.runs += 1;
        let errlog = self.dir.join(format!("mysqld.{}.{label}.err", self.runs));
        let f = super::secure_write::create(&errlog).map_err(|e| e.to_string())?;
        let f2 = f.try_clone().map_err(|e| e.to_string())?;
        let mut c = Command::new(&self.tools.mysqld);
        clean_env(&mut c);
        c.envs(env.iter().map(|(k, v)| (k, v)));
        c.args(&self.opts).arg(format!("--log-error={}", errlog.display()));
        c.stdin(Stdio::null()).stdout(f).stderr(f2).process_group(0);
        let child = c.spawn().map_err(|e| format!("cannot start {}: {e}", self.tools.mysqld.display()))?;
        let mut srv = Server { child: Some(child), pid: 0, errlog };
        srv.pid = srv.child.as_ref().map(|c| c.id()).unwrap_or(0);
        eprintln!("mallocshim compare: server pid {} datadir {} ({label})", srv.pid, self.datadir.display());
        let t0 = Instant::now();
        loop {
            if self.ping() {
                return Ok(srv);
            }
            if let Some(st) = srv.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                srv.child = None;
                return Err(Error::Failed(format!(
                    "server ({label}) died during startup ({st}); log {}:\n{}",
                    srv.errlog.display(),
                    tail(&srv.errlog, 30)
                )));
            }
            if t0.elapsed() > Duration::from_secs(120) {
                return Err(Error::Failed(format!(
                    "server ({label}) did not answer within 120 s; log {}:\n{}",
                    srv.errlog.display(),
                    tail(&srv.errlog, 30)
                )));
            }
            nap(Duration::from_millis(200))?; // Drop of srv kills the server
        }
    }

    fn ping(&self) -> bool {
        let mut c = Command::new(&self.tools.admin);
        c.args(["--no-defaults", "--user=root", "--connect-timeout=2"])
            .arg(format!("--socket={}", self.socket.display()))
            .arg("ping")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        clean_env(&mut c);
        c.status().map(|s| s.success()).unwrap_or(false)
    }

    /// Runs SQL (a statement, or a file's contents on stdin) with the client; `db` may be empty.
    pub fn sql(&self, db: &str, sql: Option<&str>, file: Option<&Path>, log: &Path) -> Res<()> {
        let mut c = Command::new(&self.tools.client);
        clean_env(&mut c);
        c.args(["--no-defaults", "--user=root", "--batch"])
            .arg(format!("--socket={}", self.socket.display()));
        if let Some(s) = sql {
            c.arg("-e").arg(s);
        }
        if !db.is_empty() {
            c.arg(db);
        }
        let st = if let Some(f) = file {
            // the client reads the file on stdin; run_logged closes stdin, so use a shell redirect
            let mut sh = Command::new("sh");
            let mut line = format!("exec {}", shell_quote(&self.tools.client.to_string_lossy()));
            for a in c.get_args() {
                line.push(' ');
                line.push_str(&shell_quote(&a.to_string_lossy()));
            }
            line.push_str(" < ");
            line.push_str(&shell_quote(&f.to_string_lossy()));
            sh.arg("-c").arg(line);
            clean_env(&mut sh);
            run_logged(sh, log, "mariadb client", Duration::from_secs(3600))?
        } else {
            run_logged(c, log, "mariadb client", Duration::from_secs(600))?
        };
        if !st.success() {
            return Err(Error::Failed(format!(
                "SQL failed ({st}); log {}:\n{}",
                log.display(),
                tail(log, 20)
            )));
        }
        Ok(())
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A running server; dropping it kills it (the Ctrl-C and error paths).
pub struct Server {
    child: Option<Child>,
    pub pid: u32,
    pub errlog: PathBuf,
}

impl Server {
    /// Stops the server cleanly (SIGTERM: mariadbd and mysqld shut down as for `admin shutdown`),
    /// waits up to `timeout`, then kills it. Returns its exit status description.
    pub fn stop(&mut self, timeout: Duration) -> Result<String, String> {
        let Some(mut child) = self.child.take() else { return Ok("not running".into()) };
        // SAFETY: kill(2) on our child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return if st.success() {
                    Ok(st.to_string())
                } else {
                    Err(format!("server exited with {st}; log {}", self.errlog.display()))
                };
            }
            if t0.elapsed() > timeout {
                signal_group(child.id(), libc::SIGKILL);
                let _ = child.wait();
                return Err(format!(
                    "server did not stop within {} s after SIGTERM; killed",
                    timeout.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            eprintln!("mallocshim compare: stopping server pid {}", self.pid);
            if let Err(e) = self.stop(Duration::from_secs(30)) {
                eprintln!("mallocshim compare: {e}");
            }
        }
    }
}
