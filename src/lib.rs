//! # mallocshim
//!
//! `libmallocshim.so`, loaded with `LD_PRELOAD` into mysqld (or any program), interposes the
//! malloc family and routes every call to the backend chosen by `MALLOCSHIM_BACKEND`: glibc,
//! jemalloc or tcmalloc, with glibc's C semantics whatever the backend, and counts calls per
//! entry point and thread.
//!
//! Layout (a thin front over a core, after heaptrack and snmalloc):
//! - [`exports`]: the exported C symbols, one-line forwards;
//! - [`route`]: the entry table, one per backend and profiling setting;
//! - [`front`]: the hot path's recording;
//! - [`csem`]: glibc's C semantics shared by every backend;
//! - [`backend`]: glibc, jemalloc, tcmalloc and the bootstrap pseudo-backend;
//! - [`bootstrap`]: the static pool for allocations made while a backend loads;
//! - [`init`], [`config`]: lazy start-up and the option table;
//! - [`tls`], [`slots`]: per-thread state and per-thread counters;
//! - [`introspect`]: mallinfo and friends for the active backend;
//! - [`worker`], [`trim`], [`memlog`], [`dump`], [`textfile`]: the shim's thread and its jobs;
//! - [`capi`]: the shim's own C API (`shim/include/mallocshim.h`).

pub mod backend;
pub mod bootstrap;
pub mod capi;
pub mod classes;
pub mod clock;
pub mod config;
pub mod csem;
pub mod diag;
pub mod dump;
pub mod exports;
pub mod front;
pub mod init;
pub mod introspect;
pub mod memlog;
pub mod report;
pub mod route;
pub mod signals;
pub mod slots;
pub mod textfile;
pub mod tls;
pub mod trim;
pub mod worker;

/// Runs when the library is loaded (`.init_array`): initialises the shim if no allocation has
/// done so yet, so a program that never allocates still gets its configuration checked.
extern "C" fn at_load() {
    if init::ensure() {
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
    if config::get().dump_at_exit {
        let _ = dump::write_all();
    }
    // A dump requested by signal that no thread has written yet (single-threaded program).
    if worker::dump_pending() {
        worker::write_pending();
    }
    textfile::remove_at_exit();
    if config::get().verbose > 0 {
        capi::print_summary();
    }
}

#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;
