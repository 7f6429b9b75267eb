//! mariadbd under valgrind's callgrind, counting only the instructions executed inside
//! `do_command(THD*, bool)` (one client command: parse, execute, send the result, and every
//! malloc/free made meanwhile), per thread: the wrapper, the server options valgrind needs, and
//! `callgrind_control` to zero the counters and to dump them.

use crate::error::fail;
use crate::{require, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The function whose execution is counted, as callgrind names it, and its mangled symbol.
pub const TOGGLE: &str = "do_command(THD*, bool)";
const TOGGLE_SYMBOL: &str = "_Z10do_commandP3THDb";

/// Fails unless valgrind, callgrind_control and nm are installed and `mariadbd` exports
/// `do_command(THD*, bool)` (without it the toggle would count nothing).
pub fn check(mariadbd: &Path) -> Result<()> {
    require("valgrind")?;
    require("callgrind_control")?;
    let nm = require("nm")?;
    let out = Command::new(nm).arg("-D").arg(mariadbd).stderr(Stdio::null()).output();
    let syms = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    if !syms.lines().any(|l| l.ends_with(&format!(" T {TOGGLE_SYMBOL}"))) {
        fail!(
            "{} does not export {TOGGLE} ({TOGGLE_SYMBOL}): the toggle would count nothing",
            mariadbd.display()
        );
    }
    Ok(())
}

/// mariadbd options needed under valgrind: no io_uring/libaio, and no 8 TiB address-space
/// reservation for the buffer pool (10.11's innodb_buffer_pool_size_max default; valgrind cannot map it).
pub fn server_opts(buffer_pool: &str) -> Vec<String> {
    vec!["--innodb-use-native-aio=0".into(), format!("--innodb-buffer-pool-size-max={buffer_pool}")]
}

/// `valgrind --tool=callgrind ...` writing `out_dir/cg.<pid>[.<n>]`, collecting only inside [`TOGGLE`].
pub fn wrapper(out_dir: &Path) -> Vec<String> {
    vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        format!("--callgrind-out-file={}/cg.%p", out_dir.display()),
        "--collect-atstart=no".into(),
        format!("--toggle-collect={TOGGLE}"),
    ]
}

/// [`wrapper`] for a server whose preloaded library must reach the guest itself:
/// `valgrind ... --trace-children=yes /usr/bin/env LD_PRELOAD=<lib>`, then the server. Heaptrack's
/// preload removes `LD_PRELOAD` from the environment of the first process that loads it (so that
/// children are not traced); given to valgrind, that process is valgrind's own launcher and the
/// guest starts without it. Here valgrind starts `env` as its guest, `env` sets the variable and
/// execs the server, and valgrind follows the exec (same pid; `env`'s counts, all outside the
/// toggle, go to `cg.<pid>`, the server's dumps to `cg.<pid>.<n>` as usual).
pub fn wrapper_preloading(out_dir: &Path, lib: &str) -> Vec<String> {
    let mut v = wrapper(out_dir);
    v.extend(["--trace-children=yes".into(), "/usr/bin/env".into(), format!("LD_PRELOAD={lib}")]);
    v
}

fn control(pid: u32, flag: &str, log: &Path) -> Result<()> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let f2 = f.try_clone().map_err(|e| e.to_string())?;
    let st = Command::new(require("callgrind_control")?)
        .arg(flag)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(f2)
        .status()
        .map_err(|e| format!("callgrind_control: {e}"))?;
    if !st.success() {
        fail!("callgrind_control {flag} {pid} failed ({st}); see {}", log.display());
    }
    Ok(())
}

/// Zeroes the counters of the callgrind process `pid` (`callgrind_control -z`).
pub fn zero(pid: u32, out_dir: &Path) -> Result<()> {
    control(pid, "-z", &out_dir.join("control.log"))
}

/// Asks for dump number `k` (`callgrind_control -d`; a dump resets the counters) and returns its
/// total instructions (`totals:` line of `out_dir/cg.<pid>.<k>`), waiting up to 30 s for it.
pub fn dump(pid: u32, k: u32, out_dir: &Path) -> Result<u64> {
    control(pid, "-d", &out_dir.join("control.log"))?;
    let f: PathBuf = out_dir.join(format!("cg.{pid}.{k}"));
    for _ in 0..300 {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        if let Some(ir) = text.lines().find_map(|l| l.strip_prefix("totals:")) {
            if let Some(Ok(n)) = ir.split_whitespace().next().map(str::parse) {
                return Ok(n);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    fail!("callgrind dump {} did not appear with a totals: line within 30 s", f.display())
}
