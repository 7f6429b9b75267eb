//! Heap-profile stacks unwound from the CFI, black-box: `tests/c/heap_chains.cc` (planted sites
//! behind `leaf_alloc <- mid_b <- mid_a <- path_one | path_two <- main`, with a library
//! dlopen'd and dlclose'd 50 times in between) built `-O2 -fomit-frame-pointer` and
//! `-O2 -fno-omit-frame-pointer`, run under every backend at a mean of 64 KiB with the
//! profiling settings of the matrix (with `MALLOCSHIM_PROFILE=off`: runs, no sample); `go tool pprof` (missing = failure) reads the profile.
//! - chains: a trace whose frames read leaf_alloc, mid_b, mid_a, path_one, main in that order
//!   (depth 5), and one with path_two;
//! - split: path_one holds 75% ±10 of what the two paths hold by inuse_space (cum), path_two
//!   25% ±10; leaf_alloc, not operator new, holds the memory flat;
//! - symbols after the fact: the program's mapping (every frame resolved) has `has_functions`,
//!   libc's (unexported frames unresolved) has not, so pprof re-symbolizes it.
//! - sampler (heap_chains built `-DTINY`): 60,000 ×
//!   malloc(1) kept, every byte sampled (`MALLOCSHIM_PROF_SAMPLE_BYTES=1`), read 60,000 B ±5%
//!   (the gap was max(1, floor(Exp)) and read 78,164 B).
//!
//! - a module replaced at the same address (`tests/c/heap_cfi_swap.c`): libA learnt by the
//!   unwinder (20,000 sampled pairs through it), dlclose'd, libB mapped at the same place with
//!   other frame sizes: the stacks through libB read b_inner, b_outer, main (a rule or a module
//!   identity kept from libA would read libB's frames at libA's offsets and lose the callers).
//!
//! On the code before this test (frame pointers only), the `-fomit-frame-pointer` build has
//! every stack one frame deep: the chain and the split fail.

mod common;

use std::path::Path;

/// cum value in bytes of `name` in a `-top -cum -unit=B` listing.
fn cum(top: &str, name: &str) -> Option<f64> {
    top.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 6 && f[5..].join(" ") == name)
            .then(|| f[3].trim_end_matches('B').parse().unwrap_or(f64::NAN))
    })
}

/// True when one trace of `-traces` lists `chain` as consecutive frames, innermost first.
fn has_chain(traces: &str, chain: &[&str]) -> bool {
    traces.split("-----------+").any(|t| {
        let frames: Vec<&str> =
            t.lines().map(|l| l.split_whitespace().last().unwrap_or("")).filter(|s| !s.is_empty()).collect();
        frames.windows(chain.len()).any(|w| w == chain)
    })
}

fn check(bin: &Path, lib: &Path, backend: &str, setting: &str, env: &[(&str, &str)], what: &str) {
    let what = format!("heap_chains {what} under {backend}, {setting}");
    let mut e = vec![("MALLOCSHIM_PROF_SAMPLE_BYTES", "65536")];
    e.extend_from_slice(env);
    let name = what.replace([' ', ',', '=', '-'], "_");
    let p = common::profile_of(bin, Some(lib), backend, &e, &name);
    let traces = common::pprof(&p, &["-traces", "-sample_index=inuse_space"]);
    if env.contains(&("MALLOCSHIM_PROFILE", "off")) {
        // No heap profile without profiling: the run and the empty profile are the check.
        assert!(traces.contains("0 samples taken"), "{what}: samples without profiling\n{traces}");
        return;
    }
    for path in ["path_one", "path_two"] {
        let chain = ["leaf_alloc", "mid_b", "mid_a", path, "main"];
        assert!(has_chain(&traces, &chain), "{what}: no trace {chain:?}\n{traces}");
    }
    let top = common::pprof(&p, &["-top", "-cum", "-unit=B", "-sample_index=inuse_space"]);
    let one = cum(&top, "path_one").unwrap_or_else(|| panic!("{what}: no path_one\n{top}"));
    let two = cum(&top, "path_two").unwrap_or_else(|| panic!("{what}: no path_two\n{top}"));
    let share = 100.0 * one / (one + two);
    assert!(
        (65.0..=85.0).contains(&share),
        "{what}: path_one holds {share:.1}% of the two paths (75 ± 10)\n{top}"
    );
    // Symbols after the fact: a mapping is marked symbolized only when every frame in it
    // resolved (the program's do; libc's `[libc.so.6]` frames do not), so pprof re-symbolizes.
    let raw = common::pprof(&p, &["-raw"]);
    let maps: Vec<&str> = raw.lines().skip_while(|l| !l.starts_with("Mappings")).collect();
    let exe = bin.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        maps.iter().any(|l| l.contains(&exe) && l.contains("[FN]")),
        "{what}: the program's mapping is not marked symbolized\n{}",
        maps.join("\n")
    );
    assert!(
        maps.iter().any(|l| l.contains("/libc.so.6") && !l.contains("[FN]")),
        "{what}: libc's mapping marked symbolized with unresolved frames\n{}",
        maps.join("\n")
    );
    for wrong in ["_Znam", "operator new[]", "malloc"] {
        assert!(
            !top.lines().any(|l| l.split_whitespace().skip(5).collect::<Vec<_>>().join(" ") == wrong
                && !l.trim_start().starts_with('0')),
            "{what}: {wrong} holds memory flat\n{top}"
        );
    }
}

#[test]
fn chains_without_and_with_frame_pointers() {
    let lib = common::cc("ctor_lib.c", "libheap_cfi_ctor.so", &["-shared", "-fPIC"]);
    let nofp = common::cc("heap_chains.cc", "heap_chains_nofp", &["-O2", "-fomit-frame-pointer"]);
    let fp = common::cc("heap_chains.cc", "heap_chains_fp", &["-O2", "-fno-omit-frame-pointer"]);
    for (backend, setting, env) in common::matrix() {
        check(&nofp, &lib, backend, setting, env, "-fomit-frame-pointer");
        check(&fp, &lib, backend, setting, env, "-fno-omit-frame-pointer");
    }
}

#[test]
fn one_byte_blocks_weigh_what_they_hold() {
    let bin = common::cc("heap_chains.cc", "heap_chains_tiny", &["-O2", "-DTINY"]);
    for backend in common::BACKENDS {
        let what = format!("60,000 x malloc(1) under {backend}");
        let p = common::profile_of(
            &bin,
            None,
            backend,
            &[("MALLOCSHIM_PROF_SAMPLE_BYTES", "1")],
            &format!("tiny-{backend}"),
        );
        let top = common::pprof(&p, &["-top", "-unit=B", "-sample_index=inuse_space"]);
        let total: f64 = top
            .lines()
            .find(|l| l.contains("% of ") && l.contains(" total"))
            .and_then(|l| l.split(" of ").nth(1))
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.trim_end_matches('B').parse().ok())
            .unwrap_or_else(|| panic!("{what}: no total in\n{top}"));
        let tiny =
            cum(&common::pprof(&p, &["-top", "-cum", "-unit=B", "-sample_index=inuse_space"]), "tiny_site")
                .unwrap_or_else(|| panic!("{what}: no tiny_site\n{top}"));
        assert!(
            (57_000.0..=63_000.0).contains(&tiny),
            "{what}: tiny_site reads {tiny} B (60,000 ± 5%); total {total}\n{top}"
        );
    }
}

#[test]
fn module_replaced_at_the_same_address() {
    let flags = ["-shared", "-fPIC", "-O2", "-fomit-frame-pointer"];
    let a = common::cc("heap_cfi_swap_lib.c", "libheap_cfi_swap_a.so", &flags);
    let b_flags = [&flags[..], &["-DSIDE_B"]].concat();
    common::cc("heap_cfi_swap_lib.c", "libheap_cfi_swap_b.so", &b_flags);
    let bin = common::cc("heap_cfi_swap.c", "heap_cfi_swap", &["-O2", "-fomit-frame-pointer"]);
    for (backend, setting, env) in common::matrix() {
        let what = format!("heap_cfi_swap under {backend}, {setting}");
        let mut e = vec![("MALLOCSHIM_PROF_SAMPLE_BYTES", "4096")];
        e.extend_from_slice(env);
        let p = common::profile_of(&bin, Some(&a), backend, &e, &what.replace([' ', ',', '='], "_"));
        let traces = common::pprof(&p, &["-traces", "-sample_index=inuse_space"]);
        if env.contains(&("MALLOCSHIM_PROFILE", "off")) {
            assert!(traces.contains("0 samples taken"), "{what}: samples without profiling\n{traces}");
            continue;
        }
        assert!(
            has_chain(&traces, &["b_inner", "b_outer", "main"]),
            "{what}: no trace b_inner, b_outer, main\n{traces}"
        );
        let top = common::pprof(&p, &["-top", "-cum", "-unit=B", "-sample_index=inuse_space"]);
        let main = cum(&top, "main").unwrap_or_else(|| panic!("{what}: no main\n{top}"));
        let outer = cum(&top, "b_outer").unwrap_or_else(|| panic!("{what}: no b_outer\n{top}"));
        assert!(outer >= 0.95 * main, "{what}: b_outer holds {outer} B of main's {main} B\n{top}");
    }
}

/// True when one trace of `-traces` ends with `chain` (innermost first, so its last frame is the
/// trace's outermost).
fn ends_with_chain(traces: &str, chain: &[&str]) -> bool {
    traces.split("-----------+").any(|t| {
        let frames: Vec<&str> =
            t.lines().map(|l| l.split_whitespace().last().unwrap_or("")).filter(|s| !s.is_empty()).collect();
        frames.ends_with(chain)
    })
}

#[test]
fn a_thread_stack_ends_at_its_start_routine() {
    let bin =
        common::cc("heap_thread_stack.c", "heap_thread_stack", &["-O2", "-fomit-frame-pointer", "-pthread"]);
    for (backend, setting, env) in common::matrix() {
        let what = format!("heap_thread_stack under {backend}, {setting}");
        let mut e = vec![("MALLOCSHIM_PROF_SAMPLE_BYTES", "65536")];
        e.extend_from_slice(env);
        let p = common::profile_of(&bin, None, backend, &e, &what.replace([' ', ',', '='], "_"));
        let traces = common::pprof(&p, &["-traces", "-sample_index=inuse_space"]);
        if env.contains(&("MALLOCSHIM_PROFILE", "off")) {
            assert!(traces.contains("0 samples taken"), "{what}: samples without profiling\n{traces}");
            continue;
        }
        // The start routine is the outermost frame: neither the shim's pthread_create
        // trampoline nor glibc's start_thread/clone3 above it (they were unwound on every
        // sample before), and it is kept.
        assert!(
            ends_with_chain(&traces, &["t_leaf", "t_mid", "thread_main"]),
            "{what}: no trace ending t_leaf, t_mid, thread_main\n{traces}"
        );
        let above = |l: &str| {
            let f = l.split_whitespace().last().unwrap_or("");
            ["start_thread", "clone3", "clone"].contains(&f) || f.starts_with("mallocshim::")
        };
        assert!(!traces.lines().any(above), "{what}: frames above the start routine\n{traces}");
        // The main thread's stack still reaches main.
        assert!(has_chain(&traces, &["m_leaf", "main"]), "{what}: no trace m_leaf, main\n{traces}");
    }
}
