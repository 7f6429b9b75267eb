//! A throwaway MariaDB server (Debian's mariadb-server 10.11) under mallocshim or any allocator
//! preloaded directly, driven by sysbench: the one harness of the tests, the benches and the main
//! job. It owns the temporary datadir, the server's start (private socket and loopback port, a
//! chosen environment), readiness, SQL through the `mariadb` client, sysbench runs and their
//! figures, the shim's dumps on SIGUSR1, /proc readings and the clean shutdown. It never leaves a
//! server running: dropping a [`Server`] kills it, dropping an [`Instance`] removes its directory.
//! A missing program is an [`Error::MissingTool`], never a skip.
//!
//! ```no_run
//! use mallocshim_mariadb::{Instance, Launch, Options, Sysbench};
//! let inst = Instance::create(Options::default())?;
//! let srv = inst.start(&Launch::shim("/abs/libmallocshim.so", "jemalloc").var("MALLOCSHIM_VERBOSE", "1"))?;
//! srv.sysbench_prepare()?;
//! let report = srv.sysbench(&Sysbench::new("oltp_read_only", 4).time(10))?;
//! let stopped = srv.shutdown()?;
//! println!("qps {:?}, errors {}, mariadbd exit {}", report.qps, report.errors, stopped.status);
//! # Ok::<(), mallocshim_mariadb::Error>(())
//! ```

mod child;
mod cleanup;
mod dump;
mod errlog;
mod error;
mod instance;
mod launch;
mod lock;
mod server;
mod sysbench;
mod tools;

pub mod callgrind;
#[cfg(feature = "fulltext")]
pub mod fulltext;
pub mod profilers;
pub mod query_instr;

/// /proc readings of a running server (the `mallocshim-proc` crate, shared with the command).
pub use mallocshim_proc as procfs;

pub use cleanup::on_interrupt;
pub use dump::{dumps, json_dumps, newest_json_dump, read_dump, DumpSummary, DumpWaiter};
pub use errlog::{ErrorLog, Summary, SHIM_COUNTS};
pub use error::{Error, Result};
pub use instance::{Instance, Options};
pub use launch::{clean_env, Launch};
pub use lock::take_unless as take_lock_unless;
pub use server::{Server, Stopped};
pub use sysbench::{Sysbench, SysbenchReport};
pub use tools::{is_exec, require, require_file, Tools};

/// The backends the shim routes to, in the order the tests and the README use, and the library
/// of each one's direct-preload baseline: the workspace's backend table
/// (`mallocshim_format::backends`).
pub use mallocshim_format::backends::{direct_lib, BACKENDS};

/// Debian's jemalloc (libjemalloc2): the jemalloc direct baseline and jeprof's preload.
pub const JEMALLOC_LIB: &str = mallocshim_format::backends::lib("jemalloc");
