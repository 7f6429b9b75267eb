//! The dump signal and the dump files can never harm the host (issue 21 part 3, issue 22),
//! black-box under every backend:
//! - a program that sends itself SIGUSR1 20,000 times (glibc's tst-mallocfork2 made 19,992
//!   dump files this way) gets a bounded number of dump files, exactly one line about merged
//!   requests, exit 0, in a generous time bound; with a tight bound (`MALLOCSHIM_DUMP_KEEP=3`,
//!   `MALLOCSHIM_DUMP_MIN_INTERVAL_MS=20`) it keeps its newest 3 dumps, whole, says so once, and
//!   leaves another process's files alone;
//! - a signal sent before any constructor has run (by an earlier-initialised preloaded library)
//!   is caught and answered with a dump instead of killing the program;
//! - `mallocshim dump` follows the process's `MALLOCSHIM_DUMP_SIGNAL` and formats (SIGUSR2, pprof
//!   only, json with pprof), waits for a process still being loaded, refuses `none`;
//! - a real mariadbd, started under the shim, sent the dump signal at 0, 1, 2, 5, 10, 20 and
//!   50 ms after exec (`kill -USR1` the moment the shim catches it, and `mallocshim dump`) never
//!   dies and gives a dump for each signal;
//! - `mallocshim dump` given the pid of a wrapper under the shim that execs the program (as
//!   `numactl`, `nohup`, `setsid` do) never signals the image in between (exec resets the
//!   shim's handler to the default action until the new image's shim has started);
//! - `mallocshim dump` on a process whose main thread is held in a system call (its signals
//!   stay pending there) never sends a signal that would merge into a pending one.
//!
//! Long because: every black-box test of the dump signal and `mallocshim dump` in one place,
//! sharing its helpers (fresh directories, the shim and command under test, the busy program).

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Extra environment variables of one case.
type Env<'a> = &'a [(&'a str, &'a str)];

/// The profiling settings of the house rules: on, off, every call timed, every allocation
/// heap-sampled.
const SETTINGS4: [(&str, &[(&str, &str)]); 4] = [
    ("profiling on", &[]),
    ("MALLOCSHIM_PROFILE=off", &[("MALLOCSHIM_PROFILE", "off")]),
    ("MALLOCSHIM_SAMPLE=1", &[("MALLOCSHIM_SAMPLE", "1")]),
    ("MALLOCSHIM_PROF_SAMPLE_BYTES=1", &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")]),
];

const MERGED: &str = "mallocshim: dump requests came while a dump was being written";
const REMOVED: &str = "mallocshim: keeping the newest";

fn fresh_dir(tag: &str) -> PathBuf {
    let d = work_dir().join("dump-signal").join(tag);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create dump dir");
    d
}

/// Every name in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read dump dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// (seq, ext) of the dump files of `pid` in `dir`.
fn dumps_of(dir: &Path, pid: u32) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = names(dir)
        .iter()
        .filter_map(|n| mallocshim_format::dump::parse_dump_file_name(n))
        .filter(|&(p, _, _)| p == pid)
        .map(|(_, s, e)| (s, e.to_string()))
        .collect();
    v.sort();
    v
}

fn storm_prog() -> PathBuf {
    cc("dump_storm.c", "dump_storm", &[])
}

/// Runs dump_storm under the shim; returns (output, pid, seconds).
fn storm(backend: &str, env: &[(&str, &str)], mode: &str, dir: &Path) -> (std::process::Output, u32, f64) {
    let mut c = preloaded(storm_prog(), backend);
    c.envs(env.iter().copied()).env("MALLOCSHIM_DUMP_DIR", dir).arg(mode).arg("20000");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let t0 = Instant::now();
    let child = c.spawn().expect("start dump_storm");
    let pid = child.id();
    let o = child.wait_with_output().expect("wait dump_storm");
    (o, pid, t0.elapsed().as_secs_f64())
}

#[test]
fn self_signal_storm_is_bounded() {
    let limits: [(&str, Env, usize); 2] = [
        ("defaults", &[], 100),
        ("tight", &[("MALLOCSHIM_DUMP_KEEP", "3"), ("MALLOCSHIM_DUMP_MIN_INTERVAL_MS", "20")], 3),
    ];
    let mut failures = Vec::new();
    for backend in BACKENDS {
        // The same program with the dump signal off: no dumps, the baseline of the time bound.
        let dir = fresh_dir(&format!("storm-{backend}-baseline"));
        let (o, _, base) = storm(backend, &[("MALLOCSHIM_DUMP_SIGNAL", "none")], "single", &dir);
        assert!(o.status.success(), "{backend} baseline: {}", describe(&o));
        for (setting, env) in SETTINGS4 {
            for mode in ["single", "threaded"] {
                for (lname, lenv, keep) in limits {
                    let what = format!("{backend}, {setting}, {mode}, {lname}");
                    let dir = fresh_dir(&format!(
                        "storm-{backend}-{}-{mode}-{lname}",
                        setting.replace(['=', ' '], "_")
                    ));
                    // Another process's dumps in the same directory.
                    let foreign = ["mallocshim.1.0.json", "mallocshim.1.0.prom", "mallocshim.1.7.json"];
                    for f in foreign {
                        std::fs::write(dir.join(f), "{}").unwrap();
                    }
                    let mut all_env: Vec<(&str, &str)> = env.to_vec();
                    all_env.extend_from_slice(lenv);
                    let (o, pid, secs) = storm(backend, &all_env, mode, &dir);
                    let err = stderr(&o);
                    let files = dumps_of(&dir, pid);
                    let jsons: Vec<u64> = files.iter().filter(|f| f.1 == "json").map(|f| f.0).collect();
                    let proms: Vec<u64> = files.iter().filter(|f| f.1 == "prom").map(|f| f.0).collect();
                    let written = files.iter().map(|f| f.0 + 1).max().unwrap_or(0) as usize;
                    let merged = err.matches(MERGED).count();
                    let removed = err.matches(REMOVED).count();
                    let mut bad = Vec::new();
                    if !o.status.success() || !stdout(&o).contains("handled=20000") {
                        bad.push(format!("exit {:?}, stdout {}", o.status, stdout(&o).trim()));
                    }
                    if jsons.is_empty() || jsons.len() > keep || jsons != proms {
                        bad.push(format!("want 1..={keep} whole dumps, got json {jsons:?} prom {proms:?}"));
                    }
                    if merged != 1 {
                        bad.push(format!("{merged} lines about merged requests, want 1"));
                    }
                    if removed != usize::from(written > keep) {
                        bad.push(format!(
                            "{removed} lines about removed dumps after {written} dumps (keep {keep})"
                        ));
                    }
                    let left: Vec<String> =
                        names(&dir).into_iter().filter(|n| n.starts_with("mallocshim.1.")).collect();
                    if left != foreign.iter().map(|s| s.to_string()).collect::<Vec<_>>() {
                        bad.push(format!("another process's files touched: {left:?}"));
                    }
                    if names(&dir).iter().any(|n| n.ends_with(".tmp")) {
                        bad.push("a .tmp file left".into());
                    }
                    // Rate limit: the first dump, one per interval after it, the exit dump.
                    if lname == "defaults" && written > 2 + secs as usize {
                        bad.push(format!("{written} dumps in {secs:.2} s at one per second"));
                    }
                    if secs > 5.0 * base + 10.0 {
                        bad.push(format!("took {secs:.2} s, baseline without dumps {base:.2} s"));
                    }
                    eprintln!(
                        "{what}: {secs:.2} s (baseline {base:.2} s), {written} dumps written, {} kept",
                        jsons.len()
                    );
                    if !bad.is_empty() {
                        failures.push(format!("{what}: {}\n--- stderr\n{err}", bad.join("; ")));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of 64 runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// A preloaded library initialised before the shim sends SIGUSR1 from its constructor: the
/// shim's load-time handler catches it and the program gets a dump, where the old shim (handler
/// installed at its first call) let the signal kill it.
#[test]
fn signal_before_any_constructor_is_remembered() {
    let lib = work_dir().join("early_kill_lib.so");
    if !lib.exists() {
        let tmp = work_dir().join(format!(".early_kill_lib.{}.so", std::process::id()));
        let o = Command::new(require("gcc"))
            .args(["-O1", "-shared", "-fPIC", "-o"])
            .arg(&tmp)
            .arg(root().join("tests/c/early_kill_lib.c"))
            .output()
            .expect("gcc");
        assert!(o.status.success(), "{}", describe(&o));
        std::fs::rename(&tmp, &lib).unwrap();
    }
    let prog = storm_prog();
    // Without the shim the signal kills the program: the check below is real.
    let o = plain(&prog).env("LD_PRELOAD", &lib).args(["single", "0"]).output().unwrap();
    assert_eq!(o.status.signal(), Some(libc::SIGUSR1), "{}", describe(&o));
    for backend in BACKENDS {
        for (setting, env) in SETTINGS4 {
            let dir = fresh_dir(&format!("early-{backend}-{}", setting.replace(['=', ' '], "_")));
            let mut c = preloaded(&prog, backend);
            // The shim first, so the loader initialises the other library before it.
            let preload = format!("{} {}", shim().display(), lib.display());
            c.env("LD_PRELOAD", preload).envs(env.iter().copied()).env("MALLOCSHIM_DUMP_DIR", &dir);
            let child =
                c.args(["single", "0"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            let pid = child.id();
            let o = child.wait_with_output().unwrap();
            assert!(o.status.success(), "{backend}, {setting}: {}", describe(&o));
            let jsons = dumps_of(&dir, pid).into_iter().filter(|f| f.1 == "json").count();
            assert_eq!(jsons, 1, "{backend}, {setting}: one dump for the early signal: {:?}", names(&dir));
        }
    }
}

/// busy.c under the shim; returns the child (stdin piped: drop it to end the program).
fn spawn_busy(backend: &str, env: &[(&str, &str)], dir: &Path) -> std::process::Child {
    let prog = cc("busy.c", "busy", &[]);
    let mut c = preloaded(prog, backend);
    c.envs(env.iter().copied()).env("MALLOCSHIM_DUMP_DIR", dir).stdin(Stdio::piped()).stdout(Stdio::piped());
    c.spawn().expect("start busy")
}

fn end_busy(mut child: std::process::Child, what: &str) {
    drop(child.stdin.take());
    let st = child.wait().unwrap();
    assert!(st.success(), "{what}: busy ended with {st:?}");
}

#[test]
fn dump_command_follows_the_process_signal_and_formats() {
    let cases: [(&str, Env, &[&str]); 4] = [
        ("SIGUSR2", &[("MALLOCSHIM_DUMP_SIGNAL", "SIGUSR2")], &["json", "prom"]),
        ("signal 12", &[("MALLOCSHIM_DUMP_SIGNAL", "12")], &["json", "prom"]),
        ("pprof only", &[("MALLOCSHIM_DUMP_FORMATS", "pprof")], &["pb.gz"]),
        ("json,pprof", &[("MALLOCSHIM_DUMP_FORMATS", "json,pprof")], &["json", "pb.gz"]),
    ];
    for backend in BACKENDS {
        for (name, env, exts) in cases {
            let what = format!("{backend}, {name}");
            let dir = fresh_dir(&format!("cli-{backend}-{}", name.replace([' ', ','], "_")));
            // Asked for at once, while the program is still being loaded: the command waits
            // until the process catches the signal.
            let child = spawn_busy(backend, env, &dir);
            let pid = child.id();
            let o = Command::new(cli_bin()).args(["dump", &pid.to_string()]).output().unwrap();
            assert!(o.status.success(), "{what}: {}", describe(&o));
            let printed: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
            let mut got: Vec<String> = printed
                .iter()
                .map(|p| {
                    assert!(Path::new(p).exists(), "{what}: printed {p}, which does not exist");
                    let n = Path::new(p).file_name().unwrap().to_str().unwrap();
                    let (p2, _, ext) = mallocshim_format::dump::parse_dump_file_name(n).expect("a dump name");
                    assert_eq!(p2, pid, "{what}: {n}");
                    ext.to_string()
                })
                .collect();
            got.sort();
            assert_eq!(got, exts.to_vec(), "{what}: printed {printed:?}");
            end_busy(child, &what);
        }
        // MALLOCSHIM_DUMP_SIGNAL=none: refused in one line, and not signalled.
        let dir = fresh_dir(&format!("cli-{backend}-none"));
        let mut child = spawn_busy(backend, &[("MALLOCSHIM_DUMP_SIGNAL", "none")], &dir);
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let o = Command::new(cli_bin()).args(["dump", &child.id().to_string()]).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{backend} none: {}", describe(&o));
        assert!(stderr(&o).contains("MALLOCSHIM_DUMP_SIGNAL=none"), "{backend}: {}", stderr(&o));
        end_busy(child, &format!("{backend}, none"));
    }
}

/// `mallocshim dump` on a process whose main thread is held in one system call for 3 s (as a
/// starting mariadbd's can be), with the shim's thread running: the thread listens on the
/// channel from its start (issue 37.4), so the command sends no signal at all (none is ever
/// pending in `ShdPnd`, so none can be merged and lost) and the dump comes while the main thread
/// is still held. Before 37.4 the channel opened only when the main thread took an attach
/// signal: the command's attach stayed pending for the 3 s and the dump came after them (and,
/// before the `ShdPnd` wait, not at all).
#[test]
fn dump_command_sends_no_signal_to_a_held_main_thread() {
    let prog = cc("stuck_main.c", "stuck_main", &[]);
    let (_, cli) = under_test();
    for backend in BACKENDS {
        let dir = fresh_dir(&format!("pending-{backend}"));
        let mut c = preloaded(&prog, backend);
        c.arg("3").env("MALLOCSHIM_DUMP_DIR", &dir).env("MALLOCSHIM_DUMP_FORMATS", "json");
        let mut child = c.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start stuck_main");
        let pid = child.id();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("stuck pid="), "{backend}: {line:?}");
        // The command starts once the main thread is held (its vfork child exists).
        let until = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .trim()
            .is_empty()
        {
            assert!(Instant::now() < until, "{backend}: stuck_main never vforked");
            std::thread::sleep(Duration::from_millis(1));
        }
        let t0 = Instant::now();
        let dumper = std::thread::spawn({
            let cli = cli.clone();
            move || Command::new(cli).args(["dump", &pid.to_string(), "--timeout", "20"]).output().unwrap()
        });
        let mut seen_pending = false;
        while !dumper.is_finished() && t0.elapsed() < Duration::from_secs(25) {
            seen_pending |= status_bit(pid, "ShdPnd:", libc::SIGUSR1);
            std::thread::sleep(Duration::from_millis(5));
        }
        let o = dumper.join().unwrap();
        let took = t0.elapsed().as_secs_f64();
        line.clear();
        out.read_line(&mut line).unwrap();
        drop(child.stdin.take());
        let st = child.wait().unwrap();
        assert!(st.success(), "{backend}: stuck_main ended with {st:?} (signal {:?})", st.signal());
        eprintln!("{backend}: dumped after {took:.2} s");
        assert_eq!(line, "free\n", "{backend}");
        assert!(
            o.status.success() && stdout(&o).contains(&format!("mallocshim.{pid}.")),
            "{backend}: mallocshim dump after {took:.1} s: {}; dumps there: {:?}",
            describe(&o),
            dumps_of(&dir, pid)
        );
        assert!(!seen_pending, "{backend}: the command signalled a process whose shim thread listens");
        assert!(took < 2.5, "{backend}: the dump waited {took:.1} s for the held main thread");
    }
}

// ---------------------------------------------------------------------------------------------
// A real mariadbd, signalled while it starts.

const DELAYS_MS: [u64; 7] = [0, 1, 2, 5, 10, 20, 50];

/// How one start of mariadbd is signalled.
struct Start<'a> {
    so: &'a Path,
    cli: &'a Path,
    backend: &'a str,
    delay: Duration,
    by_cli: bool,
}

/// One start of mariadbd: the dump signal at `delay` after exec, by `kill` (at the delay, or
/// the moment the process catches the signal if that is later) or by `mallocshim dump`. Returns
/// None when it survived and dumped, else what happened.
fn start_and_signal(
    inst: &mallocshim_mariadb::Instance,
    how: &Start,
    dumpdir: &Path,
    n: u32,
) -> Option<String> {
    let Start { so, cli, backend, delay, by_cli } = *how;
    let errlog = inst.dir().join(format!("signal.{n}.err"));
    let log = std::fs::File::create(&errlog).unwrap();
    let mut c = Command::new(&inst.tools.mariadbd);
    mallocshim_mariadb::clean_env(&mut c);
    c.env("LD_PRELOAD", so)
        .env("MALLOCSHIM_BACKEND", backend)
        .env("MALLOCSHIM_DUMP_DIR", dumpdir)
        .env("MALLOCSHIM_DUMP_FORMATS", "json")
        .args(inst.mariadbd_opts())
        .arg(format!("--log-error={}", errlog.display()))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0);
    let mut child = c.spawn().expect("start mariadbd");
    let t0 = Instant::now();
    let pid = child.id();
    let outcome = (|| {
        std::thread::sleep(delay.saturating_sub(t0.elapsed()));
        if by_cli {
            let o = Command::new(cli).args(["dump", &pid.to_string(), "--timeout", "30"]).output().unwrap();
            if !o.status.success() || !stdout(&o).contains(&format!("mallocshim.{pid}.")) {
                // Say what the server was doing, so a rare failure explains itself.
                let state = match child.try_wait() {
                    Ok(Some(st)) => format!("mariadbd ended with {st:?} (signal {:?})", st.signal()),
                    _ => format!("mariadbd alive ({})", proc_state(pid)),
                };
                return Some(format!(
                    "mallocshim dump: {}; {state}; its dumps: {:?}; {}",
                    describe(&o).replace('\n', " | "),
                    dumps_of(dumpdir, pid),
                    server_side(pid, &errlog)
                ));
            }
        } else {
            let until = Instant::now() + Duration::from_secs(30);
            while !catches(pid, libc::SIGUSR1) {
                if Instant::now() > until {
                    return Some("the shim never caught SIGUSR1".into());
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            // SAFETY: kill(2) on the child's pid.
            unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
        }
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(format!(
                    "mariadbd ended with {st:?} (signal {:?}) before its dump",
                    st.signal()
                ));
            }
            if dumps_of(dumpdir, pid).iter().any(|f| f.1 == "json") {
                return None;
            }
            if Instant::now() > until {
                return Some(format!("no dump within 30 s; {}", server_side(pid, &errlog)));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    })();
    // SAFETY: kill(2) on the child's process group.
    unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
    let _ = child.wait();
    outcome.map(|o| format!("{backend} delay {delay:?} {}: {o}", if by_cli { "dump" } else { "kill" }))
}

/// What a failure's message says of the server: the shim's lines and the last lines of its
/// log, and each thread's name, state and kernel wait channel (is the shim's thread there, and
/// where does it wait?).
fn server_side(pid: u32, errlog: &Path) -> String {
    let err = std::fs::read_to_string(errlog).unwrap_or_default();
    let shim: Vec<&str> = err.lines().filter(|l| l.contains("mallocshim:")).take(20).collect();
    let tail: Vec<&str> = err.lines().rev().take(5).collect();
    let task = |tid: &str, f: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/{f}")).unwrap_or_default().trim().to_string()
    };
    let mut threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .map(|e| {
                    let tid = e.file_name().to_string_lossy().into_owned();
                    let stat = task(&tid, "stat");
                    let state = stat.rsplit(") ").next().and_then(|r| r.split(' ').next()).unwrap_or("?");
                    format!("{tid} {} {state} {}", task(&tid, "comm"), task(&tid, "wchan"))
                })
                .collect()
        })
        .unwrap_or_default();
    threads.sort();
    format!("the shim's lines: {shim:?}; its log's last lines: {tail:?}; its threads: {threads:?}")
}

/// `pid`'s state, threads and caught signals from /proc/PID/status, for a failure's message.
fn proc_state(pid: u32) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let keep = ["State:", "Threads:", "SigCgt:", "SigBlk:"];
    s.lines().filter(|l| keep.iter().any(|k| l.starts_with(k))).collect::<Vec<_>>().join(", ")
}

/// Whether `pid` catches `sig` (/proc/PID/status SigCgt).
fn catches(pid: u32, sig: i32) -> bool {
    status_bit(pid, "SigCgt:", sig)
}

/// `sig`'s bit in the signal mask on /proc/PID/status line `field` (false when unreadable).
fn status_bit(pid: u32, field: &str, sig: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix(field)).and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        })
        .is_some_and(|m| m >> (sig - 1) & 1 == 1)
}

/// The shim and the command under test: this tree's, or (to show what the old ones did)
/// `DUMP_SIGNAL_TEST_SHIM` and `DUMP_SIGNAL_TEST_CLI`.
fn under_test() -> (PathBuf, PathBuf) {
    let pick = |k: &str, d: fn() -> PathBuf| std::env::var_os(k).map(PathBuf::from).unwrap_or_else(d);
    (pick("DUMP_SIGNAL_TEST_SHIM", shim), pick("DUMP_SIGNAL_TEST_CLI", cli_bin))
}

/// 7 delays x 20 starts (`DUMP_SIGNAL_TEST_REPS`) under every backend, each by kill and by the
/// command: 1,120 starts of mariadbd, about 3 minutes here.
#[test]
fn dump_signal_while_mariadbd_starts_never_kills_it() {
    for b in BACKENDS {
        if let Some(l) = direct_lib(b).filter(|_| b != "jemalloc") {
            require_file(l);
        }
    }
    let (so, cli) = under_test();
    let reps = env_u64("DUMP_SIGNAL_TEST_REPS", 20);
    let inst = mallocshim_mariadb::Instance::create(mallocshim_mariadb::Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let dumpdir = inst.subdir("dumps").unwrap();
    let mut failures = Vec::new();
    let mut n = 0;
    let t0 = Instant::now();
    for backend in BACKENDS {
        for delay in DELAYS_MS {
            for _ in 0..reps {
                for by_cli in [false, true] {
                    n += 1;
                    let how =
                        Start { so: &so, cli: &cli, backend, delay: Duration::from_millis(delay), by_cli };
                    if let Some(f) = start_and_signal(&inst, &how, &dumpdir, n) {
                        eprintln!("{f}");
                        failures.push(f);
                    }
                }
            }
        }
    }
    eprintln!("{n} starts of mariadbd in {:.0} s, {} failed", t0.elapsed().as_secs_f64(), failures.len());
    assert!(failures.is_empty(), "{} of {n} starts failed:\n{}", failures.len(), failures.join("\n"));
}

/// `mallocshim dump PID` where PID is a wrapper under the shim that execs `busy` (also under the
/// shim) 0 to 6 ms after it starts, while the command looks at it: the process is never ended by
/// the signal and the command prints the new image's dump. The command before this test's fix
/// (signal once the process catches it) killed 3 of 150 mariadbd started through `setsid` 5 ms
/// before the command ran; here it kills some of these starts (`DUMP_SIGNAL_TEST_CLI`).
#[test]
fn dump_command_never_signals_an_image_being_replaced_by_exec() {
    let wrapper = cc("exec_later.c", "exec_later", &[]);
    let target = cc("busy.c", "busy", &[]);
    let (_, cli) = under_test();
    let reps = env_u64("DUMP_SIGNAL_TEST_EXEC_REPS", 4);
    let mut failures = Vec::new();
    let mut n = 0;
    for backend in BACKENDS {
        let dir = fresh_dir(&format!("exec-{backend}"));
        for delay_us in (0..=6000).step_by(500) {
            for _ in 0..reps {
                n += 1;
                let mut c = preloaded(&wrapper, backend);
                c.arg(delay_us.to_string()).arg(&target);
                c.env("MALLOCSHIM_DUMP_DIR", &dir).env("MALLOCSHIM_DUMP_FORMATS", "json");
                let mut child =
                    c.stdin(Stdio::piped()).stdout(Stdio::null()).spawn().expect("start exec_later");
                let o = Command::new(&cli)
                    .args(["dump", &child.id().to_string(), "--timeout", "20"])
                    .output()
                    .unwrap();
                drop(child.stdin.take());
                let st = child.wait().unwrap();
                let what = format!("{backend}, exec after {delay_us} us");
                if !st.success() {
                    failures.push(format!(
                        "{what}: ended with {st:?} (signal {:?}); dump: {}",
                        st.signal(),
                        describe(&o)
                    ));
                } else if !o.status.success() || !stdout(&o).contains(&format!("mallocshim.{}.", child.id()))
                {
                    failures.push(format!("{what}: mallocshim dump: {}", describe(&o).replace('\n', " | ")));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {n} runs failed:\n{}", failures.len(), failures.join("\n"));
}
