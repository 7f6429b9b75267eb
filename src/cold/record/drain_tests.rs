//! The drain's merge on calls made up by hand (no rings): a late free whose address another
//! thread was served again before the free was read (stop 44's CI failure, `tests/record.rs`
//! `thousands_of_short_threads` under mimalloc).

use super::*;
use mallocshim_format::trace::{Footer, Header, TraceReader};

const A: u64 = 0x7f00_0000_1000;
const MS: u64 = 1_000_000;

fn call(thread: u32, at_ms: u64, op: u8, addr: u64, old: u64) -> Raw {
    let rel = at_ms * MS;
    Raw { rel, seq: rel, thread, e: Entry { w0: rel << 8 | op as u64, addr, old, size: 64 } }
}

fn drain() -> Drain {
    let mut d = Drain::new(1);
    d.ns_per_tick = 1.0;
    for _ in 0..2 {
        d.dropped.push(0);
        d.old_size.push((0, 0));
    }
    d
}

/// Runs the passes (each: the calls read, then a write at `now` ms) and the end; the events.
fn run(passes: &[(&[Raw], u64)]) -> (Vec<Event>, u64) {
    let mut d = drain();
    let mut w = TraceWriter::new(Vec::new(), &Header::default()).unwrap();
    for index in 0..2 {
        w.thread(&Thread { index, tid: 100 + index, name: String::new() }).unwrap();
    }
    for (calls, now) in passes {
        d.pending.extend_from_slice(calls);
        d.emit(&mut w, now * MS, false, |_| Ok(false)).unwrap();
    }
    d.emit(&mut w, 0, true, |_| Ok(false)).unwrap();
    let (_, bytes) = w.finish(&Footer::default()).unwrap();
    (TraceReader::new(&bytes[..]).unwrap().read_all().unwrap(), d.reordered)
}

fn frees(ev: &[Event]) -> Vec<(u32, u64)> {
    ev.iter().filter(|e| e.op == TraceOp::Free).map(|e| (e.thread, e.old_id)).collect()
}

#[test]
fn a_late_free_of_a_reused_address_is_its_own_threads() {
    // Thread 0 is served A at 1 ms and frees it at 3 ms, but its free is read only after
    // thread 1's malloc of A at 5 ms was written; thread 1 frees A at 50 ms.
    let (ev, reordered) = run(&[
        (&[call(0, 1, 0, A, 0), call(1, 5, 0, A, 0)], 100),
        (&[call(0, 3, 3, 0, A), call(1, 50, 3, 0, A)], 200),
    ]);
    assert_eq!(frees(&ev), [(0, 1), (1, 2)], "{ev:?}");
    assert_eq!(reordered, 1);
}

#[test]
fn a_free_that_never_comes_is_taken_at_the_wait_and_a_later_one_left_out() {
    // Thread 0's free of A is lost past the orphan's wait: taken as freed on thread 1 (which
    // reused A) then; when it comes after all, it neither frees thread 1's block nor repeats.
    let late_ms = 5 + super::super::orphans::ORPHAN_NS / MS + 100;
    let (ev, _) = run(&[
        (&[call(0, 1, 0, A, 0), call(1, 5, 0, A, 0)], 100),
        (&[call(1, late_ms - 50, 0, 0x9000, 0)], late_ms),
        (&[call(0, 3, 3, 0, A), call(1, late_ms + 10, 3, 0, A)], late_ms + 100),
    ]);
    assert_eq!(frees(&ev), [(1, 1), (1, 2)], "{ev:?}");
}
