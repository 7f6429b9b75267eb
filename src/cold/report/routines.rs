//! Names of thread start routines for a snapshot, without the loader: `symbol+0xoffset` from
//! the symbols of the file mapped at the address (`.symtab`, else `.dynsym`, as
//! /proc/self/maps and the file itself say), `file+0xoffset` when no symbol covers it (the
//! offset from the object's load address, as dladdr's `dli_fbase` gives), the bare address when
//! no file is mapped there. Dump side only (the thread writing a snapshot, under the reentrancy
//! guard, after the walk over the slots has ended); allocates and maps files read-only, never
//! calls dladdr, dlsym or dl_iterate_phdr: a dump can overlap a `dlclose` that holds the loader
//! lock while it waits for a thread, and nothing the dump holds may wait for that lock.

use crate::cold::symbols::{exec_maps, Map};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use std::collections::HashMap;

/// Names `addrs` (code addresses); one lookup per distinct address, one parse per file.
pub fn names(addrs: &[usize]) -> HashMap<usize, String> {
    let mut out = HashMap::new();
    if addrs.is_empty() {
        return out;
    }
    let maps = exec_maps();
    let mut by_map: HashMap<usize, Vec<usize>> = HashMap::new();
    for &a in addrs {
        if out.contains_key(&a) || by_map.values().any(|v| v.contains(&a)) {
            continue;
        }
        match maps.iter().position(|m| (a as u64) >= m.start && (a as u64) < m.end) {
            Some(i) => by_map.entry(i).or_default().push(a),
            None => {
                out.insert(a, format!("{a:#x}"));
            }
        }
    }
    for (i, list) in by_map {
        for (a, n) in name_in(&maps, i, &list) {
            out.insert(a, n);
        }
    }
    out
}

/// Names the addresses of `list`, all inside mapping `i`.
fn name_in(maps: &[Map], i: usize, list: &[usize]) -> Vec<(usize, String)> {
    let m = &maps[i];
    let base_name = m.path.rsplit('/').next().unwrap_or("").to_string();
    // The load address: the lowest start of this file's mappings minus its first file offset
    // (0 for the objects the loader maps; a mapping's offset is its first page's).
    let load = maps
        .iter()
        .filter(|o| o.path == m.path && o.inode == m.inode)
        .map(|o| o.start.saturating_sub(o.offset))
        .min()
        .unwrap_or(m.start);
    let fallback = |a: usize| (a, format!("{base_name}+{:#x}", (a as u64).wrapping_sub(load)));
    let file = match std::fs::File::open(&m.path) {
        Ok(f) if m.path.starts_with('/') => f,
        _ => return list.iter().map(|&a| fallback(a)).collect(),
    };
    // SAFETY: a private read-only mapping of a file this process already maps (its executable or
    // a loaded library); dropped before this returns.
    let Ok(data) = (unsafe { memmap2::Mmap::map(&file) }) else {
        return list.iter().map(|&a| fallback(a)).collect();
    };
    let Ok(f) = object::File::parse(&*data) else {
        return list.iter().map(|&a| fallback(a)).collect();
    };
    list.iter()
        .map(|&a| {
            // File offset of the address, then its virtual address in the file's own terms.
            let off = a as u64 - m.start + m.offset;
            let vaddr = f.segments().find_map(|s| {
                let (so, size) = s.file_range();
                (off >= so && off < so + size).then(|| off - so + s.address())
            });
            match vaddr.and_then(|v| symbol_at(&f, v)) {
                Some((name, start)) => (a, format!("{name}+{:#x}", vaddr.unwrap_or(start) - start)),
                None => fallback(a),
            }
        })
        .collect()
}

/// The function symbol covering `vaddr` (dladdr's rule: a sized symbol containing it, or an
/// unsized one starting exactly there; the highest start wins): its name and start.
fn symbol_at(f: &object::File, vaddr: u64) -> Option<(String, u64)> {
    let mut best: Option<(String, u64)> = None;
    for s in f.symbols().chain(f.dynamic_symbols()) {
        if s.kind() != SymbolKind::Text || s.address() == 0 || s.address() > vaddr {
            continue;
        }
        let covers = if s.size() == 0 { s.address() == vaddr } else { vaddr < s.address() + s.size() };
        if covers && best.as_ref().is_none_or(|b| s.address() > b.1) {
            if let Ok(n) = s.name() {
                best = Some((n.to_string(), s.address()));
            }
        }
    }
    best
}
