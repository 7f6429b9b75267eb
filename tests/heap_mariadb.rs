//! Heap profiles of a real mariadbd (Debian's 10.11) under sysbench, through the harness crate
//! (crates/mallocshim-mariadb): `MALLOCSHIM_DUMP_FORMATS=json,pprof`, the default sampling mean
//! (`MALLOCSHIM_PROF_SAMPLE_BYTES` unset, 512 KiB). Per backend (`MARIADB_BACKEND=NAME` runs
//! one): oltp_read_only at 8 threads for 10 s with `kill -USR1` half-way, a dump after it (the
//! base), then a heavier load that keeps memory — 200,000 rows of 200 bytes into a MEMORY table
//! (mariadbd's heap engine, allocating through my_malloc) — and a last dump. Asserts: every
//! profile parses with `go tool pprof -raw` (Debian's golang-go; missing = failure); frames
//! resolve to mariadbd's exported symbols (at least one of my_malloc, alloc_root,
//! dispatch_command, mysql_parse, ...); the mariadbd mapping carries the build ID `readelf -n`
//! reads from the binary; `go tool pprof -top -base` between the base and the last dump runs
//! and shows growth, and `mallocshim heap LAST BASE` shows at least 16 MiB of inuse_space
//! growth; zero sysbench errors, exit status 0 after mariadb-admin shutdown, no crash report.

mod common;

use mallocshim_format::pprof::Profile;
use mallocshim_mariadb::{dumps, fulltext, DumpWaiter, Instance, Launch, Options, Sysbench};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const MARIADBD: &str = "/usr/sbin/mariadbd";
const SYMBOLS: [&str; 8] = [
    "my_malloc",
    "alloc_root",
    "dispatch_command",
    "mysql_parse",
    "do_command",
    "mysql_execute_command",
    "my_realloc",
    "multi_alloc_root",
];

fn go_pprof(args: &[&str], files: &[&Path]) -> String {
    let o = Command::new(common::require("go"))
        .arg("tool")
        .arg("pprof")
        .args(args)
        .args(files)
        .env("HOME", common::work_dir())
        .output()
        .expect("run go tool pprof");
    assert!(o.status.success(), "go tool pprof {args:?} {files:?}: {}", common::describe(&o));
    common::stdout(&o)
}

/// The GNU build ID of `path`, as `readelf -n` prints it.
fn build_id(path: &str) -> String {
    let o = Command::new(common::require("readelf")).arg("-n").arg(path).output().expect("run readelf");
    let out = common::stdout(&o);
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID:").map(|s| s.trim().to_string()))
        .unwrap_or_else(|| panic!("no build ID in readelf -n {path}:\n{out}"))
}

/// The pprof file of dump `seq` (written beside the JSON one), waiting up to 10 s for it.
fn pprof_of(dir: &Path, pid: u32, json: &Path) -> PathBuf {
    let seq = json.file_name().and_then(|n| n.to_str()).and_then(|n| n.split('.').nth(2)).unwrap_or("");
    let want = dir.join(format!("mallocshim.{pid}.{seq}.pb.gz"));
    for _ in 0..100 {
        if want.exists() {
            return want;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no {} beside {}", want.display(), json.display());
}

fn check(backend: &str) {
    let so = common::shim();
    let inst = Instance::create(Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let dir = inst.subdir("dumps").unwrap();
    let launch = Launch::shim(&so, backend)
        .var("MALLOCSHIM_DUMP_DIR", dir.display().to_string())
        .var("MALLOCSHIM_DUMP_FORMATS", "json,pprof");
    let srv = inst.start(&launch).unwrap_or_else(|e| panic!("mariadbd did not start ({backend}): {e}"));
    let pid = srv.pid();
    srv.sysbench_prepare().unwrap_or_else(|e| panic!("{e}"));
    let waiter = DumpWaiter::after(pid, &dir, Duration::from_secs(5), Duration::from_secs(10));
    let sb = srv.sysbench(&Sysbench::new("oltp_read_only", 8).time(10)).unwrap_or_else(|e| panic!("{e}"));
    let mid = waiter.wait().unwrap_or_else(|e| panic!("{backend}: no dump under load: {e}"));
    let base = srv.dump_now(&dir, Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}"));
    common::mariadb::load_memory_table(&srv, backend);
    let late = srv.dump_now(&dir, Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}"));
    let what = format!("mariadbd heap profiles under {backend}: sysbench {sb:?}");
    common::mariadb::stop_cleanly(srv, &what);
    assert_eq!(sb.exit, 0, "{what}");
    assert_eq!(sb.errors, 0, "{what}: query errors");

    let all: Vec<PathBuf> = dumps(&dir, pid, "pb.gz").into_iter().map(|(_, p)| p).collect();
    assert!(all.len() >= 3, "{what}: the three dumps' profiles expected, found {all:?}");
    let want_id = build_id(MARIADBD);
    for p in &all {
        let raw = go_pprof(&["-raw"], &[p]);
        assert!(raw.contains("Samples:"), "{what}: {}: -raw prints no samples\n{raw}", p.display());
        let prof = Profile::read(p).unwrap_or_else(|e| panic!("{what}: {}: {e}", p.display()));
        let m = prof
            .mapping
            .iter()
            .find(|m| prof.str(m.filename).ends_with("/mariadbd"))
            .unwrap_or_else(|| panic!("{what}: {}: no mariadbd mapping", p.display()));
        assert_eq!(prof.str(m.build_id), want_id, "{what}: {}: mariadbd's build ID", p.display());
    }
    let (mid, base, late) =
        (pprof_of(&dir, pid, &mid.0), pprof_of(&dir, pid, &base.0), pprof_of(&dir, pid, &late.0));
    let raw = go_pprof(&["-raw"], &[&mid]);
    let named: Vec<&str> = SYMBOLS.iter().copied().filter(|s| raw.contains(&format!(" {s} "))).collect();
    assert!(!named.is_empty(), "{what}: none of {SYMBOLS:?} in the profile under load\n{raw}");

    let diff = go_pprof(&["-top", "-sample_index=inuse_space", "-base"], &[&base, &late]);
    let total = diff
        .lines()
        .find(|l| l.contains("% of ") && l.contains(" total"))
        .unwrap_or_else(|| panic!("{what}: no total in -base\n{diff}"));
    assert!(!total.contains("of 0 total") && !total.contains("of -"), "{what}: no growth in -base\n{diff}");
    let o = Command::new(common::cli_bin()).arg("heap").args([&late, &base]).output().unwrap();
    assert!(o.status.success(), "{what}: mallocshim heap: {}", common::describe(&o));
    let heap = common::stdout(&o);
    let head = heap.lines().find(|l| l.starts_with("growth by inuse_space")).unwrap_or("");
    let mib: f64 = head
        .split("(total ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|x| x.parse().ok())
        .unwrap_or(0.0);
    assert!(head.contains(" MiB") && mib >= 16.0, "{what}: growth of at least 16 MiB expected\n{heap}");
    eprintln!(
        "{backend}: qps={:?} profiles={} symbols={named:?} build_id={want_id}\n-base: {total}\n{heap}",
        sb.qps,
        all.len()
    );
}

#[test]
fn mariadb_heap_profiles() {
    for b in common::mariadb::backends() {
        check(b);
    }
}

/// Every allocation sampled (`MALLOCSHIM_PROF_SAMPLE_BYTES=1`) while mariadbd's connection
/// threads start: each calls pthread_getattr_np (my_get_stack_bounds), which allocates while it
/// holds the thread's lock. A sampler that looked the stack bounds up there deadlocked the
/// server at its first connection. Under every backend: sysbench completes with no error and the
/// server shuts down cleanly.
#[test]
fn every_allocation_sampled_while_connections_start() {
    for backend in common::mariadb::backends() {
        let so = common::shim();
        let inst = Instance::create(Options::default()).unwrap_or_else(|e| panic!("{e}"));
        let launch = Launch::shim(&so, backend).var("MALLOCSHIM_PROF_SAMPLE_BYTES", "1");
        let srv = inst.start(&launch).unwrap_or_else(|e| panic!("mariadbd did not start ({backend}): {e}"));
        srv.sysbench_prepare().unwrap_or_else(|e| panic!("{e}"));
        let sb = srv.sysbench(&Sysbench::new("oltp_read_only", 4).time(3)).unwrap_or_else(|e| panic!("{e}"));
        let stopped = srv.shutdown().unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!((sb.exit, sb.errors), (0, 0), "{backend}: sysbench {sb:?}");
        assert_eq!(stopped.status, 0, "{backend}: mariadbd's exit status");
    }
}

/// A size as `go tool pprof -top` prints it (`0`, `512B`, `7171.11kB`, `-0.06MB`, `2.3GB`), in bytes.
fn pprof_bytes(v: &str) -> Option<f64> {
    let units = [("GB", 1024.0 * 1024.0 * 1024.0), ("MB", 1024.0 * 1024.0), ("kB", 1024.0), ("B", 1.0)];
    match units.iter().find(|(u, _)| v.ends_with(u)) {
        Some((u, m)) => v.strip_suffix(u)?.parse::<f64>().ok().map(|x| x * m),
        None => v.parse().ok(),
    }
}

/// From a `go tool pprof -top` table: the total (bytes) and, per node, (flat, cum) in bytes.
fn pprof_top(text: &str) -> (f64, Vec<(String, f64, f64)>) {
    let total = text
        .lines()
        .find_map(|l| l.split(" of ").nth(1)?.strip_suffix(" total").and_then(pprof_bytes))
        .unwrap_or(0.0);
    let rows = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 6 || !f[1].ends_with('%') || !f[4].ends_with('%') {
                return None;
            }
            Some((f[5..].join(" "), pprof_bytes(f[0])?, pprof_bytes(f[3])?))
        })
        .collect();
    (total, rows)
}

const FT_SITE: &str = "Item_func_match::init_search";

/// InnoDB FULLTEXT phrase searches (the harness's `fulltext` data set, small: `FT_ROWS`
/// documents, default 50,000 of 30 words, loaded and indexed in about 2 s) under the shim
/// (`MARIADB_BACKEND`, default glibc) with `MALLOCSHIM_DUMP_FORMATS=json,pprof` at the default
/// sampling mean (512 KiB): a dump before the searches (the base), one while 4 sysbench threads
/// run them for 8 s (`fulltext-phrase.lua`, dump at 5 s), one after. Asserts, with `go tool
/// pprof -top -base`: under the searches at least 4 MiB more inuse_space (13 and 20 MB measured), at
/// least half of it below `Item_func_match::init_search` (the exported caller of InnoDB's
/// fulltext search; InnoDB's `fts_*` functions are not exported by Debian's stripped mariadbd, so
/// the innermost frames show as `[mariadbd]`, raw addresses kept) with `[mariadbd]` the top flat
/// site, and at least 80% of the alloc_space growth below it; after the searches, less than a
/// tenth of that inuse growth is left below it (each query frees its heaps); zero query errors
/// and a clean shutdown.
#[test]
fn fulltext_search_growth() {
    let backend = std::env::var("MARIADB_BACKEND").unwrap_or_else(|_| "glibc".into());
    let so = common::shim();
    let inst = Instance::create(Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let dir = inst.subdir("dumps").unwrap();
    let lua = inst.dir().join("fulltext-phrase.lua");
    std::fs::write(&lua, fulltext::PHRASE_LUA).unwrap();
    let launch = Launch::shim(&so, &backend)
        .var("MALLOCSHIM_DUMP_DIR", dir.display().to_string())
        .var("MALLOCSHIM_DUMP_FORMATS", "json,pprof");
    let srv = inst.start(&launch).unwrap_or_else(|e| panic!("mariadbd did not start ({backend}): {e}"));
    let pid = srv.pid();
    let mut s = fulltext::Settings::new(so.clone());
    s.rows = common::env_u64("FT_ROWS", 50_000);
    let (load_s, index_s) = fulltext::load(&srv, &s).unwrap_or_else(|e| panic!("{e}"));
    let base = srv.dump_now(&dir, Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}"));
    let waiter = DumpWaiter::after(pid, &dir, Duration::from_secs(5), Duration::from_secs(10));
    let sb = srv
        .sysbench(&Sysbench::new(lua.display().to_string(), 4).time(8).db("ft"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mid = waiter.wait().unwrap_or_else(|e| panic!("{backend}: no dump under the searches: {e}"));
    let after = srv.dump_now(&dir, Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}"));
    let what = format!("FULLTEXT under {backend}: sysbench {sb:?}");
    common::mariadb::stop_cleanly(srv, &what);
    assert_eq!(sb.exit, 0, "{what}");
    assert_eq!(sb.errors, 0, "{what}: query errors");
    assert!(sb.queries.unwrap_or(0) > 0, "{what}: no search ran");

    let (base, mid, after) =
        (pprof_of(&dir, pid, &base.0), pprof_of(&dir, pid, &mid.0), pprof_of(&dir, pid, &after.0));
    let cum = |text: &str, name: &str| pprof_top(text).1.iter().find(|r| r.0 == name).map_or(0.0, |r| r.2);
    let inuse =
        go_pprof(&["-top", "-cum", "-nodecount=40", "-sample_index=inuse_space", "-base"], &[&base, &mid]);
    let flat = go_pprof(&["-top", "-nodecount=5", "-sample_index=inuse_space", "-base"], &[&base, &mid]);
    let alloc =
        go_pprof(&["-top", "-cum", "-nodecount=40", "-sample_index=alloc_space", "-base"], &[&base, &mid]);
    let left =
        go_pprof(&["-top", "-cum", "-nodecount=40", "-sample_index=inuse_space", "-base"], &[&base, &after]);
    eprintln!(
        "{what}\nload {load_s:.1} s, index {index_s:.1} s\n--- inuse growth under the searches (-cum)\n{inuse}\n--- flat\n{flat}\n--- alloc growth\n{alloc}\n--- inuse growth after the searches\n{left}"
    );
    let (total, _) = pprof_top(&inuse);
    let ft = cum(&inuse, FT_SITE);
    assert!(
        total >= 4.0 * 1024.0 * 1024.0,
        "{what}: under 4 MiB of inuse growth under the searches\n{inuse}"
    );
    assert!(ft >= 0.5 * total, "{what}: {FT_SITE} holds {ft} of {total} bytes of the growth\n{inuse}");
    let top_flat = pprof_top(&flat).1.into_iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|r| r.0);
    assert_eq!(top_flat.as_deref(), Some("[mariadbd]"), "{what}: top flat site of the growth\n{flat}");
    let (atotal, _) = pprof_top(&alloc);
    assert!(cum(&alloc, FT_SITE) >= 0.8 * atotal, "{what}: alloc_space growth not below {FT_SITE}\n{alloc}");
    let kept = cum(&left, FT_SITE);
    assert!(kept < 0.1 * ft, "{what}: {kept} bytes still below {FT_SITE} after the searches\n{left}");
}
