//! The replay of an allocation trace (`MALLOCSHIM_RECORD=FILE`, `mallocshim record`) through
//! the shim, and the typed answer `mallocshim replay` prints and writes as JSON.
//!
//! - [`engine`]: the replayer process. `mallocshim replay` starts it once per backend (the
//!   hidden `mallocshim replay-engine`, under `LD_PRELOAD=libmallocshim.so`). It maps the plan
//!   and its tables from mmap (never from malloc: the replayer's own bytes are not the
//!   allocator's, and are stated), allocates the pre-window heap, runs one thread per recorded thread (started when
//!   its first call is due: [`launch`]) with each call in its recorded order, orders every free after its allocation, writes every page of
//!   each block once, and prints what it measured ([`answer::EngineOut`]).
//! - [`plan`]: the trace resolved into per-thread steps and block instances, built once by the
//!   command (not preloaded) and mapped by each engine as a memory image (`image.rs`);
//!   inconsistent events are counted, never replayed.
//! - [`answer`]: the per-backend figures and the verdict, one serde schema for the JSON.
//!
//! Owns no trace codec: the trace is read through `mallocshim_format::trace` only (`plan.rs`).
//! Must not allocate from the heap in the replay threads (only the replayed calls do), nor call
//! into the shim but through its C API (dlsym).

pub mod answer;
mod backoff;
pub mod engine;
mod image;
pub mod launch;
mod mem;
mod order;
pub mod plan;
mod selfproc;

pub use image::PlanView;
