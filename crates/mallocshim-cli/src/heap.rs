//! `mallocshim heap`: the top call sites of a heap profile (`mallocshim.<pid>.<seq>.pb.gz`,
//! gzip'ed profile.proto, read through the format crate's `pprof` schema), or the growth between
//! two profiles of one process. A call site is a sample's innermost frame: its function name
//! when the profile resolved it, else its raw address and mapping's file. Pure reading; no
//! symbolization of its own.

use mallocshim_format::pprof::Profile;
use std::collections::HashMap;
use std::path::PathBuf;

/// The sample types of a mallocshim (and Go) heap profile.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
#[allow(clippy::enum_variant_names)]
pub enum Index {
    #[value(name = "inuse_space")]
    InuseSpace,
    #[value(name = "alloc_space")]
    AllocSpace,
    #[value(name = "inuse_objects")]
    InuseObjects,
    #[value(name = "alloc_objects")]
    AllocObjects,
}

impl Index {
    fn name(self) -> &'static str {
        match self {
            Index::InuseSpace => "inuse_space",
            Index::AllocSpace => "alloc_space",
            Index::InuseObjects => "inuse_objects",
            Index::AllocObjects => "alloc_objects",
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(
    about = "Top call sites of a heap profile (.pb.gz), or the growth between two",
    long_about = "Print the top call sites of a mallocshim heap profile (gzip'ed profile.proto, \
                  MALLOCSHIM_DUMP_FORMATS=pprof): by inuse space and by alloc space, each with \
                  bytes, objects and % of the profile's total. A call site is the innermost frame \
                  (the function that called malloc or operator new): its function name where the \
                  profile resolved it, else its raw address and the mapping's file. Figures are \
                  the profile's unbiased estimates from sampling (MALLOCSHIM_PROF_SAMPLE_BYTES).\n\n\
                  With BASE, prints the growth from BASE to PROFILE per call site (the difference \
                  of the sample index, inuse_space unless --sample-index), top growers first.\n\n\
                  Exit status: 0 on success, 2 on any error (one line, prefixed \"mallocshim heap:\").",
    after_help = "Examples:\n  mallocshim heap mallocshim.1234.3.pb.gz --top 20\n  \
                  mallocshim heap mallocshim.1234.9.pb.gz mallocshim.1234.3.pb.gz"
)]
pub struct Args {
    /// The heap profile.
    #[arg(value_name = "PROFILE.pb.gz")]
    pub profile: PathBuf,
    /// An earlier profile of the same process: print the growth from it to PROFILE.
    #[arg(value_name = "BASE.pb.gz")]
    pub base: Option<PathBuf>,
    /// Call sites per table.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Rank by this sample type only (default: inuse_space and alloc_space tables; with BASE,
    /// inuse_space).
    #[arg(long, value_enum, value_name = "INDEX")]
    pub sample_index: Option<Index>,
}

/// The values of each call site, in the profile's sample-type order.
struct Sites {
    types: Vec<String>,
    by_site: HashMap<String, Vec<i64>>,
}

/// The name of the location `id`: innermost function, else address and mapping file.
fn site_name(p: &Profile, id: u64) -> String {
    let Some(loc) = p.location.iter().find(|l| l.id == id) else { return format!("[location {id}]") };
    if let Some(name) = loc
        .line
        .first()
        .and_then(|l| p.function.iter().find(|f| f.id == l.function_id))
        .map(|f| p.str(f.name))
        .filter(|n| !n.is_empty())
    {
        return name.to_string();
    }
    let file = p
        .mapping
        .iter()
        .find(|m| m.id == loc.mapping_id)
        .map(|m| p.str(m.filename).rsplit('/').next().unwrap_or("").to_string())
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| "?".into());
    format!("{:#x} ({file})", loc.address)
}

fn sites(p: &Profile) -> Sites {
    let types: Vec<String> = p.sample_type.iter().map(|t| p.str(t.r#type).to_string()).collect();
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut by_site: HashMap<String, Vec<i64>> = HashMap::new();
    for s in &p.sample {
        let Some(&leaf) = s.location_id.first() else { continue };
        let name = names.entry(leaf).or_insert_with(|| site_name(p, leaf)).clone();
        let v = by_site.entry(name).or_insert_with(|| vec![0; types.len()]);
        for (acc, x) in v.iter_mut().zip(&s.value) {
            *acc += x;
        }
    }
    Sites { types, by_site }
}

fn col(s: &Sites, name: &str) -> Result<usize, String> {
    s.types.iter().position(|t| t == name).ok_or_else(|| format!("the profile has no {name} sample type"))
}

pub fn bytes(v: i64) -> String {
    let a = v.unsigned_abs() as f64;
    let sign = if v < 0 { "-" } else { "" };
    if a >= (1u64 << 30) as f64 {
        format!("{sign}{:.2} GiB", a / (1u64 << 30) as f64)
    } else if a >= (1u64 << 20) as f64 {
        format!("{sign}{:.2} MiB", a / (1u64 << 20) as f64)
    } else if a >= 1024.0 {
        format!("{sign}{:.1} KiB", a / 1024.0)
    } else {
        format!("{v} B")
    }
}

/// One table: the top `n` sites by `index` (space or objects) with their bytes, objects and %.
fn table(s: &Sites, index: &str, n: usize) -> Result<String, String> {
    let kind = index.split('_').next().unwrap_or("inuse");
    let (i, ib, io) =
        (col(s, index)?, col(s, &format!("{kind}_space"))?, col(s, &format!("{kind}_objects"))?);
    let total: i64 = s.by_site.values().map(|v| v[i]).sum();
    let mut rows: Vec<(&String, &Vec<i64>)> = s.by_site.iter().filter(|(_, v)| v[i] != 0).collect();
    rows.sort_by(|a, b| b.1[i].cmp(&a.1[i]).then_with(|| a.0.cmp(b.0)));
    let shown = if index.ends_with("space") { bytes(total) } else { total.to_string() };
    let mut o = format!("by {index} (total {shown}, {} call sites):\n", rows.len());
    o += &format!("{:>12} {:>12} {:>7}  call site\n", format!("{kind} bytes"), "objects", "%");
    for (name, v) in rows.into_iter().take(n) {
        let pct = if total != 0 { 100.0 * v[i] as f64 / total as f64 } else { 0.0 };
        o += &format!("{:>12} {:>12} {:>6.1}%  {name}\n", bytes(v[ib]), v[io], pct);
    }
    Ok(o)
}

/// Per call site that changed from `base` to `cur` by `index`: (site, base value, current
/// value), top growers first (sites that shrank last). Also used by `diagnose`.
pub fn growth_rows(base: &Profile, cur: &Profile, index: &str) -> Result<Vec<(String, i64, i64)>, String> {
    let (base, cur) = (sites(base), sites(cur));
    let (ib, ic) = (col(&base, index)?, col(&cur, index)?);
    let mut all: HashMap<String, (i64, i64)> = HashMap::new();
    for (k, v) in base.by_site {
        all.entry(k).or_default().0 = v[ib];
    }
    for (k, v) in cur.by_site {
        all.entry(k).or_default().1 = v[ic];
    }
    let mut rows: Vec<_> =
        all.into_iter().filter(|(_, (b, c))| b != c).map(|(k, (b, c))| (k, b, c)).collect();
    rows.sort_by(|a, b| (b.2 - b.1).cmp(&(a.2 - a.1)).then_with(|| a.0.cmp(&b.0)));
    Ok(rows)
}

/// Growth from `base` to `cur` by `index`, as text.
fn growth(base: &Profile, cur: &Profile, index: &str, n: usize) -> Result<String, String> {
    let rows = growth_rows(base, cur, index)?;
    let total: i64 = rows.iter().map(|(_, b, c)| c - b).sum();
    let fmt = |v: i64| if index.ends_with("space") { bytes(v) } else { v.to_string() };
    let mut o =
        format!("growth by {index} from base (total {}, {} call sites changed):\n", fmt(total), rows.len());
    o += &format!("{:>12} {:>12} {:>12}  call site\n", "growth", "base", "profile");
    for (name, b, c) in rows.into_iter().take(n) {
        o += &format!("{:>12} {:>12} {:>12}  {name}\n", fmt(c - b), fmt(b), fmt(c));
    }
    Ok(o)
}

/// Reads a heap profile (errors name the file).
pub fn read(path: &std::path::Path) -> Result<Profile, String> {
    Profile::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

pub fn run(args: &Args) -> Result<String, String> {
    let p = read(&args.profile)?;
    let mut o = format!("heap profile {}\n", args.profile.display());
    if let Some(base_path) = &args.base {
        let base = read(base_path)?;
        o += &format!("base {}\n\n", base_path.display());
        let index = args.sample_index.unwrap_or(Index::InuseSpace).name();
        o += &growth(&base, &p, index, args.top)?;
        return Ok(o);
    }
    let cur = sites(&p);
    let indexes = match args.sample_index {
        Some(i) => vec![i.name()],
        None => vec!["inuse_space", "alloc_space"],
    };
    for index in indexes {
        o += "\n";
        o += &table(&cur, index, args.top)?;
    }
    Ok(o)
}
