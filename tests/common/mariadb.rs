//! Server set-up lines the mariadbd tests share (tests/heap_mariadb.rs,
//! tests/heap_mariadb_cmd.rs, tests/heap_by_connection.rs, tests/top_by_connection.rs): the MEMORY
//! table load that makes the heap grow, sessions held open as their own users, and the clean-stop
//! checks. Servers run only through the harness crate (crates/mallocshim-mariadb); nothing here
//! starts one.

use mallocshim_mariadb::{ErrorLog, Server};
use std::io::Write;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// 200,000 rows of 200 bytes into a MEMORY table: about 50 MiB the server holds on its heap.
const MEMORY_TABLE_LOAD: &str = "SET SESSION max_heap_table_size = 512*1024*1024, \
     max_recursive_iterations = 1000000; \
     CREATE DATABASE IF NOT EXISTS heapgrow; \
     CREATE TABLE heapgrow.t (id INT, v VARCHAR(255)) ENGINE=MEMORY; \
     INSERT INTO heapgrow.t WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s \
     WHERE n < 200000) SELECT n, REPEAT('x', 200) FROM s";

/// Loads [`MEMORY_TABLE_LOAD`] into `srv`; `what` names the run in the failure.
pub fn load_memory_table(srv: &Server, what: &str) {
    srv.sql(MEMORY_TABLE_LOAD).unwrap_or_else(|e| panic!("{what}: the MEMORY table load: {e}"));
}

/// Shuts `srv` down and asserts a clean stop: exit status 0 and no crash report in its error
/// log; `what` names the run in the failure.
pub fn stop_cleanly(srv: Server, what: &str) {
    let stopped = srv.shutdown().unwrap_or_else(|e| panic!("{what}: {e}"));
    let log = ErrorLog::read(&stopped.errlog);
    assert_eq!(stopped.status, 0, "{what}: no clean shutdown");
    assert!(log.crash_lines().is_empty(), "{what}: crash report {:?}", log.crash_lines());
}

/// The backends a mariadbd test runs under: every backend, or only the one `MARIADB_BACKEND`
/// names.
pub fn backends() -> impl Iterator<Item = &'static str> {
    let only = std::env::var("MARIADB_BACKEND").ok();
    super::BACKENDS.into_iter().filter(move |b| only.as_deref().is_none_or(|o| o == *b))
}

/// Ends sessions started by [`session`]: closes each client's input (it quits) and waits for it.
pub fn end(sessions: impl IntoIterator<Item = Child>) {
    for mut c in sessions {
        drop(c.stdin.take());
        let _ = c.wait();
    }
}

/// A session held open: a `mariadb` client as `user` that ran `sql` and waits for more input.
pub fn session(srv: &Server, user: &str, sql: &str) -> Child {
    let mut c = srv.client();
    c.arg(format!("--user={user}")).arg("--batch").stdin(Stdio::piped()).stdout(Stdio::null());
    let mut ch = c.spawn().unwrap_or_else(|e| panic!("cannot start the client as {user}: {e}"));
    let stdin = ch.stdin.as_mut().unwrap();
    stdin.write_all(format!("{sql}\n").as_bytes()).unwrap();
    stdin.flush().unwrap();
    ch
}

/// Waits until the session that took the user lock `lock` (its last statement) is asleep;
/// its connection id and the server's MEMORY_USED for it.
pub fn asleep(srv: &Server, lock: &str, what: &str) -> (u64, u64) {
    let t0 = Instant::now();
    let q = format!(
        "SELECT ID, MEMORY_USED FROM information_schema.PROCESSLIST \
         WHERE ID = IS_USED_LOCK('{lock}') AND COMMAND = 'Sleep'"
    );
    loop {
        let out = srv.sql(&q).unwrap_or_else(|e| panic!("{what}: {e}"));
        if let Some(l) = out.lines().nth(1) {
            let f: Vec<u64> = l.split('\t').filter_map(|v| v.parse().ok()).collect();
            if f.len() == 2 {
                return (f[0], f[1]);
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "{what}: {lock} not asleep in 120 s: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
