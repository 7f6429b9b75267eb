//! The file formats of mallocshim, typed: one schema shared by the writer (the shim,
//! `libmallocshim.so`) and every reader (the `mallocshim` command, the comparison runner, the
//! tests and benches). Nothing else in the project spells a field name, an op or a size class.
//!
//! - [`dump`]: the JSON dump `mallocshim.<pid>.<seq>.json` ([`Dump`], [`FORMAT`], [`VERSION`]),
//!   reading with format and version checks, and the dump files of a process ([`newest_dump`]);
//! - [`history`]: the memory history ring a dump carries (`history`, [`History`]);
//! - [`formats`]: the dump formats as a table (name, extension, content type, reader);
//! - [`memlog`]: the memory time series CSV (`MALLOCSHIM_MEMLOG`), its header and rows;
//! - [`pprof`]: the heap profile `mallocshim.<pid>.<seq>.pb.gz`, gzip'ed profile.proto
//!   ([`pprof::Profile`], read with [`pprof::Profile::read`]);
//! - [`classes`]: the size classes (bounds, labels) and the ops and entry points they count;
//! - [`backends`]: the backend table (names, Debian packages and libraries, environment,
//!   what the memory figures mean) every list of backends in the workspace reads, and
//!   [`BACKENDS`], its names as `MALLOCSHIM_BACKEND` accepts them and dumps carry them;
//! - [`stats`]: the median every report, test and bench takes;
//! - [`trace`]: the allocation trace of `MALLOCSHIM_RECORD` / `mallocshim record` (zstd,
//!   versioned by its own [`trace::VERSION`]), written by the shim and read by `mallocshim replay`;
//! - [`ctl`]: the control channel's protocol constants (attach signal value, socket path, framing);
//! - [`dumpdir`]: where a process's dumps go (a relative directory or one in the datadir refused).
//!
//! Compatibility: fields may be added to every object (a reader ignores what it does not know;
//! fields a newer writer adds are `#[serde(default)]` here, so older dumps still read); the
//! names and meanings documented in docs/dump-format.md stay. A change that breaks that bumps
//! [`VERSION`].
//!
//! This crate must stay cheap for the shim, which links it: serde derive, serde_json, and
//! prost and flate2 (default features off) for the heap profile only, zstd for the trace only,
//! no I/O on its own but the reading functions, no global state.

pub mod backends;
pub mod classes;
pub mod ctl;
pub mod dump;
pub mod dumpdir;
pub mod formats;
pub mod history;
pub mod memlog;
pub mod pprof;
pub mod rename;
pub mod stats;
pub mod trace;

pub use backends::BACKENDS;
pub use classes::{ENTRY_NAMES, OP_NAMES};
pub use dump::{
    dump_file_name, dumps_of, newest_dump, Buckets, ClassRow, Dump, DurationUs, HeldCheckpoint, HeldThread,
    LatencyBuckets, LiveClass, Memory, ParseError, ReadError, ThreadOp, ThreadRow, Total, Trim, TrimReasons,
    FORMAT, VERSION,
};
pub use formats::{Fmt, Format, FORMATS as DUMP_FORMATS};
pub use history::History;
pub use memlog::MemRow;
