//! The server's connections by OS thread id, from MariaDB's `information_schema.PROCESSLIST`
//! (its `TID` column, MariaDB 10.5 and later: no performance_schema needed), read through the
//! `mariadb` (or `mysql`) client once, in batch mode, as `--mysql-socket` does for `report`
//! (`pfs::client_output`), else (MySQL) from performance_schema.threads (`THREAD_OS_ID`,
//! `PROCESSLIST_ID`...). Used by `heap --by connection`, `top --by`, `diagnose` and `dump`. The join is as of the moment the
//! command runs, not the dump's: run it while the server still has the connections the profile
//! saw. Under `thread_handling=pool-of-threads` a worker thread serves many connections, and
//! MariaDB 10.11 shows `TID` 0 for every connection then ([`check_server`] says so).

use crate::pfs::ConnArgs;
use std::collections::BTreeMap;

/// One row of `information_schema.PROCESSLIST`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conn {
    /// `ID`: the connection id (`CONNECTION_ID()`, `KILL` takes it).
    pub id: u64,
    pub user: String,
    pub host: String,
    /// `DB` (None: no default database).
    pub db: Option<String>,
    /// `COMMAND`: `Sleep`, `Query`, `Daemon`...
    pub command: String,
    /// The first 40 characters of `INFO` (the statement running), None when idle.
    pub info: Option<String>,
    /// `MEMORY_USED`: what the server counts for the connection itself (its tagged allocations).
    pub memory_used: Option<u64>,
}

/// Connections by OS thread id (several under a thread pool).
pub type Conns = BTreeMap<u32, Vec<Conn>>;

/// The query: every connection with an OS thread id but the client's own.
pub const QUERY: &str = "SELECT TID, ID, USER, HOST, DB, COMMAND, LEFT(INFO, 40), MEMORY_USED \
                         FROM information_schema.PROCESSLIST \
                         WHERE TID IS NOT NULL AND ID <> CONNECTION_ID() ORDER BY ID";

/// The same columns from performance_schema.threads, for servers without PROCESSLIST's TID
/// (MySQL 8): MEMORY_USED is the thread's current bytes in
/// performance_schema.memory_summary_by_thread_by_event_name (what its memory instruments count;
/// NULL when none is enabled).
pub const PS_QUERY: &str = "SELECT t.THREAD_OS_ID, t.PROCESSLIST_ID, t.PROCESSLIST_USER, \
                            t.PROCESSLIST_HOST, t.PROCESSLIST_DB, t.PROCESSLIST_COMMAND, \
                            LEFT(t.PROCESSLIST_INFO, 40), \
                            (SELECT NULLIF(SUM(m.CURRENT_NUMBER_OF_BYTES_USED), 0) \
                            FROM performance_schema.memory_summary_by_thread_by_event_name m \
                            WHERE m.THREAD_ID = t.THREAD_ID) \
                            FROM performance_schema.threads t \
                            WHERE t.THREAD_OS_ID IS NOT NULL AND t.PROCESSLIST_ID IS NOT NULL \
                            AND t.PROCESSLIST_ID <> CONNECTION_ID() ORDER BY t.PROCESSLIST_ID";

/// Parses the client's `--batch --skip-column-names` output (tab-separated, `NULL` for null; the
/// client escapes tabs and newlines inside values as `\t` and `\n`).
pub fn parse(out: &str) -> Result<Conns, String> {
    let mut m = Conns::new();
    for line in out.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        let (Some(tid), Some(id), true) = (num(0), num(1), f.len() >= 7) else {
            return Err(format!("unexpected line from the client: {line:?}"));
        };
        let opt = |i: usize| f.get(i).filter(|v| **v != "NULL").map(|v| v.to_string());
        m.entry(tid as u32).or_default().push(Conn {
            id,
            user: opt(2).unwrap_or_default(),
            host: opt(3).unwrap_or_default(),
            db: opt(4),
            command: opt(5).unwrap_or_default(),
            info: opt(6).filter(|v| !v.is_empty()),
            memory_used: num(7),
        });
    }
    Ok(m)
}

/// The server's connections through the client; None without `--mysql-socket`. A server without
/// the `TID` column (MySQL, MariaDB before 10.5) gets the client's own error line.
pub fn query(a: &ConnArgs) -> Result<Option<Conns>, String> {
    use crate::pfs::ConnSource;
    let ps = || -> Result<Option<Conns>, String> {
        let Some(out) = crate::pfs::client_output(a, PS_QUERY)? else { return Ok(None) };
        let m = parse(&out)?;
        if m.is_empty() {
            return Err("performance_schema.threads has no connection with an OS id: is performance_schema \
                        on? (MariaDB: performance_schema=ON, off by default)"
                .into());
        }
        Ok(Some(m))
    };
    match a.connections_from {
        ConnSource::PerformanceSchema => ps(),
        src => match crate::pfs::client_output(a, QUERY) {
            Ok(Some(out)) => parse(&out).map(Some),
            Ok(None) => Ok(None),
            Err(e) if src == ConnSource::Auto && no_tid(&e) => ps().map_err(|p| format!("{e}; then {p}")),
            Err(e) => Err(e),
        },
    }
}

/// Err (one line) when the server's connections run on none of process `pid`'s threads: the
/// socket belongs to another process than `pid` (a server with no connection cannot be told),
/// or every connection has TID 0, which MariaDB 10.11 shows under its thread pool
/// (`thread_handling=pool-of-threads`; measured, docs/heap-profiles.md): no connection has a
/// thread to charge.
pub fn check_server(pid: u32, conns: &Conns) -> Result<(), String> {
    let mine = |t: &u32| std::path::Path::new(&format!("/proc/{pid}/task/{t}")).exists();
    if conns.is_empty() || conns.keys().any(mine) {
        return Ok(());
    }
    if conns.keys().all(|&t| t == 0) {
        return Err(format!(
            "the server's {} connections have no thread (PROCESSLIST TID 0): it runs a thread pool \
             (thread_handling=pool-of-threads), whose workers run every connection's statements in turn, \
             so held bytes cannot be charged to a connection; --by thread shows what each worker holds",
            conns.values().map(Vec::len).sum::<usize>()
        ));
    }
    Err(format!(
        "process {pid} is not the server on that socket: none of its {} connections runs on a thread of {pid} \
         (PROCESSLIST TID)",
        conns.values().map(Vec::len).sum::<usize>()
    ))
}

/// The client's error for a PROCESSLIST without TID (MySQL; MariaDB before 10.5).
fn no_tid(err: &str) -> bool {
    err.contains("Unknown column") && err.contains("TID")
}

impl Conn {
    /// `#ID user@host db=DB Command "INFO"`, `MEMORY_USED` when the server counts it.
    pub fn label(&self) -> String {
        let mut s = format!("#{} {}@{}", self.id, self.user, self.host);
        // A connection read back from a profile's labels has no db, command nor statement.
        if !self.command.is_empty() {
            s += &format!(" db={}", self.db.as_deref().unwrap_or("-"));
            s += &format!(" {}", self.command);
        }
        if let Some(m) = self.memory_used {
            s += &format!(" MEMORY_USED={}", crate::heap::bytes(m as i64).replace(' ', ""));
        }
        if let Some(i) = &self.info {
            s += &format!(" \"{i}\"");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_batch_output() {
        let m = parse(
            "4321\t12\tapp\tlocalhost\tshop\tQuery\tSELECT * FROM t ORDER BY x\t209715200\n\
             4400\t13\tidle\tlocalhost\tNULL\tSleep\tNULL\t81920\n\
             4321\t14\tother\t10.0.0.1:5555\tNULL\tSleep\tNULL\tNULL\n",
        )
        .unwrap();
        assert_eq!(m[&4321].len(), 2, "two connections last run by one pool worker");
        assert_eq!(
            m[&4321][0].label(),
            "#12 app@localhost db=shop Query MEMORY_USED=200.00MiB \"SELECT * FROM t ORDER BY x\""
        );
        assert_eq!(m[&4400][0].label(), "#13 idle@localhost db=- Sleep MEMORY_USED=80.0KiB");
        assert_eq!(m[&4321][1].memory_used, None);
        assert!(parse("garbage\n").is_err());
        assert!(parse("1\t2\tonly three\n").is_err());
        assert!(no_tid("the client mysql failed on /s (exit status: 1): ERROR 1054 (42S22) at line 1: Unknown column 'TID' in 'field list'"));
        assert!(!no_tid("ERROR 2002 (HY000): Can't connect to local server through socket"));
    }

    #[test]
    fn a_thread_pool_is_named() {
        let m = parse("0\t12\tapp\tlocalhost\tshop\tSleep\tNULL\t209715200\n0\t13\tidle\tlocalhost\tNULL\tSleep\tNULL\t81920\n")
            .unwrap();
        let e = check_server(std::process::id(), &m).unwrap_err();
        assert!(
            e.contains("2 connections have no thread")
                && e.contains("thread pool")
                && e.contains("--by thread"),
            "{e}"
        );
        assert!(check_server(std::process::id(), &Conns::new()).is_ok());
    }
}
