//! `mallocshim`: the command for the files `libmallocshim.so` writes and for comparing
//! allocators under it. Subcommands: `report` (one dump), `diff` (two dumps), `dump` (signal one
//! process and wait for its dump), `trim`, `get`, `set` (the control channel), `top` (a live interval view), `heap` (heap profiles' top call
//! sites and growth), `plot` (memlog CSVs), `diagnose` (a memlog's verdict),
//! `compare` (the MariaDB comparison runner), `replay` (an allocation trace through each
//! backend; the hidden `replay-engine` is its per-backend process); the hidden `generate DIR` writes the man
//! pages and shell completions, the hidden `backends` prints the backend table for scripts. Every dump and memlog is read through the format crate
//! (`mallocshim_format`); the command never links the shim (a cdylib exporting malloc).

mod backends;
mod ctl_client;
mod diagnose;
mod diagnose_conns;
mod diff;
mod dump_cmd;
mod dump_label;
mod facts;
mod heap;
mod held;
mod interval;
mod man7;
mod pfs;
mod plot_cmd;
mod processlist;
mod procstate;
mod record_cmd;
mod remedy;
mod replay;
mod report;
mod table;
mod top;
mod users;
mod verdict;

use clap::{CommandFactory, Parser, Subcommand};
use mallocshim_cli::plot;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "mallocshim",
    version,
    about = "Read mallocshim's dumps and memlogs, and compare allocators under mysqld",
    long_about = "Read the files libmallocshim.so writes (JSON dumps, heap profiles, memlog CSVs) and compare \
                  allocators under mariadbd/mysqld. The shim library is found at $MALLOCSHIM_LIB, \
                  else /usr/lib/x86_64-linux-gnu/libmallocshim.so, else next to this program.\n\n\
                  Exit status: 0 on success, 2 on bad arguments or unreadable input (one line on \
                  stderr, prefixed \"mallocshim <command>:\"); compare documents its own.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    Report(report::Args),
    Diff(diff::Args),
    Heap(heap::Args),
    Dump(dump_cmd::Args),
    Trim(ctl_client::TrimArgs),
    Get(ctl_client::GetArgs),
    Set(ctl_client::SetArgs),
    Record(record_cmd::RecordArgs),
    Top(top::Args),
    Users(users::Args),
    Plot(plot_cmd::Args),
    Diagnose(diagnose::Args),
    /// Compare mysqld/mariadbd throughput, CPU and memory across allocators, under the mallocshim
    /// (runs mallocshim-compare, installed beside this program, with the same arguments; see
    /// mallocshim compare --help)
    #[command(disable_help_flag = true)]
    Compare {
        /// mallocshim-compare's arguments (--help lists them).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "ARGS")]
        args: Vec<std::ffi::OsString>,
    },
    Replay(replay::Args),
    /// One replay under the shim (started by `replay`).
    #[command(hide = true)]
    ReplayEngine(replay::EngineArgs),
    /// Write the man pages (man1/*.1) and shell completions (bash, zsh, fish) into DIR.
    /// The backend table, for scripts (hidden): name, package, library, dlopen, environment.
    #[command(hide = true)]
    Backends(backends::Args),
    #[command(hide = true)]
    Generate {
        /// Output directory (created).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// Prints `text` to stdout; a reader that stops early (`| head`) is not an error.
fn print(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(|e| format!("cannot write output: {e}")),
    }
}

/// Man pages for the command and each visible subcommand, and completions for three shells.
fn generate(dir: &Path) -> Result<String, String> {
    let err = |p: &Path, e: std::io::Error| format!("cannot write {}: {e}", p.display());
    let man = dir.join("man1");
    std::fs::create_dir_all(&man).map_err(|e| err(&man, e))?;
    let mut cmd = Cli::command();
    cmd.build();
    let mut pages = vec![(String::from("mallocshim"), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let name = format!("mallocshim-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    let mut written = Vec::new();
    for (name, c) in pages {
        let p = man.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(c).render(&mut buf).map_err(|e| err(&p, e))?;
        std::fs::write(&p, buf).map_err(|e| err(&p, e))?;
        written.push(p);
    }
    let man7 = dir.join("man7");
    std::fs::create_dir_all(&man7).map_err(|e| err(&man7, e))?;
    let p = man7.join("mallocshim.7");
    std::fs::write(&p, man7::page()).map_err(|e| err(&p, e))?;
    written.push(p);
    let comp = dir.join("completions");
    std::fs::create_dir_all(&comp).map_err(|e| err(&comp, e))?;
    for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
        let p = clap_complete::generate_to(shell, &mut Cli::command(), "mallocshim", &comp)
            .map_err(|e| err(&comp, e))?;
        written.push(p);
    }
    Ok(written.iter().map(|p| format!("wrote {}\n", p.display())).collect())
}

/// `mallocshim compare`: execs mallocshim-compare (beside this program, else from PATH) with the
/// same arguments, so the run keeps this pid (Ctrl-C and SIGTERM reach the runner) and its exit
/// status. Returns only when the exec fails (one line, exit 2).
fn compare(args: &[std::ffi::OsString]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let beside = std::env::current_exe().ok().map(|p| p.with_file_name("mallocshim-compare"));
    let bin = beside.filter(|p| p.is_file()).unwrap_or_else(|| PathBuf::from("mallocshim-compare"));
    let e = std::process::Command::new(&bin).args(args).exec();
    eprintln!(
        "mallocshim compare: cannot run {}: {e} (install it beside mallocshim; it is built by \
         cargo build --release -p mallocshim-compare)",
        bin.display()
    );
    ExitCode::from(2)
}

/// Prints a command's output, or its error line with the error's exit status.
fn finish(name: &str, res: Result<String, dump_cmd::Fail>) -> ExitCode {
    match res.and_then(|text| print(&text).map_err(|msg| dump_cmd::Fail { code: 2, msg })) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("mallocshim {name}: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // One line, prefixed with the subcommand given (if any).
            let sub = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
            let prefix = match sub {
                Some(s) if Cli::command().find_subcommand(&s).is_some() => format!("mallocshim {s}"),
                _ => "mallocshim".to_string(),
            };
            return mallocshim_cli::bad_args::exit(&e, &prefix);
        }
    };
    let (name, res) = match &cli.cmd {
        Cmd::Compare { args } => return compare(args),
        Cmd::Dump(a) => return finish("dump", dump_cmd::run(a)),
        Cmd::Top(a) => return finish("top", top::run(a)),
        Cmd::Users(a) => return finish("users", users::run(a)),
        Cmd::Trim(a) => return finish("trim", ctl_client::trim(a)),
        Cmd::Get(a) => return finish("get", ctl_client::get(a)),
        Cmd::Set(a) => return finish("set", ctl_client::set(a)),
        Cmd::Record(a) => return finish("record", record_cmd::run(a)),
        Cmd::Report(a) => ("report", report::run(a)),
        Cmd::Diff(a) => ("diff", diff::run(a)),
        Cmd::Heap(a) => ("heap", heap::run(a)),
        Cmd::Plot(a) => ("plot", plot_cmd::run(a)),
        Cmd::Diagnose(a) => ("diagnose", diagnose::run(a)),
        Cmd::Replay(a) => return finish("replay", replay::run(a)),
        Cmd::ReplayEngine(a) => ("replay", replay::engine(a)),
        Cmd::Generate { dir } => ("generate", generate(dir)),
        Cmd::Backends(a) => ("backends", backends::run(a)),
    };
    match res.and_then(|text| print(&text)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mallocshim {name}: {e}");
            ExitCode::from(2)
        }
    }
}
