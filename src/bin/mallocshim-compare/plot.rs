//! Line charts (PNG or SVG, chosen by the output file's extension) and the memlog CSV reader,
//! shared by the comparison runner (this directory) and the report tool (examples/report.rs
//! includes this file with `#[path]`). Pure Rust: plotters draws, text goes through ab_glyph with
//! a TrueType font read at run time (DejaVu Sans from Debian's fonts-dejavu-core, or the file in
//! `MALLOCSHIM_FONT`). Images are drawn in memory (the png crate encodes the bitmap) and written
//! through secure_write.rs, which both includers declare beside this module.
#![allow(dead_code)] // each includer uses its own part

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The memlog CSV header (the shim's `MALLOCSHIM_MEMLOG`, and the runner's own /proc sampler).
pub const MEMLOG_HEADER: &str =
    "unix_ms,rss_bytes,vsz_bytes,backend_allocated_bytes,backend_resident_bytes,backend_free_bytes,trims,released_bytes";

/// Font files tried in order when `MALLOCSHIM_FONT` is not set.
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// One memlog line; the backend columns are `None` where the file leaves them empty (the
/// runner's own sampler in direct-preload mode).
#[derive(Clone, Debug, PartialEq)]
pub struct MemRow {
    pub unix_ms: u64,
    pub rss_bytes: u64,
    pub vsz_bytes: u64,
    pub backend_allocated_bytes: Option<u64>,
    pub backend_resident_bytes: Option<u64>,
    pub backend_free_bytes: Option<u64>,
}

/// Reads a memlog CSV: the header line, then one line of integers per interval. A last line
/// without its newline (the writer was killed mid-line) is ignored.
pub fn read_memlog(path: &Path) -> Result<Vec<MemRow>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    let mut lines = complete.lines();
    match lines.next() {
        // Later columns (the RSS account, trims per reason) are ignored here.
        Some(h) if h.trim() == MEMLOG_HEADER || h.trim().starts_with(&format!("{MEMLOG_HEADER},")) => {}
        Some(h) => {
            return Err(format!(
                "{}: not a memlog CSV: header is {h:?}, expected {MEMLOG_HEADER:?}",
                path.display()
            ))
        }
        None => {
            return Err(format!(
                "{}: empty file, expected the memlog header {MEMLOG_HEADER:?}",
                path.display()
            ))
        }
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = || {
            format!("{}: line {}: expected at least 8 integer fields, got {line:?}", path.display(), i + 2)
        };
        if f.len() < 8 {
            return Err(bad());
        }
        let req = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let opt =
            |s: &str| if s.is_empty() { Ok(None) } else { s.parse::<u64>().map(Some).map_err(|_| bad()) };
        rows.push(MemRow {
            unix_ms: req(f[0])?,
            rss_bytes: req(f[1])?,
            vsz_bytes: req(f[2])?,
            backend_allocated_bytes: opt(f[3])?,
            backend_resident_bytes: opt(f[4])?,
            backend_free_bytes: opt(f[5])?,
        });
    }
    Ok(rows)
}

/// One line of a chart. Series with the same `color` share a colour (a backend across panels);
/// `thin` draws a thinner line with dots (p99 next to p50, a second round).
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub color: usize,
    pub thin: bool,
    pub points: Vec<(f64, f64)>,
}

/// One panel (chart) of a figure. `x_fmt`/`y_fmt` turn axis values into tick labels, so a log
/// axis is drawn by passing log values and formatting them back.
pub struct Panel {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub x_fmt: fn(f64) -> String,
    pub y_fmt: fn(f64) -> String,
    pub series: Vec<Series>,
}

pub fn fmt_plain(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Log2 axis back to the value: 2^v, only at whole powers.
pub fn fmt_pow2(v: f64) -> String {
    if (v - v.round()).abs() < 1e-6 {
        format!("{}", 2f64.powf(v.round()))
    } else {
        String::new()
    }
}

/// Log10 axis back to the value.
pub fn fmt_pow10(v: f64) -> String {
    let x = 10f64.powf(v);
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// Log2 of a size in bytes back to 16, 1K, 64K, 2M...
pub fn fmt_bytes_pow2(v: f64) -> String {
    if (v - v.round()).abs() > 1e-6 {
        return String::new();
    }
    let b = 2f64.powf(v.round()) as u64;
    match b {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Registers a TrueType font for the charts' text (once per process).
fn init_font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let paths: Vec<String> = match std::env::var("MALLOCSHIM_FONT") {
            Ok(p) if !p.is_empty() => vec![p],
            _ => FONT_PATHS.iter().map(|s| s.to_string()).collect(),
        };
        for p in &paths {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no usable TrueType font for the plots (tried {}): install fonts-dejavu-core or set MALLOCSHIM_FONT=/path/to/font.ttf",
            paths.join(", ")
        ))
    })
    .clone()
}

/// Draws the panels stacked vertically into `out`: SVG when it ends in `.svg`, PNG otherwise.
/// The image is drawn in memory, then written with `secure_write::write` (a new 0600 file; a
/// symlink or another user's file at `out` is refused and left alone).
pub fn draw(out: &Path, title: &str, panels: &[Panel]) -> Result<(), String> {
    init_font()?;
    let h = 60 + 420 * panels.len().max(1) as u32;
    let size = (1000, h);
    let svg = out.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    let cannot = |e: String| format!("cannot draw {}: {e}", out.display());
    let bytes = if svg {
        let mut text = String::new();
        {
            let root = SVGBackend::with_string(&mut text, size).into_drawing_area();
            draw_on(&root, title, panels)
                .and_then(|_| root.present().map_err(|e| e.to_string()))
                .map_err(cannot)?;
        }
        text.into_bytes()
    } else {
        let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
        {
            let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
            draw_on(&root, title, panels)
                .and_then(|_| root.present().map_err(|e| e.to_string()))
                .map_err(cannot)?;
        }
        encode_png(&rgb, size).map_err(|e| format!("cannot encode {} as PNG: {e}", out.display()))?
    };
    super::secure_write::write(out, &bytes).map_err(|e| e.to_string())
}

/// An 8-bit RGB buffer (what BitMapBackend draws into) as PNG file bytes.
fn encode_png(rgb: &[u8], (w, h): (u32, u32)) -> Result<Vec<u8>, png::EncodingError> {
    let mut bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut bytes, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header()?;
        wr.write_image_data(rgb)?;
        wr.finish()?;
    }
    Ok(bytes)
}

fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    panels: &[Panel],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let root = root.titled(title, ("sans-serif", 24)).map_err(e)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let pts = panel.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        if x1 - x0 < 1e-9 {
            x1 = x0 + 1.0;
        }
        // y from 0 unless the values are log values (may be negative) or far from 0.
        let ypad = ((y1 - y0).abs() * 0.08).max(1e-6);
        let (ylo, yhi) =
            if y0 >= 0.0 && y0 < (y1 - y0) * 2.0 { (0.0, y1 + ypad) } else { (y0 - ypad, y1 + ypad) };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, ylo..yhi)
            .map_err(e)?;
        let (xf, yf) = (panel.x_fmt, panel.y_fmt);
        chart
            .configure_mesh()
            .x_desc(panel.x_desc.as_str())
            .y_desc(panel.y_desc.as_str())
            .x_labels(12)
            .y_labels(8)
            .x_label_formatter(&|v| xf(*v))
            .y_label_formatter(&|v| yf(*v))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(e)?;
        for s in &panel.series {
            let color = PALETTE[s.color % PALETTE.len()];
            let width = if s.thin { 1 } else { 2 };
            let style = color.stroke_width(width);
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), style))
                .map_err(e)?
                .label(s.label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width)));
            let r = if s.thin { 2 } else { 3 };
            chart.draw_series(s.points.iter().map(|&p| Circle::new(p, r, color.filled()))).map_err(e)?;
        }
        if !panel.series.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()
                .map_err(e)?;
        }
    }
    Ok(())
}

/// The report tool's memlog plot: one line per CSV (seconds since its first sample), RSS in the
/// top panel and the backend's allocated bytes in the bottom one (a file without backend columns
/// has no line there).
pub fn memlog_figure(files: &[(String, Vec<MemRow>)]) -> Vec<Panel> {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut rss = Vec::new();
    let mut alloc = Vec::new();
    for (i, (label, rows)) in files.iter().enumerate() {
        let t0 = rows.first().map(|r| r.unix_ms).unwrap_or(0);
        let t = |r: &MemRow| (r.unix_ms.saturating_sub(t0)) as f64 / 1000.0;
        rss.push(Series {
            label: label.clone(),
            color: i,
            thin: false,
            points: rows.iter().map(|r| (t(r), mib(r.rss_bytes))).collect(),
        });
        let a: Vec<(f64, f64)> =
            rows.iter().filter_map(|r| r.backend_allocated_bytes.map(|b| (t(r), mib(b)))).collect();
        if !a.is_empty() {
            alloc.push(Series { label: label.clone(), color: i, thin: false, points: a });
        }
    }
    vec![
        Panel {
            title: "RSS".into(),
            x_desc: "seconds".into(),
            y_desc: "MiB".into(),
            x_fmt: fmt_plain,
            y_fmt: fmt_plain,
            series: rss,
        },
        Panel {
            title: "backend allocated bytes".into(),
            x_desc: "seconds".into(),
            y_desc: "MiB".into(),
            x_fmt: fmt_plain,
            y_fmt: fmt_plain,
            series: alloc,
        },
    ]
}
