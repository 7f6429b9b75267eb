//! The hot path: what runs inside malloc and free, and what it needs to start. The entry table
//! ([`route`]), the recording around each call ([`record`]), glibc's C contract over every
//! backend ([`c_contract`]), per-thread state and counters ([`tls`], [`slots`]), the per-class latency histograms
//! ([`class_latency`]), the bootstrap
//! pool that serves allocations made before a backend is loaded ([`bootstrap`]), the trace
//! recording's per-thread rings and trace table functions ([`tracebuf`]), the entry table of a
//! forked child that owes its backend's fork handler ([`postfork`]), the sampled
//! heap profile's recording side ([`heapprof`]: sampler, stack walk, live-set tables), and lazy
//! start-up with the option table ([`init`], [`config`], [`config_print`]).
//! Never allocates (outside the reentrancy guard), locks, panics or makes a syscall but the
//! clock's; must not import `cold` (the test `tests/layering.rs` holds it to that).

pub mod bootstrap;
pub mod c_contract;
pub mod class_latency;
pub mod config;
pub mod config_print;
pub mod heapprof;
pub mod init;
pub mod mailbox;
pub mod postfork;
pub mod real;
pub mod record;
pub mod route;
pub mod slots;
pub mod tls;
pub mod tracebuf;
