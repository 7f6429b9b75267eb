//! The configuration table: one row per `MALLOCSHIM_*` variable (name, default, one-line doc) and
//! the parsed [`Config`]. Read once, at lazy initialisation, straight from `environ` (no getenv, no
//! allocation). A bad value gives one `mallocshim:` line naming the variable, the value and the
//! default kept; an unknown `MALLOCSHIM_*` variable gives one line too. Path-valued variables are
//! ignored in secure-execution processes (AT_SECURE), as `secure_getenv` would.
//! Must not allocate: it runs before any backend exists.

use crate::backend::{Backend, Release};
use crate::base::diag::LineBuf;
use core::cell::UnsafeCell;

/// `range!(v, MIN, MAX)`: [`parse_u64`] whose error names the range, "a whole number from MIN to
/// MAX" (integer literals, so the message is a static string).
macro_rules! range {
    ($v:expr, $min:literal, $max:literal) => {
        parse_u64($v, $min, $max).map_err(|_| concat!("a whole number from ", $min, " to ", $max))
    };
}

/// Longest path accepted for path-valued variables, in bytes.
pub const PATH_MAX: usize = 512;

/// The effective configuration. Written once during initialisation, read-only afterwards.
#[derive(Clone, Copy)]
pub struct Config {
    pub backend: Backend,
    /// NUL-terminated library path for the tcmalloc backend.
    pub tcmalloc_lib: [u8; PATH_MAX],
    pub profile: bool,
    /// 0 quiet; 1 the table at start and a summary at exit; 2 also one line per trim.
    pub verbose: u8,
    /// Time 1 call in this many per thread (1 = every call).
    pub sample_every: u32,
    /// Signal that requests a dump; 0 = none.
    pub dump_signal: i32,
    /// Seconds between periodic dumps; 0 = off.
    pub dump_interval_s: u64,
    /// Write one dump at exit.
    pub dump_at_exit: bool,
    /// NUL-terminated dump directory; empty = `$TMPDIR` or `/tmp`, resolved when dumping.
    pub dump_dir: [u8; PATH_MAX],
    /// Bit set of dump formats (`FMT_*`).
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
    /// NUL-terminated memlog path (`%p` = pid); empty = off.
    pub memlog: [u8; PATH_MAX],
    /// Milliseconds between memlog lines.
    pub memlog_interval_ms: u64,
    /// Mean bytes between heap-profile samples; 0 = off.
    pub prof_sample_bytes: u64,
    /// NUL-terminated Prometheus textfile directory; empty = off.
    pub prom_textfile_dir: [u8; PATH_MAX],
    /// Seconds between textfile writes.
    pub prom_interval_s: u64,
    /// Permission bits of the textfile (a subset of 0666).
    pub prom_file_mode: u32,
    /// NUL-terminated `instance` label value; empty = the pid.
    pub instance: [u8; INSTANCE_MAX],
}

/// Longest `MALLOCSHIM_INSTANCE` accepted, in bytes (plus the NUL).
pub const INSTANCE_MAX: usize = 65;

/// Dump format bits for [`Config::dump_formats`].
pub const FMT_JSON: u8 = 1;
pub const FMT_PROM: u8 = 2;
pub const FMT_HDR: u8 = 4;
pub const FMT_TEXT: u8 = 8;
/// The heap profile, gzip'ed profile.proto (file extension `pb.gz`).
pub const FMT_PPROF: u8 = 16;
/// Format names and bits, in file order.
pub const FORMATS: [(&str, u8); 5] =
    [("json", FMT_JSON), ("prom", FMT_PROM), ("hdr", FMT_HDR), ("text", FMT_TEXT), ("pprof", FMT_PPROF)];

/// One row of the table.
pub struct Opt {
    pub name: &'static str,
    pub default: &'static str,
    pub doc: &'static str,
    /// Path-valued: ignored under AT_SECURE.
    pub path: bool,
    /// Applies a value; `Err` says what was expected.
    parse: fn(&[u8], &mut Config) -> Result<(), &'static str>,
    /// Writes the effective value.
    show: fn(&Config, &mut LineBuf),
}

/// Every variable the shim reads. The README's table matches this one row for row.
pub static OPTIONS: [Opt; 22] = [
    Opt {
        name: "MALLOCSHIM_BACKEND",
        default: "glibc",
        doc: crate::backend::OPTION_DOC,
        path: false,
        parse: |v, c| {
            c.backend = Backend::from_name(v).ok_or(crate::backend::NAMES)?;
            Ok(())
        },
        show: |c, out| out.put(c.backend.name().as_bytes()),
    },
    Opt {
        name: "MALLOCSHIM_TCMALLOC_LIB",
        default: "libtcmalloc_minimal.so.4",
        doc: "gperftools library dlopen()ed (RTLD_LOCAL) for the tcmalloc backend",
        path: true,
        parse: |v, c| {
            set_path(&mut c.tcmalloc_lib, v)
        },
        show: |c, out| out.put(cstr_bytes(&c.tcmalloc_lib)),
    },
    Opt {
        name: "MALLOCSHIM_PROFILE",
        default: "on",
        doc: "count calls per entry point and thread; off leaves pure routing",
        path: false,
        parse: |v, c| {
            c.profile = parse_bool(v)?;
            Ok(())
        },
        show: |c, out| out.put(if c.profile { b"on" } else { b"off" }),
    },
    Opt {
        name: "MALLOCSHIM_VERBOSE",
        default: "0",
        doc: "1 prints this table at start and a call summary at exit, on stderr; 2 also a line per trim",
        path: false,
        parse: |v, c| {
            c.verbose = match v {
                b"2" => 2,
                _ => parse_bool(v).map_err(|_| "0, 1 or 2")? as u8,
            };
            Ok(())
        },
        show: |c, out| put_u64(out, c.verbose as u64),
    },
    Opt {
        name: "MALLOCSHIM_SAMPLE",
        default: "64",
        doc: "time 1 call in N per thread with the cycle counter (1 times every call)",
        path: false,
        parse: |v, c| {
            c.sample_every = range!(v, 1, 1073741824)? as u32;
            Ok(())
        },
        show: |c, out| put_u64(out, c.sample_every as u64),
    },
    Opt {
        name: "MALLOCSHIM_DUMP_SIGNAL",
        default: "SIGUSR1",
        doc: "signal that writes a dump when sent to the process (kill -USR1 PID); none disables",
        path: false,
        parse: |v, c| {
            c.dump_signal = match v {
                b"none" => 0,
                b"SIGUSR1" | b"USR1" => libc::SIGUSR1,
                b"SIGUSR2" | b"USR2" => libc::SIGUSR2,
                _ => match parse_u64(v, 1, 64) {
                    Ok(n) if n != libc::SIGKILL as u64 && n != libc::SIGSTOP as u64 => n as i32,
                    _ => return Err("SIGUSR1, SIGUSR2, a signal number from 1 to 64 (not 9 or 19) or none"),
                },
            };
            Ok(())
        },
        show: |c, out| match c.dump_signal {
            0 => out.put(b"none"),
            libc::SIGUSR1 => out.put(b"SIGUSR1"),
            libc::SIGUSR2 => out.put(b"SIGUSR2"),
            n => put_u64(out, n as u64),
        },
    },
    Opt {
        name: "MALLOCSHIM_DUMP_INTERVAL_S",
        default: "0",
        doc: "also write a dump every N seconds (0 = off)",
        path: false,
        parse: |v, c| {
            c.dump_interval_s = range!(v, 0, 31536000)?;
            Ok(())
        },
        show: |c, out| put_u64(out, c.dump_interval_s),
    },
    Opt {
        name: "MALLOCSHIM_DUMP_AT_EXIT",
        default: "0",
        doc: "1 writes one dump when the process exits",
        path: false,
        parse: |v, c| {
            c.dump_at_exit = parse_bool(v)?;
            Ok(())
        },
        show: |c, out| out.put(if c.dump_at_exit { b"1" } else { b"0" }),
    },
    Opt {
        name: "MALLOCSHIM_DUMP_DIR",
        default: "$TMPDIR or /tmp",
        doc: "directory for mallocshim.<pid>.<seq>.<ext> dump files",
        path: true,
        parse: |v, c| {
            if v == b"$TMPDIR or /tmp" {
                c.dump_dir = [0; PATH_MAX];
                return Ok(());
            }
            set_path(&mut c.dump_dir, v)
        },
        show: |c, out| match cstr_bytes(&c.dump_dir) {
            b"" => out.put(b"$TMPDIR or /tmp"),
            d => out.put(d),
        },
    },
    Opt {
        name: "MALLOCSHIM_DUMP_FORMATS",
        default: "json,prom",
        doc: "dump formats, comma-separated: json, prom, hdr, text, pprof (heap profile, .pb.gz)",
        path: false,
        parse: |v, c| {
            let mut bits = 0;
            for part in v.split(|&b| b == b',') {
                bits |= FORMATS.iter().find(|f| f.0.as_bytes() == part).map(|f| f.1).ok_or("a comma-separated list of json, prom, hdr, text, pprof")?;
            }
            c.dump_formats = bits;
            Ok(())
        },
        show: |c, out| {
            let mut first = true;
            for (n, b) in FORMATS {
                if c.dump_formats & b != 0 {
                    if !first {
                        out.put(b",");
                    }
                    out.put(n.as_bytes());
                    first = false;
                }
            }
        },
    },
    Opt {
        name: "MALLOCSHIM_TRIM_INTERVAL_MS",
        default: "10000",
        doc: "give free memory back to the OS every N ms (glibc malloc_trim, jemalloc purge, tcmalloc release, mimalloc mi_collect); 0 = off",
        path: false,
        parse: |v, c| {
            c.trim_interval_ms = range!(v, 0, 86400000)?;
            Ok(())
        },
        show: |c, out| put_u64(out, c.trim_interval_ms),
    },
    Opt {
        name: "MALLOCSHIM_TRIM_MIN_BYTES",
        default: "67108864",
        doc: "skip a periodic trim while the backend holds fewer free bytes than this",
        path: false,
        parse: |v, c| {
            c.trim_min_bytes = range!(v, 0, 9223372036854775807)?;
            Ok(())
        },
        show: |c, out| put_u64(out, c.trim_min_bytes),
    },
    Opt {
        name: "MALLOCSHIM_TRIM_ABOVE_RSS",
        default: "off",
        doc: "also trim whenever RSS is above SIZE (bytes, or K/M/G suffix), checked every 250 ms, at most once a second",
        path: false,
        parse: |v, c| {
            c.trim_above_rss = if matches!(v, b"off" | b"0") { 0 } else { parse_size(v)? };
            Ok(())
        },
        show: |c, out| match c.trim_above_rss {
            0 => out.put(b"off"),
            n => put_u64(out, n),
        },
    },
    Opt {
        name: "MALLOCSHIM_TRIM_ON_PRESSURE",
        default: "0",
        doc: "1 also trims when the cgroup's PSI memory `some avg10` reaches 10%; N% sets the threshold; at most once per 10 s",
        path: false,
        parse: |v, c| {
            c.trim_on_pressure = match v {
                b"0" | b"off" => 0,
                b"1" | b"on" => 10,
                _ => match v.strip_suffix(b"%") {
                    Some(n) => parse_u64(n, 1, 100).map_err(|_| "0, 1 or a percentage N% from 1 to 100")? as u32,
                    None => return Err("0, 1 or a percentage N% from 1 to 100"),
                },
            };
            Ok(())
        },
        show: |c, out| match c.trim_on_pressure {
            0 => out.put(b"0"),
            n => {
                put_u64(out, n as u64);
                out.put(b"%");
            }
        },
    },
    Opt {
        name: "MALLOCSHIM_JEMALLOC_RELEASE",
        default: "purge",
        doc: "jemalloc release call: purge (arena.<all>.purge, all unused pages) or decay (arena.<all>.decay)",
        path: false,
        parse: |v, c| {
            c.release = match v {
                b"purge" => Release::Purge,
                b"decay" => Release::Decay,
                _ => return Err("purge or decay"),
            };
            Ok(())
        },
        show: |c, out| out.put(if c.release == Release::Decay { b"decay" } else { b"purge" }),
    },
    Opt {
        name: "MALLOCSHIM_MEMLOG",
        default: "off",
        doc: "append a CSV line of RSS and backend memory every MEMLOG_INTERVAL_MS to this file (%p = pid)",
        path: true,
        parse: |v, c| {
            if v == b"off" {
                c.memlog = [0; PATH_MAX];
                return Ok(());
            }
            set_path(&mut c.memlog, v)
        },
        show: |c, out| match cstr_bytes(&c.memlog) {
            b"" => out.put(b"off"),
            d => out.put(d),
        },
    },
    Opt {
        name: "MALLOCSHIM_MEMLOG_INTERVAL_MS",
        default: "1000",
        doc: "milliseconds between memlog lines",
        path: false,
        parse: |v, c| {
            c.memlog_interval_ms = range!(v, 10, 86400000)?;
            Ok(())
        },
        show: |c, out| put_u64(out, c.memlog_interval_ms),
    },
    Opt {
        name: "MALLOCSHIM_PROF_SAMPLE_BYTES",
        default: "524288",
        doc: "heap profile: sample one allocation per N bytes on average (exponential gaps); 0 = off",
        path: false,
        parse: |v, c| {
            c.prof_sample_bytes = range!(v, 0, 1099511627776)?;
            Ok(())
        },
        show: |c, out| put_u64(out, c.prof_sample_bytes),
    },
    Opt {
        name: "MALLOCSHIM_PROM_TEXTFILE_DIR",
        default: "off",
        doc: "write DIR/mallocshim_<instance>.prom for node_exporter's textfile collector every PROM_INTERVAL_S",
        path: true,
        parse: |v, c| {
            if v == b"off" {
                c.prom_textfile_dir = [0; PATH_MAX];
                return Ok(());
            }
            set_path(&mut c.prom_textfile_dir, v)
        },
        show: |c, out| match cstr_bytes(&c.prom_textfile_dir) {
            b"" => out.put(b"off"),
            d => out.put(d),
        },
    },
    Opt {
        name: "MALLOCSHIM_PROM_INTERVAL_S",
        default: "15",
        doc: "seconds between rewrites of the textfile (1 to 86400)",
        path: false,
        parse: |v, c| {
            c.prom_interval_s = parse_u64(v, 1, 86_400).map_err(|_| "a whole number of seconds from 1 to 86400")?;
            Ok(())
        },
        show: |c, out| put_u64(out, c.prom_interval_s),
    },
    Opt {
        name: "MALLOCSHIM_PROM_FILE_MODE",
        default: "0644",
        doc: "permission bits of the textfile, octal, at most 0666 (0644: node_exporter's user can read it)",
        path: false,
        parse: |v, c| {
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
        },
        show: |c, out| {
            let _ = core::fmt::Write::write_fmt(out, format_args!("{:04o}", c.prom_file_mode));
        },
    },
    Opt {
        name: "MALLOCSHIM_INSTANCE",
        default: "the pid",
        doc: "value of the instance label and name of the textfile: letters, digits, . _ - (1 to 64)",
        path: false,
        parse: |v, c| {
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
        },
        show: |c, out| match cstr_bytes(&c.instance) {
            b"" => out.put(b"the pid"),
            d => out.put(d),
        },
    },
];

/// Stores a path as a NUL-terminated buffer.
fn set_path(dst: &mut [u8; PATH_MAX], v: &[u8]) -> Result<(), &'static str> {
    if v.is_empty() || v.len() >= PATH_MAX || v.contains(&0) {
        return Err("a path shorter than 512 bytes");
    }
    *dst = [0; PATH_MAX];
    dst[..v.len()].copy_from_slice(v);
    Ok(())
}

/// A decimal whole number in [min, max]; callers name the range in their error (see `range!`).
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

/// A byte count in [1, 2^62) with an optional K, M or G suffix (powers of 1024).
fn parse_size(v: &[u8]) -> Result<u64, &'static str> {
    const ERR: &str = "a size from 1 to 4611686018427387903 bytes (under 4 EiB), or with a K, M or G suffix";
    let (num, shift) = match v.last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 20),
        Some(b'G' | b'g') => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    let n = parse_u64(num, 1, u64::MAX >> 1).map_err(|_| ERR)?;
    n.checked_shl(shift).filter(|&b| b >> shift == n && b < 1 << 62).ok_or(ERR)
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
    dump_dir: [0; PATH_MAX],
    dump_formats: 0,
    trim_interval_ms: 0,
    trim_min_bytes: 0,
    release: Release::Purge,
    trim_above_rss: 0,
    trim_on_pressure: 0,
    memlog: [0; PATH_MAX],
    memlog_interval_ms: 1000,
    prof_sample_bytes: 0,
    prom_textfile_dir: [0; PATH_MAX],
    prom_interval_s: 15,
    prom_file_mode: 0o644,
    instance: [0; INSTANCE_MAX],
}));

/// The effective configuration (valid once initialisation has run).
#[inline(always)]
pub fn get() -> &'static Config {
    // SAFETY: see `Cell`: no writes happen after initialisation.
    unsafe { &*CONFIG.0.get() }
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
        let _ = (o.parse)(o.default.as_bytes(), cfg);
    }
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
                "unknown variable {} ignored (see MALLOCSHIM_VERBOSE=1 for the table)",
                name_s
            ),
            Some(i) => {
                let o = &OPTIONS[i];
                if o.path && secure {
                    crate::base::diag::warn!(
                        "{} ignored in a secure-execution (setuid) process; using default {}",
                        o.name,
                        o.default
                    );
                    continue;
                }
                let before = *cfg;
                match (o.parse)(value, cfg) {
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

/// Prints the effective table, one `mallocshim:` line per row.
pub fn print_table() {
    let c = get();
    crate::base::diag::warn!(
        "mallocshim {} options in effect (backend {}):",
        env!("CARGO_PKG_VERSION"),
        crate::backend::active().name()
    );
    for (i, o) in OPTIONS.iter().enumerate() {
        // SAFETY: FROM_ENV is only written during initialisation, before this runs.
        let src = if unsafe { FROM_ENV[i] } { "env" } else { "default" };
        let mut v = LineBuf::new();
        (o.show)(c, &mut v);
        crate::base::diag::warn!(
            "  {:<29} = {:<26} [{}; default {}] {}",
            o.name,
            Lossy(v.as_bytes()),
            src,
            o.default,
            o.doc
        );
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
