//! The entry table: which function serves each exported malloc-family symbol. Three tables per
//! backend — routing only, profiling without heap profiles, profiling with heap profiles — each
//! filled with `front`'s functions monomorphised for that setting, plus the bootstrap table in
//! force until initialisation publishes the chosen one. An exported symbol is one load and one
//! indirect jump, with no branch on the backend or on profiling. The bootstrap table lives with
//! its pool in `bootstrap`. Owns nothing else; must not allocate or lock.
//!
//! Hot-path cost per table (benches/routing.rs, pair64 under callgrind, glibc; every backend
//! adds the same for heap profiles): routing only (`MALLOCSHIM_PROFILE=off`) the C semantics
//! alone, 184.8 instructions per malloc/free pair; profiling without heap profiles
//! (`MALLOCSHIM_PROF_SAMPLE_BYTES=0` at start) adds the per-call counting and the sampled
//! timing, 242.1, and nothing for heap profiles; profiling with them (the default) adds the
//! allocation's byte countdown and the free's filter test, 14.4 more per unsampled pair (256.5;
//! +0.1 to +0.8 ns), the samples themselves being out of line.
//!
//! In a forked child of a single-threaded parent, `postfork`'s table is in force until the first
//! call (it runs the backend's deferred child handler); the switches below settle it first, or
//! (closing a trace window, from a fork handler) apply to the table it will restore.
//!
//! A trace window (`MALLOCSHIM_RECORD`, `mallocshim record`) moves the process to the traced
//! twin of its table ([`set_traced`], one compare-and-swap) and back when it closes: outside a
//! window the tables are today's, so recording costs nothing then.
//!
//! Heap profiles turned on at run time ([`heap_profiles_on`], from the C API) move the process to
//! the heap-profiling table of its backend with one atomic store. Turned off, it stays there: the
//! frees of blocks sampled earlier must still take them out of the live set, and only that
//! table's free tests the filter (sampling itself stops with the rate). A thread that loaded the
//! old table just before the switch may serve one more call from it: an allocation not counted
//! towards a sample, or the free of a block sampled in those nanoseconds left in the live set
//! (its address is replaced when it is sampled again): a figure slightly off, never a fault.

use crate::backend::{Backend, Raw, ALL};
use crate::hot::{bootstrap, postfork, record, tracebuf};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

/// The malloc family's C signatures, written once: calls `$callback!` with one
/// `name, field, (args) -> ret;` row per exported symbol (the symbol and the [`Table`] field
/// share the name). `boundary::exports` exports them with it (`route_forward`) and `postfork`
/// builds its table with it.
macro_rules! malloc_family {
    ($callback:ident) => {
        $callback! {
            malloc, malloc, (size: usize) -> *mut c_void;
            free, free, (p: *mut c_void);
            calloc, calloc, (n: usize, size: usize) -> *mut c_void;
            realloc, realloc, (p: *mut c_void, size: usize) -> *mut c_void;
            reallocarray, reallocarray, (p: *mut c_void, n: usize, size: usize) -> *mut c_void;
            posix_memalign, posix_memalign, (out: *mut *mut c_void, align: usize, size: usize) -> c_int;
            aligned_alloc, aligned_alloc, (align: usize, size: usize) -> *mut c_void;
            memalign, memalign, (align: usize, size: usize) -> *mut c_void;
            valloc, valloc, (size: usize) -> *mut c_void;
            pvalloc, pvalloc, (size: usize) -> *mut c_void;
            malloc_usable_size, malloc_usable_size, (p: *mut c_void) -> usize;
            free_sized, free_sized, (p: *mut c_void, size: usize);
            free_aligned_sized, free_aligned_sized, (p: *mut c_void, align: usize, size: usize);
        }
    };
}
pub(crate) use malloc_family;

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

const fn table<B: Raw, const P: bool, const H: bool>() -> Table {
    Table {
        malloc: record::malloc::<B, P, H>,
        free: record::free::<B, P, H>,
        calloc: record::calloc::<B, P, H>,
        realloc: record::realloc::<B, P, H>,
        reallocarray: record::reallocarray::<B, P, H>,
        posix_memalign: record::posix_memalign::<B, P, H>,
        aligned_alloc: record::aligned_alloc::<B, P, H>,
        memalign: record::memalign::<B, P, H>,
        valloc: record::valloc::<B, P, H>,
        pvalloc: record::pvalloc::<B, P, H>,
        malloc_usable_size: record::malloc_usable_size::<B, P, H>,
        free_sized: record::free_sized::<B, P, H>,
        free_aligned_sized: record::free_aligned_sized::<B, P, H>,
    }
}

/// The table of a setting while a trace window records: `tracebuf`'s functions around the
/// setting's own.
const fn traced<B: Raw, const P: bool, const H: bool>() -> Table {
    Table {
        malloc: tracebuf::malloc::<B, P, H>,
        free: tracebuf::free::<B, P, H>,
        calloc: tracebuf::calloc::<B, P, H>,
        realloc: tracebuf::realloc::<B, P, H>,
        reallocarray: tracebuf::reallocarray::<B, P, H>,
        posix_memalign: tracebuf::posix_memalign::<B, P, H>,
        aligned_alloc: tracebuf::aligned_alloc::<B, P, H>,
        memalign: tracebuf::memalign::<B, P, H>,
        valloc: tracebuf::valloc::<B, P, H>,
        pvalloc: tracebuf::pvalloc::<B, P, H>,
        malloc_usable_size: record::malloc_usable_size::<B, P, H>,
        free_sized: tracebuf::free_sized::<B, P, H>,
        free_aligned_sized: tracebuf::free_aligned_sized::<B, P, H>,
    }
}

/// Six tables per row of [`crate::backend::backend_list`], in row order: routing only,
/// recording without heap profiles, recording with them; then the same three traced
/// ([`TRACED`] columns further).
macro_rules! define_tables {
    ($($(#[$doc:meta])* $variant:ident, $module:ident, $raw:ident;)*) => {
        static TABLES: [[Table; 6]; ALL.len()] = [$([
            table::<crate::backend::$module::$raw, false, false>(),
            table::<crate::backend::$module::$raw, true, false>(),
            table::<crate::backend::$module::$raw, true, true>(),
            traced::<crate::backend::$module::$raw, false, false>(),
            traced::<crate::backend::$module::$raw, true, false>(),
            traced::<crate::backend::$module::$raw, true, true>(),
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

/// `postfork`'s saved table (the one in force when a fork deferred the backend's child
/// handler). Beside [`ACTIVE`], and initialised (so in .data, like it): a forked child writes
/// both, and one page written is one copy.
pub(crate) static SAVED: AtomicPtr<Table> = AtomicPtr::new(&bootstrap::TABLE as *const Table as *mut Table);

/// The table serving calls now.
#[inline(always)]
pub fn get() -> &'static Table {
    // SAFETY: ACTIVE always points to one of the static tables above.
    unsafe { &*ACTIVE.load(Ordering::Acquire) }
}

/// The index in a row of [`TABLES`] of a setting.
const fn column(profile: bool, heap: bool) -> usize {
    match (profile, heap) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    }
}

fn ptr(t: &'static Table) -> *mut Table {
    t as *const Table as *mut Table
}

/// Makes backend `b`'s table for the setting (recording; heap profiles, with recording only)
/// serve every later call (the last step of initialisation).
pub fn publish(b: Backend, profile: bool, heap: bool) {
    ACTIVE.store(ptr(&TABLES[b as usize][column(profile, heap)]), Ordering::Release);
}

/// How far a setting's traced table is from its own, in a row.
const TRACED: usize = 3;

/// Moves a process recording without heap profiles to the table with them (same backend,
/// traced or not); nothing otherwise (routing only, heap profiles already on, or not
/// initialised yet). Safe from any thread at any time: compare-and-swaps.
pub fn heap_profiles_on() {
    postfork::settle_before_switch();
    for row in TABLES.iter() {
        for t in [0, TRACED] {
            let from = ptr(&row[column(true, false) + t]);
            let to = ptr(&row[column(true, true) + t]);
            if ACTIVE.compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return;
            }
        }
    }
}

/// Whether the table in force tests frees against the heap profile (heap profiles were on at
/// start or turned on since); for the dump and the tests.
pub fn heap_table() -> bool {
    let a = postfork::in_force().load(Ordering::Acquire);
    TABLES.iter().any(|row| {
        core::ptr::eq(a, &row[column(true, true)]) || core::ptr::eq(a, &row[column(true, true) + TRACED])
    })
}

/// Moves the process to the traced table of its setting (`on`) or back (a trace window opens
/// or closes); false when it is not on the other one (not initialised, or already there).
/// A thread that loaded the old table just before may serve one more call from it.
pub fn set_traced(on: bool) -> bool {
    if on {
        postfork::settle_before_switch();
    }
    // Closing (also a fork child handler's): on the table the post-fork table will restore.
    let active = if on { &ACTIVE } else { postfork::in_force() };
    for row in TABLES.iter() {
        for c in 0..TRACED {
            let (from, to) = if on { (c, c + TRACED) } else { (c + TRACED, c) };
            // Loaded first: a failed compare-and-swap still writes the page (a copy in a child,
            // whose fork handler closes a window that is almost never open).
            if active.load(Ordering::Relaxed) != ptr(&row[from]) {
                continue;
            }
            if active
                .compare_exchange(ptr(&row[from]), ptr(&row[to]), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return true;
            }
        }
    }
    false
}
