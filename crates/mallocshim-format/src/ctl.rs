//! The control channel's protocol constants, shared by the shim (`src/cold/ctl/`, the server)
//! and the `mallocshim` command (the client): how a client asks a process to listen again (the
//! shim's thread listens from its start; the attach signal is for a process where nothing
//! listens), where the
//! socket is, and the request and reply framing. Described in docs/control.md.

/// The `sigval` a client queues with the process's dump signal (`sigqueue(2)`, si_code
/// `SI_QUEUE`) to ask for the channel instead of a dump: "mallctl1" in ASCII.
pub const ATTACH_MAGIC: usize = 0x6d61_6c6c_6374_6c31;

/// Longest request line, newline included, in bytes; a longer one gets one error reply.
pub const MAX_REQUEST: usize = 4096;

/// How long the server waits for a client's request line and for its reply to be taken, each.
pub const CLIENT_MS: u64 = 2_000;

/// The channel directory for a process of effective uid `euid`, `configured` being its
/// `MALLOCSHIM_CTL_DIR` (`None`, empty or `auto`: the default).
pub fn dir(euid: u32, configured: Option<&str>) -> String {
    match configured {
        Some(d) if !d.is_empty() && d != "auto" => d.to_string(),
        _ if euid == 0 => "/run/mallocshim".to_string(),
        _ => format!("/tmp/mallocshim-{euid}"),
    }
}

/// The socket's file name in the channel directory.
pub fn socket_name(pid: u32) -> String {
    format!("{pid}.sock")
}

/// The name the socket is bound and listened on before it is renamed to [`socket_name`], so that
/// a client never finds a socket that does not listen yet (its connect would be refused, and it
/// would fall back to the attach signal).
pub fn binding_name(pid: u32) -> String {
    format!("{pid}.sock.new")
}

/// The pid of a channel directory's entry named [`socket_name`] or [`binding_name`].
pub fn socket_pid(name: &str) -> Option<u32> {
    let stem = name.strip_suffix(".sock").or_else(|| name.strip_suffix(".sock.new"))?;
    stem.parse().ok().filter(|&p| p > 0)
}

/// First line of a successful reply; the body follows.
pub const OK: &str = "ok";
/// Prefix of the one-line error reply.
pub const ERR: &str = "error: ";
