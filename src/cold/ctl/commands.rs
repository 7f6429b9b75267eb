//! The control channel's commands: one row each (name, argument syntax, one-line doc, handler).
//! A handler gets the request's arguments (the line after the name, trimmed) and returns the
//! reply's body, or one line saying why nothing was done. Handlers run on the shim's thread,
//! under its reentrancy guard; each leaves the process unchanged when it fails (`set` parses
//! into a copy of the table and publishes it only when valid). Must not block for long: one
//! client at a time, and the worker's other jobs wait while a handler runs.

use crate::hot::config::{self, OPTIONS};
use core::fmt::Write;

/// One command: `name args`, documented by `doc`, answered by `run`.
pub struct Command {
    pub name: &'static str,
    /// Argument syntax, as `help` shows it (empty: none).
    pub args: &'static str,
    pub doc: &'static str,
    pub run: fn(&str) -> Result<String, String>,
}

const fn cmd(
    name: &'static str,
    args: &'static str,
    doc: &'static str,
    run: fn(&str) -> Result<String, String>,
) -> Command {
    Command { name, args, doc, run }
}

/// Every command, one row each.
#[rustfmt::skip]
pub static COMMANDS: &[Command] = &[
    cmd("help", "", "this list: name, arguments, what it does", help),
    cmd("trim", "", "the backend's release call now; key=value lines: rss_before_bytes, rss_after_bytes, released_bytes, backend_free_before_bytes, duration_us, allocator_free_before_bytes, and under glibc trimmable_before_bytes, free_in_whole_pages_bytes, free_kept_bytes, arena_tops_kept_bytes", trim),
    cmd("get", "[json]", "the options in effect: name, value, source (env, default, set), settable at run time (yes/no); tab-separated, or a JSON array", get),
    cmd("set", "NAME=VALUE", "change a run-time option (NAME with or without MALLOCSHIM_); replies NAME=VALUE (was OLD)", set),
    cmd("dump", "", "write a dump now (every format of MALLOCSHIM_DUMP_FORMATS); one file path per line", dump),
    cmd("json", "", "the dump's JSON, written to no file", json),
    cmd("record", "FILE SECONDS MAX_BYTES | stop | status", "record every allocator call into the trace FILE (absolute path, created 0600; written as FILE.part, renamed when whole; FILE.<pid> when FILE is taken) for SECONDS (0 = until stop or exit) within MAX_BYTES: recording=<the file's name>; stop ends it; status: recording=0|1", record),
];

/// Answers one request line.
pub fn run(line: &str) -> Result<String, String> {
    let (name, args) = line.split_once([' ', '\t']).unwrap_or((line, ""));
    let c = COMMANDS
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| format!("unknown command `{}` (try `help`)", name.escape_default()))?;
    (c.run)(args.trim())
}

fn no_args(args: &str) -> Result<(), String> {
    if args.is_empty() {
        Ok(())
    } else {
        Err(format!("unexpected argument `{}`", args.escape_default()))
    }
}

fn help(args: &str) -> Result<String, String> {
    no_args(args)?;
    let mut o = String::new();
    for c in COMMANDS {
        let _ = writeln!(o, "{}\t{}\t{}", c.name, c.args, c.doc);
    }
    Ok(o)
}

fn trim(args: &str) -> Result<String, String> {
    no_args(args)?;
    let (m, est) = crate::cold::account::measure_with_trim();
    let o = crate::cold::trim::run(crate::cold::trim::Reason::Api);
    let mut r = format!(
        "rss_before_bytes={}\nrss_after_bytes={}\nreleased_bytes={}\nbackend_free_before_bytes={}\nduration_us={}\nallocator_free_before_bytes={}\n",
        o.rss_before,
        o.rss_after,
        o.released,
        o.free_before,
        o.duration_ns / 1000,
        m.allocator_free_bytes
    );
    if let (Some(t), Some(e)) = (m.allocator_trimmable_bytes, est) {
        let _ = write!(
            r,
            "trimmable_before_bytes={t}\nfree_in_whole_pages_bytes={}\nfree_kept_bytes={}\narena_tops_kept_bytes={}\n",
            e.releasable, e.kept, e.arena_tops
        );
    }
    Ok(r)
}

/// Row `i`'s value in the table in effect.
fn value(i: usize) -> String {
    let mut b = crate::base::diag::LineBuf::new();
    config::show_row(i, config::current(), &mut b);
    String::from_utf8_lossy(b.as_bytes()).into_owned()
}

fn get(args: &str) -> Result<String, String> {
    let json = match args {
        "" => false,
        "json" => true,
        a => {
            return Err(format!("unexpected argument `{}` (expected nothing or `json`)", a.escape_default()))
        }
    };
    let rows = OPTIONS.iter().enumerate().map(|(i, o)| (o.name, value(i), config::source(i), o.live));
    if json {
        let v: Vec<serde_json::Value> = rows
            .map(|(n, v, s, l)| serde_json::json!({"name": n, "value": v, "source": s, "settable": l}))
            .collect();
        return Ok(serde_json::Value::Array(v).to_string() + "\n");
    }
    let mut o = String::new();
    for (n, v, s, l) in rows {
        let _ = writeln!(o, "{n}\t{v}\t{s}\t{}", if l { "yes" } else { "no" });
    }
    Ok(o)
}

fn set(args: &str) -> Result<String, String> {
    let (name, v) = args.split_once('=').ok_or("expected NAME=VALUE")?;
    let full = if name.starts_with("MALLOCSHIM_") { name.to_string() } else { format!("MALLOCSHIM_{name}") };
    let i = OPTIONS
        .iter()
        .position(|o| o.name == full)
        .ok_or_else(|| format!("unknown option `{}` (see `get`)", full.escape_default()))?;
    if !OPTIONS[i].live {
        return Err(format!("{full} cannot change at run time (set it in the environment and restart)"));
    }
    let mut c = Box::new(*config::current());
    config::parse_row(i, v.as_bytes(), &mut c)
        .map_err(|e| format!("{full}={} is not valid (expected {e}); nothing changed", v.escape_default()))?;
    apply_hot(&full, &c)?;
    let old = value(i);
    config::publish(Box::leak(c), i);
    if full == "MALLOCSHIM_MEMLOG" {
        crate::cold::memlog::reopen();
    }
    if full == "MALLOCSHIM_PROM_TEXTFILE_DIR" {
        crate::cold::textfile::retarget();
    }
    Ok(format!("{full}={} (was {old})\n", value(i)))
}

/// The rows the hot path reads through its own atomics: updated before the table is published.
fn apply_hot(name: &str, c: &config::Config) -> Result<(), String> {
    let profile = config::get().profile;
    match name {
        "MALLOCSHIM_SAMPLE" | "MALLOCSHIM_PROF_SAMPLE_BYTES" if !profile => Err(format!(
            "{name}: profiling is off (MALLOCSHIM_PROFILE=off): nothing is recorded; nothing changed"
        )),
        "MALLOCSHIM_SAMPLE" => {
            crate::hot::record::set_sample_every(c.sample_every);
            Ok(())
        }
        "MALLOCSHIM_RECORD_WAIT_MS" => {
            crate::hot::tracebuf::set_wait_ms(c.record_wait_ms);
            Ok(())
        }
        "MALLOCSHIM_PROF_SAMPLE_BYTES" => {
            crate::hot::heapprof::set_rate(c.prof_sample_bytes).map_err(|_| {
                format!("{name}: the heap profile's tables cannot be mapped; nothing changed")
            })?;
            if c.prof_sample_bytes != 0 {
                // As `mallocshim_heap_profile_set`: to the entry table with heap profiles.
                core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
                crate::hot::route::heap_profiles_on();
            }
            Ok(())
        }
        "MALLOCSHIM_GLIBC_TRIM_THRESHOLD" => match (c.glibc_trim_threshold, config::current().glibc_trim_threshold) {
            (0, 0) => Ok(()),
            (0, _) => Err(format!(
                "{name}=off: glibc cannot go back to its own dynamic threshold in a running process (restart without it); nothing changed"
            )),
            (v, _) => crate::backend::active()
                .set_trim_threshold(v)
                .map_err(|e| format!("{name}: {e}; nothing changed")),
        },
        _ => Ok(()),
    }
}

fn dump(args: &str) -> Result<String, String> {
    no_args(args)?;
    let files = crate::cold::dump::write_all().map_err(|e| e.to_string())?;
    Ok(files.iter().map(|p| format!("{}\n", p.display())).collect())
}

fn json(args: &str) -> Result<String, String> {
    no_args(args)?;
    let mut s = crate::cold::report::json::render(&crate::cold::report::snapshot());
    s.push('\n');
    Ok(s)
}

fn record(args: &str) -> Result<String, String> {
    let w: Vec<&str> = args.split_whitespace().collect();
    match w[..] {
        ["stop"] => {
            let was = crate::cold::record::active();
            crate::cold::record::stop();
            Ok(format!("stopped={}\n", was as u8))
        }
        ["status"] => Ok(format!("recording={}\n", crate::cold::record::active() as u8)),
        [file, seconds, max_bytes] => {
            let path = std::path::Path::new(file);
            if !path.is_absolute() {
                return Err(format!("record: `{}` is not an absolute path", file.escape_default()));
            }
            let seconds: u64 =
                seconds.parse().map_err(|_| "record: SECONDS is not a whole number".to_string())?;
            let max: u64 =
                max_bytes.parse().map_err(|_| "record: MAX_BYTES is not a whole number".to_string())?;
            if max < config::RECORD_MIN_BYTES {
                return Err(format!("record: MAX_BYTES below the minimum of {}", config::RECORD_MIN_BYTES));
            }
            let named = crate::cold::record::open(path, seconds, max).map_err(|e| format!("record: {e}"))?;
            Ok(format!("recording={}\n", named.display()))
        }
        _ => Err("record: expected FILE SECONDS MAX_BYTES, stop or status".into()),
    }
}
