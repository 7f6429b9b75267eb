//! Server set-up lines the mariadbd tests share (tests/heap_mariadb.rs,
//! tests/heap_mariadb_cmd.rs): the MEMORY table load that makes the heap grow, and the clean-stop
//! checks. Servers run only through the harness crate (crates/mallocshim-mariadb); nothing here
//! starts one.

use mallocshim_mariadb::{ErrorLog, Server};

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
