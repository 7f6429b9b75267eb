//! The runner's command line (clap) and its checks, all done before anything starts: backends,
//! thread counts, paths (shim, mysqld, custom workloads, allocator libraries), tools, the output
//! directory. Every error is one line.

use super::config;
pub use super::config::Config;
use std::path::{Path, PathBuf};

pub use mallocshim_format::BACKENDS;

/// A backend's Debian library and package, from the backend table: what "<backend>-direct"
/// preloads, and what the shim dlopen()s for a dlopen()ed backend (tcmalloc, mimalloc). None
/// for glibc.
pub fn backend_lib(backend: &str) -> Option<(&'static str, &'static str)> {
    let b = mallocshim_format::backends::by_name(backend)?;
    Some((b.lib_path()?, b.package?))
}

/// sysbench's bundled lua workloads that run on the oltp_* dataset.
pub const BUILTIN: [&str; 10] = [
    "oltp_read_only",
    "oltp_point_select",
    "oltp_read_write",
    "oltp_write_only",
    "oltp_update_index",
    "oltp_update_non_index",
    "oltp_insert",
    "oltp_delete",
    "select_random_points",
    "select_random_ranges",
];

#[derive(clap::Args, Debug)]
#[command(
    about = "Compare mysqld/mariadbd throughput, CPU and memory across allocators, under the mallocshim",
    long_about = "Starts a throwaway mariadbd (or the mysqld given with --mysqld) under libmallocshim.so once per \
backend and round, runs sysbench workloads at each thread count, and writes into --out: cells.csv (one line per \
cell, written as each cell ends), report.md (first the answer: one line per backend against glibc, per \
--variant against its backend, and with --direct per backend shim against direct, giving qps, CPU per query \
and peak RSS as a change with its 95% interval over paired rounds, or in words when it cannot be told from noise and about how many rounds would \
tell; then medians over rounds and every ratio with its interval, marked ~ when it includes 1, RSS, \
malloc/free latency per size class), qps_<workload>.png, rss.png, latency.png, the memlog CSVs (memlog/) and \
the shim's JSON dump after each cell (dumps/). The answer is printed on stderr at the end too.\n\n\
The sysbench dataset is prepared once (database sbtest) and reused by every server start. Backends are \
alternated round by round (the order rotates each round) so slow drift of the machine spreads over all of them. \
Ctrl-C (or SIGTERM) stops sysbench and every server this run started, keeps the finished cells in cells.csv \
and writes the report from them; the exit status is then 130.\n\n\
Exit status: 0 when every cell ran, 1 when the run failed, 2 for bad arguments (one line, nothing started), \
130 when interrupted.",
    after_help = "Examples:\n  mallocshim compare --out /tmp/cmp\n  \
mallocshim compare --backends glibc,jemalloc --workloads oltp_point_select --threads 1,8,64 --time 60 --rounds 3 --direct --out cmp\n  \
mallocshim compare --backends glibc,jemalloc --threads 64 --time 30 --rounds auto --target-pct 1 --budget-s 3600 --direct --out cmp\n  \
mallocshim compare --backends glibc --variant threshold:MALLOCSHIM_GLIBC_TRIM_THRESHOLD=1M --rounds auto --out cmp\n  \
mallocshim compare --mysqld /opt/mysql/bin/mysqld --mysqld-opt=--innodb-buffer-pool-size=32G --workloads my.sql --out cmp"
)]
pub struct Args {
    /// Output directory (created; must be empty or absent).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Backends to compare, comma-separated: glibc, jemalloc, tcmalloc, mimalloc.
    #[arg(long, value_delimiter = ',', default_value = "glibc,jemalloc,tcmalloc", value_name = "B,...")]
    pub backends: Vec<String>,

    /// Workloads, comma-separated: sysbench built-in names (oltp_read_only, oltp_point_select,
    /// oltp_read_write, ...), a path to a sysbench .lua script, or a path to a .sql file (its
    /// statements, separated by ';' at line ends, are one transaction, repeated by each thread).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "oltp_read_only,oltp_point_select",
        value_name = "W,..."
    )]
    pub workloads: Vec<String>,

    /// sysbench thread counts (connections), comma-separated, each at least 1.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64", value_name = "N,...",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub threads: Vec<u32>,

    /// Seconds per cell (one workload at one thread count on one backend).
    #[arg(long, default_value_t = 60, value_name = "S", value_parser = clap::value_parser!(u32).range(1..))]
    pub time: u32,

    /// Seconds of the same workload run before each cell and not measured (0: none).
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub warmup: u32,

    /// Rounds: each round runs every backend once (in rotated order), every workload and thread
    /// count. `auto`: at least 3 rounds, then more until every headline interval (qps, CPU/query and
    /// peak RSS of each comparison, 95%) is within ±--target-pct, or --max-rounds, or --budget-s.
    #[arg(long, default_value = "3", value_name = "N|auto", value_parser = super::rounds::parse_rounds)]
    pub rounds: super::rounds::Rounds,

    /// With --rounds auto: the half-width, in percent, that every headline interval must reach;
    /// also what "same" means in the answer (an interval around no change within ±this).
    #[arg(long, default_value_t = 1.0, value_name = "PCT", value_parser = super::rounds::parse_pct)]
    pub target_pct: f64,

    /// With --rounds auto: the most rounds it runs.
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = clap::value_parser!(u32).range(3..))]
    pub max_rounds: u32,

    /// A time budget in seconds for the whole run: no round starts that would end after it, at
    /// the mean duration of the rounds so far (the first round always runs).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_s: Option<u64>,

    /// Also run every backend preloaded directly, without the shim (glibc: no preload; jemalloc:
    /// libjemalloc.so.2; tcmalloc: libtcmalloc_minimal.so.4; mimalloc: libmimalloc.so.2), as
    /// configurations "<backend>-direct",
    /// so the shim's own overhead is measured in the same run.
    #[arg(long)]
    pub direct: bool,

    /// The shim library (default: $MALLOCSHIM_LIB, else the installed
    /// /usr/lib/x86_64-linux-gnu/libmallocshim.so, else libmallocshim.so next to this program,
    /// i.e. target/release/ in a checkout).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,

    /// The server binary: a mariadbd or an Oracle MySQL mysqld (default: mariadbd from PATH).
    /// A MariaDB datadir is made with mariadb-install-db, a MySQL one with mysqld --initialize-insecure.
    #[arg(long, value_name = "PATH")]
    pub mysqld: Option<PathBuf>,

    /// An extra option for the server, repeatable (e.g. --mysqld-opt=--innodb-buffer-pool-size=8G);
    /// given after the runner's own, so it overrides them.
    #[arg(long = "mysqld-opt", value_name = "OPT", allow_hyphen_values = true)]
    pub mysqld_opts: Vec<String>,

    /// innodb_buffer_pool_size of the throwaway server.
    #[arg(long, default_value = "256M", value_name = "SIZE")]
    pub buffer_pool: String,

    /// sysbench --tables of the dataset.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub tables: u32,

    /// sysbench --table-size (rows per table) of the dataset.
    #[arg(long, default_value_t = 10000, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub table_size: u32,

    /// An SQL file run once on database sbtest after the sysbench dataset is prepared (tables a
    /// custom workload needs).
    #[arg(long, value_name = "FILE")]
    pub prepare_sql: Option<PathBuf>,

    /// An extra sysbench option for every run, repeatable (e.g. --sysbench-opt=--range_selects=off).
    #[arg(long = "sysbench-opt", value_name = "OPT", allow_hyphen_values = true)]
    pub sysbench_opts: Vec<String>,

    /// Memlog interval (RSS over time), in milliseconds: MALLOCSHIM_MEMLOG_INTERVAL_MS for the
    /// shim, and the runner's own /proc/<pid>/statm sampling for direct-preload servers.
    #[arg(long, default_value_t = 1000, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..))]
    pub memlog_interval_ms: u64,

    /// Extra environment for the server, repeatable, e.g. --env MALLOCSHIM_SAMPLE=16 or
    /// --env _RJEM_MALLOC_CONF=background_thread:true.
    #[arg(long = "env", value_name = "K=V")]
    pub envs: Vec<String>,

    /// A variant of every backend under the shim with an extra environment variable, repeatable:
    /// NAME:K=V runs each backend again as "<backend>+NAME" with K=V (after --env), and the answer
    /// gives each variant against its backend, in the same paired rounds: what a setting or a
    /// remedy costs (e.g. --variant threshold:MALLOCSHIM_GLIBC_TRIM_THRESHOLD=1M, --variant
    /// arenas:MALLOC_ARENA_MAX=2). The same NAME again adds a variable to that variant.
    #[arg(long = "variant", value_name = "NAME:K=V")]
    pub variants: Vec<String>,

    /// A variant set at run time, repeatable: NAME:K=V runs each backend's cells again as
    /// "<backend>+NAME" on the same server, each beside the backend's own cell, with the run-time
    /// option K set to V (`mallocshim set PID K=V`) and set back after: a pair without the
    /// server-to-server spread, e.g. what heap profiles cost (--live heap:MALLOCSHIM_PROF_SAMPLE_BYTES=0).
    /// K must be settable at run time (`mallocshim get PID`); no peak RSS is compared.
    #[arg(long = "live", value_name = "NAME:K=V")]
    pub lives: Vec<String>,

    /// Where the throwaway datadir and socket go (default: a new /tmp/mallocshim-compare.XXXXXX;
    /// keep it short: a unix socket path must stay under 108 bytes).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,

    /// Keep the datadir (work directory) at the end instead of removing it.
    #[arg(long)]
    pub keep_workdir: bool,
}

/// A workload as it will run.
#[derive(Clone, Debug)]
pub enum Workload {
    /// A sysbench built-in name.
    Builtin(String),
    /// A lua script given by path.
    Lua(PathBuf),
    /// An SQL file given by path (run through a generated lua script).
    Sql(PathBuf),
}

impl Workload {
    /// The short name used in file names, the CSV and the report.
    pub fn name(&self) -> String {
        match self {
            Workload::Builtin(s) => s.clone(),
            Workload::Lua(p) | Workload::Sql(p) => {
                p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
            }
        }
    }
}

/// The checked run settings.
pub struct Plan {
    pub args: Args,
    pub shim: PathBuf,
    pub mysqld: PathBuf,
    pub configs: Vec<Config>,
    pub workloads: Vec<Workload>,
    pub envs: Vec<(String, String)>,
}

impl Plan {
    /// The backends in the order given (each once).
    pub fn backends(&self) -> Vec<String> {
        self.configs.iter().filter(|c| !c.direct && c.variant.is_none()).map(|c| c.backend.clone()).collect()
    }

    /// The `--variant` names, in order (from the configurations of the first backend).
    pub fn variant_names(&self) -> Vec<String> {
        let first = self.configs.first().map(|c| c.backend.as_str());
        self.configs
            .iter()
            .filter(|c| Some(c.backend.as_str()) == first)
            .filter_map(|c| c.variant.as_ref().map(|v| v.name.clone()))
            .collect()
    }
}

use mallocshim_mariadb::{is_exec, require};

/// Finds the first program of `names` in PATH.
fn find_tool(names: &[&str]) -> Result<PathBuf, String> {
    names.iter().find_map(|n| require(n).ok()).ok_or_else(|| {
        format!("none of the programs {} is in PATH (run scripts/install-deps.sh)", names.join(", "))
    })
}

/// Checks everything; returns the plan or a one-line error. Starts nothing, creates nothing.
pub fn check(args: Args) -> Result<Plan, String> {
    let backends = check_backends(&args)?;
    let mut threads = args.threads.clone();
    threads.dedup();
    if threads.is_empty() {
        return Err("--threads is empty".into());
    }
    let shim = check_shim(&args)?;
    let mysqld = check_mysqld(&args)?;
    let workloads = check_workloads(&args)?;
    if let Some(p) = &args.prepare_sql {
        if !p.is_file() {
            return Err(format!("--prepare-sql {}: no such file", p.display()));
        }
    }
    let envs = check_envs(&args)?;
    // tools
    find_tool(&["sysbench"])?;
    // output
    if args.out.exists() {
        let empty = std::fs::read_dir(&args.out).map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty {
            return Err(format!("--out {}: exists and is not an empty directory", args.out.display()));
        }
    }
    let mut variants = config::parse(&args.variants, false)?;
    let lives = config::parse(&args.lives, true)?;
    if let Some(v) = lives.iter().find(|l| variants.iter().any(|v| v.name == l.name)) {
        return Err(format!("--live {}: a --variant has that name", v.name));
    }
    variants.extend(lives);
    let mut configs: Vec<Config> = backends.iter().map(|b| Config::plain(b, false)).collect();
    for v in &variants {
        configs
            .extend(backends.iter().map(|b| Config { variant: Some(v.clone()), ..Config::plain(b, false) }));
    }
    if args.direct {
        configs.extend(backends.iter().map(|b| Config::plain(b, true)));
    }
    let mut args = args;
    args.threads = threads;
    Ok(Plan { args, shim, mysqld, configs, workloads, envs })
}

/// --backends: known, each once, not empty, and their libraries installed where needed.
fn check_backends(args: &Args) -> Result<Vec<String>, String> {
    let mut backends: Vec<String> = Vec::new();
    for b in &args.backends {
        let b = b.trim();
        if !BACKENDS.contains(&b) {
            return Err(format!("unknown backend {b:?} in --backends (known: {})", BACKENDS.join(", ")));
        }
        if backends.iter().any(|x| x == b) {
            return Err(format!("backend {b:?} given twice in --backends"));
        }
        backends.push(b.to_string());
    }
    if backends.is_empty() {
        return Err("--backends is empty".into());
    }
    for b in &backends {
        // The shim dlopen()s the libraries of the table's dlopen()ed backends (jemalloc is linked
        // in); --direct preloads them all.
        if let Some((lib, pkg)) = backend_lib(b) {
            let dlopen = mallocshim_format::backends::by_name(b).is_some_and(|r| r.dlopen);
            if (args.direct || dlopen) && !Path::new(lib).exists() {
                let why = if !dlopen { &format!("--direct with {b}") } else { &format!("backend {b}") };
                return Err(format!("{why} needs {lib} (apt-get install {pkg})"));
            }
        }
    }
    Ok(backends)
}

/// --shim, else the installed or built shim; canonical.
fn check_shim(args: &Args) -> Result<PathBuf, String> {
    let shim = match &args.shim {
        Some(p) if !p.is_file() => {
            return Err(format!(
                "shim library {} not found (build it with `cargo build --release`, or give --shim PATH)",
                p.display()
            ))
        }
        Some(p) => p.clone(),
        None => crate::shim_lib::find()?,
    };
    shim.canonicalize().map_err(|e| format!("{}: {e}", shim.display()))
}

/// --mysqld (an executable file), else mariadbd from PATH.
fn check_mysqld(args: &Args) -> Result<PathBuf, String> {
    match &args.mysqld {
        Some(p) => {
            if !p.exists() {
                return Err(format!("--mysqld {}: no such file", p.display()));
            }
            if !is_exec(p) {
                return Err(format!("--mysqld {}: not an executable file", p.display()));
            }
            p.canonicalize().map_err(|e| format!("{}: {e}", p.display()))
        }
        None => find_tool(&["mariadbd"])
            .map_err(|_| "mariadbd is not in PATH: install mariadb-server or give --mysqld PATH".to_string()),
    }
}

/// --workloads: sysbench built-ins or .lua/.sql files, each name once, not empty.
fn check_workloads(args: &Args) -> Result<Vec<Workload>, String> {
    let mut workloads = Vec::new();
    for w in &args.workloads {
        let w = w.trim();
        let p = Path::new(w);
        let wl = if w.ends_with(".lua") || w.ends_with(".sql") || w.contains('/') {
            if !p.is_file() {
                return Err(format!("workload {w}: no such file"));
            }
            let abs = p.canonicalize().map_err(|e| format!("{w}: {e}"))?;
            if w.ends_with(".sql") {
                Workload::Sql(abs)
            } else {
                Workload::Lua(abs)
            }
        } else if BUILTIN.contains(&w) {
            Workload::Builtin(w.to_string())
        } else {
            return Err(format!(
                "unknown workload {w:?}: give a sysbench built-in ({}) or a path to a .lua or .sql file",
                BUILTIN.join(", ")
            ));
        };
        if workloads.iter().any(|x: &Workload| x.name() == wl.name()) {
            return Err(format!("workload name {:?} given twice", wl.name()));
        }
        workloads.push(wl);
    }
    if workloads.is_empty() {
        return Err("--workloads is empty".into());
    }
    Ok(workloads)
}

/// --env NAME=VALUE pairs (not the two the runner sets).
fn check_envs(args: &Args) -> Result<Vec<(String, String)>, String> {
    args.envs
        .iter()
        .map(|e| {
            config::var(e).ok_or_else(|| {
                format!("--env {e:?}: want NAME=VALUE (not LD_PRELOAD or MALLOCSHIM_BACKEND, which the runner sets)")
            })
        })
        .collect()
}
