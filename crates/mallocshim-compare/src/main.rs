//! `mallocshim-compare`: the allocator comparison runner (`compare/`), a binary of its own so
//! that the `mallocshim` command does not depend on the MariaDB test harness; `mallocshim
//! compare ARGS` execs it (found beside `mallocshim`, else on PATH) with the same arguments,
//! pid and exit status. Flags, errors and exit status are `mallocshim compare`'s: errors are one
//! line prefixed `mallocshim compare:`, bad arguments exit 2. It never links the shim.

mod compare;

use clap::Parser;
use mallocshim_cli::{bad_args, plot, secure_write, shim_lib};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "mallocshim compare", bin_name = "mallocshim compare", version)]
struct Cli {
    #[command(flatten)]
    args: compare::cli::Args,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return bad_args::exit(&e, "mallocshim compare"),
    };
    compare::main(cli.args)
}
