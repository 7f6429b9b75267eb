//! Proves where the shim's allocations really land: `tests/c/routing.c` allocates 64 MiB in
//! 1 MiB blocks and prints glibc's own heap accounting (mallinfo2 resolved on the libc.so.6
//! handle), gperftools' `generic.current_allocated_bytes` when libtcmalloc is loaded, and
//! what the default (shim-exported) mallinfo2 answers.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Output;
use std::sync::OnceLock;

const MIB: i128 = 1 << 20;
const ALLOCATED: i128 = 64 * MIB;

fn program() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| common::cc("routing.c", "routing", &["-fno-builtin"])).clone()
}

struct Report {
    kv: HashMap<String, String>,
    text: String,
}

impl Report {
    fn parse(o: &Output, what: &str) -> Report {
        let text = format!(
            "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
            o.status,
            common::stdout(o),
            common::stderr(o)
        );
        assert!(o.status.success(), "{what}: routing failed\n{text}");
        let kv: HashMap<String, String> = common::stdout(o)
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        assert!(!kv.contains_key("error"), "{what}: {text}");
        Report { kv, text }
    }

    fn str(&self, k: &str) -> &str {
        self.kv.get(k).map(String::as_str).unwrap_or_else(|| panic!("no {k}= line\n{}", self.text))
    }

    fn num(&self, k: &str) -> i128 {
        self.str(k).parse().unwrap_or_else(|_| panic!("{k}= is not a number\n{}", self.text))
    }

    /// Growth of glibc's ptmalloc accounting (arena bytes in use + mmapped chunks).
    fn glibc_growth(&self) -> i128 {
        self.num("glibc_mallinfo2_uordblks_after") + self.num("glibc_mallinfo2_hblkhd_after")
            - self.num("glibc_mallinfo2_uordblks_before")
            - self.num("glibc_mallinfo2_hblkhd_before")
    }

    /// Growth as seen by whatever `mallinfo2` the program links to (the shim's, when preloaded).
    fn default_growth(&self) -> i128 {
        self.num("default_mallinfo2_uordblks_after") + self.num("default_mallinfo2_hblkhd_after")
            - self.num("default_mallinfo2_uordblks_before")
            - self.num("default_mallinfo2_hblkhd_before")
    }

    fn tcmalloc_growth(&self) -> i128 {
        assert_eq!(
            self.str("tcmalloc"),
            "loaded",
            "libtcmalloc_minimal.so.4 not in the process\n{}",
            self.text
        );
        self.num("tcmalloc_allocated_after") - self.num("tcmalloc_allocated_before")
    }
}

fn run_shim(backend: &str) -> Report {
    let mut cmd = common::preloaded(program(), backend);
    cmd.env("MALLOCSHIM_VERBOSE", "1");
    let what = format!("routing under the shim, backend={backend}");
    let o = cmd.output().expect("start routing");
    let r = Report::parse(&o, &what);
    assert!(r.str("malloc_object").contains("mallocshim"), "{what}: malloc is not the shim's\n{}", r.text);
    assert!(r.str("libc_mallinfo2_object").contains("libc.so"), "{what}: {}", r.text);
    // The summary proves which backend the shim actually ran with.
    let lines = common::shim_lines(&o);
    let summary = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("mallocshim: summary"))
        .unwrap_or_else(|| panic!("{what}: no summary line\n{}", r.text));
    assert!(
        summary.split_whitespace().any(|w| w == format!("backend={backend}")),
        "{what}: summary names another backend: {summary}"
    );
    assert!(common::kv(summary, "malloc").unwrap_or(0) >= 64, "{what}: malloc count: {summary}");
    // Whatever the backend, the shim's mallinfo2 answers for it and must see the 64 MiB
    // (less a little slack: backend statistics are net of small frees in between, and
    // jemalloc's are refreshed per epoch).
    assert!(
        r.default_growth() >= ALLOCATED - MIB,
        "{what}: shim mallinfo2 uordblks+hblkhd grew by {} bytes, expected >= 63 MiB\n{}",
        r.default_growth(),
        r.text
    );
    r
}

#[test]
fn glibc_backend_uses_glibc_heap() {
    let r = run_shim("glibc");
    assert!(
        r.glibc_growth() >= ALLOCATED,
        "glibc backend: glibc's uordblks+hblkhd grew by {} bytes, expected >= 64 MiB\n{}",
        r.glibc_growth(),
        r.text
    );
    assert_eq!(r.str("tcmalloc"), "absent", "glibc backend loaded libtcmalloc\n{}", r.text);
}

/// Every backend but glibc leaves glibc's heap alone; only the tcmalloc backend loads libtcmalloc.
#[test]
fn other_backends_bypass_glibc_heap() {
    for b in common::BACKENDS.into_iter().filter(|b| *b != "glibc") {
        let r = run_shim(b);
        assert!(
            r.glibc_growth() < MIB,
            "{b} backend: glibc's uordblks+hblkhd grew by {} bytes (expected < 1 MiB)\n{}",
            r.glibc_growth(),
            r.text
        );
        if b != "tcmalloc" {
            assert_eq!(r.str("tcmalloc"), "absent", "{b} backend loaded libtcmalloc\n{}", r.text);
        }
    }
}

#[test]
fn tcmalloc_backend_uses_tcmalloc_heap() {
    let r = run_shim("tcmalloc");
    assert!(
        r.glibc_growth() < MIB,
        "tcmalloc backend: glibc's uordblks+hblkhd grew by {} bytes (expected < 1 MiB)\n{}",
        r.glibc_growth(),
        r.text
    );
    assert!(
        r.tcmalloc_growth() >= ALLOCATED,
        "tcmalloc backend: tcmalloc current_allocated_bytes grew by {} bytes, expected >= 64 MiB\n{}",
        r.tcmalloc_growth(),
        r.text
    );
}

/// The measurements themselves: without the shim glibc's heap takes the 64 MiB, and with
/// libtcmalloc preloaded directly its counter does while glibc's stays flat. If these fail,
/// the probes in routing.c are broken, not the shim.
#[test]
fn probes_work_without_shim() {
    let cmd = common::plain(program());
    let r = Report::parse(&common::run_ok(cmd, "routing without preload"), "routing without preload");
    assert!(r.str("malloc_object").contains("libc.so"), "{}", r.text);
    assert_eq!(r.str("tcmalloc"), "absent", "{}", r.text);
    assert!(r.glibc_growth() >= ALLOCATED, "plain glibc grew by {}\n{}", r.glibc_growth(), r.text);

    let tc = common::require_file(common::TCMALLOC_LIB);
    let mut cmd = common::plain(program());
    cmd.env("LD_PRELOAD", &tc);
    let what = "routing with libtcmalloc preloaded directly";
    let r = Report::parse(&common::run_ok(cmd, what), what);
    assert!(r.str("malloc_object").contains("tcmalloc"), "{}", r.text);
    assert!(r.glibc_growth() < MIB, "{what}: glibc grew by {}\n{}", r.glibc_growth(), r.text);
    assert!(r.tcmalloc_growth() >= ALLOCATED, "{what}: tcmalloc grew by {}\n{}", r.tcmalloc_growth(), r.text);
}
