//! The 95% interval of a ratio from paired rounds, and whether it can be told from noise: pure
//! arithmetic for the report, the headline and `--rounds auto`. Every round runs every
//! configuration on the same dataset, so a ratio (a configuration over its baseline) is measured
//! once per round, each round's cell against the same round's baseline cell (a drift of the
//! machine that hits both within a round cancels). The estimate is the geometric mean of the
//! per-round ratios; its interval is Student's t-interval of the mean of the per-round log-ratios,
//! exponentiated (`exp(m ± t(0.975, n-1) · s / √n)`), so it is symmetric in percent up and down
//! and never negative. A ratio whose interval includes 1.0 is marked `~`: it cannot be told from
//! noise with these rounds. One round gives no interval and no verdict on noise. No I/O here.

/// The mark of a ratio that cannot be told from noise.
pub const NOISE_MARK: &str = "~";

/// Rounds beyond which [`Interval::rounds_to_resolve`] gives up ("more than this").
pub const MAX_ROUNDS_ESTIMATE: usize = 1000;

/// Student's t quantile 0.975 for 1..=30 degrees of freedom (the usual table, 3 decimals).
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/// t(0.975, df): the table up to 30, beyond it the Cornish–Fisher expansion around the normal
/// quantile (within 0.001 of the exact value from df 30 on). NaN for df 0.
pub fn t975(df: usize) -> f64 {
    if df == 0 {
        return f64::NAN;
    }
    if df <= T975.len() {
        return T975[df - 1];
    }
    let (z, v) = (1.959_964f64, df as f64);
    z + (z.powi(3) + z) / (4.0 * v) + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
}

/// A ratio with its 95% interval over paired rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// The geometric mean of the per-round ratios.
    pub ratio: f64,
    /// The interval's bounds (both equal to `ratio` with one round).
    pub lo: f64,
    pub hi: f64,
    /// Rounds in which both sides have a positive value.
    pub rounds: usize,
    /// The standard deviation of the per-round log-ratios (0 with one round).
    pub sd: f64,
}

impl Interval {
    /// From the per-round log-ratios; None for none (or a non-finite one).
    pub fn from_logs(logs: &[f64]) -> Option<Interval> {
        let n = logs.len();
        if n == 0 || logs.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let m = logs.iter().sum::<f64>() / n as f64;
        if n == 1 {
            let r = m.exp();
            return Some(Interval { ratio: r, lo: r, hi: r, rounds: 1, sd: 0.0 });
        }
        let var = logs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
        let sd = var.sqrt();
        let h = t975(n - 1) * sd / (n as f64).sqrt();
        Some(Interval { ratio: m.exp(), lo: (m - h).exp(), hi: (m + h).exp(), rounds: n, sd })
    }

    /// True when there is an interval and it includes 1.0.
    pub fn is_noise(&self) -> bool {
        self.rounds >= 2 && self.lo <= 1.0 && self.hi >= 1.0
    }

    /// The half-width in percent (the larger side: `hi/ratio - 1`); None with one round.
    pub fn half_width_pct(&self) -> Option<f64> {
        (self.rounds >= 2).then(|| (self.hi / self.ratio - 1.0) * 100.0)
    }

    /// Roughly how many rounds would resolve this ratio at the spread observed: the fewest
    /// rounds n (at least 2) whose interval, `t(n-1) · sd / √n`, either excludes 1 at the
    /// observed ratio or is within ±`target_pct`. None with one round (no spread yet) or beyond
    /// [`MAX_ROUNDS_ESTIMATE`].
    pub fn rounds_to_resolve(&self, target_pct: f64) -> Option<usize> {
        if self.rounds < 2 {
            return None;
        }
        let need = self.ratio.ln().abs().max((1.0 + target_pct / 100.0).ln());
        (2..=MAX_ROUNDS_ESTIMATE).find(|&n| t975(n - 1) * self.sd / (n as f64).sqrt() < need)
    }

    /// `1.023 (0.981–1.060) ~`; with one round just `1.023`.
    pub fn render(&self) -> String {
        if self.rounds < 2 {
            return format!("{:.3}", self.ratio);
        }
        let mark = if self.is_noise() { format!(" {NOISE_MARK}") } else { String::new() };
        format!("{:.3} ({:.3}–{:.3}){mark}", self.ratio, self.lo, self.hi)
    }
}

/// The per-round log-ratios of `a` over `b`, each a list of (round, value), paired by round
/// number; a round missing or not positive on either side does not count.
pub fn log_ratios(a: &[(u32, f64)], b: &[(u32, f64)]) -> Vec<(u32, f64)> {
    a.iter()
        .filter(|(_, x)| *x > 0.0)
        .filter_map(|(r, x)| b.iter().find(|(rb, y)| rb == r && *y > 0.0).map(|(_, y)| (*r, (x / y).ln())))
        .collect()
}

/// The interval of the ratio `a` over `b` over paired rounds.
pub fn paired(a: &[(u32, f64)], b: &[(u32, f64)]) -> Option<Interval> {
    let logs: Vec<f64> = log_ratios(a, b).into_iter().map(|x| x.1).collect();
    Interval::from_logs(&logs)
}

/// A ratio cell of the report: the rendered interval, or `-`.
pub fn cell(a: &[(u32, f64)], b: &[(u32, f64)]) -> String {
    paired(a, b).map(|s| s.render()).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, eps: f64) -> bool {
        (a - b).abs() <= eps
    }

    #[test]
    fn t_table_and_expansion() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(2), 4.303);
        assert_eq!(t975(30), 2.042);
        // exact values: 2.021 (40), 2.009 (50), 1.984 (100), 1.962 (1000)
        for (df, t) in [(40, 2.021), (50, 2.009), (100, 1.984), (1000, 1.962)] {
            assert!(close(t975(df), t, 0.001), "t975({df}) = {}", t975(df));
        }
        assert!(t975(0).is_nan());
    }

    #[test]
    fn known_interval() {
        // log-ratios 0.0, 0.1, 0.2: mean 0.1, sd 0.1, n 3, t 4.303: h = 0.248431...
        let iv = Interval::from_logs(&[0.0, 0.1, 0.2]).unwrap();
        let h = 4.303 * 0.1 / 3f64.sqrt();
        assert!(close(iv.ratio, 0.1f64.exp(), 1e-12));
        assert!(close(iv.lo, (0.1 - h).exp(), 1e-12) && close(iv.hi, (0.1 + h).exp(), 1e-12));
        assert!(close(iv.sd, 0.1, 1e-12));
        assert!(iv.is_noise(), "0.862..1.417 includes 1");
        assert_eq!(iv.render(), "1.105 (0.862–1.417) ~");
        // the same through paired values: 100/100, 110.517/100, 122.140/100
        let a = [(1, 100.0), (2, 100.0 * 0.1f64.exp()), (3, 100.0 * 0.2f64.exp())];
        let b = [(3, 100.0), (1, 100.0), (2, 100.0)];
        assert_eq!(paired(&a, &b).unwrap().render(), iv.render());
    }

    #[test]
    fn a_clear_difference_is_not_noise() {
        // 0.93, 0.94, 0.92, 0.93: about -7%, tight.
        let a: Vec<(u32, f64)> =
            [93.0, 94.0, 92.0, 93.0].iter().enumerate().map(|(i, &x)| (i as u32, x)).collect();
        let b: Vec<(u32, f64)> = (0..4).map(|i| (i, 100.0)).collect();
        let iv = paired(&a, &b).unwrap();
        assert!(!iv.is_noise() && iv.hi < 1.0 && iv.lo > 0.9, "{iv:?}");
        assert!(iv.half_width_pct().unwrap() < 1.5);
        // resolved with 3 rounds already at this spread (2 would not: t(1) = 12.7)
        assert_eq!(iv.rounds_to_resolve(1.0), Some(3));
    }

    #[test]
    fn rounds_to_resolve_from_the_spread() {
        // sd 0.05, observed ratio 1.0 (no effect): bounding it within ±1% needs
        // t(n-1)·0.05/√n < ln 1.01 = 0.00995, i.e. n ≈ (1.97·0.05/0.00995)^2 ≈ 98.
        let iv = Interval { ratio: 1.0, lo: 0.9, hi: 1.1, rounds: 3, sd: 0.05 };
        let n = iv.rounds_to_resolve(1.0).unwrap();
        assert!((96..=101).contains(&n), "{n}");
        let h = |n: usize| t975(n - 1) * 0.05 / (n as f64).sqrt();
        assert!(h(n) < 1.01f64.ln() && h(n - 1) >= 1.01f64.ln());
        // an observed -7% with that spread: t(n-1)·0.05/√n < |ln 0.93| = 0.0726 from n = 5
        // (n 4: 3.182·0.05/2 = 0.0796; n 5: 2.776·0.05/√5 = 0.0621)
        let iv = Interval { ratio: 0.93, lo: 0.8, hi: 1.05, rounds: 3, sd: 0.05 };
        assert_eq!(iv.rounds_to_resolve(1.0), Some(5));
        // hopeless, and unknown with one round
        let iv = Interval { ratio: 1.0, lo: 0.5, hi: 2.0, rounds: 3, sd: 2.0 };
        assert_eq!(iv.rounds_to_resolve(1.0), None);
        assert_eq!(Interval::from_logs(&[0.1]).unwrap().rounds_to_resolve(1.0), None);
    }

    #[test]
    fn rounds_pair_by_number() {
        // Round 2's baseline is slow too: its ratio is 1.0, not 2.0.
        let logs = log_ratios(&[(1, 100.0), (2, 200.0)], &[(2, 200.0), (1, 50.0)]);
        assert_eq!(logs, [(1, 2f64.ln()), (2, 0.0)]);
        // A round missing (or zero) on one side does not count.
        let iv = paired(&[(1, 100.0), (2, 100.0), (3, 5.0)], &[(1, 50.0), (3, 0.0)]).unwrap();
        assert_eq!(iv.rounds, 1);
        assert_eq!(iv.render(), "2.000");
    }

    #[test]
    fn one_round_and_nothing() {
        let s = paired(&[(1, 90.0)], &[(1, 100.0)]).unwrap();
        assert!(!s.is_noise());
        assert_eq!(s.half_width_pct(), None);
        assert_eq!(s.render(), "0.900");
        assert_eq!(cell(&[], &[(1, 1.0)]), "-");
        assert_eq!(cell(&[(1, 1.0)], &[(1, 0.0)]), "-");
        assert!(Interval::from_logs(&[]).is_none());
    }
}
