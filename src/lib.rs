//! # mallocshim
//!
//! `libmallocshim.so`, loaded with `LD_PRELOAD` into mysqld (or any program), interposes the
//! malloc family and routes every call to the backend chosen by `MALLOCSHIM_BACKEND`: glibc,
//! jemalloc, tcmalloc or mimalloc, with glibc's C semantics whatever the backend, and counts calls per
//! entry point and thread.
//!
//! Layout: five floors, each a folder, bottom up (docs/design.md, "Layout"):
//! - [`base`]: the leaves — errno, `environ` and mappings (`sys`), diagnostics (`diag`), the
//!   clock, the recording vocabulary (`classes`) and the shim's own heap (`own_heap`);
//! - [`backend`]: glibc, jemalloc, tcmalloc, mimalloc (one file and one row each) and the
//!   backend's fork handlers;
//! - [`hot`]: the hot path — the entry tables (`route`), the recording (`record`), glibc's C
//!   contract (`c_contract`), per-thread state (`tls`, `slots`), the bootstrap pool, the heap
//!   profile's recording side (`heapprof`), the dump-request mailbox, lazy start-up (`init`,
//!   `config`);
//! - [`cold`]: the shim's thread and its jobs — dumps, reports, pprof rendering, the RSS
//!   account, trims, memlog, textfile, /proc readings, introspection;
//! - [`boundary`]: every exported C symbol — the malloc family and friends (`exports`), C++'s
//!   new and delete (`cxx`), the dump signal's handler (`signals`), the C API (`capi`).
//!
//! Arrows run down (`tests/layering.rs` checks it: the hot path never imports the cold path,
//! a leaf imports nothing above it) except in two inherent knots: lazy start-up with the
//! bootstrap tables (the bootstrap table's functions start initialisation; `init` installs the
//! dump signal's handler, which initialises the shim when a signal call comes first, resolves
//! libstdc++'s operators and publishes an entry table naming every backend's functions; the
//! backend list still dispatches the bootstrap pool's figures), and a thread's slot, which holds
//! `heapprof`'s sampler state and is reached through `tls`. The cold path reaches the hot path
//! only through registered hooks where it must run from it (`hot::mailbox`'s dump writer).

// Every unsafe block states why it is sound (`// SAFETY:`), and clippy holds us to it.
#![deny(clippy::undocumented_unsafe_blocks)]

mod backend;
mod base;
mod boundary;
mod cold;
mod hot;

use base::{diag, own_heap};
use boundary::capi;
use cold::{dump, textfile, worker};
use hot::{config, heapprof, init, tls};

/// The shim's own allocations: the backend, and a reserve when it returns NULL (`reserve`).
#[global_allocator]
static SHIM_HEAP: own_heap::ShimHeap = own_heap::ShimHeap;

/// Runs when the library is loaded (`.init_array`): initialises the shim if no allocation has
/// done so yet, so a program that never allocates still gets its configuration checked.
extern "C" fn at_load() {
    // A dump asked for before the shim's thread exists is written by the next sampled call.
    hot::mailbox::register_writer(dump::write_pending);
    // mimalloc's allocated figure is the shim's own (it keeps none), without the backend importing the cold path.
    backend::mimalloc::register_live_source(cold::account::shim_live);
    if init::ensure() {
        dump::check_dir();
        heapprof::main_started();
        // The start-up lines end here (kept to be written again if stderr is reopened).
        diag::startup_done();
        worker::start();
        cold::record::start_from_env();
    }
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

/// Runs at unload/exit (`.fini_array`): the summary line under `MALLOCSHIM_VERBOSE=1`.
extern "C" fn at_exit() {
    if !init::ready() {
        return;
    }
    // Everything below, including dropping what the dump returns, goes unrecorded.
    let _g = tls::Reentry::enter();
    // A recording window still open ends here: every call recorded so far is written.
    cold::record::at_exit();
    // No dump starts from now on but the exit dump; one in progress elsewhere is finished first.
    dump::finish_at_exit();
    // A dump requested by signal that no thread has written yet (single-threaded program), or
    // one waiting for the end of the rate-limit interval, is answered by the exit dump.
    let requested = dump::pending() || dump::deferred();
    if config::get().dump_at_exit || requested {
        dump::clear_pending();
        let _ = dump::take_waiting();
        if requested {
            cold::dumpbound::started(cold::dumpbound::now_ms());
        }
        let _ = dump::write_at_exit();
    }
    textfile::remove_at_exit();
    cold::ctl::remove_at_exit();
    if config::get().verbose > 0 {
        capi::print_summary();
    }
}

#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;
