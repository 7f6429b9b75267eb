//! Round trips, and every cut and corruption of a small trace giving an error, never a panic.

use super::*;

fn header() -> Header {
    Header {
        version: VERSION,
        pid: 4242,
        backend: "glibc".into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        tick_ns: 1,
        preexisting: vec![
            ClassLive { class: 0, count: 10, bytes: 120 },
            ClassLive { class: 5, count: 2, bytes: 700 },
        ],
        max_bytes: 1 << 30,
        seconds: 30,
        shim_version: "0.1.0".into(),
    }
}

fn ev(t_ns: u64, thread: u32, op: TraceOp, size: u64, id: u64, old_id: u64) -> Event {
    Event { t_ns, thread, op, size, align: 0, id, old_id, old_size: 0 }
}

/// A small trace of every op and flag: two threads, a cross-thread free, pre-window frees,
/// NULL results and inputs.
fn events() -> Vec<Event> {
    let mut v = vec![
        ev(10, 0, TraceOp::Malloc, 24, 1, 0),
        ev(15, 0, TraceOp::Calloc, 800, 2, 0),
        ev(15, 1, TraceOp::Realloc, 100, 3, 1),
        Event { align: 64, ..ev(20, 1, TraceOp::Memalign, 4000, 4, 0) },
        ev(21, 0, TraceOp::Free, 0, 0, 3),
        Event { old_size: 40, ..ev(22, 1, TraceOp::Free, 0, 0, PRE_WINDOW | 1) },
        ev(30, 1, TraceOp::Free, 0, 0, 0),
        ev(31, 0, TraceOp::Malloc, u64::MAX, 0, 0),
        Event { old_size: 5000, ..ev(40, 0, TraceOp::Realloc, 9000, 5, PRE_WINDOW | 2) },
        ev(41, 1, TraceOp::Realloc, 0, 0, 5),
        ev(1 << 40, 0, TraceOp::Realloc, 7, 6, 0),
    ];
    for i in 0..200u64 {
        v.push(ev((1 << 40) + i * 100, (i % 3) as u32, TraceOp::Malloc, 16 + i, 7 + i, 0));
    }
    v
}

fn threads() -> Vec<Thread> {
    (0..3).map(|i| Thread { index: i, tid: 100 + i, name: format!("t{i}") }).collect()
}

fn footer() -> Footer {
    Footer {
        dropped: 3,
        dropped_per_thread: vec![(1, 3)],
        reordered: 1,
        ended: EndReason::MaxBytes,
        window_ns: 99,
        ..Footer::default()
    }
}

fn trace() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    let ts = threads();
    w.thread(&ts[0]).unwrap();
    w.thread(&ts[1]).unwrap();
    let mut declared = 2;
    for e in events() {
        while e.thread as usize >= declared {
            w.thread(&ts[declared]).unwrap();
            declared += 1;
        }
        w.write(&e).unwrap();
    }
    let (n, bytes) = w.finish(&footer()).unwrap();
    assert_eq!(n as usize, bytes.len());
    bytes
}

#[test]
fn round_trip() {
    let bytes = trace();
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    assert_eq!(r.header(), &header());
    let got = r.read_all().unwrap();
    assert_eq!(got, events());
    assert_eq!(r.threads(), &threads()[..]);
    let f = r.footer().unwrap();
    assert_eq!(f, &Footer { events: events().len() as u64, ..footer() });
}

#[test]
fn truncated_at_every_offset_is_an_error() {
    let bytes = trace();
    for cut in 0..bytes.len() {
        let res = TraceReader::new(&bytes[..cut]).and_then(|mut r| r.read_all());
        assert!(res.is_err(), "cut at {cut} of {} read without error", bytes.len());
    }
}

#[test]
fn corrupt_bytes_are_an_error_or_the_same_trace() {
    let bytes = trace();
    for i in 0..bytes.len() {
        for x in [0xff, 0x01, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= x;
            let res =
                TraceReader::new(&b[..]).and_then(|mut r| r.read_all().map(|e| (e, r.footer().cloned())));
            // A changed byte that means nothing to the content (zstd's window descriptor) reads
            // the same trace; any other reads an error.
            if let Ok((e, f)) = res {
                assert_eq!(e, events(), "byte {i} xor {x:#x} read other events without error");
                assert_eq!(f.unwrap().dropped, footer().dropped);
            }
        }
    }
}

#[test]
fn wrong_version_and_magic() {
    let mut b = trace();
    b[8..12].copy_from_slice(&7u32.to_le_bytes());
    assert!(matches!(TraceReader::new(&b[..]), Err(TraceError::Version { found: 7, expected: VERSION })));
    b[0] = b'X';
    assert!(matches!(TraceReader::new(&b[..]), Err(TraceError::BadMagic)));
    assert!(matches!(TraceReader::new(&b[..5]), Err(TraceError::Truncated)));
}

#[test]
fn writer_rejects_what_the_format_cannot_say() {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.write(&ev(10, 0, TraceOp::Malloc, 8, 1, 0)).unwrap();
    assert!(matches!(w.write(&ev(5, 0, TraceOp::Malloc, 8, 2, 0)), Err(TraceError::Invalid { .. })));
    assert!(matches!(w.write(&ev(11, 0, TraceOp::Malloc, 8, 5, 0)), Err(TraceError::Invalid { .. })));
    assert!(matches!(w.write(&ev(11, 0, TraceOp::Free, 0, 0, 9)), Err(TraceError::Invalid { .. })));
    assert!(matches!(
        w.write(&ev(11, 0, TraceOp::Free, 0, 0, PRE_WINDOW | 2)),
        Err(TraceError::Invalid { .. })
    ));
}

#[test]
fn cut_after_a_flush_still_reads_the_flushed_events() {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.thread(&threads()[0]).unwrap();
    for i in 1..=1000 {
        w.write(&ev(i, 0, TraceOp::Malloc, 32, i, 0)).unwrap();
    }
    w.flush().unwrap();
    let (_, bytes) = w.finish(&footer()).unwrap();
    // A file whose writer was killed after the flush: every flushed event reads, then Truncated.
    let cut = &bytes[..bytes.len() - 4];
    let mut r = TraceReader::new(cut).unwrap();
    let got: Vec<_> = r.by_ref().collect();
    let ok = got.iter().filter(|e| e.is_ok()).count();
    assert_eq!(ok, 1000);
    assert!(got.last().unwrap().is_err());
}

/// A writer killed mid-block (every cut after a flush, to the byte): the flushed events read,
/// then `Truncated`, never `Corrupt`: a cut-short trace replays up to its last whole block.
#[test]
fn cut_anywhere_after_a_flush_is_truncated_not_corrupt() {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.thread(&threads()[0]).unwrap();
    for i in 1..=1000 {
        w.write(&ev(i, 0, TraceOp::Malloc, 32, i, 0)).unwrap();
    }
    w.flush().unwrap();
    let flushed = w.bytes_written() as usize;
    for i in 1001..=30000 {
        w.write(&ev(i * 3, 0, TraceOp::Malloc, 32 + i % 97, i, 0)).unwrap();
    }
    let (_, bytes) = w.finish(&footer()).unwrap();
    for cut in flushed..bytes.len() {
        let mut r = TraceReader::new(&bytes[..cut]).unwrap();
        let got: Vec<_> = r.by_ref().collect();
        let ok = got.iter().filter(|e| e.is_ok()).count();
        assert!(ok >= 1000, "cut at {cut}: {ok} events");
        assert!(matches!(got.last(), Some(Err(TraceError::Truncated))), "cut at {cut}: {:?}", got.last());
    }
}
