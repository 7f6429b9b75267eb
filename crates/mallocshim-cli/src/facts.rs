//! Facts about a live process that `diagnose`'s remedies need beyond the dump: the options in
//! effect (the control channel's `get`, only when the channel is open now: never a signal), the
//! glibc arena heaps in /proc/PID/smaps, and, with `--mysql-socket`, the InnoDB buffer pool
//! (size, page size, pages in use) through the server's own client. Reading only; what to do
//! with them is `remedy`'s.

use std::collections::BTreeMap;
use std::time::Duration;

/// The options in effect, by name without the `MALLOCSHIM_` prefix, as `get` shows them.
pub type Settings = BTreeMap<String, String>;

/// `get` through the channel when it is open now (diagnose PID has just opened it for its dump).
pub fn settings(pid: u32) -> Option<Settings> {
    let body = crate::ctl_client::request_if_open(pid, "get", Duration::from_secs(3))?.ok()?;
    Some(parse_settings(&body))
}

/// `get`'s tab-separated rows (name, value, source, settable).
pub fn parse_settings(body: &str) -> Settings {
    body.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (n, v) = (f.next()?, f.next()?);
            Some((n.strip_prefix("MALLOCSHIM_").unwrap_or(n).to_string(), v.to_string()))
        })
        .collect()
}

/// glibc's arena heaps: `HEAP_MAX_SIZE` (64 MiB on 64-bit) aligned anonymous mappings, a
/// read-write part followed by the heap's reserved `---p` rest, 64 MiB in all.
pub const HEAP_MAX: u64 = 64 << 20;

/// The heaps of glibc's non-main arenas, from /proc/PID/smaps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arenas {
    /// Heaps found (an arena has one, or more once it outgrows 64 MiB).
    pub heaps: u64,
    /// Their resident bytes (smaps `Rss`).
    pub resident: u64,
}

/// One smaps mapping: start, end, permissions, anonymous (no path), Rss bytes.
type Mapping = (u64, u64, String, bool, u64);

fn mappings(smaps: &str) -> Vec<Mapping> {
    let mut v: Vec<Mapping> = Vec::new();
    for l in smaps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let Some(range) = f.first().filter(|r| r.contains('-') && f.len() >= 5) {
            let (a, b) = range.split_once('-').unwrap_or(("", ""));
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                v.push((a, b, f[1].to_string(), f.len() == 5, 0));
                continue;
            }
        }
        if let (Some(m), Some(kb)) = (v.last_mut(), l.strip_prefix("Rss:")) {
            m.4 = kb.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap_or(0) * 1024;
        }
    }
    v
}

/// The arena heaps in one smaps text.
pub fn parse_arenas(smaps: &str) -> Arenas {
    let m = mappings(smaps);
    let mut a = Arenas::default();
    for (i, (start, end, perm, anon, rss)) in m.iter().enumerate() {
        if !anon || !perm.starts_with("rw") || start % HEAP_MAX != 0 || end - start > HEAP_MAX {
            continue;
        }
        let rest = m.get(i + 1).filter(|n| n.0 == *end && n.2.starts_with("---") && n.3);
        let total = end - start + rest.map_or(0, |n| n.1 - n.0);
        if total == HEAP_MAX {
            a.heaps += 1;
            a.resident += rss;
        }
    }
    a
}

/// The arena heaps of process `pid`; None when its smaps cannot be read.
pub fn arenas(pid: u32) -> Option<Arenas> {
    std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok().map(|s| parse_arenas(&s))
}

/// The InnoDB buffer pool, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferPool {
    /// `innodb_buffer_pool_size`.
    pub size: u64,
    /// Pages holding data (`DATABASE_PAGES` of information_schema.INNODB_BUFFER_POOL_STATS)
    /// times `innodb_page_size`.
    pub data: u64,
    pub page: u64,
}

/// The query: size, page size, data pages.
pub const POOL_QUERY: &str = "SELECT @@innodb_buffer_pool_size, @@innodb_page_size, \
     (SELECT SUM(DATABASE_PAGES) FROM information_schema.INNODB_BUFFER_POOL_STATS)";

/// The numbers of one batch row (tab-separated; `NULL` and text left out).
fn numbers(out: &str) -> Vec<u64> {
    out.trim().split('\t').filter_map(|v| v.parse().ok()).collect()
}

/// Parses the query's one batch row.
pub fn parse_pool(out: &str) -> Result<BufferPool, String> {
    let f = numbers(out);
    match f[..] {
        [size, page, pages] => Ok(BufferPool { size, data: pages * page, page }),
        _ => Err(format!("unexpected buffer pool row from the client: {:?}", out.trim())),
    }
}

/// The buffer pool through the client; None without `--mysql-socket`.
pub fn buffer_pool(c: &crate::pfs::ConnArgs) -> Result<Option<BufferPool>, String> {
    match crate::pfs::client_output(c, POOL_QUERY)? {
        Some(out) => parse_pool(&out).map(Some),
        None => Ok(None),
    }
}

/// The server's other large buffers that are not malloc'ed (mmap()ed at start by
/// `my_large_malloc`, seen with `strace -k` on MariaDB 10.11: resident only as their pages are
/// touched, so each is an upper bound of what it holds), in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerBuffers {
    /// InnoDB's redo log buffer: two of `innodb_log_buffer_size` (the buffer and the one
    /// being written).
    pub log: u64,
    /// The MyISAM key cache's blocks: `key_buffer_size` (its hash and block links are malloc'ed).
    pub key_cache: u64,
    /// Aria's page cache: `aria_pagecache_buffer_size` (MariaDB only; 0 elsewhere).
    pub aria: u64,
}

impl ServerBuffers {
    /// All three, bytes.
    pub fn total(&self) -> u64 {
        self.log + self.key_cache + self.aria
    }
}

/// The query both servers answer: log buffer and key cache.
pub const BUFFERS_QUERY: &str = "SELECT @@innodb_log_buffer_size, @@key_buffer_size";
/// MariaDB's alone (MySQL has no Aria: that query fails and counts as 0).
pub const ARIA_QUERY: &str = "SELECT @@aria_pagecache_buffer_size";

/// Parses [`BUFFERS_QUERY`]'s row and [`ARIA_QUERY`]'s (None: failed).
pub fn parse_buffers(out: &str, aria: Option<&str>) -> Result<ServerBuffers, String> {
    let f = numbers(out);
    let [log, key_cache] = f[..] else {
        return Err(format!("unexpected server buffers row from the client: {:?}", out.trim()));
    };
    let aria = aria.and_then(|a| a.trim().parse().ok()).unwrap_or(0);
    Ok(ServerBuffers { log: 2 * log, key_cache, aria })
}

/// The other buffers through the client; None without `--mysql-socket`.
pub fn server_buffers(c: &crate::pfs::ConnArgs) -> Result<Option<ServerBuffers>, String> {
    let Some(out) = crate::pfs::client_output(c, BUFFERS_QUERY)? else { return Ok(None) };
    let aria = crate::pfs::client_output(c, ARIA_QUERY).ok().flatten();
    parse_buffers(&out, aria.as_deref()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_arena_heaps_and_their_rss() {
        let smaps = "\
555555554000-555555556000 r--p 00000000 08:01 1 /usr/bin/prog
Rss:                   8 kB
7ffff0000000-7ffff2000000 rw-p 00000000 00:00 0
Rss:                 900 kB
7ffff2000000-7ffff4000000 ---p 00000000 00:00 0
Rss:                   0 kB
7fffe8000000-7fffec000000 rw-p 00000000 00:00 0
Rss:               65536 kB
7fffd0000000-7fffd1000000 rw-p 00000000 00:00 0
Rss:                 100 kB
";
        // The first two lines are one heap (32 MiB + 32 MiB reserved), the second a full heap;
        // the last is aligned but has no reserved rest: not a heap.
        assert_eq!(parse_arenas(smaps), Arenas { heaps: 2, resident: (900 + 65536) * 1024 });
    }

    #[test]
    fn parses_settings_and_pool() {
        let s = parse_settings("MALLOCSHIM_TRIM_INTERVAL_MS\t10000\tdefault\tyes\nMALLOCSHIM_TRIM_ABOVE_RSS\toff\tdefault\tyes\n");
        assert_eq!(s["TRIM_INTERVAL_MS"], "10000");
        assert_eq!(s["TRIM_ABOVE_RSS"], "off");
        let p = parse_pool("134217728\t16384\t1000\n").unwrap();
        assert_eq!(p, BufferPool { size: 134217728, data: 16384000, page: 16384 });
        assert!(parse_pool("NULL\n").is_err());
        let b = parse_buffers("16777216\t134217728\n", Some("134217720\n")).unwrap();
        assert_eq!(b, ServerBuffers { log: 2 * 16777216, key_cache: 134217728, aria: 134217720 });
        assert_eq!(parse_buffers("16777216\t8388608\n", None).unwrap().aria, 0, "MySQL: no Aria");
        assert!(parse_buffers("16777216\n", None).is_err());
    }
}
