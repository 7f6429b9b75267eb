//! `--live` variants at run time: sets a variant's options on the running server through the
//! shim's control channel (`mallocshim set PID K=V`, the command beside this program, else on
//! PATH) and sets each back to the value it had. Owns only that; it never signals or stops the
//! server otherwise. Errors are one line naming the setting.

use super::config::Variant;
use std::path::PathBuf;
use std::process::Command;

/// The `mallocshim` command: beside this program (the package installs both in one place, a
/// checkout builds both in target/release), else on PATH.
pub fn command() -> Result<PathBuf, String> {
    let beside = std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.join("mallocshim")));
    match beside {
        Some(p) if p.is_file() => Ok(p),
        _ => mallocshim_proc::find_in_path("mallocshim")
            .ok_or_else(|| "--live needs the mallocshim command, beside this program or on PATH".to_string()),
    }
}

/// The old value from the channel's reply `NAME=NEW (was OLD)`.
fn was(reply: &str) -> Option<&str> {
    let l = reply.lines().next()?.trim_end();
    l.rsplit_once(" (was ")?.1.strip_suffix(')')
}

/// `mallocshim set PID K=V`; the value K had.
fn set(prog: &PathBuf, pid: u32, k: &str, v: &str) -> Result<String, String> {
    let what = format!("mallocshim set {pid} {k}={v}");
    let o = Command::new(prog)
        .args(["set", &pid.to_string(), &format!("{k}={v}")])
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    if !o.status.success() {
        return Err(format!("{what}: {}", err.lines().next().unwrap_or("failed")));
    }
    was(&out).map(str::to_string).ok_or_else(|| format!("{what}: unexpected reply {:?}", out.trim()))
}

/// A variant in effect on a server, with what sets it back.
pub struct Applied {
    prog: PathBuf,
    pid: u32,
    undo: Vec<(String, String)>,
}

/// Sets every variable of `v` on server `pid`; on an error, what was set is set back first.
pub fn apply(prog: &PathBuf, pid: u32, v: &Variant) -> Result<Applied, String> {
    let mut a = Applied { prog: prog.clone(), pid, undo: Vec::new() };
    for (k, val) in &v.envs {
        match set(prog, pid, k, val) {
            Ok(old) => a.undo.push((k.clone(), old)),
            Err(e) => {
                let _ = a.restore();
                return Err(e);
            }
        }
    }
    Ok(a)
}

impl Applied {
    /// Sets every variable back, last first.
    pub fn restore(self) -> Result<(), String> {
        for (k, old) in self.undo.iter().rev() {
            set(&self.prog, self.pid, k, old)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_old_value_is_read_from_the_reply() {
        assert_eq!(super::was("MALLOCSHIM_SAMPLE=1 (was 64)\n"), Some("64"));
        assert_eq!(super::was("MALLOCSHIM_DUMP_FORMATS=json,prom (was json)\n"), Some("json"));
        assert_eq!(super::was("error: not settable\n"), None);
    }
}
