//! # mallocshim
//!
//! `libmallocshim.so`, loaded with `LD_PRELOAD` into mysqld (or any program), interposes the
//! malloc family and routes every call to the backend chosen by `MALLOCSHIM_BACKEND`: glibc,
//! jemalloc, tcmalloc or mimalloc, with glibc's C semantics whatever the backend, and counts calls per
//! entry point and thread.
//!
//! Layout (a thin front over a core, after heaptrack and snmalloc):
//! - [`exports`]: the exported C symbols, one-line forwards;
//! - [`route`]: the entry table, one per backend and profiling setting;
//! - [`front`]: the hot path's recording;
//! - [`csem`]: glibc's C semantics shared by every backend;
//! - [`backend`]: glibc, jemalloc, tcmalloc, mimalloc and the bootstrap pseudo-backend;
//! - [`bootstrap`]: the static pool for allocations made while a backend loads;
//! - [`init`], [`config`]: lazy start-up and the option table;
//! - [`atfork`]: the backend's fork handlers, under glibc's fork rules;
//! - [`tls`], [`slots`]: per-thread state and per-thread counters;
//! - [`sys`]: errno and dlsym(RTLD_NEXT) helpers (a leaf);
//! - [`introspect`]: mallinfo and friends for the active backend;
//! - [`latency`], [`procfs`]: sampled latencies and /proc readings shared by reporting and trims;
//! - [`account`]: the RSS account (live, allocator free and metadata, non-heap);
//! - [`worker`], [`trim`], [`memlog`], [`dump`], [`textfile`]: the shim's thread and its jobs;
//! - [`heapprof`]: sampled heap profiles by call site (pprof output);
//! - [`reserve`]: the Rust global allocator of the .so (the backend, then a reserve: no abort
//!   when malloc returns NULL to the shim's own code);
//! - [`capi`]: the shim's own C API (`shim/include/mallocshim.h`).
//!
//! Dependencies run one way — `exports` → `route` → `front` → `csem` → `backend`; on the cold
//! path `worker` → `dump` → `report` → `latency`, `procfs`, `sys` — except where the mutual
//! reference is inherent: lazy start-up (`init` installs the dump signal's handler, and `signals`
//! initialises the shim when a signal call comes first); the hot path's tables (`route` names
//! every backend's functions, the bootstrap pool is itself a pseudo-backend with its own table,
//! and `csem` recognises its blocks); and a thread's slot, which holds `heapprof`'s sampler state
//! and is reached through `tls`.

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
    if init::ensure() {
        dump::check_dir();
        heapprof::main_started();
        // The start-up lines end here (kept to be written again if stderr is reopened).
        diag::startup_done();
        worker::start();
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
    // No dump starts from now on but the exit dump; one in progress elsewhere is finished first.
    dump::finish_at_exit();
    // A dump requested by signal that no thread has written yet (single-threaded program) is
    // answered by the exit dump.
    if config::get().dump_at_exit || dump::pending() {
        dump::clear_pending();
        let _ = dump::write_at_exit();
    }
    textfile::remove_at_exit();
    if config::get().verbose > 0 {
        capi::print_summary();
    }
}

#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;
