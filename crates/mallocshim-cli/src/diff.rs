//! `mallocshim diff`: two JSON dumps. Of one process (same pid and start), the interval between
//! them (calls/s, interval p50/p99 from the subtracted buckets; see `interval`); of two
//! processes, side by side — per op and size class, calls and p50/p99 of each and the ratios
//! B/A, each marked as one round (no spread); memory of each. Reads through the format crate.

use crate::table::{describe, heading, mib, opt, pct, ratio, Align, Format, Table};
use mallocshim_format::classes::{op_rank, range_label};
use mallocshim_format::{ClassRow, Dump};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
#[command(
    about = "Two mallocshim JSON dumps: the interval between two dumps of one process, else side by side",
    long_about = "Two mallocshim JSON dumps A and B. When both are dumps of one process (same \
                  pid and start time), the interval from the earlier to the later: elapsed time \
                  (from unix_time_ms), per op and size class calls and calls/s (exact counts) \
                  and interval p50/p99 latency (ns, from the subtracted sampled buckets), the \
                  same per live thread, and RSS at both ends.\n\n\
                  Otherwise side by side: per op and size class, calls and \
                  p50/p99 latency (ns) of each side and the ratios B/A (above 1.00: B is slower); \
                  then memory (MiB) of each. A row present in only one dump shows \"-\" for the \
                  other side; a row without samples shows \"-\" for its percentiles. Latencies are \
                  sampled (1 call in sample_every): a ratio of two single dumps has no spread, and \
                  a latency ratio is marked ~ when a side has fewer than 50 sampled calls or the two \
                  percentiles lie within one latency bucket of each other (it cannot be told from \
                  noise); `mallocshim compare` repeats rounds and gives each ratio its \
                  spread.\n\n\
                  Exit status: 0 on success, 2 on any error (one line, prefixed \"mallocshim diff:\").",
    after_help = "Example:\n  mallocshim diff glibc.json jemalloc.json --labels glibc,jemalloc"
)]
pub struct Args {
    /// Dump A (the baseline).
    #[arg(value_name = "A.json")]
    pub a: PathBuf,
    /// Dump B (compared against A).
    #[arg(value_name = "B.json")]
    pub b: PathBuf,
    /// Names for A and B in the column headers, as "A,B" (default "<backend>:<pid>" of each).
    #[arg(long, value_name = "A,B")]
    pub labels: Option<String>,
    /// Output format: aligned plain-text columns, or GitHub-flavoured Markdown tables.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Said of every ratio of a side-by-side diff: one dump against one dump.
pub const NOISE: &str = "noise: one round (one dump each side): a ratio of two single values has no spread; \
a latency ratio marked ~ cannot be told apart even within these dumps (a side has fewer than 50 sampled \
calls, or the two percentiles lie within one latency bucket, 1/8 of a power of two, of each other); \
repeat rounds with `mallocshim compare` for min-max spreads";

/// Sampled calls below which a side's percentile is too coarse to compare.
const MIN_SAMPLES: u64 = 50;

/// A latency ratio B/A (see [`crate::table::ratio`]), with `~` appended when it cannot be told
/// from noise: a side with fewer than [`MIN_SAMPLES`] samples, or the two values within one
/// latency bucket of each other (ratio inside [2^-1/8, 2^1/8]: buckets are log-linear, 8 per
/// power of two, so a percentile is known to one bucket).
fn lat_ratio(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> String {
    let r = ratio(a, b);
    match (a, b) {
        (Some((sa, va)), Some((sb, vb))) if r != "-" => {
            let q = vb as f64 / va as f64;
            let step = 2f64.powf(1.0 / 8.0);
            let noise = sa.min(sb) < MIN_SAMPLES || (q <= step * 1.0001 && q >= 1.0 / step / 1.0001);
            if noise {
                format!("{r}~")
            } else {
                r
            }
        }
        _ => r,
    }
}

fn rank(op: &str) -> (usize, String) {
    let (i, s) = op_rank(op);
    (i, s.to_string())
}

pub fn run(args: &Args) -> Result<String, String> {
    let a = Dump::read(&args.a).map_err(|e| e.to_string())?;
    let b = Dump::read(&args.b).map_err(|e| e.to_string())?;
    let labels = match &args.labels {
        Some(s) => match s.split_once(',') {
            Some((x, y)) if !x.trim().is_empty() && !y.trim().is_empty() && !y.contains(',') => {
                (x.trim().to_string(), y.trim().to_string())
            }
            _ => return Err(format!("--labels wants two non-empty names \"A,B\", got {s:?}")),
        },
        None => (format!("{}:{}", a.backend, a.pid), format!("{}:{}", b.backend, b.pid)),
    };
    if crate::interval::same_process(&a, &b) || crate::interval::same_process(&b, &a) {
        return Ok(interval_view(&a, &args.a, &b, &args.b, args.format));
    }
    Ok(tables(&a, &args.a, &b, &args.b, labels, args.format))
}

/// Two dumps of one process: the interval from the earlier to the later.
fn interval_view(a: &Dump, pa: &Path, b: &Dump, pb: &Path, fmt: Format) -> String {
    let ((a, pa), (b, pb)) = if a.uptime_s <= b.uptime_s { ((a, pa), (b, pb)) } else { ((b, pb), (a, pa)) };
    let mut o = String::new();
    let title = format!(
        "mallocshim interval: process {} ({}), {:.3}s from uptime {:.1}s to {:.1}s",
        b.pid,
        b.backend,
        b.unix_time_ms.saturating_sub(a.unix_time_ms) as f64 / 1000.0,
        a.uptime_s,
        b.uptime_s
    );
    let sep = if fmt == Format::Markdown { "\n\n" } else { "\n" };
    match fmt {
        Format::Text => o.push_str(&format!("{title}\n")),
        Format::Markdown => o.push_str(&format!("## {title}\n\n")),
    }
    o.push_str(&format!("from: {}{sep}to:   {}{sep}", pa.display(), pb.display()));
    if b.latency_buckets.bucket_ns.is_empty() {
        o.push_str(&format!(
            "note: these dumps carry no latency buckets (older shim): interval percentiles are \"-\"{sep}"
        ));
    }
    if fmt == Format::Text {
        o.push('\n');
    }
    crate::interval::render(&crate::interval::interval(a, b), fmt, usize::MAX, &mut o);
    o
}

fn tables(a: &Dump, pa: &Path, b: &Dump, pb: &Path, labels: (String, String), fmt: Format) -> String {
    let (la, lb) = labels;
    let mut o = String::new();
    let title = format!("mallocshim dumps: A = {la}, B = {lb} (ratios B/A; above 1.00 means B is slower)");
    match fmt {
        Format::Text => o.push_str(&format!("{title}\n")),
        Format::Markdown => o.push_str(&format!("## {title}\n\n")),
    }
    let sep = if fmt == Format::Markdown { "\n\n" } else { "\n" };
    o.push_str(&format!("A: {} ({}){sep}", describe(a), pa.display()));
    o.push_str(&format!("B: {} ({}){sep}", describe(b), pb.display()));
    if a.sample_every != b.sample_every {
        o.push_str(&format!(
            "note: sampling differs (1 in {} against 1 in {}); percentiles are still comparable, sampled counts are not{sep}",
            a.sample_every, b.sample_every
        ));
    }
    o.push_str(&format!("{NOISE}{sep}"));
    if fmt == Format::Text {
        o.push('\n');
    }

    type Key = ((usize, String), u64, Option<u64>);
    let mut rows: BTreeMap<Key, (Option<&ClassRow>, Option<&ClassRow>)> = BTreeMap::new();
    for r in &a.size_classes {
        rows.entry((rank(&r.op), r.min_bytes, r.max_bytes)).or_default().0 = Some(r);
    }
    for r in &b.size_classes {
        rows.entry((rank(&r.op), r.min_bytes, r.max_bytes)).or_default().1 = Some(r);
    }
    let h = |what: &str, l: &str| format!("{what} {l}");
    let (c_a, c_b, p50a, p50b, p99a, p99b) =
        (h("calls", &la), h("calls", &lb), h("p50", &la), h("p50", &lb), h("p99", &la), h("p99", &lb));
    let mut t = Table::new(&[
        ("op", Align::Left),
        ("size", Align::Right),
        (&c_a, Align::Right),
        (&c_b, Align::Right),
        (&p50a, Align::Right),
        (&p50b, Align::Right),
        ("p50 B/A", Align::Right),
        (&p99a, Align::Right),
        (&p99b, Align::Right),
        ("p99 B/A", Align::Right),
    ]);
    for (((_, op), min, max), (ra, rb)) in &rows {
        let p50 = |r: Option<&ClassRow>| r.map(|r| (r.sampled, r.p50_ns));
        let p99 = |r: Option<&ClassRow>| r.map(|r| (r.sampled, r.p99_ns));
        t.row(vec![
            op.clone(),
            range_label(*min, *max),
            opt(ra.map(|r| r.count)),
            opt(rb.map(|r| r.count)),
            opt(ra.map(|r| pct(r.sampled, r.p50_ns))),
            opt(rb.map(|r| pct(r.sampled, r.p50_ns))),
            lat_ratio(p50(*ra), p50(*rb)),
            opt(ra.map(|r| pct(r.sampled, r.p99_ns))),
            opt(rb.map(|r| pct(r.sampled, r.p99_ns))),
            lat_ratio(p99(*ra), p99(*rb)),
        ]);
    }
    heading(fmt, "calls and latency (ns) by op and size class", &mut o);
    t.render(fmt, &mut o);

    o.push('\n');
    memory_table(a, b, (&la, &lb), fmt, &mut o);
    o
}

/// Memory of A and B side by side, in MiB, with B/A.
fn memory_table(a: &Dump, b: &Dump, (la, lb): (&str, &str), fmt: Format, o: &mut String) {
    heading(fmt, "memory (MiB)", o);
    let mut t =
        Table::new(&[("", Align::Left), (la, Align::Right), (lb, Align::Right), ("B/A", Align::Right)]);
    let (ma, mb) = (&a.memory, &b.memory);
    for (name, x, y) in [
        ("rss", ma.rss_bytes, mb.rss_bytes),
        ("vsz", ma.vsz_bytes, mb.vsz_bytes),
        ("backend allocated", ma.backend_allocated_bytes, mb.backend_allocated_bytes),
        ("backend resident", ma.backend_resident_bytes, mb.backend_resident_bytes),
        ("backend free", ma.backend_free_bytes, mb.backend_free_bytes),
    ] {
        t.row(vec![name.into(), mib(x), mib(y), ratio(Some((1, x)), Some((1, y)))]);
    }
    t.render(fmt, o);
}

#[cfg(test)]
mod tests {
    use super::lat_ratio;

    #[test]
    fn latency_ratios_marked_when_noise() {
        // Well sampled and two buckets apart or more: no mark.
        assert_eq!(lat_ratio(Some((1000, 100)), Some((1000, 120))), "1.20");
        assert_eq!(lat_ratio(Some((1000, 100)), Some((1000, 80))), "0.80");
        // Within one bucket (2^(1/8) = 1.09): marked, either way.
        assert_eq!(lat_ratio(Some((1000, 100)), Some((1000, 109))), "1.09~");
        assert_eq!(lat_ratio(Some((1000, 100)), Some((1000, 92))), "0.92~");
        // Few samples on either side: marked however large the ratio.
        assert_eq!(lat_ratio(Some((49, 100)), Some((1000, 300))), "3.00~");
        assert_eq!(lat_ratio(Some((1000, 100)), Some((10, 300))), "3.00~");
        // No ratio: no mark.
        assert_eq!(lat_ratio(Some((0, 0)), Some((1000, 300))), "-");
        assert_eq!(lat_ratio(None, Some((1000, 300))), "-");
    }
}
