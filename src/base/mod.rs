//! The leaves: helpers every floor may use and that import nothing of the shim's above them —
//! errno, dlsym(RTLD_NEXT) and anonymous mappings ([`sys`]), allocation-free diagnostics
//! ([`diag`]), the cheap clock ([`clock`]), the recording vocabulary ([`classes`]) and the
//! shim's own heap, Rust's global allocator inside the .so ([`own_heap`]), with the heap of the
//! shim's own thread ([`worker_heap`]) and the heap profiler's ([`tables_heap`]), and the one reservation that holds the shim's own
//! mappings ([`region`]).
//! Must not import `backend`, `hot`, `cold` or `boundary`.

pub mod classes;
pub mod clock;
pub mod diag;
pub mod own_heap;
pub mod region;
pub mod sys;
pub mod tables_heap;
pub mod worker_heap;
