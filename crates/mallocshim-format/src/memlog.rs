//! The memory time series CSV (`MALLOCSHIM_MEMLOG=PATH`): a header line, then one line per
//! interval — `unix_ms,rss_bytes,vsz_bytes,backend_allocated_bytes,backend_resident_bytes,
//! backend_free_bytes,trims,released_bytes` — written by the shim's thread, and by the comparison
//! runner's /proc sampler (which leaves the backend and trim columns empty). Columns may be
//! appended after these, never reordered; readers ignore columns they do not know.

use std::io::Write;
use std::path::Path;

/// The columns, in order.
pub const COLUMNS: [&str; 8] = [
    "unix_ms",
    "rss_bytes",
    "vsz_bytes",
    "backend_allocated_bytes",
    "backend_resident_bytes",
    "backend_free_bytes",
    "trims",
    "released_bytes",
];

/// The header line, without its newline ([`COLUMNS`] joined by commas).
pub const HEADER: &str =
    "unix_ms,rss_bytes,vsz_bytes,backend_allocated_bytes,backend_resident_bytes,backend_free_bytes,trims,released_bytes";

/// One line. Byte figures in bytes; the backend's figures from its own statistics (as in the
/// dump's `memory`), the process's from /proc/<pid>/statm; `None` is an empty field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemRow {
    /// Start of the sample, ms since the epoch.
    pub unix_ms: u64,
    pub rss_bytes: u64,
    pub vsz_bytes: u64,
    pub backend_allocated_bytes: Option<u64>,
    pub backend_resident_bytes: Option<u64>,
    pub backend_free_bytes: Option<u64>,
    /// Trims run so far.
    pub trims: Option<u64>,
    /// Bytes released by trims so far (sum of RSS drops).
    pub released_bytes: Option<u64>,
}

impl MemRow {
    /// Writes the row as one CSV line with its newline.
    pub fn write_line(&self, out: &mut impl Write) -> std::io::Result<()> {
        struct O(Option<u64>);
        impl std::fmt::Display for O {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.0 {
                    Some(v) => write!(f, "{v}"),
                    None => Ok(()),
                }
            }
        }
        writeln!(
            out,
            "{},{},{},{},{},{},{},{}",
            self.unix_ms,
            self.rss_bytes,
            self.vsz_bytes,
            O(self.backend_allocated_bytes),
            O(self.backend_resident_bytes),
            O(self.backend_free_bytes),
            O(self.trims),
            O(self.released_bytes)
        )
    }
}

/// Parses a memlog's text: the header, then the rows. A last line without its newline (the
/// writer was killed mid-line) is ignored. Errors name the line (1-based).
pub fn parse(text: &str) -> Result<Vec<MemRow>, String> {
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    let mut lines = complete.lines();
    let head: Vec<&str> = match lines.next() {
        Some(h) => h.trim().split(',').collect(),
        None => return Err(format!("empty file, expected the memlog header {HEADER:?}")),
    };
    if head.len() < COLUMNS.len() || head[..COLUMNS.len()] != COLUMNS {
        return Err(format!(
            "not a memlog CSV: header is {:?}, expected {HEADER:?}",
            complete.lines().next().unwrap_or("")
        ));
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = || format!("line {}: expected {} integer fields, got {line:?}", i + 2, head.len());
        if f.len() != head.len() {
            return Err(bad());
        }
        let req = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let opt =
            |s: &str| if s.is_empty() { Ok(None) } else { s.parse::<u64>().map(Some).map_err(|_| bad()) };
        rows.push(MemRow {
            unix_ms: req(f[0])?,
            rss_bytes: req(f[1])?,
            vsz_bytes: req(f[2])?,
            backend_allocated_bytes: opt(f[3])?,
            backend_resident_bytes: opt(f[4])?,
            backend_free_bytes: opt(f[5])?,
            trims: opt(f[6])?,
            released_bytes: opt(f[7])?,
        });
    }
    Ok(rows)
}

/// Reads a memlog file ([`parse`]); errors start with the path.
pub fn read(path: &Path) -> Result<Vec<MemRow>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_the_columns() {
        assert_eq!(HEADER, COLUMNS.join(","));
    }

    #[test]
    fn round_trip() {
        let rows = vec![
            MemRow {
                unix_ms: 5,
                rss_bytes: 4096,
                vsz_bytes: 8192,
                backend_allocated_bytes: Some(1),
                backend_resident_bytes: Some(2),
                backend_free_bytes: Some(3),
                trims: Some(0),
                released_bytes: Some(0),
            },
            MemRow { unix_ms: 6, rss_bytes: 1, vsz_bytes: 2, ..MemRow::default() },
        ];
        let mut text = format!("{HEADER}\n").into_bytes();
        for r in &rows {
            r.write_line(&mut text).unwrap();
        }
        let text = String::from_utf8(text).unwrap();
        assert!(text.ends_with("\n6,1,2,,,,,\n"), "{text}");
        assert_eq!(parse(&text).unwrap(), rows);
        // A torn last line is dropped; a column appended by a newer writer is ignored.
        assert_eq!(parse(&format!("{text}7,1")).unwrap(), rows);
        assert_eq!(parse(&format!("{HEADER},extra\n1,2,3,,,,,,9\n")).unwrap().len(), 1);
    }

    #[test]
    fn errors() {
        assert!(parse("").unwrap_err().contains("empty file"));
        assert!(parse("a,b\n").unwrap_err().contains("not a memlog CSV"));
        assert!(parse(&format!("{HEADER}\n1,2\n")).unwrap_err().contains("line 2"));
        assert!(parse(&format!("{HEADER}\n1,x,3,,,,,\n")).unwrap_err().contains("line 2"));
    }
}
