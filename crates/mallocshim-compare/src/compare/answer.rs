//! The run's answer: one headline line per comparison (each backend against glibc under the shim;
//! with --direct, the shim against the same allocator preloaded directly) giving qps, CPU per
//! query and peak RSS as a change with its 95% interval over paired rounds, in words when it
//! cannot be told from noise and how many rounds would resolve it (the rule that ends a run on
//! these intervals is `rounds`'s). A headline pools every
//! workload and thread count: per round, the mean of the cells' log-ratios (so each round gives
//! one paired value, see `spread`), then the t-interval over rounds. Pure logic over the measured
//! cells and runs; no I/O.

use super::results::{Cell, ServerRun};
use super::spread::{log_ratios, Interval, MAX_ROUNDS_ESTIMATE};
use std::collections::BTreeMap;

/// One metric of a headline.
pub struct Metric {
    pub name: &'static str,
    pub iv: Option<Interval>,
    /// The smallest and largest per-cell ratio (geometric mean over that cell's rounds), when
    /// more than one cell is pooled.
    pub cells: Option<(f64, f64)>,
}

/// One comparison: `jemalloc vs glibc` or `jemalloc: shim vs direct`.
pub struct Headline {
    pub label: String,
    pub metrics: Vec<Metric>,
    pub rounds: usize,
}

/// (round, value) pairs of one configuration in one cell.
type PerRound = Vec<(u32, f64)>;

fn pct(r: f64) -> String {
    format!("{:+.1}%", (r - 1.0) * 100.0)
}

/// The pooled interval of `f` for config `a` over `b` (per round: the mean log-ratio of the cells
/// both have), and the range of the per-cell ratios.
fn pooled(cells: &[Cell], a: &str, b: &str, f: fn(&Cell) -> f64) -> Metric {
    let mut keys: BTreeMap<(String, u32), (PerRound, PerRound)> = BTreeMap::new();
    for c in cells.iter().filter(|c| c.config == a || c.config == b) {
        let e = keys.entry((c.workload.clone(), c.threads)).or_default();
        let side = if c.config == a { &mut e.0 } else { &mut e.1 };
        side.push((c.round, f(c)));
    }
    let mut per_round: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    let mut cell_ratios = Vec::new();
    for (va, vb) in keys.values() {
        let logs = log_ratios(va, vb);
        if logs.is_empty() {
            continue;
        }
        cell_ratios.push((logs.iter().map(|x| x.1).sum::<f64>() / logs.len() as f64).exp());
        for (r, l) in logs {
            per_round.entry(r).or_default().push(l);
        }
    }
    let logs: Vec<f64> = per_round.values().map(|v| v.iter().sum::<f64>() / v.len() as f64).collect();
    let cells = (cell_ratios.len() > 1)
        .then(|| cell_ratios.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x))));
    Metric { name: "", iv: Interval::from_logs(&logs), cells }
}

/// Peak RSS of `a` over `b`, paired by round (one server run per configuration and round).
fn peak_rss(runs: &[ServerRun], a: &str, b: &str) -> Metric {
    let side = |c: &str| -> Vec<(u32, f64)> {
        runs.iter()
            .filter(|r| r.config == c)
            .filter_map(|r| r.peak_rss.map(|p| (r.round, p as f64)))
            .collect()
    };
    let logs: Vec<f64> = log_ratios(&side(a), &side(b)).into_iter().map(|x| x.1).collect();
    Metric { name: "peak RSS", iv: Interval::from_logs(&logs), cells: None }
}

/// The comparisons of a run: every backend but glibc against glibc (shim configurations, when
/// glibc is one), every `--variant` of a backend against that backend, and with --direct every
/// backend's shim against its direct preload.
pub fn headlines(
    backends: &[String],
    variants: &[String],
    direct: bool,
    cells: &[Cell],
    runs: &[ServerRun],
) -> Vec<Headline> {
    let mut pairs = Vec::new();
    if backends.iter().any(|b| b == "glibc") {
        for b in backends.iter().filter(|b| *b != "glibc") {
            pairs.push((format!("{b} vs glibc"), b.clone(), "glibc".to_string()));
        }
    }
    for v in variants {
        for b in backends {
            pairs.push((format!("{b}+{v} vs {b}"), format!("{b}+{v}"), b.clone()));
        }
    }
    if direct {
        for b in backends {
            pairs.push((format!("{b}: shim vs direct"), b.clone(), format!("{b}-direct")));
        }
    }
    pairs
        .into_iter()
        .map(|(label, a, b)| {
            let mut qps = pooled(cells, &a, &b, |c| c.qps);
            qps.name = "qps";
            let mut cpu = pooled(cells, &a, &b, |c| c.cpu_us_per_query);
            cpu.name = "CPU/query";
            let metrics = vec![qps, cpu, peak_rss(runs, &a, &b)];
            let rounds = metrics.iter().filter_map(|m| m.iv.map(|i| i.rounds)).max().unwrap_or(0);
            Headline { label, metrics, rounds }
        })
        .filter(|h| h.metrics.iter().any(|m| m.iv.is_some()))
        .collect()
}

/// How one metric reads: `qps -7.0% (95%: -9.1% to -4.8%)`, `same peak RSS (within ±0.6%)`,
/// `CPU/query +3.0% (95%: -2.9% to +9.3%): noise, ~9 rounds would tell`, or with one round
/// `qps -7.0%`.
fn phrase(m: &Metric, target_pct: f64) -> Option<String> {
    let iv = m.iv?;
    let cells = m.cells.map(|(lo, hi)| format!(" [cells {} to {}]", pct(lo), pct(hi))).unwrap_or_default();
    let Some(hw) = iv.half_width_pct() else {
        return Some(format!("{} {}{cells}", m.name, pct(iv.ratio)));
    };
    Some(if !iv.is_noise() {
        format!("{} {} (95%: {} to {}){cells}", m.name, pct(iv.ratio), pct(iv.lo), pct(iv.hi))
    } else if hw <= target_pct {
        format!("same {} (within ±{hw:.1}%){cells}", m.name)
    } else {
        let need = match iv.rounds_to_resolve(target_pct) {
            Some(n) => format!("~{n} rounds would tell"),
            None => format!("more than {MAX_ROUNDS_ESTIMATE} rounds would be needed"),
        };
        format!("{} {} (95%: {} to {}): noise, {need}{cells}", m.name, pct(iv.ratio), pct(iv.lo), pct(iv.hi))
    })
}

impl Headline {
    /// The one-line answer.
    pub fn render(&self, target_pct: f64) -> String {
        let parts: Vec<String> = self.metrics.iter().filter_map(|m| phrase(m, target_pct)).collect();
        let tail = if self.rounds < 2 {
            "; not distinguishable from noise in 1 round (no spread: run --rounds 3 or more, or --rounds auto)"
                .to_string()
        } else {
            format!("; {} rounds", self.rounds)
        };
        format!("{}: {}{tail}", self.label, parts.join(", "))
    }

    /// The widest half-width in percent of its intervals; None when one has no interval yet.
    pub fn widest_pct(&self) -> Option<f64> {
        self.metrics
            .iter()
            .filter(|m| m.iv.is_some())
            .try_fold(0f64, |w, m| m.iv.and_then(|iv| iv.half_width_pct()).map(|h| w.max(h)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(round: u32, config: &str, threads: u32, qps: f64, cpu: f64) -> Cell {
        Cell {
            round,
            config: config.into(),
            backend: config.trim_end_matches("-direct").into(),
            mode: if config.ends_with("-direct") { "direct" } else { "shim" }.into(),
            workload: "w".into(),
            threads,
            seconds: 1,
            qps,
            tps: qps,
            p95_ms: 1.0,
            errors: 0,
            queries: 1000,
            cpu_s: 1.0,
            cpu_us_per_query: cpu,
            allocs_per_query: None,
            frees_per_query: None,
            rss_bytes: 1,
            backend_allocated_bytes: None,
            dump: String::new(),
        }
    }

    fn run(round: u32, config: &str, peak: u64) -> ServerRun {
        ServerRun {
            round,
            config: config.into(),
            memlog: Default::default(),
            memlog_source: String::new(),
            last_dump: None,
            exit: String::new(),
            peak_rss: Some(peak),
        }
    }

    fn backends() -> Vec<String> {
        vec!["glibc".into(), "jemalloc".into()]
    }

    #[test]
    fn one_round_says_it_cannot_tell() {
        let cells = [cell(1, "glibc", 1, 1000.0, 10.0), cell(1, "jemalloc", 1, 930.0, 10.0)];
        let runs = [run(1, "glibc", 100 << 20), run(1, "jemalloc", 100 << 20)];
        let h = headlines(&backends(), &[], false, &cells, &runs);
        assert_eq!(h.len(), 1);
        assert_eq!(
            h[0].render(1.0),
            "jemalloc vs glibc: qps -7.0%, CPU/query +0.0%, peak RSS +0.0%; not distinguishable from noise in 1 round \
             (no spread: run --rounds 3 or more, or --rounds auto)"
        );
        assert_eq!(h[0].widest_pct(), None);
    }

    #[test]
    fn pooled_over_cells_paired_by_round() {
        // Two thread counts; round 2 is 10% slower for both configurations (a drift that
        // cancels). jemalloc's qps is -7% at 1 thread, -3% at 2 threads, in every round, so the
        // pooled log-ratio is the same each round: a zero-width interval at exp(mean).
        let mut cells = Vec::new();
        for r in 1..=3u32 {
            let d = if r == 2 { 0.9 } else { 1.0 };
            cells.push(cell(r, "glibc", 1, 1000.0 * d, 10.0));
            cells.push(cell(r, "glibc", 2, 2000.0 * d, 10.0));
            cells.push(cell(r, "jemalloc", 1, 930.0 * d, 10.0 + r as f64 * 0.5));
            cells.push(cell(r, "jemalloc", 2, 1940.0 * d, 10.0 - r as f64 * 0.5));
        }
        let runs: Vec<ServerRun> = (1..=3)
            .flat_map(|r| [run(r, "glibc", 100 << 20), run(r, "jemalloc", (100 << 20) + (r as u64) * 10_000)])
            .collect();
        let h = &headlines(&backends(), &[], false, &cells, &runs)[0];
        let qps = h.metrics[0].iv.unwrap();
        let want = ((0.93f64.ln() + 0.97f64.ln()) / 2.0).exp();
        assert!((qps.ratio - want).abs() < 1e-12 && (qps.lo - want).abs() < 1e-9, "{qps:?}");
        let (lo, hi) = h.metrics[0].cells.unwrap();
        assert!((lo - 0.93).abs() < 1e-12 && (hi - 0.97).abs() < 1e-12);
        let line = h.render(1.0);
        assert!(
            line.starts_with("jemalloc vs glibc: qps -5.0% (95%: -5.0% to -5.0%) [cells -7.0% to -3.0%]"),
            "{line}"
        );
        // CPU/query: +5%/-5%, +10%/-10%, +15%/-15% pool to 0.5 ln(1 - 0.0025 r^2) each round:
        // mean -0.00589, sd 0.00512, h = 4.303 sd / √3 = 0.0127
        assert!(
            line.contains(
                "CPU/query -0.6% (95%: -1.8% to +0.7%): noise, ~4 rounds would tell [cells -10.1% to +9.9%]"
            ),
            "{line}"
        );
        // RSS: +0.01% to +0.03% by round, an interval that includes 1 and is within ±1%
        assert!(line.contains("same peak RSS (within ±0.0%)"), "{line}");
        assert!(line.ends_with("; 3 rounds"), "{line}");
    }

    #[test]
    fn noise_in_words_with_rounds_to_resolve() {
        let cells: Vec<Cell> = [(1, 1.00), (2, 1.06), (3, 0.97)]
            .iter()
            .flat_map(|&(r, f)| [cell(r, "glibc", 1, 1000.0, 10.0), cell(r, "jemalloc", 1, 1000.0 * f, 10.0)])
            .collect();
        let h = &headlines(&backends(), &[], false, &cells, &[])[0];
        let iv = h.metrics[0].iv.unwrap();
        assert!(iv.is_noise());
        let n = iv.rounds_to_resolve(1.0).unwrap();
        let line = h.render(1.0);
        let hw = iv.half_width_pct().unwrap();
        assert!(
            line.starts_with(&format!(
                "jemalloc vs glibc: qps {:+.1}% (95%: {:+.1}% to {:+.1}%): noise, ~{n} rounds would tell",
                (iv.ratio - 1.0) * 100.0,
                (iv.lo - 1.0) * 100.0,
                (iv.hi - 1.0) * 100.0
            )),
            "{line}"
        );
        assert!(line.contains("same CPU/query (within ±0.0%)"), "{line}");
        assert!(!line.contains("peak RSS"), "no runs, no RSS: {line}");
        assert_eq!(h.widest_pct(), Some(hw));
    }

    #[test]
    fn shim_vs_direct_lines() {
        let cells = [
            cell(1, "glibc", 1, 1000.0, 10.0),
            cell(1, "glibc-direct", 1, 1010.0, 9.9),
            cell(1, "jemalloc", 1, 990.0, 10.0),
            cell(1, "jemalloc-direct", 1, 1000.0, 10.0),
        ];
        let labels: Vec<String> =
            headlines(&backends(), &[], true, &cells, &[]).into_iter().map(|h| h.label).collect();
        assert_eq!(labels, ["jemalloc vs glibc", "glibc: shim vs direct", "jemalloc: shim vs direct"]);
        // no glibc among the backends: no "vs glibc" line
        let only: Vec<String> = vec!["jemalloc".into()];
        assert!(headlines(&only, &[], false, &cells, &[]).is_empty());
    }

    #[test]
    fn a_variant_is_set_against_its_own_backend() {
        let cells = [
            cell(1, "glibc", 1, 1000.0, 10.0),
            cell(1, "glibc+thr", 1, 950.0, 10.5),
            cell(1, "jemalloc", 1, 990.0, 10.0),
            cell(1, "jemalloc+thr", 1, 990.0, 10.0),
        ];
        let h = headlines(&backends(), &["thr".to_string()], false, &cells, &[]);
        let labels: Vec<&str> = h.iter().map(|h| h.label.as_str()).collect();
        assert_eq!(labels, ["jemalloc vs glibc", "glibc+thr vs glibc", "jemalloc+thr vs jemalloc"]);
        assert!(h[1].render(1.0).starts_with("glibc+thr vs glibc: qps -5.0%"), "{}", h[1].render(1.0));
    }
}
