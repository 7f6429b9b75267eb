//! `mallocshim heap --by connection` on Debian's mariadbd (10.11) under the shim, per backend
//! (glibc, jemalloc, tcmalloc, mimalloc; `MARIADB_BACKEND` runs one), at the default mean
//! (512 KiB): two sessions held open by a `mariadb` client each, as their own users, one
//! holding a 200 MiB user variable (`SET @big = REPEAT('x', 200*1024*1024)`, with
//! `--max-allowed-packet=512M`), one idle after `SELECT 1`. Once the server's PROCESSLIST shows
//! both sessions asleep (each takes a user lock last: `IS_USED_LOCK` names its connection), a
//! dump (SIGUSR1) writes the heap profile, and `heap --by connection --mysql-socket SOCK`
//! (PROCESSLIST's `TID` read through the client) names the big session first (its connection
//! id, `bigsess@localhost`), with inuse within ±10% of 200 MiB and of the server's own
//! `MEMORY_USED` for it, and lists the idle one (`idlesess`) near zero (at most 4 MiB: 8 samples
//! of the 512 KiB mean). Wrong input: `--by connection` without `--mysql-socket`, and with a
//! socket no server listens on, is one `mallocshim heap:` line and exit status 2.
//!
//! On the command before `--by` (main at a74b66e), `--by connection` is an unknown argument.

mod common;

use mallocshim_mariadb::{dumps, Instance, Launch, Options};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn heap(args: &[&str], profile: &Path) -> std::process::Output {
    Command::new(common::cli_bin()).arg("heap").args(args).arg(profile).output().expect("run mallocshim heap")
}

/// The heap profile of the server's dump whose JSON file is `json` (written after the JSON:
/// waited for up to 60 s).
fn profile_of(dir: &Path, pid: u32, json: &Path) -> PathBuf {
    let seq = json.file_name().and_then(|n| n.to_str()).and_then(|n| n.split('.').nth(2)).unwrap_or("");
    let want = format!("mallocshim.{pid}.{seq}.pb.gz");
    let t0 = Instant::now();
    loop {
        let found = dumps(dir, pid, "pb.gz")
            .into_iter()
            .map(|(_, p)| p)
            .find(|p| p.file_name().and_then(|n| n.to_str()) == Some(want.as_str()));
        if let Some(p) = found {
            return p;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no profile {want} in {} after 60 s", dir.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// (inuse bytes, who) of each row of `heap --by` output.
fn rows(out: &str) -> Vec<(f64, String)> {
    out.lines()
        .skip_while(|l| !l.trim_start().starts_with("inuse bytes"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let x: f64 = t[0].parse().unwrap();
            let m = match t[1] {
                "B" => 1.0,
                "KiB" => 1024.0,
                "MiB" => 1048576.0,
                "GiB" => 1073741824.0,
                u => panic!("unit {u} in {l:?}"),
            };
            (x * m, t[9..].join(" "))
        })
        .collect()
}

fn check(backend: &str) {
    let what = format!("mariadbd under {backend}");
    let dir = common::work_dir().join(format!("heap-by-connection-{backend}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let opts = Options { extra_opts: vec!["--max-allowed-packet=512M".into()], ..Options::default() };
    let inst = Instance::create(opts).unwrap_or_else(|e| panic!("{e}"));
    let launch = Launch::shim(common::shim(), backend)
        .var("MALLOCSHIM_DUMP_DIR", dir.display().to_string())
        .var("MALLOCSHIM_DUMP_FORMATS", "json,pprof");
    let srv = inst.start(&launch).unwrap_or_else(|e| panic!("{what}: mariadbd did not start: {e}"));
    srv.sql("CREATE USER bigsess@localhost; CREATE USER idlesess@localhost")
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    // Each session takes a user lock after its statements: the lock's holder is its connection.
    let big = common::mariadb::session(
        &srv,
        "bigsess",
        "SET @big = REPEAT('x', 200*1024*1024); DO GET_LOCK('bigsess_done', 0);",
    );
    let idle = common::mariadb::session(&srv, "idlesess", "SELECT 1; DO GET_LOCK('idlesess_done', 0);");
    let (big_id, big_mem) = common::mariadb::asleep(&srv, "bigsess_done", &what);
    let (idle_id, _) = common::mariadb::asleep(&srv, "idlesess_done", &what);
    let (json, _) = srv.dump_now(&dir, Duration::from_secs(20)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let p = profile_of(&dir, srv.pid(), &json);
    let sock = inst.socket.display().to_string();
    let o =
        heap(&["--by", "connection", "--mysql-socket", &sock, "--mysql-user", "root", "--top", "1000"], &p);
    assert!(o.status.success(), "{what}: {}", common::describe(&o));
    let out = common::stdout(&o);
    eprintln!("{what} (MEMORY_USED of the big session {big_mem}):\n{out}");
    let r = rows(&out);
    let (b, who) = r.first().unwrap_or_else(|| panic!("{what}: no rows\n{out}"));
    assert!(who.starts_with(&format!("#{big_id} bigsess@localhost")), "{what}: first row {who}\n{out}");
    assert!(
        (b - 200.0 * 1048576.0).abs() <= 20.0 * 1048576.0,
        "{what}: big session {b} B, not 200 MiB ± 10%\n{out}"
    );
    // The server's own count of the session (its user variable is allocated MY_THREAD_SPECIFIC).
    let mem = big_mem as f64;
    assert!((b - mem).abs() <= 0.1 * mem, "{what}: big session {b} B, MEMORY_USED {big_mem} B (±10%)\n{out}");
    let idle_row = r.iter().find(|(_, w)| w.starts_with(&format!("#{idle_id} idlesess@localhost")));
    let (i, _) = idle_row.unwrap_or_else(|| panic!("{what}: no row for the idle session\n{out}"));
    // Near zero: its thread's own blocks (net buffers, MDL, a few KiB each; its THD is allocated
    // by the thread that accepted the connection) are sampled a handful of times at most, each
    // sample weighing about the 512 KiB mean: 4 MiB is 8 samples, 2% of the big session.
    assert!(*i <= 4.0 * 1048576.0, "{what}: idle session holds {i} B\n{out}");

    // Wrong input: one line, exit status 2.
    for (args, want) in [
        (vec!["--by", "connection"], "needs --mysql-socket"),
        (vec!["--by", "connection", "--mysql-socket", "/nonexistent/mysqld.sock"], "failed on /nonexistent"),
    ] {
        let o = heap(&args, &p);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{what}: {args:?}: {}", common::describe(&o));
        assert!(
            err.starts_with("mallocshim heap:") && err.contains(want) && err.lines().count() == 1,
            "{what}: {args:?}: {err}"
        );
    }

    common::mariadb::end([big, idle]);
    common::mariadb::stop_cleanly(srv, &what);
}

#[test]
fn heap_by_connection_names_the_session_holding_a_200_mib_variable() {
    for backend in common::mariadb::backends() {
        check(backend);
    }
}
