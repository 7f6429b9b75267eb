//! `mallocshim diagnose MEMLOG.csv|DUMP.json|PID [DUMP.json | PROFILE.pb.gz ...]`: reads a
//! memlog, or the memory history a dump carries (`history`, docs/history.md), or the history of
//! a dump it asks process PID for (as `mallocshim dump` does), and further dumps and heap
//! profiles, through the format crate, asks `verdict` for the verdict and prints it
//! with its numbers, thresholds and what to set; the growing call sites come from `heap`'s
//! growth between the first and last heap profile. Reading and printing only; the logic is in
//! `verdict` and `heap`.

use crate::verdict::{self, Growth, Kind, Verdict};
use mallocshim_format::{memlog, Dump};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(
    about = "Say where the memory went: retained by the allocator, live heap growth, outside malloc, or steady",
    long_about = "Read the memory history of a running process (PID: ask it for a dump, as `mallocshim \
                  dump PID` does, and read its history: no memlog, no restart), of a dump (DUMP.json: \
                  the last hour or so at MALLOCSHIM_HISTORY_MS, 1 s by default) or a memlog \
                  (MALLOCSHIM_MEMLOG=PATH) and print one verdict with the numbers \
                  behind it: \"live heap growth\" (live bytes rise steadily), \"retained by the \
                  allocator\" (live bytes flat or falling, allocator-free bytes large: a trim \
                  would return them), \"outside malloc\" (non-heap RSS grows) or \"steady\". \
                  Growth means a least-squares rise over the window above 5% of the peak RSS and \
                  above 16 MiB, with R² >= 0.6, that persists to the window's end (the last 25% \
                  still rising at >= 25% of the pace: one step then a plateau is a level); \
                  allocator-free bytes are large at >= 10% of RSS and >= 16 MiB. The verdict ends \
                  in actions: first the live commands for the process (`mallocshim trim PID`, \
                  `mallocshim set PID TRIM_ABOVE_RSS=...`; under glibc, for the other arenas' \
                  top chunks, `mallocshim set PID GLIBC_TRIM_THRESHOLD=1M`, returned as their \
                  threads next free there), each with the bytes it is expected \
                  to return (the dump's allocator_trimmable_bytes under glibc), none already in \
                  effect (the options from the control channel's `get`) and none that would \
                  return under 1 MiB; then the remedies that need a restart \
                  (GLIBC_TUNABLES=glibc.malloc.arena_max=N, MALLOCSHIM_BACKEND=jemalloc, \
                  innodb_buffer_pool_size), ranked by expected saving, with its source. Under \
                  glibc it names what a trim cannot return and the other arenas' heaps (from \
                  /proc/PID/smaps). With --mysql-socket, non-heap memory is set against the InnoDB \
                  buffer pool (innodb_buffer_pool_size, information_schema.INNODB_BUFFER_POOL_STATS \
                  data pages x innodb_page_size) and the server's other buffers that are mmap()ed, \
                  not malloc'ed (2 x innodb_log_buffer_size, key_buffer_size, \
                  aria_pagecache_buffer_size), so that their warm-up is named. With two or more dumps of the process, the first and last are \
                  compared: the size classes and thread start routines whose held bytes \
                  (allocated minus freed) grew are named. With two or more heap profiles \
                  (MALLOCSHIM_DUMP_FORMATS=pprof, .pb.gz), the live heap growth verdict names \
                  the call sites whose in-use bytes grew from the first to the last (as \
                  `mallocshim heap LAST FIRST` computes it). With --mysql-socket, threads are named \
                  by the server's performance_schema.threads NAME (joined on THREAD_OS_ID = tid, \
                  through the mariadb/mysql client; MariaDB needs performance_schema=ON; without it \
                  a note says so and the rest is printed). With --mysql-socket and heap \
                  profiles, the connections (and server threads) whose held bytes grew the most \
                  are named: from the first to the last dump, or, with one dump or a PID, from \
                  the dump's oldest held-bytes checkpoint (held_checkpoints: taken when the \
                  shim's thread starts and, for an hour after each control-channel request or \
                  dump, every twelfth of the history's span, 5 min by default, the last 13 \
                  kept, so about the last hour); a dump without \
                  checkpoints names those that hold the most. They are named from the dumps' per-thread live_bytes and information_schema.PROCESSLIST \
                  read now, each with `KILL CONNECTION <id>`, which frees what the session holds.\n\n\
                  Exit status: 0 with a verdict, 2 on bad input (one line, prefixed \
                  \"mallocshim diagnose:\").",
    after_help = "Examples:\n  mallocshim diagnose $(pidof mariadbd)\n  \
                  mallocshim diagnose mallocshim.1234.7.json\n  \
                  mallocshim diagnose mallocshim.1234.0.json mallocshim.1234.7.json\n  \
                  mallocshim diagnose /var/tmp/mysqld.memlog.csv \
                  mallocshim.1234.0.json mallocshim.1234.5.json\n  \
                  mallocshim diagnose mysqld.memlog.csv mallocshim.1234.0.pb.gz mallocshim.1234.5.pb.gz"
)]
pub struct Args {
    /// The memlog CSV, a dump (its memory history; with more dumps, the last one's), or the pid
    /// of a running process under the shim (its history, from a dump asked for now).
    #[arg(value_name = "MEMLOG.csv|DUMP.json|PID")]
    pub memlog: PathBuf,
    /// Dumps (JSON) and heap profiles (.pb.gz) of the same process, oldest first.
    #[arg(value_name = "DUMP.json|PROFILE.pb.gz")]
    pub dumps: Vec<PathBuf>,

    #[command(flatten)]
    pub conn: crate::pfs::ConnArgs,
}

pub(crate) fn mib(b: f64) -> String {
    format!("{:.1} MiB", b / (1u64 << 20) as f64)
}

pub(crate) fn mibu(b: u64) -> String {
    mib(b as f64)
}

/// A pid: all digits and no such file.
fn as_pid(p: &std::path::Path) -> Option<u32> {
    let s = p.to_str()?;
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && !p.exists()).then(|| s.parse().ok()).flatten()
}

/// A JSON dump (by its extension, else by its first byte).
fn is_dump(p: &std::path::Path) -> bool {
    p.extension().is_some_and(|e| e == "json")
        || std::fs::read(p).ok().and_then(|b| b.iter().find(|c| !c.is_ascii_whitespace()).copied())
            == Some(b'{')
}

/// The rows behind the verdict and where they came from: a memlog's, or the memory history of
/// the last dump (`dumps`, which a pid's new dump joins).
fn rows(a: &Args, dumps: &mut Vec<Dump>) -> Result<(Vec<memlog::MemRow>, String), String> {
    let src = &a.memlog;
    if let Some(pid) = as_pid(src) {
        let files = crate::dump_cmd::dump(pid, None, 10.0).map_err(|f| f.msg)?;
        let json = files.iter().find(|p| p.extension().is_some_and(|e| e == "json")).ok_or_else(|| {
            format!("process {pid} wrote no JSON dump (its MALLOCSHIM_DUMP_FORMATS): no history to read")
        })?;
        dumps.push(Dump::read(json).map_err(|e| e.to_string())?);
        return history_rows(dumps, &json.display().to_string());
    }
    if is_dump(src) {
        dumps.insert(0, Dump::read(src).map_err(|e| e.to_string())?);
        let last = a.dumps.iter().rev().find(|p| is_dump(p)).unwrap_or(src);
        return history_rows(dumps, &last.display().to_string());
    }
    let rows = memlog::read(src)?;
    Ok((rows, format!("memlog {}", src.display())))
}

fn history_rows(dumps: &[Dump], name: &str) -> Result<(Vec<memlog::MemRow>, String), String> {
    let d = dumps.last().ok_or("no dump")?;
    if d.history.is_empty() {
        return Err(format!(
            "{name}: the dump has no memory history (a shim older than the history, or MALLOCSHIM_HISTORY_MS=0): give a memlog"
        ));
    }
    let h = &d.history;
    Ok((h.mem_rows(), format!("memory history of {name} (pid {}, one row per {} ms)", d.pid, h.period_ms)))
}

pub fn run(a: &Args) -> Result<String, String> {
    let mut dumps = Vec::new();
    let mut profiles = Vec::new();
    // Dumps given after the first argument, oldest first.
    let mut later = Vec::new();
    for p in &a.dumps {
        if p.to_string_lossy().ends_with(".pb.gz") {
            profiles.push(crate::heap::read(p)?);
        } else {
            later.push(Dump::read(p).map_err(|e| e.to_string())?);
        }
    }
    dumps.extend(later);
    let (rows, from) = rows(a, &mut dumps)?;
    let v = verdict::diagnose(&rows).map_err(|e| format!("{}: {e}", a.memlog.display()))?;
    let sites = match (profiles.first(), profiles.last()) {
        (Some(first), Some(last)) if profiles.len() >= 2 => {
            Some(crate::heap::growth_rows(first, last, "inuse_space")?)
        }
        _ => None,
    };
    // Thread names need performance_schema (off by default in MariaDB): without it the buffer
    // pool's figures still count, and the reason is one line.
    let mut notes = String::new();
    let ps = crate::pfs::query(&a.conn).unwrap_or_else(|e| {
        let _ = writeln!(notes, "note: no thread names: {e}");
        None
    });
    let pid = as_pid(&a.memlog);
    let facts = crate::remedy::Facts {
        pid,
        dump: dumps.last(),
        settings: pid.and_then(crate::facts::settings),
        // Only for a live pid: a dump's pid may since belong to another process.
        arenas: pid.and_then(crate::facts::arenas),
        pool: crate::facts::buffer_pool(&a.conn)?,
        buffers: crate::facts::server_buffers(&a.conn)?,
    };
    let mut out = render(&v, &dumps, sites.as_deref(), ps.as_ref());
    if a.conn.mysql_socket.is_some() {
        match crate::processlist::query(&a.conn) {
            Ok(Some(conns)) => match pid.map_or(Ok(()), |p| crate::processlist::check_server(p, &conns)) {
                Ok(()) => crate::diagnose_conns::lines(&mut out, &dumps, &conns),
                Err(e) => {
                    let _ = writeln!(notes, "note: no connections: {e}");
                }
            },
            Ok(None) => {}
            Err(e) => {
                let _ = writeln!(notes, "note: no connections: {e}");
            }
        }
    }
    crate::remedy::lines(&mut out, &v, &facts);
    out.push_str(&notes);
    out.push_str(&format!("from: {from}\n"));
    Ok(out)
}

/// The call sites whose in-use bytes grew between the first and last heap profile.
fn site_lines(out: &mut String, rows: &[(String, i64, i64)]) {
    let grew: Vec<_> = rows.iter().filter(|(_, b, c)| c > b).take(8).collect();
    if grew.is_empty() {
        let _ = writeln!(out, "  no call site held more bytes in the last heap profile");
        return;
    }
    let _ = writeln!(out, "  call sites whose in-use bytes grew (heap profiles, inuse_space estimate):");
    for (site, b, c) in grew {
        let _ = writeln!(
            out,
            "    {site}: {} -> {} (+{})",
            crate::heap::bytes(*b),
            crate::heap::bytes(*c),
            crate::heap::bytes(c - b)
        );
    }
}

fn growth_lines(out: &mut String, what: &str, g: &Growth) {
    if g.is_empty() {
        let _ = writeln!(out, "  no {what} held more bytes in the later dump");
        return;
    }
    let _ = writeln!(out, "  {what} whose held bytes grew (allocated minus freed):");
    for (k, h0, h1, n) in g.iter().take(8) {
        let _ = writeln!(
            out,
            "    {k}: {} -> {} (+{}), {n} allocations in between",
            mib(*h0 as f64),
            mib(*h1 as f64),
            mib((h1 - h0) as f64)
        );
    }
}

/// The verdict as text.
pub fn render(
    v: &Verdict,
    dumps: &[Dump],
    sites: Option<&[(String, i64, i64)]>,
    ps: Option<&crate::pfs::PsThreads>,
) -> String {
    let mut o = String::new();
    header_lines(&mut o, v);
    why_lines(&mut o, v, dumps, sites);
    for k in &v.also {
        let _ = writeln!(o, "also: {}", k.name());
    }
    dump_lines(&mut o, dumps, ps);
    o
}

/// The verdict's first lines: its name, the window, the three trends and the thresholds.
fn header_lines(o: &mut String, v: &Verdict) {
    let l = &v.last;
    let _ = writeln!(o, "verdict: {}", v.kind.name());
    let _ = writeln!(
        o,
        "window: {} rows over {:.1} s; RSS now {} (peak {}), live {}, allocator free {}, non-heap {}",
        v.rows,
        v.window_s,
        mibu(l.rss_bytes),
        mibu(v.peak_rss),
        mibu(l.live_bytes.unwrap_or(0)),
        mibu(l.allocator_free_bytes.unwrap_or(0)),
        mibu(l.non_heap_bytes.unwrap_or(0))
    );
    for (name, f) in [("live bytes", &v.live), ("non-heap bytes", &v.non_heap), ("RSS", &v.rss)] {
        let _ = writeln!(
            o,
            "trend: {name} {} -> {}, fitted {}/s ({} over the window, R²={:.2})",
            mibu(f.first),
            mibu(f.last),
            mib(f.bytes_per_s),
            mib(f.rise_bytes),
            f.r2
        );
    }
    let _ = writeln!(
        o,
        "thresholds: growth = fitted rise > {} (max of {:.0}% of peak RSS and {}) with R² >= {}, still rising in the window's last {:.0}% at >= {:.0}% of that pace; allocator free large >= {} (max of {:.0}% of RSS and {})",
        mibu(v.growth_threshold),
        verdict::GROWTH_FRAC * 100.0,
        mibu(verdict::GROWTH_MIN_BYTES),
        verdict::GROWTH_MIN_R2,
        verdict::TAIL_FRAC * 100.0,
        verdict::TAIL_PACE * 100.0,
        mibu(v.retained_threshold),
        verdict::RETAINED_FRAC * 100.0,
        mibu(verdict::RETAINED_MIN_BYTES)
    );
}

/// Why the verdict, and what to set or do about it.
fn why_lines(o: &mut String, v: &Verdict, dumps: &[Dump], sites: Option<&[(String, i64, i64)]>) {
    match v.kind {
        Kind::Retained => retained_lines(o, &v.last, dumps),
        Kind::LiveHeapGrowth => {
            let _ = writeln!(
                o,
                "why: live bytes grow at {}/s ({} over the window): the program holds more and more",
                mib(v.live.bytes_per_s),
                mib(v.live.rise_bytes)
            );
            let _ = writeln!(o, "what to do: find the holder (a trim cannot return live memory); give two dumps to name the size classes and threads, two heap profiles to name the call sites");
            if let Some(rows) = sites {
                site_lines(o, rows);
            }
        }
        Kind::OutsideMalloc => {
            let _ = writeln!(
                o,
                "why: non-heap RSS grows at {}/s ({} over the window): memory not from malloc (buffer pool, thread stacks, other mmaps)",
                mib(v.non_heap.bytes_per_s),
                mib(v.non_heap.rise_bytes)
            );
            let _ = writeln!(o, "what to do: no allocator setting helps; look at the server's own buffers (innodb_buffer_pool_size, thread count x stack size) and /proc/PID/smaps");
        }
        Kind::Steady => {
            let _ = writeln!(o, "why: no growth above the threshold and no large allocator-free memory");
        }
    }
}

/// The retained verdict's why and what a trim returns (the commands: `remedy`).
fn retained_lines(o: &mut String, l: &memlog::MemRow, dumps: &[Dump]) {
    // The last dump's account (one instant with its trim estimate), else the history's last row.
    let free = dumps.last().map_or(l.allocator_free_bytes.unwrap_or(0), |d| d.memory.allocator_free_bytes);
    // glibc's estimate of what a trim gives back, from the last dump when it has one.
    let trimmable = dumps.last().and_then(|d| d.memory.allocator_trimmable_bytes);
    let _ = writeln!(
        o,
        "why: live bytes did not grow while the allocator keeps {} resident that the program does not use",
        mibu(free)
    );
    // The memlog does not name its backend; a dump of the same process does.
    let backend = dumps.first().map(|d| d.backend.as_str());
    let bound = match backend {
        Some("glibc") | None => "",
        Some(_) => ", at most: pages that still hold a live block stay",
    };
    match trimmable {
        Some(t) => {
            let _ = writeln!(
                o,
                "a trim would return now: {} (allocator_trimmable_bytes: whole pages inside free chunks; the other {} of allocator free shares pages with live blocks or sits where glibc's trim does not reach)",
                mibu(t),
                mibu(free.saturating_sub(t))
            );
        }
        None => {
            let _ = writeln!(o, "a trim would return now: {} (allocator_free_bytes{bound})", mibu(free));
        }
    }
}

/// What grew between the first and the last dump, by size class and by thread.
fn dump_lines(o: &mut String, dumps: &[Dump], ps: Option<&crate::pfs::PsThreads>) {
    if let (Some(a), Some(b)) = (dumps.first(), dumps.last()) {
        if dumps.len() >= 2 {
            let (t0, t1) = (crate::table::utc(a.unix_time_ms), crate::table::utc(b.unix_time_ms));
            let apart = crate::table::apart_s(a.unix_time_ms, b.unix_time_ms);
            let _ = writeln!(o, "dumps: pid {} at {t0} -> {t1} ({apart} apart)", b.pid);
            growth_lines(o, "size classes", &verdict::class_growth(a, b));
            let what = if ps.is_some() {
                "thread roles (performance_schema names)"
            } else {
                "thread start routines"
            };
            growth_lines(o, what, &verdict::thread_growth(a, b, ps));
        }
    }
}
