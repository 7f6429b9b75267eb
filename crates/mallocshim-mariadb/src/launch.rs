//! How a server is started: the variables added to a clean environment (the caller's
//! `LD_PRELOAD` and `MALLOCSHIM_*` never leak in) and an optional wrapper program that execs the
//! server (valgrind), so that the child's pid is the server's.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// The environment and wrapper of one server start.
#[derive(Clone, Debug, Default)]
pub struct Launch {
    /// Added to the clean environment, in order.
    pub vars: Vec<(String, String)>,
    /// A program and its arguments that exec the server (`valgrind --tool=callgrind ...`).
    pub wrapper: Vec<OsString>,
    /// The library preloaded (the shim or an allocator), as `LD_PRELOAD` says.
    pub preload: Option<String>,
    /// A name for the run, in its error log's name (`mariadbd.N.LABEL.err`).
    pub label: Option<String>,
}

impl Launch {
    /// No preload: the server with glibc's malloc.
    pub fn plain() -> Launch {
        Launch::default()
    }

    /// `LD_PRELOAD=<lib>` alone (an allocator preloaded directly).
    pub fn preload(lib: impl AsRef<Path>) -> Launch {
        let lib = lib.as_ref().to_string_lossy().into_owned();
        Launch { preload: Some(lib.clone()), ..Launch::default() }.var("LD_PRELOAD", &lib)
    }

    /// `LD_PRELOAD=<shim> MALLOCSHIM_BACKEND=<backend>`.
    pub fn shim(so: impl AsRef<Path>, backend: &str) -> Launch {
        Launch::preload(so).var("MALLOCSHIM_BACKEND", backend)
    }

    /// Adds (or replaces) one variable.
    pub fn var(mut self, key: &str, value: impl AsRef<str>) -> Launch {
        self.vars.retain(|(k, _)| k != key);
        self.vars.push((key.to_string(), value.as_ref().to_string()));
        self
    }

    /// Names the run (its error log becomes `mariadbd.N.LABEL.err`).
    pub fn label(mut self, label: impl Into<String>) -> Launch {
        self.label = Some(label.into());
        self
    }

    /// Runs the server as `wrapper... mariadbd ...`.
    pub fn wrapper<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Launch {
        self.wrapper = args.into_iter().map(Into::into).collect();
        self
    }

    /// The value of a variable this launch sets.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Removes `LD_PRELOAD`, `MALLOCSHIM_*`, the allocators' own variables (the backend table's
/// `env`: `MALLOC_CONF`, `_RJEM_*`, `TCMALLOC_*`, `MIMALLOC_*`) and the profilers'
/// (`DUMP_HEAPTRACK_OUTPUT`) of the caller's environment from `cmd`.
pub fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let ks = k.to_string_lossy();
        if ks == "LD_PRELOAD"
            || ks == "DUMP_HEAPTRACK_OUTPUT"
            || ks.starts_with("MALLOCSHIM_")
            || mallocshim_format::backends::is_allocator_var(&ks)
        {
            cmd.env_remove(&k);
        }
    }
}
