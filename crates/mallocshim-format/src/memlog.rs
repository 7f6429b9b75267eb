//! The memory time series CSV (`MALLOCSHIM_MEMLOG=PATH`): a header line, then one line per
//! interval — `unix_ms,rss_bytes,vsz_bytes,backend_allocated_bytes,backend_resident_bytes,
//! backend_free_bytes,trims,released_bytes`, then the RSS account (`rss_anon_bytes,rss_file_bytes,
//! rss_shmem_bytes,live_bytes,allocator_free_bytes,allocator_metadata_bytes,
//! allocator_resident_bytes,non_heap_bytes`; see docs/memory-account.md) and the trims per reason
//! (`trims_periodic,trims_ceiling,trims_pressure,trims_api`) — written by the shim's thread, and by
//! the comparison runner's /proc sampler (which leaves the backend, account and trim columns
//! empty). Columns may be appended after these, never reordered; readers need the first
//! [`REQUIRED`] and take the others by name when present (files of older shims lack them).

use std::io::Write;
use std::path::Path;

/// The columns, in order.
pub const COLUMNS: [&str; 20] = [
    "unix_ms",
    "rss_bytes",
    "vsz_bytes",
    "backend_allocated_bytes",
    "backend_resident_bytes",
    "backend_free_bytes",
    "trims",
    "released_bytes",
    "rss_anon_bytes",
    "rss_file_bytes",
    "rss_shmem_bytes",
    "live_bytes",
    "allocator_free_bytes",
    "allocator_metadata_bytes",
    "allocator_resident_bytes",
    "non_heap_bytes",
    "trims_periodic",
    "trims_ceiling",
    "trims_pressure",
    "trims_api",
];

/// How many leading columns every memlog has (the first memlog format).
pub const REQUIRED: usize = 8;

/// The header line, without its newline ([`COLUMNS`] joined by commas).
pub const HEADER: &str = "unix_ms,rss_bytes,vsz_bytes,backend_allocated_bytes,backend_resident_bytes,backend_free_bytes,trims,released_bytes,\
rss_anon_bytes,rss_file_bytes,rss_shmem_bytes,live_bytes,allocator_free_bytes,allocator_metadata_bytes,allocator_resident_bytes,non_heap_bytes,\
trims_periodic,trims_ceiling,trims_pressure,trims_api";

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
    /// The RSS account at the same instant (docs/memory-account.md): /proc/self/status RssAnon,
    /// RssFile, RssShmem; the backend's live bytes; allocator free, metadata (None where the
    /// backend reports none) and resident bytes; anonymous RSS outside the allocator.
    pub rss_anon_bytes: Option<u64>,
    pub rss_file_bytes: Option<u64>,
    pub rss_shmem_bytes: Option<u64>,
    pub live_bytes: Option<u64>,
    pub allocator_free_bytes: Option<u64>,
    pub allocator_metadata_bytes: Option<u64>,
    pub allocator_resident_bytes: Option<u64>,
    pub non_heap_bytes: Option<u64>,
    /// Trims so far per reason: periodic, RSS ceiling, memory pressure, `mallocshim_trim()`.
    pub trims_periodic: Option<u64>,
    pub trims_ceiling: Option<u64>,
    pub trims_pressure: Option<u64>,
    pub trims_api: Option<u64>,
}

impl MemRow {
    /// A row from its values in [`COLUMNS`] order (None: no figure; `unix_ms`, `rss_bytes` and
    /// `vsz_bytes` read 0 when None); missing trailing values stay None.
    pub fn from_values(v: &[Option<u64>]) -> MemRow {
        let req = |i: usize| v.get(i).copied().flatten().unwrap_or(0);
        let mut row = MemRow { unix_ms: req(0), rss_bytes: req(1), vsz_bytes: req(2), ..MemRow::default() };
        for (i, slot) in row.optional_mut().into_iter().enumerate() {
            *slot = v.get(3 + i).copied().flatten();
        }
        row
    }

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
        write!(out, "{},{},{}", self.unix_ms, self.rss_bytes, self.vsz_bytes)?;
        for v in self.optional() {
            write!(out, ",{}", O(v))?;
        }
        writeln!(out)
    }

    /// The optional fields in column order (columns 4 to 20).
    fn optional(&self) -> [Option<u64>; 17] {
        [
            self.backend_allocated_bytes,
            self.backend_resident_bytes,
            self.backend_free_bytes,
            self.trims,
            self.released_bytes,
            self.rss_anon_bytes,
            self.rss_file_bytes,
            self.rss_shmem_bytes,
            self.live_bytes,
            self.allocator_free_bytes,
            self.allocator_metadata_bytes,
            self.allocator_resident_bytes,
            self.non_heap_bytes,
            self.trims_periodic,
            self.trims_ceiling,
            self.trims_pressure,
            self.trims_api,
        ]
    }

    fn optional_mut(&mut self) -> [&mut Option<u64>; 17] {
        [
            &mut self.backend_allocated_bytes,
            &mut self.backend_resident_bytes,
            &mut self.backend_free_bytes,
            &mut self.trims,
            &mut self.released_bytes,
            &mut self.rss_anon_bytes,
            &mut self.rss_file_bytes,
            &mut self.rss_shmem_bytes,
            &mut self.live_bytes,
            &mut self.allocator_free_bytes,
            &mut self.allocator_metadata_bytes,
            &mut self.allocator_resident_bytes,
            &mut self.non_heap_bytes,
            &mut self.trims_periodic,
            &mut self.trims_ceiling,
            &mut self.trims_pressure,
            &mut self.trims_api,
        ]
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
    if head.len() < REQUIRED || head[..REQUIRED] != COLUMNS[..REQUIRED] {
        return Err(format!(
            "not a memlog CSV: header is {:?}, expected {HEADER:?}",
            complete.lines().next().unwrap_or("")
        ));
    }
    // Where each optional column is in this file, if it is.
    let at: Vec<Option<usize>> = COLUMNS[3..].iter().map(|c| head.iter().position(|h| h == c)).collect();
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
        let mut row =
            MemRow { unix_ms: req(f[0])?, rss_bytes: req(f[1])?, vsz_bytes: req(f[2])?, ..MemRow::default() };
        for (slot, i) in row.optional_mut().into_iter().zip(&at) {
            if let Some(i) = *i {
                *slot = opt(f[i])?;
            }
        }
        rows.push(row);
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
                live_bytes: Some(1),
                allocator_metadata_bytes: None,
                trims_api: Some(2),
                ..MemRow::default()
            },
            MemRow { unix_ms: 6, rss_bytes: 1, vsz_bytes: 2, ..MemRow::default() },
        ];
        let mut text = format!("{HEADER}\n").into_bytes();
        for r in &rows {
            r.write_line(&mut text).unwrap();
        }
        let text = String::from_utf8(text).unwrap();
        assert!(text.ends_with("\n6,1,2,,,,,,,,,,,,,,,,,\n"), "{text}");
        assert_eq!(parse(&text).unwrap(), rows);
        // A torn last line is dropped; a column appended by a newer writer is ignored.
        assert_eq!(parse(&format!("{text}7,1")).unwrap(), rows);
        assert_eq!(parse(&format!("{HEADER},extra\n1,2,3,,,,,,,,,,,,,,,,,,9\n")).unwrap().len(), 1);
        // A file of an older shim: the first eight columns only.
        let old = parse("unix_ms,rss_bytes,vsz_bytes,backend_allocated_bytes,backend_resident_bytes,backend_free_bytes,trims,released_bytes\n1,2,3,4,5,6,7,8\n").unwrap();
        assert_eq!((old[0].backend_free_bytes, old[0].live_bytes), (Some(6), None));
    }

    #[test]
    fn errors() {
        assert!(parse("").unwrap_err().contains("empty file"));
        assert!(parse("a,b\n").unwrap_err().contains("not a memlog CSV"));
        assert!(parse(&format!("{HEADER}\n1,2\n")).unwrap_err().contains("line 2"));
        assert!(parse(&format!("{HEADER}\n1,x,3,,,,,,,,,,,,,,,,,\n")).unwrap_err().contains("line 2"));
    }
}
