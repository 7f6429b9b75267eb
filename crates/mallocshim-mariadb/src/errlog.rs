//! What mariadbd's error log tells (its stdout and stderr land there too): crash reports, the
//! `[ERROR]` lines, a failed preload, the shim's own lines, its exit summary and its verbose trim
//! lines.

use std::collections::BTreeMap;
use std::path::Path;

/// The count fields of the shim's summary line, in its order: the exported entry points.
pub const SHIM_COUNTS: [&str; mallocshim_format::classes::ENTRIES] = mallocshim_format::classes::ENTRY_NAMES;

/// Text of a crash: mariadbd's own signal handler, InnoDB assertions, and the fatal messages of
/// glibc malloc, jemalloc, tcmalloc and a Rust panic.
const CRASH: [&str; 18] = [
    "got exception",
    "Attempting backtrace",
    "This could be because you hit a bug",
    "Assertion failure",
    "InnoDB: Failing assertion",
    "double free or corruption",
    "free(): invalid",
    "malloc(): ",
    "corrupted size vs",
    "munmap_chunk()",
    "realloc(): invalid",
    "malloc_consolidate()",
    "<jemalloc>:",
    "Attempt to free invalid pointer",
    "panicked at",
    "Fatal glibc error",
    "stack smashing detected",
    "Segmentation fault",
];

/// `a` followed (anywhere later on the line) by `b`.
fn then(l: &str, a: &str, b: &str) -> bool {
    l.find(a).is_some_and(|i| l[i + a.len()..].contains(b))
}

fn is_crash_line(l: &str) -> bool {
    if let Some(rest) = l.strip_prefix("mallocshim:") {
        // the shim's option table and summary mention malloc; only its fatal words count
        return ["panicked", "fatal", "FATAL", "aborting", "aborted"].iter().any(|w| rest.contains(w));
    }
    CRASH.iter().any(|p| l.contains(p))
        || then(l, "Assertion ", "failed")
        || then(l, "tcmalloc: large alloc", "failed")
        || l.match_indices("got signal ")
            .any(|(i, m)| l[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
}

/// An error log, read once.
#[derive(Clone, Debug, Default)]
pub struct ErrorLog {
    pub text: String,
}

impl ErrorLog {
    /// Reads the log (empty when unreadable).
    pub fn read(path: &Path) -> ErrorLog {
        ErrorLog { text: std::fs::read_to_string(path).unwrap_or_default() }
    }

    /// The lines reporting a crash (empty: none).
    pub fn crash_lines(&self) -> Vec<&str> {
        self.text.lines().filter(|l| is_crash_line(l)).collect()
    }

    /// The `[ERROR]` lines (not all are crashes).
    pub fn error_lines(&self) -> Vec<&str> {
        self.text.lines().filter(|l| l.contains("[ERROR]")).collect()
    }

    /// ld.so said it could not preload a library.
    pub fn preload_failed(&self) -> bool {
        self.text.contains("cannot be preloaded")
    }

    /// The lines the shim wrote (prefixed `mallocshim:`).
    pub fn shim_lines(&self) -> Vec<&str> {
        self.text.lines().filter(|l| l.starts_with("mallocshim:")).collect()
    }

    /// The last `mallocshim: summary ...` line.
    pub fn summary(&self) -> Option<Summary> {
        self.text.lines().rev().find(|l| l.starts_with("mallocshim: summary ")).map(Summary::parse)
    }

    /// The verbose trim lines (`mallocshim: trim backend=...`) as key=value maps.
    pub fn trim_lines(&self) -> Vec<BTreeMap<String, String>> {
        self.text.lines().filter(|l| l.starts_with("mallocshim: trim backend=")).map(key_values).collect()
    }

    /// How many `mallocshim: trim skipped ` lines.
    pub fn trim_skipped_lines(&self) -> usize {
        self.text.lines().filter(|l| l.starts_with("mallocshim: trim skipped ")).count()
    }
}

fn key_values(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace().filter_map(|w| w.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
}

/// The shim's exit summary line: `mallocshim: summary backend=B malloc=N ... allocated_bytes=N resident_bytes=N`.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub line: String,
    pub fields: BTreeMap<String, String>,
}

impl Summary {
    pub fn parse(line: &str) -> Summary {
        Summary { line: line.to_string(), fields: key_values(line) }
    }
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }
    pub fn num(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }
    pub fn backend(&self) -> Option<&str> {
        self.get("backend")
    }
    /// The sum of the call counts ([`SHIM_COUNTS`]).
    pub fn total_calls(&self) -> u64 {
        SHIM_COUNTS.iter().filter_map(|k| self.num(k)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_patterns() {
        for l in [
            "251123 19:00:00 [ERROR] mariadbd got signal 11 ;",
            "malloc(): unaligned tcache chunk detected",
            "InnoDB: Assertion failure in file x.cc",
            "Assertion `x' failed.",
            "tcmalloc: large alloc 123 bytes == (nil) failed",
            "mallocshim: panicked in the worker",
            "<jemalloc>: Error in free(): invalid pointer",
        ] {
            assert!(is_crash_line(l), "{l}");
        }
        for l in [
            "mallocshim: backend=glibc malloc=123",
            "mallocshim: summary backend=jemalloc malloc=5 free=3",
            "2025-11-23 [Note] got signal handler",
            "[ERROR] Incorrect definition of table mysql.event",
        ] {
            assert!(!is_crash_line(l), "{l}");
        }
    }

    #[test]
    fn summary_line() {
        let log = ErrorLog {
            text: "x\nmallocshim: summary backend=tcmalloc malloc=10 free=7 calloc=2 allocated_bytes=99\n"
                .into(),
        };
        let s = log.summary().unwrap();
        assert_eq!(s.backend(), Some("tcmalloc"));
        assert_eq!(s.num("malloc"), Some(10));
        assert_eq!(s.total_calls(), 19);
        assert_eq!(s.num("allocated_bytes"), Some(99));
    }
}
