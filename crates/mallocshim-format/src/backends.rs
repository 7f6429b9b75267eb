//! The backends, as data: one [`BackendInfo`] row per allocator the shim routes to, in
//! [`TABLE`]. Every list of backends in the workspace reads this table: the shim's
//! `backend_list!` (`src/backend/mod.rs`; its names and default libraries come from here, and a
//! compile-time assertion there fails when its rows and this table disagree), the MariaDB
//! harness, the `mallocshim` command (`compare`, and the hidden `mallocshim backends` that
//! `scripts/package.sh` reads), the tests and the benches. Library paths are written here only.
//!
//! Owns names and facts, nothing else: no I/O, no global state, everything `const`.

use core::ffi::CStr;

/// Where Debian (amd64, multiarch) installs the libraries of [`BackendInfo::lib`].
pub const LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";

/// One backend.
#[derive(Clone, Copy, Debug)]
pub struct BackendInfo {
    /// The name `MALLOCSHIM_BACKEND` takes and dumps carry in `backend` (NUL-terminated: the
    /// shim hands it to C as is; [`BackendInfo::name`] is the `&str`).
    pub c_name: &'static CStr,
    /// The Debian package of [`BackendInfo::lib`]; None when nothing needs installing (glibc).
    pub package: Option<&'static str>,
    /// The allocator's shared library, a file name in [`LIB_DIR`]: what a direct-preload
    /// baseline (`LD_PRELOAD=<it>`, no shim) loads and, for a [`BackendInfo::dlopen`] backend,
    /// the shim's default library. `c""` for glibc (nothing to preload).
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

    /// [`BackendInfo::lib`]'s path in [`LIB_DIR`]; None for glibc.
    pub fn lib_path(&self) -> Option<String> {
        let lib = self.lib.to_str().ok().filter(|l| !l.is_empty())?;
        Some(format!("{LIB_DIR}/{lib}"))
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
        lib: c"libjemalloc.so.2",
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
        lib: c"libtcmalloc_minimal.so.4",
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
        lib: c"libmimalloc.so.2",
        dlopen: true,
        env: &["MIMALLOC_*"],
        coarse_figures: true,
        figures: Figures {
            live: "none counted: the heap profile's estimate (weighted live samples, capped at resident), else mi_process_info current_commit",
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
            assert!(b.lib_path().is_none_or(|p| p.starts_with(LIB_DIR) && p.contains(".so")));
        }
        assert_eq!(TABLE[2].lib_path().as_deref(), Some("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"));
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
        let list = script.split_once("PACKAGES=(").and_then(|(_, r)| r.split_once(')')).expect("PACKAGES=(...)").0;
        let listed: Vec<&str> = list.split_whitespace().collect();
        for b in &TABLE {
            if let Some(p) = b.package {
                assert!(listed.contains(&p), "scripts/install-deps.sh's PACKAGES lacks {p} ({})", b.name());
            }
        }
    }
}
