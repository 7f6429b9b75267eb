//! Finding the programs the harness runs (in PATH) and failing loudly when one is missing.

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// The absolute path of `prog` found in PATH, or [`Error::MissingTool`].
pub fn require(prog: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| is_exec(p))
        .ok_or_else(|| Error::MissingTool(format!("program `{prog}`")))
}

/// `path` itself when it exists, or [`Error::MissingTool`] (a library such as tcmalloc's).
pub fn require_file(path: &str) -> Result<PathBuf> {
    if Path::new(path).exists() {
        Ok(PathBuf::from(path))
    } else {
        Err(Error::MissingTool(format!("file {path}")))
    }
}

fn is_exec(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// The MariaDB server and client programs and sysbench.
#[derive(Clone, Debug)]
pub struct Tools {
    pub mariadbd: PathBuf,
    pub install_db: PathBuf,
    pub admin: PathBuf,
    pub client: PathBuf,
    pub sysbench: PathBuf,
}

impl Tools {
    /// Finds every program; the first missing one is the error.
    pub fn find() -> Result<Tools> {
        Ok(Tools {
            mariadbd: require("mariadbd")?,
            install_db: require("mariadb-install-db")?,
            admin: require("mariadb-admin")?,
            client: require("mariadb")?,
            sysbench: require("sysbench")?,
        })
    }
}
