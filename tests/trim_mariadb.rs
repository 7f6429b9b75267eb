//! Periodic trim in a real mariadbd, glibc backend: the harness's FULLTEXT load
//! (crates/mallocshim-mariadb, `fulltext::run` with configs `off on`) loads 300,000 generated
//! documents into an InnoDB table with a FULLTEXT index, then runs mariadbd twice under the shim,
//! trimming off (`MALLOCSHIM_TRIM_INTERVAL_MS=0`) and on (every 1000 ms), each time with 4
//! concurrent phrase searches for 20 s (sysbench + workloads/fulltext-phrase.lua) and 10 s idle,
//! and a clean `mariadb-admin shutdown`.
//!
//! Asserts: zero query errors, sysbench exit 0 and qps > 0 in both runs, mariadbd exit status 0,
//! no crash report, an exit dump with a trim object; with trimming on the final RSS is at least
//! 10% (and 16 MiB) below the final RSS with it off; the dump of the run with trimming on counts
//! runs, skips and released bytes that equal the verbose lines (and something was released), and
//! the run with trimming off has none. Both RSS figures are printed. The harness takes the
//! machine-wide MariaDB lock.

mod common;

use mallocshim_mariadb::fulltext::{self, RunConfig, Settings};

#[test]
fn fulltext_rss_trim_on_vs_off_glibc() {
    let settings = Settings::new(common::shim());
    assert_eq!((settings.backend.as_str(), settings.trim_ms), ("glibc", 1000));
    let configs: Vec<RunConfig> =
        ["off", "on"].iter().map(|c| RunConfig::parse(c, settings.trim_ms).unwrap()).collect();
    let res = fulltext::run(&settings, &configs).unwrap_or_else(|e| panic!("{e}"));
    let report = format!("{res:#?}");
    let run = |c: &str| res.run(c).unwrap_or_else(|| panic!("no run {c}\n{report}"));

    for c in ["off", "on"] {
        let r = run(c);
        assert_eq!(r.sysbench.exit, 0, "{c}: sysbench failed\n{report}");
        assert_eq!(r.sysbench.errors, 0, "{c}: query errors\n{report}");
        assert!(r.sysbench.qps.unwrap_or(0.0) > 0.0, "{c}: no phrase search completed\n{report}");
        assert_eq!(r.mariadbd_exit, 0, "{c}: mariadbd exit status\n{report}");
        assert!(r.crash_lines.is_empty(), "{c}: crash report\n{report}");
        assert!(r.dump_trim.is_some(), "{c}: no JSON dump with a trim object\n{report}");
        assert!(r.ok, "{c}\n{report}");
    }
    assert!(res.ok, "the FULLTEXT load reported a failed check\n{report}");

    let (off, on) = (run("off"), run("on"));
    let dump_off = off.dump_trim.as_ref().unwrap();
    assert_eq!(dump_off.interval_ms, 0, "{dump_off:?}\n{report}");
    assert_eq!(dump_off.runs, 0, "trimming off, yet runs: {dump_off:?}\n{report}");
    assert_eq!(off.trim_lines, 0, "{report}");
    let dump_on = on.dump_trim.as_ref().unwrap();
    assert_eq!(dump_on.interval_ms, 1000, "{dump_on:?}\n{report}");
    let runs = dump_on.runs;
    assert!(runs >= 1, "trimming on, yet no run: {dump_on:?}\n{report}");
    // The exit dump is written a moment before the process ends: one more periodic trim (run or
    // skipped, one a second) may come after it and log its line (seen: 18 skipped in the dump,
    // 19 lines in the log).
    let one_after = |dump: u64, lines: u64| lines == dump || lines == dump + 1;
    assert!(one_after(runs, on.trim_lines), "one verbose line per run: {dump_on:?}\n{report}");
    assert!(one_after(dump_on.skipped, on.skip_lines), "{dump_on:?}\n{report}");
    let late_run = on.trim_lines - runs;
    if late_run == 0 {
        assert_eq!(dump_on.released_bytes, on.trim_released, "{dump_on:?}\n{report}");
    } else {
        assert!(dump_on.released_bytes <= on.trim_released, "{dump_on:?}\n{report}");
    }
    assert!(on.trim_released > 0, "no trim released anything: {dump_on:?}\n{report}");

    let (fin_off, fin_on) = (off.rss_final, on.rss_final);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    assert!(
        (fin_on as f64) <= 0.9 * fin_off as f64 && fin_on + (16 << 20) <= fin_off,
        "final RSS with trimming on ({:.1} MiB) is not measurably below trimming off ({:.1} MiB)\n{report}",
        mib(fin_on),
        mib(fin_off)
    );
    eprintln!(
        "mariadbd FULLTEXT, glibc: trim off: peak {:.1} MiB, final {:.1} MiB, qps {}; trim on (1 s): peak {:.1} MiB, final {:.1} MiB ({:.1}%), qps {}; runs={} skipped={} released={:.1} MiB duration_us p50={} max={}",
        mib(off.rss_peak),
        mib(fin_off),
        off.sysbench.qps_text(),
        mib(on.rss_peak),
        mib(fin_on),
        100.0 * fin_on as f64 / fin_off as f64,
        on.sysbench.qps_text(),
        runs,
        dump_on.skipped,
        mib(dump_on.released_bytes),
        dump_on.duration_us.p50,
        dump_on.duration_us.max
    );
}
