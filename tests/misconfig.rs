//! Misconfiguration that used to pass silently: the allocator options users set for a
//! jemalloc-linked mysqld (`MALLOC_CONF`) take effect under the jemalloc backend, and
//! `_RJEM_MALLOC_CONF` (the built-in jemalloc's own variable) still wins over it.

mod common;
use common::*;

fn narenas(env: &[(&str, &str)]) -> String {
    let bin = cc("je_narenas.c", "je_narenas", &[]);
    let mut c = preloaded(&bin, "jemalloc");
    c.env_remove("MALLOC_CONF").env_remove("_RJEM_MALLOC_CONF");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run_ok(c, &format!("je_narenas with {env:?}"));
    assert!(shim_lines(&o).is_empty(), "no shim line expected: {}", describe(&o));
    stdout(&o)
}

#[test]
fn malloc_conf_is_honoured_under_jemalloc() {
    let default = narenas(&[]);
    assert!(default.contains("rc=0 narenas="), "{default}");
    assert!(!default.contains("narenas=3\n"), "the default must differ from the value set: {default}");
    let out = narenas(&[("MALLOC_CONF", "narenas:3")]);
    assert!(out.contains("rc=0 narenas=3\n"), "MALLOC_CONF=narenas:3 not in effect: {out}");
}

#[test]
fn rjem_malloc_conf_wins_over_malloc_conf() {
    let out = narenas(&[("MALLOC_CONF", "narenas:3"), ("_RJEM_MALLOC_CONF", "narenas:5")]);
    assert!(out.contains("rc=0 narenas=5\n"), "{out}");
    let out = narenas(&[("_RJEM_MALLOC_CONF", "narenas:5")]);
    assert!(out.contains("rc=0 narenas=5\n"), "{out}");
}
