//! Reads a mallocshim JSON dump through the format crate and prints a few figures: the smallest
//! program a reader needs. `cargo run --example read_dump -- /tmp/mallocshim.1234.0.json`
//! (for the full tables: `mallocshim report`).

use mallocshim_format::{Dump, OP_NAMES};
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("read_dump: usage: read_dump DUMP.json");
        return ExitCode::from(2);
    };
    let d = match Dump::read(path.as_ref()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("read_dump: {e}");
            return ExitCode::from(2);
        }
    };
    println!("pid {} backend {} uptime {:.1} s", d.pid, d.backend, d.uptime_s);
    for op in OP_NAMES {
        println!("{op:>8}: {} calls, {} bytes", d.count(op), d.bytes(op));
    }
    // The busiest size class of malloc, with its label (`<=64`, `>64M`).
    if let Some(r) = d.size_classes.iter().filter(|r| r.op == "malloc").max_by_key(|r| r.count) {
        println!("busiest malloc class {}: {} calls, p99 {} ns", r.label(), r.count, r.p99_ns);
    }
    println!("rss {} bytes, {} live threads", d.memory.rss_bytes, d.live_threads().count());
    ExitCode::SUCCESS
}
