//! The throwaway instance: the machine-wide lock, a temporary directory (under /tmp: the unix
//! socket's path must stay under 108 bytes; or the caller's [`Options::dir`]) with a datadir made
//! by `mariadb-install-db` (MariaDB) or `mysqld --initialize-insecure` (MySQL), root with an empty
//! password, and the server's options (private socket, free loopback port). Servers are started
//! from it one after the other ([`Instance::sibling`] gives a second instance, with its own
//! directory and port, under the same lock); a temporary directory goes when the instance is
//! dropped (kept, and printed, with `MDB_KEEP=1`). Every child runs in its own process group, with
//! a time limit, and is ended when the caller's stop flag ([`Options::stop`]) is raised.

use crate::error::{fail, tail};
use crate::{lock, Error, Launch, Result, Server, Tools};
use std::cell::Cell;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Settings of an instance (the defaults are those of the tests).
#[derive(Clone, Debug)]
pub struct Options {
    /// `--innodb-buffer-pool-size`.
    pub buffer_pool: String,
    /// sysbench's `--tables` and `--table-size`.
    pub sb_tables: u32,
    pub sb_rows: u32,
    /// How long a start may take until `mariadb-admin ping` answers.
    pub start_timeout: Duration,
    /// How long a shutdown may take until the server is killed.
    pub stop_timeout: Duration,
    /// More mariadbd options, after the harness's own.
    pub extra_opts: Vec<String>,
    /// Keep the directory at drop (default: `MDB_KEEP=1` in the environment).
    pub keep: bool,
    /// The server binary, any mariadbd or mysqld (default: `mariadbd` in PATH); its client
    /// programs are looked for beside it ([`Tools::for_server`]).
    pub server: Option<PathBuf>,
    /// An existing, empty directory to work in, owned by the caller (never removed here);
    /// default: a new temporary directory under /tmp.
    pub dir: Option<PathBuf>,
    /// `--max-connections`.
    pub max_connections: u32,
    /// Raised by the caller (its Ctrl-C handler): every wait of the harness (the lock, a start,
    /// a client or sysbench run) ends, the child is ended, and the call returns
    /// [`Error::Interrupted`].
    pub stop: Option<&'static AtomicBool>,
    /// How long a client program (`mariadb`, the datadir's creation, `sysbench prepare`) may run;
    /// a time-limited sysbench run gets three times its `--time` plus 2 minutes.
    pub run_timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            buffer_pool: "256M".into(),
            sb_tables: 4,
            sb_rows: 10_000,
            start_timeout: Duration::from_secs(60),
            stop_timeout: Duration::from_secs(120),
            extra_opts: Vec::new(),
            keep: std::env::var("MDB_KEEP").is_ok_and(|v| v == "1"),
            server: None,
            dir: None,
            max_connections: 200,
            stop: None,
            run_timeout: Duration::from_secs(3600),
        }
    }
}

impl Options {
    /// Whether the caller's stop flag is raised.
    pub fn stopped(&self) -> bool {
        self.stop.is_some_and(|f| f.load(Ordering::SeqCst))
    }

    /// Sleeps `d`, or less when the stop flag is raised ([`Error::Interrupted`]).
    pub fn nap(&self, d: Duration) -> Result<()> {
        let end = Instant::now() + d;
        loop {
            if self.stopped() {
                return Err(Error::Interrupted);
            }
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20).min(end - now));
        }
    }
}

/// A datadir and the options to run mariadbd on it.
pub struct Instance {
    pub tools: Tools,
    pub options: Options,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    pub datadir: PathBuf,
    pub socket: PathBuf,
    pub port: u16,
    runs: Cell<u32>,
    _lock: File,
}

impl Instance {
    /// Finds the programs, takes the machine-wide lock (a wait the stop flag can end), creates
    /// the directory and the datadir.
    pub fn create(options: Options) -> Result<Instance> {
        let tools = match &options.server {
            Some(s) => Tools::for_server(s)?,
            None => Tools::find()?,
        };
        let lock = match options.stop {
            Some(f) => lock::take_unless(|| f.load(Ordering::SeqCst))?.ok_or(Error::Interrupted)?,
            None => lock::take()?,
        };
        Instance::with_lock(options, tools, lock)
    }

    /// A second instance under the lock this one holds (a duplicate of its descriptor, so the
    /// lock stays held while either lives): two servers at once, for the fleet test.
    pub fn sibling(&self, options: Options) -> Result<Instance> {
        let lock = self._lock.try_clone().map_err(|e| format!("cannot duplicate the lock: {e}"))?;
        Instance::with_lock(options, self.tools.clone(), lock)
    }

    fn with_lock(options: Options, tools: Tools, lock: File) -> Result<Instance> {
        let (tmp, path) = match &options.dir {
            Some(d) => (None, d.clone()),
            None => {
                let tmp = tempfile::Builder::new()
                    .prefix("mallocshim-mdb.")
                    .tempdir_in("/tmp")
                    .map_err(|e| format!("cannot create a directory in /tmp: {e}"))?;
                let path = tmp.path().to_path_buf();
                (Some(tmp), path)
            }
        };
        std::fs::create_dir_all(path.join("tmp")).map_err(|e| format!("{}: {e}", path.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        if !options.keep && tmp.is_some() {
            crate::cleanup::add_dir(path.clone());
        }
        let inst = Instance {
            datadir: path.join("data"),
            socket: path.join("mysqld.sock"),
            port,
            tools,
            options,
            dir: tmp,
            path,
            runs: Cell::new(0),
            _lock: lock,
        };
        let log = inst.path.join("install-db.log");
        let t0 = Instant::now();
        let (c, what) = match &inst.tools.install_db {
            Some(install_db) => {
                let mut c = Command::new(install_db);
                c.args(["--no-defaults", "--auth-root-authentication-method=normal", "--user=root"])
                    .arg(format!("--datadir={}", inst.datadir.display()))
                    .args(["--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=64M"]);
                (c, "mariadb-install-db")
            }
            None => {
                let mut c = Command::new(&inst.tools.mariadbd);
                c.args(["--no-defaults", "--initialize-insecure", "--user=root"])
                    .arg(format!("--datadir={}", inst.datadir.display()));
                (c, "mysqld --initialize-insecure")
            }
        };
        let st = inst.run_logged(c, &log, inst.options.run_timeout)?;
        if !st.success() {
            fail!("{what} failed ({st})\n{}", tail(&log, 60));
        }
        eprintln!(
            "mallocshim-mariadb: instance in {} (port {port}) installed in {:.1} s",
            inst.path.display(),
            t0.elapsed().as_secs_f64()
        );
        Ok(inst)
    }

    /// The instance's directory (datadir, socket, logs, dumps).
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// A fresh subdirectory of the instance's directory.
    pub fn subdir(&self, name: &str) -> Result<PathBuf> {
        let d = self.path.join(name);
        std::fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        Ok(d)
    }

    /// mariadbd's options without `--log-error` (the harness's, then `extra_opts`).
    pub fn mariadbd_opts(&self) -> Vec<String> {
        let p = |name: &str| self.path.join(name).display().to_string();
        // --no-defaults must come first; --user=root because CI runs as root.
        let mut v = vec![
            "--no-defaults".to_string(),
            "--user=root".into(),
            format!("--datadir={}", self.datadir.display()),
            format!("--tmpdir={}", p("tmp")),
            format!("--socket={}", self.socket.display()),
            format!("--port={}", self.port),
            "--bind-address=127.0.0.1".into(),
            format!("--pid-file={}", p("mysqld.pid")),
            "--skip-name-resolve".into(),
            format!("--innodb-buffer-pool-size={}", self.options.buffer_pool),
            "--innodb-flush-log-at-trx-commit=2".into(),
            format!("--max-connections={}", self.options.max_connections),
        ];
        // MySQL 8 sizes its redo log by itself; its X plugin would open a second port.
        v.push(if self.tools.mariadb { "--innodb-log-file-size=64M" } else { "--mysqlx=OFF" }.into());
        v.extend(self.options.extra_opts.iter().cloned());
        v
    }

    /// Starts mariadbd under `launch` and waits until it answers `ping`. Its stdout and stderr
    /// go to its error log (a new `mariadbd.N.err` per start, `mariadbd.N.LABEL.err` with a
    /// [`Launch::label`]), so whatever a preloaded library prints lands there. On failure the
    /// log's tail is in the error and the server is killed.
    pub fn start(&self, launch: &Launch) -> Result<Server<'_>> {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let errlog = match &launch.label {
            Some(l) => self.path.join(format!("mariadbd.{n}.{l}.err")),
            None => self.path.join(format!("mariadbd.{n}.err")),
        };
        Server::start(self, launch, n, errlog)
    }

    /// How many servers were started so far.
    pub fn runs(&self) -> u32 {
        self.runs.get()
    }

    /// A command for one of the client programs, in a clean environment, stdin closed.
    pub(crate) fn command(&self, prog: &Path) -> Command {
        let mut c = Command::new(prog);
        crate::clean_env(&mut c);
        c.stdin(Stdio::null());
        c
    }

    /// Runs `cmd` (cleaned, stdin closed) with both streams into `log` and waits for it, at most
    /// `timeout`; see [`Instance::run_logged_stdin`].
    pub fn run_logged(&self, cmd: Command, log: &Path, timeout: Duration) -> Result<ExitStatus> {
        self.run_logged_stdin(cmd, log, timeout, None)
    }

    /// Runs `cmd` (cleaned) with `stdin` (closed when None) and both streams into `log`, at most
    /// `timeout`, ended by the stop flag: [`crate::child::run_logged`].
    pub fn run_logged_stdin(
        &self,
        cmd: Command,
        log: &Path,
        timeout: Duration,
        stdin: Option<File>,
    ) -> Result<ExitStatus> {
        crate::child::run_logged(cmd, log, timeout, &|| self.options.stopped(), stdin)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        crate::cleanup::remove_dir(&self.path);
        if self.options.keep {
            if let Some(d) = self.dir.take() {
                eprintln!("mallocshim-mariadb: keeping {}", d.keep().display());
            }
        }
    }
}
