//! The README's overhead figure comes from a run, not from memory (issue 40, item 2): its
//! sentence ("at most X% more instructions per mariadbd query ...") must be the largest
//! shim/direct ratio of the table in docs/results/speed.md's section "The README's figure", and
//! must name the workloads, the bench command and the date that section gives. Pure text: fails
//! when either file changes without the other.

use std::path::Path;

fn read(p: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(p))
        .unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// The section of speed.md that backs the README's sentence.
fn section(speed: &str) -> &str {
    let start = speed
        .find("## The README's figure")
        .expect("docs/results/speed.md has no \"## The README's figure\" section");
    let rest = &speed[start + 3..];
    &speed[start..start + 3 + rest.find("\n## ").unwrap_or(rest.len())]
}

/// (workload, backend, shim/direct) of every row of the section's table.
fn rows(sec: &str) -> Vec<(String, String, f64)> {
    sec.lines()
        .filter(|l| l.starts_with("| oltp_"))
        .map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            let ratio = c[5].trim_matches('*').parse().unwrap_or_else(|_| panic!("ratio in {l}"));
            (c[1].to_string(), c[2].to_string(), ratio)
        })
        .collect()
}

#[test]
fn readme_overhead_sentence_matches_the_measured_table() {
    let speed = read("docs/results/speed.md");
    let sec = section(&speed);
    let rows = rows(sec);
    assert!(rows.len() >= 8, "the README's figure needs both workloads × every backend: {rows:?}");
    for b in mallocshim_format::BACKENDS {
        for w in ["oltp_point_select", "oltp_read_only"] {
            assert!(rows.iter().any(|(rw, rb, _)| rw == w && rb == b), "no row for {w}, {b} in speed.md");
        }
    }
    let worst = rows.iter().map(|r| r.2).fold(0.0f64, f64::max);
    // Rounded up to a tenth of a percent ("at most"), from the table's four decimals in basis
    // points, so 1.0060 reads 0.6%, not 0.7% through 1.006 - 1.0 = 0.0060000000000000053.
    let bp = ((worst - 1.0) * 10_000.0).round() as i64;
    let pct = ((bp + 9) / 10) as f64 / 10.0;
    let date = sec
        .lines()
        .find_map(|l| l.strip_prefix("Run: "))
        .and_then(|l| l.split(',').next())
        .expect("the section's `Run: DATE, ...` line");
    let cmd =
        sec.lines().find(|l| l.contains("cargo bench --bench query_instr")).expect("the section's command");
    let readme = read("README.md").replace('\n', " ");
    let want = format!("at most {pct:.1}% more instructions per mariadbd query");
    assert!(readme.contains(&want), "README does not say \"{want}\" (speed.md's largest ratio {worst})");
    assert!(readme.contains(date), "README's overhead sentence does not give the run's date {date}");
    assert!(
        readme.contains("oltp_read_only") && readme.contains("oltp_point_select"),
        "README's overhead sentence does not name the workloads"
    );
    assert!(readme.contains("cargo bench --bench query_instr"), "README does not name the bench: {cmd}");
}
