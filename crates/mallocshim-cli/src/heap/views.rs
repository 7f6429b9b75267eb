//! The text views of `mallocshim heap` over named stacks ([`Stacks`]): call sites (each
//! sample's first frame that is not an allocation wrapper), cumulative per function, the
//! callers' tree of the top sites, and the growth between two profiles. Formatting only.

use super::stacks::{Stack, Stacks};
use super::wrappers::Wrappers;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

pub use super::bytes;

/// Index in `s.frames` of the sample's call site: the first frame that is not a wrapper (the
/// outermost frame when all are).
pub fn site(s: &Stack, w: &Wrappers) -> usize {
    s.frames.iter().position(|f| !w.is_wrapper(f)).unwrap_or(s.frames.len() - 1)
}

/// Whether a frame has no name (`FILE+0xOFFSET`: no symbol covers it).
pub fn unnamed(f: &str) -> bool {
    f.rsplit_once("+0x")
        .is_some_and(|(file, off)| !file.contains(' ') && u64::from_str_radix(off, 16).is_ok())
}

/// For each unnamed call site, its label: the site followed by `<` and its first named caller
/// (the heaviest by `i` when samples differ), so the first screen names a function even for a
/// static function of a stripped binary: `mariadbd+0xd0aa7e < srv_start`.
pub fn labels(st: &Stacks, w: &Wrappers, i: usize) -> HashMap<Rc<str>, String> {
    let mut by: HashMap<Rc<str>, HashMap<Rc<str>, i64>> = HashMap::new();
    for s in &st.stacks {
        let at = site(s, w);
        if !unnamed(&s.frames[at]) {
            continue;
        }
        if let Some(c) = s.frames[at + 1..].iter().find(|f| !unnamed(f)) {
            *by.entry(s.frames[at].clone()).or_default().entry(c.clone()).or_default() += s.values[i];
        }
    }
    by.into_iter()
        .filter_map(|(k, cs)| {
            let best = cs.into_iter().max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))?;
            Some((k.clone(), format!("{k} < {}", best.0)))
        })
        .collect()
}

/// Per key, the summed values.
type Sums = HashMap<Rc<str>, Vec<i64>>;

/// Per call site (flat) or per function (cum: counted once per sample it is in).
pub fn sums(st: &Stacks, w: &Wrappers, cum: bool) -> Sums {
    let mut by: Sums = HashMap::new();
    for s in &st.stacks {
        let add = |by: &mut Sums, k: &Rc<str>| {
            let v = by.entry(k.clone()).or_insert_with(|| vec![0; st.types.len()]);
            for (a, x) in v.iter_mut().zip(&s.values) {
                *a += x;
            }
        };
        if cum {
            let mut seen = HashSet::new();
            for f in &s.frames[site(s, w)..] {
                if seen.insert(f.clone()) {
                    add(&mut by, f);
                }
            }
        } else {
            add(&mut by, &s.frames[site(s, w)]);
        }
    }
    by
}

fn total(st: &Stacks, i: usize) -> i64 {
    st.stacks.iter().map(|s| s.values.get(i).copied().unwrap_or(0)).sum()
}

fn fmt(index: &str, v: i64) -> String {
    if index.ends_with("space") {
        bytes(v)
    } else {
        v.to_string()
    }
}

/// The top `n` rows of `by` by `index`, with bytes, objects and % of the profile's total.
/// `of_rows`: % of the rows' sum (the samples `by` covers) instead of the profile's total.
/// `label`: how to show a key (unnamed sites with their caller, [`labels`]).
pub fn table(
    st: &Stacks,
    by: &Sums,
    label: &HashMap<Rc<str>, String>,
    index: &str,
    n: usize,
    what: &str,
    of_rows: bool,
) -> Result<String, String> {
    let kind = index.split('_').next().unwrap_or("inuse");
    let (i, ib, io) =
        (st.col(index)?, st.col(&format!("{kind}_space"))?, st.col(&format!("{kind}_objects"))?);
    let tot = if of_rows { by.values().map(|v| v[i]).sum() } else { total(st, i) };
    let mut rows: Vec<(&Rc<str>, &Vec<i64>)> = by.iter().filter(|(_, v)| v[i] != 0).collect();
    rows.sort_by(|a, b| b.1[i].cmp(&a.1[i]).then_with(|| a.0.cmp(b.0)));
    let mut o = format!("by {index} (total {}, {} {what}s):\n", fmt(index, tot), rows.len());
    o += &format!("{:>12} {:>12} {:>7}  {what}\n", format!("{kind} bytes"), "objects", "%");
    for (name, v) in rows.into_iter().take(n) {
        let pct = if tot != 0 { 100.0 * v[i] as f64 / tot as f64 } else { 0.0 };
        let name = label.get(name).map(String::as_str).unwrap_or(name);
        o += &format!("{:>12} {:>12} {:>6.1}%  {name}\n", bytes(v[ib]), v[io], pct);
    }
    Ok(o)
}

/// Per direct caller of a function matching one of `names` (globs; the innermost such frame of
/// each sample), the summed values of the samples through it; samples without one are left out.
pub fn callers_of(st: &Stacks, names: &[String]) -> Sums {
    let mut by: Sums = HashMap::new();
    for s in &st.stacks {
        let hit = s.frames.iter().position(|f| {
            let bare = f.split('(').next().unwrap_or(f);
            names.iter().any(|n| super::wrappers::glob(n, f) || super::wrappers::glob(n, bare))
        });
        let Some(caller) = hit.and_then(|j| s.frames.get(j + 1)) else { continue };
        let v = by.entry(caller.clone()).or_insert_with(|| vec![0; st.types.len()]);
        for (a, x) in v.iter_mut().zip(&s.values) {
            *a += x;
        }
    }
    by
}

/// Callers' tree node: value and callers by name.
#[derive(Default)]
struct Node {
    value: i64,
    callers: HashMap<Rc<str>, Node>,
}

fn print_node(o: &mut String, name: &str, node: &Node, tot: i64, depth: usize, max: usize, index: &str) {
    let pct = if tot != 0 { 100.0 * node.value as f64 / tot as f64 } else { 0.0 };
    *o += &format!("{:>12} {:>6.1}%  {}{name}\n", fmt(index, node.value), pct, "  ".repeat(depth));
    if depth + 1 >= max {
        return;
    }
    let mut kids: Vec<_> = node.callers.iter().collect();
    kids.sort_by(|a, b| b.1.value.cmp(&a.1.value).then_with(|| a.0.cmp(b.0)));
    for (k, c) in kids {
        if tot != 0 && c.value * 100 < tot {
            continue; // under 1% of the total
        }
        print_node(o, k, c, tot, depth + 1, max, index);
    }
}

/// The top `n` call sites, each followed by its callers (indented, outward), branches under 1%
/// of the total left out, at most `depth` levels.
pub fn tree(st: &Stacks, w: &Wrappers, index: &str, n: usize, depth: usize) -> Result<String, String> {
    let i = st.col(index)?;
    let mut roots: HashMap<Rc<str>, Node> = HashMap::new();
    for s in &st.stacks {
        let v = s.values[i];
        let from = site(s, w);
        let mut node = roots.entry(s.frames[from].clone()).or_default();
        node.value += v;
        for f in &s.frames[from + 1..] {
            node = node.callers.entry(f.clone()).or_default();
            node.value += v;
        }
    }
    let tot = total(st, i);
    let mut top: Vec<_> = roots.iter().filter(|(_, n)| n.value != 0).collect();
    top.sort_by(|a, b| b.1.value.cmp(&a.1.value).then_with(|| a.0.cmp(b.0)));
    let mut o = format!("call sites and their callers by {index} (total {}):\n", fmt(index, tot));
    let label = labels(st, w, i);
    for (name, node) in top.into_iter().take(n) {
        let name = label.get(name).map(String::as_str).unwrap_or(name);
        print_node(&mut o, name, node, tot, 0, depth.max(1), index);
    }
    Ok(o)
}

/// Per call site that changed from `base` to `cur` by `index`: (site, base value, current
/// value), top growers first (sites that shrank last).
pub fn growth_rows(
    base: &Stacks,
    cur: &Stacks,
    w: &Wrappers,
    index: &str,
) -> Result<Vec<(String, i64, i64)>, String> {
    let (ib, ic) = (base.col(index)?, cur.col(index)?);
    let mut all: HashMap<String, (i64, i64)> = HashMap::new();
    for (k, v) in sums(base, w, false) {
        all.entry(k.to_string()).or_default().0 = v[ib];
    }
    for (k, v) in sums(cur, w, false) {
        all.entry(k.to_string()).or_default().1 = v[ic];
    }
    let mut rows: Vec<_> =
        all.into_iter().filter(|(_, (b, c))| b != c).map(|(k, (b, c))| (k, b, c)).collect();
    rows.sort_by(|a, b| (b.2 - b.1).cmp(&(a.2 - a.1)).then_with(|| a.0.cmp(&b.0)));
    Ok(rows)
}

/// Growth from `base` to `cur` by `index`, as text.
pub fn growth(base: &Stacks, cur: &Stacks, w: &Wrappers, index: &str, n: usize) -> Result<String, String> {
    let rows = growth_rows(base, cur, w, index)?;
    let (mut label, i) = (labels(base, w, base.col(index)?), cur.col(index)?);
    label.extend(labels(cur, w, i));
    let sum: i64 = rows.iter().map(|(_, b, c)| c - b).sum();
    let mut o = format!(
        "growth by {index} from base (total {}, {} call sites changed):\n",
        fmt(index, sum),
        rows.len()
    );
    o += &format!("{:>12} {:>12} {:>12}  call site\n", "growth", "base", "profile");
    for (name, b, c) in rows.into_iter().take(n) {
        let name = label.get(name.as_str()).map(String::as_str).unwrap_or(&name);
        o += &format!("{:>12} {:>12} {:>12}  {name}\n", fmt(index, c - b), fmt(index, b), fmt(index, c));
    }
    Ok(o)
}

/// The folded stacks (`root;...;leaf value`, as inferno reads them) by `index`, the shim's
/// frames already gone; wrappers kept (a flame graph shows whole stacks).
pub fn folded(st: &Stacks, index: &str) -> Result<Vec<String>, String> {
    let i = st.col(index)?;
    let mut by: HashMap<String, i64> = HashMap::new();
    for s in &st.stacks {
        let key = s.frames.iter().rev().map(|f| f.replace(';', ":")).collect::<Vec<_>>().join(";");
        *by.entry(key).or_default() += s.values[i];
    }
    let mut lines: Vec<String> =
        by.into_iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k} {v}")).collect();
    lines.sort();
    Ok(lines)
}
