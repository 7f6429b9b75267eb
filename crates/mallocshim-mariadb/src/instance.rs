//! The throwaway instance: the machine-wide lock, a temporary directory (under /tmp: the unix
//! socket's path must stay under 108 bytes) with a datadir made by `mariadb-install-db` (root with
//! an empty password), and mariadbd's options (private socket, free loopback port). Servers are
//! started from it one after the other ([`Instance::sibling`] gives a second instance, with its
//! own directory and port, under the same lock); the directory goes when the instance is dropped (kept,
//! and printed, with `MDB_KEEP=1`).

use crate::error::{fail, tail};
use crate::{lock, Launch, Result, Server, Tools};
use std::cell::Cell;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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
    /// Takes the machine-wide lock, creates the directory and the datadir.
    pub fn create(options: Options) -> Result<Instance> {
        Tools::find()?;
        let lock = lock::take()?;
        Instance::with_lock(options, lock)
    }

    /// A second instance under the lock this one holds (a duplicate of its descriptor, so the
    /// lock stays held while either lives): two servers at once, for the fleet test.
    pub fn sibling(&self, options: Options) -> Result<Instance> {
        let lock = self._lock.try_clone().map_err(|e| format!("cannot duplicate the lock: {e}"))?;
        Instance::with_lock(options, lock)
    }

    fn with_lock(options: Options, lock: File) -> Result<Instance> {
        let tools = Tools::find()?;
        let tmp = tempfile::Builder::new()
            .prefix("mallocshim-mdb.")
            .tempdir_in("/tmp")
            .map_err(|e| format!("cannot create a directory in /tmp: {e}"))?;
        let path = tmp.path().to_path_buf();
        std::fs::create_dir(path.join("tmp")).map_err(|e| format!("{}: {e}", path.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        if !options.keep {
            crate::cleanup::add_dir(path.clone());
        }
        let inst = Instance {
            datadir: path.join("data"),
            socket: path.join("mysqld.sock"),
            port,
            tools,
            options,
            dir: Some(tmp),
            path,
            runs: Cell::new(0),
            _lock: lock,
        };
        let log = inst.path.join("install-db.log");
        let t0 = Instant::now();
        let mut c = Command::new(&inst.tools.install_db);
        c.args(["--no-defaults", "--auth-root-authentication-method=normal", "--user=root"])
            .arg(format!("--datadir={}", inst.datadir.display()))
            .args(["--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=64M"]);
        let st = inst.run_logged(c, &log)?;
        if !st.success() {
            fail!("mariadb-install-db failed ({st})\n{}", tail(&log, 60));
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
            "--innodb-log-file-size=64M".into(),
            "--innodb-flush-log-at-trx-commit=2".into(),
            "--max-connections=200".into(),
        ];
        v.extend(self.options.extra_opts.iter().cloned());
        v
    }

    /// Starts mariadbd under `launch` and waits until it answers `ping`. Its stdout and stderr
    /// go to its error log (a new `mariadbd.N.err` per start), so whatever a preloaded library
    /// prints lands there. On failure the log's tail is in the error and the server is killed.
    pub fn start(&self, launch: &Launch) -> Result<Server<'_>> {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let errlog = self.path.join(format!("mariadbd.{n}.err"));
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

    /// Runs `cmd` (cleaned) with both streams into `log`; waits for it.
    pub(crate) fn run_logged(&self, mut cmd: Command, log: &Path) -> Result<std::process::ExitStatus> {
        let f = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let f2 = f.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
        crate::clean_env(&mut cmd);
        cmd.stdin(Stdio::null()).stdout(f).stderr(f2);
        let prog = cmd.get_program().to_string_lossy().into_owned();
        Ok(cmd.status().map_err(|e| format!("cannot run {prog}: {e}"))?)
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
