//! `mallocshim heap`: what a heap profile (`mallocshim.<pid>.<seq>.pb.gz`, gzip'ed
//! profile.proto read through the format crate's `pprof` schema) says, named after the fact:
//! call sites past the allocation wrappers, cumulative per function, callers' tree, growth
//! between two profiles (of one process or two runs of one binary: frames compare by module and
//! file offset), an SVG flame graph. Drops at the profile's bounds are warned in every output.
//! Reads files and writes the flame graph and the symbolized copy (`symbolized`); symbols in
//! `symbolize`, views in `views`, the per-thread and per-connection table (`--by`) in `by`.

pub mod by;
mod flame;
mod jeheap;
mod missing;
mod stacks;
mod symbolize;
mod symbolized;
mod views;
mod wrappers;

use mallocshim_format::pprof::Profile;
use stacks::Stacks;
use std::path::PathBuf;
use symbolize::Symbolizer;
use wrappers::Wrappers;

/// The sample types of a mallocshim (and Go) heap profile.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
#[allow(clippy::enum_variant_names)]
pub enum Index {
    #[value(name = "inuse_space")]
    InuseSpace,
    #[value(name = "alloc_space")]
    AllocSpace,
    #[value(name = "inuse_objects")]
    InuseObjects,
    #[value(name = "alloc_objects")]
    AllocObjects,
}

impl Index {
    fn name(self) -> &'static str {
        match self {
            Index::InuseSpace => "inuse_space",
            Index::AllocSpace => "alloc_space",
            Index::InuseObjects => "inuse_objects",
            Index::AllocObjects => "alloc_objects",
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(
    about = "Top call sites of a heap profile (.pb.gz), their callers, growth, flame graph",
    long_about = "Print the top call sites of a mallocshim heap profile (gzip'ed profile.proto, \
                  MALLOCSHIM_DUMP_FORMATS=pprof) by inuse space and by alloc space, each with \
                  bytes, objects and % of the profile's total. A call site is a sample's first \
                  frame that is not an allocation wrapper (malloc, operator new, my_malloc, \
                  alloc_root, mem_heap_*, ut_allocator...; the list: docs/heap-profiles.md; more \
                  with --wrapper). Frames are named after the fact from a debug file found by \
                  build ID under --debug-dir (DIR/.build-id/xx/rest.debug), else the binary's \
                  symbol table, else the profile's own names, else MODULE+0xFILE_OFFSET; C++ and \
                  Rust names are demangled. When the program has no debug symbols — Debian's mariadbd is stripped — a note says how many of \
                  its frames stayed unnamed and how to get them (its -dbgsym package from \
                  Debian's debug archive, or --debug-dir). Figures are the profile's unbiased estimates from \
                  sampling (MALLOCSHIM_PROF_SAMPLE_BYTES); samples the shim dropped at its bounds \
                  are warned about.\n\n\
                  With BASE (an earlier profile of the same process, or a profile of another run \
                  of the same binary), prints the growth from BASE to PROFILE per call site.\n\n\
                  With --by thread, prints instead inuse_space and alloc_space per allocating \
                  thread (the samples' tid label, named by the thread's name at dump time, \
                  \"exited\" when it was gone), largest first. A block is charged to the thread \
                  that allocated it until it is freed, by whichever thread: a block allocated by \
                  A and freed by B leaves A's figure and never counts in B's. Each figure has its \
                  ±: one standard error of the sampling, sqrt(S x R) for a sampled total of S \
                  bytes at the profile's mean gap of R bytes (Poisson): the true figure lies \
                  within ±1 about 2 times in 3, within ±3 almost always. With --by connection \
                  --mysql-socket PATH, each thread is named by the server's connection on it, \
                  read from MariaDB's information_schema.PROCESSLIST (its TID column, MariaDB \
                  10.5+) through the mariadb client when this command runs (so run it while the \
                  server still has the profile's connections): connection id, user@host, db, \
                  command, MEMORY_USED (what the server counts itself) and the first 40 \
                  characters of the statement; every connection is listed, those whose thread \
                  holds no sample with 0; threads with no connection (InnoDB's, the \
                  handle_manager...) keep their thread name. Under thread_handling=\
                  pool-of-threads a worker thread runs many connections: a block is charged to \
                  the worker that allocated it, so the figures are per worker, not per \
                  connection, and a worker's row lists every connection that last ran on it.\n\n\
                  With --symbolized OUT.pb.gz, also writes a copy of PROFILE with the names \
                  written in (demangled function names on every location named as above; a \
                  mapping marked has_functions only when all its locations are named; samples, \
                  mappings and build IDs unchanged), so that go tool pprof (which cannot read \
                  debug files by build ID), Parca or any pprof reader shows the names; the \
                  normal output is printed too, then the line \"symbolized profile (N of M \
                  locations named) written to OUT.pb.gz\".\n\n\
                  Exit status: 0 on success, 2 on any error (one line, prefixed \"mallocshim heap:\").",
    after_help = "Examples:\n  mallocshim heap mallocshim.1234.3.pb.gz --top 20\n  \
                  mallocshim heap --cum --tree mallocshim.1234.3.pb.gz\n  \
                  mallocshim heap --flame heap.svg mallocshim.1234.3.pb.gz\n  \
                  mallocshim heap --debug-dir DIR --symbolized named.pb.gz mallocshim.1234.3.pb.gz \
                  && go tool pprof -top named.pb.gz\n  \
                  mallocshim heap mallocshim.1234.9.pb.gz mallocshim.1234.3.pb.gz\n  \
                  mallocshim heap --by thread mallocshim.1234.3.pb.gz\n  \
                  mallocshim heap --by connection --mysql-socket /run/mysqld/mysqld.sock \
                  mallocshim.1234.3.pb.gz"
)]
pub struct Args {
    /// The heap profile (or a jemalloc `prof:true` .heap file).
    #[arg(value_name = "PROFILE.pb.gz")]
    pub profile: PathBuf,
    /// An earlier profile of the same process or binary: print the growth from it to PROFILE.
    #[arg(value_name = "BASE.pb.gz")]
    pub base: Option<PathBuf>,
    /// Rows per table (call sites in the tree).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Rank by this sample type only (default: inuse_space and alloc_space tables; with BASE,
    /// --tree or --flame, inuse_space).
    #[arg(long, value_enum, value_name = "INDEX")]
    pub sample_index: Option<Index>,
    /// Also a table per function, cumulative: what each function and its callees hold.
    #[arg(long)]
    pub cum: bool,
    /// Also the top call sites with their callers, as a tree (branches under 1% left out).
    #[arg(long)]
    pub tree: bool,
    /// Also a table of the direct callers of functions matching NAME (glob; repeatable: the
    /// innermost match per sample), % of the samples through them (who calls my_malloc?).
    #[arg(long, value_name = "NAME")]
    pub callers_of: Vec<String>,
    /// Caller levels in --tree.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub depth: usize,
    /// Treat functions matching PATTERN (glob, `*` any run) as allocation wrappers too.
    #[arg(long, value_name = "PATTERN")]
    pub wrapper: Vec<String>,
    /// Use only the --wrapper patterns, not the built-in list (call site = innermost frame
    /// with no --wrapper).
    #[arg(long)]
    pub no_builtin_wrappers: bool,
    /// Where debug files are found by build ID (debuginfod layout, DIR/.build-id/xx/rest.debug);
    /// repeatable.
    #[arg(long, value_name = "DIR", default_value = "/usr/lib/debug")]
    pub debug_dir: Vec<PathBuf>,
    /// Write an SVG flame graph of the sample index (default inuse_space) to OUT.svg.
    #[arg(long, value_name = "OUT.svg")]
    pub flame: Option<PathBuf>,
    /// Write a copy of PROFILE with the function names written in (gzip'ed profile.proto) to
    /// OUT.pb.gz, for go tool pprof, Parca or any pprof reader.
    #[arg(long, value_name = "OUT.pb.gz")]
    pub symbolized: Option<PathBuf>,
    /// Instead of call sites: inuse_space and alloc_space per allocating thread (`thread`) or
    /// per connection on it (`connection`, needs --mysql-socket), largest first (by alloc_space
    /// with --sample-index alloc_*), each ± one standard error of the sampling, sqrt(S x R).
    #[arg(long, value_enum, value_name = "WHAT", conflicts_with_all = ["base", "flame", "symbolized"])]
    pub by: Option<by::By>,
    /// With --by connection: the server's connection options; its information_schema.PROCESSLIST
    /// (TID column, MariaDB 10.5+) is read through the client when this command runs.
    #[command(flatten)]
    pub conn: crate::pfs::ConnArgs,
}

pub fn bytes(v: i64) -> String {
    let a = v.unsigned_abs() as f64;
    let sign = if v < 0 { "-" } else { "" };
    if a >= (1u64 << 30) as f64 {
        format!("{sign}{:.2} GiB", a / (1u64 << 30) as f64)
    } else if a >= (1u64 << 20) as f64 {
        format!("{sign}{:.2} MiB", a / (1u64 << 20) as f64)
    } else if a >= 1024.0 {
        format!("{sign}{:.1} KiB", a / 1024.0)
    } else {
        format!("{v} B")
    }
}

/// Reads a heap profile (errors name the file): the shim's (or any pprof heap profile), or
/// jemalloc's own `heap_v2` text file.
pub fn read(path: &std::path::Path) -> Result<Profile, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if jeheap::is_jeheap(&bytes) {
        return jeheap::parse(&String::from_utf8_lossy(&bytes))
            .map_err(|e| format!("{}: {e}", path.display()));
    }
    Profile::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The profile's samples, named through `sym`.
fn named(p: &Profile, sym: &mut Symbolizer) -> Stacks {
    stacks::stacks(p, sym)
}

/// Growth rows between two profiles with the default wrappers and debug directory (for
/// `diagnose`): (call site, base value, current value), top growers first.
pub fn growth_rows(base: &Profile, cur: &Profile, index: &str) -> Result<Vec<(String, i64, i64)>, String> {
    let mut sym = Symbolizer::new(vec![PathBuf::from("/usr/lib/debug")]);
    let (b, c) = (named(base, &mut sym), named(cur, &mut sym));
    views::growth_rows(&b, &c, &Wrappers::new(true, &[]), index)
}

fn warn(o: &mut String, what: &str, st: &Stacks) {
    for w in &st.warnings {
        *o += &format!("{what}: {w}\n");
    }
}

/// `--by thread|connection`: the per-thread table (no symbols needed).
fn run_by(args: &Args, p: &Profile, what: by::By) -> Result<String, String> {
    let shares = by::shares(p)?;
    let mut o = format!("heap profile {}\n", args.profile.display());
    for w in stacks::warnings(p) {
        o += &format!("profile: {w}\n");
    }
    let by_alloc = matches!(args.sample_index, Some(Index::AllocSpace | Index::AllocObjects));
    let rows = match what {
        by::By::Thread => shares.into_iter().map(|s| (s.clone(), s.name)).collect(),
        by::By::Connection => {
            let labelled = by::labelled_connections(p);
            let conns = match crate::processlist::query(&args.conn)? {
                Some(c) => c,
                None if !labelled.is_empty() => labelled,
                None => {
                    return Err("--by connection needs --mysql-socket PATH (the server's PROCESSLIST joins \
                                threads to connections), or a profile labelled by `mallocshim dump PID \
                                --mysql-socket PATH`"
                        .into())
                }
            };
            by::with_connections(shares, &conns)
        }
    };
    let name = match what {
        by::By::Thread => "thread",
        by::By::Connection => "connection (or thread)",
    };
    o += "\n";
    o += &by::table(rows, p.period, by_alloc, args.top, name);
    Ok(o)
}

pub fn run(args: &Args) -> Result<String, String> {
    let p = read(&args.profile)?;
    if let Some(what) = args.by {
        return run_by(args, &p, what);
    }
    let mut sym = Symbolizer::new(args.debug_dir.clone());
    let w = Wrappers::new(!args.no_builtin_wrappers, &args.wrapper);
    let cur = named(&p, &mut sym);
    let mut o = format!("heap profile {}\n", args.profile.display());
    warn(&mut o, "profile", &cur);
    let program = p.mapping.first().map(|m| p.str(m.filename).to_string());
    o += &missing::notes(&sym.unsymbolized(program.as_deref()), &args.debug_dir);
    let one = args.sample_index.unwrap_or(Index::InuseSpace).name();
    if let Some(base_path) = &args.base {
        let base = named(&read(base_path)?, &mut sym);
        o += &format!("base {}\n", base_path.display());
        warn(&mut o, "base", &base);
        o += "\n";
        o += &views::growth(&base, &cur, &w, one, args.top)?;
    } else {
        let indexes = match args.sample_index {
            Some(i) => vec![i.name()],
            None => vec!["inuse_space", "alloc_space"],
        };
        for index in &indexes {
            o += "\n";
            let label = views::labels(&cur, &w, cur.col(index)?);
            o += &views::table(
                &cur,
                &views::sums(&cur, &w, false),
                &label,
                index,
                args.top,
                "call site",
                false,
            )?;
        }
        if args.cum {
            for index in &indexes {
                o += "\n";
                o += &views::table(
                    &cur,
                    &views::sums(&cur, &w, true),
                    &Default::default(),
                    index,
                    args.top,
                    "function (cum)",
                    false,
                )?;
            }
        }
        if !args.callers_of.is_empty() {
            let by = views::callers_of(&cur, &args.callers_of);
            o += &format!("\ncallers of {}:\n", args.callers_of.join(", "));
            o += &views::table(&cur, &by, &Default::default(), one, args.top, "caller", true)?;
        }
        if args.tree {
            o += "\n";
            o += &views::tree(&cur, &w, one, args.top, args.depth)?;
        }
    }
    if let Some(out) = &args.flame {
        flame::write(&cur, one, &args.profile, out)?;
        o += &format!("\nflame graph ({one}) written to {}\n", out.display());
    }
    if let Some(out) = &args.symbolized {
        o += "\n";
        o += &symbolized::write(&p, &mut sym, out)?;
    }
    for (module, d) in sym.debug_files() {
        let file = module.rsplit('/').next().unwrap_or(&module);
        o += &format!("debug symbols for {file}: {}\n", d.display());
    }
    Ok(o)
}
