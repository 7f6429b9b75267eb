//! `mallocshim plot` (crates/mallocshim-cli, drawing with its plot.rs): memlog
//! CSVs in the shim's format (hand-made here) drawn as SVG and PNG, one line per CSV (counted by
//! the legend entries), labels from file stems or --label, and the errors for a file that is not
//! a memlog and for a --label list of the wrong length.

mod common;

use common::{cli_bin, describe, stderr, work_dir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn mallocshim(args: &[&str]) -> Output {
    Command::new(cli_bin()).args(args).output().expect("run mallocshim")
}

/// The memlog header, from the format crate the shim writes through.
use mallocshim_format::memlog::HEADER;
use mallocshim_format::MemRow;

/// A memlog of `n` lines, RSS growing from `base_mib`; `backend` false leaves the backend
/// columns empty (the runner's own /proc sampling).
fn memlog(dir: &Path, name: &str, base_mib: u64, n: u64, backend: bool) -> String {
    let mut s = format!("{HEADER}\n").into_bytes();
    for i in 0..n {
        let rss = (base_mib + i * 3) << 20;
        let some = |v| if backend { Some(v) } else { None };
        let row = MemRow {
            unix_ms: 1_767_225_600_000 + i * 1000,
            rss_bytes: rss,
            vsz_bytes: rss * 4,
            backend_allocated_bytes: some(rss / 2),
            backend_resident_bytes: some(rss * 3 / 4),
            backend_free_bytes: some(rss / 4),
            trims: some(i / 3),
            released_bytes: some(i * 4096),
            ..MemRow::default()
        };
        row.write_line(&mut s).unwrap();
    }
    let p = dir.join(name);
    std::fs::write(&p, s).unwrap();
    p.to_string_lossy().into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = work_dir().join(format!("plot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// How many `<text>` elements of the SVG say exactly `label`.
fn text_count(svg: &str, label: &str) -> usize {
    svg.split("<text")
        .skip(1)
        .filter(|t| {
            t.split_once('>')
                .map(|(_, r)| r.split("</text>").next().unwrap_or("").trim() == label)
                .unwrap_or(false)
        })
        .count()
}

#[test]
fn svg_has_one_line_per_csv() {
    let d = scratch("svg");
    let a = memlog(&d, "glibc.csv", 100, 30, true);
    let b = memlog(&d, "jemalloc.csv", 120, 25, true);
    let c = memlog(&d, "tcmalloc.csv", 90, 40, false);
    let out = d.join("mem.svg");
    let o = mallocshim(&["plot", "--out", out.to_str().unwrap(), &a, &b, &c]);
    assert!(o.status.success(), "{}", describe(&o));
    let svg = std::fs::read_to_string(&out).expect("SVG written");
    assert!(
        svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "not an SVG document"
    );
    // legend: every file in the RSS panel; the two with backend columns also in the allocated panel
    assert_eq!(text_count(&svg, "glibc"), 2, "glibc legend entries");
    assert_eq!(text_count(&svg, "jemalloc"), 2, "jemalloc legend entries");
    assert_eq!(text_count(&svg, "tcmalloc"), 1, "tcmalloc has no backend columns: RSS line only");
    assert_eq!(text_count(&svg, "RSS"), 1);
    assert_eq!(text_count(&svg, "backend allocated bytes"), 1);
    // per file colour (the plot module's palette: 1F77B4, FF7F0E, 2CA02C), one polyline per data
    // line plus one per legend sample: 2 panels x 2 for glibc and jemalloc, 1 x 2 for tcmalloc
    let lines = |color: &str| {
        svg.split("<polyline")
            .skip(1)
            .filter(|p| p.split('>').next().unwrap_or("").contains(&format!("stroke=\"#{color}\"")))
            .count()
    };
    assert_eq!((lines("1F77B4"), lines("FF7F0E"), lines("2CA02C")), (4, 4, 2), "polylines per file");
}

#[test]
fn png_with_labels() {
    let d = scratch("png");
    let a = memlog(&d, "one.csv", 100, 10, true);
    let b = memlog(&d, "two.csv", 50, 10, false);
    let out = d.join("mem.png");
    let o = mallocshim(&["plot", "--out", out.to_str().unwrap(), "--label", "before,after", &a, &b]);
    assert!(o.status.success(), "{}", describe(&o));
    let bytes = std::fs::read(&out).expect("PNG written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "PNG signature");
    let mut r = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("PNG header");
    let mut buf = vec![0; r.output_buffer_size()];
    let info = r.next_frame(&mut buf).expect("PNG data decodes");
    assert_eq!((info.width, info.height), (1000, 900), "two stacked panels");
    assert!(buf.iter().any(|&x| x != 255), "not blank");
    // the same labels land in an SVG of the same files
    let svg = d.join("mem.svg");
    let o = mallocshim(&["plot", "--out", svg.to_str().unwrap(), "--label", "before,after", &a, &b]);
    assert!(o.status.success(), "{}", describe(&o));
    let s = std::fs::read_to_string(&svg).unwrap();
    assert_eq!((text_count(&s, "before"), text_count(&s, "after")), (2, 1));
}

#[test]
fn plot_errors() {
    let d = scratch("err");
    let bad = d.join("bad.csv");
    std::fs::write(&bad, "time,rss\n1,2\n").unwrap();
    let good = memlog(&d, "good.csv", 10, 3, true);
    let out = d.join("x.png");
    let o = mallocshim(&["plot", "--out", out.to_str().unwrap(), &good, bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(
        stderr(&o).starts_with("mallocshim plot: ") && stderr(&o).contains("not a memlog CSV"),
        "{}",
        describe(&o)
    );
    let o = mallocshim(&["plot", "--out", out.to_str().unwrap(), "--label", "a,b", &good]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(stderr(&o).contains("--label wants 1"), "{}", describe(&o));
    assert!(!out.exists(), "no image after an error");
    // report beside plot: one line naming the file
    let o = mallocshim(&["report", "/nonexistent.json"]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(stderr(&o).contains("cannot read /nonexistent.json"), "{}", describe(&o));
}
