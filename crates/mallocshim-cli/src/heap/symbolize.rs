//! Symbols after the fact for `mallocshim heap`: a frame is (module, file offset) — the module
//! named by its build ID, else its path; the offset is the location's address minus its
//! mapping's start plus the mapping's file offset — never the run-time (ASLR'd) address, so two
//! runs of one binary name and compare the same code the same way. Names come from, in order:
//! a debug file found by build ID under each `--debug-dir` (debuginfod layout
//! `DIR/.build-id/xx/rest.debug`), the binary's own symbol table (`.symtab`, else `.dynsym`)
//! when the file at the mapping's path still has the profile's build ID, and the name the
//! profile carries. C++ (Itanium) and Rust names are demangled. Reads files; no global state.

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Function symbols of one ELF file, by virtual address, and its loadable segments.
#[derive(Default)]
struct Table {
    /// (file offset, file size, vaddr) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    /// (vaddr, size, mangled name) sorted by vaddr.
    syms: Vec<(u64, u64, String)>,
    /// Whether the file has a full symbol table (`.symtab`), not only the exported `.dynsym`.
    symtab: bool,
}

impl Table {
    /// The file's table and its build ID (None when it cannot be read as ELF).
    fn load(path: &Path) -> Option<(Table, Option<Vec<u8>>)> {
        let data = std::fs::read(path).ok()?;
        let f = object::File::parse(&*data).ok()?;
        let build_id = f.build_id().ok().flatten().map(|b| b.to_vec());
        let segments = f
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, size.max(s.size()), s.address())
            })
            .collect();
        let symtab = f.symbols().next().is_some();
        let mut syms: Vec<(u64, u64, String)> = f
            .symbols()
            .chain(f.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        syms.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        syms.dedup_by_key(|s| s.0);
        Some((Table { segments, syms, symtab }, build_id))
    }

    fn vaddr(&self, off: u64) -> Option<u64> {
        let &(so, _, va) = self.segments.iter().find(|(so, sz, _)| off >= *so && off < so + sz)?;
        Some(off - so + va)
    }

    /// The symbol covering `vaddr` (a symbol of size 0 covers up to the next one).
    fn at(&self, vaddr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|s| s.0 <= vaddr).checked_sub(1)?;
        let (a, size, name) = &self.syms[i];
        (*size == 0 || vaddr < a + size).then_some(name.as_str())
    }
}

/// One module's sources of names: the debug file's table and the binary's.
#[derive(Default)]
struct Module {
    debug: Option<Table>,
    binary: Option<Table>,
    /// Where the debug file was found (for `--verbose`-style notes in the output).
    debug_path: Option<PathBuf>,
    /// Distinct file offsets asked for, and those no table named.
    asked: HashSet<u64>,
    unnamed: HashSet<u64>,
}

/// A module whose frames the profile holds and that has neither a debug file nor a full
/// symbol table (a stripped binary, named at most from its exported symbols).
#[derive(Debug, Clone, PartialEq)]
pub struct Unsymbolized {
    pub path: String,
    pub build_id: String,
    /// Distinct frames (file offsets) of the module in the profile, and those left unnamed.
    pub frames: usize,
    pub unnamed: usize,
}

/// Per-module symbol tables, loaded on first use.
pub struct Symbolizer {
    debug_dirs: Vec<PathBuf>,
    modules: HashMap<(String, String), Module>,
}

/// The debuginfod-layout path of the debug file of `build_id` (hex) under `dir`.
pub fn debug_path(dir: &Path, build_id: &str) -> Option<PathBuf> {
    (build_id.len() > 2)
        .then(|| dir.join(".build-id").join(&build_id[..2]).join(format!("{}.debug", &build_id[2..])))
}

impl Symbolizer {
    pub fn new(debug_dirs: Vec<PathBuf>) -> Symbolizer {
        Symbolizer { debug_dirs, modules: HashMap::new() }
    }

    fn module(&mut self, path: &str, build_id: &str) -> &Module {
        let key = (path.to_string(), build_id.to_string());
        let dirs = &self.debug_dirs;
        self.modules.entry(key).or_insert_with(|| {
            let mut m = Module::default();
            if !build_id.is_empty() {
                for d in dirs {
                    let Some(p) = debug_path(d, build_id) else { continue };
                    if let Some((t, _)) = Table::load(&p) {
                        m.debug = Some(t);
                        m.debug_path = Some(p);
                        break;
                    }
                }
            }
            if path.starts_with('/') {
                if let Some((t, id)) = Table::load(Path::new(path)) {
                    let hex = id.map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
                    // The file at the path is another build: its symbols would name other code.
                    if build_id.is_empty() || hex.as_deref() == Some(build_id) {
                        m.binary = Some(t);
                    }
                }
            }
            m
        })
    }

    /// The demangled function at file offset `off` of module (`path`, `build_id`), if any
    /// symbol table covers it.
    pub fn name(&mut self, path: &str, build_id: &str, off: u64) -> Option<String> {
        self.symbol(path, build_id, off).map(|(name, _)| name)
    }

    /// (demangled name, raw symbol as the table spells it) of the function at file offset
    /// `off` of module (`path`, `build_id`), if any symbol table covers it.
    pub fn symbol(&mut self, path: &str, build_id: &str, off: u64) -> Option<(String, String)> {
        let found = self.lookup(path, build_id, off);
        let m =
            self.modules.get_mut(&(path.to_string(), build_id.to_string())).expect("module loaded by lookup");
        m.asked.insert(off);
        if found.is_none() {
            m.unnamed.insert(off);
        }
        found
    }

    fn lookup(&mut self, path: &str, build_id: &str, off: u64) -> Option<(String, String)> {
        let m = self.module(path, build_id);
        // Virtual addresses from the binary's segments when it is there (the debug file keeps
        // the same program headers, so either gives the same vaddr).
        let segs = m.binary.as_ref().or(m.debug.as_ref())?;
        let vaddr = segs.vaddr(off)?;
        let raw = m
            .debug
            .as_ref()
            .and_then(|t| t.at(vaddr))
            .or_else(|| m.binary.as_ref().and_then(|t| t.at(vaddr)))?;
        Some((demangle(raw), raw.to_string()))
    }

    /// (module path, debug file) of the debug files found so far.
    pub fn debug_files(&self) -> Vec<(String, PathBuf)> {
        let mut v: Vec<(String, PathBuf)> =
            self.modules.iter().filter_map(|((p, _), m)| Some((p.clone(), m.debug_path.clone()?))).collect();
        v.sort();
        v
    }

    /// `main` (the profile's program) when it has frames in the profile but no debug file and
    /// no `.symtab`. Libraries are left out: their unnamed frames are the stack's bottom
    /// (`__libc_start_call_main` and the like), and a note about them is noise.
    pub fn unsymbolized(&self, main: Option<&str>) -> Vec<Unsymbolized> {
        let mut v: Vec<Unsymbolized> = self
            .modules
            .iter()
            .filter(|(_, m)| {
                m.debug.is_none() && !m.binary.as_ref().is_some_and(|t| t.symtab) && !m.asked.is_empty()
            })
            .filter(|((p, _), _)| Some(p.as_str()) == main)
            .map(|((p, id), m)| Unsymbolized {
                path: p.clone(),
                build_id: id.clone(),
                frames: m.asked.len(),
                unnamed: m.unnamed.len(),
            })
            .collect();
        v.sort_by(|a, b| b.unnamed.cmp(&a.unnamed).then(a.path.cmp(&b.path)));
        v
    }
}

/// A symbol demangled: Rust (v0, or legacy with its hash dropped), C++ without its parameter
/// list (as `go tool pprof` shows functions), else the name as it is. Versioned names
/// (`name@@GLIBC_2.2.5`) lose the version.
pub fn demangle(raw: &str) -> String {
    let raw = raw.split('@').next().unwrap_or(raw);
    let rust_legacy = raw.starts_with("_ZN") && raw.contains("17h") && raw.ends_with('E');
    if raw.starts_with("_R") || rust_legacy {
        if let Ok(d) = rustc_demangle::try_demangle(raw) {
            return format!("{d:#}");
        }
    }
    if raw.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(raw.as_bytes()) {
            let opts = cpp_demangle::DemangleOptions::new().no_params().no_return_type();
            if let Ok(d) = sym.demangle_with_options(&opts) {
                return d;
            }
        }
    }
    raw.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles() {
        assert_eq!(demangle("_Z8filesortP3THDP5TABLEP8FilesortP16Filesort_trackerP4JOINy"), "filesort");
        assert_eq!(demangle("_Znwm"), "operator new");
        assert_eq!(demangle("my_malloc"), "my_malloc");
        assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE"), "core::fmt::write");
        assert_eq!(demangle("malloc@@GLIBC_2.2.5"), "malloc");
    }

    #[test]
    fn build_id_path() {
        assert_eq!(
            debug_path(Path::new("/usr/lib/debug"), "ab12cd").unwrap(),
            PathBuf::from("/usr/lib/debug/.build-id/ab/12cd.debug")
        );
    }
}
