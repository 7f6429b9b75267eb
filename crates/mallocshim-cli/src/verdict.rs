//! The verdict behind `mallocshim diagnose`: pure logic from memlog rows (and optionally two
//! dumps) to one of *live heap growth*, *retained by the allocator*, *outside malloc* or
//! *steady*, with the numbers behind it. No I/O here; thresholds are the constants below and
//! are documented in docs/memory-account.md ("The verdict").

use crate::pfs::PsThreads;
use mallocshim_format::memlog::MemRow;
use mallocshim_format::Dump;
use std::collections::BTreeMap;

/// A rise counts as growth when it is above this fraction of the window's peak RSS ...
pub const GROWTH_FRAC: f64 = 0.05;
/// ... and above this many bytes (16 MiB).
pub const GROWTH_MIN_BYTES: u64 = 16 << 20;
/// A fitted line must explain at least this share of the variance (R²) for the rise to be
/// "steady" growth rather than noise.
pub const GROWTH_MIN_R2: f64 = 0.6;
/// Allocator-free bytes are "large" at or above this fraction of the last RSS ...
pub const RETAINED_FRAC: f64 = 0.10;
/// ... and at or above this many bytes (16 MiB).
pub const RETAINED_MIN_BYTES: u64 = 16 << 20;
/// Rows needed (with the account columns).
pub const MIN_ROWS: usize = 3;
/// The rise must persist to the window's end: the line fitted to the last `TAIL_FRAC` of the
/// window (at least [`MIN_ROWS`] rows) must rise at no less than `TAIL_PACE` of the whole
/// window's fitted pace. A step up at 28–72% of the window followed by a plateau fits a line
/// with R² up to 0.75 (3p(1-p) for a step at p) but its tail is flat: a level, not growth.
pub const TAIL_FRAC: f64 = 0.25;
/// See [`TAIL_FRAC`].
pub const TAIL_PACE: f64 = 0.25;

/// Which situation the window shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    LiveHeapGrowth,
    Retained,
    OutsideMalloc,
    Steady,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::LiveHeapGrowth => "live heap growth",
            Kind::Retained => "retained by the allocator",
            Kind::OutsideMalloc => "outside malloc",
            Kind::Steady => "steady",
        }
    }
}

/// A least-squares line through one column: bytes per second and its fitted rise over the window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    pub bytes_per_s: f64,
    /// slope × window length, bytes (negative when falling).
    pub rise_bytes: f64,
    pub r2: f64,
    pub first: u64,
    pub last: u64,
    /// Bytes per second of the line fitted to the window's last [`TAIL_FRAC`] (the persistence
    /// rule, [`grows`]).
    pub tail_bytes_per_s: f64,
}

/// The verdict and its numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub kind: Kind,
    /// Other situations that also hold (printed as "also").
    pub also: Vec<Kind>,
    pub rows: usize,
    pub window_s: f64,
    pub peak_rss: u64,
    pub last: MemRow,
    pub live: Fit,
    pub non_heap: Fit,
    pub rss: Fit,
    /// The growth threshold for this window: max(GROWTH_FRAC × peak RSS, GROWTH_MIN_BYTES).
    pub growth_threshold: u64,
    /// The retained threshold: max(RETAINED_FRAC × last RSS, RETAINED_MIN_BYTES).
    pub retained_threshold: u64,
}

/// Least squares of `ys` over `xs` (seconds).
pub fn fit(xs: &[f64], ys: &[u64]) -> Fit {
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().map(|&y| y as f64).sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (&x, &y) in xs.iter().zip(ys) {
        let (dx, dy) = (x - mx, y as f64 - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = if sxx > 0.0 && syy > 0.0 { sxy * sxy / (sxx * syy) } else { 0.0 };
    let span = xs.last().unwrap_or(&0.0) - xs.first().unwrap_or(&0.0);
    Fit {
        bytes_per_s: slope,
        rise_bytes: slope * span,
        r2,
        first: *ys.first().unwrap_or(&0),
        last: *ys.last().unwrap_or(&0),
        tail_bytes_per_s: slope,
    }
}

/// [`fit`], with `tail_bytes_per_s` from the rows in the window's last [`TAIL_FRAC`] (at least
/// the last [`MIN_ROWS`]).
pub fn fit_with_tail(xs: &[f64], ys: &[u64]) -> Fit {
    let mut f = fit(xs, ys);
    let end = xs.last().copied().unwrap_or(0.0);
    let span = end - xs.first().copied().unwrap_or(0.0);
    let from = xs.iter().position(|&x| x >= end - TAIL_FRAC * span).unwrap_or(0);
    let from = from.min(xs.len().saturating_sub(MIN_ROWS));
    f.tail_bytes_per_s = fit(&xs[from..], &ys[from..]).bytes_per_s;
    f
}

/// Growth: a fitted rise above `threshold` that explains the data, a last value above the
/// first by half the threshold, and a rise that persists to the window's end ([`TAIL_FRAC`]).
pub fn grows(f: &Fit, threshold: u64) -> bool {
    f.rise_bytes > threshold as f64
        && f.r2 >= GROWTH_MIN_R2
        && f.last.saturating_sub(f.first) > threshold / 2
        && f.tail_bytes_per_s >= TAIL_PACE * f.bytes_per_s
}

/// The verdict for a memlog's rows. Errors (one line) when fewer than [`MIN_ROWS`] rows carry
/// the account columns (live_bytes, allocator_free_bytes, non_heap_bytes).
pub fn diagnose(rows: &[MemRow]) -> Result<Verdict, String> {
    let rows: Vec<&MemRow> = rows
        .iter()
        .filter(|r| r.live_bytes.is_some() && r.allocator_free_bytes.is_some() && r.non_heap_bytes.is_some())
        .collect();
    if rows.len() < MIN_ROWS {
        return Err(format!(
            "{} rows with the RSS account columns (live_bytes, allocator_free_bytes, non_heap_bytes); need at least {MIN_ROWS}",
            rows.len()
        ));
    }
    let t0 = rows[0].unix_ms;
    let xs: Vec<f64> = rows.iter().map(|r| r.unix_ms.saturating_sub(t0) as f64 / 1000.0).collect();
    let col = |f: fn(&MemRow) -> u64| rows.iter().map(|r| f(r)).collect::<Vec<u64>>();
    let live = fit_with_tail(&xs, &col(|r| r.live_bytes.unwrap_or(0)));
    let non_heap = fit_with_tail(&xs, &col(|r| r.non_heap_bytes.unwrap_or(0)));
    let rss = fit_with_tail(&xs, &col(|r| r.rss_bytes));
    let peak_rss = rows.iter().map(|r| r.rss_bytes).max().unwrap_or(0);
    let last = (*rows.last().unwrap()).clone();
    let growth_threshold = ((GROWTH_FRAC * peak_rss as f64) as u64).max(GROWTH_MIN_BYTES);
    let retained_threshold = ((RETAINED_FRAC * last.rss_bytes as f64) as u64).max(RETAINED_MIN_BYTES);

    let mut found = Vec::new();
    let live_grows = grows(&live, growth_threshold);
    if live_grows {
        found.push(Kind::LiveHeapGrowth);
    }
    if !live_grows && last.allocator_free_bytes.unwrap_or(0) >= retained_threshold {
        found.push(Kind::Retained);
    }
    if grows(&non_heap, growth_threshold) {
        found.push(Kind::OutsideMalloc);
    }
    let kind = found.first().copied().unwrap_or(Kind::Steady);
    let also = found.iter().skip(1).copied().collect();
    Ok(Verdict {
        kind,
        also,
        rows: rows.len(),
        window_s: *xs.last().unwrap(),
        peak_rss,
        last,
        live,
        non_heap,
        rss,
        growth_threshold,
        retained_threshold,
    })
}

/// Bytes held per key between two dumps: (key, held in the earlier, held in the later, allocations
/// in the interval), sorted by growth, largest first; only keys whose held bytes grew.
pub type Growth = Vec<(String, i128, i128, i128)>;

/// Held bytes (allocated minus freed) per size class of a dump, and allocation counts.
fn class_held(d: &Dump) -> BTreeMap<String, (i128, i128)> {
    let mut m: BTreeMap<String, (i128, i128)> = BTreeMap::new();
    for c in &d.size_classes {
        let key = match c.max_bytes {
            Some(max) => format!("[{}, {}] B", c.min_bytes, max),
            None => format!(">= {} B", c.min_bytes),
        };
        let e = m.entry(key).or_default();
        if c.op == "free" {
            e.0 -= c.bytes as i128;
        } else {
            e.0 += c.bytes as i128;
            e.1 += c.count as i128;
        }
    }
    m
}

/// Held bytes and allocation counts per thread role of a dump: the performance_schema NAME of
/// a live thread when `ps` has its tid, else its start routine (or comm when none).
fn thread_held(d: &Dump, ps: Option<&PsThreads>) -> BTreeMap<String, (i128, i128)> {
    let mut m: BTreeMap<String, (i128, i128)> = BTreeMap::new();
    for t in &d.threads {
        let named = ps
            .filter(|_| t.state == mallocshim_format::dump::STATE_LIVE)
            .and_then(|p| p.get(&t.tid))
            .map(|p| p.name.clone());
        let key = named.or_else(|| t.start_routine.clone().filter(|s| !s.is_empty())).unwrap_or_else(|| {
            if t.comm.is_empty() {
                t.name.clone()
            } else {
                t.comm.clone()
            }
        });
        let e = m.entry(key).or_default();
        for (op, o) in &t.ops {
            if op == "free" {
                e.0 -= o.bytes as i128;
            } else {
                e.0 += o.bytes as i128;
                e.1 += o.count as i128;
            }
        }
    }
    m
}

fn growth(a: BTreeMap<String, (i128, i128)>, b: BTreeMap<String, (i128, i128)>) -> Growth {
    let mut v: Growth = b
        .into_iter()
        .map(|(k, (held, n))| {
            let (h0, n0) = a.get(&k).copied().unwrap_or((0, 0));
            (k, h0, held, n - n0)
        })
        .filter(|(_, h0, h1, _)| h1 > h0)
        .collect();
    v.sort_by_key(|(_, h0, h1, _)| std::cmp::Reverse(h1 - h0));
    v
}

/// Size classes whose held bytes grew from `a` to `b` (the later dump).
pub fn class_growth(a: &Dump, b: &Dump) -> Growth {
    growth(class_held(a), class_held(b))
}

/// Thread roles (performance_schema names with `ps`, else start routines) whose held bytes
/// grew from `a` to `b`.
pub fn thread_growth(a: &Dump, b: &Dump, ps: Option<&PsThreads>) -> Growth {
    growth(thread_held(a, ps), thread_held(b, ps))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn row(s: u64, rss: u64, live: u64, free: u64, non_heap: u64) -> MemRow {
        MemRow {
            unix_ms: 1_000_000 + s * 1000,
            rss_bytes: rss * MIB,
            live_bytes: Some(live * MIB),
            allocator_free_bytes: Some(free * MIB),
            non_heap_bytes: Some(non_heap * MIB),
            ..Default::default()
        }
    }

    #[test]
    fn retained_when_live_falls_and_free_is_large() {
        let rows: Vec<_> =
            (0..10).map(|s| if s < 3 { row(s, 220, 200, 5, 10) } else { row(s, 215, 20, 180, 10) }).collect();
        let v = diagnose(&rows).unwrap();
        assert_eq!(v.kind, Kind::Retained, "{v:?}");
    }

    #[test]
    fn growth_when_live_rises_steadily() {
        let rows: Vec<_> = (0..10).map(|s| row(s, 50 + 10 * s, 40 + 10 * s, 2, 5)).collect();
        let v = diagnose(&rows).unwrap();
        assert_eq!(v.kind, Kind::LiveHeapGrowth, "{v:?}");
        assert!((v.live.bytes_per_s - 10.0 * MIB as f64).abs() < 1.0, "{v:?}");
    }

    #[test]
    fn outside_when_non_heap_rises() {
        let rows: Vec<_> = (0..10).map(|s| row(s, 50 + 10 * s, 30, 2, 15 + 10 * s)).collect();
        assert_eq!(diagnose(&rows).unwrap().kind, Kind::OutsideMalloc);
    }

    #[test]
    fn steady_when_flat_and_small_rise_is_not_growth() {
        let rows: Vec<_> = (0..10).map(|s| row(s, 100, 60 + s, 3, 30)).collect();
        let v = diagnose(&rows).unwrap();
        assert_eq!(v.kind, Kind::Steady, "{v:?}");
        assert!(v.also.is_empty());
    }

    #[test]
    fn too_few_rows_or_no_account_is_an_error() {
        assert!(diagnose(&[row(0, 1, 1, 1, 1), row(1, 1, 1, 1, 1)]).is_err());
        let old: Vec<_> = (0..5).map(|s| MemRow { unix_ms: s, ..Default::default() }).collect();
        assert!(diagnose(&old).is_err());
    }

    /// A step at share `p` of a 100-row window, then a plateau to the end: never growth
    /// (issue 37 item 6), whatever the R² of the whole-window line (0.75 at p = 0.5).
    #[test]
    fn one_step_then_plateau_is_not_growth() {
        for p in [0.2, 0.28, 0.35, 0.4, 0.5, 0.6, 0.65, 0.72, 0.8] {
            let at = (p * 100.0) as u64;
            let rows: Vec<_> = (0..100)
                .map(|s| if s < at { row(s, 300, 40, 5, 30) } else { row(s, 500, 240, 5, 30) })
                .collect();
            let v = diagnose(&rows).unwrap();
            assert_ne!(v.kind, Kind::LiveHeapGrowth, "step at {p}: {v:?}");
            // Also for non-heap memory (a buffer pool that warmed up, then stayed).
            let rows: Vec<_> = (0..100)
                .map(|s| if s < at { row(s, 300, 40, 5, 30) } else { row(s, 500, 40, 5, 230) })
                .collect();
            assert_ne!(diagnose(&rows).unwrap().kind, Kind::OutsideMalloc, "non-heap step at {p}");
        }
    }

    /// Growth that goes on to the end still reads as growth: a line with noise, two steps of a
    /// staircase that keeps climbing, and a rise that slows but does not stop.
    #[test]
    fn rise_to_the_end_is_growth() {
        let noisy: Vec<_> = (0..100).map(|s| row(s, 100 + 2 * s, 40 + 2 * s + (s * 7 % 5), 2, 5)).collect();
        assert_eq!(diagnose(&noisy).unwrap().kind, Kind::LiveHeapGrowth);
        let stairs: Vec<_> = (0..100).map(|s| row(s, 100 + 2 * s, 40 + 20 * (s / 10), 2, 5)).collect();
        assert_eq!(diagnose(&stairs).unwrap().kind, Kind::LiveHeapGrowth);
        let slowing: Vec<_> =
            (0..100).map(|s| row(s, 300, 40 + (((s as f64).sqrt()) * 30.0) as u64, 2, 5)).collect();
        assert_eq!(diagnose(&slowing).unwrap().kind, Kind::LiveHeapGrowth, "{:?}", diagnose(&slowing));
    }

    #[test]
    fn fit_is_exact_on_a_line() {
        let f = fit(&[0.0, 1.0, 2.0], &[10, 20, 30]);
        assert_eq!((f.bytes_per_s, f.rise_bytes, f.r2), (10.0, 20.0, 1.0));
    }
}
