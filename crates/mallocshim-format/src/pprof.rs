//! The heap profile file, `mallocshim.<pid>.<seq>.pb.gz`: a gzip'ed profile.proto
//! (google/pprof's proto/profile.proto; the messages below are its prost derivation, field tags
//! as in the .proto). The shim writes it through [`Profile::to_gz`]; the `mallocshim heap`
//! command, the tests and benches read it through [`Profile::read`]. Strings are indices into
//! `string_table` (0 is the empty string), as in the .proto; [`Profile::str`] looks them up.
//! No global state; I/O only in [`Profile::read`].
//!
//! Sample labels the shim writes (one sample per stack and allocating thread): [`LABEL_TID`]
//! (numeric, the kernel tid of the thread that allocated the sample's blocks), [`LABEL_THREAD`]
//! (string, that thread's `comm` at dump time, `exited` when it was gone) and
//! [`LABEL_START_ROUTINE`] (string, its start routine, when the shim started it).

use prost::Message;
use std::io::{Read, Write};
use std::path::Path;

/// Numeric label: the kernel tid of the thread that allocated the sample's blocks.
pub const LABEL_TID: &str = "tid";
/// String label: that thread's name (`/proc/PID/task/TID/comm`) at dump time; [`EXITED`] when
/// the thread was gone.
pub const LABEL_THREAD: &str = "thread";
/// The [`LABEL_THREAD`] of a thread that had exited by the dump.
pub const EXITED: &str = "exited";
/// String label: the thread's start routine (threads the shim's `pthread_create` started).
pub const LABEL_START_ROUTINE: &str = "start_routine";
/// Numeric label: the server's connection id on the allocating thread when the profile was
/// labelled (`mallocshim dump PID --mysql-socket`, from information_schema.PROCESSLIST's TID).
pub const LABEL_CONNECTION: &str = "connection";
/// String label: that connection's user.
pub const LABEL_USER: &str = "user";
/// String label: that connection's host.
pub const LABEL_HOST: &str = "host";

/// What [`Profile::label_connections`] writes for one thread: connection id, user, host.
pub type ConnLabel = (u64, String, String);

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

impl Mapping {
    /// The file offset of run-time address `addr` in this mapping's file (what a symbol table is
    /// looked up by, and what compares across runs of one binary under ASLR).
    pub fn file_offset_of(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.memory_start).wrapping_add(self.file_offset)
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// Why a profile could not be read.
#[derive(Debug)]
pub enum ProfileError {
    /// The file could not be opened or gunzipped (the I/O error).
    Io(std::io::Error),
    /// The gunzipped bytes are not a profile.proto message.
    Decode(prost::DecodeError),
}

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProfileError::Io(e) => write!(f, "{e}"),
            ProfileError::Decode(e) => write!(f, "not a profile.proto: {e}"),
        }
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// Reads a profile file: gzip'ed (as the shim and Go write it) or raw profile.proto.
    pub fn read(path: impl AsRef<Path>) -> Result<Profile, ProfileError> {
        let bytes = std::fs::read(path).map_err(ProfileError::Io)?;
        Profile::from_bytes(&bytes)
    }

    /// Decodes a profile from its file bytes, gunzipping them when they start with gzip's magic.
    pub fn from_bytes(bytes: &[u8]) -> Result<Profile, ProfileError> {
        if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut raw = Vec::new();
            flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut raw).map_err(ProfileError::Io)?;
            Profile::decode(raw.as_slice()).map_err(ProfileError::Decode)
        } else {
            Profile::decode(bytes).map_err(ProfileError::Decode)
        }
    }

    /// The gzip'ed encoding, as written to `mallocshim.<pid>.<seq>.pb.gz`.
    pub fn to_gz(&self) -> Vec<u8> {
        let raw = self.encode_to_vec();
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let _ = z.write_all(&raw);
        z.finish().unwrap_or_default()
    }

    /// The string at index `i` of the string table ("" when out of range).
    pub fn str(&self, i: i64) -> &str {
        usize::try_from(i).ok().and_then(|i| self.string_table.get(i)).map(String::as_str).unwrap_or("")
    }

    /// The numeric label `key` of sample `s` (None when it has none).
    pub fn label_num(&self, s: &Sample, key: &str) -> Option<i64> {
        s.label.iter().find(|l| l.str == 0 && self.str(l.key) == key).map(|l| l.num)
    }

    /// The string label `key` of sample `s` (None when it has none).
    pub fn label_str(&self, s: &Sample, key: &str) -> Option<&str> {
        s.label.iter().find(|l| l.str != 0 && self.str(l.key) == key).map(|l| self.str(l.str))
    }

    /// The index of `s` in the string table, added when absent.
    pub fn intern(&mut self, s: &str) -> i64 {
        match self.string_table.iter().position(|x| x == s) {
            Some(i) => i as i64,
            None => {
                self.string_table.push(s.to_string());
                self.string_table.len() as i64 - 1
            }
        }
    }

    /// Adds [`LABEL_CONNECTION`], [`LABEL_USER`] and [`LABEL_HOST`] to every sample whose
    /// [`LABEL_TID`] is in `by_tid` (replacing earlier ones); returns how many samples got them.
    pub fn label_connections(&mut self, by_tid: &std::collections::BTreeMap<u32, ConnLabel>) -> usize {
        let keys = [LABEL_CONNECTION, LABEL_USER, LABEL_HOST].map(|k| self.intern(k));
        let mut strs: std::collections::BTreeMap<String, i64> = Default::default();
        for (_, u, h) in by_tid.values() {
            for v in [u, h] {
                if !strs.contains_key(v) {
                    let i = self.intern(v);
                    strs.insert(v.clone(), i);
                }
            }
        }
        let mut n = 0;
        for i in 0..self.sample.len() {
            let tid = self.label_num(&self.sample[i], LABEL_TID);
            let Some((id, u, h)) = tid.and_then(|t| by_tid.get(&(t as u32))) else { continue };
            let s = &mut self.sample[i];
            s.label.retain(|l| !keys.contains(&l.key));
            s.label.push(Label { key: keys[0], num: *id as i64, ..Default::default() });
            s.label.push(Label { key: keys[1], str: strs[u], ..Default::default() });
            s.label.push(Label { key: keys[2], str: strs[h], ..Default::default() });
            n += 1;
        }
        n
    }

    /// The index of the sample type named `name` (for example `inuse_space`).
    pub fn sample_index(&self, name: &str) -> Option<usize> {
        self.sample_type.iter().position(|t| self.str(t.r#type) == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_profile() -> Profile {
        Profile {
            sample_type: vec![ValueType { r#type: 1, unit: 2 }],
            sample: vec![Sample { location_id: vec![1], value: vec![4096], label: vec![] }],
            string_table: vec!["".into(), "inuse_space".into(), "bytes".into()],
            ..Default::default()
        }
    }

    #[test]
    fn connection_labels_go_to_the_samples_of_their_tid() {
        let mut p = sample_profile();
        let tid = p.intern(LABEL_TID);
        p.sample[0].label.push(Label { key: tid, num: 42, ..Default::default() });
        p.sample.push(Sample { location_id: vec![1], value: vec![1], label: vec![] });
        let m = [(42u32, (7u64, "app".to_string(), "localhost".to_string()))].into_iter().collect();
        assert_eq!(p.label_connections(&m), 1);
        assert_eq!(p.label_connections(&m), 1, "labelling again replaces");
        let s = &p.sample[0];
        assert_eq!(s.label.len(), 4);
        assert_eq!(p.label_num(s, LABEL_CONNECTION), Some(7));
        assert_eq!(p.label_str(s, LABEL_USER), Some("app"));
        assert_eq!(p.label_str(s, LABEL_HOST), Some("localhost"));
        assert!(p.sample[1].label.is_empty());
    }

    #[test]
    fn gzip_and_raw_round_trip() {
        let p = sample_profile();
        assert_eq!(Profile::from_bytes(&p.to_gz()).unwrap(), p);
        assert_eq!(Profile::from_bytes(&p.encode_to_vec()).unwrap(), p);
        assert_eq!(p.sample_index("inuse_space"), Some(0));
        assert_eq!(p.sample_index("alloc_space"), None);
        assert_eq!(p.str(99), "");
    }

    #[test]
    fn labels_by_key() {
        let mut p = sample_profile();
        p.string_table.extend(["tid".into(), "thread".into(), "worker".into()]);
        p.sample[0].label = vec![
            Label { key: 3, num: 4242, ..Default::default() },
            Label { key: 4, str: 5, ..Default::default() },
        ];
        let s = &p.sample[0];
        assert_eq!(p.label_num(s, LABEL_TID), Some(4242));
        assert_eq!(p.label_str(s, LABEL_THREAD), Some("worker"));
        assert_eq!(p.label_num(s, LABEL_THREAD), None);
        assert_eq!(p.label_str(s, LABEL_TID), None);
        assert_eq!(p.label_num(s, LABEL_START_ROUTINE), None);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(Profile::from_bytes(&[0x1f, 0x8b, 0, 1]), Err(ProfileError::Io(_))));
        assert!(matches!(Profile::from_bytes(&[0xff; 8]), Err(ProfileError::Decode(_))));
        assert!(matches!(Profile::read("/nonexistent/x.pb.gz"), Err(ProfileError::Io(_))));
    }
}
