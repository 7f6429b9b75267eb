//! The backends, as data: one [`BackendInfo`] row per allocator the shim routes to, in
//! [`TABLE`]. Every list of backends in the workspace reads this table: the shim's
//! `backend_list!` (`src/backend/mod.rs`; its names and default libraries come from here, and a
//! compile-time assertion there fails when its rows and this table disagree), the MariaDB
//! harness, the `mallocshim` command (`compare`, and the hidden `mallocshim backends` that
//! `scripts/package.sh` reads), the tests and the benches. Library paths are written here only.
//!
//! Owns names and facts, nothing else: no I/O, no global state, everything `const`.

use core::ffi::CStr;

/// One backend.
#[derive(Clone, Copy, Debug)]
pub struct BackendInfo {
    /// The name `MALLOCSHIM_BACKEND` takes and dumps carry in `backend` (NUL-terminated: the
    /// shim hands it to C as is; [`BackendInfo::name`] is the `&str`).
    pub c_name: &'static CStr,
    /// The Debian package of [`BackendInfo::lib`]; None when nothing needs installing (glibc).
    pub package: Option<&'static str>,
    /// The allocator's shared library where Debian (amd64) installs it: what a direct-preload
    /// baseline (`LD_PRELOAD=<it>`, no shim) loads; for a [`BackendInfo::dlopen`] backend its
    /// file name ([`BackendInfo::file_name`]) is the shim's default library, found through the
    /// loader's search path. `c""` for glibc (nothing to preload).
    pub lib: &'static CStr,
    /// The shim dlopen()s [`BackendInfo::lib`] (RTLD_LOCAL) when the backend is chosen; false
    /// for glibc (always there) and jemalloc (statically linked into `libmallocshim.so`).
    pub dlopen: bool,
    /// The environment variables the allocator reads (a trailing `*`: every variable with that
    /// prefix). The MariaDB harness removes them from a server's inherited environment. glibc's
    /// (`GLIBC_TUNABLES`, `MALLOC_ARENA_MAX`...) are not listed: they are left to the caller.
    pub env: &'static [&'static str],
    /// The allocator counts no live bytes: its allocated-bytes figure is its committed bytes,
    /// an upper bound that moves by whole segments (the tests check it as a bound).
    pub coarse_figures: bool,
    /// What the shim's memory figures mean under this backend.
    pub figures: Figures,
}

/// The sources of a backend's memory figures (the dumps' `memory` and account, the C API's
/// `mallocshim_stats`, `mallinfo2`), as docs/memory-account.md gives them. All in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    /// Bytes in live blocks (`allocated_bytes`, the account's `live_bytes`).
    pub live: &'static str,
    /// Bytes the allocator holds resident (the account's `allocator_resident_bytes`).
    pub resident: &'static str,
    /// Free bytes the allocator could give back (`free_bytes`).
    pub free: &'static str,
    /// The allocator's own bookkeeping (`allocator_metadata_bytes`).
    pub metadata: &'static str,
}

impl BackendInfo {
    /// The name as `&str` (see [`BackendInfo::c_name`]).
    pub const fn name(&self) -> &'static str {
        match self.c_name.to_str() {
            Ok(s) => s,
            Err(_) => panic!("a backend name is ASCII"),
        }
    }

    /// [`BackendInfo::lib`] as `&str`; None for glibc (nothing to preload).
    pub const fn lib_path(&self) -> Option<&'static str> {
        match self.lib.to_str() {
            Ok(s) if !s.is_empty() => Some(s),
            _ => None,
        }
    }

    /// [`BackendInfo::lib`]'s file name (after the last `/`), at compile time.
    pub const fn file_name(&self) -> &'static CStr {
        let b = self.lib.to_bytes_with_nul();
        let mut i = b.len();
        while i > 0 && b[i - 1] != b'/' {
            i -= 1;
        }
        match CStr::from_bytes_with_nul(b.split_at(i).1) {
            Ok(c) => c,
            Err(_) => panic!("a library path is one C string"),
        }
    }
}

/// The backends, in the order of the shim's `Backend` enum, the docs and the tests; the first
/// is the default.
pub const TABLE: [BackendInfo; 4] = [
    BackendInfo {
        c_name: c"glibc",
        package: None,
        lib: c"",
        dlopen: false,
        env: &[],
        coarse_figures: false,
        figures: Figures {
            live: "mallinfo2 uordblks + hblkhd",
            resident: "pages of the main heap and the arena heaps found resident by mincore(2), plus mallinfo2 hblkhd",
            free: "mallinfo2 fordblks",
            metadata: "none (inside its arenas)",
        },
    },
    BackendInfo {
        c_name: c"jemalloc",
        package: Some("libjemalloc2"),
        lib: c"/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
        dlopen: false,
        env: &["MALLOC_CONF", "_RJEM_*"],
        coarse_figures: false,
        figures: Figures {
            live: "stats.allocated (after an epoch refresh)",
            resident: "stats.resident",
            free: "stats.resident - stats.allocated",
            metadata: "stats.metadata",
        },
    },
    BackendInfo {
        c_name: c"tcmalloc",
        package: Some("libtcmalloc-minimal4"),
        lib: c"/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
        dlopen: true,
        env: &["TCMALLOC_*"],
        coarse_figures: false,
        figures: Figures {
            live: "generic.current_allocated_bytes",
            resident: "generic.total_physical_bytes",
            free: "tcmalloc.pageheap_free_bytes",
            metadata: "generic.total_physical_bytes - (generic.heap_size - tcmalloc.pageheap_unmapped_bytes)",
        },
    },
    BackendInfo {
        c_name: c"mimalloc",
        package: Some("libmimalloc2.0"),
        lib: c"/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
        dlopen: true,
        env: &["MIMALLOC_*"],
        coarse_figures: true,
        figures: Figures {
            live: "none counted: the shim's count of usable bytes (served minus given up; capped at resident in the account), else mi_process_info current_commit",
            resident: "pages of its segments found resident by mincore(2), else mi_process_info current_commit",
            free: "resident - live (0 with sampling off: committed bytes count as live)",
            metadata: "none",
        },
    },
];

/// The backend names, in [`TABLE`]'s order.
pub const BACKENDS: [&str; TABLE.len()] = {
    let mut out = [""; TABLE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        out[i] = TABLE[i].name();
        i += 1;
    }
    out
};

/// The library of the backend `name` ([`BackendInfo::lib`]), for constants:
/// `const JEMALLOC_LIB: &str = lib("jemalloc");` fails to compile for a backend with none.
pub const fn lib(name: &str) -> &'static str {
    let mut i = 0;
    while i < TABLE.len() {
        let n = TABLE[i].name().as_bytes();
        if n.len() == name.len() {
            let mut k = 0;
            while k < n.len() && n[k] == name.as_bytes()[k] {
                k += 1;
            }
            if k == n.len() {
                match TABLE[i].lib_path() {
                    Some(l) => return l,
                    None => panic!("this backend has no library"),
                }
            }
        }
        i += 1;
    }
    panic!("no such backend")
}

/// The library a backend's direct-preload baseline loads (`LD_PRELOAD=<it>`, no shim); None for
/// glibc, which needs no preload, and for an unknown name.
pub fn direct_lib(name: &str) -> Option<&'static str> {
    by_name(name)?.lib_path()
}

/// The names of the backends that count no live bytes ([`BackendInfo::coarse_figures`]).
pub fn coarse_figures() -> impl Iterator<Item = &'static str> {
    TABLE.iter().filter(|b| b.coarse_figures).map(|b| b.name())
}

/// The row of a backend name (exact, lower case); None for an unknown name.
pub fn by_name(name: &str) -> Option<&'static BackendInfo> {
    TABLE.iter().find(|b| b.name() == name)
}

/// Whether `var` is one of the allocators' own variables ([`BackendInfo::env`]).
pub fn is_allocator_var(var: &str) -> bool {
    TABLE.iter().flat_map(|b| b.env).any(|p| match p.strip_suffix('*') {
        Some(prefix) => var.starts_with(prefix),
        None => var == *p,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_lower_case_and_default_first() {
        for (i, a) in BACKENDS.iter().enumerate() {
            assert!(a.bytes().all(|c| c.is_ascii_lowercase()), "{a}");
            assert!(!BACKENDS[i + 1..].contains(a), "{a} twice");
        }
        assert_eq!(BACKENDS[0], "glibc");
        assert_eq!(by_name("tcmalloc").map(|b| b.name()), Some("tcmalloc"));
        assert!(by_name("TCMALLOC").is_none());
    }

    #[test]
    fn every_library_has_a_package_and_a_dlopened_backend_a_library() {
        for b in &TABLE {
            assert_eq!(b.package.is_some(), !b.lib.is_empty(), "{}", b.name());
            assert!(!b.dlopen || !b.lib.is_empty(), "{} is dlopen()ed from no library", b.name());
            assert!(b
                .lib_path()
                .is_none_or(|p| p.starts_with("/usr/lib/x86_64-linux-gnu/lib") && p.contains(".so")));
        }
        assert_eq!(TABLE[2].lib_path(), Some("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"));
        assert_eq!(TABLE[2].file_name(), c"libtcmalloc_minimal.so.4");
        assert_eq!(TABLE[0].file_name(), c"");
        const JE: &str = lib("jemalloc");
        assert_eq!(JE, "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2");
        assert_eq!(direct_lib("mimalloc"), Some("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"));
        assert_eq!(direct_lib("glibc"), None);
        assert_eq!(coarse_figures().collect::<Vec<_>>(), ["mimalloc"]);
    }

    #[test]
    fn allocator_variables() {
        for v in ["MALLOC_CONF", "_RJEM_MALLOC_CONF", "TCMALLOC_RELEASE_RATE", "MIMALLOC_VERBOSE"] {
            assert!(is_allocator_var(v), "{v}");
        }
        for v in ["MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "MALLOCSHIM_BACKEND", "LD_PRELOAD"] {
            assert!(!is_allocator_var(v), "{v}");
        }
    }

    /// scripts/install-deps.sh installs every backend's package (it runs before anything is
    /// built, so it cannot ask the table).
    #[test]
    fn install_deps_installs_every_backend_package() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/install-deps.sh");
        let script = std::fs::read_to_string(path).expect("scripts/install-deps.sh");
        let list =
            script.split_once("PACKAGES=(").and_then(|(_, r)| r.split_once(')')).expect("PACKAGES=(...)").0;
        let listed: Vec<&str> = list.split_whitespace().collect();
        for b in &TABLE {
            if let Some(p) = b.package {
                assert!(listed.contains(&p), "scripts/install-deps.sh's PACKAGES lacks {p} ({})", b.name());
            }
        }
    }
}
