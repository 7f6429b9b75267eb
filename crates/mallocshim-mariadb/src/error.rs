//! The harness's error: a missing program or file (what to install), a step that failed with
//! what it printed, or a wait ended by the caller's stop flag ([`crate::Options::stop`]: the
//! comparison runner's Ctrl-C). No panics here; the callers (tests) turn errors into failures.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// A program or file the harness needs is not installed.
    MissingTool(String),
    /// A step failed; the message says which and holds the relevant log tail.
    Failed(String),
    /// The stop flag was raised during a wait; the running child (server, client, sysbench) was
    /// ended.
    Interrupted,
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::MissingTool(t) => {
                write!(f, "required {t} is not installed: run scripts/install-deps.sh")
            }
            Error::Failed(m) => f.write_str(m),
            Error::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::Failed(s)
    }
}

/// `Err(Error::Failed)` with a formatted message.
macro_rules! fail {
    ($($t:tt)*) => { return Err($crate::Error::Failed(format!($($t)*))) };
}
pub(crate) use fail;

/// The last `n` lines of a file, for error messages (empty when unreadable).
pub(crate) fn tail(path: &std::path::Path, n: usize) -> String {
    let t = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    format!(
        "----- last {n} lines of {} -----\n{}\n----- end -----",
        path.display(),
        lines[lines.len().saturating_sub(n)..].join("\n")
    )
}
