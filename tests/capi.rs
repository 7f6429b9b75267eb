//! The C API through the example program in shim/examples: under each backend it names the
//! backend that really serves calls, counts the calls made between two snapshots, and the
//! backend's allocated bytes grow by what the program keeps alive.

mod common;
use common::*;

#[test]
fn c_api_example_under_each_backend() {
    let so = shim();
    let bin = work_dir().join("stats_example");
    let o = std::process::Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-I"])
        .arg(root().join("shim/include"))
        .arg("-o")
        .arg(&bin)
        .arg(root().join("shim/examples/stats_example.c"))
        .arg("-ldl")
        .output()
        .expect("gcc");
    assert!(o.status.success(), "gcc: {}", stderr(&o));
    // Without the shim the example says so and exits 2: the lookup is real.
    let plain = std::process::Command::new(&bin).output().unwrap();
    assert_eq!(plain.status.code(), Some(2), "{}", stdout(&plain));
    for b in BACKENDS {
        let out = stdout(&run_ok(preloaded(&bin, b), &format!("stats_example under {b}")));
        assert!(out.contains(&format!("backend={b}\n")), "{b}: {out}");
        let calls = kv(&out.replace('\n', " "), "malloc_calls").expect("malloc_calls");
        assert!(calls >= 1000, "{b}: malloc_calls={calls}");
        let grew = kv(&out.replace('\n', " "), "allocated_growth").expect("allocated_growth");
        // jemalloc counts thread-cached blocks lazily: allow 2%.
        let kept = 1000 * 64 * 1024 * 98 / 100;
        if common::is_coarse(b) {
            // Committed bytes grow by whole segments: they bound what is kept alive.
            let now = kv(&out.replace('\n', " "), "allocated_bytes").expect("allocated_bytes");
            assert!(now >= kept, "{b}: allocated (committed) bytes {now} below what is kept\n{out}");
        } else {
            assert!(grew >= kept, "{b}: allocated grew by only {grew}\n{out}");
        }
        assert!(out.contains("get_stats_null=22"), "{b}: NULL must give EINVAL\n{out}");
    }
    let _ = so;
}
