//! A running mariadbd: readiness, SQL through the `mariadb` client, sysbench, SIGUSR1 dumps,
//! and the clean shutdown with its exit status. Dropping a server that was not shut down kills
//! it (SIGTERM, SIGKILL after 30 s); the child also gets SIGKILL if the thread that started it
//! dies (PR_SET_PDEATHSIG), so no server outlives the harness. The server runs in its own process
//! group (a terminal's Ctrl-C reaches the harness, which decides); the instance's stop flag ends
//! the wait for readiness.

use crate::error::{fail, tail};
use crate::{DumpWaiter, Instance, Launch, Result, Sysbench, SysbenchReport};
use std::cell::Cell;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A server started by [`Instance::start`].
pub struct Server<'a> {
    inst: &'a Instance,
    child: Option<Child>,
    pid: u32,
    run: u32,
    errlog: PathBuf,
    sysbench_runs: Cell<u32>,
}

/// How a server ended.
#[derive(Clone, Debug)]
pub struct Stopped {
    /// The exit status as a shell gives it: the exit code, or 128+N when killed by signal N.
    pub status: i32,
    /// The server's error log (its stdout and stderr too).
    pub errlog: PathBuf,
    /// The pid it had.
    pub pid: u32,
}

fn shell_status(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

impl<'a> Server<'a> {
    pub(crate) fn start(
        inst: &'a Instance,
        launch: &Launch,
        run: u32,
        errlog: PathBuf,
    ) -> Result<Server<'a>> {
        let f = std::fs::File::create(&errlog).map_err(|e| format!("{}: {e}", errlog.display()))?;
        let f2 = f.try_clone().map_err(|e| format!("{}: {e}", errlog.display()))?;
        let mariadbd = &inst.tools.mariadbd;
        let mut c = match launch.wrapper.split_first() {
            Some((prog, args)) => {
                let mut c = Command::new(prog);
                c.args(args).arg(mariadbd);
                c
            }
            None => Command::new(mariadbd),
        };
        crate::clean_env(&mut c);
        c.envs(launch.vars.iter().map(|(k, v)| (k, v)));
        c.args(inst.mariadbd_opts()).arg(format!("--log-error={}", errlog.display()));
        c.stdin(Stdio::null()).stdout(f).stderr(f2).process_group(0);
        // SAFETY: prctl(2) is async-signal-safe; it only sets the child's parent-death signal.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let cmdline = format!("{:?} {:?}", launch.vars, c);
        let _ = std::fs::write(inst.dir().join(format!("mariadbd.{run}.cmd")), &cmdline);
        let child = c.spawn().map_err(|e| format!("cannot start {}: {e}", mariadbd.display()))?;
        crate::cleanup::add_pid(child.id());
        let mut srv =
            Server { inst, pid: child.id(), child: Some(child), run, errlog, sysbench_runs: Cell::new(0) };
        let t0 = Instant::now();
        while !srv.ping() {
            if let Some(st) = srv.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                srv.child = None;
                crate::cleanup::remove_pid(srv.pid);
                fail!(
                    "mariadbd (pid {}, {:?}) died during startup with status {}\n{}",
                    srv.pid,
                    launch.vars,
                    shell_status(st),
                    tail(&srv.errlog, 40)
                );
            }
            if inst.options.stopped() {
                srv.kill();
                return Err(crate::Error::Interrupted);
            }
            if t0.elapsed() > inst.options.start_timeout {
                srv.kill();
                fail!(
                    "mariadbd (pid {}) did not answer ping within {} s\n{}",
                    srv.pid,
                    inst.options.start_timeout.as_secs(),
                    tail(&srv.errlog, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!(
            "mallocshim-mariadb: mariadbd pid {} ready (run {run}, log {})",
            srv.pid,
            srv.errlog.display()
        );
        Ok(srv)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The error log of this run (`mariadbd.N.err` in the instance's directory).
    pub fn errlog(&self) -> &Path {
        &self.errlog
    }

    pub fn instance(&self) -> &'a Instance {
        self.inst
    }

    fn admin(&self) -> Command {
        let mut c = self.inst.command(&self.inst.tools.admin);
        c.args(["--no-defaults", "--user=root", "--connect-timeout=5"])
            .arg(format!("--socket={}", self.inst.socket.display()));
        c
    }

    fn ping(&self) -> bool {
        let mut c = self.admin();
        c.arg("ping").stdout(Stdio::null()).stderr(Stdio::null());
        c.status().is_ok_and(|s| s.success())
    }

    /// A `mariadb` client command connected to the server as root (add arguments and run it).
    pub fn client(&self) -> Command {
        let mut c = self.inst.command(&self.inst.tools.client);
        c.args(["--no-defaults", "--user=root"]).arg(format!("--socket={}", self.inst.socket.display()));
        c
    }

    /// Runs SQL in batch mode; its output (tab-separated, with the header line).
    pub fn sql(&self, sql: &str) -> Result<String> {
        let mut c = self.client();
        c.arg("--batch").arg("-e").arg(sql);
        let out = c.output().map_err(|e| format!("cannot run the mariadb client: {e}"))?;
        if !out.status.success() {
            fail!("SQL `{sql}` failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The value of a one-value query (its last line), e.g. `SELECT @@version_malloc_library`.
    pub fn sql_value(&self, sql: &str) -> Result<String> {
        Ok(self.sql(sql)?.lines().last().unwrap_or("").to_string())
    }

    /// Runs the SQL of `file` (the client reads it on stdin) in database `db` (none when empty),
    /// output into `log`; a client that fails is an error with the log's tail.
    pub fn sql_file(&self, db: &str, file: &Path, log: &Path) -> Result<()> {
        let f = std::fs::File::open(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let mut c = self.client();
        c.arg("--batch");
        if !db.is_empty() {
            c.arg(db);
        }
        let st = self.inst.run_logged_stdin(c, log, self.inst.options.run_timeout, Some(f))?;
        if !st.success() {
            fail!("the SQL of {} failed ({st})\n{}", file.display(), tail(log, 20));
        }
        Ok(())
    }

    /// Creates database `sbtest` and sysbench's oltp dataset (the instance's tables x rows).
    pub fn sysbench_prepare(&self) -> Result<()> {
        self.sql("CREATE DATABASE IF NOT EXISTS sbtest")?;
        let o = &self.inst.options;
        let t0 = Instant::now();
        let log = self.inst.dir().join("sysbench-prepare.out");
        let mut c = Command::new(&self.inst.tools.sysbench);
        c.arg("oltp_read_only")
            .args(self.sysbench_common("sbtest", true))
            .arg(format!("--threads={}", o.sb_tables.clamp(1, 4)))
            .arg("prepare");
        let st = self.inst.run_logged(c, &log, self.inst.options.run_timeout)?;
        if !st.success() {
            fail!("sysbench prepare failed ({st})\n{}", tail(&log, 30));
        }
        eprintln!(
            "mallocshim-mariadb: sysbench dataset ({} x {} rows) prepared in {:.1} s",
            o.sb_tables,
            o.sb_rows,
            t0.elapsed().as_secs_f64()
        );
        Ok(())
    }

    fn sysbench_common(&self, db: &str, oltp_dataset: bool) -> Vec<String> {
        let o = &self.inst.options;
        let mut v = vec![
            "--db-driver=mysql".into(),
            format!("--mysql-socket={}", self.inst.socket.display()),
            "--mysql-user=root".into(),
            "--mysql-password=".into(),
            format!("--mysql-db={db}"),
        ];
        if oltp_dataset {
            v.push(format!("--tables={}", o.sb_tables));
            v.push(format!("--table-size={}", o.sb_rows));
        }
        v
    }

    /// Runs a sysbench workload against the server and parses its report (its output goes to
    /// [`Sysbench::log`], or `sysbench-RUN-WORKLOAD-K.out` in the instance's directory). A
    /// non-zero exit is in [`SysbenchReport::exit`] (with the report's tail on stderr), not an
    /// error; a run past its time limit (3 x `--time` + 2 min, or the instance's `run_timeout`)
    /// or stopped by the stop flag is.
    pub fn sysbench(&self, sb: &Sysbench) -> Result<SysbenchReport> {
        let k = self.sysbench_runs.get() + 1;
        self.sysbench_runs.set(k);
        let name = Path::new(&sb.workload).file_stem().map(|s| s.to_string_lossy().into_owned());
        let out = sb.log.clone().unwrap_or_else(|| {
            self.inst.dir().join(format!(
                "sysbench-{}-{}-{k}.out",
                self.run,
                name.unwrap_or_else(|| "workload".into())
            ))
        });
        let mut c = Command::new(&self.inst.tools.sysbench);
        c.arg(&sb.workload).args(self.sysbench_common(&sb.db, sb.oltp_dataset)).args(sb.run_args());
        let timeout = match sb.time_s {
            0 => self.inst.options.run_timeout,
            t => Duration::from_secs(t * 3 + 120),
        };
        let st = self.inst.run_logged(c, &out, timeout)?;
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let report = SysbenchReport::parse(&text, shell_status(st), out.clone());
        if report.exit != 0 {
            eprintln!(
                "mallocshim-mariadb: sysbench {} exited with status {}\n{}",
                sb.workload,
                report.exit,
                tail(&out, 20)
            );
        }
        Ok(report)
    }

    /// Sends SIGUSR1 now and waits up to `timeout` for a new JSON dump of this pid in `dir`.
    pub fn dump_now(&self, dir: &Path, timeout: Duration) -> Result<(PathBuf, Duration)> {
        DumpWaiter::after(self.pid, dir, Duration::ZERO, timeout).wait()
    }

    /// Stops the server with `mariadb-admin shutdown`, waits for it (the instance's stop timeout,
    /// then SIGKILL) and returns its exit status. A non-zero status prints the log's tail.
    pub fn shutdown(mut self) -> Result<Stopped> {
        let out = self.admin().arg("shutdown").output();
        if let Ok(o) = &out {
            if !o.status.success() {
                eprintln!(
                    "mallocshim-mariadb: mariadb-admin shutdown failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
            }
        }
        let Some(mut child) = self.child.take() else { fail!("mariadbd pid {} is not running", self.pid) };
        // From here the pid may be reaped; an interrupted harness leaves it to PR_SET_PDEATHSIG.
        crate::cleanup::remove_pid(self.pid);
        let t0 = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().map_err(|e| format!("wait for mariadbd: {e}"))? {
                break st;
            }
            if t0.elapsed() > self.inst.options.stop_timeout {
                eprintln!(
                    "mallocshim-mariadb: mariadbd (pid {}) still running {} s after shutdown; killing it\n{}",
                    self.pid,
                    self.inst.options.stop_timeout.as_secs(),
                    tail(&self.errlog, 40)
                );
                let _ = child.kill();
                break child.wait().map_err(|e| format!("wait for mariadbd: {e}"))?;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let status = shell_status(st);
        if status != 0 {
            eprintln!("mallocshim-mariadb: mariadbd exited with status {status}\n{}", tail(&self.errlog, 40));
        }
        Ok(Stopped { status, errlog: self.errlog.clone(), pid: self.pid })
    }

    /// Ends the server at once: SIGTERM, SIGKILL after 30 s. For error paths; see [`Server::shutdown`].
    fn kill(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        crate::cleanup::remove_pid(self.pid);
        // SAFETY: kill(2) on our own child, not yet reaped (so the pid is still ours).
        unsafe {
            libc::kill(self.pid as i32, libc::SIGTERM);
        }
        let t0 = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.wait();
    }
}

impl Drop for Server<'_> {
    fn drop(&mut self) {
        if self.child.is_some() {
            eprintln!("mallocshim-mariadb: killing mariadbd pid {} (not shut down)", self.pid);
            self.kill();
        }
    }
}
