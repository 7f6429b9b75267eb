//! The trace's typed errors: one per way a file can be unreadable. Nothing else.

use std::fmt;

/// Why a trace could not be written or read.
#[derive(Debug)]
pub enum TraceError {
    /// The file or stream failed.
    Io(std::io::Error),
    /// Not a trace: the first 8 bytes are not [`super::MAGIC`].
    BadMagic,
    /// A trace of another format version.
    Version { found: u32, expected: u32 },
    /// The file ends before its footer (cut, or the process was killed mid-window).
    Truncated,
    /// A value that no writer writes (or the compressed data fails its checksum).
    Corrupt { what: &'static str },
    /// The writer was given an event that breaks the format's rules (time order, dense ids).
    Invalid { what: &'static str },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io(e) => write!(f, "trace I/O error: {e}"),
            TraceError::BadMagic => write!(f, "not a mallocshim trace (bad magic)"),
            TraceError::Version { found, expected } => {
                write!(f, "trace format version {found}, this reader reads version {expected}")
            }
            TraceError::Truncated => write!(f, "trace truncated: the file ends before its footer"),
            TraceError::Corrupt { what } => write!(f, "trace corrupt: {what}"),
            TraceError::Invalid { what } => write!(f, "invalid trace event: {what}"),
        }
    }
}

impl std::error::Error for TraceError {}

impl From<std::io::Error> for TraceError {
    fn from(e: std::io::Error) -> TraceError {
        TraceError::Io(e)
    }
}
