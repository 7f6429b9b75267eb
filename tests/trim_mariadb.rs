//! Periodic trim in a real mariadbd (issue 4), glibc backend: `scripts/fulltext-check.sh off on`
//! loads 300,000 generated documents into an InnoDB table with a FULLTEXT index, then runs
//! mariadbd twice under the shim, trimming off (`MALLOCSHIM_TRIM_INTERVAL_MS=0`) and on (every
//! 1000 ms), each time with 4 concurrent phrase searches for 20 s (sysbench +
//! scripts/fulltext-phrase.lua) and 10 s idle, and a clean `mariadb-admin shutdown`.
//!
//! Asserts: zero query errors and sysbench exit 0 in both runs, mariadbd exit status 0 and no
//! crash report; with trimming on the final RSS is at least 10% (and 16 MiB) below the final
//! RSS with it off; the dump of the run with trimming on counts runs whose released bytes match
//! the verbose lines, and the run with trimming off has none. Both RSS figures are printed.
//! All MariaDB logic is in the scripts (the machine-wide flock is taken there).

mod common;

use mallocshim_format::{Dump, Trim};
use std::collections::HashMap;
use std::process::Command;

#[test]
fn fulltext_rss_trim_on_vs_off_glibc() {
    for prog in ["bash", "flock", "mariadbd", "mariadb-install-db", "mariadb-admin", "mariadb", "sysbench"] {
        common::require(prog);
    }
    let so = common::shim();
    let script = common::root().join("scripts/fulltext-check.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .args(["off", "on"])
        .env("MALLOCSHIM_SO", &so)
        .env("MALLOCSHIM_CLI", common::cli_bin())
        .env_remove("LD_PRELOAD");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("FT_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("FT_BACKEND", "glibc").env("FT_TRIM_MS", "1000");
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stdout = common::stdout(&out);
    let report = format!(
        "scripts/fulltext-check.sh off on: {:?}\n--- stdout\n{stdout}--- stderr\n{}",
        out.status,
        common::stderr(&out)
    );
    let kv: HashMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| -> &str {
        kv.get(k).copied().unwrap_or_else(|| panic!("no `{k}=` in the output\n{report}"))
    };
    let num = |k: &str| -> u64 {
        let v = get(k);
        v.parse().unwrap_or_else(|_| panic!("`{k}={v}` is not an integer\n{report}"))
    };

    for c in ["off", "on"] {
        assert_eq!(get(&format!("sysbench_exit_{c}")), "0", "{c}: sysbench failed\n{report}");
        assert_eq!(get(&format!("errors_{c}")), "0", "{c}: query errors\n{report}");
        let qps: f64 = get(&format!("qps_{c}")).parse().unwrap_or(0.0);
        assert!(qps > 0.0, "{c}: no phrase search completed\n{report}");
        assert_eq!(get(&format!("mariadbd_exit_{c}")), "0", "{c}: mariadbd exit status\n{report}");
        assert_eq!(get(&format!("crash_{c}")), "0", "{c}: crash report\n{report}");
        assert_eq!(get(&format!("ok_{c}")), "1", "{c}\n{report}");
    }
    assert!(out.status.success() && get("ok") == "1", "the script reported a failed check\n{report}");

    let dump = |c: &str| -> Trim {
        Dump::parse(get(&format!("dump_{c}"))).unwrap_or_else(|e| panic!("dump_{c}: {e}\n{report}")).trim
    };
    let off = dump("off");
    assert_eq!(Some(off.interval_ms), Some(0), "{off:?}\n{report}");
    assert_eq!(Some(off.runs), Some(0), "trimming off, yet runs: {off:?}\n{report}");
    assert_eq!(num("trim_lines_off"), 0, "{report}");
    let on = dump("on");
    assert_eq!(Some(on.interval_ms), Some(1000), "{on:?}\n{report}");
    let runs = on.runs;
    assert!(runs >= 1, "trimming on, yet no run: {on:?}\n{report}");
    assert_eq!(runs, num("trim_lines_on"), "one verbose line per run: {on:?}\n{report}");
    assert_eq!(Some(on.skipped), Some(num("skip_lines_on")), "{on:?}\n{report}");
    assert_eq!(Some(on.released_bytes), Some(num("trim_released_lines_on")), "{on:?}\n{report}");
    assert!(num("trim_released_lines_on") > 0, "no trim released anything: {on:?}\n{report}");

    let (fin_off, fin_on) = (num("rss_final_off"), num("rss_final_on"));
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    assert!(
        (fin_on as f64) <= 0.9 * fin_off as f64 && fin_on + (16 << 20) <= fin_off,
        "final RSS with trimming on ({:.1} MiB) is not measurably below trimming off ({:.1} MiB)\n{report}",
        mib(fin_on),
        mib(fin_off)
    );
    eprintln!(
        "mariadbd FULLTEXT, glibc: trim off: peak {:.1} MiB, final {:.1} MiB, qps {}; trim on (1 s): peak {:.1} MiB, final {:.1} MiB ({:.1}%), qps {}; runs={} skipped={} released={:.1} MiB duration_us p50={} max={}",
        mib(num("rss_peak_off")),
        mib(fin_off),
        get("qps_off"),
        mib(num("rss_peak_on")),
        mib(fin_on),
        100.0 * fin_on as f64 / fin_off as f64,
        get("qps_on"),
        runs,
        on.skipped,
        mib(on.released_bytes),
        on.duration_us.p50,
        on.duration_us.max
    );
}
