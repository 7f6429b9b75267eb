//! The scaling bench's chart (`--plot`): per mix, against the thread count (log2 axis), the
//! direct preload's CPU ns per pair, what the shim adds at all defaults and with routing only,
//! and, when measured, what it adds with every call timed (the latency path magnified) and what
//! the `--before` build adds. Drawn by the command's own chart code (`mallocshim_cli::plot`:
//! plotters, PNG or SVG by the file's extension). Draws only; reads the report's `cpu` rows.

use super::{Cell, Report};
use mallocshim_cli::plot::{self, Panel, Series};
use std::path::Path;

/// One series per backend for each configuration of `configs` (the first drawn thick).
fn series(cells: &[&Cell], configs: &[&str], value: fn(&Cell) -> Option<f64>) -> Vec<Series> {
    let mut backends: Vec<&str> = Vec::new();
    for c in cells {
        if !backends.contains(&c.backend.as_str()) {
            backends.push(&c.backend);
        }
    }
    let mut out = Vec::new();
    for (ci, cfg) in configs.iter().enumerate() {
        for (bi, b) in backends.iter().enumerate() {
            let points: Vec<(f64, f64)> = cells
                .iter()
                .filter(|c| c.backend == *b && c.config == *cfg)
                .filter_map(|c| value(c).map(|v| ((c.threads as f64).log2(), v)))
                .collect();
            if !points.is_empty() {
                out.push(Series { label: format!("{b} {cfg}"), color: bi, thin: ci > 0, points });
            }
        }
    }
    out
}

/// Draws the chart of `rep` into `out`; one line on error.
pub fn draw(out: &Path, rep: &Report) -> Result<(), String> {
    let mut mixes: Vec<&str> = Vec::new();
    for c in &rep.cells {
        if !mixes.contains(&c.mix.as_str()) {
            mixes.push(&c.mix);
        }
    }
    let mut panels = Vec::new();
    for mix in mixes {
        let cells: Vec<&Cell> = rep.cells.iter().filter(|c| c.mix == mix && c.metric == "cpu").collect();
        let panel = |title: String, y: &str, series: Vec<Series>| Panel {
            title,
            x_desc: "threads".into(),
            y_desc: y.into(),
            x_fmt: plot::fmt_pow2,
            y_fmt: plot::fmt_plain,
            series,
        };
        panels.push(panel(
            format!("mix {mix}: the allocator preloaded directly"),
            "CPU ns per malloc/free pair",
            series(&cells, &["direct"], |c| Some(c.ns_per_pair)),
        ));
        panels.push(panel(
            format!("mix {mix}: what the shim adds (thick: all defaults; thin: routing only)"),
            "ns added per pair",
            series(&cells, &["shim", "shim-profile-off"], |c| c.added_ns),
        ));
        for (what, kinds) in [
            ("every call timed", ["shim-every-call-timed", "before-every-call-timed"]),
            ("heap profiles at 8 KiB", ["shim-heap-8k", "before-heap-8k"]),
        ] {
            let s = series(&cells, &kinds, |c| c.added_ns);
            if !s.is_empty() {
                panels.push(panel(
                    format!("mix {mix}: {what} (thick: --shim, thin: --before)"),
                    "ns added per pair",
                    s,
                ));
            }
        }
    }
    let title = format!("Scaling without a server: {} ({} CPUs)", rep.machine, rep.cpus);
    plot::draw(out, &title, &panels)
}
