//! The shim's layers, checked from its source text (docs/design.md, "Layout"): every
//! `crate::…` path and `use super::…` import in src/**/*.rs (comments left out) is an arrow from
//! the file's module to the module it names. The floors, bottom up: `base` (the leaves),
//! `backend`, `hot` (the hot path and its start-up), `cold` (the shim's thread and what it runs),
//! `boundary` (the exported C symbols), and the crate root (lib.rs), which wires them.
//!
//! Fails when a hot-path module imports a cold-path one or a leaf imports anything above it
//! (bar the arrows listed in [`ALLOWED_UP`]), when the module graph has a cycle other than the
//! two inherent knots of [`KNOTS`], or when more than [`MAX_UP`] arrows run back up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors, bottom up; a module's floor is its first path component (lib.rs: the root).
const FLOORS: [&str; 6] = ["base", "backend", "hot", "cold", "boundary", ""];

/// The arrows allowed to run back up, each with its reason. Every other upward arrow fails.
const ALLOWED_UP: [(&str, &str, &str); 2] = [
    ("hot::init", "boundary::signals", "start-up knot: init installs the dump signal's handler"),
    ("hot::init", "boundary::cxx", "start-up knot: init resolves libstdc++'s operators"),
];

/// At most this many arrows run back up (issue 20).
const MAX_UP: usize = 8;

/// The two inherent knots (lib.rs's crate doc). Every cycle of the module graph must lie inside
/// their union (they share `hot::record`, which reaches the sampler state, so the drawing shows
/// them as one strongly connected set).
const KNOTS: [(&str, &[&str]); 2] = [
    (
        "lazy start-up with the bootstrap tables",
        &[
            "hot::init",
            "hot::bootstrap",
            "hot::route",
            "hot::record",
            // the traced tables' functions (issue 24), which wrap `record`'s as `route` names both
            "hot::tracebuf",
            "hot::c_contract",
            "hot::config",
            "boundary::signals",
            // the load-time handler, taken over by `signals` when init installs its own; it reads
            // the signal's name with `config`'s parser
            "boundary::sigearly",
            "boundary::cxx",
            "hot::mailbox",
            "hot::real",
            // a forked child's entry table (issue 21): route's switches settle it first
            "hot::postfork",
        ],
    ),
    (
        "TLS -> slot -> sampler state (and the sampler's stack walk: frame pointers through the \
         shim, the CFI from .eh_frame above it, frame pointers again where a module has none)",
        &[
            "hot::tls",
            "hot::slots",
            "hot::heapprof",
            "hot::heapprof::unwind",
            "hot::heapprof::cfi",
            "hot::heapprof::ehframe",
        ],
    ),
];

fn floor(m: &str) -> usize {
    let first = m.split("::").next().unwrap_or("");
    FLOORS.iter().position(|f| *f == first).unwrap_or_else(|| panic!("module {m:?} is on no floor"))
}

/// Module path of a source file: src/lib.rs -> "", src/a/mod.rs -> "a", src/a/b.rs -> "a::b".
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts.join("::")
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without comments (`//` to end of line, outside string literals).
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut in_str = false;
        let b = line.as_bytes();
        let mut end = b.len();
        for i in 0..b.len() {
            match b[i] {
                b'"' if i == 0 || b[i - 1] != b'\\' => in_str = !in_str,
                b'/' if !in_str && b.get(i + 1) == Some(&b'/') => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        out.push_str(&line[..end]);
        out.push('\n');
    }
    out
}

/// Paths written after `prefix` (`crate::` or `super::`), groups `{a, b::c}` expanded one level.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let ident = |s: &str| -> String {
            let mut p = String::new();
            let mut t = s;
            loop {
                let n = t.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(t.len());
                if n == 0 {
                    break;
                }
                if !p.is_empty() {
                    p.push_str("::");
                }
                p.push_str(&t[..n]);
                t = &t[n..];
                if !t.starts_with("::") || t[2..].starts_with('{') {
                    break;
                }
                t = &t[2..];
            }
            p
        };
        let head = ident(rest);
        let after = &rest[head.len()..];
        let group = if head.is_empty() { after.strip_prefix('{') } else { after.strip_prefix("::{") };
        match group {
            Some(g) => {
                let g = &g[..g.find('}').unwrap_or(g.len())];
                for item in g.split(',') {
                    let item = ident(item.trim());
                    if !item.is_empty() && item != "self" {
                        out.push(if head.is_empty() { item } else { format!("{head}::{item}") });
                    } else if item == "self" {
                        out.push(head.clone());
                    }
                }
            }
            None => out.push(head),
        }
    }
    out
}

/// The import graph of src/: module -> modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|m| modules.contains(m))
    };
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let from = module_of(&src, f);
        let text = code(&std::fs::read_to_string(f).unwrap());
        let parent = match from.rsplit_once("::") {
            Some((p, _)) if !f.ends_with("mod.rs") => p.to_string(),
            _ if f.ends_with("mod.rs") => {
                from.rsplit_once("::").map(|(p, _)| p.to_string()).unwrap_or_default()
            }
            _ => String::new(),
        };
        let mut targets: Vec<String> = paths_after(&text, "crate::");
        for p in paths_after(&text, "super::") {
            targets.push(if parent.is_empty() { p } else { format!("{parent}::{p}") });
        }
        let set = g.entry(from.clone()).or_default();
        for t in targets {
            if let Some(m) = resolve(&t) {
                // A module naming itself or its own parent's items through the parent is not an
                // arrow between rooms.
                if m != from && !from.starts_with(&format!("{m}::")) && !m.is_empty() {
                    set.insert(m);
                }
            }
        }
    }
    g
}

/// Arrows running back up: from a lower floor to a higher one.
fn up_arrows(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let mut up = Vec::new();
    for (from, tos) in g {
        for to in tos {
            if floor(to) > floor(from) {
                up.push((from.clone(), to.clone()));
            }
        }
    }
    up
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct St<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        idx: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut St<'a>, v: &'a str) {
        let n = s.idx.len();
        s.idx.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.idx.contains_key(w) {
                visit(s, w);
                let l = s.low[w].min(s.low[v]);
                s.low.insert(v, l);
            } else if s.on.contains(w) {
                let l = s.idx[w].min(s.low[v]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.idx[v] {
            let mut comp = BTreeSet::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s =
        St { g, idx: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], on: BTreeSet::new(), out: vec![] };
    for v in g.keys() {
        if !s.idx.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn drawing(g: &BTreeMap<String, BTreeSet<String>>) -> String {
    g.iter()
        .map(|(f, t)| format!("  {f:<24} -> {}\n", t.iter().cloned().collect::<Vec<_>>().join(", ")))
        .collect()
}

#[test]
fn hot_path_never_imports_cold_path_and_leaves_import_nothing_above() {
    let g = graph();
    let allowed = |f: &str, t: &str| ALLOWED_UP.iter().any(|(a, b, _)| *a == f && *b == t);
    let mut bad = Vec::new();
    for (from, tos) in &g {
        for to in tos {
            let hot_to_cold = floor(from) == floor("hot") && floor(to) >= floor("cold");
            let leaf_up = floor(from) == floor("base") && floor(to) > floor("base");
            if (hot_to_cold || leaf_up) && !allowed(from, to) {
                bad.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "arrows the layers forbid:\n  {}\nimport graph:\n{}",
        bad.join("\n  "),
        drawing(&g)
    );
}

#[test]
fn no_cycle_beyond_the_two_knots_and_few_arrows_up() {
    let g = graph();
    for comp in cycles(&g) {
        let inside = comp.iter().all(|m| KNOTS.iter().any(|(_, k)| k.contains(&m.as_str())));
        assert!(
            inside,
            "a cycle outside the declared knots: {comp:?}\nknots: {KNOTS:?}\nimport graph:\n{}",
            drawing(&g)
        );
    }
    let up = up_arrows(&g);
    assert!(up.len() <= MAX_UP, "{} arrows run back up (at most {MAX_UP}): {up:?}", up.len());
    for (f, t) in &up {
        assert!(
            ALLOWED_UP.iter().any(|(a, b, _)| a == f && b == t),
            "an arrow running back up that is not declared in ALLOWED_UP: {f} -> {t}"
        );
    }
}

#[test]
fn the_graph_is_read() {
    // A parser that found nothing would make the two tests above pass on any tree.
    let g = graph();
    let route = &g["hot::route"];
    assert!(route.contains("backend") && route.contains("hot::record"), "hot::route's arrows: {route:?}");
    assert!(g["cold::dump"].contains("cold::report"), "cold::dump's arrows: {:?}", g["cold::dump"]);
    assert!(g.len() > 40, "only {} modules found", g.len());
}
