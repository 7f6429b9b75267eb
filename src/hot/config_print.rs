//! What `MALLOCSHIM_VERBOSE` prints at start-up about the options: at 1 one line naming the
//! options set by the environment or not at their default (what a DBA changed, and what another
//! option overrides), at 2 that line's header and the whole table, one row per option. Each value
//! is the one in effect (`config::overridden` notes why it differs from its variable).
//! Runs once, in lazy initialisation under the reentrancy guard: must not allocate (stack
//! buffers and `diag`'s single `write(2)` only).

use crate::base::diag::{warn, LineBuf, Lossy};
use crate::hot::config::{self, Config, OPTIONS};

/// The header both forms start with (scripts/mtr.sh counts it per server start).
fn header(out: &mut LineBuf) {
    let _ = core::fmt::Write::write_fmt(
        out,
        format_args!(
            "mallocshim {} options in effect (backend {})",
            env!("CARGO_PKG_VERSION"),
            crate::backend::active().name()
        ),
    );
}

/// Row `i`'s value in `c`, with the reason when another row overrides it.
fn value(i: usize, c: &Config, out: &mut LineBuf) {
    config::show_row(i, c, out);
    if let Some(why) = config::overridden(i, c) {
        out.put(b" (");
        out.put(why.as_bytes());
        out.put(b")");
    }
}

/// True when row `i` shows another value in `c` than its default does in `d`.
fn differs(i: usize, c: &Config, d: &Config) -> bool {
    let (mut a, mut b) = (LineBuf::new(), LineBuf::new());
    config::show_row(i, c, &mut a);
    config::show_row(i, d, &mut b);
    a.as_bytes() != b.as_bytes()
}

/// `MALLOCSHIM_VERBOSE=1`: one line, `NAME=VALUE` for each row set by the environment or not at
/// its default, and how many rows are left at their defaults.
pub fn print_line() {
    let c = config::get();
    let mut d = *c;
    for (i, o) in OPTIONS.iter().enumerate() {
        let _ = config::parse_row(i, o.default.as_bytes(), &mut d);
    }
    let mut out = LineBuf::new();
    header(&mut out);
    out.put(b":");
    let mut rest = 0;
    for (i, o) in OPTIONS.iter().enumerate() {
        if !config::from_env(i) && !differs(i, c, &d) {
            rest += 1;
            continue;
        }
        out.put(b" ");
        out.put(o.name.as_bytes());
        out.put(b"=");
        value(i, c, &mut out);
    }
    let _ = core::fmt::Write::write_fmt(
        &mut out,
        format_args!("; the other {rest} at their defaults (MALLOCSHIM_VERBOSE=2 prints the table)"),
    );
    warn!("{}", Lossy(out.as_bytes()));
}

/// `MALLOCSHIM_VERBOSE=2`: the header, then one `mallocshim:` line per row
/// (`  NAME = VALUE [env|default; default DEFAULT] DOC`, the form the README's table is checked
/// against by tests/config.rs).
pub fn print_table() {
    let c = config::get();
    let mut h = LineBuf::new();
    header(&mut h);
    warn!("{}:", Lossy(h.as_bytes()));
    for (i, o) in OPTIONS.iter().enumerate() {
        let src = if config::from_env(i) { "env" } else { "default" };
        let mut v = LineBuf::new();
        value(i, c, &mut v);
        warn!("  {:<29} = {:<26} [{}; default {}] {}", o.name, Lossy(v.as_bytes()), src, o.default, o.doc);
    }
}
