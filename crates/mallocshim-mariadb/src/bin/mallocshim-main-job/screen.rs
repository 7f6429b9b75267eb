//! The main job's output: the screen (one table per backend, the recommendation) and the
//! details file (each dump's figures, text dump and diagnose's whole verdict). Reads the kept
//! files; starts no server.

use super::{Job, Row};
use mallocshim_format::Memory;
use mallocshim_mariadb::{read_dump, DumpSummary};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

fn or_na(s: &str) -> &str {
    if s.is_empty() {
        "n/a"
    } else {
        s
    }
}

fn mib(v: u64) -> String {
    format!("{:.1}", v as f64 / 1048576.0)
}

/// The one table: per backend qps, errors, p95, exit status, the backend the shim's summary
/// named, the RSS account of the mid-load dump and the memory verdict.
pub fn print_table(job: &Job, rows: &[(String, Row)]) {
    let version = std::process::Command::new(&job.inst.tools.mariadbd)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().nth(2).unwrap_or("?").to_string())
        .unwrap_or_else(|_| "?".into());
    println!(
        "\nmariadbd {version} under {}: sysbench oltp_read_only, {} threads, {} s, {} x {} rows",
        job.so.display(),
        job.threads,
        job.secs,
        job.inst.options.sb_tables,
        job.inst.options.sb_rows
    );
    let head =
        ["backend", "qps", "errors", "p95_ms", "exit", "summary", "RSS", "live", "alloc free", "outside"];
    println!(
        "{:<9} {:>10} {:>6} {:>7} {:>4} {:<9} {:>7} {:>7} {:>10} {:>7}  verdict",
        head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7], head[8], head[9]
    );
    for (b, r) in rows {
        let m = r.memory.as_ref();
        let part = |f: fn(&Memory) -> u64| m.map(|m| mib(f(m))).unwrap_or_else(|| "n/a".into());
        println!(
            "{:<9} {:>10} {:>6} {:>7} {:>4} {:<9} {:>7} {:>7} {:>10} {:>7}  {}",
            b,
            r.qps.map(|q| format!("{q:.1}")).unwrap_or_else(|| "n/a".into()),
            or_na(&r.errors),
            or_na(&r.p95),
            or_na(&r.exit),
            or_na(&r.seen),
            part(|m| m.rss_bytes),
            part(|m| m.live_bytes),
            part(|m| m.allocator_free_bytes),
            part(|m| m.non_heap_bytes),
            or_na(&r.verdict)
        );
    }
    println!(
        "(summary: the backend the shim's exit line named; RSS = live + alloc free + outside malloc + metadata, file, shmem, in MiB, from the dump taken with kill -USR1 half-way; verdict: mallocshim diagnose on the run's memlog and that dump)"
    );
}

/// The details of one dump (its summary, account, text dump, diagnose's output); returns the
/// verdict's words and keeps its memory figures in the row.
pub fn detail_dump(b: &str, json: &Path, took: Duration, row: &mut Row, o: &mut String) {
    let _ = writeln!(
        o,
        "=== {b}: the dump taken with kill -USR1 during the load ({} ms after the signal): {} ===",
        took.as_millis(),
        json.display()
    );
    match read_dump(json) {
        Ok(d) => {
            let s = DumpSummary::of(&d);
            let _ = writeln!(
                o,
                "backend {}; threads {} ({} live, {} live with calls); backend allocated {} bytes, RSS {} bytes",
                s.backend, s.threads, s.live_threads, s.live_threads_with_calls, s.allocated_bytes, s.rss_bytes
            );
            let totals: Vec<String> = s.totals.iter().map(|(op, n, _)| format!("{op}={n}")).collect();
            let _ = writeln!(o, "calls: {}", totals.join(" "));
            let _ = writeln!(o, "busiest size classes: op, size, calls, p50 ns, p99 ns");
            for (op, label, n, p50, p99) in &s.busiest {
                let _ = writeln!(o, "  {op:<8} {label:<18} {n:>12} {p50:>8} {p99:>8}");
            }
            account(&d.memory, o);
            row.memory = Some(d.memory);
        }
        Err(e) => {
            let _ = writeln!(o, "(cannot read: {e})");
        }
    }
    let text = json.with_extension("text");
    match std::fs::read_to_string(&text) {
        Ok(t) => {
            let _ = write!(o, "\n{t}");
        }
        Err(e) => {
            let _ = writeln!(o, "(no text dump {}: {e})", text.display());
        }
    }
    row.verdict = verdict(b, json, o);
}

/// The memory verdict of the run: `mallocshim diagnose` (built beside this program) on the
/// server's memlog and the dump, whole into the details; returns its verdict's words.
fn verdict(b: &str, json: &Path, o: &mut String) -> String {
    let memlog = json.with_file_name("memlog.csv");
    let cli = std::env::current_exe().map(|p| p.with_file_name("mallocshim")).unwrap_or_default();
    let _ = writeln!(
        o,
        "\n=== {b}: the memory verdict (mallocshim diagnose {} {}) ===",
        memlog.display(),
        json.display()
    );
    match std::process::Command::new(&cli).arg("diagnose").arg(&memlog).arg(json).output() {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let _ = writeln!(o, "{text}");
            if !out.status.success() {
                let _ = writeln!(
                    o,
                    "(diagnose exited {}: {})",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                return "n/a (diagnose failed)".into();
            }
            text.lines().find_map(|l| l.strip_prefix("verdict: ")).unwrap_or("n/a").to_string()
        }
        Err(e) => {
            let _ = writeln!(
                o,
                "(cannot run {}: {e}; build it with cargo build --release -p mallocshim-cli)",
                cli.display()
            );
            "n/a (no mallocshim command)".into()
        }
    }
}

/// The RSS account of the dump (docs/memory-account.md): its parts, in MiB, and their sum
/// against RSS.
fn account(m: &Memory, o: &mut String) {
    let parts = [
        ("live", Some(m.live_bytes)),
        ("allocator free", Some(m.allocator_free_bytes)),
        ("allocator metadata", m.allocator_metadata_bytes),
        ("outside malloc", Some(m.non_heap_bytes)),
        ("file-backed", Some(m.rss_file_bytes)),
        ("shared memory", Some(m.rss_shmem_bytes)),
    ];
    if m.rss_bytes == 0 {
        let _ = writeln!(o, "RSS account: (not in this dump)");
        return;
    }
    let sum: u64 = parts.iter().filter_map(|(_, v)| *v).sum();
    let shown: Vec<String> = parts
        .iter()
        .map(|(n, v)| format!("{n} {} MiB", v.map(mib).unwrap_or_else(|| "n/a".into())))
        .collect();
    let _ = writeln!(
        o,
        "RSS account: RSS {} MiB = {} (parts sum to {:.1}% of RSS)",
        mib(m.rss_bytes),
        shown.join(" + "),
        100.0 * sum as f64 / m.rss_bytes as f64
    );
}

/// The last line: which backend to run. glibc (the default) stays unless another backend, at
/// 95% of glibc's qps or more, had an RSS at the dump lower by more than the noise margin
/// (the larger of 5% of glibc's RSS and 16 MiB: `diagnose`'s growth threshold); without glibc
/// in the run, the lowest RSS within 5% of the best qps. Says how sure one short run can be.
pub fn recommendation(rows: &[(String, Row)], ok: bool, secs: u64) -> String {
    if !ok {
        return "recommendation: none until the failures above are fixed (their details are in the files named above)".into();
    }
    let runs: Vec<(&str, f64, u64)> =
        rows.iter().filter_map(|(b, r)| Some((b.as_str(), r.qps?, r.memory.as_ref()?.rss_bytes))).collect();
    let sure = format!("one {secs} s run each: confirm with `mallocshim compare`, which repeats rounds");
    let Some(&(_, gq, gr)) = runs.iter().find(|r| r.0 == "glibc") else {
        let best = runs.iter().map(|r| r.1).fold(0.0, f64::max);
        return match runs.iter().filter(|r| r.1 >= 0.95 * best).min_by_key(|r| r.2) {
            Some(p) => format!(
                "recommendation: MALLOCSHIM_BACKEND={} (the lowest RSS at the dump, {} MiB, within 5% of the best qps; {sure})",
                p.0,
                mib(p.2)
            ),
            None => "recommendation: none (no run gave qps and a dump)".into(),
        };
    };
    let margin = (gr / 20).max(16 << 20);
    let pick = runs.iter().filter(|r| r.0 != "glibc" && r.1 >= 0.95 * gq).min_by_key(|r| r.2);
    match pick {
        Some(p) if p.2 + margin < gr => format!(
            "recommendation: MALLOCSHIM_BACKEND={}: RSS {} MiB against glibc's {} MiB at the dump, qps {:+.1}% ({sure})",
            p.0,
            mib(p.2),
            mib(gr),
            100.0 * (p.1 / gq - 1.0)
        ),
        _ => format!(
            "recommendation: keep glibc, the default: no backend had an RSS lower by more than {} MiB (5% of glibc's, at least 16 MiB) at 95% of its qps or more ({sure})",
            mib(margin)
        ),
    }
}
