//! The house rule on size (issue 20, "Smaller pieces"), checked from the source text of the
//! workspace (src/, crates/, benches/, tests/, examples/): no function over [`MAX_FN_LINES`]
//! lines and no file over [`MAX_FILE_LINES`] lines without a reason written down.
//!
//! A function's reason is a comment line containing `Long because:` in the comment and attribute
//! block right above its `fn` line; a file's reason is a `//!` line containing `Long because:`.
//! A function's length runs from its `fn` line to its closing brace, counted by matching braces
//! in the code with comments, strings and character literals blanked out (no parser: `syn` is not
//! a dependency). This test reads files only; it runs no program and must not grow a dependency.

use std::path::{Path, PathBuf};

/// A function over this many lines needs a `Long because:` line above it.
const MAX_FN_LINES: usize = 80;
/// A file over this many lines needs a `Long because:` line in its `//!` doc.
const MAX_FILE_LINES: usize = 400;
/// The marker of a written reason.
const REASON: &str = "Long because:";

/// The folders scanned, relative to the workspace root.
const ROOTS: [&str; 5] = ["src", "crates", "benches", "tests", "examples"];

/// Breaches in files other engineers were changing in the same session as this test (issue 20's
/// last pieces): the reason goes into the file when it is merged, and the entry leaves this list.
/// `(path, function or "" for the file)`. An entry that no longer breaches fails the test, so the
/// list cannot go stale.
const PENDING: [(&str, &str); 0] = [];

/// One function found in a file: its name, its `fn` line (0-based) and its length in lines.
#[derive(Debug, PartialEq)]
struct Func {
    name: String,
    line: usize,
    lines: usize,
    reason: bool,
}

/// The text with comments, string literals and character literals replaced by spaces (newlines
/// kept, so line numbers and columns hold). Lifetimes and labels (`'a`) are kept.
fn blank(text: &str) -> Vec<char> {
    let s: Vec<char> = text.chars().collect();
    let mut out = s.clone();
    let mut i = 0;
    let wipe = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in out.iter_mut().take(to.min(s.len())).skip(from) {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    while i < s.len() {
        let at = |k: usize| s.get(k).copied().unwrap_or('\0');
        let end = if s[i] == '/' && at(i + 1) == '/' {
            (i..s.len()).find(|&k| s[k] == '\n').unwrap_or(s.len())
        } else if s[i] == '/' && at(i + 1) == '*' {
            let (mut k, mut depth) = (i + 2, 1);
            while k < s.len() && depth > 0 {
                if s[k] == '/' && at(k + 1) == '*' {
                    depth += 1;
                    k += 1;
                } else if s[k] == '*' && at(k + 1) == '/' {
                    depth -= 1;
                    k += 1;
                }
                k += 1;
            }
            k
        } else if s[i] == 'r' && (at(i + 1) == '"' || at(i + 1) == '#') && !ident(at(i.wrapping_sub(1))) {
            let hashes = (i + 1..s.len()).take_while(|&k| s[k] == '#').count();
            if at(i + 1 + hashes) != '"' {
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let body = i + 2 + hashes;
            (body..s.len()).find(|&k| s[k..].starts_with(&close)).map_or(s.len(), |k| k + close.len())
        } else if s[i] == '"' {
            let mut k = i + 1;
            while k < s.len() && s[k] != '"' {
                k += if s[k] == '\\' { 2 } else { 1 };
            }
            k + 1
        } else if s[i] == '\'' && at(i + 1) == '\\' {
            (i + 2..s.len()).find(|&k| s[k] == '\'').map_or(s.len(), |k| k + 1)
        } else if s[i] == '\'' && at(i + 2) == '\'' {
            i + 3
        } else {
            i += 1;
            continue;
        };
        wipe(&mut out, i, end);
        i = end;
    }
    out
}

fn ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every function with a body in `text`, with its length and whether a reason is written above.
fn functions(text: &str) -> Vec<Func> {
    let code = blank(text);
    let raw: Vec<&str> = text.lines().collect();
    let line_of = |pos: usize| code[..pos].iter().filter(|&&c| c == '\n').count();
    let mut found = Vec::new();
    let mut i = 0;
    while i + 2 < code.len() {
        let is_fn = code[i] == 'f'
            && code[i + 1] == 'n'
            && code[i + 2].is_whitespace()
            && (i == 0 || !ident(code[i - 1]));
        if !is_fn {
            i += 1;
            continue;
        }
        let mut k = i + 2;
        while k < code.len() && code[k].is_whitespace() {
            k += 1;
        }
        let name: String = code[k..].iter().take_while(|&&c| ident(c)).collect();
        if name.is_empty() {
            i += 2;
            continue;
        }
        // The body opens at the first `{` outside parentheses and brackets; a `;` first means
        // a declaration (a trait's or an extern block's).
        let mut depth = 0i32;
        let mut open = None;
        while k < code.len() {
            match code[k] {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => break,
                '{' if depth == 0 => {
                    open = Some(k);
                    break;
                }
                _ => {}
            }
            k += 1;
        }
        let Some(open) = open else {
            i = k;
            continue;
        };
        let mut braces = 0i32;
        let mut close = open;
        for (j, &c) in code.iter().enumerate().skip(open) {
            braces += match c {
                '{' => 1,
                '}' => -1,
                _ => 0,
            };
            if braces == 0 {
                close = j;
                break;
            }
        }
        let line = line_of(i);
        found.push(Func { name, line, lines: line_of(close) - line + 1, reason: reason_above(&raw, line) });
        i += 2;
    }
    found
}

/// Whether the comment and attribute block right above line `line` (and the `fn` line itself)
/// holds a `Long because:` line.
fn reason_above(raw: &[&str], line: usize) -> bool {
    if raw.get(line).is_some_and(|l| l.contains(REASON)) {
        return true;
    }
    let mut k = line;
    while k > 0 {
        k -= 1;
        let l = raw[k].trim_start();
        let part_of_block = l.starts_with("//")
            || l.starts_with("#[")
            || l.starts_with('*')
            || l.starts_with("/*")
            || l.ends_with(")]");
        if !part_of_block {
            return false;
        }
        if l.contains(REASON) {
            return true;
        }
    }
    false
}

/// Whether a file over the limit says why in its `//!` doc.
fn file_reason(text: &str) -> bool {
    text.lines()
        .take_while(|l| l.trim_start().starts_with("//!") || l.trim().is_empty())
        .any(|l| l.contains(REASON))
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !p.ends_with("target") {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every breach of the rule in the workspace as (path, function or "", line of text).
fn breaches() -> Vec<(String, String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for r in ROOTS {
        rs_files(&root.join(r), &mut files);
    }
    assert!(files.len() > 100, "the scan found only {} files under {ROOTS:?}", files.len());
    files.sort();
    let mut out = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(root).unwrap().display();
        let n = text.lines().count();
        if n > MAX_FILE_LINES && !file_reason(&text) {
            out.push((rel.to_string(), String::new(), format!("{rel}: {n} lines, no `//! {REASON}` line")));
        }
        for func in functions(&text) {
            if func.lines > MAX_FN_LINES && !func.reason {
                let line = format!("{rel}:{}: fn {} is {} lines", func.line + 1, func.name, func.lines);
                out.push((rel.to_string(), func.name, line));
            }
        }
    }
    out
}

#[test]
fn no_long_function_or_file_without_a_reason() {
    let all = breaches();
    let pending = |p: &str, f: &str| PENDING.iter().any(|&(pp, pf)| pp == p && pf == f);
    let b: Vec<&str> = all.iter().filter(|(p, f, _)| !pending(p, f)).map(|x| x.2.as_str()).collect();
    let stale: Vec<_> = PENDING.iter().filter(|&&(p, f)| !all.iter().any(|x| x.0 == p && x.1 == f)).collect();
    assert!(stale.is_empty(), "PENDING entries that no longer breach (take them out): {stale:?}");
    assert!(
        b.is_empty(),
        "{} function(s)/file(s) over {MAX_FN_LINES}/{MAX_FILE_LINES} lines without a \
         `{REASON}` line above them (split them, or write why):\n{}",
        b.len(),
        b.join("\n")
    );
}

/// A planted function of `n` body lines, with `above` written over it.
fn planted(above: &str, n: usize) -> String {
    let body: String = (0..n).map(|k| format!("    let _x{k} = \"{{ }}{{\"; // }} {{\n")).collect();
    format!("//! doc\n\n{above}fn planted(a: [u8; 4]) -> u8 {{\n{body}    a[0]\n}}\n\nfn after() {{}}\n")
}

#[test]
fn the_scanner_catches_a_planted_long_function() {
    let long = functions(&planted("/// Docs.\n#[inline]\n", 90));
    assert_eq!(long.len(), 2, "{long:?}");
    assert_eq!((long[0].name.as_str(), long[0].lines, long[0].reason), ("planted", 93, false));
    assert_eq!((long[1].name.as_str(), long[1].line, long[1].lines), ("after", 98, 1));
    let excused = functions(&planted("// Long because: one table.\n#[inline]\n", 90));
    assert!(excused[0].reason);
    let short = functions(&planted("", 10));
    assert_eq!(short[0].lines, 13);
    // a declaration has no body; a fn pointer type is no function; a lifetime is no char literal
    let decl = functions("trait T { fn a(&self); fn b<'a>(x: &'a u8) -> fn(u8) { let c = '{'; } }");
    assert_eq!(decl.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["b"]);
    let raw = functions("fn r() { let s = r#\"}\"#; let t = b'}'; }\nfn s() {}\n");
    assert_eq!((raw.len(), raw[0].lines, raw[1].line), (2, 1, 1));
}

#[test]
fn the_scanner_reads_a_file_reason() {
    assert!(file_reason("//! A table.\n//! Long because: one row per option.\nfn a() {}\n"));
    assert!(!file_reason("//! A table.\nfn a() {}\n// Long because: not here\n"));
}
