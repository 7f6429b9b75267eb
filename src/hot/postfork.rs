//! The post-fork entry table (issue 21, part 2): in a child of a single-threaded parent,
//! `backend::atfork` defers the backend's child handler (see its module doc), and this module's
//! child handler moves the process to [`TABLE`], whose functions run the owed handler once
//! (`atfork::settle`), move the process back to the table it had, and forward the call. A child
//! that execs or exits at once thus never touches the backend's lock pages; the table in force
//! outside that window is unchanged, so the hot path costs the same. Owns the table (its
//! saved pointer, `route::SAVED`, sits beside `ACTIVE`); must not allocate, lock or call the loader (its functions run inside malloc).

use crate::backend::atfork;
use crate::hot::route::{self, Table};
use core::sync::atomic::{AtomicPtr, Ordering::*};

// The table in force when the fork happened, restored once the owed handler has run (it lives
// beside `route::ACTIVE`, on the page a child writes anyway).
use route::SAVED;

fn ptr(t: &'static Table) -> *mut Table {
    t as *const Table as *mut Table
}

/// Registers the child handler (initialisation, after the backend's wrapper trio: child
/// handlers run in registration order, so it sees what `atfork`'s decided).
pub fn init() {
    atfork::register_child(after_fork_child);
}

/// Fork child handler (single-threaded; async-signal-safe): when the backend's child handler
/// was deferred, serve the next call from [`TABLE`]. Writes only when it moves the process.
#[link_section = ".text.mallocshim_fork"]
unsafe extern "C" fn after_fork_child() {
    let cur = route::ACTIVE.load(Relaxed);
    if atfork::deferred() && cur != ptr(&TABLE) {
        SAVED.store(cur, Relaxed);
        route::ACTIVE.store(ptr(&TABLE), Release);
    }
}

/// Runs the owed handler if any, moves the process back to its table and returns that table
/// (for the caller's one call). A signal handler that interrupted the owed handler on this
/// thread is served from the saved table without moving back (the interrupted run finishes).
/// Keeps errno (free's contract).
#[cold]
pub fn settle() -> &'static Table {
    let saved = SAVED.load(Acquire);
    let e = crate::base::sys::errno();
    if atfork::settle() {
        let _ = route::ACTIVE.compare_exchange(ptr(&TABLE), saved, AcqRel, Acquire);
    }
    crate::base::sys::set_errno(e);
    // SAFETY: SAVED holds a value of ACTIVE, which always points to a static table.
    unsafe { &*saved }
}

/// Settles before `route` changes the table at run time (a switch from the C API or a trace
/// window in a child not settled yet).
pub fn settle_before_switch() {
    if core::ptr::eq(route::ACTIVE.load(Acquire), &TABLE) {
        settle();
    }
}

/// The pointer that says which table serves calls: [`SAVED`] while the post-fork table is in
/// force (a fork handler's switch, e.g. the trace window's close, applies there without
/// running the owed handler), `ACTIVE` otherwise.
pub fn in_force() -> &'static AtomicPtr<Table> {
    if core::ptr::eq(route::ACTIVE.load(Acquire), &TABLE) {
        &SAVED
    } else {
        &route::ACTIVE
    }
}

/// Defines, in `pf`, one function per row of `route::malloc_family` that settles and forwards,
/// and [`TABLE`] naming them.
macro_rules! settling {
    ($($name:ident, $field:ident, ($($a:ident: $t:ty),*) $(-> $r:ty)?;)*) => {
        mod pf {
            use super::settle;
            use core::ffi::{c_int, c_void};
            $(
                pub unsafe extern "C" fn $field($($a: $t),*) $(-> $r)? {
                    // SAFETY: forwarded C contract.
                    unsafe { (settle().$field)($($a),*) }
                }
            )*
        }

        /// In force in a forked child from the fork until its first call (see the module doc).
        pub static TABLE: Table = Table { $($field: pf::$field,)* };
    };
}

route::malloc_family!(settling);
