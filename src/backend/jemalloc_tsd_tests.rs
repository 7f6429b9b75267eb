//! Tests of [`jemalloc_tsd`](crate::backend::jemalloc_tsd) on the real jemalloc: loaded as the
//! shim loads it, then threads left in the state a failed cache set-up leaves.

use crate::backend::jemalloc_tsd::*;
use tikv_jemalloc_ctl::raw;
use tikv_jemalloc_sys as je;

/// Allocates and frees every size class up to 1 MiB through jemalloc's thread cache (a
/// cache left on with unset bin stacks dies here, in `cache_bin_alloc`).
fn churn() {
    for shift in 3..20 {
        for _ in 0..64 {
            // SAFETY: plain jemalloc calls; each block is freed once.
            unsafe {
                let p = je::malloc(1 << shift);
                assert!(!p.is_null());
                je::free(p);
            }
        }
    }
}

/// The shim's load (tcache:false, the loading thread's cache on) confirms the layout; a
/// thread left as a failed set-up leaves it (cache on, bin stacks unset) is turned off
/// again, then allocates and exits; a thread whose set-up worked keeps its cache. Without
/// the undo the second thread dies of SIGSEGV in its first cached allocation or its exit.
#[test]
fn a_failed_cache_setup_is_turned_off() {
    let mut why = crate::base::diag::LineBuf::new();
    // SAFETY: the only jemalloc user of this test binary, loaded once here.
    assert!(unsafe { super::load(c"", &mut why) });
    assert!(layout_ok(), "the loading thread's turning on did not confirm the tsd layout");
    std::thread::spawn(|| {
        // SAFETY: plain jemalloc calls (the thread's tsd is set up, its cache off).
        unsafe { je::free(je::malloc(16)) };
        assert_eq!(enabled_byte(), Some(0));
        fake_failed_setup();
        assert_eq!(enabled_byte(), Some(1));
        assert_eq!(tcache_slow(), Some(core::ptr::null()));
        assert!(undo_failed_setup());
        assert_eq!(enabled_byte(), Some(0), "the failed cache is still on");
        churn();
    })
    .join()
    .unwrap();
    std::thread::spawn(|| {
        // SAFETY: plain jemalloc calls.
        unsafe { je::free(je::malloc(16)) };
        // SAFETY: `thread.tcache.enabled` is a read-write bool.
        unsafe { raw::write(b"thread.tcache.enabled\0", true) }.unwrap();
        assert!(tcache_slow().is_some_and(|p| !p.is_null()));
        assert!(undo_failed_setup());
        assert_eq!(enabled_byte(), Some(1), "a working cache was turned off");
        churn();
    })
    .join()
    .unwrap();
}
