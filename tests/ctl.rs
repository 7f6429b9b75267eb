//! The control channel (docs/control.md), black box: a C program (tests/c/ctl_target.c) under
//! the shim, driven by the `mallocshim` command (`trim`, `get`, `set`, `dump`, `top`) and by raw
//! connections to its socket. Trim, get and set with their effects; security (another uid, a
//! pre-created, symlinked or foreign directory, a setuid program); 10,000 malformed requests
//! and killed or stalled clients; the channel under the hostile matrix (thread churn, fork and a
//! SIGUSR1 storm, every backend and profiling setting); `top` in tmux at 80x24.
//! Long because: one test per control-channel duty (trim, get, set and each set's effect, security, malformed requests, hostile matrix, top) sharing the client helpers.

mod common;

use common::*;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory of this test, removed first.
fn scratch(name: &str) -> PathBuf {
    let d = work_dir().join(format!("ctl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The target program, running until dropped (stdin closed: it exits 0).
struct Target {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    pid: u32,
    /// The channel directory (`MALLOCSHIM_CTL_DIR`).
    dir: PathBuf,
}

impl Target {
    fn start(backend: &str, env: &[(&str, &str)], args: &[&str], dir: &Path) -> Target {
        let prog = cc("ctl_target.c", "ctl_target", &[]);
        let mut c = preloaded(prog, backend);
        c.args(args).envs(env.iter().copied()).env("MALLOCSHIM_CTL_DIR", dir);
        c.env("MALLOCSHIM_DUMP_DIR", dir.parent().unwrap());
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("start ctl_target");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let pid = ready_pid(&mut out, "ctl_target");
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Target { stdin: child.stdin.take(), child: Some(child), pid, dir: dir.to_path_buf() }
    }

    fn cli(&self, args: &[&str]) -> Output {
        let mut c = Command::new(cli_bin());
        c.args(args).arg(self.pid.to_string());
        c.output().expect("run mallocshim")
    }

    /// `mallocshim get PID` as rows (name, value, source, settable).
    fn get(&self) -> Vec<[String; 4]> {
        let o = self.cli(&["get"]);
        assert!(o.status.success(), "get: {}", describe(&o));
        stdout(&o)
            .lines()
            .skip(1)
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                [w[0].into(), w[1..w.len() - 2].join(" "), w[w.len() - 2].into(), w[w.len() - 1].into()]
            })
            .collect()
    }

    fn row(&self, name: &str) -> [String; 4] {
        self.get().into_iter().find(|r| r[0] == name).unwrap_or_else(|| panic!("no row {name}"))
    }

    fn set(&self, kv: &str) -> Output {
        let mut c = Command::new(cli_bin());
        c.args(["set", &self.pid.to_string(), kv]);
        c.output().expect("run mallocshim set")
    }

    fn socket(&self) -> PathBuf {
        self.dir.join(format!("{}.sock", self.pid))
    }

    /// One raw request on a new connection: the whole reply.
    fn raw(&self, req: &[u8]) -> String {
        if !self.socket().exists() {
            // Listening from the thread's start; should the socket be gone, the command asks
            // (the attach signal) for a new one.
            let o = self.cli(&["get"]);
            assert!(o.status.success(), "attach: {}", describe(&o));
        }
        let mut s = UnixStream::connect(self.socket()).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(req);
        // The request is all there is (a client that is done, or killed: the server sees EOF).
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        r
    }

    /// The dump JSON over the channel.
    fn json(&self) -> serde_json::Value {
        let r = self.raw(b"json\n");
        serde_json::from_str(r.strip_prefix("ok\n").unwrap_or_else(|| panic!("json reply: {r}"))).unwrap()
    }

    /// Closes stdin and waits: the program's output (it must exit 0 by itself).
    fn finish(mut self) -> Output {
        drop(self.stdin.take());
        let o = self.child.take().unwrap().wait_with_output().unwrap();
        assert!(o.status.success(), "ctl_target: {}", describe(&o));
        o
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap()
}

/// `trim` gives back the free memory a program holds (RSS measured from outside), `get` shows
/// the table with sources and settable flags, `set` changes a run-time row (source `set`) and
/// refuses a bad value or a start-up-only row without changing anything. glibc backend.
#[test]
fn trim_get_set() {
    let dir = scratch("tgs").join("ctl");
    let t = Target::start("glibc", &[("MALLOCSHIM_TRIM_INTERVAL_MS", "0")], &["hold", "128"], &dir);
    std::thread::sleep(Duration::from_millis(200));
    // The shim's thread listens from its start: a client needs no signal (tests/ctl_quiet.rs).
    assert!(t.socket().exists(), "no socket 200 ms after ready: the channel does not listen from the start");
    let before = rss_kib(t.pid);
    let o = t.cli(&["trim"]);
    assert!(o.status.success(), "trim: {}", describe(&o));
    let after = rss_kib(t.pid);
    assert!(stdout(&o).starts_with("RSS "), "{}", stdout(&o));
    // One free figure (the RSS account's), and under glibc its two parts, which add up to it.
    let out = stdout(&o);
    let mibs = |l: &str| -> Vec<f64> {
        l.split(" MiB").filter_map(|w| w.rsplit(' ').next()?.parse().ok()).collect::<Vec<f64>>()
    };
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "trim prints two lines: {out}");
    assert!(lines[0].ends_with(" MiB was free in the allocator before it (resident)"), "{out}");
    assert!(!out.contains("backend's count") && out.matches("free in the allocator").count() == 1, "{out}");
    let free = *mibs(lines[0]).last().unwrap();
    let parts = mibs(lines[1]);
    assert_eq!(parts.len(), 2, "{out}");
    assert!((parts[0] + parts[1] - free).abs() <= 0.11, "the parts do not add up to the free figure: {out}");
    // 128 MiB freed, all but the block pinning the top: at least half comes back.
    assert!(
        before - after > 64 * 1024,
        "trim released {} KiB of {before} KiB: {}",
        before - after,
        stdout(&o)
    );
    // An idle process: `top` says the interval had no calls, never "(0 more ... rows)".
    let o = t.cli(&["top", "--interval", "0.3", "--count", "1"]);
    assert!(o.status.success(), "top: {}", describe(&o));
    let screen = stdout(&o);
    assert_eq!(screen.matches("(no calls in this interval)").count(), 2, "{screen}");
    assert!(!screen.contains("more size-class rows") && !screen.contains("(0 more"), "{screen}");
    let r = t.row("MALLOCSHIM_TRIM_INTERVAL_MS");
    assert_eq!(r, ["MALLOCSHIM_TRIM_INTERVAL_MS", "0", "env", "yes"].map(String::from));
    assert_eq!(t.row("MALLOCSHIM_BACKEND")[3], "no");
    assert_eq!(t.row("MALLOCSHIM_SAMPLE")[2], "default");
    let o = t.set("TRIM_MIN_BYTES=1024");
    assert!(o.status.success(), "set: {}", describe(&o));
    assert_eq!(stdout(&o).trim(), "MALLOCSHIM_TRIM_MIN_BYTES=1024 (was 67108864)");
    assert_eq!(t.row("MALLOCSHIM_TRIM_MIN_BYTES")[1..3], ["1024".to_string(), "set".into()]);
    for bad in ["TRIM_MIN_BYTES=lots", "BACKEND=jemalloc", "NO_SUCH=1", "TRIM_MIN_BYTES"] {
        let o = t.set(bad);
        assert!(!o.status.success(), "set {bad} was accepted: {}", describe(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "one line: {}", describe(&o));
    }
    assert_eq!(t.row("MALLOCSHIM_TRIM_MIN_BYTES")[1], "1024");
    // `set` takes the size suffixes the environment takes (the one parser).
    for (kv, shown) in [("TRIM_MIN_BYTES=16M", "16777216"), ("TRIM_ABOVE_RSS=2g", "2147483648")] {
        let o = t.set(kv);
        assert!(o.status.success(), "set {kv}: {}", describe(&o));
        assert!(stdout(&o).starts_with(&format!("MALLOCSHIM_{}={shown} (was ", &kv[..kv.find('=').unwrap()])));
    }
    assert_eq!(t.row("MALLOCSHIM_BACKEND")[1..3], ["glibc".to_string(), "env".into()]);
    t.finish();
}

/// Each kind of run-time option shows its effect after `set`: periodic trims start within the
/// new interval, the latency sampling and heap-profile rate change, a memlog and a textfile
/// appear, dump formats change (the pprof file listed by `mallocshim dump`). Under every
/// backend with profiling on.
#[test]
fn set_takes_effect() {
    for backend in BACKENDS {
        let base = scratch(&format!("eff-{backend}"));
        let t = Target::start(
            backend,
            &[("MALLOCSHIM_TRIM_INTERVAL_MS", "0")],
            &["hold", "16"],
            &base.join("ctl"),
        );
        let runs = |t: &Target| t.json()["trim"]["runs"].as_u64().unwrap_or(0);
        let r0 = runs(&t);
        for kv in ["TRIM_MIN_BYTES=0", "TRIM_INTERVAL_MS=100"] {
            assert!(t.set(kv).status.success(), "{backend}: set {kv}");
        }
        std::thread::sleep(Duration::from_millis(600));
        assert!(runs(&t) >= r0 + 3, "{backend}: periodic trims within 100 ms: {} -> {}", r0, runs(&t));
        assert!(t.set("TRIM_INTERVAL_MS=0").status.success());
        assert!(t.set("SAMPLE=1").status.success());
        assert_eq!(t.json()["sample_every"].as_u64(), Some(1), "{backend}");
        let memlog = base.join("mem.csv");
        assert!(t.set(&format!("MEMLOG={}", memlog.display())).status.success());
        let prom = base.join("prom");
        std::fs::create_dir_all(&prom).unwrap();
        assert!(t.set(&format!("PROM_TEXTFILE_DIR={}", prom.display())).status.success());
        std::thread::sleep(Duration::from_millis(300));
        let lines = std::fs::read_to_string(&memlog).unwrap_or_default().lines().count();
        assert!(lines >= 2, "{backend}: memlog header and a line: {lines}");
        let tf = prom.join(format!("mallocshim_{}.prom", t.pid));
        assert!(tf.exists(), "{backend}: textfile {} appeared", tf.display());
        // Moved, then turned off: the file left behind is removed each time.
        let prom2 = base.join("prom2");
        std::fs::create_dir_all(&prom2).unwrap();
        assert!(t.set(&format!("PROM_TEXTFILE_DIR={}", prom2.display())).status.success());
        assert!(!tf.exists(), "{backend}: the textfile stayed in the old directory");
        let tf2 = prom2.join(tf.file_name().unwrap());
        let t0 = std::time::Instant::now();
        while !tf2.exists() && t0.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(tf2.exists(), "{backend}: textfile {} appeared", tf2.display());
        assert!(t.set("PROM_TEXTFILE_DIR=off").status.success());
        assert!(!tf2.exists(), "{backend}: the textfile stayed after PROM_TEXTFILE_DIR=off");
        assert!(t.set("PROF_SAMPLE_BYTES=1").status.success());
        assert!(t.set("DUMP_FORMATS=json,pprof").status.success());
        let o = t.cli(&["dump"]);
        assert!(o.status.success(), "{backend}: dump: {}", describe(&o));
        let files = stdout(&o);
        assert!(files.lines().any(|l| l.ends_with(".pb.gz")), "{backend}: pprof listed: {files}");
        assert!(!files.lines().any(|l| l.ends_with(".prom")), "{backend}: formats changed: {files}");
        let rate = t.row("MALLOCSHIM_PROF_SAMPLE_BYTES");
        assert_eq!(rate[1..3], ["1".to_string(), "set".into()], "{backend}");
        assert!(t.set("MEMLOG=off").status.success());
        t.finish();
    }
}

/// Security: another uid (nobody) neither reaches the socket nor, when the test opens the
/// directory and socket to it, gets a reply (SO_PEERCRED); a pre-created directory with another
/// mode, one owned by another user and a symlink are refused with one `mallocshim:` line and no
/// socket; a setuid program (secure execution) never listens.
#[test]
fn security() {
    let runuser = require("runuser");
    // Under /tmp: nobody must be able to walk to the socket's directory for the peer check.
    let base = PathBuf::from(format!("/tmp/mallocshim-ctltest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = Target::start("glibc", &[], &["idle"], &base.join("ctl"));
    assert!(t.cli(&["get"]).status.success());
    let nobody = |args: &[&str]| {
        let o = Command::new(&runuser).args(["-u", "nobody", "--"]).args(args).output().unwrap();
        (o.status.success(), stdout(&o) + &stderr(&o))
    };
    let sock = t.socket().display().to_string();
    // Connects (a refusal is printed by the exception), asks, prints what came back.
    let py = format!(
        "import socket\ns=socket.socket(socket.AF_UNIX)\ns.settimeout(5)\ns.connect('{sock}')\n\
         try:\n  s.sendall(b'get\\n')\n  r=s.recv(100)\nexcept OSError:\n  r=b''\nprint('reply=%r'%r)"
    );
    let (ok, out) = nobody(&["python3", "-c", &py]);
    assert!(!ok && out.contains("Permission denied"), "nobody reached the socket: {out}");
    // Opened up by root (never by the shim): the peer check alone keeps nobody out.
    std::fs::set_permissions(&t.dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(t.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let (_, out) = nobody(&["python3", "-c", &py]);
    assert!(out.contains("reply=b''"), "nobody got a reply: {out}");
    std::fs::set_permissions(&t.dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(t.cli(&["get"]).status.success(), "still serving its own uid");
    t.finish();

    let refused = |name: &str, prepare: &dyn Fn(&Path)| {
        let d = base.join(name);
        prepare(&d);
        let t = Target::start("glibc", &[], &["idle"], &d);
        let o = t.cli(&["get", "--timeout", "2"]);
        assert!(!o.status.success(), "{name}: a channel opened: {}", describe(&o));
        assert!(!t.socket().exists(), "{name}: socket in a refused directory");
        let o = t.finish();
        let lines: Vec<_> =
            shim_lines(&o).into_iter().filter(|l| l.contains("control channel refused")).collect();
        assert_eq!(lines.len(), 1, "{name}: one line: {}", describe(&o));
    };
    refused("mode0755", &|d| {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    });
    refused("foreign", &|d| {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    });
    refused("symlink", &|d| {
        let real = base.join("symlink-target");
        std::fs::create_dir(&real).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&real, d).unwrap();
    });
    secure_execution_never_listens(&base);
    let _ = std::fs::remove_dir_all(&base);
}

/// A setuid-root copy of ctl_target run by nobody (AT_SECURE) queues its own attach signal:
/// no socket appears in /run/mallocshim (the library is installed setuid in the system
/// directory for the test, as tests/misconfig.rs does, and removed afterwards).
fn secure_execution_never_listens(base: &Path) {
    let setpriv = require("setpriv");
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "installs a setuid library: run as root");
    let name = format!("libmallocshim-ctltest-{}.so", std::process::id());
    let lib = PathBuf::from("/usr/lib/x86_64-linux-gnu").join(&name);
    std::fs::copy(shim(), &lib).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let prog = base.join("ctl_target_suid");
    std::fs::copy(cc("ctl_target.c", "ctl_target", &[]), &prog).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let o = Command::new(&setpriv)
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(&prog)
        .args(["selfattach", "/run/mallocshim"])
        .env("LD_PRELOAD", &name)
        .env("MALLOCSHIM_VERBOSE", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&lib);
    assert!(o.status.success(), "setuid ctl_target: {}", describe(&o));
    assert!(stderr(&o).contains("mallocshim"), "the shim was loaded: {}", describe(&o));
    assert!(stdout(&o).contains("socket=no"), "a secure-execution process listened: {}", describe(&o));
}

/// 10,000 malformed requests (garbage, oversized, empty, unknown, bad arguments, cut off
/// without a newline as by a killed client), a client killed mid-request and one that stalls:
/// each malformed one gets at most one error line, nothing changes, the server keeps serving.
#[test]
fn malformed_requests_and_killed_clients() {
    let dir = scratch("bad").join("ctl");
    let t = Target::start("glibc", &[], &["churn"], &dir);
    assert!(t.cli(&["get"]).status.success());
    let before = t.get();
    let big = vec![b'x'; 5000];
    let cases: [&[u8]; 9] = [
        b"\xff\xfe\x00garbage\n",
        &big,
        b"\n",
        b"frobnicate\n",
        b"set\n",
        b"set TRIM_MIN_BYTES=\n",
        b"trim now please\n",
        b"get",
        b"set MALLOCSHIM_TRIM_INTERVAL_MS=1",
    ];
    let t0 = Instant::now();
    for i in 0..10_000 {
        let c = cases[i % cases.len()];
        let r = t.raw(c);
        let cut = !c.ends_with(b"\n") && c.len() < 4096;
        if cut {
            assert!(r.is_empty(), "cut-off request {:?} answered: {r}", String::from_utf8_lossy(c));
        } else {
            assert!(
                r.starts_with("error: ") && r.lines().count() == 1,
                "{:?}: {r}",
                String::from_utf8_lossy(c)
            );
        }
    }
    eprintln!("10,000 malformed requests in {:?}", t0.elapsed());
    // A client that stalls (holds the connection, sends nothing) and one killed mid-request.
    let stalled = UnixStream::connect(t.socket()).unwrap();
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import socket,os;s=socket.socket(socket.AF_UNIX);s.connect('{}');s.sendall(b'set TRIM_MIN');os.kill(os.getpid(),9)",
            t.socket().display()
        ))
        .spawn()
        .unwrap();
    let _ = child.wait();
    let o = t.cli(&["get"]);
    assert!(o.status.success(), "after a stalled and a killed client: {}", describe(&o));
    drop(stalled);
    assert_eq!(t.get(), before, "nothing changed");
    t.finish();
}

/// The channel under the hostile matrix: thread churn and fork in the target, a SIGUSR1 storm
/// (every 3 ms) and get, set, trim, json and dump requests, under every backend and setting
/// (profiling on, off, `MALLOCSHIM_SAMPLE=1`, `MALLOCSHIM_PROF_SAMPLE_BYTES=1`).
#[test]
fn hostile_matrix() {
    let settings = common::storm::settings();
    for (backend, (setting, env)) in BACKENDS.into_iter().flat_map(|b| settings.iter().map(move |s| (b, *s)))
    {
        let base = scratch(&format!("hm-{backend}-{}", setting.len()));
        let env: Vec<(&str, &str)> = env
            .iter()
            .copied()
            .chain([("MALLOCSHIM_DUMP_MIN_INTERVAL_MS", "0"), ("MALLOCSHIM_DUMP_KEEP", "3")])
            .collect();
        let t = Target::start(backend, &env, &["churn"], &base.join("ctl"));
        let pid = t.pid as i32;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let storm = std::thread::spawn(move || {
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: signalling the target this test started (alive until `stop`).
                unsafe { libc::kill(pid, libc::SIGUSR1) };
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        let what = format!("{backend}, {setting}");
        for i in 0..5 {
            for args in [&["get"][..], &["trim"], &["dump"]] {
                let o = t.cli(args);
                assert!(o.status.success(), "{what}: {args:?}: {}", describe(&o));
            }
            let o = t.set(&format!("TRIM_MIN_BYTES={}", 1000 + i));
            assert!(o.status.success(), "{what}: set: {}", describe(&o));
            assert!(t.json()["pid"].as_u64() == Some(t.pid as u64), "{what}: json");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        storm.join().unwrap();
        t.finish();
        let _ = std::fs::remove_dir_all(&base);
    }
}

/// `top` in tmux at 80x24: the header and every table row are on the screen (nothing past 24
/// lines or 80 columns), q exits 0, and no dump file is left.
#[test]
fn top_fits_80x24_and_q_quits() {
    let tmux = require("tmux");
    let base = scratch("top");
    let t = Target::start("glibc", &[], &["churn"], &base.join("ctl"));
    let files = || {
        std::fs::read_dir(&base)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("mallocshim."))
            .count()
    };
    let n0 = files();
    let session = format!("ctltop{}", std::process::id());
    let rc = base.join("top.rc");
    let cmd = format!("{} top {} --interval 0.3; echo $? > {}", cli_bin().display(), t.pid, rc.display());
    let st = Command::new(&tmux)
        .args(["new-session", "-d", "-s", &session, "-x", "80", "-y", "24", &cmd])
        .status()
        .unwrap();
    assert!(st.success(), "tmux new-session");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut screen = String::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        let o = Command::new(&tmux).args(["capture-pane", "-p", "-t", &session]).output().unwrap();
        screen = stdout(&o);
        if screen.contains("by live thread") && screen.lines().count() > 8 {
            break;
        }
    }
    let _ = Command::new(&tmux).args(["send-keys", "-t", &session, "q"]).status();
    let mut code = String::new();
    while Instant::now() < deadline && code.is_empty() {
        std::thread::sleep(Duration::from_millis(100));
        code = std::fs::read_to_string(&rc).unwrap_or_default();
    }
    let _ = Command::new(&tmux).args(["kill-session", "-t", &session]).stderr(Stdio::null()).status();
    for want in ["backend glibc", "RSS ", "by op and size class", "by live thread"] {
        assert!(screen.contains(want), "`{want}` not on the 80x24 screen:\n{screen}");
    }
    // What did not fit is named; "0 more" is never said (every row shown: no line).
    assert!(!screen.contains("(0 more"), "{screen}");
    assert!(screen.lines().count() <= 24 && screen.lines().all(|l| l.chars().count() <= 80), "{screen}");
    assert_eq!(code.trim(), "0", "top's exit status after q:\n{screen}");
    assert_eq!(files(), n0, "top left dump files");
    t.finish();
}
