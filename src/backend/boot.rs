//! The pseudo-backend active before initialisation: its memory figures, release call and
//! version. Its malloc family (initialise on the first call, serve the bootstrap pool while
//! initialisation runs) is `route`'s bootstrap table.

use super::MemStats;

pub unsafe fn mem_stats() -> MemStats {
    MemStats::default()
}

pub unsafe fn release(_pad: usize) -> bool {
    false
}

pub unsafe fn version(out: &mut crate::diag::LineBuf) {
    out.put(b"bootstrap pool");
}
