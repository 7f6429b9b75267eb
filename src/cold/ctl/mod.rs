//! The control channel (docs/control.md): a UNIX stream socket the shim's thread listens on
//! from its start ([`Channel::open`] in the worker's loop), so a client connects without
//! signalling the process: a signal would make a blocking call of the program's (sleep, poll,
//! select, pause) return early with EINTR. Only where nothing listens (the thread has not
//! started, an earlier listen failed, the socket was removed) does a client queue the process's
//! dump signal with the attach value (`mallocshim_format::ctl`); its handler writes `a` to the
//! worker's pipe and the worker listens again.
//! The socket is `<dir>/<pid>.sock` (bound and listened on as `<pid>.sock.new`, then renamed:
//! it appears only once it listens) in a directory the shim makes with mode 0700
//! (`MALLOCSHIM_CTL_DIR`, default `/run/mallocshim` for root, else `/tmp/mallocshim-<uid>`); a
//! directory that `lstat` does not show as a directory owned by the effective uid with mode
//! 0700 (a symlink, another user's, a wider mode) is refused with one `mallocshim:` line and no
//! listener. Only root and the process's effective uid get in (SO_PEERCRED); others are closed.
//! A secure-execution process (AT_SECURE) never opens it. One client at a time, one request
//! line (at most `MAX_REQUEST` bytes) and one reply per connection, each side bounded by
//! `CLIENT_MS` of poll(2), so a stalled or killed client leaves nothing behind; the socket is
//! removed at exit (a killed process's is removed by the next client). The commands are the
//! table in [`commands`].
//! Worker-only (its thread blocks every signal and holds the reentrancy guard), except
//! [`after_fork_child`]. Never on the hot path; the hot path does not change.

pub mod commands;

use core::sync::atomic::{AtomicBool, AtomicI32, Ordering::Relaxed};
use mallocshim_format::ctl as proto;
use std::ffi::CString;

/// The listener's descriptor, for the fork handler (the worker owns the [`Channel`]).
#[link_section = ".data.mallocshim_fork"]
static LISTEN_FD: AtomicI32 = AtomicI32::new(-1);
/// A refusal was reported (one line per process).
static REFUSED: AtomicBool = AtomicBool::new(false);

/// The worker's listener.
pub struct Channel {
    fd: i32,
    path: Option<CString>,
}

impl Default for Channel {
    fn default() -> Self {
        Channel { fd: -1, path: None }
    }
}

impl Channel {
    /// The listener's descriptor while listening.
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Listens, at the thread's start and again on an attach signal: a no-op while listening on
    /// a socket that is still there (one removed by hand or by a /tmp cleaner is made anew).
    pub fn open(&mut self) {
        // SAFETY: getauxval has no preconditions.
        if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
            return;
        }
        if self.fd >= 0 {
            if self.path.as_ref().is_some_and(still_there) {
                return;
            }
            self.close();
        }
        match listen() {
            Ok((fd, path)) => {
                self.fd = fd;
                self.path = Some(path);
                LISTEN_FD.store(fd, Relaxed);
            }
            Err(msg) => {
                if !REFUSED.swap(true, Relaxed) {
                    crate::base::diag::warn!("control channel refused: {}; no listener", msg);
                }
            }
        }
    }

    /// Closes the listener and removes its socket.
    pub fn close(&mut self) {
        if self.fd < 0 {
            return;
        }
        LISTEN_FD.store(-1, Relaxed);
        // SAFETY: our listener's descriptor and its NUL-terminated socket path.
        unsafe {
            libc::close(self.fd);
            if let Some(p) = self.path.take() {
                libc::unlink(p.as_ptr());
            }
        }
        self.fd = -1;
    }

    /// Serves the clients waiting on the listener, one at a time.
    pub fn serve(&mut self) {
        for _ in 0..16 {
            // SAFETY: accept4 on our listener with no address out-parameters.
            let c = unsafe {
                libc::accept4(
                    self.fd,
                    core::ptr::null_mut(),
                    core::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if c < 0 {
                break;
            }
            if peer_allowed(c) {
                serve_client(c);
            }
            // SAFETY: the accepted descriptor, ours to close. shutdown first: a child forked
            // meanwhile holds a copy, and the client must see the end of the reply now.
            unsafe {
                libc::shutdown(c, libc::SHUT_RDWR);
                libc::close(c);
            }
        }
    }
}

/// Whether the socket at `p` is still a socket (not removed or replaced by another file).
fn still_there(p: &CString) -> bool {
    // SAFETY: a zeroed stat struct is valid plain data.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: lstat of a NUL-terminated path into the local struct.
    unsafe { libc::lstat(p.as_ptr(), &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK }
}

/// The channel directory, made and checked (module doc), or why not.
fn checked_dir() -> Result<String, String> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let conf = crate::hot::config::cstr_bytes(&crate::hot::config::current().ctl_dir);
    let conf = core::str::from_utf8(conf).map_err(|_| "MALLOCSHIM_CTL_DIR is not UTF-8".to_string())?;
    let d = proto::dir(euid, Some(conf));
    let c = CString::new(d.clone()).map_err(|_| format!("{d}: bad path"))?;
    // SAFETY: a NUL-terminated path; chmod only on the directory this call created.
    unsafe {
        if libc::mkdir(c.as_ptr(), 0o700) == 0 {
            libc::chmod(c.as_ptr(), 0o700);
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return Err(format!("cannot create {d} ({})", std::io::Error::last_os_error()));
        }
    }
    // SAFETY: a zeroed stat struct is valid plain data.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: lstat of a NUL-terminated path into the local struct.
    if unsafe { libc::lstat(c.as_ptr(), &mut st) } != 0 {
        return Err(format!("cannot lstat {d} ({})", std::io::Error::last_os_error()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(format!("{d} is not a directory (a symlink or another file)"));
    }
    if st.st_uid != euid {
        return Err(format!("{d} is owned by uid {}, not this process's uid {euid}", st.st_uid));
    }
    if st.st_mode & 0o7777 != 0o700 {
        return Err(format!("{d} has mode {:04o}, not 0700", st.st_mode & 0o7777));
    }
    Ok(d)
}

/// Binds and listens on `<dir>/<pid>.sock.new`, then renames it to `<dir>/<pid>.sock`: the
/// socket appears under its name only once it listens (a client connecting between bind and
/// listen would be refused and fall back to the attach signal, which interrupts the process's
/// blocking calls). Returns the descriptor and the path.
fn listen() -> Result<(i32, CString), String> {
    let d = checked_dir()?;
    let pid = std::process::id();
    let p = format!("{d}/{}", proto::socket_name(pid));
    let tmp = format!("{d}/{}", proto::binding_name(pid));
    // SAFETY: a zeroed sockaddr_un is valid (AF_UNIX set below).
    let mut addr: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    if tmp.len() >= addr.sun_path.len() {
        return Err(format!("{tmp}: socket path too long"));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, b) in addr.sun_path.iter_mut().zip(tmp.bytes()) {
        *dst = b as libc::c_char;
    }
    let cp = CString::new(p.clone()).map_err(|_| format!("{p}: bad path"))?;
    let ct = CString::new(tmp.clone()).map_err(|_| format!("{tmp}: bad path"))?;
    // SAFETY: socket calls on a fresh descriptor with a valid, initialised address; the stale
    // sockets removed are in our own checked directory.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0);
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        libc::unlink(ct.as_ptr());
        let len = core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), len) != 0
            || libc::chmod(ct.as_ptr(), 0o600) != 0
            || libc::listen(fd, 4) != 0
            || libc::rename(ct.as_ptr(), cp.as_ptr()) != 0
        {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            libc::unlink(ct.as_ptr());
            return Err(format!("{p}: {e}"));
        }
        Ok((fd, cp))
    }
}

/// Root and this process's effective uid only (SO_PEERCRED).
fn peer_allowed(c: i32) -> bool {
    // SAFETY: getsockopt into a zeroed local ucred of the size passed.
    unsafe {
        let mut cred: libc::ucred = core::mem::zeroed();
        let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
        if libc::getsockopt(
            c,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        ) != 0
        {
            return false;
        }
        cred.uid == 0 || cred.uid == libc::geteuid()
    }
}

/// Waits for `events` on `fd` until `deadline` (monotonic ms); false on timeout or error.
fn wait_for(fd: i32, events: libc::c_short, deadline: u64) -> bool {
    let left = deadline.saturating_sub(crate::base::clock::mono_ms());
    if left == 0 {
        return false;
    }
    let mut p = libc::pollfd { fd, events, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, left as i32) > 0 }
}

/// Reads one request line (without its newline): `Ok(None)` when the client went away or
/// stalled before a whole line (nothing is done), `Err` for an oversized line.
fn read_line(c: i32) -> Result<Option<Vec<u8>>, String> {
    let deadline = crate::base::clock::mono_ms() + proto::CLIENT_MS;
    let mut line = Vec::with_capacity(256);
    let mut buf = [0u8; 1024];
    loop {
        if let Some(n) = line.iter().position(|&b| b == b'\n') {
            line.truncate(n);
            return Ok(Some(line));
        }
        if line.len() >= proto::MAX_REQUEST {
            return Err(format!("request longer than {} bytes", proto::MAX_REQUEST));
        }
        if !wait_for(c, libc::POLLIN, deadline) {
            return Ok(None);
        }
        // SAFETY: reading into a local buffer from our non-blocking socket.
        let n = unsafe { libc::recv(c, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        match n {
            0 => return Ok(None),
            n if n < 0 => {
                if std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock {
                    return Ok(None);
                }
            }
            n => line.extend_from_slice(&buf[..n as usize]),
        }
    }
}

/// Sends the whole reply, within `CLIENT_MS` (a client that does not read is dropped).
fn send_all(c: i32, mut b: &[u8]) {
    let deadline = crate::base::clock::mono_ms() + proto::CLIENT_MS;
    while !b.is_empty() {
        // SAFETY: sending from a live buffer; MSG_NOSIGNAL: no SIGPIPE for a closed peer.
        let n = unsafe { libc::send(c, b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n > 0 {
            b = &b[n as usize..];
        } else if (n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock)
            || !wait_for(c, libc::POLLOUT, deadline)
        {
            return;
        }
    }
}

/// One connection: a request line, its reply (`ok` and the body, or one `error:` line).
fn serve_client(c: i32) {
    crate::cold::held_history::arm();
    let reply = match read_line(c) {
        Ok(None) => return,
        Err(e) => Err(e),
        Ok(Some(line)) => match core::str::from_utf8(&line) {
            Ok(s)
                if !s.trim().is_empty()
                    && s.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b) || b == b'\r') =>
            {
                commands::run(s.trim())
            }
            _ => Err("malformed request: one line of printable ASCII, e.g. `help`".to_string()),
        },
    };
    let text = match reply {
        Ok(body) => format!("{}\n{body}", proto::OK),
        Err(e) => format!("{}{}\n", proto::ERR, e.replace('\n', " ")),
    };
    send_all(c, text.as_bytes());
}

/// At exit: removes this process's socket, if listening (the descriptor goes with the process).
pub fn remove_at_exit() {
    if LISTEN_FD.load(Relaxed) < 0 {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let conf = crate::hot::config::cstr_bytes(&crate::hot::config::current().ctl_dir);
    let d = proto::dir(euid, core::str::from_utf8(conf).ok());
    if let Ok(p) = CString::new(format!("{d}/{}", proto::socket_name(std::process::id()))) {
        // SAFETY: a NUL-terminated path in our own channel directory.
        unsafe { libc::unlink(p.as_ptr()) };
    }
}

/// Fork child handler (async-signal-safe: close only): the parent's listener is not the
/// child's; its socket stays the parent's to remove.
pub fn after_fork_child() {
    // Loaded first: a swap writes the page even when there is nothing to close, and each page a
    // child writes is a copy.
    if LISTEN_FD.load(Relaxed) < 0 {
        return;
    }
    let fd = LISTEN_FD.swap(-1, Relaxed);
    if fd >= 0 {
        // The inherited copy of the parent's listener, ours to close (the system call: no libc
        // page for the child to fault).
        crate::base::sys::close_raw(fd);
    }
}
