//! Measuring the account while other threads make the allocator unmap memory, black-box.
//! `tests/c/arena_unmap.c`: two threads each allocate 70 MiB in 64 KiB blocks (their arena grows
//! a second 64 MiB heap) and free it newest first (glibc unmaps that heap), in a loop, while the
//! main thread asks for dumps as fast as it can (`mallocshim_dump`: each measures the account,
//! which reads the header of every arena heap listed in /proc/self/maps). The program must exit 0
//! with dumps written and none failed: under the glibc backend with every profiling setting and
//! heap profiles at every allocation (5 s each), under the other backends with the default (2 s).
//!
//! On the code before 22c0052, which dereferenced the headers, the program died of SIGSEGV (a
//! heap unmapped between the read of maps and the load): 2 of 5 runs of 3 s at the default
//! setting, and 5 of the 8 runs of 5 s of this test's glibc cells (2 per setting; the cell at
//! `MALLOCSHIM_PROF_SAMPLE_BYTES=1` dumps less often and survived both); 0 of 5 after the fix.

mod common;

use common::*;

fn run(backend: &str, setting: &str, env: &[(&str, &str)], seconds: &str) {
    let dir = work_dir().join("account-race").join(format!("{backend}-{}", setting.replace(['=', ' '], "_")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the dump directory");
    let mut c = preloaded(cc("arena_unmap.c", "arena_unmap", &[]), backend);
    c.args([seconds, "2"])
        .env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_DUMP_FORMATS", "json")
        .env("MALLOCSHIM_DUMP_KEEP", "20");
    for (k, v) in env {
        c.env(k, v);
    }
    let what = format!("arena_unmap under {backend}, {setting}");
    let o = run_ok(c, &what);
    let out = stdout(&o);
    assert!(out.contains("dump_api=present"), "{what}: mallocshim_dump not found\n{}", describe(&o));
    let last = out.lines().last().unwrap_or("");
    let (iterations, dumps, errors) = (kv(last, "iterations"), kv(last, "dumps"), kv(last, "dump_errors"));
    assert!(iterations.unwrap_or(0) > 0 && dumps.unwrap_or(0) > 0, "{what}: nothing ran\n{}", describe(&o));
    assert_eq!(errors, Some(0), "{what}: dumps failed\n{}", describe(&o));
    eprintln!("{what}: {last}");
}

#[test]
fn glibc_heaps_unmapped_while_measured() {
    let prof_every = [("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")];
    for (name, env) in SETTINGS.into_iter().chain([("MALLOCSHIM_PROF_SAMPLE_BYTES=1", &prof_every[..])]) {
        run("glibc", name, env, "5");
    }
}

#[test]
fn other_backends_unmapping_while_measured() {
    for b in BACKENDS.into_iter().filter(|b| *b != "glibc") {
        run(b, "profiling on", &[], "2");
    }
}
