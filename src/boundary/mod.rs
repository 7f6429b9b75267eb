//! The C boundary: every symbol the .so exports, in one place — the malloc family, C++'s
//! delete family, mallinfo and friends, `pthread_create` and the signal interposers
//! ([`exports`]), C++'s new family ([`cxx`]), the dump signal's handler and the interposers'
//! logic ([`signals`]) and the shim's own C API ([`capi`], `shim/include/mallocshim.h`).
//! Thin: forwards into `hot` (the entry table) and `cold`; nothing below imports it except the
//! declared start-up knot (`hot::init` installs the signal handler).

pub mod capi;
pub mod cxx;
pub mod exports;
pub mod signals;
