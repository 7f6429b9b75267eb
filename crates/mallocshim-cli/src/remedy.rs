//! What `diagnose` tells the user to do: the exact commands for the process, live first (`mallocshim
//! trim PID`, `mallocshim set PID NAME=VALUE`), each with the bytes it is expected to return from
//! the account's figures, none already in effect (the options from the channel's `get`, else the
//! dump's `trim` block) and none that would return under [`MIN_ACTION`]; then the remedies that
//! need a restart, marked as such, each with its expected saving and where the figure comes from.
//! Also names the cause in the server's terms: glibc's arena retention (what a trim can and cannot
//! return) and, with the InnoDB buffer pool's figures, its warm-up. Pure text from the figures it
//! is given; reading them is `facts`'s, the verdict is `verdict`'s.
//! Long because: every cause's remedies read the same `Facts` and options and print into one
//! live/restart list; a third of it is their unit tests.

use crate::facts::{Arenas, BufferPool, ServerBuffers, Settings};
use crate::verdict::{Kind, Verdict, RETAINED_MIN_BYTES};
use mallocshim_format::Dump;
use std::fmt::Write as _;

/// An action expected to return less than this (1 MiB) is not suggested.
pub const MIN_ACTION: u64 = 1 << 20;

/// What the remedies are computed from.
#[derive(Default)]
pub struct Facts<'a> {
    /// The process, when diagnosed live (else the dump's pid, marked "if it still runs").
    pub pid: Option<u32>,
    pub dump: Option<&'a Dump>,
    pub settings: Option<Settings>,
    pub arenas: Option<Arenas>,
    pub pool: Option<BufferPool>,
    /// The server's other buffers outside malloc (with `pool`).
    pub buffers: Option<ServerBuffers>,
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

/// An option's value now: `get`'s, else the dump's trim block, else None.
fn option(f: &Facts, name: &str) -> Option<String> {
    if let Some(v) = f.settings.as_ref().and_then(|s| s.get(name)) {
        return Some(v.clone());
    }
    let t = &f.dump?.trim;
    let off_or = |n: u64| if n == 0 { "off".to_string() } else { n.to_string() };
    match name {
        "TRIM_INTERVAL_MS" => Some(t.interval_ms.to_string()),
        "TRIM_ABOVE_RSS" => Some(off_or(t.above_rss_bytes)),
        "GLIBC_TRIM_THRESHOLD" => Some(off_or(t.glibc_trim_threshold_bytes)),
        _ => None,
    }
}

fn is_off(v: &str) -> bool {
    matches!(v, "off" | "0" | "")
}

/// The cause named and the actions, appended to `o`.
pub fn lines(o: &mut String, v: &Verdict, f: &Facts) {
    let retained = v.kind == Kind::Retained || v.also.contains(&Kind::Retained);
    let outside = v.kind == Kind::OutsideMalloc || v.also.contains(&Kind::OutsideMalloc);
    let mut live: Vec<(String, String)> = Vec::new();
    let mut restart: Vec<(u64, String, String)> = Vec::new();
    let mut in_effect: Vec<String> = Vec::new();
    if retained {
        retained_actions(o, v, f, (&mut live, &mut restart, &mut in_effect));
    }
    if let Some(p) = f.pool.filter(|_| outside || v.last.non_heap_bytes.unwrap_or(0) >= RETAINED_MIN_BYTES) {
        pool_lines(o, v, (p, f.buffers.unwrap_or_default()), outside, &mut restart);
    }
    if live.is_empty() && restart.is_empty() && in_effect.is_empty() {
        return;
    }
    let who = match (f.pid, f.dump) {
        (Some(_), _) => String::new(),
        (None, Some(d)) => format!(" (pid {} of the dump, if it still runs)", d.pid),
        (None, None) => String::new(),
    };
    if retained || !live.is_empty() || !in_effect.is_empty() {
        let _ = writeln!(o, "actions now, live, no restart{who}:");
        if live.is_empty() {
            let _ = writeln!(o, "  none that would return {} or more", mib(MIN_ACTION));
        }
        for (cmd, why) in &live {
            let _ = writeln!(o, "  {cmd}\n      {why}");
        }
        for s in &in_effect {
            let _ = writeln!(o, "  already in effect: {s}");
        }
    }
    if !restart.is_empty() {
        restart.sort_by_key(|r| std::cmp::Reverse(r.0));
        let _ = writeln!(o, "at the next restart (ranked by expected saving):");
        for (_, what, why) in &restart {
            let _ = writeln!(o, "  {what}\n      {why}");
        }
    }
}

type Out<'a> = (&'a mut Vec<(String, String)>, &'a mut Vec<(u64, String, String)>, &'a mut Vec<String>);

/// The retained verdict: what a trim returns, what stays and why, the commands.
fn retained_actions(o: &mut String, v: &Verdict, f: &Facts, (live, restart, in_effect): Out) {
    let l = &v.last;
    // The dump's own account when there is one (taken with its trim estimate, at one instant);
    // the history's last row may predate a trim.
    let free = f.dump.map_or(l.allocator_free_bytes.unwrap_or(0), |d| d.memory.allocator_free_bytes);
    let rss = f.dump.map_or(l.rss_bytes, |d| d.memory.rss_bytes);
    let backend = f.dump.map(|d| d.backend.as_str());
    let glibc = backend.is_none_or(|b| b == "glibc");
    let trimmable = f.dump.and_then(|d| d.memory.allocator_trimmable_bytes).filter(|_| glibc);
    let (now, src) = match trimmable {
        Some(t) => (t, "allocator_trimmable_bytes of the dump: whole free pages inside every arena's free chunks, plus the main arena's top".to_string()),
        None => (free, format!("allocator_free_bytes, an upper bound{}", if glibc { "" } else { ": pages that still hold a live block stay" })),
    };
    let kept = free.saturating_sub(now);
    if let Some(t) = trimmable {
        arena_lines(o, free, t, f.arenas);
        if let Some(d) = f.dump {
            exact_arena_line(o, &d.memory);
        }
    }
    let pid = f.pid.or(f.dump.map(|d| d.pid)).map_or("PID".to_string(), |p| p.to_string());
    if now >= MIN_ACTION {
        live.push((format!("mallocshim trim {pid}"), format!("returns about {} now ({src})", mib(now))));
    }
    let above = option(f, "TRIM_ABOVE_RSS");
    match above.as_deref() {
        Some(a) if !is_off(a) => {
            in_effect.push(format!("TRIM_ABOVE_RSS={a} (trims whenever RSS is above it)"))
        }
        _ if now >= MIN_ACTION => {
            let after = rss.saturating_sub(now);
            let ceiling = (after + after / 4).div_ceil(1 << 20).max(1);
            live.push((
                format!("mallocshim set {pid} TRIM_ABOVE_RSS={ceiling}M"),
                format!(
                    "keeps it returned: trims whenever RSS passes {ceiling} MiB (RSS after a trim now, {}, plus a quarter); each such trim returns about {} if the same retention builds up again",
                    mib(after),
                    mib(now)
                ),
            ));
        }
        _ => {}
    }
    if glibc {
        threshold_action(f, &pid, live, in_effect);
    }
    if let Some(i) = option(f, "TRIM_INTERVAL_MS").filter(|i| !is_off(i)) {
        in_effect.push(format!("TRIM_INTERVAL_MS={i} (periodic trim, skipped while the backend holds fewer free bytes than TRIM_MIN_BYTES)"));
    }
    if glibc && kept >= RETAINED_MIN_BYTES {
        // The other arenas: counted by malloc_info in the dump, else by their heaps in smaps.
        let others = f.dump.and_then(|d| d.memory.allocator_arenas).map(|a| a.saturating_sub(1));
        let heaps = others.unwrap_or(f.arenas.map_or(0, |a| a.heaps));
        let n = if heaps >= 2 { (heaps / 2).clamp(1, 4) } else { 2 };
        let bound = f.arenas.map_or(String::new(), |a| {
            format!(", at most the {} resident in the other arenas' heaps", mib(a.resident))
        });
        let kept = f.arenas.filter(|a| a.heaps > 0).map_or(kept, |a| kept.min(a.resident));
        restart.push((kept, format!("GLIBC_TUNABLES=glibc.malloc.arena_max={n} (restart)"), format!(
            "saves up to {} (allocator free {} less what a trim returns, {}: free memory left in the other arenas that no trim reaches{bound}); fewer arenas share the threads, so more lock waits in malloc: measure with `mallocshim compare`",
            mib(kept), mib(free), mib(now))));
        restart.push((kept, "MALLOCSHIM_BACKEND=jemalloc (restart)".into(), format!(
            "saves up to {} (same estimate: jemalloc keeps no per-arena top chunk and purges whole free pages on its own after 10 s); free space sharing pages with live blocks stays under any backend; measure with `mallocshim compare`",
            mib(kept))));
    }
}

/// The threshold [`threshold_action`] suggests (1 MiB) and glibc's top pad (`M_TOP_PAD`, 128 KiB):
/// what each arena's top keeps once it is in effect.
const THRESHOLD: u64 = 1 << 20;
const TOP_PAD: u64 = 128 << 10;

/// The other arenas' top chunks, which no trim reaches: `GLIBC_TRIM_THRESHOLD` fixed live makes
/// a `free()` at an arena's top give back what passes it (glibc's `heap_trim`), instead of the
/// dynamic threshold's up to 64 MiB per arena.
fn threshold_action(f: &Facts, pid: &str, live: &mut Vec<(String, String)>, in_effect: &mut Vec<String>) {
    let Some(d) = f.dump else { return };
    let Some(tops) = d.memory.allocator_other_arenas_top_bytes else { return };
    if let Some(t) = option(f, "GLIBC_TRIM_THRESHOLD").filter(|t| !is_off(t)) {
        in_effect.push(format!(
            "GLIBC_TRIM_THRESHOLD={t} (a free() at an arena's top gives back what passes it; the other arenas' tops hold {} now, kept where no thread has freed since)",
            mib(tops)
        ));
        return;
    }
    let others = d.memory.allocator_arenas.unwrap_or(1).saturating_sub(1);
    let back = tops.saturating_sub(others * (THRESHOLD + TOP_PAD));
    if back < MIN_ACTION {
        return;
    }
    live.push((
        format!("mallocshim set {pid} GLIBC_TRIM_THRESHOLD=1M"),
        format!(
            "returns up to {} as the arenas' threads next free at their tops (allocator_other_arenas_top_bytes of the dump, {} in {others} other arenas, less 1 MiB and glibc's 128 KiB top pad each); an arena no thread uses keeps its top; it costs CPU: a thread growing and shrinking its arena past 1 MiB pays a madvise and the page faults back, and glibc's mmap threshold stops rising (set at start on mariadbd, 2 cores: -18% qps on oltp_read_only, docs/memory-account.md); price it on this host with mallocshim compare --backends glibc --variant threshold:MALLOCSHIM_GLIBC_TRIM_THRESHOLD=1M",
            mib(back),
            mib(tops)
        ),
    ));
}

/// Arena retention named: how much a trim returns and what stays, in glibc's terms.
fn arena_lines(o: &mut String, free: u64, trimmable: u64, arenas: Option<Arenas>) {
    let _ = writeln!(
        o,
        "what a trim cannot return: {} of the allocator's {} free. glibc's malloc_trim(0) madvises the whole free pages inside the free chunks of every arena and shrinks the main arena's top ({} in all); it never shrinks another arena's top chunk (only a free() leaving more than M_TRIM_THRESHOLD at a heap's end does), and free space sharing pages with live blocks stays",
        mib(free.saturating_sub(trimmable)),
        mib(free),
        mib(trimmable)
    );
    if let Some(a) = arenas.filter(|a| a.heaps > 0) {
        let _ = writeln!(
            o,
            "arenas: {} heaps of glibc's other arenas (64 MiB-aligned heaps in /proc/PID/smaps; glibc makes up to 8 x cores arenas, one per thread that finds the others locked) hold {} resident, live blocks and free space together",
            a.heaps,
            mib(a.resident)
        );
    }
}

/// The arenas as glibc counts them (the dump's `malloc_info` figures), when the dump has them.
fn exact_arena_line(o: &mut String, m: &mallocshim_format::dump::Memory) {
    let (Some(n), Some(other)) = (m.allocator_arenas, m.allocator_other_arenas_free_bytes) else { return };
    let _ = writeln!(
        o,
        "glibc arenas: {n} (malloc_info(3): the main one and {} others); {} of the allocator's {} free sits in the other arenas (their bins and top chunks)",
        n.saturating_sub(1),
        mib(other),
        mib(m.allocator_free_bytes)
    );
}

/// Non-heap memory against the InnoDB buffer pool and the server's other buffers outside malloc:
/// warm-up named, the cap and what is beyond them. The pool's cap is suggested only for the
/// outside-malloc verdict when it is not warm-up.
fn pool_lines(
    o: &mut String,
    v: &Verdict,
    (p, b): (BufferPool, ServerBuffers),
    outside: bool,
    restart: &mut Vec<(u64, String, String)>,
) {
    let nh = v.last.non_heap_bytes.unwrap_or(0);
    let _ = writeln!(
        o,
        "InnoDB buffer pool: {} of data pages in use (information_schema.INNODB_BUFFER_POOL_STATS DATABASE_PAGES x innodb_page_size {}) of innodb_buffer_pool_size {}; non-heap RSS {}",
        mib(p.data),
        p.page,
        mib(p.size),
        mib(nh)
    );
    if b.total() > 0 {
        let _ = writeln!(
            o,
            "other server buffers outside malloc (mmap()ed at start, resident only as used): InnoDB log buffer {} (2 x innodb_log_buffer_size), MyISAM key cache {} (key_buffer_size), Aria page cache {} (aria_pagecache_buffer_size); {} at most",
            mib(b.log),
            mib(b.key_cache),
            mib(b.aria),
            mib(b.total())
        );
    }
    // What the server may hold outside malloc by design, and a slack for thread stacks,
    // libraries' data and the shim's own tables.
    let by_design = p.size + b.total() + p.size / 8 + (64 << 20);
    let warm_up = nh <= by_design && p.data < p.size;
    if warm_up {
        let _ = writeln!(
            o,
            "warm-up: the buffer pool fills with pages as they are read, up to innodb_buffer_pool_size; non-heap growth up to it is expected, not a leak ({} more at most{})",
            mib(p.size.saturating_sub(p.data)),
            if b.total() > 0 { format!(", and up to {} in the buffers above as they are used", mib(b.total())) } else { String::new() }
        );
    } else if nh <= by_design && b.total() > 0 {
        let _ = writeln!(
            o,
            "the server's buffers: non-heap RSS {} is within the pool's {} and the buffers above: expected as they fill, not a leak",
            mib(nh),
            mib(p.size)
        );
    } else if nh > by_design {
        let _ = writeln!(
            o,
            "beyond the server's buffers: {} of non-heap RSS is neither the pool nor the buffers above: thread stacks, other mmaps (/proc/PID/smaps)",
            mib(nh - p.size - b.total())
        );
    }
    if !outside || warm_up {
        return;
    }
    restart.push((
        0,
        "a smaller innodb_buffer_pool_size (mysqld setting; SET GLOBAL in MariaDB >= 10.2, else restart)"
            .into(),
        format!(
            "caps the pool: saves what you take off its {} once it is full (it holds {} now)",
            mib(p.size),
            mib(p.data)
        ),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use mallocshim_format::memlog::MemRow;

    const MIB: u64 = 1 << 20;

    fn verdict(live: u64, free: u64, non_heap: &dyn Fn(u64) -> u64) -> Verdict {
        let rows: Vec<MemRow> = (0..20)
            .map(|s| MemRow {
                unix_ms: 1_000_000 + s * 1000,
                rss_bytes: (live + free + non_heap(s)) * MIB,
                live_bytes: Some(live * MIB),
                allocator_free_bytes: Some(free * MIB),
                non_heap_bytes: Some(non_heap(s) * MIB),
                ..Default::default()
            })
            .collect();
        crate::verdict::diagnose(&rows).unwrap()
    }

    fn dump(free: u64, trimmable: u64) -> Dump {
        let mut d: Dump = serde_json::from_str(
            r#"{"format":"mallocshim","version":1,"pid":42,"backend":"glibc","unix_time_ms":0,"uptime_s":0,
                "sample_every":1,"totals":{},"size_classes":[],"threads":[]}"#,
        )
        .unwrap();
        d.memory.rss_bytes = 300 * MIB;
        d.memory.allocator_free_bytes = free * MIB;
        d.memory.allocator_trimmable_bytes = Some(trimmable * MIB);
        d
    }

    #[test]
    fn retained_gives_the_commands_with_bytes_and_arena_remedies() {
        let v = verdict(50, 200, &|_| 10);
        let d = dump(200, 40);
        let f = Facts {
            pid: Some(7),
            dump: Some(&d),
            arenas: Some(Arenas { heaps: 6, resident: 170 * MIB }),
            ..Default::default()
        };
        let mut o = String::new();
        lines(&mut o, &v, &f);
        assert!(o.contains("  mallocshim trim 7\n      returns about 40.0 MiB now"), "{o}");
        assert!(o.contains("  mallocshim set 7 TRIM_ABOVE_RSS=325M"), "{o}");
        // Bounded by the arenas' resident bytes.
        assert!(
            o.contains("GLIBC_TUNABLES=glibc.malloc.arena_max=3 (restart)\n      saves up to 160.0 MiB"),
            "{o}"
        );
        assert!(o.contains("arenas: 6 heaps"), "{o}");
    }

    #[test]
    fn the_other_arenas_tops_get_the_trim_threshold_until_it_is_in_effect() {
        let v = verdict(50, 200, &|_| 10);
        let mut d = dump(200, 0);
        d.memory.allocator_arenas = Some(7);
        d.memory.allocator_other_arenas_top_bytes = Some(180 * MIB);
        let f = Facts { pid: Some(7), dump: Some(&d), ..Default::default() };
        let mut o = String::new();
        lines(&mut o, &v, &f);
        // 180 MiB less 6 x (1 MiB + 128 KiB).
        assert!(
            o.contains("  mallocshim set 7 GLIBC_TRIM_THRESHOLD=1M\n      returns up to 173.2 MiB"),
            "{o}"
        );
        d.trim.glibc_trim_threshold_bytes = 1 << 20;
        let f = Facts { pid: Some(7), dump: Some(&d), ..Default::default() };
        let mut o = String::new();
        lines(&mut o, &v, &f);
        assert!(!o.contains("mallocshim set 7 GLIBC"), "{o}");
        assert!(o.contains("already in effect: GLIBC_TRIM_THRESHOLD=1048576 ("), "{o}");
        // Tops within what the threshold keeps: nothing to suggest.
        d.trim.glibc_trim_threshold_bytes = 0;
        d.memory.allocator_other_arenas_top_bytes = Some(6 * MIB);
        let f = Facts { pid: Some(7), dump: Some(&d), ..Default::default() };
        let mut o = String::new();
        lines(&mut o, &v, &f);
        assert!(!o.contains("GLIBC_TRIM_THRESHOLD"), "{o}");
    }

    #[test]
    fn nothing_to_trim_and_settings_in_effect_are_not_suggested() {
        let v = verdict(50, 200, &|_| 10);
        let d = dump(200, 0);
        let settings = crate::facts::parse_settings(
            "MALLOCSHIM_TRIM_ABOVE_RSS\t2G\tset\tyes\nMALLOCSHIM_TRIM_INTERVAL_MS\t0\tset\tyes\n",
        );
        let f = Facts { pid: Some(7), dump: Some(&d), settings: Some(settings), ..Default::default() };
        let mut o = String::new();
        lines(&mut o, &v, &f);
        assert!(!o.contains("mallocshim trim 7") && !o.contains("mallocshim set"), "{o}");
        assert!(o.contains("none that would return 1.0 MiB or more"), "{o}");
        assert!(o.contains("already in effect: TRIM_ABOVE_RSS=2G"), "{o}");
        assert!(!o.contains("TRIM_INTERVAL_MS"), "{o}");
    }

    #[test]
    fn a_buffer_pool_warming_up_is_named_not_a_problem() {
        let v = verdict(50, 2, &|s| 20 + 8 * s);
        assert_eq!(v.kind, Kind::OutsideMalloc);
        let pool = BufferPool { size: 512 * MIB, data: 150 * MIB, page: 16384 };
        let mut o = String::new();
        lines(&mut o, &v, &Facts { pool: Some(pool), ..Default::default() });
        assert!(o.contains("warm-up: the buffer pool fills"), "{o}");
        assert!(!o.contains("innodb_buffer_pool_size (mysqld"), "{o}");
        // Far beyond the pool: named, and the pool's cap suggested.
        let small = BufferPool { size: 16 * MIB, data: 16 * MIB, page: 16384 };
        let mut o = String::new();
        lines(&mut o, &v, &Facts { pool: Some(small), ..Default::default() });
        assert!(
            o.contains("beyond the server's buffers") && o.contains("a smaller innodb_buffer_pool_size"),
            "{o}"
        );
        // The same non-heap RSS within a full pool and an Aria page cache: named, no cap.
        let aria = ServerBuffers { log: 32 * MIB, key_cache: 0, aria: 128 * MIB };
        let mut o = String::new();
        lines(&mut o, &v, &Facts { pool: Some(small), buffers: Some(aria), ..Default::default() });
        assert!(
            o.contains("Aria page cache 128.0 MiB (aria_pagecache_buffer_size); 160.0 MiB at most"),
            "{o}"
        );
        assert!(o.contains("the server's buffers: non-heap RSS 172.0 MiB is within"), "{o}");
        assert!(!o.contains("beyond the server's buffers"), "{o}");
    }
}
