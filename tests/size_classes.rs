//! Size classes, black-box, read back from the dump written at exit through the format crate
//! (`mallocshim_format::Dump`): real dumps holding every size class, the open class above 64 MiB
//! (`max_bytes` null) included, read by the same schema every reader uses.
//!
//! `tests/c/malloc_edges.c` makes malloc/free pairs at both edges of every class (exactly
//! 16 << k bytes, and one byte more): each class's malloc count must hold its edges' calls, and
//! equal them exactly from 8 MiB up, where nothing else allocates.
//!
//! `tests/c/free_classes.c` frees blocks of known usable sizes (malloc_usable_size) on the
//! allocating thread and on another thread, for every backend,
//! once with the default sampling (jemalloc: the usable size is the growth of its per-thread
//! freed-bytes counter across the free; glibc, tcmalloc: a usable-size lookup before the free)
//! and once with `MALLOCSHIM_SAMPLE=1` (every call timed, out of line: always the lookup). The
//! dump written at exit must hold each class's frees and bytes: exactly, for the classes of
//! 8 MiB and more that nothing else in the process frees into; at least, for the others.

mod common;

use common::*;
use mallocshim_format::classes::{class_range, CLASSES};
use mallocshim_format::Dump;
use std::fs;

/// Runs `bin` under `backend` with a JSON dump at exit into a fresh directory; returns the
/// program's stdout and the dump.
fn run_with_exit_dump(bin: &std::path::Path, backend: &str, sample: &str, tag: &str) -> (String, Dump) {
    let what = format!("{tag} under {backend}, MALLOCSHIM_SAMPLE={sample}");
    let dir = work_dir().join("dumps").join(format!("{tag}-{backend}-{sample}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("dump dir");
    let mut c = preloaded(bin, backend);
    c.env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_DUMP_AT_EXIT", "1")
        .env("MALLOCSHIM_DUMP_FORMATS", "json")
        .env("MALLOCSHIM_SAMPLE", sample);
    let o = run_ok(c, &what);
    let files: Vec<_> = fs::read_dir(&dir)
        .expect("read dump dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(files.len(), 1, "{what}: expected one JSON dump at exit, found {files:?}");
    let d = Dump::read(&files[0]).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(d.backend, backend, "{what}");
    (stdout(&o), d)
}

/// The dump's row of `op` for the class ending at `max` (u64::MAX: the last): (count, bytes),
/// (0, 0) when absent.
fn row(d: &Dump, op: &str, max: u64) -> (u64, u64) {
    let c = (0..CLASSES).find(|&c| class_range(c).1.unwrap_or(u64::MAX) == max).expect("a class bound");
    d.class_row(op, c).map(|r| (r.count, r.bytes)).unwrap_or((0, 0))
}

#[test]
fn malloc_edges_fall_in_their_classes() {
    let bin = cc("malloc_edges.c", "malloc_edges", &[]);
    for b in BACKENDS {
        let (out, d) = run_with_exit_dump(&bin, b, "64", "malloc-edges");
        let mut classes = 0;
        for l in out.lines().filter(|l| l.starts_with("class ")) {
            let k = |key| kv(l, key).unwrap_or_else(|| panic!("no {key} in {l:?}"));
            let (max, want, exact) = (k("max_bytes"), k("count"), k("exact") == 1);
            let (n, _) = row(&d, "malloc", max);
            if exact {
                assert_eq!(
                    n, want,
                    "{b}: malloc class <= {max}: the program made exactly {want} calls of its edge sizes"
                );
            } else {
                // Each edge size is called 5,000 times: a misplaced edge moves 5,000 calls,
                // far more than the few hundred the process makes itself.
                assert!(n >= want && n < want + 2_500, "{b}: malloc class <= {max}: dump has {n}, the program made {want} calls of its edge sizes");
            }
            classes += 1;
        }
        assert_eq!(classes, CLASSES, "{b}: the program prints every class:\n{out}");
        // Every class has its malloc row, with the bounds and labels of the schema; the open
        // class above 64 MiB is written with a null max_bytes and read back as None.
        for c in 0..CLASSES {
            let r = d.class_row("malloc", c).unwrap_or_else(|| panic!("{b}: no malloc row for class {c}"));
            assert_eq!(r.class(), Some(c), "{b}: {r:?}");
        }
        let top = d.class_row("malloc", CLASSES - 1).expect("the open class");
        assert_eq!((top.max_bytes, top.label().as_str()), (None, ">64M"), "{b}");
        assert!(top.bytes > top.count << 26, "{b}: allocations above 64 MiB: {top:?}");
    }
}

/// (max_bytes, count, bytes, exact) per class, as the program printed them.
fn expected(out: &str) -> Vec<(u64, u64, u64, bool)> {
    let v: Vec<_> = out
        .lines()
        .filter(|l| l.starts_with("class "))
        .map(|l| {
            let k = |key| kv(l, key).unwrap_or_else(|| panic!("no {key} in {l:?}"));
            (k("max_bytes"), k("count"), k("bytes"), k("exact") == 1)
        })
        .collect();
    assert!(v.len() >= 8, "the program printed too few classes:\n{out}");
    v
}

#[test]
fn frees_are_classed_by_usable_size_on_every_path() {
    let bin = cc("free_classes.c", "free_classes", &[]);
    for b in BACKENDS {
        // Two of `SETTINGS` on purpose: the figures checked are the dump's per-class frees,
        // which `MALLOCSHIM_PROFILE=off` does not record; 64 is the default sampling.
        for sample in ["64", "1"] {
            let what = format!("free_classes under {b}, MALLOCSHIM_SAMPLE={sample}");
            let (out, d) = run_with_exit_dump(&bin, b, sample, "free-classes");
            let want = expected(&out);
            for &(max, count, bytes, exact) in &want {
                let (n, by) = row(&d, "free", max);
                if exact {
                    assert_eq!(
                        (n, by),
                        (count, bytes),
                        "{what}: free class <= {max}: dump (count, bytes) vs the program's"
                    );
                } else {
                    assert!(n >= count && by >= bytes, "{what}: free class <= {max}: dump has ({n}, {by}), the program freed at least ({count}, {bytes})");
                }
            }
            // Nothing but the program's own blocks is 8 MiB or larger: classes it did not fill are empty.
            for c in &d.size_classes {
                let max = c.max_bytes.unwrap_or(u64::MAX);
                if c.op == "free" && max > 8 << 20 && !want.iter().any(|w| w.0 == max) {
                    assert_eq!(c.count, 0, "{what}: unexpected frees in {c:?}");
                }
            }
        }
    }
}
