//! The JSON dump `mallocshim.<pid>.<seq>.json`: one struct per object, in the order the shim
//! writes the fields. Units: latencies in ns (trim durations in µs), sizes in bytes, times in ms
//! since the epoch. Every field, its unit and its source: docs/dump-format.md.
//!
//! Readers go through [`Dump::read`] (or [`Dump::parse`]), which checks [`FORMAT`] and
//! [`VERSION`] before the fields, so a foreign file or another version gets a clear error.
//! Unknown fields are ignored; objects and fields added after the first version are
//! `#[serde(default)]`, so a dump of an older shim still reads.
//!
//! Long because: the dump's serde types, one per JSON object, and their unit tests (a third of the
//! file).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The value of `format` in every dump.
pub const FORMAT: &str = "mallocshim-dump";
/// The dump format version this crate writes and reads.
pub const VERSION: u64 = 1;
/// `ThreadRow::state` of a thread alive at the dump.
pub const STATE_LIVE: &str = "live";
/// `ThreadRow::state` of the row summing every exited thread (its `tid` is 0).
pub const STATE_EXITED: &str = "exited";

/// One dump: everything the shim recorded, at one instant.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Dump {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u64,
    /// The dumping process (getpid).
    pub pid: u32,
    /// The backend serving calls (one of [`crate::BACKENDS`]; after a failed load, the fallback).
    pub backend: String,
    /// Wall-clock time of the dump, ms since the epoch.
    pub unix_time_ms: u64,
    /// Seconds since the shim started in this process (monotonic clock).
    pub uptime_s: f64,
    /// Latency sampling: 1 call in `sample_every` is timed (`MALLOCSHIM_SAMPLE`).
    pub sample_every: u64,
    /// False when the process runs with `MALLOCSHIM_PROFILE=off`: then no call is counted or
    /// timed (`totals`, `size_classes` and thread ops stay zero) and only `memory` and `trim` hold
    /// figures. Dumps older than this field read as true.
    #[serde(default = "profiling_default")]
    pub profiling: bool,
    /// The heap profile's mean gap in bytes (`MALLOCSHIM_PROF_SAMPLE_BYTES`, or as set since);
    /// 0 when heap profiles are off (and in dumps of older shims).
    #[serde(default)]
    pub prof_sample_bytes: u64,
    /// Exact calls and bytes per op, over all size classes and threads.
    pub totals: BTreeMap<String, Total>,
    /// One row per op and size class with at least one call or sample.
    pub size_classes: Vec<ClassRow>,
    /// One row per live thread that called the shim, then the exited rows: one per start
    /// routine (`exited threads of <routine>`) and one for other routines.
    pub threads: Vec<ThreadRow>,
    /// Memory figures at the dump.
    #[serde(default)]
    pub memory: Memory,
    /// Trims so far.
    #[serde(default)]
    pub trim: Trim,
    /// The value in ns of each raw latency bucket (`buckets` of size-class rows and thread ops),
    /// so two dumps of one process subtract into the interval between them.
    #[serde(default)]
    pub latency_buckets: LatencyBuckets,
    /// Live bytes per size class of the requested size, estimated by the heap profile (the
    /// weighted sampled blocks not yet freed, as pprof's inuse_space), classes with bytes only;
    /// empty when heap profiles are off. No exact per-class figure exists: see
    /// docs/memory-account.md, "Live bytes per size class".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live_by_class: Vec<LiveClass>,
    /// The bytes each thread held at earlier instants, oldest first: a checkpoint every twelfth of
    /// the memory history's span (5 minutes at the default `MALLOCSHIM_HISTORY_MS`), the last
    /// 13 kept, so the oldest is about one history span old. Each lists the threads (by tid,
    /// live or exited) whose sampled live blocks held the most then (at most
    /// [`HELD_CHECKPOINT_THREADS`]), summed as [`ThreadRow::live_bytes`]. Empty with heap
    /// profiles off, in a process younger than one checkpoint period, and in dumps of older shims.
    /// `mallocshim diagnose PID` reads the growth per connection from the oldest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_checkpoints: Vec<HeldCheckpoint>,
    /// The memory history: the RSS account, trims and calls per op once a period over the last
    /// hour or so, oldest first (docs/history.md). Written last, by [`Dump::to_json`] (one row
    /// per line); empty in dumps of older shims and with `MALLOCSHIM_HISTORY_MS=0`.
    #[serde(default, skip_serializing)]
    pub history: crate::History,
}

/// Most threads one held-bytes checkpoint lists (the ones holding the most).
pub const HELD_CHECKPOINT_THREADS: usize = 256;
/// Checkpoints a dump carries at most.
pub const HELD_CHECKPOINTS: usize = 13;

/// The bytes held per thread at one instant (see [`Dump::held_checkpoints`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct HeldCheckpoint {
    /// When it was taken, ms since the epoch.
    pub unix_time_ms: u64,
    /// Most held first.
    pub threads: Vec<HeldThread>,
}

/// One thread in a [`HeldCheckpoint`].
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeldThread {
    /// Kernel thread id (gettid) of the allocating thread.
    pub tid: u32,
    /// Bytes held by the live sampled blocks it allocated (estimated, as `ThreadRow::live_bytes`).
    pub live_bytes: u64,
}

/// One size class's estimated live bytes.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveClass {
    /// Smallest request size of the class, in bytes.
    pub min_bytes: u64,
    /// Largest request size of the class; `null` for the open last class (>64 MiB).
    pub max_bytes: Option<u64>,
    /// Estimated bytes held in blocks requested in this class.
    pub live_bytes: u64,
}

fn profiling_default() -> bool {
    true
}

/// How to read raw latency buckets: the clock's ns per tick and each bucket's value in ns (its
/// midpoint; buckets are log-linear, 8 per power of two).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct LatencyBuckets {
    pub ns_per_tick: f64,
    pub bucket_ns: Vec<u64>,
}

/// Raw sampled-latency counts: `[bucket, count]` for the non-zero buckets.
pub type Buckets = Vec<(usize, u64)>;

/// Calls and bytes of one op (bytes requested; free: the blocks' usable size).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Total {
    pub count: u64,
    pub bytes: u64,
    /// Failed requests above 64 MiB (an overflowing calloc or reallocarray, any size no
    /// allocator serves): counted here only, in neither `count` nor `bytes` nor a size class.
    /// 0 in dumps written before the field existed.
    #[serde(default)]
    pub failed: u64,
}

/// One op in one size class: exact calls and bytes, and the latency of the sampled calls.
/// Percentiles and `max_ns` are 0 where `sampled` is 0.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ClassRow {
    /// One of [`crate::OP_NAMES`].
    pub op: String,
    /// Smallest request size of the class, in bytes.
    pub min_bytes: u64,
    /// Largest request size of the class, in bytes; `null` for the open last class (>64 MiB).
    pub max_bytes: Option<u64>,
    pub count: u64,
    pub bytes: u64,
    /// Calls timed (1 in `sample_every`).
    pub sampled: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    /// The sampled latencies as raw bucket counts (see [`Dump::latency_buckets`]).
    #[serde(default)]
    pub buckets: Buckets,
}

/// One thread: a live thread, or (tid 0, state `exited`) the sum of the exited threads of one
/// start routine.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ThreadRow {
    /// Kernel thread id (gettid); 0 for the exited rows.
    pub tid: u32,
    /// /proc/self/task/<tid>/comm; `exited threads of <routine>` (or `... of other routines`)
    /// for an exited row.
    pub name: String,
    /// [`STATE_LIVE`] or [`STATE_EXITED`].
    pub state: String,
    /// Per op with at least one call.
    pub ops: BTreeMap<String, ThreadOp>,
    /// The thread's command name (= `name`).
    #[serde(default)]
    pub comm: String,
    /// The thread's start routine as `symbol+0xoffset` (or `object+0xoffset`), resolved with
    /// dladdr(3) from what the shim's `pthread_create` recorded; null when unknown (the main
    /// thread; the exited row gathering the routines beyond the table).
    #[serde(default)]
    pub start_routine: Option<String>,
    /// Kernel thread id of the creating thread (0: unknown).
    #[serde(default)]
    pub creator_tid: u32,
    /// Thread start, ms since the epoch (0: unknown).
    #[serde(default)]
    pub start_unix_ms: u64,
    /// Exited rows (one per start routine): how many threads were folded in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exited_threads: Option<u64>,
    /// Bytes held by the live blocks this thread allocated (an exited row: its routine's exited
    /// threads allocated), estimated by the heap profile (sum of size x weight of the live
    /// samples; one standard error is sqrt(live_bytes x sample_bytes)). A block stays charged to
    /// the thread that allocated it whichever thread frees it, and leaves with its free. Null
    /// when heap profiles are off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_bytes: Option<u64>,
}

/// One op of one thread.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadOp {
    pub count: u64,
    pub bytes: u64,
    /// The thread's failed requests above 64 MiB (see [`Total::failed`]).
    #[serde(default)]
    pub failed: u64,
    pub sampled: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// The sampled latencies as raw bucket counts (see [`Dump::latency_buckets`]).
    #[serde(default)]
    pub buckets: Buckets,
}

/// Memory at the dump, in bytes: the process from /proc/self/statm, the backend from its own
/// statistics (glibc mallinfo2, jemalloc `stats.*`, tcmalloc `generic.*` properties).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[serde(default)]
pub struct Memory {
    pub rss_bytes: u64,
    pub vsz_bytes: u64,
    pub backend_allocated_bytes: u64,
    pub backend_resident_bytes: u64,
    pub backend_free_bytes: u64,
    /// The RSS account (docs/memory-account.md): `rss = live + allocator_free +
    /// allocator_metadata + non_heap + rss_file + rss_shmem`, measured at one instant.
    /// /proc/self/status RssAnon, RssFile, RssShmem.
    pub rss_anon_bytes: u64,
    pub rss_file_bytes: u64,
    pub rss_shmem_bytes: u64,
    /// Bytes the program holds (the backend's exact figure).
    pub live_bytes: u64,
    /// Resident memory the allocator keeps but the program does not use.
    pub allocator_free_bytes: u64,
    /// The allocator's own bookkeeping; null where the backend reports none (glibc).
    pub allocator_metadata_bytes: Option<u64>,
    /// Resident memory of the allocator, never above `rss_anon_bytes`.
    pub allocator_resident_bytes: u64,
    /// Anonymous resident memory outside the allocator (buffer pool, stacks, other mmaps).
    pub non_heap_bytes: u64,
    /// Of `allocator_free_bytes`, what the backend's release call can give back now (whole
    /// resident pages inside free chunks): glibc only, estimated from `malloc_info(3)` as
    /// `min(whole pages inside free chunks + the main arena's top, allocator_free - the free
    /// bytes a trim keeps)`; null under the other backends and in older dumps
    /// (docs/memory-account.md).
    pub allocator_trimmable_bytes: Option<u64>,
    /// glibc's arenas, the main one included, counted in `malloc_info(3)`; null under the other
    /// backends and in older dumps.
    pub allocator_arenas: Option<u64>,
    /// Free bytes in glibc's arenas other than the main one (their bins and top chunks, from
    /// `malloc_info(3)`), at most `allocator_free_bytes` (malloc_info also counts free chunks
    /// whose pages a trim gave back); null under the other backends and in older dumps.
    pub allocator_other_arenas_free_bytes: Option<u64>,
    /// Of those, the other arenas' top chunks (`malloc_info(3)`: each heap's `rest` less its
    /// bins), at most `allocator_free_bytes`: what only a `free()` at a heap's end returns,
    /// once the top passes `M_TRIM_THRESHOLD` (`MALLOCSHIM_GLIBC_TRIM_THRESHOLD`); null under the
    /// other backends and in older dumps.
    pub allocator_other_arenas_top_bytes: Option<u64>,
}

/// Trims (`MALLOCSHIM_TRIM_*`, `mallocshim_trim()`).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
#[serde(default)]
pub struct Trim {
    /// `MALLOCSHIM_TRIM_INTERVAL_MS` (0: no periodic trim).
    pub interval_ms: u64,
    /// `MALLOCSHIM_TRIM_MIN_BYTES`.
    pub min_bytes: u64,
    /// Trims that ran (periodic and forced).
    pub runs: u64,
    /// Periodic trims skipped under `min_bytes`.
    pub skipped: u64,
    /// Sum of each trim's RSS drop (/proc/self/statm before and after the release call).
    pub released_bytes: u64,
    /// Durations of the trims that ran, in µs.
    pub duration_us: DurationUs,
    /// Wall-clock time of the last trim, ms since the epoch; 0 before the first.
    pub last_unix_ms: u64,
    /// Trims that ran, per reason.
    pub by_reason: TrimReasons,
    /// `MALLOCSHIM_TRIM_ABOVE_RSS` in bytes (0: off).
    pub above_rss_bytes: u64,
    /// `MALLOCSHIM_TRIM_ON_PRESSURE` threshold, % of PSI `some avg10` (0: off).
    pub pressure_pct: u32,
    /// `MALLOCSHIM_GLIBC_TRIM_THRESHOLD` in bytes, glibc's `M_TRIM_THRESHOLD` as the shim set it
    /// (0: glibc's own; absent in older dumps).
    pub glibc_trim_threshold_bytes: u64,
}

/// Trims per reason: periodic (`MALLOCSHIM_TRIM_INTERVAL_MS`), RSS ceiling
/// (`MALLOCSHIM_TRIM_ABOVE_RSS`), memory pressure (`MALLOCSHIM_TRIM_ON_PRESSURE`), and
/// `mallocshim_trim()` (api).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[serde(default)]
pub struct TrimReasons {
    pub periodic: u64,
    pub ceiling: u64,
    pub pressure: u64,
    pub api: u64,
}

/// Percentiles of the trims' durations, in µs (0 without trims).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
#[serde(default)]
pub struct DurationUs {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl ThreadRow {
    /// Calls of every op.
    pub fn calls(&self) -> u64 {
        self.ops.values().map(|o| o.count).sum()
    }

    pub fn is_live(&self) -> bool {
        self.state == STATE_LIVE
    }
}

impl ClassRow {
    /// The table label of the class: `<=64`, `>64M`.
    pub fn label(&self) -> String {
        crate::classes::range_label(self.min_bytes, self.max_bytes)
    }

    /// The class index, when the bounds are one of this version's classes.
    pub fn class(&self) -> Option<usize> {
        crate::classes::class_index(self.min_bytes, self.max_bytes)
    }
}

impl Dump {
    /// Exact calls of `op` (0 when absent).
    pub fn count(&self, op: &str) -> u64 {
        self.totals.get(op).map_or(0, |t| t.count)
    }

    /// Exact bytes of `op` (0 when absent).
    pub fn bytes(&self, op: &str) -> u64 {
        self.totals.get(op).map_or(0, |t| t.bytes)
    }

    /// Allocating calls: every op but free.
    pub fn allocs(&self) -> u64 {
        crate::classes::ALLOC_OPS.iter().map(|o| self.count(o)).sum()
    }

    /// The row of `op` in size class `class` (index, see [`crate::classes`]), if it has calls.
    pub fn class_row(&self, op: &str, class: usize) -> Option<&ClassRow> {
        let (lo, hi) = crate::classes::class_range(class);
        self.size_classes.iter().find(|r| r.op == op && r.min_bytes == lo && r.max_bytes == hi)
    }

    /// Rows in the shim's order: by op, then by size.
    pub fn sorted_classes(&self) -> Vec<&ClassRow> {
        let mut v: Vec<&ClassRow> = self.size_classes.iter().collect();
        v.sort_by(|a, b| {
            crate::classes::op_rank(&a.op)
                .cmp(&crate::classes::op_rank(&b.op))
                .then(a.min_bytes.cmp(&b.min_bytes))
        });
        v
    }

    /// Live threads.
    pub fn live_threads(&self) -> impl Iterator<Item = &ThreadRow> {
        self.threads.iter().filter(|t| t.is_live())
    }

    /// The dump as the shim writes it: pretty JSON and a final newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        if !self.history.columns.is_empty() {
            if let Some(open) = s.strip_suffix("\n}") {
                s = format!("{open},\n  \"history\": {}\n}}", self.history.to_json());
            }
        }
        s.push('\n');
        s
    }

    /// Parses a dump: `format` and `version` first (so a foreign file or another version is
    /// named as such), then every field, with line and column on a type error.
    pub fn parse(text: &str) -> Result<Dump, ParseError> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(ParseError::Json)?;
        match v.get("format") {
            Some(serde_json::Value::String(s)) if s == FORMAT => {}
            Some(serde_json::Value::String(s)) => return Err(ParseError::NotADump(Some(s.clone()))),
            Some(other) => return Err(ParseError::NotADump(Some(other.to_string()))),
            None => return Err(ParseError::NotADump(None)),
        }
        match v.get("version").and_then(|v| v.as_u64()) {
            Some(VERSION) => {}
            found => return Err(ParseError::Version(found)),
        }
        // Parsed again from the text (not the Value) so type errors carry a line and column.
        serde_json::from_str(text).map_err(ParseError::Json)
    }

    /// Reads and parses a dump file.
    pub fn read(path: &Path) -> Result<Dump, ReadError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ReadError { path: path.to_path_buf(), kind: ParseError::Io(e) })?;
        Dump::parse(&text).map_err(|kind| ReadError { path: path.to_path_buf(), kind })
    }
}

/// Why a text is not a dump this crate reads.
#[derive(Debug)]
pub enum ParseError {
    /// The file could not be read.
    Io(std::io::Error),
    /// Not JSON, or JSON whose fields do not have the dump's types.
    Json(serde_json::Error),
    /// JSON without `"format": "mallocshim-dump"` (the value found, if any).
    NotADump(Option<String>),
    /// A dump of another version (the number found, if any).
    Version(Option<u64>),
}

/// A [`ParseError`] with the file it came from.
#[derive(Debug)]
pub struct ReadError {
    pub path: PathBuf,
    pub kind: ParseError,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Io(e) => write!(f, "cannot read: {e}"),
            ParseError::Json(e) => write!(f, "not a valid mallocshim dump: {e}"),
            ParseError::NotADump(Some(s)) => {
                write!(f, "not a mallocshim dump: \"format\" is {s:?}, expected {FORMAT:?}")
            }
            ParseError::NotADump(None) => write!(f, "not a mallocshim dump: no \"format\": {FORMAT:?} field"),
            ParseError::Version(Some(v)) => {
                write!(f, "unsupported dump version {v} (this reader reads version {VERSION})")
            }
            ParseError::Version(None) => {
                write!(f, "dump has no numeric \"version\" (this reader reads version {VERSION})")
            }
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ParseError::Io(e) => write!(f, "cannot read {}: {e}", self.path.display()),
            k => write!(f, "{}: {k}", self.path.display()),
        }
    }
}

impl std::error::Error for ParseError {}
impl std::error::Error for ReadError {}

/// The name of dump number `seq` of process `pid` in format `ext` (`json`, `prom`, `hdr`, `text`,
/// `pb.gz` for the pprof heap profile).
pub fn dump_file_name(pid: u32, seq: u64, ext: &str) -> String {
    format!("mallocshim.{pid}.{seq}.{ext}")
}

/// Pid, sequence number and extension of a dump file name (an extension of the format table,
/// [`crate::formats`], or any without a dot); None for any other name (including the writer's
/// `.mallocshim.*.tmp` files).
pub fn parse_dump_file_name(name: &str) -> Option<(u32, u64, &str)> {
    let rest = name.strip_prefix("mallocshim.")?;
    let mut it = rest.splitn(3, '.');
    let pid = it.next()?.parse().ok()?;
    let seq = it.next()?.parse().ok()?;
    let ext = it.next()?;
    // A table extension (`pb.gz` has a dot), or any other without one.
    let known = crate::formats::Fmt::from_ext(ext).is_some();
    (known || !ext.is_empty() && !ext.contains('.')).then_some((pid, seq, ext))
}

/// The dump files of process `pid` in format `ext` in `dir`, oldest (lowest seq) first.
pub fn dumps_of(dir: &Path, pid: u32, ext: &str) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<(u64, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some((p, seq, x)) = parse_dump_file_name(name) {
            if p == pid && x == ext {
                v.push((seq, e.path()));
            }
        }
    }
    v.sort();
    Ok(v.into_iter().map(|(_, p)| p).collect())
}

/// The newest (highest seq) dump file of process `pid` in format `ext` in `dir`.
pub fn newest_dump(dir: &Path, pid: u32, ext: &str) -> std::io::Result<Option<PathBuf>> {
    Ok(dumps_of(dir, pid, ext)?.pop())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Long because: a literal dump for the unit tests, one field a line.
    fn sample() -> Dump {
        let mut totals = BTreeMap::new();
        totals.insert("malloc".to_string(), Total { count: 3, bytes: 200 << 20, failed: 1 });
        let mut ops = BTreeMap::new();
        ops.insert(
            "malloc".to_string(),
            ThreadOp {
                count: 3,
                bytes: 200 << 20,
                failed: 1,
                sampled: 3,
                p50_ns: 40,
                p99_ns: 90,
                max_ns: 95,
                buckets: vec![(7, 1), (9, 2)],
            },
        );
        Dump {
            format: FORMAT.into(),
            version: VERSION,
            pid: 42,
            backend: "glibc".into(),
            unix_time_ms: 1_700_000_000_000,
            uptime_s: 1.5,
            sample_every: 1,
            profiling: true,
            prof_sample_bytes: 524_288,
            totals,
            size_classes: vec![
                ClassRow {
                    op: "malloc".into(),
                    min_bytes: 0,
                    max_bytes: Some(16),
                    count: 1,
                    bytes: 16,
                    sampled: 1,
                    p50_ns: 40,
                    p90_ns: 40,
                    p99_ns: 40,
                    p999_ns: 40,
                    max_ns: 40,
                    buckets: vec![(7, 1)],
                },
                ClassRow {
                    op: "malloc".into(),
                    min_bytes: crate::classes::TOP_BOUNDED + 1,
                    max_bytes: None,
                    count: 2,
                    bytes: (200 << 20) - 16,
                    sampled: 2,
                    p50_ns: 90,
                    p90_ns: 95,
                    p99_ns: 95,
                    p999_ns: 95,
                    max_ns: 95,
                    buckets: vec![(9, 2)],
                },
            ],
            threads: vec![ThreadRow {
                tid: 42,
                name: "main".into(),
                state: STATE_LIVE.into(),
                ops,
                comm: "main".into(),
                start_routine: Some("worker+0x10".into()),
                creator_tid: 41,
                start_unix_ms: 1_700_000_000_000,
                exited_threads: None,
                live_bytes: Some(4096),
            }],
            memory: Memory { rss_bytes: 1 << 20, ..Memory::default() },
            trim: Trim {
                runs: 2,
                duration_us: DurationUs { p50: 1.5, p99: 2.0, max: 2.0 },
                by_reason: TrimReasons { periodic: 1, api: 1, ..TrimReasons::default() },
                ..Trim::default()
            },
            latency_buckets: LatencyBuckets { ns_per_tick: 0.4, bucket_ns: vec![1, 2, 3] },
            live_by_class: vec![LiveClass { min_bytes: 17, max_bytes: Some(32), live_bytes: 5 }],
            held_checkpoints: vec![HeldCheckpoint {
                unix_time_ms: 1_700_000_000_000,
                threads: vec![HeldThread { tid: 42, live_bytes: 1024 }],
            }],
            history: crate::History {
                period_ms: 1000,
                capacity: 3600,
                ring_bytes: 748_800,
                columns: vec!["unix_ms".into(), "live_bytes".into()],
                rows: vec![vec![Some(1), None], vec![Some(2), Some(7)]],
            },
        }
    }

    #[test]
    fn round_trip() {
        let d = sample();
        let text = d.to_json();
        assert!(text.ends_with('\n'));
        assert!(text.contains("\"max_bytes\": null"), "{text}");
        let back = Dump::parse(&text).expect("parses");
        assert_eq!(back, d);
        assert_eq!(back.count("malloc"), 3);
        assert_eq!(back.allocs(), 3);
        assert_eq!(back.count("free"), 0);
        assert_eq!(back.class_row("malloc", crate::classes::CLASSES - 1).map(|r| r.count), Some(2));
        assert_eq!(back.size_classes[1].label(), ">64M");
        assert_eq!(back.size_classes[1].class(), Some(crate::classes::CLASSES - 1));
        assert_eq!(back.live_threads().count(), 1);
        assert_eq!(back.threads[0].calls(), 3);
    }

    #[test]
    fn older_and_newer_dumps_read() {
        // An older dump without memory and trim; a newer one with fields this version lacks.
        let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("memory");
        o.remove("trim");
        o.insert("future".into(), serde_json::json!({"x": 1}));
        o["threads"][0].as_object_mut().unwrap().insert("start_routine".into(), "f".into());
        let d = Dump::parse(&v.to_string()).expect("reads");
        assert_eq!(d.memory, Memory::default());
        assert_eq!(d.trim.runs, 0);
    }

    #[test]
    fn foreign_files_are_named() {
        let e = |t: &str| Dump::parse(t).unwrap_err().to_string();
        assert!(e("{\"format\":\"other\"}").contains("\"format\" is \"other\""));
        assert!(e("{}").contains("no \"format\""));
        assert!(e("{\"format\":\"mallocshim-dump\",\"version\":9}").contains("unsupported dump version 9"));
        assert!(e("[1]").contains("no \"format\""));
        assert!(e("{").contains("not a valid mallocshim dump"));
        let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        v["pid"] = "x".into();
        assert!(e(&v.to_string()).contains("invalid type"));
    }

    #[test]
    fn file_names() {
        assert_eq!(dump_file_name(12, 3, "json"), "mallocshim.12.3.json");
        assert_eq!(parse_dump_file_name("mallocshim.12.3.json"), Some((12, 3, "json")));
        assert_eq!(parse_dump_file_name(".mallocshim.12.3.json.tmp"), None);
        assert_eq!(parse_dump_file_name("mallocshim.12.x.json"), None);
        assert_eq!(parse_dump_file_name("mallocshim.12.3.json.tmp"), None);
        assert_eq!(parse_dump_file_name("mallocshim.12.3.pb.gz"), Some((12, 3, "pb.gz")));
        assert_eq!(parse_dump_file_name("mallocshim.12.3.pb.gz.tmp"), None);
        let dir = std::env::temp_dir().join(format!("mallocshim-format-test.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for n in
            ["mallocshim.7.2.json", "mallocshim.7.10.json", "mallocshim.7.11.prom", "mallocshim.8.99.json"]
        {
            std::fs::write(dir.join(n), "").unwrap();
        }
        let names: Vec<String> = dumps_of(&dir, 7, "json")
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["mallocshim.7.2.json", "mallocshim.7.10.json"]);
        assert_eq!(newest_dump(&dir, 7, "json").unwrap(), Some(dir.join("mallocshim.7.10.json")));
        assert_eq!(newest_dump(&dir, 9, "json").unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
