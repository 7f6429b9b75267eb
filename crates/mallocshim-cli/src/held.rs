//! Who holds the heap: `mallocshim top PID --by thread|connection|user` live, and `diagnose`'s
//! lines on the connections that hold or grew the most. Each view joins
//! the dump's per-thread `live_bytes` (the heap profile's sampled live blocks, charged to the
//! allocating thread; one standard error sqrt(S x R) at the dump's mean gap R) and the exact
//! bytes each thread allocated over the interval (its ops' `bytes` but free's, subtracted from the
//! previous dump) with the server's connections read at the same moment (`processlist`, through
//! the client as `--mysql-socket` does). Threads that are not connections keep their names
//! (InnoDB's, the shim's); exited threads' blocks are one row per start routine. Formatting
//! only: the caller takes the dumps and the connections.

use crate::processlist::{Conn, Conns};
use crate::table::{describe, Align, Format, Table};
use mallocshim_format::classes::ALLOC_OPS;
use mallocshim_format::dump::STATE_LIVE;
use mallocshim_format::{Dump, HeldCheckpoint, ThreadRow};
use std::collections::BTreeMap;

/// What the view groups by.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// Per thread: tid and name.
    Thread,
    /// Per connection of the server (--mysql-socket): id, user@host, db, command, statement.
    Connection,
    /// Per user of the server (--mysql-socket): its connections summed.
    User,
}

/// One thread's holding in the current dump and its allocation over the interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Held {
    /// 0 for an exited row.
    pub tid: u32,
    pub name: String,
    pub live: u64,
    /// Bytes allocated over the interval (exact counts; 0 in the first view).
    pub alloc: u64,
}

fn alloc_bytes(t: &ThreadRow) -> u64 {
    ALLOC_OPS.iter().filter_map(|o| t.ops.get(*o)).map(|o| o.bytes).sum()
}

/// Every row of `cur` (live threads and exited rows) with its live bytes and what it allocated
/// since `prev` (a thread absent from `prev` started since: all of its bytes).
pub fn held(prev: Option<&Dump>, cur: &Dump) -> Vec<Held> {
    // A live thread by tid (its name may change), an exited row by its name.
    let key =
        |t: &ThreadRow| if t.state == STATE_LIVE { (t.tid, String::new()) } else { (0, t.name.clone()) };
    let before: BTreeMap<_, u64> =
        prev.map(|p| p.threads.iter().map(|t| (key(t), alloc_bytes(t))).collect()).unwrap_or_default();
    cur.threads
        .iter()
        .map(|t| Held {
            tid: if t.state == STATE_LIVE { t.tid } else { 0 },
            name: t.name.clone(),
            live: t.live_bytes.unwrap_or(0),
            alloc: match prev {
                None => 0,
                Some(_) => alloc_bytes(t).saturating_sub(before.get(&key(t)).copied().unwrap_or(0)),
            },
        })
        .collect()
}

/// One row of a view: who, then live bytes, bytes allocated, the server's MEMORY_USED.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub who: Vec<String>,
    pub live: u64,
    pub alloc: u64,
    pub memory_used: Option<u64>,
}

fn conn_cells(c: &Conn) -> Vec<String> {
    vec![
        c.id.to_string(),
        format!("{}@{}", c.user, c.host),
        c.db.clone().unwrap_or_else(|| "-".into()),
        c.command.clone(),
    ]
}

/// The rows grouped `by`, most held first. Under a thread pool one worker's tid has several
/// connections: its bytes go to its first row, named `+N` for the others it served.
pub fn rows(held: &[Held], conns: &Conns, by: By) -> Vec<Row> {
    let mut out: BTreeMap<Vec<String>, Row> = BTreeMap::new();
    let mut add = |who: Vec<String>, h: Option<&Held>, mu: Option<u64>| {
        let r = out.entry(who.clone()).or_insert_with(|| Row { who, ..Row::default() });
        if let Some(h) = h {
            r.live += h.live;
            r.alloc += h.alloc;
        }
        if let Some(m) = mu {
            *r.memory_used.get_or_insert(0) += m;
        }
    };
    let thread = |h: &Held| match h.tid {
        0 => vec!["-".into(), h.name.clone(), "-".into(), "-".into()],
        t => vec!["-".into(), format!("{} ({t})", h.name), "-".into(), "-".into()],
    };
    for h in held {
        match (by, conns.get(&h.tid).filter(|_| h.tid != 0)) {
            (By::Thread, _) => add(vec![h.tid.to_string(), h.name.clone()], Some(h), None),
            (By::Connection, Some(cs)) => {
                let mut who = conn_cells(&cs[0]);
                if cs.len() > 1 {
                    who[0] += &format!(" +{}", cs.len() - 1);
                }
                add(who, Some(h), cs[0].memory_used);
            }
            (By::User, Some(cs)) => add(vec![cs[0].user.clone()], Some(h), None),
            (By::Connection, None) => add(thread(h), Some(h), None),
            (By::User, None) if h.tid == 0 => add(vec!["(exited threads)".into()], Some(h), None),
            (By::User, None) => add(vec!["(server threads)".into()], Some(h), None),
        }
    }
    // Connections whose thread never called the shim hold nothing; per user, every connection's
    // MEMORY_USED counts once.
    for (tid, cs) in conns {
        let seen = held.iter().any(|h| h.tid == *tid && *tid != 0);
        for (i, c) in cs.iter().enumerate() {
            match by {
                By::Connection if !seen && i == 0 => add(conn_cells(c), None, c.memory_used),
                By::User => add(vec![c.user.clone()], None, c.memory_used),
                _ => {}
            }
        }
    }
    let mut v: Vec<Row> = out.into_values().collect();
    v.sort_by(|a, b| b.live.cmp(&a.live).then(b.alloc.cmp(&a.alloc)).then(a.who.cmp(&b.who)));
    v
}

/// The statement column of a connection row (the first characters of INFO), by connection id.
fn statements(conns: &Conns) -> BTreeMap<String, String> {
    conns.values().flatten().map(|c| (c.id.to_string(), c.info.clone().unwrap_or_default())).collect()
}

fn mib_err(live: u64, mean: u64) -> String {
    let e = crate::heap::by::std_error(live as i64, mean as i64);
    format!("±{}", crate::table::mib(e as u64))
}

/// The connections (and server threads) whose held bytes grew by more than 1 MiB and two
/// standard errors from `a` to `b` (one dump: what they hold in `b`), most first, at most `n`:
/// (label, growth, held in `b`, MEMORY_USED). Rows by connection, as [`rows`] makes them.
pub fn grown(a: Option<&Dump>, b: &Dump, conns: &Conns, n: usize) -> Vec<(String, i64, u64, Option<u64>)> {
    let before: BTreeMap<Vec<String>, u64> = a
        .map(|a| rows(&held(None, a), conns, By::Connection).into_iter().map(|r| (r.who, r.live)).collect())
        .unwrap_or_default();
    let mean = b.prof_sample_bytes as i64;
    let mut v: Vec<(String, i64, u64, Option<u64>)> = rows(&held(None, b), conns, By::Connection)
        .into_iter()
        .map(|r| {
            let g = r.live as i64 - before.get(&r.who).copied().unwrap_or(0) as i64;
            let label = match r.who[0].as_str() {
                "-" => format!("thread {}", r.who[1]),
                id => format!("connection {id} ({}, db {}, {})", r.who[1], r.who[2], r.who[3]),
            };
            (label, g, r.live, r.memory_used)
        })
        .filter(|(_, g, now, _)| *g > 1 << 20 && *g > 2 * crate::heap::by::std_error(*now as i64, mean))
        .collect();
    v.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    v.truncate(n);
    v
}

/// `b` as it stood at its checkpoint `c`, for [`grown`]: the checkpoint's threads that are still
/// live in `b` (named as there) with the bytes they held then; `b`'s exited rows as they are now
/// (their threads' earlier share is not kept per start routine, so they show no growth).
pub fn at_checkpoint(b: &Dump, c: &HeldCheckpoint) -> Dump {
    let mut d = b.clone();
    d.threads = b.threads.iter().filter(|t| t.state != STATE_LIVE).cloned().collect();
    for h in &c.threads {
        if let Some(t) = b.threads.iter().find(|t| t.state == STATE_LIVE && t.tid == h.tid) {
            d.threads.push(ThreadRow {
                live_bytes: Some(h.live_bytes),
                ops: Default::default(),
                ..t.clone()
            });
        }
    }
    d
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The view's first two lines: the process, RSS and the total held with its ±.
fn header(cur: &Dump, rows: &[Row], tty: bool) -> String {
    let mean = cur.prof_sample_bytes;
    let total: u64 = rows.iter().map(|r| r.live).sum();
    let mut o = format!("{}\n", describe(cur));
    if mean == 0 {
        o += "heap profiles are off in this process (MALLOCSHIM_PROF_SAMPLE_BYTES=0): nothing is charged\n";
    } else {
        o += &format!(
            "MiB: RSS {}, held by live blocks {} {} (sampled, mean gap {mean} B){}\n",
            crate::table::mib(cur.memory.rss_bytes),
            crate::table::mib(total),
            mib_err(total, mean),
            if tty { "; q quits" } else { "" }
        );
    }
    o
}

/// One view of at most `lines` lines of at most `cols` characters. Server threads holding and
/// allocating nothing are left out (counted in the last line); a connection running a statement
/// gets it on the line under its row.
#[allow(clippy::too_many_arguments)]
pub fn view(
    cur: &Dump,
    rows: &[Row],
    conns: &Conns,
    by: By,
    secs: Option<f64>,
    lines: usize,
    cols: usize,
    tty: bool,
) -> String {
    let mean = cur.prof_sample_bytes;
    let mut o = header(cur, rows, tty);
    let who: &[(&str, Align)] = match by {
        By::Thread => &[("tid", Align::Right), ("thread", Align::Left)],
        By::Connection => &[
            ("conn", Align::Right),
            ("user@host", Align::Left),
            ("db", Align::Left),
            ("command", Align::Left),
        ],
        By::User => &[("user", Align::Left)],
    };
    let mut cols_def: Vec<(&str, Align)> = who.to_vec();
    cols_def.extend([("held", Align::Right), ("±", Align::Right), ("alloc/s", Align::Right)]);
    if by != By::Thread {
        cols_def.push(("MEMORY_USED", Align::Right));
    }
    let mut t = Table::new(&cols_def);
    let quiet = |r: &Row| r.who[0] == "-" && r.live == 0 && r.alloc == 0;
    let shown: Vec<&Row> = rows.iter().filter(|r| !quiet(r)).collect();
    let st = if by == By::Connection { statements(conns) } else { BTreeMap::new() };
    let mut budget = lines.saturating_sub(5);
    let mut under: Vec<Option<String>> = Vec::new();
    for r in &shown {
        let stmt = st.get(r.who[0].split(' ').next().unwrap_or("")).filter(|s| !s.is_empty());
        let need = 1 + stmt.is_some() as usize;
        if need > budget {
            break;
        }
        budget -= need;
        let widths: &[usize] = match by {
            By::Thread => &[8, 24],
            By::Connection => &[8, 18, 8, 7],
            By::User => &[18],
        };
        let mut cells: Vec<String> = r.who.iter().zip(widths).map(|(c, w)| cut(c, *w)).collect();
        cells.push(crate::table::mib(r.live));
        cells.push(mib_err(r.live, mean));
        cells.push(secs.map_or("-".into(), |s| format!("{:.1}", r.alloc as f64 / s / 1048576.0)));
        if by != By::Thread {
            cells.push(r.memory_used.map_or("-".into(), crate::table::mib));
        }
        t.row(cells);
        under.push(stmt.map(|s| format!("      > {s}")));
    }
    let mut table = String::new();
    t.render(Format::Text, &mut table);
    for (i, l) in table.lines().enumerate() {
        o += l;
        o.push('\n');
        if let Some(Some(s)) = i.checked_sub(2).and_then(|k| under.get(k)) {
            o += s;
            o.push('\n');
        }
    }
    let n = under.len();
    if n < rows.len() {
        let rest: u64 = rows.iter().filter(|r| !quiet(r)).skip(n).map(|r| r.live).sum();
        o += &format!("({} more rows holding {} MiB)\n", rows.len() - n, crate::table::mib(rest));
    }
    o.lines().take(lines).map(|l| cut(l, cols)).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(id: u64, user: &str, mu: Option<u64>) -> Conn {
        Conn {
            id,
            user: user.into(),
            host: "localhost".into(),
            command: "Sleep".into(),
            memory_used: mu,
            ..Conn::default()
        }
    }

    #[test]
    fn groups_by_connection_and_user_most_held_first() {
        let held = vec![
            Held { tid: 10, name: "mariadbd".into(), live: 200 << 20, alloc: 1 << 20 },
            Held { tid: 11, name: "mariadbd".into(), live: 20 << 20, alloc: 0 },
            Held { tid: 12, name: "ib_pg_flush".into(), live: 30 << 20, alloc: 0 },
            Held { tid: 0, name: "exited threads of other routines".into(), live: 1 << 20, alloc: 0 },
        ];
        let mut conns = Conns::new();
        conns.insert(10, vec![conn(5, "app", Some(210 << 20))]);
        conns.insert(11, vec![conn(6, "app", Some(22 << 20))]);
        conns.insert(13, vec![conn(7, "idle", Some(80 << 10))]);
        let r = rows(&held, &conns, By::Connection);
        assert_eq!(r[0].who, vec!["5", "app@localhost", "-", "Sleep"]);
        assert_eq!((r[0].live, r[0].alloc, r[0].memory_used), (200 << 20, 1 << 20, Some(210 << 20)));
        assert_eq!(r[1].who[1], "ib_pg_flush (12)", "a server thread keeps its name");
        assert_eq!(r.last().unwrap().who[0], "7", "the idle connection, holding nothing, last");
        assert_eq!(r.len(), 5);
        let u = rows(&held, &conns, By::User);
        assert_eq!(u[0].who, vec!["app"]);
        assert_eq!((u[0].live, u[0].memory_used), (220 << 20, Some(232 << 20)));
        assert!(u.iter().any(|r| r.who == vec!["(server threads)"] && r.live == 30 << 20));
        assert!(u.iter().any(|r| r.who == vec!["(exited threads)"] && r.live == 1 << 20));
        assert!(u.iter().any(|r| r.who == vec!["idle"] && r.live == 0 && r.memory_used == Some(80 << 10)));
    }

    #[test]
    fn a_pool_worker_is_one_row_naming_the_others() {
        let held = vec![Held { tid: 10, name: "tpool".into(), live: 5 << 20, alloc: 0 }];
        let mut conns = Conns::new();
        conns.insert(10, vec![conn(5, "a", None), conn(6, "b", None)]);
        let r = rows(&held, &conns, By::Connection);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].who[0], "5 +1");
    }

    #[test]
    fn growth_from_a_checkpoint_is_per_live_thread_and_leaves_exited_rows_alone() {
        let row = |tid: u32, state: &str, name: &str, live: u64| ThreadRow {
            tid,
            name: name.into(),
            state: state.into(),
            ops: Default::default(),
            comm: name.into(),
            start_routine: None,
            creator_tid: 0,
            start_unix_ms: 0,
            exited_threads: None,
            live_bytes: Some(live),
        };
        let mut b: Dump = serde_json::from_str(
            r#"{"format":"mallocshim","version":1,"pid":42,"backend":"glibc","unix_time_ms":0,"uptime_s":0,
                "sample_every":1,"totals":{},"size_classes":[],"threads":[]}"#,
        )
        .unwrap();
        b.prof_sample_bytes = 512 << 10;
        b.threads = vec![
            row(10, STATE_LIVE, "mariadbd", 300 << 20),
            row(11, STATE_LIVE, "mariadbd", 40 << 20),
            row(0, "exited", "exited threads of other routines", 90 << 20),
        ];
        // Then: 10 held 100 MiB, 11 held as much as now, 12 (exited since) 90 MiB.
        let c = HeldCheckpoint {
            unix_time_ms: 0,
            threads: vec![
                mallocshim_format::HeldThread { tid: 10, live_bytes: 100 << 20 },
                mallocshim_format::HeldThread { tid: 11, live_bytes: 40 << 20 },
                mallocshim_format::HeldThread { tid: 12, live_bytes: 90 << 20 },
            ],
        };
        let a = at_checkpoint(&b, &c);
        let mut conns = Conns::new();
        conns.insert(10, vec![conn(5, "app", None)]);
        conns.insert(11, vec![conn(6, "app", None)]);
        let g = grown(Some(&a), &b, &conns, 5);
        assert_eq!(g.len(), 1, "{g:?}");
        assert!(g[0].0.starts_with("connection 5 "), "{g:?}");
        assert_eq!((g[0].1, g[0].2), (200 << 20, 300 << 20));
    }
}
