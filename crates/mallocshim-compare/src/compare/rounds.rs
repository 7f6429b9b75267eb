//! How long a run goes: `--rounds N` or `--rounds auto` (with `--target-pct`, `--max-rounds`) and
//! `--budget-s`, parsed, and the rule applied after each round (`stop_after`) on the widest
//! half-width of the answer's headline intervals (`answer`). Pure logic; the runner (mod.rs)
//! measures the time and the intervals and asks.

/// `--rounds`: a fixed count, or `auto`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rounds {
    Fixed(u32),
    Auto,
}

pub fn parse_rounds(s: &str) -> Result<Rounds, String> {
    match s {
        "auto" => Ok(Rounds::Auto),
        _ => match s.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(Rounds::Fixed(n)),
            _ => Err("want a number of rounds (1 or more) or `auto`".into()),
        },
    }
}

pub fn parse_pct(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x < 100.0 => Ok(x),
        _ => Err("want a percentage above 0 and below 100, e.g. 1 or 0.5".into()),
    }
}

impl super::cli::Args {
    /// The rounds of a full run: the fixed count, or auto's cap.
    pub fn max_rounds(&self) -> u32 {
        match self.rounds {
            Rounds::Fixed(n) => n,
            Rounds::Auto => self.max_rounds,
        }
    }

    /// The rule that ends the run (`answer::stop_after`).
    pub fn policy(&self) -> Policy {
        Policy {
            fixed: match self.rounds {
                Rounds::Fixed(n) => Some(n),
                Rounds::Auto => None,
            },
            min_rounds: 3,
            max_rounds: self.max_rounds,
            target_pct: self.target_pct,
            budget_s: self.budget_s.map(|b| b as f64),
        }
    }
}

/// How many rounds a run makes.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// `--rounds N`; None for `--rounds auto`.
    pub fixed: Option<u32>,
    /// auto: never stop before this many rounds.
    pub min_rounds: u32,
    /// auto: `--max-rounds`.
    pub max_rounds: u32,
    /// auto: `--target-pct`, the half-width every headline interval must reach.
    pub target_pct: f64,
    /// `--budget-s`: no round is started that would end after it (at the mean round time so far).
    pub budget_s: Option<f64>,
}

/// Why a run stopped adding rounds.
#[derive(Clone, Debug, PartialEq)]
pub enum Stop {
    /// The fixed number of rounds asked for.
    Asked(u32),
    /// auto: every headline interval within ±target (the widest, in percent).
    Narrow(f64),
    /// auto: --max-rounds reached (the widest half-width then, if known).
    Cap(u32, Option<f64>),
    /// The time budget: another round (its expected seconds) would end after it.
    Budget(f64, f64),
}

impl Stop {
    pub fn render(&self, p: &Policy) -> String {
        let w = |x: Option<f64>| x.map(|x| format!("±{x:.1}%")).unwrap_or_else(|| "unknown".into());
        match self {
            Stop::Asked(n) => format!("the {n} round(s) asked for (--rounds {n})"),
            Stop::Narrow(x) => {
                format!("every headline interval is within ±{:.1}% (widest ±{x:.1}%)", p.target_pct)
            }
            Stop::Cap(n, x) => format!(
                "the round cap (--max-rounds {n}) before every headline interval reached ±{:.1}% (widest {})",
                p.target_pct,
                w(*x)
            ),
            Stop::Budget(b, r) => {
                format!("the time budget (--budget-s {b:.0}): another round (~{r:.0} s) would overrun it")
            }
        }
    }
}

/// After `done` rounds, in `elapsed_s` seconds so far of which `rounds_s` for the rounds
/// themselves, with the widest headline half-width (None: some interval unknown): why to stop,
/// or None to run another round.
pub fn stop_after(p: &Policy, done: u32, elapsed_s: f64, rounds_s: f64, widest: Option<f64>) -> Option<Stop> {
    match p.fixed {
        Some(n) if done >= n => return Some(Stop::Asked(n)),
        None if done >= p.min_rounds && widest.is_some_and(|w| w <= p.target_pct) => {
            return Some(Stop::Narrow(widest.unwrap_or(0.0)))
        }
        None if done >= p.max_rounds => return Some(Stop::Cap(p.max_rounds, widest)),
        _ => {}
    }
    let per_round = if done > 0 { rounds_s / done as f64 } else { 0.0 };
    match p.budget_s {
        Some(b) if done > 0 && elapsed_s + per_round > b => Some(Stop::Budget(b, per_round)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto() -> Policy {
        Policy { fixed: None, min_rounds: 3, max_rounds: 10, target_pct: 1.0, budget_s: None }
    }

    #[test]
    fn the_stop_rule() {
        let fixed = Policy { fixed: Some(3), ..auto() };
        assert_eq!(stop_after(&fixed, 2, 100.0, 100.0, Some(0.1)), None, "fixed: narrow does not stop it");
        assert_eq!(stop_after(&fixed, 3, 150.0, 150.0, Some(50.0)), Some(Stop::Asked(3)));
        // auto: not before min_rounds, then when the widest is within the target
        assert_eq!(stop_after(&auto(), 2, 100.0, 100.0, Some(0.5)), None);
        assert_eq!(stop_after(&auto(), 3, 150.0, 150.0, Some(0.9)), Some(Stop::Narrow(0.9)));
        assert_eq!(stop_after(&auto(), 3, 150.0, 150.0, Some(1.1)), None);
        assert_eq!(stop_after(&auto(), 3, 150.0, 150.0, None), None, "an unknown interval is not narrow");
        assert_eq!(stop_after(&auto(), 10, 500.0, 500.0, Some(2.0)), Some(Stop::Cap(10, Some(2.0))));
        // budget: 3 rounds of 100 s each after 20 s of preparation; another would end at 420 s
        let b = Policy { budget_s: Some(400.0), ..auto() };
        assert_eq!(stop_after(&b, 3, 320.0, 300.0, Some(5.0)), Some(Stop::Budget(400.0, 100.0)));
        assert_eq!(stop_after(&b, 2, 220.0, 200.0, Some(5.0)), None, "320 s fits");
        let b = Policy { budget_s: Some(400.0), ..fixed };
        assert_eq!(
            stop_after(&b, 2, 330.0, 300.0, None),
            Some(Stop::Budget(400.0, 150.0)),
            "budget caps fixed rounds too"
        );
        assert!(Stop::Budget(400.0, 150.0).render(&b).contains("--budget-s 400"));
        assert!(Stop::Narrow(0.9).render(&auto()).contains("within ±1.0% (widest ±0.9%)"));
    }
}
