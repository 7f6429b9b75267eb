//! The dump formats as one table: each format's name (as `MALLOCSHIM_DUMP_FORMATS` spells it),
//! file extension, content type and what reads it. The writer (the shim's `dump`), the
//! `mallocshim dump` and `report` commands and docs/dump-format.md all read this table; a new
//! format is one row here and its renderer in the shim (an exhaustive `match` on [`Fmt`]).
//!
//! Plain constant data: the shim reads it while parsing its configuration, before any
//! allocator exists, so nothing here allocates.

/// One dump format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fmt {
    Json,
    Prom,
    Hdr,
    Text,
    Pprof,
}

/// A row of the table.
#[derive(Debug, PartialEq, Eq)]
pub struct Format {
    /// The name in `MALLOCSHIM_DUMP_FORMATS`.
    pub name: &'static str,
    /// File extension: `mallocshim.<pid>.<seq>.<ext>`.
    pub ext: &'static str,
    /// MIME type of the file's content.
    pub content_type: &'static str,
    /// What reads it.
    pub reader: &'static str,
}

/// The table, in file order (the order a dump writes its files and `MALLOCSHIM_VERBOSE=1` lists
/// them).
pub const FORMATS: [Format; 5] = [
    Format {
        name: "json",
        ext: "json",
        content_type: "application/json",
        reader: "mallocshim report, top, diff, diagnose (mallocshim_format::Dump)",
    },
    Format {
        name: "prom",
        ext: "prom",
        content_type: "text/plain; version=0.0.4",
        reader: "Prometheus (node_exporter's textfile collector), promtool",
    },
    Format {
        name: "hdr",
        ext: "hdr",
        content_type: "text/plain",
        reader: "HdrHistogram interval-log readers",
    },
    Format { name: "text", ext: "text", content_type: "text/plain", reader: "people (a table)" },
    Format {
        name: "pprof",
        ext: "pb.gz",
        content_type: "application/gzip",
        reader: "go tool pprof, mallocshim heap, diagnose (mallocshim_format::pprof::Profile)",
    },
];

/// `MALLOCSHIM_DUMP_FORMATS`'s default.
pub const DEFAULT: &str = "json,prom";

/// The option's one-line doc (tests check it names every row).
pub const OPTION_DOC: &str =
    "dump formats, comma-separated: json, prom, hdr, text, pprof (heap profile, .pb.gz)";

/// What a bad `MALLOCSHIM_DUMP_FORMATS` value is told (tests check it names every row).
pub const EXPECTED: &str = "a comma-separated list of json, prom, hdr, text, pprof";

impl Fmt {
    /// Every format, in table order.
    pub const ALL: [Fmt; 5] = [Fmt::Json, Fmt::Prom, Fmt::Hdr, Fmt::Text, Fmt::Pprof];

    /// Its row of [`FORMATS`].
    pub const fn row(self) -> &'static Format {
        &FORMATS[self as usize]
    }

    /// Its bit in a set of formats (the shim's `dump_formats`).
    pub const fn bit(self) -> u8 {
        1 << self as u8
    }

    /// The format `MALLOCSHIM_DUMP_FORMATS` calls `name` (exact, lower case).
    pub fn from_name(name: &[u8]) -> Option<Fmt> {
        Fmt::ALL.into_iter().find(|f| f.row().name.as_bytes() == name)
    }

    /// The format whose files end in `.ext`.
    pub fn from_ext(ext: &str) -> Option<Fmt> {
        Fmt::ALL.into_iter().find(|f| f.row().ext == ext)
    }
}

/// The formats a `MALLOCSHIM_DUMP_FORMATS` value asks for, as the shim reads it (names separated
/// by commas; here also trimmed and in any case); unknown names are left out.
pub fn parse_list(value: &str) -> Vec<Fmt> {
    value.split(',').filter_map(|f| Fmt::from_name(f.trim().to_ascii_lowercase().as_bytes())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_kinds_agree() {
        for (i, f) in Fmt::ALL.into_iter().enumerate() {
            assert_eq!(f as usize, i);
            assert_eq!(Fmt::from_name(f.row().name.as_bytes()), Some(f));
            assert_eq!(Fmt::from_ext(f.row().ext), Some(f));
        }
        assert_eq!(Fmt::ALL.len(), FORMATS.len());
    }

    #[test]
    fn option_texts_name_every_row_in_order() {
        let names: Vec<&str> = FORMATS.iter().map(|f| f.name).collect();
        assert!(EXPECTED.ends_with(&names.join(", ")), "{EXPECTED}");
        assert!(OPTION_DOC.contains(&names.join(", ")), "{OPTION_DOC}");
        assert!(OPTION_DOC.contains(".pb.gz"));
        assert_eq!(parse_list(DEFAULT), [Fmt::Json, Fmt::Prom]);
        assert_eq!(parse_list(" JSON,pprof,bogus"), [Fmt::Json, Fmt::Pprof]);
    }

    /// docs/dump-format.md's table of formats is this table, row for row.
    #[test]
    fn dump_format_doc_lists_every_row() {
        let doc = include_str!("../../../docs/dump-format.md");
        let documented: Vec<&str> =
            doc.lines().filter(|l| l.starts_with("| `") && l.contains("` | `")).collect();
        let rows: Vec<String> = FORMATS
            .iter()
            .map(|f| format!("| `{}` | `{}` | {} | {} |", f.name, f.ext, f.content_type, f.reader))
            .collect();
        let documented: Vec<&str> = documented
            .into_iter()
            .filter(|l| FORMATS.iter().any(|f| l.starts_with(&format!("| `{}` |", f.name))))
            .collect();
        assert_eq!(documented, rows, "docs/dump-format.md's formats table and formats::FORMATS differ");
    }
}
