//! Held-bytes checkpoints only while someone looks (issue 39's "nothing at all when no view is
//! open"), every backend: `tests/c/ctl_target.c hold 8` under the shim with
//! `MALLOCSHIM_HISTORY_MS=10` (a 36 s history span, so a checkpoint every 3 s once armed), left
//! alone for 7 s, then `mallocshim dump PID` (the control channel: the first request): its dump
//! carries one checkpoint, the one taken at the start; 7 s later a second dump carries at least
//! two more (the first request armed them for a span). On a shim that takes them whether asked
//! or not (main at 726ca9d), the first dump already carries three.

mod common;

use std::io::BufReader;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `mallocshim dump PID`: the dump's `held_checkpoints` count.
fn checkpoints_in_a_dump(pid: u32, what: &str) -> usize {
    let o = Command::new(common::cli_bin()).args(["dump", &pid.to_string()]).output().unwrap();
    assert!(o.status.success(), "{what}: dump: {}", common::describe(&o));
    let out = common::stdout(&o);
    let json = out.lines().find(|l| l.ends_with(".json")).unwrap_or_else(|| panic!("{what}: no JSON\n{out}"));
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    d["held_checkpoints"].as_array().unwrap_or_else(|| panic!("{what}: no held_checkpoints in {json}")).len()
}

#[test]
fn checkpoints_run_only_after_someone_asked() {
    let prog = common::cc("ctl_target.c", "ctl_target", &[]);
    for backend in common::BACKENDS {
        let what = format!("ctl_target under {backend}");
        let dir = common::work_dir().join(format!("held-checkpoints/{backend}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ctl")).unwrap();
        let mut c = common::preloaded(&prog, backend);
        c.args(["hold", "8"])
            .env("MALLOCSHIM_HISTORY_MS", "10")
            .env("MALLOCSHIM_CTL_DIR", dir.join("ctl"))
            .env("MALLOCSHIM_DUMP_DIR", &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let pid = common::ready_pid(&mut out, &what);
        std::thread::sleep(Duration::from_secs(7));
        let first = checkpoints_in_a_dump(pid, &what);
        assert_eq!(first, 1, "{what}: 7 s with nobody asking: only the start's checkpoint expected");
        std::thread::sleep(Duration::from_secs(7));
        let second = checkpoints_in_a_dump(pid, &what);
        assert!(
            second >= 3,
            "{what}: 7 s after the first request: {second} checkpoints, at least 3 expected"
        );
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success(), "{what}: exit status");
    }
}
