//! `mallocshim dump PID --mysql-socket`: the heap profile it wrote, labelled with the server's
//! connection on each allocating thread (labels `connection`, `user`, `host`: mallocshim-format's
//! `pprof::label_connections`), read from PROCESSLIST right after the dump, so that `heap --by
//! connection` and `go tool pprof -tagfocus` read it later, elsewhere, without the server. The
//! file is replaced whole (`secure_write`); nothing else is written.

use crate::pfs::ConnArgs;
use crate::processlist::{check_server, query, Conns};
use std::path::{Path, PathBuf};

/// Labels every `.pb.gz` of `files` (process `pid`'s new dump) with the connections read
/// through `conn`; nothing without `--mysql-socket`. Returns a line for stdout when there was no
/// profile to label; Err (one line) when the connections or a profile could not be had.
pub fn label(pid: u32, files: &[PathBuf], conn: &ConnArgs) -> Result<String, String> {
    if conn.mysql_socket.is_none() {
        return Ok(String::new());
    }
    let conns = query(conn).map_err(|e| format!("the server's connections: {e}"))?.unwrap_or_default();
    check_server(pid, &conns)?;
    let profiles: Vec<&PathBuf> = files.iter().filter(|p| p.to_string_lossy().ends_with(".pb.gz")).collect();
    for p in &profiles {
        let n = label_profile(p, &conns).map_err(|e| format!("{}: {e}", p.display()))?;
        eprintln!("mallocshim dump: {}: {n} samples labelled with their connection", p.display());
    }
    Ok(match profiles.is_empty() {
        true => "(no heap profile to label: the process's MALLOCSHIM_DUMP_FORMATS has no pprof)\n".into(),
        false => String::new(),
    })
}

/// Writes the connection of each thread into heap profile `p`. Under a thread pool a worker's
/// tid has several connections: the first one's is written. Returns the samples labelled.
fn label_profile(p: &Path, conns: &Conns) -> Result<usize, String> {
    let mut prof = mallocshim_format::pprof::Profile::read(p).map_err(|e| e.to_string())?;
    let by_tid =
        conns.iter().map(|(t, cs)| (*t, (cs[0].id, cs[0].user.clone(), cs[0].host.clone()))).collect();
    let n = prof.label_connections(&by_tid);
    mallocshim_cli::secure_write::write(p, &prof.to_gz()).map_err(|e| e.to_string())?;
    Ok(n)
}
