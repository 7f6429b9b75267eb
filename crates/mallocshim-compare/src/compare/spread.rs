//! The spread of a ratio across rounds and whether it can be told from noise: pure arithmetic
//! for the report. A ratio is the median of one configuration over the median of its baseline;
//! its spread is the min–max of the per-round ratios (each round's cell against the same round's
//! baseline cell, so drifts that hit both cancel). With 3–5 rounds a min–max range is what the
//! data can honestly give (a bootstrap interval over 3 values is no better informed). A ratio
//! whose range includes 1.0 is marked `~`: at this number of rounds it cannot be told from
//! noise. One round gives no range and no verdict on noise.

use mallocshim_format::stats::median;

/// The mark of a ratio that cannot be told from noise.
pub const NOISE_MARK: &str = "~";

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// median(configuration) / median(baseline).
    pub ratio: f64,
    /// The smallest and largest per-round ratio (equal to `ratio` with one round).
    pub min: f64,
    pub max: f64,
    /// Rounds in which both sides have a value.
    pub rounds: usize,
}

impl Spread {
    /// True when the rounds give a range and it includes 1.0.
    pub fn is_noise(&self) -> bool {
        self.rounds >= 2 && self.min <= 1.0 && self.max >= 1.0
    }

    /// `1.023 (0.981–1.060) ~`; with one round just `1.023`.
    pub fn render(&self) -> String {
        if self.rounds < 2 {
            return format!("{:.3}", self.ratio);
        }
        let mark = if self.is_noise() { format!(" {NOISE_MARK}") } else { String::new() };
        format!("{:.3} ({:.3}–{:.3}){mark}", self.ratio, self.min, self.max)
    }
}

/// The ratio of `a` over `b`, each a list of (round, value); rounds are paired by number.
/// None when either side is empty or the baseline's median is not positive.
pub fn spread(a: &[(u32, f64)], b: &[(u32, f64)]) -> Option<Spread> {
    let va: Vec<f64> = a.iter().map(|x| x.1).collect();
    let vb: Vec<f64> = b.iter().map(|x| x.1).collect();
    let (ma, mb) = (median(&va)?, median(&vb)?);
    if mb <= 0.0 {
        return None;
    }
    let ratio = ma / mb;
    let per_round: Vec<f64> = a
        .iter()
        .filter_map(|(r, x)| b.iter().find(|(rb, _)| rb == r).filter(|(_, y)| *y > 0.0).map(|(_, y)| x / y))
        .collect();
    let (min, max) = per_round.iter().fold((ratio, ratio), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    Some(Spread { ratio, min, max, rounds: per_round.len() })
}

/// A ratio cell of the report: the rendered spread, or `-`.
pub fn cell(a: &[(u32, f64)], b: &[(u32, f64)]) -> String {
    spread(a, b).map(|s| s.render()).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_and_mark() {
        let s = spread(&[(1, 110.0), (2, 120.0), (3, 100.0)], &[(1, 100.0), (2, 100.0), (3, 100.0)]).unwrap();
        assert!((s.ratio - 1.1).abs() < 1e-9);
        assert_eq!((s.min, s.max, s.rounds), (1.0, 1.2, 3));
        assert!(s.is_noise(), "a range that reaches 1.0 is noise");
        assert_eq!(s.render(), "1.100 (1.000–1.200) ~");
        let s = spread(&[(1, 110.0), (2, 120.0)], &[(1, 100.0), (2, 100.0)]).unwrap();
        assert!(!s.is_noise());
        assert_eq!(s.render(), "1.150 (1.100–1.200)");
    }

    #[test]
    fn rounds_pair_by_number() {
        // Round 2's baseline is slow too: its ratio is 1.0, not 2.0.
        let s = spread(&[(1, 100.0), (2, 200.0)], &[(2, 200.0), (1, 50.0)]).unwrap();
        assert_eq!((s.min, s.max), (1.0, 2.0));
        // A round missing on one side does not count.
        let s = spread(&[(1, 100.0), (2, 100.0)], &[(1, 50.0)]).unwrap();
        assert_eq!(s.rounds, 1);
        assert_eq!(s.render(), "2.000");
    }

    #[test]
    fn one_round_and_nothing() {
        let s = spread(&[(1, 90.0)], &[(1, 100.0)]).unwrap();
        assert!(!s.is_noise());
        assert_eq!(s.render(), "0.900");
        assert_eq!(cell(&[], &[(1, 1.0)]), "-");
        assert_eq!(cell(&[(1, 1.0)], &[(1, 0.0)]), "-");
    }
}
