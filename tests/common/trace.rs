//! Helpers of the recording tests (tests/record.rs, tests/record_burst.rs): the program with
//! known calls, a fresh directory per run, the trace read through the format crate's reader, and
//! the checks every test makes of its events.

use super::*;
use mallocshim_format::trace::{self, Event, Footer, Header, Thread, TraceOp, PRE_WINDOW};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

pub type Trace = (Header, Vec<Thread>, Vec<Event>, Footer);

pub fn prog() -> PathBuf {
    cc("record_calls.c", "record_calls", &[])
}

/// A fresh directory for one run's trace.
pub fn dir(name: &str) -> PathBuf {
    let d = work_dir().join(format!("record.{name}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn read(path: &Path, what: &str) -> Trace {
    trace::read_file(path).unwrap_or_else(|e| panic!("{what}: {}: {e}", path.display()))
}

/// Checks the ids: allocations dense from 1, every block given back was allocated earlier
/// and is live (or is pre-window), nothing freed twice. Returns the live ids at the end.
pub fn check_ids(events: &[Event], what: &str) -> HashSet<u64> {
    let mut live = HashSet::new();
    let mut next = 1;
    let mut pre = 0;
    for (i, e) in events.iter().enumerate() {
        if e.op.takes_block() && e.old_id != 0 {
            if e.old_id & PRE_WINDOW != 0 {
                pre += 1;
                assert_eq!(e.old_id, PRE_WINDOW | pre, "{what}: event {i}: pre-window ids out of order");
            } else {
                let failed_realloc = e.op == TraceOp::Realloc && e.id == 0 && e.size != 0;
                if !failed_realloc {
                    assert!(live.remove(&e.old_id), "{what}: event {i} {e:?} gives back a block not live");
                }
            }
        }
        if e.op.allocates() && e.id != 0 {
            assert_eq!(e.id, next, "{what}: event {i}: ids not dense");
            next += 1;
            live.insert(e.id);
        }
    }
    live
}

pub fn thread_of(threads: &[Thread], tid: u32, what: &str) -> u32 {
    threads
        .iter()
        .find(|t| t.tid == tid)
        .unwrap_or_else(|| panic!("{what}: no thread with tid {tid} in {threads:?}"))
        .index
}

/// Events of `op` on `thread` whose size is in `sizes`.
pub fn count(events: &[Event], op: TraceOp, thread: u32, sizes: std::ops::Range<u64>) -> Vec<&Event> {
    events.iter().filter(|e| e.op == op && e.thread == thread && sizes.contains(&e.size)).collect()
}
