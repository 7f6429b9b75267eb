//! Bad configuration: each malformed variable gives one `mallocshim:` line naming the variable,
//! the bad value and the default kept, and the program still runs and exits 0. A backend that
//! cannot be loaded gives one line and the process carries on with glibc.

mod common;
use common::*;

fn run(env: &[(&str, &str)]) -> (String, Vec<String>) {
    let bin = cc("alloc_some.c", "alloc_some", &[]);
    let mut c = preloaded(&bin, "glibc");
    c.env_remove("MALLOCSHIM_BACKEND");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run_ok(c, &format!("alloc_some with {env:?}"));
    (stdout(&o), shim_lines(&o))
}

#[test]
fn malformed_values_warn_once_and_keep_defaults() {
    let cases: [(&str, &str, &str); 8] = [
        ("MALLOCSHIM_BACKEND", "hoard", "glibc"),
        ("MALLOCSHIM_PROFILE", "sometimes", "on"),
        ("MALLOCSHIM_VERBOSE", "3", "0"),
        ("MALLOCSHIM_TRIM_INTERVAL_MS", "soon", "10000"),
        ("MALLOCSHIM_TRIM_MIN_BYTES", "-1", "67108864"),
        ("MALLOCSHIM_JEMALLOC_RELEASE", "never", "purge"),
        ("MALLOCSHIM_MEMLOG_INTERVAL_MS", "5", "1000"),
        ("MALLOCSHIM_TCMALLOC_LIB", "", "libtcmalloc_minimal.so.4"),
    ];
    for (var, bad, default) in cases {
        let (out, lines) = run(&[(var, bad)]);
        assert!(out.contains("ok"), "{var}: program output {out}");
        assert_eq!(lines.len(), 1, "{var}={bad}: expected exactly one line, got {lines:?}");
        let l = &lines[0];
        assert!(l.contains(&format!("{var}={bad}")), "line must name variable and value: {l}");
        assert!(l.contains(&format!("default {default}")), "line must name the default: {l}");
    }
}

#[test]
fn unknown_variable_is_named() {
    let (_, lines) = run(&[("MALLOCSHIM_BAKEND", "jemalloc")]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("unknown variable MALLOCSHIM_BAKEND"), "{lines:?}");
}

#[test]
fn unloadable_tcmalloc_falls_back_to_glibc() {
    let (out, lines) =
        run(&[("MALLOCSHIM_BACKEND", "tcmalloc"), ("MALLOCSHIM_TCMALLOC_LIB", "/nonexistent/libtc.so")]);
    assert!(out.contains("backend=glibc"), "{out}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("backend tcmalloc could not be loaded")
            && lines[0].contains("/nonexistent/libtc.so"),
        "{lines:?}"
    );
}

#[test]
fn verbose_2_prints_every_option_row() {
    let (_, lines) = run(&[("MALLOCSHIM_VERBOSE", "2"), ("MALLOCSHIM_BACKEND", "jemalloc")]);
    for name in ["MALLOCSHIM_BACKEND", "MALLOCSHIM_TCMALLOC_LIB", "MALLOCSHIM_PROFILE", "MALLOCSHIM_VERBOSE"]
    {
        assert!(
            lines.iter().any(|l| l.contains(name) && l.contains("default")),
            "no row for {name}: {lines:?}"
        );
    }
    assert!(lines.iter().any(|l| l.contains("MALLOCSHIM_BACKEND") && l.contains("= jemalloc")), "{lines:?}");
    let summary = lines.iter().find(|l| l.starts_with("mallocshim: summary ")).expect("summary line at exit");
    assert!(summary.contains("backend=jemalloc"), "{summary}");
    assert!(kv(summary, "malloc").unwrap() >= 100, "{summary}");
}

/// `MALLOCSHIM_VERBOSE=1` prints one start-up line (and the summary at exit): the options set by
/// the environment or not at their default, with the values in effect, and how many are left at
/// their defaults. A value the environment gave that equals the default is still named.
#[test]
fn verbose_1_prints_one_line_of_options() {
    let env = [
        ("MALLOCSHIM_VERBOSE", "1"),
        ("MALLOCSHIM_BACKEND", "jemalloc"),
        ("MALLOCSHIM_TRIM_MIN_BYTES", "16M"),
        ("MALLOCSHIM_SAMPLE", "64"),
    ];
    let (out, lines) = run(&env);
    assert!(out.contains("backend=jemalloc"), "{out}");
    assert_eq!(lines.len(), 2, "one options line and the summary: {lines:?}");
    let l = &lines[0];
    assert!(
        l.starts_with("mallocshim: mallocshim ") && l.contains("options in effect (backend jemalloc): "),
        "{l}"
    );
    for set in [
        "MALLOCSHIM_VERBOSE=1",
        "MALLOCSHIM_BACKEND=jemalloc",
        "MALLOCSHIM_TRIM_MIN_BYTES=16777216",
        "MALLOCSHIM_SAMPLE=64",
    ] {
        assert!(l.split([' ', ';']).any(|w| w == set), "{set} not in {l}");
    }
    assert!(!l.contains("MALLOCSHIM_DUMP_DIR") && !l.contains("MALLOCSHIM_PROF_SAMPLE_BYTES"), "{l}");
    assert!(l.ends_with("; the other 29 at their defaults (MALLOCSHIM_VERBOSE=2 prints the table)"), "{l}");
    assert!(lines[1].starts_with("mallocshim: summary "), "{lines:?}");
}

/// With `MALLOCSHIM_PROFILE=off` no heap profile is taken: the line and the table say
/// `MALLOCSHIM_PROF_SAMPLE_BYTES` is 0, and why, not the rate that would have applied.
#[test]
fn profile_off_shows_heap_profile_rate_in_effect() {
    let (_, lines) = run(&[("MALLOCSHIM_VERBOSE", "1"), ("MALLOCSHIM_PROFILE", "off")]);
    assert!(
        lines[0].contains(" MALLOCSHIM_PROFILE=off MALLOCSHIM_VERBOSE=1 MALLOCSHIM_PROF_SAMPLE_BYTES=0 (off with PROFILE=off);"),
        "{lines:?}"
    );
    let (_, lines) = run(&[("MALLOCSHIM_VERBOSE", "2"), ("MALLOCSHIM_PROFILE", "off")]);
    let row = lines.iter().find(|l| l.contains("MALLOCSHIM_PROF_SAMPLE_BYTES")).expect("row");
    assert!(row.contains("= 0 (off with PROFILE=off)") && row.contains("[default; default 524288]"), "{row}");
}

/// Every byte-valued option takes K, M and G suffixes through the one parser; the value in
/// effect is shown in bytes. A bad size names the range.
#[test]
fn byte_options_take_suffixes() {
    let env = [
        ("MALLOCSHIM_VERBOSE", "1"),
        ("MALLOCSHIM_TRIM_MIN_BYTES", "16M"),
        ("MALLOCSHIM_TRIM_ABOVE_RSS", "922m"),
        ("MALLOCSHIM_PROF_SAMPLE_BYTES", "256K"),
        ("MALLOCSHIM_RECORD_MAX_BYTES", "2G"),
    ];
    let (_, lines) = run(&env);
    assert!(!lines.iter().any(|l| l.contains("not valid")), "{lines:?}");
    for set in [
        "MALLOCSHIM_TRIM_MIN_BYTES=16777216",
        "MALLOCSHIM_TRIM_ABOVE_RSS=966787072",
        "MALLOCSHIM_PROF_SAMPLE_BYTES=262144",
        "MALLOCSHIM_RECORD_MAX_BYTES=2147483648",
    ] {
        assert!(lines[0].split([' ', ';']).any(|w| w == set), "{set} not in {lines:?}");
    }
    let (_, lines) = run(&[("MALLOCSHIM_TRIM_MIN_BYTES", "16Q"), ("MALLOCSHIM_PROF_SAMPLE_BYTES", "2048G")]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("MALLOCSHIM_TRIM_MIN_BYTES=16Q is not valid (expected a size from 0 to 9223372036854775807 bytes, or with a K, M or G suffix); using default 67108864")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("MALLOCSHIM_PROF_SAMPLE_BYTES=2048G is not valid")), "{lines:?}");
}

/// Backend names are parsed in any case; the bad-value line lists every backend.
#[test]
fn backend_names_in_any_case() {
    for (given, backend) in [("JeMalloc", "jemalloc"), ("MIMALLOC", "mimalloc"), ("Glibc", "glibc")] {
        let (_, lines) = run(&[("MALLOCSHIM_VERBOSE", "1"), ("MALLOCSHIM_BACKEND", given)]);
        assert!(!lines.iter().any(|l| l.contains("not valid")), "{given}: {lines:?}");
        let summary = lines.iter().find(|l| l.starts_with("mallocshim: summary ")).expect("summary line");
        assert!(summary.contains(&format!("backend={backend} ")), "{given}: {summary}");
    }
    let (_, lines) = run(&[("MALLOCSHIM_BACKEND", "hoard")]);
    assert!(lines[0].contains("expected glibc, jemalloc, tcmalloc, mimalloc"), "{lines:?}");
}

#[test]
fn readme_env_table_matches_the_shim_table() {
    // The README's env table is the shim's table, row for row and cell for cell: the name, the
    // default and the doc `MALLOCSHIM_VERBOSE=2` prints
    // (`  NAME = VALUE [env|default; default DEFAULT] DOC`).
    let (_, lines) = run(&[("MALLOCSHIM_VERBOSE", "2")]);
    let shim_rows: Vec<[String; 3]> = lines
        .iter()
        .filter_map(|l| {
            let name = l.split_whitespace().nth(1).filter(|w| w.starts_with("MALLOCSHIM_"))?;
            let (_, rest) = l.split_once("; default ")?;
            let (default, doc) = rest.split_once("] ")?;
            Some([name.to_string(), default.to_string(), doc.to_string()])
        })
        .collect();
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let readme_rows: Vec<[String; 3]> = readme
        .lines()
        .filter(|l| l.starts_with("| `MALLOCSHIM_"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 3, "README row of three cells: {l}");
            let unquote = |c: &str| c.trim_matches('`').to_string();
            [unquote(cells[0]), unquote(cells[1]), cells[2].to_string()]
        })
        .collect();
    assert!(shim_rows.len() >= 20, "every row parsed: {lines:?}");
    assert_eq!(shim_rows, readme_rows, "README env table and the shim's table differ");
}

/// A number out of range (or not a number) names the accepted range in its line, one line per
/// bad variable even when several are bad at once.
#[test]
fn range_errors_name_the_range() {
    let cases: [(&str, &str, &str); 6] = [
        ("MALLOCSHIM_SAMPLE", "0", "a whole number from 1 to 1073741824"),
        ("MALLOCSHIM_MEMLOG_INTERVAL_MS", "5", "a whole number from 10 to 86400000"),
        ("MALLOCSHIM_DUMP_INTERVAL_S", "soon", "a whole number from 0 to 31536000"),
        ("MALLOCSHIM_TRIM_ON_PRESSURE", "200%", "a percentage N% from 1 to 100"),
        ("MALLOCSHIM_PROM_INTERVAL_S", "0", "from 1 to 86400"),
        ("MALLOCSHIM_TRIM_ABOVE_RSS", "0K", "a size from 1 to 4611686018427387903 bytes"),
    ];
    let env: Vec<(&str, &str)> = cases.iter().map(|&(k, v, _)| (k, v)).collect();
    let (out, lines) = run(&env);
    assert!(out.contains("ok"), "program output {out}");
    assert_eq!(lines.len(), cases.len(), "one line per bad variable: {lines:?}");
    for (var, bad, range) in cases {
        let l = lines
            .iter()
            .find(|l| l.contains(&format!("{var}={bad} ")))
            .unwrap_or_else(|| panic!("{var}: {lines:?}"));
        assert!(l.contains(range), "{var}={bad}: line must name the range `{range}`: {l}");
        assert!(!l.contains("in range"), "{l}");
    }
}
