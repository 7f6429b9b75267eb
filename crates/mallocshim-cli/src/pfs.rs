//! Names for a dump's threads from the server itself: `performance_schema.threads` read through
//! the `mariadb` (or `mysql`) command-line client in batch mode, joined on `THREAD_OS_ID` = the
//! dump's `tid`. Used by `report` and `diagnose` when given `--mysql-socket`. The shim never
//! connects to the server; this runs the client a DBA has, once, and parses its output.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// The client connection options shared by the commands that join with performance_schema.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ConnArgs {
    /// The server's socket, through which the client reads the server's threads: `report` and
    /// `diagnose` name the dump's threads from performance_schema.threads (THREAD_OS_ID = tid:
    /// NAME, PROCESSLIST_ID, PROCESSLIST_USER; MariaDB needs performance_schema=ON, off by
    /// default); `heap --by connection`, `top --by connection|user` and `diagnose`'s connection
    /// lines read information_schema.PROCESSLIST (TID, MariaDB 10.5+).
    #[arg(long, value_name = "PATH")]
    pub mysql_socket: Option<PathBuf>,
    /// The user the client connects as (with --mysql-socket; default: the client's own, e.g.
    /// the login name for unix_socket authentication).
    #[arg(long, value_name = "USER", requires = "mysql_socket")]
    pub mysql_user: Option<String>,
    /// The client program (with --mysql-socket; default `mariadb`, else `mysql`).
    #[arg(long, value_name = "PROGRAM", requires = "mysql_socket")]
    pub mysql_client: Option<PathBuf>,
    /// Where the connections on each thread are read (with --mysql-socket): `processlist` is
    /// MariaDB's information_schema.PROCESSLIST (TID, 10.5+); `performance-schema` is
    /// performance_schema.threads (THREAD_OS_ID; MySQL 8, or MariaDB with performance_schema=ON);
    /// `auto` tries the first, then the second when the server has no TID column.
    #[arg(long, value_enum, value_name = "SOURCE", default_value = "auto", requires = "mysql_socket")]
    pub connections_from: ConnSource,
}

/// Where `processlist::query` reads the server's connections.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ConnSource {
    /// PROCESSLIST, then performance_schema.threads when the server has no TID column.
    #[default]
    Auto,
    /// information_schema.PROCESSLIST (MariaDB 10.5+).
    Processlist,
    /// performance_schema.threads (MySQL 8; MariaDB with performance_schema=ON).
    PerformanceSchema,
}

/// One row of performance_schema.threads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PsThread {
    /// `NAME`, e.g. `thread/sql/one_connection`, `thread/innodb/page_cleaner_thread`.
    pub name: String,
    /// `PROCESSLIST_ID` (the connection id of SHOW PROCESSLIST), when a connection.
    pub processlist_id: Option<u64>,
    /// `PROCESSLIST_USER`, when a connection with a user.
    pub user: Option<String>,
}

/// Threads by OS thread id.
pub type PsThreads = BTreeMap<u32, PsThread>;

/// The query, one row per thread that has an OS thread id.
pub const QUERY: &str = "SELECT THREAD_OS_ID, NAME, PROCESSLIST_ID, PROCESSLIST_USER \
                         FROM performance_schema.threads WHERE THREAD_OS_ID IS NOT NULL";

/// Parses the client's `--batch --skip-column-names` output (tab-separated; `NULL` for null).
pub fn parse(out: &str) -> Result<PsThreads, String> {
    let mut m = PsThreads::new();
    for line in out.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let tid = f.first().and_then(|v| v.parse::<u32>().ok());
        let (Some(tid), Some(name)) = (tid, f.get(1)) else {
            return Err(format!("unexpected line from the client: {line:?}"));
        };
        let opt = |i: usize| f.get(i).filter(|v| **v != "NULL" && !v.is_empty()).map(|v| v.to_string());
        m.insert(
            tid,
            PsThread {
                name: name.to_string(),
                processlist_id: opt(2).and_then(|v| v.parse().ok()),
                user: opt(3),
            },
        );
    }
    Ok(m)
}

/// Runs the client once with `sql` in batch mode (tab-separated, no column names) and returns its
/// output; None without `--mysql-socket`. Errors are one line: the client's own first error line,
/// or why nothing came back.
pub fn client_output(a: &ConnArgs, sql: &str) -> Result<Option<String>, String> {
    let Some(sock) = &a.mysql_socket else { return Ok(None) };
    let run = |prog: &PathBuf| {
        let mut c = Command::new(prog);
        c.arg("--no-defaults").arg(format!("--socket={}", sock.display()));
        if let Some(u) = &a.mysql_user {
            c.arg(format!("--user={u}"));
        }
        c.args(["--batch", "--skip-column-names", "-e", sql]);
        c.output()
    };
    let (prog, out) = match &a.mysql_client {
        Some(p) => (p.clone(), run(p)),
        None => {
            let p = PathBuf::from("mariadb");
            match run(&p) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let q = PathBuf::from("mysql");
                    let r = run(&q);
                    (q, r)
                }
                r => (p, r),
            }
        }
    };
    let out = out.map_err(|e| format!("cannot run the client {}: {e}", prog.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message").trim();
        return Err(format!(
            "the client {} failed on {} ({}): {first}",
            prog.display(),
            sock.display(),
            out.status
        ));
    }
    Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Runs the client once and returns the server's threads; None without `--mysql-socket`.
pub fn query(a: &ConnArgs) -> Result<Option<PsThreads>, String> {
    let Some(out) = client_output(a, QUERY)? else { return Ok(None) };
    let sock = a.mysql_socket.as_ref().map(|s| s.display().to_string()).unwrap_or_default();
    let m = parse(&out)?;
    if m.is_empty() {
        return Err(format!(
            "performance_schema.threads on {sock} has no thread with an OS id: is performance_schema on? (MariaDB: performance_schema=ON, off by default)"
        ));
    }
    Ok(Some(m))
}

impl PsThread {
    /// `NAME`, then ` #id user` for a connection.
    pub fn label(&self) -> String {
        let mut s = self.name.clone();
        if let Some(id) = self.processlist_id {
            s.push_str(&format!(" #{id}"));
        }
        if let Some(u) = &self.user {
            s.push_str(&format!(" {u}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_batch_output_with_nulls() {
        let m = parse(
            "123\tthread/sql/one_connection\t5\troot\n77\tthread/innodb/page_cleaner_thread\tNULL\tNULL\n",
        )
        .unwrap();
        assert_eq!(m[&123].label(), "thread/sql/one_connection #5 root");
        assert_eq!(
            m[&77],
            PsThread { name: "thread/innodb/page_cleaner_thread".into(), ..Default::default() }
        );
        assert!(parse("garbage\n").is_err());
    }
}
