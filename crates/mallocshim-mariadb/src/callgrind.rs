//! mariadbd under valgrind's callgrind, counting only the instructions executed inside
//! `do_command(THD*, bool)` (one client command: parse, execute, send the result, and every
//! malloc/free made meanwhile), per thread: the wrapper, the server options valgrind needs, and
//! `callgrind_control` to zero the counters and to dump them.

use crate::error::fail;
use crate::{require, Launch, Result};
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

/// `launch` under callgrind ([`wrapper`]) with its `LD_PRELOAD` loaded into the guest only.
/// Heaptrack's preload removes `LD_PRELOAD` from the environment of the first process that loads
/// it (so that children are not traced); given to valgrind, that process is valgrind's own
/// launcher (Debian's `/usr/bin/valgrind` script, then the dynamically linked `valgrind.bin`), and
/// the guest starts without it. So the launchers get `c/guest_preload.c` preloaded instead (built
/// here with gcc into `out_dir`), with the library in `GUEST_LD_PRELOAD`: its execve wrapper
/// hands the library to the static tool binary (`callgrind-amd64-linux`) as `LD_PRELOAD`, which
/// valgrind loads into the guest. Needs gcc.
pub fn launch_preloading_guest(launch: Launch, out_dir: &Path) -> Result<Launch> {
    let Some(lib) = launch.get("LD_PRELOAD").map(str::to_string) else {
        return Ok(launch.wrapper(wrapper(out_dir)));
    };
    let src = out_dir.join("guest_preload.c");
    let so = out_dir.join("guest_preload.so");
    std::fs::write(&src, include_str!("../c/guest_preload.c"))
        .map_err(|e| format!("{}: {e}", src.display()))?;
    let out = Command::new(require("gcc")?)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("gcc: {e}"))?;
    if !out.status.success() {
        fail!("gcc could not build {}: {}", so.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(launch
        .var("LD_PRELOAD", so.display().to_string())
        .var("GUEST_LD_PRELOAD", lib)
        .wrapper(wrapper(out_dir)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profilers::HEAPTRACK_PRELOAD;

    /// Heaptrack's preload given to a program under callgrind records that program (its file
    /// names the guest), not valgrind's launchers. Fails when valgrind, heaptrack or gcc is missing.
    #[test]
    fn heaptrack_reaches_the_guest_under_callgrind() {
        crate::require_file(HEAPTRACK_PRELOAD).unwrap();
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("heaptrack.out");
        let l = Launch::preload(HEAPTRACK_PRELOAD).var("DUMP_HEAPTRACK_OUTPUT", out.display().to_string());
        let l = launch_preloading_guest(l, d.path()).unwrap();
        let mut c = Command::new(&l.wrapper[0]);
        c.args(&l.wrapper[1..]).arg("/bin/echo").arg("guest");
        crate::clean_env(&mut c);
        c.envs(l.vars.iter().map(|(k, v)| (k, v)));
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "guest");
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        // heaptrack's header: "X <command line>" of the traced process.
        assert!(
            text.lines().any(|l| l.starts_with("X ") && l.contains("echo guest")),
            "heaptrack did not record the guest: {}",
            &text[..text.len().min(400)]
        );
    }
}
