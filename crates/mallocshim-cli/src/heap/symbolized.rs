//! `mallocshim heap --symbolized OUT.pb.gz`: a copy of the profile with the names written in,
//! symbolized once where the debug files are (as Parca or `perf inject` do), so that any
//! profile.proto reader (`go tool pprof`, whose object reader reads no build ID and refuses every
//! local file of a profile that carries one; Parca; Pyroscope) shows function names. Each
//! location the [`Symbolizer`] resolves (debug file by build ID, else the binary's symbol table)
//! gets one `Line` whose `Function` has the demangled name as `name` and the raw symbol as
//! `system_name` (no file or line: the symbolizer reads symbol tables, not DWARF lines; no
//! inlined frames); a location it does not resolve keeps the profile's own lines (their mangled
//! names demangled the same way). A mapping's `has_functions` is true only when every location
//! in it is named, as the shim writes it. Samples, values, labels, mappings (build IDs, file
//! offsets), comments and period are left as they are. Encodes and gzips through the format
//! crate's [`Profile::to_gz`], the shim's own writer; writes the one file it is given.

use super::symbolize::{demangle, Symbolizer};
use mallocshim_format::pprof::{Function, Line, Location, Mapping, Profile};
use std::collections::HashMap;
use std::path::Path;

/// Adds strings and functions to a profile's tables, each once.
struct Tables {
    strings: HashMap<String, i64>,
    functions: HashMap<(i64, i64, i64, i64), u64>,
    next_fn: u64,
}

impl Tables {
    fn new(p: &Profile) -> Tables {
        let mut strings = HashMap::new();
        for (i, s) in p.string_table.iter().enumerate() {
            strings.entry(s.clone()).or_insert(i as i64);
        }
        let functions =
            p.function.iter().map(|f| ((f.name, f.system_name, f.filename, f.start_line), f.id)).collect();
        let next_fn = p.function.iter().map(|f| f.id).max().unwrap_or(0) + 1;
        Tables { strings, functions, next_fn }
    }

    fn string(&mut self, p: &mut Profile, s: &str) -> i64 {
        if p.string_table.is_empty() {
            // profile.proto: string 0 is always "".
            p.string_table.push(String::new());
            self.strings.insert(String::new(), 0);
        }
        *self.strings.entry(s.to_string()).or_insert_with(|| {
            p.string_table.push(s.to_string());
            p.string_table.len() as i64 - 1
        })
    }

    /// The id of the function (name, system name, file name, start line), added when new.
    fn function(&mut self, p: &mut Profile, name: &str, system: &str, filename: i64, start: i64) -> u64 {
        let (n, s) = (self.string(p, name), self.string(p, system));
        let key = (n, s, filename, start);
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.next_fn;
        self.next_fn += 1;
        p.function.push(Function { id, name: n, system_name: s, filename, start_line: start });
        self.functions.insert(key, id);
        id
    }
}

/// Names `loc` from the profile's own lines, demangling mangled names; whether it has one.
fn carried(p: &mut Profile, t: &mut Tables, loc: &mut Location) -> bool {
    let mut named = false;
    for line in &mut loc.line {
        let Some(f) = p.function.iter().find(|f| f.id == line.function_id).cloned() else { continue };
        let raw = p.str(f.name).to_string();
        if raw.is_empty() {
            continue;
        }
        named = true;
        let d = demangle(&raw);
        if d != raw {
            let system = if f.system_name != 0 { p.str(f.system_name).to_string() } else { raw };
            line.function_id = t.function(p, &d, &system, f.filename, f.start_line);
        }
    }
    named
}

/// A copy of `p` with every location the symbolizer resolves named; (copy, named, locations).
pub fn symbolized(p: &Profile, sym: &mut Symbolizer) -> (Profile, usize, usize) {
    let mut q = p.clone();
    let mut t = Tables::new(p);
    let maps: HashMap<u64, &Mapping> = p.mapping.iter().map(|m| (m.id, m)).collect();
    let mut complete: HashMap<u64, bool> = HashMap::new();
    let mut locations = std::mem::take(&mut q.location);
    let mut named = 0;
    for loc in &mut locations {
        let m = maps.get(&loc.mapping_id).filter(|_| loc.mapping_id != 0);
        let resolved = m.and_then(|m| {
            let off = m.file_offset_of(loc.address);
            sym.symbol(p.str(m.filename), p.str(m.build_id), off)
        });
        let ok = match resolved {
            Some((name, raw)) => {
                let id = t.function(&mut q, &name, &raw, 0, 0);
                loc.line = vec![Line { function_id: id, line: 0 }];
                true
            }
            None => carried(&mut q, &mut t, loc),
        };
        named += ok as usize;
        if m.is_some() {
            *complete.entry(loc.mapping_id).or_insert(true) &= ok;
        }
    }
    let total = locations.len();
    q.location = locations;
    for m in &mut q.mapping {
        if let Some(&all) = complete.get(&m.id) {
            m.has_functions = all;
        }
    }
    (q, named, total)
}

/// Writes the symbolized copy of `p` to `out`; the line to print.
pub fn write(p: &Profile, sym: &mut Symbolizer, out: &Path) -> Result<String, String> {
    let (q, named, total) = symbolized(p, sym);
    let gz = q.to_gz();
    if gz.is_empty() {
        return Err(format!("cannot encode the symbolized profile for {}", out.display()));
    }
    std::fs::write(out, gz).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(format!("symbolized profile ({named} of {total} locations named) written to {}\n", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mallocshim_format::pprof::{Sample, ValueType};

    #[test]
    fn names_carried_demangled_and_keeps_samples() {
        let p = Profile {
            sample_type: vec![ValueType { r#type: 1, unit: 2 }],
            sample: vec![Sample { location_id: vec![1, 2], value: vec![4096], label: vec![] }],
            mapping: vec![Mapping { id: 1, filename: 3, has_functions: true, ..Default::default() }],
            location: vec![
                Location {
                    id: 1,
                    mapping_id: 1,
                    address: 0x10,
                    line: vec![Line { function_id: 1, line: 0 }],
                    ..Default::default()
                },
                Location { id: 2, mapping_id: 1, address: 0x20, ..Default::default() },
            ],
            function: vec![Function { id: 1, name: 4, system_name: 4, ..Default::default() }],
            string_table: ["", "inuse_space", "bytes", "/nonexistent/x", "_Z8filesortP3THD"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        };
        let (q, named, total) = symbolized(&p, &mut Symbolizer::new(vec![]));
        assert_eq!((named, total), (1, 2));
        assert_eq!(q.sample, p.sample);
        assert!(!q.mapping[0].has_functions, "a location is unnamed");
        let f = q.function.iter().find(|f| f.id == q.location[0].line[0].function_id).unwrap();
        assert_eq!((q.str(f.name), q.str(f.system_name)), ("filesort", "_Z8filesortP3THD"));
    }
}
