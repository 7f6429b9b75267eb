//! The entry table: which function serves each exported malloc-family symbol. One table per
//! backend and profiling setting, each filled with `front`'s functions monomorphised for that
//! pair, plus the bootstrap table in force until initialisation publishes the chosen one. An
//! exported symbol is one load and one indirect jump, with no branch on the backend or on
//! profiling. The bootstrap table lives with its pool in `bootstrap`. Owns nothing else; must not
//! allocate or lock.

use crate::backend::{Backend, Raw, ALL};
use crate::{bootstrap, front};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

/// The functions serving the malloc family, one per exported symbol (same C signatures).
pub struct Table {
    pub malloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub free: unsafe extern "C" fn(*mut c_void),
    pub calloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub realloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    pub reallocarray: unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
    pub posix_memalign: unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int,
    pub aligned_alloc: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub memalign: unsafe extern "C" fn(usize, usize) -> *mut c_void,
    pub valloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub pvalloc: unsafe extern "C" fn(usize) -> *mut c_void,
    pub malloc_usable_size: unsafe extern "C" fn(*mut c_void) -> usize,
    pub free_sized: unsafe extern "C" fn(*mut c_void, usize),
    pub free_aligned_sized: unsafe extern "C" fn(*mut c_void, usize, usize),
}

const fn table<B: Raw, const P: bool>() -> Table {
    Table {
        malloc: front::malloc::<B, P>,
        free: front::free::<B, P>,
        calloc: front::calloc::<B, P>,
        realloc: front::realloc::<B, P>,
        reallocarray: front::reallocarray::<B, P>,
        posix_memalign: front::posix_memalign::<B, P>,
        aligned_alloc: front::aligned_alloc::<B, P>,
        memalign: front::memalign::<B, P>,
        valloc: front::valloc::<B, P>,
        pvalloc: front::pvalloc::<B, P>,
        malloc_usable_size: front::malloc_usable_size::<B, P>,
        free_sized: front::free_sized::<B, P>,
        free_aligned_sized: front::free_aligned_sized::<B, P>,
    }
}

/// One pair of tables per row of [`crate::backend::backend_list`], in row order: without and
/// with recording.
macro_rules! define_tables {
    ($($(#[$doc:meta])* $variant:ident, $module:ident, $raw:ident, $name:literal, $lib:literal;)*) => {
        static TABLES: [[Table; 2]; ALL.len()] = [$([
            table::<crate::backend::$module::$raw, false>(),
            table::<crate::backend::$module::$raw, true>(),
        ],)*];
        // The tables are indexed by the enum's discriminant: rows and variants in the same order.
        const _: () = {
            let mut i = 0;
            $(assert!(Backend::$variant as usize == i); i += 1;)*
            let _ = i;
        };
    };
}
crate::backend::backend_list!(define_tables);

/// The table serving calls (read by [`get`], and by the naked forwards in `exports`).
pub(crate) static ACTIVE: AtomicPtr<Table> = AtomicPtr::new(&bootstrap::TABLE as *const Table as *mut Table);

/// The table serving calls now.
#[inline(always)]
pub fn get() -> &'static Table {
    // SAFETY: ACTIVE always points to one of the static tables above.
    unsafe { &*ACTIVE.load(Ordering::Acquire) }
}

/// Makes backend `b`'s table, with or without recording, serve every later call (the last
/// step of initialisation).
pub fn publish(b: Backend, profile: bool) {
    let t: &'static Table = match b {
        Backend::Bootstrap => &bootstrap::TABLE,
        b => &TABLES[b as usize][profile as usize],
    };
    ACTIVE.store(t as *const Table as *mut Table, Ordering::Release);
}
