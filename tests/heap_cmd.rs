//! `mallocshim heap`, black-box, on `tests/c/heap_chains.cc` (planted sites behind
//! `my_malloc <- leaf_alloc <- mid_b <- mid_a <- path_one | path_two <- main`, path_one 75% of
//! what the two paths hold) built three ways: `-O2 -fomit-frame-pointer`, with frame pointers,
//! and stripped with its debug file under a build-ID path (`objcopy --only-keep-debug`, `strip`,
//! `DIR/.build-id/xx/rest.debug`, `--debug-dir DIR`). Under every backend (mean 64 KiB):
//! - the default view's first call site is `leaf_alloc` (the wrapper `my_malloc` and
//!   `operator new[]` looked through), holding ~100% of inuse and alloc space in all three builds
//!   (within ±10 points of each other);
//! - `--tree`: leaf_alloc's callers mid_b, mid_a, path_one/path_two, main (depth ≥ 4), path_one
//!   75% ±10 of the two paths by `--cum`;
//! - stripped: every site named through the debug file by `mallocshim heap`; its mapping in the
//!   profile carries the build ID and is left unsymbolized for pprof; without the debug file, sites read
//!   `heap_cmd_strip+0xOFFSET`, never a run-time address;
//! - `heap A B` on two runs of the stripped build without its debug file (ASLR: every address
//!   differs): no site grows or shrinks by more than 15% of its size (sampling noise), no site
//!   appears or vanishes; with a planted growth (`HEAP_CHAINS_GROW`, 8 MiB at grow_site), the grown
//!   site is first;
//! - `--flame`: an SVG naming leaf_alloc, path_one and path_two.
//! - `--symbolized OUT` on the stripped build's profile (every backend): `go tool pprof -top` on
//!   OUT names leaf_alloc, mid_b, mid_a, path_one and main, `-traces` has the chain in order, no
//!   build-ID mismatch is printed, the samples (values, labels, locations) and mappings (build
//!   IDs, offsets) are those of the profile; on the profile itself, Go's pprof names none of
//!   them (`[heap_cmd_strip]`: it reads no build ID, so no debug file).
//!
//! On the code before this test (innermost frame only, run-time addresses), the first site reads
//! `my_malloc`, the stripped sites read raw addresses and `heap A B` reports every stripped site
//! as grown and shrunk.

mod common;

use mallocshim_format::pprof::Profile;
use std::path::{Path, PathBuf};
use std::process::Command;

const MEAN: (&str, &str) = ("MALLOCSHIM_PROF_SAMPLE_BYTES", "65536");

/// `mallocshim heap ARGS`: its stdout (fails on a non-zero exit).
fn heap(args: &[&str]) -> String {
    let o = Command::new(common::cli_bin()).arg("heap").args(args).output().expect("run mallocshim heap");
    assert!(o.status.success(), "mallocshim heap {args:?}: {}", common::describe(&o));
    common::stdout(&o)
}

/// The three builds (once per test binary): without frame pointers, with them, stripped, and
/// the debug-file directory of the stripped one.
fn builds() -> &'static (PathBuf, PathBuf, PathBuf, PathBuf) {
    static B: std::sync::OnceLock<(PathBuf, PathBuf, PathBuf, PathBuf)> = std::sync::OnceLock::new();
    B.get_or_init(|| {
        let nofp =
            common::cc("heap_chains.cc", "heap_cmd_nofp", &["-O2", "-fomit-frame-pointer", "-Wl,--build-id"]);
        let fp = common::cc(
            "heap_chains.cc",
            "heap_cmd_fp",
            &["-O2", "-fno-omit-frame-pointer", "-Wl,--build-id"],
        );
        let (strip, dir) = stripped(&nofp);
        (nofp, fp, strip, dir)
    })
}

/// The stripped build and the debug-file directory beside it.
fn stripped(nofp: &Path) -> (PathBuf, PathBuf) {
    let bin = common::work_dir().join("heap_cmd_strip");
    let dir = common::work_dir().join("heap_cmd_debug");
    let _ = std::fs::remove_dir_all(&dir);
    let dbg = common::work_dir().join("heap_cmd_strip.debug");
    let objcopy = common::require("objcopy");
    common::run_ok(
        {
            let mut c = Command::new(&objcopy);
            c.arg("--only-keep-debug").arg(nofp).arg(&dbg);
            c
        },
        "objcopy --only-keep-debug",
    );
    common::run_ok(
        {
            let mut c = Command::new(common::require("strip"));
            c.arg("-o").arg(&bin).arg(nofp);
            c
        },
        "strip",
    );
    let notes = common::run_ok(
        {
            let mut c = Command::new(common::require("readelf"));
            c.arg("-n").arg(&bin);
            c
        },
        "readelf -n",
    );
    let id = common::stdout(&notes)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("the test program has no build ID");
    let at = dir.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&at).unwrap();
    std::fs::rename(&dbg, at.join(format!("{}.debug", &id[2..]))).unwrap();
    let syms = common::stdout(&common::run_ok(
        {
            let mut c = Command::new(common::require("nm"));
            c.arg("-D").arg(&bin);
            c
        },
        "nm -D",
    ));
    assert!(!syms.contains("leaf_alloc"), "the stripped build still names leaf_alloc");
    (bin, dir)
}

/// (name, % of total) of the rows of the first table of `by_index` in `out`.
fn rows(out: &str, by_index: &str) -> Vec<(String, f64)> {
    out.split("\n\n")
        .find(|t| t.starts_with(by_index))
        .unwrap_or_else(|| panic!("no table {by_index:?} in\n{out}"))
        .lines()
        .skip(2)
        .filter_map(|l| {
            let i = l.find('%')?;
            let pct: f64 = l[..i].split_whitespace().last()?.parse().ok()?;
            Some((l[i + 1..].trim().to_string(), pct))
        })
        .collect()
}

fn check(bin: &Path, backend: &str, what: &str, debug: Option<&Path>) -> PathBuf {
    let what = format!("{what} under {backend}");
    let p = common::profile_of(bin, None, backend, &[MEAN], &what.replace([' ', '-'], "_"));
    let ps = p.to_str().unwrap();
    let dd = debug.map(|d| d.to_str().unwrap()).unwrap_or("/nonexistent");
    let out = heap(&["--cum", "--tree", "--debug-dir", dd, ps]);
    for index in ["by inuse_space", "by alloc_space"] {
        let r = rows(&out, &format!("{index} (total"));
        assert_eq!(r.first().map(|x| x.0.as_str()), Some("leaf_alloc"), "{what}: first site\n{out}");
        assert!(r[0].1 >= 90.0, "{what}: leaf_alloc holds {}% (100 ± 10)\n{out}", r[0].1);
    }
    let cum: Vec<_> = out.split("\n\n").filter(|t| t.contains("function (cum)")).collect();
    let cum = rows(cum.first().unwrap_or_else(|| panic!("{what}: no cum table\n{out}")), "by inuse_space");
    let get = |n: &str| cum.iter().find(|r| r.0 == n).map(|r| r.1).unwrap_or(0.0);
    let share = 100.0 * get("path_one") / (get("path_one") + get("path_two"));
    assert!((65.0..=85.0).contains(&share), "{what}: path_one {share:.1}% of the two paths (75 ± 10)\n{out}");
    let tree: Vec<&str> = out
        .split("\n\n")
        .find(|t| t.starts_with("call sites and their callers"))
        .unwrap_or_else(|| panic!("{what}: no tree\n{out}"))
        .lines()
        .collect();
    let chain = ["leaf_alloc", "mid_b", "mid_a", "path_one", "main"];
    for (depth, name) in chain.iter().enumerate() {
        let want = format!("{}{name}", "  ".repeat(depth));
        assert!(
            tree.iter().any(|l| l.split('%').nth(1) == Some(&format!("  {want}"))),
            "{what}: no {want:?} in tree\n{out}"
        );
    }
    // A build with its symbols (its .symtab, or the debug file found) gets no note.
    assert!(
        !out.lines().any(|l| l.starts_with("heap_cmd_") && l.contains("has no debug symbols")),
        "{what}: a note\n{out}"
    );
    for wrong in ["my_malloc", "operator new[]", "0x"] {
        assert!(
            !out.lines().take(8).any(|l| l.contains(wrong)),
            "{what}: {wrong} on the first screen\n{out}"
        );
    }
    p
}

#[test]
fn names_sites_past_wrappers_in_three_builds() {
    let (nofp, fp, strip, dir) = builds();
    for backend in common::BACKENDS {
        check(nofp, backend, "-fomit-frame-pointer", None);
        check(fp, backend, "-fno-omit-frame-pointer", None);
        let p = check(strip, backend, "stripped with a debug file", Some(dir));
        // For go tool pprof: the stripped mapping is left unsymbolized (no [FN]) with its build
        // ID and file offset, so a pprof that finds the debug file symbolizes it. (Debian
        // bookworm's Go 1.19 pprof reads no build ID from these ELF files and ignores every
        // local file, the unstripped binary and libc included: "build-id mismatch (ID != )".)
        let raw = common::pprof(&p, &["-raw"]);
        let exe = raw
            .lines()
            .skip_while(|l| !l.starts_with("Mappings"))
            .find(|l| l.contains("/heap_cmd_strip "))
            .unwrap_or_else(|| panic!("stripped under {backend}: no mapping\n{raw}"));
        let xx = std::fs::read_dir(dir.join(".build-id")).unwrap().next().unwrap().unwrap().path();
        let rest = std::fs::read_dir(&xx).unwrap().next().unwrap().unwrap().file_name();
        let id = format!(
            "{}{}",
            xx.file_name().unwrap().to_string_lossy(),
            rest.to_string_lossy().trim_end_matches(".debug")
        );
        assert!(!exe.contains("[FN]") && exe.contains(&id), "stripped under {backend}: mapping {exe}");
        // Without the debug file: module-relative names, never run-time addresses.
        let bare = heap(&["--debug-dir", "/nonexistent", p.to_str().unwrap()]);
        let first = rows(&bare, "by inuse_space (total");
        assert!(first[0].0.starts_with("heap_cmd_strip+0x"), "stripped under {backend}: {bare}");
        // ... and a note that says so and how to get them (issue 38.7).
        assert!(
            bare.lines().nth(1).is_some_and(|l| l.starts_with("heap_cmd_strip has no debug symbols (")),
            "stripped under {backend}: no note\n{bare}"
        );
        assert!(bare.contains("no Debian package ships it") && bare.contains("--debug-dir DIR"), "{bare}");
        symbolized_for_go(&p, dir, backend);
    }
}

#[test]
fn growth_between_runs_of_one_binary() {
    let (_, _, strip, dir) = builds();
    for backend in common::BACKENDS {
        // One sample per 1 KiB on average: the stripped build without its debug file shows every
        // site under my_malloc's unnamed frame, so the planted growth is the difference of two
        // ~70 MiB totals. At 4096 that difference's standard deviation was ~0.8 MiB (the ±15%
        // bound is 1.6 sd: tcmalloc read 6.73 MiB once); at 1024 it is ~0.3 MiB (4 sd), with
        // ~46,000 live samples, under the live set's bound of 65,536.
        let run = |name: &str, env: &[(&str, &str)]| {
            let mut e = vec![("MALLOCSHIM_PROF_SAMPLE_BYTES", "1024")];
            e.extend_from_slice(env);
            common::profile_of(strip, None, backend, &e, &format!("growth-{name}-{backend}"))
        };
        let (a, b, g) = (run("a", &[]), run("b", &[]), run("grown", &[("HEAP_CHAINS_GROW", "1")]));
        let (a, b, g) = (a.to_str().unwrap(), b.to_str().unwrap(), g.to_str().unwrap());
        let same = heap(&["--debug-dir", "/nonexistent", "--top", "50", b, a]);
        for l in same.lines().skip_while(|l| !l.starts_with("growth by")).skip(2) {
            let f: Vec<&str> = l.split_whitespace().collect();
            // growth, base, profile: each "N U" (bytes with a unit) or "N B".
            let val = |i: usize| -> f64 {
                let (n, u) = (f[2 * i].parse::<f64>().unwrap_or(0.0), f[2 * i + 1]);
                n * match u {
                    "KiB" => 1024.0,
                    "MiB" => 1048576.0,
                    "GiB" => 1073741824.0,
                    _ => 1.0,
                }
            };
            let (d, b0, c0) = (val(0), val(1), val(2));
            assert!(
                b0 > 0.0 && c0 > 0.0,
                "two runs under {backend}: a site appears or vanishes: {l}\n{same}"
            );
            assert!(d.abs() <= 0.15 * b0.max(c0), "two runs under {backend}: false growth {l}\n{same}");
        }
        let grown = heap(&["--debug-dir", "/nonexistent", g, a]);
        let first = grown.lines().skip_while(|l| !l.starts_with("growth by")).nth(2).unwrap_or("");
        // An unnamed site reads `FILE+0xOFFSET < first named caller`.
        let site = first.split_whitespace().find(|w| w.contains("+0x")).unwrap_or("");
        // grow_site, named by offset in the stripped build: the first row, +8 MiB ±15%.
        assert!(
            site.starts_with("heap_cmd_strip+0x") && first.contains("MiB"),
            "planted growth under {backend}: {grown}"
        );
        let d: f64 = first.split_whitespace().next().unwrap().parse().unwrap();
        assert!((6.8..=9.2).contains(&d), "planted growth under {backend}: {d} MiB (8 ± 15%)\n{grown}");
        let named = heap(&["--debug-dir", "/nonexistent", "--debug-dir", dir.to_str().unwrap(), g, a]);
        let first = named.lines().skip_while(|l| !l.starts_with("growth by")).nth(2).unwrap_or("");
        assert!(first.ends_with(" grow_site"), "planted growth under {backend}, with symbols: {named}");
    }
}

#[test]
fn flame_graph_names_the_sites() {
    let p = common::profile_of(&builds().0, None, "glibc", &[MEAN], "flame");
    let svg = common::work_dir().join("heap_chains.svg");
    let _ = std::fs::remove_file(&svg);
    heap(&["--flame", svg.to_str().unwrap(), p.to_str().unwrap()]);
    let text = std::fs::read_to_string(&svg).expect("no SVG written");
    assert!(
        text.contains("<svg") && text.trim_end().ends_with("</svg>"),
        "not an SVG: {}",
        &text[..text.len().min(300)]
    );
    for site in ["leaf_alloc", "mid_b", "path_one", "path_two", "main"] {
        assert!(text.contains(site), "the flame graph does not name {site}");
    }
    assert!(!text.contains("mallocshim::"), "the shim's frames in the flame graph");
}

/// `go tool pprof ARGS PROFILE`: (stdout, stderr); fails when pprof cannot read the profile.
/// `binary_path`: PPROF_BINARY_PATH (else unset: pprof looks in $HOME/pprof/binaries).
fn go_pprof(profile: &Path, args: &[&str], binary_path: Option<&str>) -> (String, String) {
    let mut c = Command::new(common::require("go"));
    c.args(["tool", "pprof"]).args(args).arg(profile).env("HOME", common::work_dir());
    match binary_path {
        Some(b) => c.env("PPROF_BINARY_PATH", b),
        None => c.env_remove("PPROF_BINARY_PATH"),
    };
    let o = c.output().expect("run go tool pprof");
    assert!(o.status.success(), "go tool pprof {args:?} {}: {}", profile.display(), common::describe(&o));
    (common::stdout(&o), common::stderr(&o))
}

/// The function names of `go tool pprof -top` rows (a row's last field).
fn top_names(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

/// `--symbolized`: Go's pprof names the stripped build's sites from the copy, and none from the
/// profile itself; the copy's samples and mappings are the profile's.
fn symbolized_for_go(p: &Path, dir: &Path, backend: &str) {
    let chain = ["leaf_alloc", "mid_b", "mid_a", "path_one", "main"];
    let what = format!("--symbolized, stripped under {backend}");
    let out = p.with_file_name("symbolized.pb.gz");
    let _ = std::fs::remove_file(&out);
    let said = heap(&[
        "--debug-dir",
        dir.to_str().unwrap(),
        "--symbolized",
        out.to_str().unwrap(),
        p.to_str().unwrap(),
    ]);
    assert!(
        said.lines().any(|l| l.starts_with("symbolized profile (")
            && l.ends_with(&format!("written to {}", out.display()))),
        "{what}: no output line\n{said}"
    );
    let (raw_top, _) = go_pprof(p, &["-top", "-nodecount=50"], None);
    let raw_names = top_names(&raw_top);
    assert!(!raw_names.is_empty(), "{what}: no rows in go tool pprof -top of the profile\n{raw_top}");
    for n in chain {
        assert!(
            !raw_names.iter().any(|r| r == n),
            "{what}: Go's pprof names {n} without --symbolized\n{raw_top}"
        );
    }
    let (top, err) = go_pprof(&out, &["-top", "-nodecount=50"], None);
    let names = top_names(&top);
    for n in chain {
        assert!(names.iter().any(|r| r == n), "{what}: go tool pprof -top does not name {n}\n{top}{err}");
    }
    // With PPROF_BINARY_PATH leading to the stripped file and the debug file, Go's pprof prints
    // "Ignoring local file ...: build-id mismatch" (it reads no build ID) and names nothing in the
    // profile itself; the copy's names stand.
    let bp = format!("{}:{}", common::work_dir().display(), dir.join(".build-id").display());
    let (top_bp, err_bp) = go_pprof(&out, &["-top", "-nodecount=50"], Some(&bp));
    for n in chain {
        assert!(
            top_names(&top_bp).iter().any(|r| r == n),
            "{what}: PPROF_BINARY_PATH={bp}: no {n}\n{top_bp}{err_bp}"
        );
    }
    let (traces, err2) = go_pprof(&out, &["-traces"], None);
    for e in [&err, &err2] {
        assert!(!e.to_lowercase().contains("mismatch"), "{what}: go tool pprof: {e}");
    }
    let frames: Vec<&str> = traces.lines().filter_map(|l| l.split_whitespace().last()).collect();
    assert!(
        frames.windows(chain.len()).any(|w| w == chain),
        "{what}: no trace {chain:?} in go tool pprof -traces\n{traces}"
    );
    let (a, b) = (Profile::read(p).unwrap(), Profile::read(&out).unwrap());
    let col = a.sample_index("inuse_space").expect("inuse_space");
    let sum = |q: &Profile| q.sample.iter().map(|s| s.value[col]).sum::<i64>();
    assert!(sum(&a) > 0 && sum(&a) == sum(&b), "{what}: inuse_space {} before, {} after", sum(&a), sum(&b));
    assert_eq!(a.sample, b.sample, "{what}: samples changed");
    assert_eq!((&a.period, &a.period_type, a.comment.len()), (&b.period, &b.period_type, b.comment.len()));
    for (ma, mb) in a.mapping.iter().zip(&b.mapping) {
        let key = |m: &mallocshim_format::pprof::Mapping, q: &Profile| {
            (
                m.id,
                m.memory_start,
                m.memory_limit,
                m.file_offset,
                q.str(m.filename).to_string(),
                q.str(m.build_id).to_string(),
            )
        };
        assert_eq!(key(ma, &a), key(mb, &b), "{what}: mapping changed");
    }
    assert_eq!(a.mapping.len(), b.mapping.len());
    let exe = b
        .mapping
        .iter()
        .find(|m| b.str(m.filename).ends_with("/heap_cmd_strip"))
        .expect("no program mapping");
    assert!(exe.has_functions, "{what}: the program's mapping, every frame named, lacks has_functions");
}

#[test]
fn symbolized_errors_are_one_line() {
    let p = common::profile_of(&builds().0, None, "glibc", &[MEAN], "symbolized-error");
    let o = Command::new(common::cli_bin())
        .args(["heap", "--symbolized", "/nonexistent/dir/out.pb.gz"])
        .arg(&p)
        .output()
        .expect("run mallocshim heap");
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{}", common::describe(&o));
    assert!(
        err.lines().count() == 1
            && err.starts_with("mallocshim heap: cannot write /nonexistent/dir/out.pb.gz"),
        "{err}"
    );
}
