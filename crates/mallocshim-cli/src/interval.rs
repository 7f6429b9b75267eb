//! The interval between two dumps of one process: exact call counts and sampled latency
//! buckets of the later dump minus the earlier one, as calls/s and interval p50/p99 per op and
//! size class and per thread. Shared by `diff` (two dumps of one process) and `top`. Pure: no I/O.

use crate::table::{heading, mib, Align, Format, Table};
use mallocshim_format::classes::{op_rank, range_label};
use mallocshim_format::{Buckets, Dump};
use std::collections::BTreeMap;

/// True when B is a later dump of the same process as A (same pid, same start, B strictly later;
/// a dump against itself is no interval).
pub fn same_process(a: &Dump, b: &Dump) -> bool {
    let start = |d: &Dump| d.unix_time_ms as f64 / 1000.0 - d.uptime_s;
    a.pid == b.pid && (start(a) - start(b)).abs() < 2.0 && b.uptime_s > a.uptime_s
}

/// B's buckets minus A's (a bucket that shrank counts 0: it cannot, in one process).
pub fn sub_buckets(a: &Buckets, b: &Buckets) -> Buckets {
    let old: BTreeMap<usize, u64> = a.iter().copied().collect();
    b.iter()
        .map(|&(i, n)| (i, n.saturating_sub(old.get(&i).copied().unwrap_or(0))))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// The q-quantile (0..1) of raw buckets in ns, from each bucket's value; None without samples.
pub fn quantile(b: &Buckets, bucket_ns: &[u64], q: f64) -> Option<u64> {
    let mut v = b.clone();
    v.sort();
    let total: u64 = v.iter().map(|x| x.1).sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as u64).max(1);
    let mut cum = 0;
    for (i, n) in v {
        cum += n;
        if cum >= rank {
            return bucket_ns.get(i).copied();
        }
    }
    None
}

/// One row of the interval: calls, bytes, samples and percentiles over the interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub calls: u64,
    pub bytes: u64,
    pub sampled: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
}

fn row(bucket_ns: &[u64], calls: u64, bytes: u64, d: &Buckets) -> Row {
    Row {
        calls,
        bytes,
        sampled: d.iter().map(|x| x.1).sum(),
        p50_ns: quantile(d, bucket_ns, 0.50),
        p99_ns: quantile(d, bucket_ns, 0.99),
    }
}

/// A size-class row's key: ((op rank, op), min bytes, max bytes), in the shim's order.
pub type ClassKey = ((usize, String), u64, Option<u64>);

/// The interval from dump A to the later dump B of the same process.
#[derive(Debug)]
pub struct Interval {
    pub elapsed_s: f64,
    /// ((op rank, op), min bytes, max bytes) -> row; rows without calls in the interval are left out.
    pub classes: BTreeMap<ClassKey, Row>,
    /// (tid, name, op) -> row, live threads of B only.
    pub threads: Vec<(u32, String, String, Row)>,
    pub rss_bytes: (u64, u64),
    pub live_bytes: (u64, u64),
}

pub fn interval(a: &Dump, b: &Dump) -> Interval {
    let ns = &b.latency_buckets.bucket_ns;
    let elapsed_s = b.unix_time_ms.saturating_sub(a.unix_time_ms) as f64 / 1000.0;
    let mut classes = BTreeMap::new();
    for rb in &b.size_classes {
        let ra = a
            .size_classes
            .iter()
            .find(|r| r.op == rb.op && r.min_bytes == rb.min_bytes && r.max_bytes == rb.max_bytes);
        let (calls, bytes, d) = match ra {
            Some(ra) => (
                rb.count.saturating_sub(ra.count),
                rb.bytes.saturating_sub(ra.bytes),
                sub_buckets(&ra.buckets, &rb.buckets),
            ),
            None => (rb.count, rb.bytes, rb.buckets.clone()),
        };
        if calls > 0 {
            let (i, op) = op_rank(&rb.op);
            classes.insert(((i, op.to_string()), rb.min_bytes, rb.max_bytes), row(ns, calls, bytes, &d));
        }
    }
    let mut threads = Vec::new();
    for tb in b.threads.iter().filter(|t| t.is_live()) {
        // A tid reused by a new thread is a new thread: match on the start time too.
        let ta =
            a.threads.iter().find(|t| t.tid == tb.tid && t.start_unix_ms == tb.start_unix_ms && t.is_live());
        for (op, ob) in &tb.ops {
            let (calls, bytes, d) = match ta.and_then(|t| t.ops.get(op)) {
                Some(oa) => (
                    ob.count.saturating_sub(oa.count),
                    ob.bytes.saturating_sub(oa.bytes),
                    sub_buckets(&oa.buckets, &ob.buckets),
                ),
                None => (ob.count, ob.bytes, ob.buckets.clone()),
            };
            if calls > 0 {
                threads.push((tb.tid, tb.name.clone(), op.clone(), row(ns, calls, bytes, &d)));
            }
        }
    }
    threads.sort_by(|x, y| y.3.calls.cmp(&x.3.calls).then(x.0.cmp(&y.0)).then(x.2.cmp(&y.2)));
    Interval {
        elapsed_s,
        classes,
        threads,
        rss_bytes: (a.memory.rss_bytes, b.memory.rss_bytes),
        live_bytes: (a.memory.live_bytes, b.memory.live_bytes),
    }
}

/// `n` per second over `s` seconds, whole; `-` for an empty interval.
pub fn rate(n: u64, s: f64) -> String {
    if s > 0.0 {
        format!("{:.0}", n as f64 / s)
    } else {
        "-".into()
    }
}

fn ns(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// A size-class row's cells over `s` seconds: op, size, the calls when `with_calls`, calls/s,
/// sampled, p50 and p99 in ns (`mallocshim top` leaves the count out).
pub fn class_row(op: &str, size: String, r: &Row, s: f64, with_calls: bool) -> Vec<String> {
    let mut row = vec![op.to_string(), size];
    if with_calls {
        row.push(r.calls.to_string());
    }
    row.extend([rate(r.calls, s), r.sampled.to_string(), ns(r.p50_ns), ns(r.p99_ns)]);
    row
}

/// A thread row's cells over `s` seconds: tid, thread name, op, calls/s, p50 and p99 in ns.
pub fn thread_row(tid: u32, name: String, op: &str, r: &Row, s: f64) -> Vec<String> {
    vec![tid.to_string(), name, op.to_string(), rate(r.calls, s), ns(r.p50_ns), ns(r.p99_ns)]
}

/// The interval's tables: by op and size class, by thread (at most `max_threads` rows), memory.
pub fn render(iv: &Interval, fmt: Format, max_threads: usize, o: &mut String) {
    let s = iv.elapsed_s;
    let mut t = Table::new(&[
        ("op", Align::Left),
        ("size", Align::Right),
        ("calls", Align::Right),
        ("calls/s", Align::Right),
        ("sampled", Align::Right),
        ("p50", Align::Right),
        ("p99", Align::Right),
    ]);
    for (((_, op), min, max), r) in &iv.classes {
        t.row(class_row(op, range_label(*min, *max), r, s, true));
    }
    heading(fmt, &format!("interval of {s:.3}s: calls and latency (ns) by op and size class"), o);
    t.render(fmt, o);
    o.push('\n');
    let mut t = Table::new(&[
        ("tid", Align::Right),
        ("thread", Align::Left),
        ("op", Align::Left),
        ("calls/s", Align::Right),
        ("p50", Align::Right),
        ("p99", Align::Right),
    ]);
    for (tid, name, op, r) in iv.threads.iter().take(max_threads) {
        t.row(thread_row(*tid, name.clone(), op, r, s));
    }
    heading(fmt, "interval by thread (live threads, busiest first)", o);
    t.render(fmt, o);
    if iv.threads.len() > max_threads {
        o.push_str(&format!("({} more thread rows)\n", iv.threads.len() - max_threads));
    }
    o.push('\n');
    heading(fmt, "memory (MiB)", o);
    let mut t = Table::new(&[("", Align::Left), ("start", Align::Right), ("end", Align::Right)]);
    t.row(vec!["rss".into(), mib(iv.rss_bytes.0), mib(iv.rss_bytes.1)]);
    t.row(vec!["live".into(), mib(iv.live_bytes.0), mib(iv.live_bytes.1)]);
    t.render(fmt, o);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtracts_and_takes_quantiles() {
        let a: Buckets = vec![(1, 10), (3, 5)];
        let b: Buckets = vec![(1, 10), (3, 105), (5, 1)];
        let d = sub_buckets(&a, &b);
        assert_eq!(d, vec![(3, 100), (5, 1)]);
        let ns = [0, 10, 20, 30, 40, 50];
        assert_eq!(quantile(&d, &ns, 0.5), Some(30));
        assert_eq!(quantile(&d, &ns, 0.99), Some(30));
        assert_eq!(quantile(&d, &ns, 1.0), Some(50));
        assert_eq!(quantile(&vec![], &ns, 0.5), None);
    }
}
