//! What must go when a binary is interrupted (Ctrl-C, SIGTERM), where no destructor runs: the
//! running servers (SIGKILL) and the instances' directories. Instances and servers register
//! here while they live; [`on_interrupt`] installs the handler (binaries only: a library must not
//! take the process's signals).

use std::path::PathBuf;
use std::sync::Mutex;

static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn with<T, R>(m: &Mutex<Vec<T>>, f: impl FnOnce(&mut Vec<T>) -> R) -> R {
    f(&mut m.lock().unwrap_or_else(|e| e.into_inner()))
}

pub(crate) fn add_dir(d: PathBuf) {
    with(&DIRS, |v| v.push(d));
}

pub(crate) fn remove_dir(d: &PathBuf) {
    with(&DIRS, |v| v.retain(|x| x != d));
}

pub(crate) fn add_pid(p: u32) {
    with(&PIDS, |v| v.push(p));
}

pub(crate) fn remove_pid(p: u32) {
    with(&PIDS, |v| v.retain(|&x| x != p));
}

/// Installs a Ctrl-C / SIGTERM handler that kills the running servers, removes the instances'
/// directories (unless kept) and exits with status 130.
pub fn on_interrupt() -> crate::Result<()> {
    ctrlc::set_handler(|| {
        eprintln!("mallocshim-mariadb: interrupted; killing the servers and removing their directories");
        for p in with(&PIDS, std::mem::take) {
            // SAFETY: kill(2) on a server we started and have not reaped (it is still registered).
            unsafe {
                libc::kill(p as i32, libc::SIGKILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        // A client still finishing (sysbench seeing its server die) may write one more file.
        for d in with(&DIRS, std::mem::take) {
            for _ in 0..20 {
                if std::fs::remove_dir_all(&d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        std::process::exit(130);
    })
    .map_err(|e| format!("cannot install the Ctrl-C handler: {e}").into())
}
