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
/// one path, so one legend entry per configuration. It starts and ends half a slot out along the
/// zero line, so the outer bars keep a margin from the chart's edges.
pub fn bar_path(x: f64, v: f64, lo: f64, hi: f64) -> Vec<(f64, f64)> {
    vec![
        (x - 0.5, 0.0),
        (x - HALF_BAR, 0.0),
        (x - HALF_BAR, v),
        (x, v),
        (x, hi),
        (x, lo),
        (x, v),
        (x + HALF_BAR, v),
        (x + HALF_BAR, 0.0),
        (x + 0.5, 0.0),
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
    use super::super::cli::{Args, Config, Plan, Workload};
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: Args,
    }

    fn plan(threads: &str) -> Plan {
        let args = Cmd::parse_from(["x", "--out", "/nonexistent", "--threads", threads]).args;
        let configs = ["glibc", "jemalloc"].map(|b| Config::plain(b, false)).to_vec();
        let workloads = vec![Workload::Builtin("w".into())];
        Plan { args, shim: "s".into(), mysqld: "m".into(), configs, workloads, envs: vec![] }
    }

    fn cell(config: &str, threads: u32, round: u32, qps: f64) -> Cell {
        Cell {
            round,
            config: config.into(),
            backend: config.into(),
            mode: "shim".into(),
            workload: "w".into(),
            threads,
            seconds: 1,
            qps,
            tps: qps,
            p95_ms: 1.0,
            errors: 0,
            queries: 1,
            cpu_s: 1.0,
            cpu_us_per_query: 1.0,
            allocs_per_query: None,
            frees_per_query: None,
            rss_bytes: 1,
            backend_allocated_bytes: None,
            dump: String::new(),
        }
    }

    #[test]
    fn one_thread_count_draws_bars_from_zero_several_draw_lines() {
        // 30000 against 32000 qps: on a cut axis two dots, 7% filling the height.
        let cells = [
            cell("glibc", 8, 1, 32000.0),
            cell("glibc", 8, 2, 31000.0),
            cell("glibc", 8, 3, 33000.0),
            cell("jemalloc", 8, 1, 30000.0),
            cell("jemalloc", 8, 2, 29500.0),
            cell("jemalloc", 8, 3, 30500.0),
        ];
        let p = qps_panel(&plan("8"), "w", &cells);
        assert_eq!(p.series.len(), 2);
        for (i, (s, (med, lo, hi))) in
            p.series.iter().zip([(32000.0, 31000.0, 33000.0), (30000.0, 29500.0, 30500.0)]).enumerate()
        {
            assert_eq!(s.points, bar_path(i as f64, med, lo, hi), "{}", s.label);
        }
        assert!(p.title.contains("at 8 threads") && p.title.contains("bar: median"), "{}", p.title);
        // two thread counts: one line per configuration, median qps against log2(threads)
        let mut more = cells.to_vec();
        more.push(cell("glibc", 2, 1, 9000.0));
        more.push(cell("jemalloc", 2, 1, 8000.0));
        let p = qps_panel(&plan("2,8"), "w", &more);
        assert_eq!(p.series[0].points, [(1.0, 9000.0), (3.0, 32000.0)]);
        assert_eq!(p.series[1].points, [(1.0, 8000.0), (3.0, 30000.0)]);
    }

    #[test]
    fn a_bar_stands_on_zero_with_its_whisker() {
        let p = bar_path(1.0, 100.0, 90.0, 120.0);
        assert_eq!(p.first(), Some(&(0.5, 0.0)));
        assert_eq!(p.last(), Some(&(1.5, 0.0)));
        assert!(p.contains(&(0.7, 100.0)) && p.contains(&(1.3, 100.0)), "the bar's top: {p:?}");
        let ys: Vec<f64> = p.iter().map(|x| x.1).collect();
        assert_eq!(ys.iter().copied().fold(f64::MAX, f64::min), 0.0, "the axis starts at zero");
        assert!(ys.contains(&90.0) && ys.contains(&120.0));
    }
}
