//! The parts of the `mallocshim` command that `mallocshim-compare` (crates/mallocshim-compare,
//! the comparison runner, which links the MariaDB harness) shares with it: `plot` (charts),
//! `secure_write` (every file either writes: new, 0600, never through a symlink) and `shim_lib`
//! (finding libmallocshim.so), and `bad_args` (the one-line answer to bad arguments). Nothing here
//! reads dumps or links the harness.

pub mod bad_args;
pub mod plot;
pub mod secure_write;
pub mod shim_lib;
