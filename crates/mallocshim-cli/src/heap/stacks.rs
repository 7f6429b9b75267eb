//! A heap profile's samples as named stacks, for every view of `mallocshim heap`: each
//! location becomes (module, file offset) and then a name through the [`Symbolizer`]
//! (`module+0xOFFSET` when nothing names it: stable across runs of one binary, unlike the
//! run-time address); the shim's own frames are dropped. Also the profile's drop counters
//! (samples dropped at the live-set and record bounds), read from its comments. No output.

use super::symbolize::Symbolizer;
use mallocshim_format::pprof::Profile;
use std::collections::HashMap;
use std::rc::Rc;

/// One sample: its frames' names, innermost first, and its values in sample-type order.
pub struct Stack {
    pub frames: Vec<Rc<str>>,
    pub values: Vec<i64>,
}

/// A profile's samples, named.
pub struct Stacks {
    pub types: Vec<String>,
    pub stacks: Vec<Stack>,
    /// Warnings from the profile (drops, samples left out), one line each.
    pub warnings: Vec<String>,
}

impl Stacks {
    /// The column of sample type `name`.
    pub fn col(&self, name: &str) -> Result<usize, String> {
        self.types
            .iter()
            .position(|t| t == name)
            .ok_or_else(|| format!("the profile has no {name} sample type"))
    }
}

/// Whether a mapping is the shim's own library (its frames never appear).
fn is_shim(path: &str) -> bool {
    path.rsplit('/').next().is_some_and(|f| f.starts_with("libmallocshim"))
}

/// The frame name of location `id`, or None for a frame of the shim.
fn frame(p: &Profile, id: u64, sym: &mut Symbolizer) -> Option<String> {
    let Some(loc) = p.location.iter().find(|l| l.id == id) else { return Some(format!("[location {id}]")) };
    let carried = loc
        .line
        .first()
        .and_then(|l| p.function.iter().find(|f| f.id == l.function_id))
        .map(|f| p.str(f.name))
        .filter(|n| !n.is_empty());
    let Some(m) = p.mapping.iter().find(|m| m.id == loc.mapping_id && loc.mapping_id != 0) else {
        return Some(
            carried.map(super::symbolize::demangle).unwrap_or_else(|| format!("{:#x}", loc.address)),
        );
    };
    let path = p.str(m.filename);
    if is_shim(path) || carried.is_some_and(|n| n.starts_with("mallocshim::") || n.contains("mallocshim::")) {
        return None;
    }
    let off = m.file_offset_of(loc.address);
    if let Some(n) = sym.name(path, p.str(m.build_id), off) {
        return Some(n);
    }
    if let Some(n) = carried {
        return Some(super::symbolize::demangle(n));
    }
    let file = path.rsplit('/').next().filter(|f| !f.is_empty()).unwrap_or("?");
    Some(format!("{file}+{off:#x}"))
}

/// The drop warnings of a profile's comments.
pub fn warnings(p: &Profile) -> Vec<String> {
    let mut w = Vec::new();
    for c in &p.comment {
        let c = p.str(*c);
        let num = |after: &str| -> u64 {
            c.split(after)
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        };
        if c.starts_with("mallocshim heap profile:") {
            let (live, recs) = (num(" dropped "), num(") and "));
            if live + recs > 0 {
                w.push(format!(
                    "warning: {live} samples dropped at the live-set bound and {recs} at the record bound: \
                     the figures below are low (a larger MALLOCSHIM_PROF_SAMPLE_BYTES keeps fewer samples)"
                ));
            }
        } else if c.contains("samples left out") {
            w.push(format!("warning: {c}"));
        }
    }
    w
}

/// The profile's samples as named stacks.
pub fn stacks(p: &Profile, sym: &mut Symbolizer) -> Stacks {
    let types: Vec<String> = p.sample_type.iter().map(|t| p.str(t.r#type).to_string()).collect();
    let mut names: HashMap<u64, Option<Rc<str>>> = HashMap::new();
    let mut out = Vec::with_capacity(p.sample.len());
    for s in &p.sample {
        let mut frames: Vec<Rc<str>> = s
            .location_id
            .iter()
            .filter_map(|&id| names.entry(id).or_insert_with(|| frame(p, id, sym).map(Rc::from)).clone())
            .collect();
        if frames.is_empty() {
            // Every frame was the shim's (or none was walked): the bytes still count.
            frames.push(Rc::from("[no frames]"));
        }
        out.push(Stack { frames, values: s.value.clone() });
    }
    Stacks { types, stacks: out, warnings: warnings(p) }
}
