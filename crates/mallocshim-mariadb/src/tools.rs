//! Finding the programs the harness runs (in PATH, or beside a given server binary) and failing
//! loudly when one is missing.

use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The absolute path of `prog` found in PATH, or [`Error::MissingTool`].
pub fn require(prog: &str) -> Result<PathBuf> {
    mallocshim_proc::find_in_path(prog).ok_or_else(|| Error::MissingTool(format!("program `{prog}`")))
}

/// `path` itself when it exists, or [`Error::MissingTool`] (a library such as tcmalloc's).
pub fn require_file(path: &str) -> Result<PathBuf> {
    if Path::new(path).exists() {
        Ok(PathBuf::from(path))
    } else {
        Err(Error::MissingTool(format!("file {path}")))
    }
}

pub use mallocshim_proc::is_exec;

/// The server (MariaDB's mariadbd or MySQL's mysqld), its client programs and sysbench.
#[derive(Clone, Debug)]
pub struct Tools {
    /// The server binary (Debian's `mariadbd` unless [`crate::Options::server`] names another).
    pub mariadbd: PathBuf,
    /// MariaDB (true) or MySQL (false: the datadir is made by `mysqld --initialize-insecure`).
    pub mariadb: bool,
    /// What the server's `--version` printed.
    pub version: String,
    /// `mariadb-install-db` (MariaDB only).
    pub install_db: Option<PathBuf>,
    /// `mariadb-admin` / `mysqladmin`.
    pub admin: PathBuf,
    /// `mariadb` / `mysql`.
    pub client: PathBuf,
    pub sysbench: PathBuf,
}

impl Tools {
    /// Debian's MariaDB programs in PATH and sysbench; the first missing one is the error.
    pub fn find() -> Result<Tools> {
        Tools::for_server(&require("mariadbd")?)
    }

    /// The programs that go with `server` (any mariadbd or mysqld): asks it for `--version`
    /// (MariaDB or MySQL), then looks for the install script, client and admin programs beside
    /// it (`.`, `../bin`, `../scripts`, for an unpacked tarball) and then in PATH, preferring the
    /// names of its own kind. A server that does not answer `--version` is [`Error::Failed`].
    pub fn for_server(server: &Path) -> Result<Tools> {
        let out = Command::new(server)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {} --version: {e}", server.display()))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || version.is_empty() {
            return Err(Error::Failed(format!(
                "{} --version failed: not a mysqld/mariadbd?",
                server.display()
            )));
        }
        let mariadb = version.contains("MariaDB");
        let beside = |n: &str| -> Option<PathBuf> {
            let d = server.parent()?;
            [d.join(n), d.join("../bin").join(n), d.join("../scripts").join(n)]
                .into_iter()
                .find(|p| is_exec(p))
        };
        let pick = |names: &[&str]| -> Result<PathBuf> {
            match names.iter().find_map(|n| beside(n)) {
                Some(p) => Ok(p),
                None => {
                    names.iter().map(|n| require(n)).find(|r| r.is_ok()).unwrap_or_else(|| require(names[0]))
                }
            }
        };
        let (client, admin): (&[&str], &[&str]) = if mariadb {
            (&["mariadb", "mysql"], &["mariadb-admin", "mysqladmin"])
        } else {
            (&["mysql", "mariadb"], &["mysqladmin", "mariadb-admin"])
        };
        Ok(Tools {
            mariadbd: server.to_path_buf(),
            mariadb,
            version,
            install_db: if mariadb { Some(pick(&["mariadb-install-db", "mysql_install_db"])?) } else { None },
            admin: pick(admin)?,
            client: pick(client)?,
            sysbench: require("sysbench")?,
        })
    }
}
