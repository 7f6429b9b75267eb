//! jemalloc's own heap profiles (`prof:true`, `jeprof.<pid>.<seq>.<tag>.heap`, the text format
//! `heap_v2/<rate>`) read into the same profile.proto shape as the shim's, so that
//! `mallocshim heap` shows and compares both the same way (the mariadbd test compares the shim's
//! call sites with jemalloc's). Counts are unbiased as jeprof does (`1 / (1 - exp(-avg/rate))`
//! per stack); frames inside libjemalloc are dropped; the mappings are the file's
//! `MAPPED_LIBRARIES` (no build IDs: names come from the files at their paths). Parsing only.

use mallocshim_format::pprof::{Location, Mapping, Profile, Sample, ValueType};
use std::collections::HashMap;

/// Whether `text` is a jemalloc heap profile.
pub fn is_jeheap(bytes: &[u8]) -> bool {
    bytes.starts_with(b"heap_v2/")
}

/// `t*: objs: bytes [aobjs: abytes]` → the four numbers.
fn counts(line: &str) -> Option<[f64; 4]> {
    let rest = line.trim().strip_prefix("t*:")?;
    let nums: Vec<f64> =
        rest.split([':', '[', ']', ' ']).filter(|s| !s.is_empty()).filter_map(|s| s.parse().ok()).collect();
    (nums.len() == 4).then(|| [nums[0], nums[1], nums[2], nums[3]])
}

fn unbias(objs: f64, bytes: f64, rate: f64) -> (i64, i64) {
    if objs <= 0.0 {
        return (0, 0);
    }
    let scale = if rate > 1.0 { 1.0 / (1.0 - (-(bytes / objs) / rate).exp()) } else { 1.0 };
    ((objs * scale).round() as i64, (bytes * scale).round() as i64)
}

/// The profile of a jemalloc heap file.
// Long because: one line-oriented pass over jemalloc's heap file (header, stacks, counts, maps),
// each section's state needed by the next.
pub fn parse(text: &str) -> Result<Profile, String> {
    let rate: f64 = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("heap_v2/"))
        .and_then(|r| r.trim().parse().ok())
        .ok_or("not a jemalloc heap_v2 profile")?;
    let mut p = Profile { string_table: vec![String::new()], ..Default::default() };
    let mut strings: HashMap<String, i64> = HashMap::new();
    let mut st = |p: &mut Profile, s: &str| -> i64 {
        *strings.entry(s.to_string()).or_insert_with(|| {
            p.string_table.push(s.to_string());
            p.string_table.len() as i64 - 1
        })
    };
    for (t, u) in [
        ("alloc_objects", "count"),
        ("alloc_space", "bytes"),
        ("inuse_objects", "count"),
        ("inuse_space", "bytes"),
    ] {
        let vt = ValueType { r#type: st(&mut p, t), unit: st(&mut p, u) };
        p.sample_type.push(vt);
    }
    let maps = text.split("MAPPED_LIBRARIES:").nth(1).unwrap_or("");
    for l in maps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') {
            continue;
        }
        let Some((a, b)) = f[0].split_once('-') else { continue };
        let h = |s: &str| u64::from_str_radix(s, 16).unwrap_or(0);
        let id = p.mapping.len() as u64 + 1;
        let filename = st(&mut p, &f[5..].join(" "));
        p.mapping.push(Mapping {
            id,
            memory_start: h(a),
            memory_limit: h(b),
            file_offset: h(f[2]),
            filename,
            ..Default::default()
        });
    }
    let in_jemalloc = |p: &Profile, m: u64| {
        p.mapping.get(m as usize - 1).is_some_and(|m| p.str(m.filename).contains("libjemalloc"))
    };
    let mut loc_ids: HashMap<u64, u64> = HashMap::new();
    let mut stack: Option<Vec<u64>> = None;
    for l in text.split("MAPPED_LIBRARIES:").next().unwrap_or("").lines() {
        if let Some(addrs) = l.strip_prefix("@ ") {
            let mut ids = Vec::new();
            for a in addrs.split_whitespace() {
                let pc = u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap_or(0).saturating_sub(1);
                let m = p
                    .mapping
                    .iter()
                    .find(|m| pc >= m.memory_start && pc < m.memory_limit)
                    .map(|m| m.id)
                    .unwrap_or(0);
                if m != 0 && in_jemalloc(&p, m) {
                    continue;
                }
                let next = p.location.len() as u64 + 1;
                let id = *loc_ids.entry(pc).or_insert(next);
                if id == next {
                    p.location.push(Location { id, mapping_id: m, address: pc, ..Default::default() });
                }
                ids.push(id);
            }
            stack = Some(ids);
        } else if let (Some(ids), Some(c)) = (stack.as_ref(), counts(l)) {
            let (io, ib) = unbias(c[0], c[1], rate);
            let (ao, ab) = unbias(c[2], c[3], rate);
            p.sample.push(Sample {
                location_id: ids.clone(),
                value: vec![ao, ab, io, ib],
                label: Vec::new(),
            });
            stack = None;
        }
    }
    let c =
        st(&mut p, &format!("jemalloc heap profile (heap_v2), mean {rate} bytes, unbiased as jeprof does"));
    p.comment.push(c);
    p.period = rate as i64;
    Ok(p)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses() {
        let t = "heap_v2/524288\n  t*: 2: 2048 [0: 0]\n  t0: 2: 2048 [0: 0]\n@ 0x1010 0x2010\n  t*: 1: 1024 [0: 0]\n  t0: 1: 1024 [0: 0]\n\nMAPPED_LIBRARIES:\n1000-3000 r-xp 00001000 08:01 5 /usr/sbin/mariadbd\n";
        let p = super::parse(t).unwrap();
        assert_eq!(p.sample.len(), 1);
        assert_eq!(p.sample[0].location_id.len(), 2);
        assert_eq!(p.location[0].address, 0x100f);
        assert!(p.sample[0].value[3] > 1024 * 500);
    }
}
