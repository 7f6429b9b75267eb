//! `mallocshim heap --by thread|connection`: a heap profile's inuse_space and alloc_space per
//! allocating thread, from each sample's `tid` label (the shim charges a sampled block to the
//! thread that allocated it, whichever thread frees it: a freed block leaves that thread's
//! inuse figure, never the freeing one's), largest first, each with one standard error of the
//! sampling, sqrt(S x R) for a sampled total S at mean gap R (Poisson; the profile's period).
//! `--by connection` names each tid from the server's PROCESSLIST (`processlist`, read when the
//! command runs, or from the profile's own connection labels when `mallocshim dump --mysql-socket`
//! wrote them); threads without a connection keep the name the dump recorded. Formatting only.

use crate::processlist::Conns;
use mallocshim_format::pprof::{Profile, LABEL_THREAD, LABEL_TID};
use std::collections::BTreeMap;

/// What `--by` groups by.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// Per allocating thread (tid and the thread's name at dump time).
    Thread,
    /// Per allocating thread, named by the server's connection on it (--mysql-socket).
    Connection,
}

/// One allocating thread's share of a profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Share {
    pub tid: u32,
    /// The thread's name at dump time (`exited` when it was gone; empty: not in the profile).
    pub name: String,
    pub inuse: i64,
    pub alloc: i64,
}

/// Per tid, the summed inuse_space and alloc_space of the profile's samples.
pub fn shares(p: &Profile) -> Result<Vec<Share>, String> {
    let col = |n: &str| p.sample_index(n).ok_or_else(|| format!("the profile has no {n} sample type"));
    let (iu, al) = (col("inuse_space")?, col("alloc_space")?);
    let mut by: BTreeMap<u32, Share> = BTreeMap::new();
    let mut unlabelled = 0usize;
    for s in &p.sample {
        let Some(tid) = p.label_num(s, LABEL_TID) else {
            unlabelled += 1;
            continue;
        };
        let e = by.entry(tid as u32).or_insert_with(|| Share {
            tid: tid as u32,
            name: p.label_str(s, LABEL_THREAD).unwrap_or("?").to_string(),
            ..Default::default()
        });
        e.inuse += s.value.get(iu).copied().unwrap_or(0);
        e.alloc += s.value.get(al).copied().unwrap_or(0);
    }
    if by.is_empty() && unlabelled > 0 {
        return Err(format!(
            "the profile's {unlabelled} samples carry no {LABEL_TID} label: not a mallocshim heap profile \
             (jemalloc's own profile has no threads)"
        ));
    }
    Ok(by.into_values().collect())
}

/// The connections a labelled profile names (`mallocshim dump PID --mysql-socket`: labels
/// connection, user, host on each sample of a connection's thread), by tid; empty when it has
/// none. Their db, command and statement were not recorded.
pub fn labelled_connections(p: &Profile) -> Conns {
    use mallocshim_format::pprof::{LABEL_CONNECTION, LABEL_HOST, LABEL_USER};
    let mut m = Conns::new();
    for s in &p.sample {
        let (Some(tid), Some(id)) = (p.label_num(s, LABEL_TID), p.label_num(s, LABEL_CONNECTION)) else {
            continue;
        };
        m.entry(tid as u32).or_insert_with(|| {
            vec![crate::processlist::Conn {
                id: id as u64,
                user: p.label_str(s, LABEL_USER).unwrap_or_default().to_string(),
                host: p.label_str(s, LABEL_HOST).unwrap_or_default().to_string(),
                ..Default::default()
            }]
        });
    }
    m
}

/// One standard error of a sampled total of `s` bytes at a mean gap of `r` bytes: sqrt(s x r).
pub fn std_error(s: i64, r: i64) -> i64 {
    ((s.max(0) as f64) * (r.max(0) as f64)).sqrt().round() as i64
}

/// The rows of `--by connection`: the profile's shares, each tid named by its connections (or
/// its thread name), plus a zero row for each connection whose thread holds no sample.
pub fn with_connections(shares: Vec<Share>, conns: &Conns) -> Vec<(Share, String)> {
    let mut rows: Vec<(Share, String)> = Vec::new();
    for s in shares {
        let who = match conns.get(&s.tid) {
            Some(cs) => describe(cs),
            None => format!("thread {}", s.name),
        };
        rows.push((s, who));
    }
    for (tid, cs) in conns {
        if !rows.iter().any(|(s, _)| s.tid == *tid) {
            rows.push((Share { tid: *tid, ..Default::default() }, describe(cs)));
        }
    }
    rows
}

fn describe(cs: &[crate::processlist::Conn]) -> String {
    let one: Vec<String> = cs.iter().map(|c| c.label()).collect();
    if cs.len() > 1 {
        format!("pool worker, {} connections: {}", cs.len(), one.join("; "))
    } else {
        one.join("")
    }
}

/// The table, largest first by inuse_space (by alloc_space with `by_alloc`), `n` rows.
pub fn table(mut rows: Vec<(Share, String)>, mean: i64, by_alloc: bool, n: usize, what: &str) -> String {
    let key = |s: &Share| if by_alloc { (s.alloc, s.inuse) } else { (s.inuse, s.alloc) };
    rows.sort_by(|a, b| key(&b.0).cmp(&key(&a.0)).then_with(|| a.0.tid.cmp(&b.0.tid)));
    let (ti, ta) = rows.iter().fold((0, 0), |(i, a), (s, _)| (i + s.inuse, a + s.alloc));
    let b = super::bytes;
    let mut o = format!(
        "by {what}, largest {} first (total inuse {} ± {}, alloc {} ± {}; {} rows; ± is one standard \
         error of the sampling, sqrt(bytes x {mean}), the profile's mean gap):\n",
        if by_alloc { "alloc_space" } else { "inuse_space" },
        b(ti),
        b(std_error(ti, mean)),
        b(ta),
        b(std_error(ta, mean)),
        rows.len(),
    );
    o += &format!(
        "{:>12} {:>12} {:>12} {:>12} {:>9}  {what}\n",
        "inuse bytes", "±", "alloc bytes", "±", "tid"
    );
    for (s, who) in rows.into_iter().take(n) {
        o += &format!(
            "{:>12} {:>12} {:>12} {:>12} {:>9}  {who}\n",
            b(s.inuse),
            b(std_error(s.inuse, mean)),
            b(s.alloc),
            b(std_error(s.alloc, mean)),
            s.tid
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processlist::Conn;
    use mallocshim_format::pprof::{Label, Sample, ValueType};

    fn profile() -> Profile {
        let st = ["", "alloc_objects", "count", "alloc_space", "bytes", "inuse_objects", "inuse_space"];
        let mut string_table: Vec<String> = st.iter().map(|s| s.to_string()).collect();
        string_table.extend(["tid".into(), "thread".into(), "conn_a".into(), "bg".into()]);
        let vt = |t, u| ValueType { r#type: t, unit: u };
        let sample = |tid: i64, name: i64, alloc: i64, inuse: i64| Sample {
            location_id: vec![1],
            value: vec![1, alloc, 1, inuse],
            label: vec![
                Label { key: 7, num: tid, ..Default::default() },
                Label { key: 8, str: name, ..Default::default() },
            ],
        };
        Profile {
            sample_type: vec![vt(1, 2), vt(3, 4), vt(5, 2), vt(6, 4)],
            sample: vec![
                sample(10, 9, 64 << 20, 32 << 20),
                sample(10, 9, 1 << 20, 0),
                sample(20, 10, 4096, 4096),
            ],
            string_table,
            period: 524288,
            ..Default::default()
        }
    }

    #[test]
    fn sums_per_tid_with_the_error_of_sampling() {
        let s = shares(&profile()).unwrap();
        assert_eq!(s[0], Share { tid: 10, name: "conn_a".into(), inuse: 32 << 20, alloc: 65 << 20 });
        assert_eq!(s[1].tid, 20);
        assert_eq!(std_error(32 << 20, 524288), 4 << 20);
        let rows: Vec<_> = s.into_iter().map(|s| (s.clone(), format!("thread {}", s.name))).collect();
        let t = table(rows, 524288, false, 10, "thread");
        let first = t.lines().nth(2).unwrap();
        assert_eq!(
            first.split_whitespace().collect::<Vec<_>>()[..10],
            ["32.00", "MiB", "4.00", "MiB", "65.00", "MiB", "5.70", "MiB", "10", "thread"]
        );
        assert!(t.lines().nth(3).unwrap().ends_with("20  thread bg"), "{t}");
    }

    #[test]
    fn connections_name_threads_and_idle_ones_get_a_row() {
        let mut conns = Conns::new();
        let c = |id| Conn {
            id,
            user: "u".into(),
            host: "h".into(),
            command: "Sleep".into(),
            ..Default::default()
        };
        conns.insert(10, vec![c(5)]);
        conns.insert(30, vec![c(6), c(7)]);
        let rows = with_connections(shares(&profile()).unwrap(), &conns);
        let who: Vec<(u32, &str)> = rows.iter().map(|(s, w)| (s.tid, w.as_str())).collect();
        assert_eq!(
            who,
            [
                (10, "#5 u@h db=- Sleep"),
                (20, "thread bg"),
                (30, "pool worker, 2 connections: #6 u@h db=- Sleep; #7 u@h db=- Sleep")
            ]
        );
    }

    #[test]
    fn a_profile_without_tids_is_one_error() {
        let mut p = profile();
        p.sample.iter_mut().for_each(|s| s.label.clear());
        assert!(shares(&p).unwrap_err().contains("no tid label"));
    }
}
