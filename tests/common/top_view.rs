//! Reading `mallocshim top PID --by connection` as a test sees it (not a terminal: each view
//! printed whole, one after another): the connection rows of each view, and the command run with
//! its input closed. Shared by tests/top_by_connection.rs and tests/held_freed_by_other.rs.

use std::process::{Command, Output, Stdio};

/// One connection row of a view: id, user@host, held, alloc MiB/s (None: "-"), MEMORY_USED.
#[derive(Debug)]
pub struct Row {
    pub id: u64,
    pub user_host: String,
    pub held: f64,
    pub alloc: Option<f64>,
    pub memory_used: Option<f64>,
}

pub const MIB: f64 = 1048576.0;

/// The views of `top --by connection` output: each view's connection rows (server threads,
/// whose first cell is `-`, left out), split at each table head.
pub fn views(out: &str) -> Vec<Vec<Row>> {
    let mut v: Vec<Vec<Row>> = Vec::new();
    for l in out.lines() {
        if l.trim_start().starts_with("conn ") {
            v.push(Vec::new());
            continue;
        }
        let t: Vec<&str> = l.split_whitespace().collect();
        let (Some(cur), Some(id)) = (v.last_mut(), t.first().and_then(|x| x.parse::<u64>().ok())) else {
            continue;
        };
        assert!(t.len() >= 8, "short row {l:?}\n{out}");
        let num = |s: &str| s.parse::<f64>().ok();
        cur.push(Row {
            id,
            user_host: t[1].to_string(),
            held: num(t[4]).unwrap_or_else(|| panic!("held in {l:?}")) * MIB,
            alloc: num(t[6]).map(|x| x * MIB),
            memory_used: num(t[7]).map(|x| x * MIB),
        });
    }
    v
}

/// `mallocshim top PID ARGS`, input closed.
pub fn top(pid: u32, args: &[&str]) -> Output {
    Command::new(super::cli_bin())
        .arg("top")
        .arg(pid.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mallocshim top")
}

/// Whether `x` is within `frac` of `want`.
pub fn near(x: f64, want: f64, frac: f64) -> bool {
    (x - want).abs() <= frac * want
}
