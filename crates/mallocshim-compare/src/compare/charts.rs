//! The qps chart of a workload (qps_<workload>.png) through the shared plot code: with several
//! thread counts, one line per configuration against threads; with one thread count, one bar per
//! configuration on an axis from zero (the median over rounds, a whisker from the lowest to the
//! highest round), never two dots on a cut axis where a 7% difference fills the height. Draws
//! only; the numbers are the cells'.

use super::cli::Plan;
use super::results::Cell;
use crate::plot::{self, Panel, Series};
use mallocshim_format::stats::median;
use std::path::Path;

/// Half the width of a bar, in configuration slots.
const HALF_BAR: f64 = 0.3;

/// No tick labels on the configuration axis (the legend names the bars, left to right).
fn no_label(_: f64) -> String {
    String::new()
}

/// The outline of a bar from 0 to `v` at slot `x`, with a whisker from `lo` to `hi` up its middle:
/// one path, so one legend entry per configuration.
pub fn bar_path(x: f64, v: f64, lo: f64, hi: f64) -> Vec<(f64, f64)> {
    vec![
        (x - HALF_BAR, 0.0),
        (x - HALF_BAR, v),
        (x, v),
        (x, hi),
        (x, lo),
        (x, v),
        (x + HALF_BAR, v),
        (x + HALF_BAR, 0.0),
    ]
}

/// The chart's panel: lines against log2(threads), or bars with one thread count.
pub fn qps_panel(plan: &Plan, w: &str, cells: &[Cell]) -> Panel {
    let threads = &plan.args.threads;
    let shim_n = plan.configs.iter().filter(|c| !c.direct).count().max(1);
    let qps = |cfg: &str, t: u32| -> Vec<f64> {
        cells.iter().filter(|c| c.workload == w && c.config == cfg && c.threads == t).map(|c| c.qps).collect()
    };
    let bars = threads.len() == 1;
    let series: Vec<Series> = plan
        .configs
        .iter()
        .enumerate()
        .map(|(ci, cfg)| {
            let points = if bars {
                let v = qps(&cfg.name(), threads[0]);
                let lo = v.iter().copied().fold(f64::MAX, f64::min);
                let hi = v.iter().copied().fold(f64::MIN, f64::max);
                median(&v).map(|m| bar_path(ci as f64, m, lo, hi)).unwrap_or_default()
            } else {
                threads
                    .iter()
                    .filter_map(|&t| median(qps(&cfg.name(), t)).map(|q| ((t as f64).log2(), q)))
                    .collect()
            };
            Series { label: cfg.name(), color: ci % shim_n, thin: cfg.direct, points }
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if bars {
        Panel {
            title: format!(
                "{w}: qps at {} threads (bar: median over rounds; whisker: lowest to highest round)",
                threads[0]
            ),
            x_desc: "configuration (left to right as in the legend)".into(),
            y_desc: "queries/s".into(),
            x_fmt: no_label,
            y_fmt: plot::fmt_plain,
            series,
        }
    } else {
        Panel {
            title: format!("{w}: qps (median over rounds)"),
            x_desc: "sysbench threads".into(),
            y_desc: "queries/s".into(),
            x_fmt: plot::fmt_pow2,
            y_fmt: plot::fmt_plain,
            series,
        }
    }
}

/// Draws qps_<workload>.png.
pub fn qps(out: &Path, plan: &Plan, w: &str, cells: &[Cell]) -> Result<(), String> {
    plot::draw(out, &format!("qps: {w}"), &[qps_panel(plan, w, cells)])
}

#[cfg(test)]
mod tests {
    use super::bar_path;

    #[test]
    fn a_bar_stands_on_zero_with_its_whisker() {
        let p = bar_path(1.0, 100.0, 90.0, 120.0);
        assert_eq!(p.first(), Some(&(0.7, 0.0)));
        assert_eq!(p.last(), Some(&(1.3, 0.0)));
        let ys: Vec<f64> = p.iter().map(|x| x.1).collect();
        assert_eq!(ys.iter().copied().fold(f64::MAX, f64::min), 0.0, "the axis starts at zero");
        assert!(ys.contains(&90.0) && ys.contains(&120.0));
    }
}
