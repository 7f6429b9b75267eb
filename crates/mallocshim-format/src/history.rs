//! The memory history a dump carries (`history`, docs/history.md): the shim's ring of one row
//! per `MALLOCSHIM_HISTORY_MS` (1 s by default) over the last [`CAPACITY`] periods, oldest
//! first. Each row holds the memlog's columns ([`crate::memlog::COLUMNS`], the RSS account
//! among them), then the calls per op so far (`calls_<op>`, [`crate::OP_NAMES`]), then
//! `measured`: 1 when the allocator's figures were measured for that row, 0 when they were
//! carried from the last measurement and moved by what cheap sources saw since (RssAnon for the
//! allocator's resident bytes, the shim's per-op byte counts for live bytes).
//!
//! In the JSON the rows are arrays of numbers (null: no figure, as the memlog's empty field),
//! one array per line, in the order of `columns`: a reader takes columns by name. Added after
//! version 1 without a version bump (`#[serde(default)]`: an older dump has an empty history).

use crate::memlog::{MemRow, COLUMNS as MEMLOG_COLUMNS};
use serde::{Deserialize, Serialize};

/// Rows the shim's ring holds (one hour at the default 1 s period).
pub const CAPACITY: usize = 3600;

/// The columns after the memlog's: calls per op, then `measured`.
const EXTRA: [&str; 6] =
    ["calls_malloc", "calls_calloc", "calls_realloc", "calls_free", "calls_memalign", "measured"];

/// The columns the shim writes, in order: the memlog's, the calls per op, `measured` (built
/// from the memlog's list, so the two cannot drift apart).
pub const COLUMNS: [&str; MEMLOG_COLUMNS.len() + EXTRA.len()] = {
    let mut out = [""; MEMLOG_COLUMNS.len() + EXTRA.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = if i < MEMLOG_COLUMNS.len() { MEMLOG_COLUMNS[i] } else { EXTRA[i - MEMLOG_COLUMNS.len()] };
        i += 1;
    }
    out
};

/// The history section of a dump.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(default)]
pub struct History {
    /// Milliseconds between rows (`MALLOCSHIM_HISTORY_MS`); 0 when the history is off.
    pub period_ms: u64,
    /// Rows the ring holds at most.
    pub capacity: u64,
    /// Bytes of the ring in the shim's memory (mapped once at start, outside the backend).
    pub ring_bytes: u64,
    /// Column names, in the order of each row's values.
    pub columns: Vec<String>,
    /// One row per period, oldest first.
    pub rows: Vec<Vec<Option<u64>>>,
}

impl History {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Index of column `name`, if this history has it.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// The rows as memlog rows (by column name; a column this history lacks stays empty), for
    /// everything that reads a memlog (`diagnose`, `plot`).
    pub fn mem_rows(&self) -> Vec<MemRow> {
        let at: Vec<Option<usize>> = MEMLOG_COLUMNS.iter().map(|c| self.column(c)).collect();
        self.rows
            .iter()
            .map(|r| {
                let v: Vec<Option<u64>> =
                    at.iter().map(|i| i.and_then(|i| r.get(i).copied().flatten())).collect();
                MemRow::from_values(&v)
            })
            .collect()
    }

    /// The section as the shim writes it: compact JSON with one row per line, indented to sit
    /// at the top level of a pretty-printed dump.
    pub fn to_json(&self) -> String {
        let head =
            serde_json::to_string(&History { rows: Vec::new(), ..self.clone_head() }).unwrap_or_default();
        // `head` ends with `"rows":[]}`: open the array there and write one row per line.
        let Some(open) = head.strip_suffix("[]}") else { return head };
        let mut s = String::with_capacity(head.len() + self.rows.len() * 16 * self.columns.len());
        s.push_str(open);
        s.push('[');
        for (i, r) in self.rows.iter().enumerate() {
            s.push_str(if i == 0 { "\n    " } else { ",\n    " });
            s.push_str(&serde_json::to_string(r).unwrap_or_default());
        }
        s.push_str(if self.rows.is_empty() { "]}" } else { "\n  ]}" });
        s
    }

    fn clone_head(&self) -> History {
        History {
            period_ms: self.period_ms,
            capacity: self.capacity,
            ring_bytes: self.ring_bytes,
            columns: self.columns.clone(),
            rows: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_the_memlog_then_the_ops() {
        assert_eq!(COLUMNS[..MEMLOG_COLUMNS.len()], MEMLOG_COLUMNS);
        let ops: Vec<String> = crate::OP_NAMES.iter().map(|o| format!("calls_{o}")).collect();
        assert_eq!(COLUMNS[MEMLOG_COLUMNS.len()..COLUMNS.len() - 1], ops[..]);
    }

    #[test]
    fn rows_read_as_memlog_rows_by_name() {
        let h = History {
            period_ms: 1000,
            capacity: 3600,
            ring_bytes: 0,
            columns: vec!["rss_bytes".into(), "unix_ms".into(), "live_bytes".into()],
            rows: vec![vec![Some(10), Some(5), None], vec![Some(11), Some(6), Some(3)]],
        };
        let m = h.mem_rows();
        assert_eq!((m[0].unix_ms, m[0].rss_bytes, m[0].live_bytes), (5, 10, None));
        assert_eq!(m[1].live_bytes, Some(3));
        let back: History = serde_json::from_str(&h.to_json()).unwrap();
        assert_eq!(back, h);
        let empty = History::default();
        assert_eq!(serde_json::from_str::<History>(&empty.to_json()).unwrap(), empty);
    }
}
