//! Lazy initialisation, run by whichever thread makes the first call (often another library's
//! constructor, before the shim's own would run): page size, configuration from `environ`, the
//! backend (dlopen for tcmalloc and mimalloc), the slot key, then the backend is published. It runs under the
//! reentrancy guard; nothing here waits for another thread, so a dlopen lock can never deadlock it.

use crate::backend;
use crate::base::clock;
use crate::hot::tls::Reentry;
use crate::hot::{c_contract, config, record, slots};
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

const UNINIT: u8 = 0;
const BUSY: u8 = 1;
const DONE: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);

/// Initialises the shim if nobody has. True when the shim is ready for the caller's call; false
/// while initialisation runs (the caller then uses the bootstrap pool).
#[cold]
#[inline(never)]
pub fn ensure() -> bool {
    match STATE.compare_exchange(UNINIT, BUSY, Ordering::Acquire, Ordering::Acquire) {
        Ok(_) => {
            run();
            STATE.store(DONE, Ordering::Release);
            true
        }
        Err(DONE) => true,
        Err(_) => false,
    }
}

/// Readiness, its own state: set when initialisation publishes the backend (before `STATE` turns
/// `DONE`, so the initialising thread's own later calls see it), never cleared.
static READY: AtomicBool = AtomicBool::new(false);

/// True once a backend is published.
#[inline(always)]
pub fn ready() -> bool {
    READY.load(Ordering::Acquire)
}

fn run() {
    let _g = Reentry::enter();
    // The caller's errno survives initialisation (mimalloc's constructor, run by dlopen, leaves
    // ENOENT from probing files).
    let saved_errno = crate::base::sys::errno();
    // SAFETY: getauxval does not allocate.
    c_contract::set_page_size(unsafe { libc::getauxval(libc::AT_PAGESZ) } as usize);
    // SAFETY: this thread won the UNINIT->BUSY race: it is the only initialiser.
    unsafe { config::load() };
    let cfg = config::get();
    // SAFETY: single initialiser, under the guard.
    let b = unsafe { backend::load(cfg.backend, cfg.backend_lib()) };
    crate::hot::postfork::init();
    slots::init();
    clock::start();
    crate::hot::class_latency::init();
    record::set_sample_every(cfg.sample_every);
    crate::hot::tracebuf::set_wait_ms(cfg.record_wait_ms);
    crate::hot::heapprof::init(cfg.prof_sample_bytes, cfg.profile);
    crate::boundary::cxx::init();
    crate::base::own_heap::map();
    crate::base::sys::init_errno();
    crate::base::sys::init_cpu();
    backend::publish(b);
    READY.store(true, Ordering::Release);
    crate::hot::route::publish(b, cfg.profile, crate::hot::heapprof::rate() != 0);
    // A rate set through the C API by another thread while this ran found the bootstrap table
    // in force, so its switch to the heap-profiling table did nothing: look at the rate again
    // after the publish (the fence pairs with the C API's, so one of the two sees the other).
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    if cfg.profile && crate::hot::heapprof::rate() != 0 {
        crate::hot::route::heap_profiles_on();
    }
    crate::boundary::signals::install(cfg.dump_signal);
    match cfg.verbose {
        0 => {}
        1 => crate::hot::config_print::print_line(),
        _ => crate::hot::config_print::print_table(),
    }
    crate::base::sys::set_errno(saved_errno);
    #[cfg(feature = "semantics-floor")]
    crate::base::diag::warn!(
        "built with the semantics-floor feature, for measurement only: free does not recognise bootstrap-pool blocks; under jemalloc, tcmalloc and mimalloc it does not keep errno and small blocks are 8-byte aligned"
    );
}
