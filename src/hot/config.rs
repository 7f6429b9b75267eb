//! The configuration table: one row per `MALLOCSHIM_*` variable (name, default, one-line doc) and
//! the parsed [`Config`]. Read once, at lazy initialisation, straight from `environ` (no getenv, no
//! allocation). A bad value gives one `mallocshim:` line naming the variable, the value and the
//! default kept; an unknown `MALLOCSHIM_*` variable gives one line too. Path-valued variables are
//! ignored in secure-execution processes (AT_SECURE), as `secure_getenv` would.
//! Must not allocate: it runs before any backend exists.
//!
//! Long because: the option table, one row per `MALLOCSHIM_*` option, with the parsers and printers
//! its rows name; it is read before any backend exists, so it cannot use a parsing crate.

use crate::backend::{Backend, Release};
use crate::base::diag::LineBuf;
use core::cell::UnsafeCell;
use mallocshim_format::formats;

/// Longest path accepted for path-valued variables, in bytes.
pub const PATH_MAX: usize = 512;

/// The effective configuration. Written once during initialisation, read-only afterwards.
#[derive(Clone, Copy)]
pub struct Config {
    pub backend: Backend,
    /// NUL-terminated library path for the tcmalloc backend.
    pub tcmalloc_lib: [u8; PATH_MAX],
    pub profile: bool,
    /// 0 quiet; 1 one options line at start and a summary at exit; 2 also the whole table at
    /// start and one line per trim.
    pub verbose: u8,
    /// Time 1 call in this many per thread (1 = every call).
    pub sample_every: u32,
    /// Signal that requests a dump; 0 = none.
    pub dump_signal: i32,
    /// Seconds between periodic dumps; 0 = off.
    pub dump_interval_s: u64,
    /// Write one dump at exit.
    pub dump_at_exit: bool,
    /// Minimum milliseconds between signal-requested dumps; 0 = no limit.
    pub dump_min_interval_ms: u64,
    /// Dumps of this process kept in the dump directory; 0 = all.
    pub dump_keep: u32,
    /// NUL-terminated dump directory; empty = `$TMPDIR` or `/tmp`, resolved when dumping.
    pub dump_dir: [u8; PATH_MAX],
    /// Bit set of dump formats (`formats::Fmt::bit`).
    pub dump_formats: u8,
    /// Milliseconds between periodic trims; 0 = off.
    pub trim_interval_ms: u64,
    /// A periodic trim is skipped while the backend holds fewer free bytes than this.
    pub trim_min_bytes: u64,
    /// How trims ask the backend to release (jemalloc: `arena.<all>.purge` or `.decay`).
    pub release: Release,
    /// Trim whenever RSS is above this many bytes; 0 = off.
    pub trim_above_rss: u64,
    /// Trim when PSI `some avg10` reaches this percentage; 0 = off.
    pub trim_on_pressure: u32,
    /// glibc's `M_TRIM_THRESHOLD` fixed at this many bytes (`mallopt`); 0 = glibc's own.
    pub glibc_trim_threshold: u64,
    /// NUL-terminated memlog path (`%p` = pid); empty = off.
    pub memlog: [u8; PATH_MAX],
    /// Milliseconds between memlog lines.
    pub memlog_interval_ms: u64,
    /// Milliseconds between memory-history rows (`cold::history`); 0 = off.
    pub history_ms: u64,
    /// Mean bytes between heap-profile samples; 0 = off (made 0 by `load` when profiling is off).
    pub prof_sample_bytes: u64,
    /// Heap-profile stacks by frame pointers only (`MALLOCSHIM_PROF_UNWIND=fp`).
    pub prof_unwind_fp: bool,
    /// NUL-terminated Prometheus textfile directory; empty = off.
    pub prom_textfile_dir: [u8; PATH_MAX],
    /// Seconds between textfile writes.
    pub prom_interval_s: u64,
    /// Permission bits of the textfile (a subset of 0666).
    pub prom_file_mode: u32,
    /// The textfile carries the per-class latency histograms.
    pub prom_histograms: bool,
    /// NUL-terminated `instance` label value; empty = the pid.
    pub instance: [u8; INSTANCE_MAX],
    /// NUL-terminated trace path (`%p` = pid) recorded from start; empty = off.
    pub record: [u8; PATH_MAX],
    /// Length of that window in seconds; 0 = until exit.
    pub record_seconds: u64,
    /// Byte budget of a trace file.
    pub record_max_bytes: u64,
    /// Most milliseconds a recording thread waits for the drain when its ring is full.
    pub record_wait_ms: u64,
    /// NUL-terminated control channel directory; empty = `/run/mallocshim` for root, else
    /// `/tmp/mallocshim-<uid>`.
    pub ctl_dir: [u8; PATH_MAX],
}

/// Longest `MALLOCSHIM_INSTANCE` accepted, in bytes (plus the NUL).
pub const INSTANCE_MAX: usize = 65;

/// How a row's value is read and shown: the kind says what the variable holds; rows of the
/// common kinds are one line, the others name their own parser and printer.
pub enum Kind {
    /// A switch (1, 0, on, off, yes, no, true, false), shown as `shown[0]` (off) or `shown[1]`.
    Switch { set: fn(&mut Config, bool), get: fn(&Config) -> bool, shown: [&'static str; 2] },
    /// A whole number in `min..=max`; `expected` names the range in the bad-value line.
    Number { set: fn(&mut Config, u64), get: fn(&Config) -> u64, min: u64, max: u64, expected: &'static str },
    /// A byte count in `min..=max`, with an optional K, M or G suffix ([`parse_bytes`], the one
    /// parser of every byte-valued row); shown in bytes.
    Bytes { set: fn(&mut Config, u64), get: fn(&Config) -> u64, min: u64, max: u64, expected: &'static str },
    /// A path shorter than [`PATH_MAX`], ignored in a secure-execution process; the value
    /// `unset` (when not empty) clears it and is how an empty path is shown.
    Path { get: fn(&mut Config) -> &mut [u8; PATH_MAX], show: fn(&Config) -> &[u8], unset: &'static str },
    /// Its own parser (`Err` says what was expected) and printer.
    Other { parse: fn(&[u8], &mut Config) -> Result<(), &'static str>, show: fn(&Config, &mut LineBuf) },
}

/// `switch!(field, "off", "on")`: a [`Kind::Switch`] on a `bool` field.
macro_rules! switch {
    ($f:ident, $off:literal, $on:literal) => {
        Kind::Switch { set: |c, b| c.$f = b, get: |c| c.$f, shown: [$off, $on] }
    };
}

/// `number!(field, MIN, MAX)`: a [`Kind::Number`] whose bad-value line says "a whole number from
/// MIN to MAX" (or the given text).
macro_rules! number {
    ($f:ident, $min:literal, $max:literal) => {
        number!($f, $min, $max, concat!("a whole number from ", $min, " to ", $max))
    };
    ($f:ident, $min:literal, $max:literal, $expected:expr) => {
        Kind::Number {
            set: |c, n| c.$f = n as _,
            get: |c| c.$f as u64,
            min: $min,
            max: $max,
            expected: $expected,
        }
    };
}

/// `bytes!(field, MIN, MAX, "range")`: a [`Kind::Bytes`] whose bad-value line says "a size from
/// range bytes, or with a K, M or G suffix".
macro_rules! bytes {
    ($f:ident, $min:literal, $max:literal, $range:literal) => {
        Kind::Bytes {
            set: |c, n| c.$f = n as _,
            get: |c| c.$f as u64,
            min: $min,
            max: $max,
            expected: concat!("a size from ", $range, " bytes, or with a K, M or G suffix"),
        }
    };
}

/// `path!(field, "unset")`: a [`Kind::Path`] on a `[u8; PATH_MAX]` field.
macro_rules! path {
    ($f:ident, $unset:literal) => {
        Kind::Path { get: |c| &mut c.$f, show: |c| cstr_bytes(&c.$f), unset: $unset }
    };
}

/// `other!(parse, show)`: a [`Kind::Other`].
macro_rules! other {
    ($parse:expr, $show:expr) => {
        Kind::Other { parse: $parse, show: $show }
    };
}

/// One row of the table: the variable, its default (parsed like a value), its kind and the
/// one-line doc the README's table and `MALLOCSHIM_VERBOSE=1` print.
pub struct Opt {
    pub name: &'static str,
    pub default: &'static str,
    pub kind: Kind,
    pub doc: &'static str,
    /// Can change at run time (the control channel's `set`, `src/cold/ctl`): every reader of
    /// the row's field reads [`current`], or a hot-path atomic the `set` command updates.
    pub live: bool,
}

const fn opt(name: &'static str, default: &'static str, kind: Kind, doc: &'static str) -> Opt {
    Opt { name, default, kind, doc, live: false }
}

impl Opt {
    /// Marks the row as settable at run time.
    const fn live(self) -> Opt {
        Opt { live: true, ..self }
    }
}

/// Every variable the shim reads, one line each. The README's table matches this one row for
/// row and cell for cell (tests/config.rs).
#[rustfmt::skip]
pub static OPTIONS: [Opt; 33] = [
    opt("MALLOCSHIM_BACKEND", "glibc", other!(parse_backend, show_backend), crate::backend::OPTION_DOC),
    opt("MALLOCSHIM_TCMALLOC_LIB", Backend::Tcmalloc.default_lib_str(), path!(tcmalloc_lib, ""), "gperftools library dlopen()ed (RTLD_LOCAL) for the tcmalloc backend"),
    opt("MALLOCSHIM_PROFILE", "on", switch!(profile, "off", "on"), "count calls per entry point and thread; off leaves pure routing"),
    opt("MALLOCSHIM_VERBOSE", "0", other!(parse_verbose, |c, out| put_u64(out, c.verbose as u64)), "1 prints one line at start (the options not at their default) and a call summary at exit, on stderr; 2 also this whole table at start and a line per trim"),
    opt("MALLOCSHIM_SAMPLE", "64", number!(sample_every, 1, 1073741824), "time 1 call in N per thread with the cycle counter (1 times every call)").live(),
    opt("MALLOCSHIM_DUMP_SIGNAL", "SIGUSR1", other!(parse_signal, show_signal), "signal that writes a dump when sent to the process (kill -USR1 PID); none disables"),
    opt("MALLOCSHIM_DUMP_INTERVAL_S", "0", number!(dump_interval_s, 0, 31536000), "also write a dump every N seconds (0 = off)").live(),
    opt("MALLOCSHIM_DUMP_AT_EXIT", "0", switch!(dump_at_exit, "0", "1"), "1 writes one dump when the process exits"),
    opt("MALLOCSHIM_DUMP_MIN_INTERVAL_MS", "1000", number!(dump_min_interval_ms, 0, 86400000), "signal-requested dumps: at most one per N ms; a request inside the interval is answered at its end (0 = no limit)").live(),
    opt("MALLOCSHIM_DUMP_KEEP", "100", number!(dump_keep, 0, 1000000), "keep this process's newest N dumps in the dump directory, removing its older ones (0 = keep all)").live(),
    opt("MALLOCSHIM_DUMP_DIR", "$TMPDIR or /tmp", path!(dump_dir, "$TMPDIR or /tmp"), "directory for mallocshim.<pid>.<seq>.<ext> dump files; a relative one or one inside the datadir (the working directory) is refused with one line, then $TMPDIR, else /tmp"),
    opt("MALLOCSHIM_DUMP_FORMATS", formats::DEFAULT, other!(parse_formats, show_formats), formats::OPTION_DOC).live(),
    opt("MALLOCSHIM_TRIM_INTERVAL_MS", "10000", number!(trim_interval_ms, 0, 86400000), "give free memory back to the OS every N ms (glibc malloc_trim, jemalloc purge, tcmalloc release, mimalloc mi_collect); 0 = off").live(),
    opt("MALLOCSHIM_TRIM_MIN_BYTES", "67108864", bytes!(trim_min_bytes, 0, 9223372036854775807, "0 to 9223372036854775807"), "skip a periodic trim while the backend holds fewer free bytes than SIZE (bytes, or K/M/G suffix)").live(),
    opt("MALLOCSHIM_TRIM_ABOVE_RSS", "off", other!(parse_above_rss, show_above_rss), "also trim whenever RSS is above SIZE (bytes, or K/M/G suffix), checked every 250 ms, at most once a second").live(),
    opt("MALLOCSHIM_TRIM_ON_PRESSURE", "0", other!(parse_pressure, show_pressure), "1 also trims when the cgroup's PSI memory `some avg10` reaches 10%; N% sets the threshold; at most once per 10 s").live(),
    opt("MALLOCSHIM_GLIBC_TRIM_THRESHOLD", "off", other!(parse_trim_threshold, show_trim_threshold), "glibc backend: fix glibc's M_TRIM_THRESHOLD at SIZE (bytes, or K/M/G suffix; mallopt), so a free() leaving more than SIZE at the top of any arena gives it back; off = glibc's own, raised up to 64 MiB by its dynamic mmap threshold; costs CPU (the mmap threshold stops rising: -18% qps on mariadbd's oltp_read_only set at start, docs/memory-account.md)").live(),
    opt("MALLOCSHIM_JEMALLOC_RELEASE", "purge", other!(parse_release, show_release), "jemalloc release call: purge (arena.<all>.purge, all unused pages) or decay (arena.<all>.decay)").live(),
    opt("MALLOCSHIM_MEMLOG", "off", path!(memlog, "off"), "append a CSV line of RSS and backend memory every MEMLOG_INTERVAL_MS to this file (%p = pid)").live(),
    opt("MALLOCSHIM_MEMLOG_INTERVAL_MS", "1000", number!(memlog_interval_ms, 10, 86400000), "milliseconds between memlog lines").live(),
    opt("MALLOCSHIM_HISTORY_MS", "1000", number!(history_ms, 0, 3600000), "keep the RSS account, trims and calls per op every N ms (at least 10) in an in-memory ring of 3600 rows (731 KiB) that dumps carry; 0 = off"),
    opt("MALLOCSHIM_PROF_SAMPLE_BYTES", "524288", bytes!(prof_sample_bytes, 0, 1099511627776, "0 to 1099511627776 (1024G)"), "heap profile: sample one allocation per SIZE bytes (or K/M/G suffix) on average (exponential gaps); 0 = off, as with PROFILE=off").live(),
    opt("MALLOCSHIM_PROF_UNWIND", "cfi", other!(parse_unwind, |c, out| out.put(if c.prof_unwind_fp { b"fp" } else { b"cfi" })), "heap profile stacks: `cfi` (from `.eh_frame`, whole stacks without frame pointers) or `fp` (frame pointers only)"),
    opt("MALLOCSHIM_PROM_TEXTFILE_DIR", "off", path!(prom_textfile_dir, "off"), "write DIR/mallocshim_<instance>.prom for node_exporter's textfile collector every PROM_INTERVAL_S").live(),
    opt("MALLOCSHIM_PROM_INTERVAL_S", "15", number!(prom_interval_s, 1, 86400, "a whole number of seconds from 1 to 86400"), "seconds between rewrites of the textfile (1 to 86400)").live(),
    opt("MALLOCSHIM_PROM_FILE_MODE", "0644", other!(parse_file_mode, |c, out| { let _ = core::fmt::Write::write_fmt(out, format_args!("{:04o}", c.prom_file_mode)); }), "permission bits of the textfile, octal, at most 0666 (0644: node_exporter's user can read it)"),
    opt("MALLOCSHIM_PROM_HISTOGRAMS", "on", switch!(prom_histograms, "off", "on"), "off leaves the per-op and size-class latency histograms out of the textfile (fewer series)").live(),
    opt("MALLOCSHIM_INSTANCE", "the pid", other!(parse_instance, show_instance), "value of the instance label and name of the textfile: letters, digits, . _ - (1 to 64)"),
    opt("MALLOCSHIM_CTL_DIR", "auto", path!(ctl_dir, "auto"), "directory of the control channel's socket, made 0700 by the shim: auto = /run/mallocshim for root, else /tmp/mallocshim-<uid>"),
    opt("MALLOCSHIM_RECORD", "off", path!(record, "off"), "record every allocator call from start into this trace file (%p = pid; FILE.<pid> when FILE is taken, never replaced; docs/record.md)"),
    opt("MALLOCSHIM_RECORD_SECONDS", "0", number!(record_seconds, 0, 31536000), "end that recording after N seconds (0 = at exit)"),
    opt("MALLOCSHIM_RECORD_MAX_BYTES", "1G", other!(parse_record_max, |c, out| put_u64(out, c.record_max_bytes)), "a recording ends when its file reaches SIZE (bytes, or K/M/G suffix; at least 64K)"),
    opt("MALLOCSHIM_RECORD_WAIT_MS", "20", number!(record_wait_ms, 0, 1000), "a recording thread whose trace ring is full waits up to N ms for the drain (sleeping 50 µs at a time) before dropping its call; once more only after the drain has read; 0 = drop at once").live(),
];

impl Opt {
    /// Path-valued: ignored in a secure-execution process.
    pub fn is_path(&self) -> bool {
        matches!(self.kind, Kind::Path { .. })
    }

    /// Applies a value; `Err` says what was expected.
    fn parse(&self, v: &[u8], c: &mut Config) -> Result<(), &'static str> {
        match self.kind {
            Kind::Switch { set, .. } => set(c, parse_bool(v)?),
            Kind::Number { set, min, max, expected, .. } => {
                set(c, parse_u64(v, min, max).map_err(|_| expected)?)
            }
            Kind::Bytes { set, min, max, expected, .. } => {
                set(c, parse_bytes(v, min, max).map_err(|_| expected)?)
            }
            Kind::Path { get, unset, .. } if !unset.is_empty() && v == unset.as_bytes() => {
                *get(c) = [0; PATH_MAX]
            }
            Kind::Path { get, .. } => set_path(get(c), v)?,
            Kind::Other { parse, .. } => parse(v, c)?,
        }
        Ok(())
    }

    /// Writes the effective value.
    fn show(&self, c: &Config, out: &mut LineBuf) {
        match self.kind {
            Kind::Switch { get, shown, .. } => out.put(shown[get(c) as usize].as_bytes()),
            Kind::Number { get, .. } | Kind::Bytes { get, .. } => put_u64(out, get(c)),
            Kind::Path { show, unset, .. } => match show(c) {
                b"" => out.put(unset.as_bytes()),
                p => out.put(p),
            },
            Kind::Other { show, .. } => show(c, out),
        }
    }
}

fn parse_backend(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    c.backend = Backend::from_name(v).ok_or(crate::backend::NAMES)?;
    Ok(())
}

fn show_backend(c: &Config, out: &mut LineBuf) {
    out.put(c.backend.name().as_bytes())
}

fn parse_verbose(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    c.verbose = match v {
        b"2" => 2,
        _ => parse_bool(v).map_err(|_| "0, 1 or 2")? as u8,
    };
    Ok(())
}

fn parse_signal(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    c.dump_signal = parse_dump_signal(v)?;
    Ok(())
}

/// `MALLOCSHIM_DUMP_SIGNAL`'s value: the signal number, 0 for none. Also read by `sigearly`
/// while the loader relocates the library, so it calls nothing outside this function.
pub fn parse_dump_signal(v: &[u8]) -> Result<i32, &'static str> {
    Ok(match v {
        b"none" => 0,
        b"SIGUSR1" | b"USR1" => libc::SIGUSR1,
        b"SIGUSR2" | b"USR2" => libc::SIGUSR2,
        _ => match parse_u64(v, 1, 64) {
            Ok(n) if n != libc::SIGKILL as u64 && n != libc::SIGSTOP as u64 => n as i32,
            _ => return Err("SIGUSR1, SIGUSR2, a signal number from 1 to 64 (not 9 or 19) or none"),
        },
    })
}

fn show_signal(c: &Config, out: &mut LineBuf) {
    match c.dump_signal {
        0 => out.put(b"none"),
        libc::SIGUSR1 => out.put(b"SIGUSR1"),
        libc::SIGUSR2 => out.put(b"SIGUSR2"),
        n => put_u64(out, n as u64),
    }
}

fn parse_formats(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    let mut bits = 0;
    for part in v.split(|&b| b == b',') {
        bits |= formats::Fmt::from_name(part).map(formats::Fmt::bit).ok_or(formats::EXPECTED)?;
    }
    c.dump_formats = bits;
    Ok(())
}

fn show_formats(c: &Config, out: &mut LineBuf) {
    let mut first = true;
    for f in formats::Fmt::ALL {
        if c.dump_formats & f.bit() != 0 {
            if !first {
                out.put(b",");
            }
            out.put(f.row().name.as_bytes());
            first = false;
        }
    }
}

fn parse_unwind(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    c.prof_unwind_fp = match v {
        b"cfi" => false,
        b"fp" => true,
        _ => return Err("cfi or fp"),
    };
    Ok(())
}

fn parse_above_rss(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    const ERR: &str = "a size from 1 to 4611686018427387903 bytes (under 4 EiB), or with a K, M or G suffix";
    c.trim_above_rss = off_or_bytes(v, SIZE_MAX).map_err(|_| ERR)?;
    Ok(())
}

fn show_above_rss(c: &Config, out: &mut LineBuf) {
    show_off_or(c.trim_above_rss, out)
}

fn parse_trim_threshold(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    const ERR: &str = "off or a size from 1 to 2147483647 bytes (glibc's int), or with a K, M or G suffix";
    c.glibc_trim_threshold = off_or_bytes(v, i32::MAX as u64).map_err(|_| ERR)?;
    Ok(())
}

fn show_trim_threshold(c: &Config, out: &mut LineBuf) {
    show_off_or(c.glibc_trim_threshold, out)
}

/// A size row whose 0 means off: `off` or `0` is 0, else 1 to `max` bytes (K/M/G suffix).
fn off_or_bytes(v: &[u8], max: u64) -> Result<u64, ()> {
    if matches!(v, b"off" | b"0") {
        Ok(0)
    } else {
        parse_bytes(v, 1, max).map_err(|_| ())
    }
}

/// Shows such a row: `off` for 0, else the bytes.
fn show_off_or(n: u64, out: &mut LineBuf) {
    match n {
        0 => out.put(b"off"),
        n => put_u64(out, n),
    }
}

fn parse_pressure(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    const ERR: &str = "0, 1 or a percentage N% from 1 to 100";
    c.trim_on_pressure = match v {
        b"0" | b"off" => 0,
        b"1" | b"on" => 10,
        _ => match v.strip_suffix(b"%") {
            Some(n) => parse_u64(n, 1, 100).map_err(|_| ERR)? as u32,
            None => return Err(ERR),
        },
    };
    Ok(())
}

fn show_pressure(c: &Config, out: &mut LineBuf) {
    match c.trim_on_pressure {
        0 => out.put(b"0"),
        n => {
            put_u64(out, n as u64);
            out.put(b"%");
        }
    }
}

fn parse_release(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    c.release = match v {
        b"purge" => Release::Purge,
        b"decay" => Release::Decay,
        _ => return Err("purge or decay"),
    };
    Ok(())
}

fn show_release(c: &Config, out: &mut LineBuf) {
    out.put(if c.release == Release::Decay { b"decay" } else { b"purge" })
}

fn parse_file_mode(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    const ERR: &str = "octal permission bits from 0 to 0666, e.g. 0644 or 0640";
    if v.is_empty() || v.len() > 4 || !v.iter().all(|d| (b'0'..=b'7').contains(d)) {
        return Err(ERR);
    }
    let m = v.iter().fold(0u32, |a, &d| a * 8 + (d - b'0') as u32);
    if m & !0o666 != 0 {
        return Err(ERR);
    }
    c.prom_file_mode = m;
    Ok(())
}

fn parse_instance(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    if v == b"the pid" {
        c.instance = [0; INSTANCE_MAX];
        return Ok(());
    }
    if v.is_empty()
        || v.len() >= INSTANCE_MAX
        || !v.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err("1 to 64 letters, digits, '.', '_' or '-'");
    }
    c.instance = [0; INSTANCE_MAX];
    c.instance[..v.len()].copy_from_slice(v);
    Ok(())
}

fn show_instance(c: &Config, out: &mut LineBuf) {
    match cstr_bytes(&c.instance) {
        b"" => out.put(b"the pid"),
        d => out.put(d),
    }
}

/// Stores a path as a NUL-terminated buffer.
fn set_path(dst: &mut [u8; PATH_MAX], v: &[u8]) -> Result<(), &'static str> {
    if v.is_empty() || v.len() >= PATH_MAX || v.contains(&0) {
        return Err("a path shorter than 512 bytes");
    }
    *dst = [0; PATH_MAX];
    dst[..v.len()].copy_from_slice(v);
    Ok(())
}

/// A decimal whole number in [min, max]; callers name the range in their error (see `number!`).
fn parse_u64(v: &[u8], min: u64, max: u64) -> Result<u64, &'static str> {
    const ERR: &str = "a whole number";
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(ERR);
    }
    let n = v.iter().fold(0u64, |a, &d| a * 10 + (d - b'0') as u64);
    if n < min || n > max {
        return Err(ERR);
    }
    Ok(n)
}

/// The largest byte count any row takes: under 4 EiB (2^62).
const SIZE_MAX: u64 = (1 << 62) - 1;

/// A byte count in [min, max]: decimal, with an optional K, M or G suffix (powers of 1024, either
/// case). The one parser of every byte-valued row, so `mallocshim set` takes what the environment
/// takes; callers name the range in their error.
pub fn parse_bytes(v: &[u8], min: u64, max: u64) -> Result<u64, &'static str> {
    const ERR: &str = "a size";
    let (num, shift) = match v.last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 20),
        Some(b'G' | b'g') => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    let n = parse_u64(num, 0, u64::MAX >> 1).map_err(|_| ERR)?;
    let b = n.checked_shl(shift).filter(|&b| b >> shift == n).ok_or(ERR)?;
    if b < min || b > max {
        return Err(ERR);
    }
    Ok(b)
}

/// The smallest trace budget: the header, the footer's reserve and a few thousand calls.
pub const RECORD_MIN_BYTES: u64 = 64 << 10;

fn parse_record_max(v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    const ERR: &str = "a size of at least 65536 bytes (64K), with an optional K, M or G suffix";
    c.record_max_bytes = parse_bytes(v, RECORD_MIN_BYTES, SIZE_MAX).map_err(|_| ERR)?;
    Ok(())
}

fn put_u64(out: &mut LineBuf, n: u64) {
    let _ = core::fmt::Write::write_fmt(out, format_args!("{n}"));
}

fn parse_bool(v: &[u8]) -> Result<bool, &'static str> {
    match v {
        b"1" | b"on" | b"yes" | b"true" => Ok(true),
        b"0" | b"off" | b"no" | b"false" => Ok(false),
        _ => Err("one of 1, 0, on, off, yes, no, true, false"),
    }
}

struct Cell(UnsafeCell<Config>);
// SAFETY: written only by the initialising thread before the shim is published as ready
// (a Release store in `init`); every later access is a read.
unsafe impl Sync for Cell {}

static CONFIG: Cell = Cell(UnsafeCell::new(Config {
    backend: Backend::Glibc,
    tcmalloc_lib: [0; PATH_MAX],
    profile: true,
    verbose: 0,
    sample_every: 64,
    dump_signal: 0,
    dump_interval_s: 0,
    dump_at_exit: false,
    dump_min_interval_ms: 0,
    dump_keep: 0,
    dump_dir: [0; PATH_MAX],
    dump_formats: 0,
    trim_interval_ms: 0,
    trim_min_bytes: 0,
    release: Release::Purge,
    trim_above_rss: 0,
    trim_on_pressure: 0,
    glibc_trim_threshold: 0,
    memlog: [0; PATH_MAX],
    memlog_interval_ms: 1000,
    history_ms: 0,
    prof_sample_bytes: 0,
    prof_unwind_fp: false,
    prom_textfile_dir: [0; PATH_MAX],
    prom_interval_s: 15,
    prom_file_mode: 0o644,
    prom_histograms: true,
    instance: [0; INSTANCE_MAX],
    record: [0; PATH_MAX],
    record_seconds: 0,
    record_max_bytes: 1 << 30,
    record_wait_ms: 20,
    ctl_dir: [0; PATH_MAX],
}));

/// The effective configuration (valid once initialisation has run).
#[inline(always)]
pub fn get() -> &'static Config {
    // SAFETY: see `Cell`: no writes happen after initialisation.
    unsafe { &*CONFIG.0.get() }
}

/// The table in effect once the control channel has changed a run-time row (`set`); null
/// until then. Each published table stays valid for the process's life (a reader may hold it).
static CURRENT: core::sync::atomic::AtomicPtr<Config> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
/// Rows changed through the control channel (`get` shows source `set`).
static SET: [core::sync::atomic::AtomicBool; OPTIONS.len()] =
    [const { core::sync::atomic::AtomicBool::new(false) }; OPTIONS.len()];

/// The configuration in effect now: the start-up table with the run-time rows changed by the
/// control channel. The cold path reads run-time rows through this (never the hot path: it
/// reads the atomics `set` updates).
pub fn current() -> &'static Config {
    let p = CURRENT.load(core::sync::atomic::Ordering::Acquire);
    if p.is_null() {
        get()
    } else {
        // SAFETY: only `publish`ed tables, which live for the process's life, are stored.
        unsafe { &*p }
    }
}

/// Publishes a changed table, row `i` being the one changed (the control channel, worker-only).
pub fn publish(c: &'static Config, i: usize) {
    CURRENT.store(c as *const Config as *mut Config, core::sync::atomic::Ordering::Release);
    SET[i].store(true, core::sync::atomic::Ordering::Relaxed);
}

/// Where row `i`'s value comes from: `set` (control channel), `env` or `default`.
pub fn source(i: usize) -> &'static str {
    if SET[i].load(core::sync::atomic::Ordering::Relaxed) {
        "set"
    } else if from_env(i) {
        "env"
    } else {
        "default"
    }
}

/// Parses `v` as row `i`'s value into `c`; `Err` says what was expected.
pub fn parse_row(i: usize, v: &[u8], c: &mut Config) -> Result<(), &'static str> {
    OPTIONS[i].parse(v, c)
}

/// Writes row `i`'s value in `c`.
pub fn show_row(i: usize, c: &Config, out: &mut LineBuf) {
    OPTIONS[i].show(c, out)
}

/// Which rows were set by the environment (for the verbose table).
static mut FROM_ENV: [bool; OPTIONS.len()] = [false; OPTIONS.len()];

extern "C" {
    static environ: *const *const libc::c_char;
}

/// Reads the table's defaults, then `environ`. Called once, by the initialising thread.
///
/// # Safety
/// Must run before the shim is published as ready and never concurrently with itself.
pub unsafe fn load() {
    // SAFETY: single writer before publication (see `Cell`).
    let cfg = unsafe { &mut *CONFIG.0.get() };
    for o in OPTIONS.iter() {
        let _ = o.parse(o.default.as_bytes(), cfg);
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { load_env(cfg) };
    // What is in effect: profiling off records no heap profile either (`heapprof::init`), so the
    // table, `get` and the dumps read 0, not the rate that would have applied.
    if !cfg.profile {
        cfg.prof_sample_bytes = 0;
    }
}

/// True when row `i` was set by the environment (valid once [`load`] has run).
pub fn from_env(i: usize) -> bool {
    // SAFETY: FROM_ENV is only written during initialisation, before any reader runs.
    unsafe { FROM_ENV[i] }
}

/// Why row `i`'s value in `c` is not what its variable says, when another row overrides it.
pub fn overridden(i: usize, c: &Config) -> Option<&'static str> {
    (OPTIONS[i].name == "MALLOCSHIM_PROF_SAMPLE_BYTES" && !c.profile).then_some("off with PROFILE=off")
}

/// Reads `environ` into `cfg`, row by row.
///
/// # Safety
/// As [`load`]: the single initialiser, before publication.
unsafe fn load_env(cfg: &mut Config) {
    // SAFETY: getauxval is async-signal-safe and does not allocate.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    // SAFETY: `environ` is the NUL-terminated array libc set up before any constructor ran.
    let mut ep = unsafe { environ };
    if ep.is_null() {
        return;
    }
    loop {
        // SAFETY: `ep` walks the array until its NULL terminator.
        let e = unsafe { *ep };
        if e.is_null() {
            break;
        }
        // SAFETY: `e` was not the terminator, so the next element is still in the array.
        ep = unsafe { ep.add(1) };
        // SAFETY: each entry is a NUL-terminated C string.
        let entry = unsafe { core::ffi::CStr::from_ptr(e) }.to_bytes();
        let Some(rest) = entry.strip_prefix(b"MALLOCSHIM_") else { continue };
        let eq = rest.iter().position(|&b| b == b'=').unwrap_or(rest.len());
        let name = &entry[..11 + eq];
        let value = entry.get(11 + eq + 1..).unwrap_or(b"");
        let name_s = core::str::from_utf8(name).unwrap_or("MALLOCSHIM_?");
        match OPTIONS.iter().position(|o| o.name.as_bytes() == name) {
            None => crate::base::diag::warn!(
                "unknown variable {} ignored (see MALLOCSHIM_VERBOSE=2 for the table)",
                name_s
            ),
            Some(i) => {
                let o = &OPTIONS[i];
                if o.is_path() && secure {
                    crate::base::diag::warn!(
                        "{} ignored in a secure-execution (setuid) process; using default {}",
                        o.name,
                        o.default
                    );
                    continue;
                }
                let before = *cfg;
                match o.parse(value, cfg) {
                    // SAFETY: single writer before publication.
                    Ok(()) => unsafe { FROM_ENV[i] = true },
                    Err(expected) => {
                        *cfg = before;
                        crate::base::diag::warn!(
                            "{}={} is not valid (expected {}); using default {}",
                            o.name,
                            Lossy(value),
                            expected,
                            o.default
                        );
                    }
                }
            }
        }
    }
}

impl Config {
    /// The library to dlopen for the chosen backend: `MALLOCSHIM_TCMALLOC_LIB` for tcmalloc,
    /// empty (the backend's default library) otherwise.
    pub fn backend_lib(&self) -> &core::ffi::CStr {
        match self.backend {
            Backend::Tcmalloc => core::ffi::CStr::from_bytes_until_nul(&self.tcmalloc_lib).unwrap_or(c""),
            _ => c"",
        }
    }
}

/// The bytes of a NUL-terminated buffer, without the NUL.
pub fn cstr_bytes(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&x| x == 0).unwrap_or(b.len())]
}

/// The display helper, now in `diag`; kept here for the modules that still name it so.
pub use crate::base::diag::Lossy;
