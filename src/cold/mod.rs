//! The cold path: the shim's own thread ([`worker`]), the interposed `pthread_create`
//! ([`thread_start`]) and everything it (or a C API caller)
//! runs off the allocator's calls — dumps ([`dump`]), their reports ([`report`]), the heap
//! profile's pprof rendering ([`pprof`], [`symbols`]), the RSS account ([`account`]), trims
//! ([`trim`]), the memory time series ([`memlog`]) and its in-memory ring ([`history`]), the
//! Prometheus textfile ([`textfile`]), /proc readings ([`procfs`]), the allocation trace's drain
//! and writer ([`record`]), sampled latencies as reported ([`latency`]) and the answers to
//! mallinfo and friends ([`introspect`]), the control channel ([`ctl`]). May allocate, lock and
//! read files, under the reentrancy guard; the hot path never imports it.

pub mod account;
pub mod ctl;
pub mod dump;
pub mod dumpbound;
pub mod held_history;
pub mod history;
pub mod introspect;
pub mod last_thread;
pub mod latency;
pub mod memlog;
pub mod pprof;
pub mod procfs;
pub mod record;
pub mod report;
pub mod symbols;
pub mod textfile;
pub mod thread_start;
pub mod trim;
pub mod worker;
