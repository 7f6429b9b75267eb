//! Issue 39's goal "a block allocated by connection A and freed by connection B leaves A's
//! figure, never B's", on Debian's mariadbd (10.11) under the shim, per backend (glibc,
//! jemalloc, tcmalloc, mimalloc; `MARIADB_BACKEND` runs one), heap profiles at the default mean
//! (512 KiB), through `mallocshim top PID --by connection` (the control channel, PROCESSLIST's
//! `TID` read through the client).
//!
//! The server's own A-allocates, B-frees: the table cache. Connection A (`opener`) reads each of
//! 200 MyISAM tables whose rows are 60 KB wide (60 `VARCHAR(1000)` columns, latin1): opening a
//! table allocates its `TABLE` (two record buffers of the row's width, the fields) and, the
//! first time, its `TABLE_SHARE` (the default row) in A's thread, and both stay in the table
//! cache after A's statement ends (`table_open_cache`, `table_definition_cache` 1000). Connection
//! B (`freer`, RELOAD privilege) then runs `FLUSH TABLES`, which closes every unused cached table
//! in B's thread. Asserted:
//! - before the flush, A holds at least 20 MiB (82 MiB measured under glibc: per table, record
//!   buffers, the share's default row, MyISAM's row buffer and the fields, about 400 KiB) and
//!   B at most 4 MiB (8 samples of the mean);
//! - after it, A's figure has lost at least 80% of that (what stays: blocks of A's that the
//!   flush does not free), and B still holds at most 4 MiB: the freed blocks' charge left with
//!   them, none moved to the thread that freed them.
//!
//! On a shim that charged the freeing thread (live bytes kept per thread at malloc and free
//! instead of per sample), B's figure would go negative or A's would not drop.

mod common;

use common::top_view::{top, views, Row, MIB};
use mallocshim_mariadb::{Instance, Launch, Options, Server};
use std::io::Write;

const TABLES: usize = 200;

/// 60 columns of `VARCHAR(1000)` latin1: a 60 KB row.
fn wide_table(i: usize) -> String {
    let cols: Vec<String> = (1..=60).map(|c| format!("c{c} VARCHAR(1000)")).collect();
    format!("CREATE TABLE wide.w{i} ({}) ENGINE=MyISAM CHARSET=latin1;", cols.join(", "))
}

/// One view of `top --by connection`: the rows of A and B (`what` names the run).
fn view(srv: &Server, sock: &str, ids: (u64, u64), what: &str) -> (Row, Row, String) {
    let args = ["--by", "connection", "--count", "1", "--mysql-socket", sock, "--mysql-user", "root"];
    let o = top(srv.pid(), &args);
    let out = common::stdout(&o);
    assert!(o.status.success(), "{what}: {}", common::describe(&o));
    let mut v = views(&out).into_iter().next().unwrap_or_else(|| panic!("{what}: no view\n{out}"));
    let mut take = |id: u64| {
        let i = v.iter().position(|r| r.id == id).unwrap_or_else(|| panic!("{what}: no row for {id}\n{out}"));
        v.swap_remove(i)
    };
    let (a, b) = (take(ids.0), take(ids.1));
    (a, b, out)
}

fn check(backend: &str) {
    let what = format!("mariadbd under {backend}");
    common::cli_bin();
    let opts = Options {
        extra_opts: vec!["--table-open-cache=1000".into(), "--table-definition-cache=1000".into()],
        ..Options::default()
    };
    let inst = Instance::create(opts).unwrap_or_else(|e| panic!("{e}"));
    let srv = inst
        .start(&Launch::shim(common::shim(), backend))
        .unwrap_or_else(|e| panic!("{what}: mariadbd did not start: {e}"));
    srv.sql(
        "CREATE DATABASE wide; CREATE USER opener@localhost; CREATE USER freer@localhost; \
         GRANT SELECT ON wide.* TO opener@localhost; GRANT RELOAD ON *.* TO freer@localhost",
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    // 50 tables a client run: one argument of the client's stays under the kernel's 128 KiB.
    for first in (1..=TABLES).step_by(50) {
        let tables: String = (first..first + 50).map(wide_table).collect();
        srv.sql(&tables).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    srv.sql("FLUSH TABLES").unwrap_or_else(|e| panic!("{what}: {e}"));
    let reads: String = (1..=TABLES).map(|i| format!("SELECT COUNT(*) FROM wide.w{i}; ")).collect();
    let opener = common::mariadb::session(&srv, "opener", &format!("{reads}DO GET_LOCK('opener_done', 0);"));
    let mut freer = common::mariadb::session(&srv, "freer", "SELECT 1; DO GET_LOCK('freer_ready', 0);");
    let (a_id, _) = common::mariadb::asleep(&srv, "opener_done", &what);
    let (b_id, _) = common::mariadb::asleep(&srv, "freer_ready", &what);
    let sock = inst.socket.display().to_string();

    let (a0, b0, out0) = view(&srv, &sock, (a_id, b_id), &what);
    eprintln!("{what}: before FLUSH TABLES:\n{out0}");
    assert!(
        a0.held >= 20.0 * MIB,
        "{what}: A (opener) holds {} B after opening {TABLES} tables\n{out0}",
        a0.held
    );
    assert!(b0.held <= 4.0 * MIB, "{what}: B (freer) holds {} B before its flush\n{out0}", b0.held);

    let stdin = freer.stdin.as_mut().unwrap();
    stdin
        .write_all(b"DO RELEASE_LOCK('freer_ready'); FLUSH TABLES; DO GET_LOCK('freer_done', 0);\n")
        .unwrap();
    stdin.flush().unwrap();
    let (b_again, _) = common::mariadb::asleep(&srv, "freer_done", &what);
    assert_eq!(b_again, b_id, "{what}: the flush ran on another connection");
    let (a1, b1, out1) = view(&srv, &sock, (a_id, b_id), &what);
    eprintln!("{what}: after B's FLUSH TABLES:\n{out1}");
    assert!(
        a1.held <= 0.2 * a0.held,
        "{what}: A (opener) holds {} B after B freed its tables (before: {} B)\n{out1}",
        a1.held,
        a0.held
    );
    assert!(
        (0.0..=4.0 * MIB).contains(&b1.held),
        "{what}: B (freer) holds {} B after freeing A's tables\n{out1}",
        b1.held
    );
    common::mariadb::end([opener, freer]);
    common::mariadb::stop_cleanly(srv, &what);
}

#[test]
fn blocks_a_connection_allocated_and_another_freed_leave_the_first_ones_figure() {
    for backend in common::mariadb::backends() {
        check(backend);
    }
}
