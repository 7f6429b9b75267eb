//! Where code addresses come from, for the pprof writer: the executable mappings of
//! /proc/self/maps (start, end, file offset, path) and, per mapped ELF file, its build ID and
//! function symbols (`.symtab` when present, else `.dynsym`), read with the `object` crate from
//! the file mapped read-only (never copied into the heap) and cached per file (path and inode)
//! for the life of the process, unless memory ran out while reading it. Dump side only: runs on
//! the thread writing the dump, under the reentrancy guard; it allocates and maps files.

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One executable mapping.
#[derive(Clone, Debug)]
pub struct Map {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: String,
    pub inode: u64,
}

/// What the writer needs from one ELF file.
#[derive(Default)]
pub struct Elf {
    pub build_id: Option<Vec<u8>>,
    /// (file offset, file size, vaddr) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    /// (vaddr, size, name) sorted by vaddr.
    syms: Vec<(u64, u64, String)>,
}

impl Elf {
    /// The file's description, and false when the file could not be mapped (out of address
    /// space: worth trying again later).
    fn load(path: &str) -> (Elf, bool) {
        let Ok(file) = std::fs::File::open(path) else { return (Elf::default(), true) };
        // SAFETY: a private read-only mapping of a file this process already maps (its
        // executable or a loaded library); a file truncated in place would fault the process's
        // own mappings of it just as well. Dropped (unmapped) before this returns.
        let Ok(data) = (unsafe { memmap2::Mmap::map(&file) }) else { return (Elf::default(), false) };
        let Ok(f) = object::File::parse(&*data) else { return (Elf::default(), true) };
        let build_id = f.build_id().ok().flatten().map(|b| b.to_vec());
        let segments = f
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, size, s.address())
            })
            .collect();
        let mut syms: Vec<(u64, u64, String)> = f
            .symbols()
            .chain(f.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        syms.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        syms.dedup_by_key(|s| s.0);
        (Elf { build_id, segments, syms }, true)
    }

    /// The function containing file offset `off` (None when no symbol covers it).
    pub fn function(&self, off: u64) -> Option<&str> {
        let &(so, _, va) = self.segments.iter().find(|(so, sz, _)| off >= *so && off < so + sz)?;
        let vaddr = off - so + va;
        let i = self.syms.partition_point(|s| s.0 <= vaddr).checked_sub(1)?;
        let (a, size, name) = &self.syms[i];
        (size == &0 || vaddr < a + size).then_some(name.as_str())
    }
}

/// The executable, file-backed mappings of this process now.
pub fn exec_maps() -> Vec<Map> {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path = it.collect::<Vec<_>>().join(" ");
        if !perms.contains('x') || path.is_empty() {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let p = |s: &str| u64::from_str_radix(s, 16).unwrap_or(0);
        out.push(Map { start: p(a), end: p(b), offset: p(off), path, inode: inode.parse().unwrap_or(0) });
    }
    out
}

/// Parsed files by (path, inode).
type Cache = Mutex<Option<HashMap<(String, u64), Arc<Elf>>>>;

/// The ELF file behind a mapping (an empty description for `[vdso]` and unreadable files).
/// Cached, unless memory ran out while reading it: the file could not be mapped, or the shim's
/// reserve (`reserve`) served part of it — kept for the life of the process, those blocks
/// would keep the reserve from ever being reused. A later dump then reads the file again.
pub fn elf(m: &Map) -> Arc<Elf> {
    static CACHE: Cache = Mutex::new(None);
    let before = crate::base::own_heap::counts();
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let key = (m.path.clone(), m.inode);
    if let Some(e) = c.as_ref().and_then(|map| map.get(&key)) {
        return e.clone();
    }
    let (e, mapped) = if m.path.starts_with('/') { Elf::load(&m.path) } else { (Elf::default(), true) };
    let e = Arc::new(e);
    if mapped && crate::base::own_heap::counts() == before {
        c.get_or_insert_with(|| HashMap::with_capacity(64)).insert(key, e.clone());
    }
    e
}
