//! How both binaries (`mallocshim` and `mallocshim-compare`) answer arguments clap rejects: help
//! and version print and exit 0, the help shown for a missing subcommand exits 2, anything else
//! is one line `PREFIX: WHAT (see PREFIX --help)` on stderr and exit status 2. Owns no parsing
//! and must not print more than that one line for an error.

use std::process::ExitCode;

/// The exit for clap's error `e`; `prefix` names the command the one-line error speaks for
/// (`mallocshim`, `mallocshim dump`, `mallocshim compare`).
pub fn exit(e: &clap::Error, prefix: &str) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        _ => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("bad arguments").trim_start_matches("error: ");
            eprintln!("{prefix}: {first} (see {prefix} --help)");
            ExitCode::from(2)
        }
    }
}
