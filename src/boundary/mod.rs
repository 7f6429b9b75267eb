//! The C boundary: every symbol the .so exports, in one place — the malloc family, C++'s
//! delete family, mallinfo and friends, `pthread_create` and the signal interposers
//! ([`exports`]), C++'s new family ([`cxx`]), the dump signal's handler and the interposers'
//! logic ([`signals`]) and the shim's own C API ([`capi`], `shim/include/mallocshim.h`).
//! Thin: forwards into `hot` (the entry table) and `cold`; nothing below imports it except the
//! declared start-up knot (`hot::init` installs the signal handler).

/// Exports `$name` (with its C signature) as a naked forward to the active table's `$field`:
/// `mov rax, [route::ACTIVE]; jmp [rax + offset]`. The function the table names receives the
/// caller's registers and stack exactly as the caller left them, return address on top, so it
/// returns straight to the caller. A forward compiled by rustc would, with the frame pointers
/// this crate forces (.cargo/config.toml), push and pop %rbp around its tail jump: 3
/// instructions per call that no heap-profile walk ever sees, since the frame is gone before
/// the jump. The load is the table pointer's acquire load (`route::get`): a plain load on
/// x86-64. The CFI directives give unwinders (gdb, perf) the frame these two instructions keep:
/// none beyond the return address.
macro_rules! route_forward {
    ($($name:ident, $field:ident, ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {$(
        #[no_mangle]
        // SAFETY: the body loads the published table pointer (always one of the static tables)
        // and jumps to its function with the caller's arguments untouched; no Rust code runs.
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "mov rax, qword ptr [rip + {active}]",
                "jmp qword ptr [rax + {off}]",
                ".cfi_endproc",
                active = sym $crate::hot::route::ACTIVE,
                off = const core::mem::offset_of!($crate::hot::route::Table, $field),
            )
        }
    )*};
}

// Defined before the modules below, which use it by textual scope (exports.rs, cxx.rs).

pub mod capi;
pub mod cxx;
pub mod exports;
pub mod sigearly;
pub mod signals;
