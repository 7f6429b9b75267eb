//! The hdr interval log, black-box, under every backend: tests/c/diagnose.c (`steady`: a
//! malloc/free loop for 2.5 s) dumps every second and at exit (two or three dumps) with `MALLOCSHIM_DUMP_FORMATS=json,hdr`.
//! Each `.hdr` file, read with the hdrhistogram crate's interval-log reader, holds the interval
//! since the previous dump: summed over the files, every tag's histogram counts equal the
//! cumulative `sampled` of the last JSON dump's size class, and the intervals' start times
//! (seconds since the process start, the log's BaseTime) increase, each starting where the
//! previous one ended.

mod common;

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One dump's interval: (start s, length s) and the samples per tag.
fn read_interval(text: &str, what: &str) -> ((f64, f64), BTreeMap<String, u64>) {
    let mut de = Deserializer::new();
    let mut tags = BTreeMap::new();
    let mut span = None;
    for e in IntervalLogIterator::new(text.as_bytes()) {
        match e.unwrap_or_else(|e| panic!("{what}: interval log does not parse: {e:?}\n{text}")) {
            LogEntry::Interval(iv) => {
                let tag = iv.tag().map(|t| t.as_str().to_string()).expect("tagged");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(iv.encoded_histogram())
                    .unwrap_or_else(|e| panic!("{what}: {tag}: base64: {e}"));
                let h: hdrhistogram::Histogram<u64> =
                    de.deserialize(&mut bytes.as_slice()).unwrap_or_else(|e| panic!("{what}: {tag}: {e:?}"));
                let s = (iv.start_timestamp().as_secs_f64(), iv.duration().as_secs_f64());
                let prev = *span.get_or_insert(s);
                assert!((prev.0 - s.0).abs() < 1e-3, "{what}: {tag} starts at {} not {}", s.0, prev.0);
                *tags.entry(tag).or_insert(0) += h.len();
            }
            LogEntry::StartTime(_) | LogEntry::BaseTime(_) => {}
        }
    }
    // A dump with no sample in its interval (two dumps a few ms apart) has no histogram: its
    // span is in the header comment, `interval A-B s since the process start`.
    let span = span.unwrap_or_else(|| {
        let c = text.lines().next().and_then(|l| l.split("interval ").nth(1)).expect(text);
        let (a, b) = c.split_whitespace().next().and_then(|r| r.split_once('-')).expect(text);
        let (a, b): (f64, f64) = (a.parse().unwrap(), b.parse().unwrap());
        (a, b - a)
    });
    (span, tags)
}

fn run(backend: &str) {
    let prog = common::cc("diagnose.c", "diagnose_prog", &[]);
    let dir = common::work_dir().join("hdr-log").join(backend);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = common::preloaded(&prog, backend);
    c.arg("steady")
        .env("MALLOCSHIM_DUMP_DIR", &dir)
        .env("MALLOCSHIM_DUMP_INTERVAL_S", "1")
        .env("MALLOCSHIM_DUMP_AT_EXIT", "1")
        .env("MALLOCSHIM_DUMP_FORMATS", "json,hdr");
    common::run_ok(c, &format!("steady under {backend}"));
    let mut files: BTreeMap<(u64, String), PathBuf> = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if let Some((_, seq, ext)) = mallocshim_format::dump::parse_dump_file_name(&name) {
            files.insert((seq, ext.to_string()), p);
        }
    }
    let seqs: Vec<u64> = files.keys().filter(|(_, e)| e == "hdr").map(|(s, _)| *s).collect();
    assert!(seqs.len() >= 2, "{backend}: fewer than 2 hdr dumps in {}: {files:?}", dir.display());
    let mut sum: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_end = 0.0f64;
    let mut last_start = -1.0f64;
    for s in &seqs {
        let what = format!("{backend} dump {s}");
        let text = std::fs::read_to_string(&files[&(*s, "hdr".to_string())]).unwrap();
        let ((start, len), tags) = read_interval(&text, &what);
        assert!(
            start > last_start || seqs.len() == 1,
            "{what}: start {start} s not after the previous {last_start} s"
        );
        assert!(
            (start - last_end).abs() < 0.01,
            "{what}: starts at {start} s, previous ended at {last_end} s"
        );
        last_start = start;
        last_end = start + len;
        for (t, n) in tags {
            *sum.entry(t).or_insert(0) += n;
        }
    }
    let last = seqs.last().unwrap();
    let d = mallocshim_format::Dump::read(&files[&(*last, "json".to_string())]).unwrap();
    assert!(
        (d.uptime_s - last_end).abs() < 0.01,
        "{backend}: the last interval ends at {last_end} s, its dump at {} s",
        d.uptime_s
    );
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for c in d.size_classes.iter().filter(|c| c.sampled > 0) {
        let idx = mallocshim_format::classes::class_index(c.min_bytes, c.max_bytes).expect("a known class");
        let label = mallocshim_format::classes::class_label(idx);
        want.insert(format!("{}_{label}", c.op), c.sampled);
    }
    // Frees are classed by usable size: glibc's 1 KiB block has 1032 usable bytes (free_2K).
    assert!(
        want.contains_key("malloc_1K") && want.keys().any(|k| k.starts_with("free_")),
        "{backend}: {want:?}"
    );
    assert_eq!(sum, want, "{backend}: intervals summed vs the last dump's cumulative sampled counts");
    eprintln!("{backend}: {} intervals, {} tags, ends at {last_end:.3} s", seqs.len(), want.len());
}

#[test]
fn intervals_add_up_to_the_cumulative_counts() {
    for b in common::BACKENDS {
        run(b);
    }
}
