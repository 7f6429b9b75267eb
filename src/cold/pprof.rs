//! The heap profile as pprof reads it: a gzip'ed profile.proto (google/pprof's
//! proto/profile.proto; its messages are mallocshim_format::pprof's prost derivation) with Go's four heap
//! sample types — alloc_objects/count, alloc_space/bytes, inuse_objects/count,
//! inuse_space/bytes (weighted back to unbiased totals) — period type space/bytes with the mean
//! gap as period, the executable mappings of /proc/self/maps with their build IDs and file
//! offsets, and function names from each file's symbols where they resolve. Every location
//! keeps its raw address (the return address minus 1, inside the call instruction), so a
//! profile of a stripped binary can be symbolized later against its debug symbols by build ID.
//! Each sample is one (stack, thread) pair, labelled `thread` (the thread's comm at dump time,
//! `exited` when it is gone) and `tid`. Dump side only: allocates, reads files; runs under the
//! reentrancy guard.

use super::symbols;
use crate::hot::heapprof::{self, live};
use mallocshim_format::pprof::{
    Function, Label, Line, Location, Mapping, Profile, Sample, ValueType, EXITED, LABEL_START_ROUTINE,
    LABEL_THREAD, LABEL_TID,
};
use std::collections::HashMap;

/// The string table under construction.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.id("");
        s
    }

    fn id(&mut self, v: &str) -> i64 {
        if let Some(&i) = self.index.get(v) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(v.to_string());
        self.index.insert(v.to_string(), i);
        i
    }
}

/// Builds the profile from the live set's copy (exposed for tests of the structure).
// Long because: one pass fills profile.proto's six interlinked tables (strings,
// mappings, functions, locations, samples, labels) whose ids refer to each other; split, every
// helper would take all six plus the id maps. What is separable (Strings) is.
pub fn build(heap_table: bool) -> Profile {
    let c = live::copy();
    let mean = heapprof::rate().max(heapprof::last_rate());
    let mut st = Strings::new();
    let vt = |st: &mut Strings, t: &str, u: &str| ValueType { r#type: st.id(t), unit: st.id(u) };
    let sample_type = vec![
        vt(&mut st, "alloc_objects", "count"),
        vt(&mut st, "alloc_space", "bytes"),
        vt(&mut st, "inuse_objects", "count"),
        vt(&mut st, "inuse_space", "bytes"),
    ];
    let period_type = Some(vt(&mut st, "space", "bytes"));

    let maps = symbols::exec_maps();
    let elfs: Vec<_> = maps.iter().map(symbols::elf).collect();
    let mut mapping = Vec::with_capacity(maps.len());
    for (i, (m, e)) in maps.iter().zip(&elfs).enumerate() {
        let build_id = e.build_id.as_ref().map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
        mapping.push(Mapping {
            id: i as u64 + 1,
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.offset,
            filename: st.id(&m.path),
            build_id: build_id.map(|b| st.id(&b)).unwrap_or(0),
            has_functions: false,
            ..Default::default()
        });
    }
    let mut function = Vec::new();
    let mut fn_ids: HashMap<String, u64> = HashMap::new();
    let mut location = Vec::new();
    let mut loc_ids: HashMap<usize, u64> = HashMap::new();
    let mut fn_id = |st: &mut Strings, name: &str| -> u64 {
        if let Some(&id) = fn_ids.get(name) {
            return id;
        }
        let id = function.len() as u64 + 1;
        let n = st.id(name);
        function.push(Function { id, name: n, system_name: n, ..Default::default() });
        fn_ids.insert(name.to_string(), id);
        id
    };
    // Per mapping: (a frame resolved, a frame did not). `has_functions` is set only when every
    // frame of the mapping resolved: pprof re-symbolizes (from the file or a debug file found by
    // build ID) only mappings without it.
    let mut resolved = vec![(false, false); maps.len()];
    let mut resolve = |pc: usize, frame: bool| -> Option<String> {
        let i = maps.iter().position(|m| (pc as u64) >= m.start && (pc as u64) < m.end)?;
        let m = &maps[i];
        let name = elfs[i].function(pc as u64 - m.start + m.offset).map(str::to_string);
        if frame {
            let r = &mut resolved[i];
            (r.0, r.1) = (r.0 || name.is_some(), r.1 || name.is_none());
        }
        name
    };

    let mut inuse = vec![(0f64, 0f64); c.records.len()];
    for e in &c.live {
        if let Some(x) = inuse.get_mut(e.rec as usize) {
            x.0 += e.scale;
            x.1 += e.scale * e.size as f64;
        }
    }
    let mut names: HashMap<u32, String> = HashMap::new();
    let (k_thread, k_tid, k_role) = (st.id(LABEL_THREAD), st.id(LABEL_TID), st.id(LABEL_START_ROUTINE));
    let mut sample = Vec::with_capacity(c.records.len());
    for (r, &(io, ib)) in c.records.iter().zip(&inuse) {
        let frames = c.frames.get(r.frames_at as usize..(r.frames_at + r.nframes) as usize).unwrap_or(&[]);
        let mut ids = Vec::with_capacity(frames.len().max(1));
        for &ret in frames {
            let pc = ret.saturating_sub(1);
            let id = match loc_ids.get(&pc) {
                Some(&id) => id,
                None => {
                    let id = location.len() as u64 + 1;
                    let mapping_id = maps
                        .iter()
                        .position(|m| (pc as u64) >= m.start && (pc as u64) < m.end)
                        .map(|i| i as u64 + 1)
                        .unwrap_or(0);
                    let line = match resolve(pc, true) {
                        Some(n) => vec![Line { function_id: fn_id(&mut st, &n), line: 0 }],
                        None => Vec::new(),
                    };
                    location.push(Location { id, mapping_id, address: pc as u64, line, is_folded: false });
                    loc_ids.insert(pc, id);
                    id
                }
            };
            ids.push(id);
        }
        if ids.is_empty() {
            // A sample whose stack could not be walked (signal or coroutine stack).
            let id = *loc_ids.entry(0).or_insert_with(|| {
                let id = location.len() as u64 + 1;
                let f = fn_id(&mut st, "[stack not walked]");
                location.push(Location {
                    id,
                    line: vec![Line { function_id: f, line: 0 }],
                    ..Default::default()
                });
                id
            });
            ids.push(id);
        }
        let name = names.entry(r.tid).or_insert_with(|| {
            std::fs::read_to_string(format!("/proc/self/task/{}/comm", r.tid))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_else(|_| EXITED.to_string())
        });
        let mut label = vec![
            Label { key: k_thread, str: st.id(name), ..Default::default() },
            Label { key: k_tid, num: r.tid as i64, ..Default::default() },
        ];
        if r.role != 0 {
            let role = resolve(r.role, false).unwrap_or_else(|| format!("{:#x}", r.role));
            label.push(Label { key: k_role, str: st.id(&role), ..Default::default() });
        }
        sample.push(Sample {
            location_id: ids,
            value: vec![
                r.alloc_objects.round() as i64,
                r.alloc_bytes.round() as i64,
                io.round() as i64,
                ib.round() as i64,
            ],
            label,
        });
    }
    for (m, r) in mapping.iter_mut().zip(&resolved) {
        m.has_functions = r.0 && !r.1;
    }
    let comment = vec![st.id(&format!(
        "mallocshim heap profile: mean {} bytes, {} samples taken, {} live, dropped {} (live set full, {} max) and {} (records full, {} max)",
        mean,
        live::SAMPLES.load(core::sync::atomic::Ordering::Relaxed),
        c.live.len(),
        live::DROPPED_LIVE.load(core::sync::atomic::Ordering::Relaxed),
        live::MAX_LIVE,
        live::DROPPED_RECORDS.load(core::sync::atomic::Ordering::Relaxed),
        live::MAX_RECORDS,
    ))];
    let mut comment = comment;
    if c.left_out {
        comment.push(
            st.id("memory ran out while copying the heap profile's tables for this dump: samples left out"),
        );
    }
    comment.push(st.id(if heap_table {
        "entry table: with heap profiles (allocations count down to the next sample, frees test the filter)"
    } else {
        "entry table: without heap profiles (off since start: allocations and frees pay nothing for them)"
    }));
    let default_sample_type = st.id("inuse_space");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    Profile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        string_table: st.table,
        time_nanos: now,
        period_type,
        period: mean as i64,
        comment,
        default_sample_type,
        ..Default::default()
    }
}

/// The gzip'ed profile, ready to write as `mallocshim.<pid>.<seq>.pb.gz`.
/// `heap_table`: whether the entry table in force has the heap-profile tests
/// (`heapprof::frees_tracked`), said in the profile's comments.
pub fn render(heap_table: bool) -> Vec<u8> {
    build(heap_table).to_gz()
}
