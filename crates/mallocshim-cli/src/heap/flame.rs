//! `mallocshim heap --flame OUT.svg`: the profile's stacks (shim frames gone, wrappers kept) as
//! an SVG flame graph drawn by inferno, one sample index. Writes the one file it is given.

use super::stacks::Stacks;
use super::views;
use std::path::Path;

/// Writes the flame graph of `st` by `index` to `out`.
pub fn write(st: &Stacks, index: &str, profile: &Path, out: &Path) -> Result<(), String> {
    let lines = views::folded(st, index)?;
    if lines.is_empty() {
        return Err(format!("no {index} in {} to draw", profile.display()));
    }
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = format!("mallocshim heap: {index}");
    opt.subtitle = Some(profile.display().to_string());
    opt.count_name = if index.ends_with("space") { "bytes".into() } else { "objects".into() };
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph: {e}"))?;
    std::fs::write(out, svg).map_err(|e| format!("cannot write {}: {e}", out.display()))
}
