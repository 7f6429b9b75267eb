//! C++'s `operator new` and `operator delete` families, every form of both. The delete family
//! forwards to the route table's free like the malloc family (`boundary::route_forward`: one
//! load and one indirect jump). The new family is interposed so that a heap profile's first
//! frame is the code that called `new` (Debian's libstdc++ `operator new` keeps no frame
//! pointer, so a walk from inside malloc would skip its caller), and it must be naked: each exported symbol is
//! a small stub that keeps a frame (push %rbp) around a call to the backend through the route
//! table (its malloc for the plain and nothrow forms: one `operator new` costs the stub's 15
//! instructions on top of malloc's; its memalign for the aligned forms), returns the block when
//! there is one, and otherwise pops its frame and tail-jumps,
//! with the caller's original arguments, to libstdc++'s own operator of the same name
//! (resolved with dlsym(RTLD_NEXT) at initialisation). libstdc++'s operator then runs C++'s
//! semantics itself: the std::new_handler loop, then std::bad_alloc for the throwing forms and
//! NULL for the nothrow ones — and the exception never crosses a Rust frame. Should no
//! libstdc++ be found (a program that calls `new` always links one), a failed `new` aborts
//! with one `mallocshim:` line, as an uncaught std::bad_alloc would.
//! Sizes: 0 is served as 1 byte; alignments (`std::align_val_t`) that are not a power of two
//! fail (undefined in C++). Never allocates except through the route table.

#![allow(non_snake_case)]

use crate::hot::route;
use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The libstdc++ operators, by index: plain, array, nothrow, array nothrow, then the four
/// aligned forms in the same order.
const NAMES: [&core::ffi::CStr; 8] = [
    c"_Znwm",
    c"_Znam",
    c"_ZnwmRKSt9nothrow_t",
    c"_ZnamRKSt9nothrow_t",
    c"_ZnwmSt11align_val_t",
    c"_ZnamSt11align_val_t",
    c"_ZnwmSt11align_val_tRKSt9nothrow_t",
    c"_ZnamSt11align_val_tRKSt9nothrow_t",
];

static REAL: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

/// Resolves libstdc++'s operators (initialisation, under the guard).
pub fn init() {
    for i in 0..NAMES.len() {
        resolve(i);
    }
}

fn resolve(i: usize) -> usize {
    let mut f = REAL[i].load(Relaxed);
    if f == 0 {
        let _g = crate::hot::tls::Reentry::enter();
        // SAFETY: a NUL-terminated symbol name; RTLD_NEXT searches the objects after the shim.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, NAMES[i].as_ptr()) } as usize;
        REAL[i].store(f, Relaxed);
    }
    f
}

/// libstdc++'s operator `i`, resolved now if it was not; aborts, as an uncaught
/// std::bad_alloc would, when there is none (a failed `new` has nowhere else to go).
extern "C" fn real(i: usize) -> usize {
    let f = resolve(i);
    if f == 0 {
        crate::base::diag::warn!(
            "operator new failed and libstdc++'s {} cannot be found: aborting (std::bad_alloc)",
            NAMES[i].to_string_lossy()
        );
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() };
    }
    f
}

/// One exported operator (`$i` indexes NAMES and REAL): a frame keeping the caller's argument
/// registers (`$save`, undone by `$restore`), `$args` making the route table's `$field` call's
/// arguments from them (or leaving 0 in %rax and jumping to `4:`: a request the operator
/// refuses), the call, the block returned when there is one; otherwise, with the caller's
/// arguments, a jump to libstdc++'s operator ([`real`], resolved then when it was not).
macro_rules! new_op {
    ($name:ident, $i:literal, $field:ident, [$($save:literal),*], [$($restore:literal),*], [$($args:literal),*]) => {
        #[no_mangle]
        #[unsafe(naked)]
        /// C++'s operator of this mangled name (see the module doc).
        pub extern "C" fn $name() {
            core::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                $($save,)*
                $($args,)*
                "mov rax, qword ptr [rip + {active}]",
                "call qword ptr [rax + {field}]",
                "4:",
                $($restore,)*
                "pop rbp",
                "test rax, rax",
                "jz 2f",
                "ret",
                "2:",
                "mov rax, qword ptr [rip + {real} + {off}]",
                "test rax, rax",
                "jz 3f",
                "jmp rax",
                "3:",
                "push rbp",
                "mov rbp, rsp",
                $($save,)*
                "mov edi, {i}",
                "call {resolve}",
                $($restore,)*
                "pop rbp",
                "jmp rax",
                i = const $i,
                off = const $i * 8,
                active = sym route::ACTIVE,
                field = const core::mem::offset_of!(route::Table, $field),
                resolve = sym real,
                real = sym REAL,
            )
        }
    };
}

/// The plain and nothrow forms: `malloc(size)`, 0 served as 1 (`cmp`/`adc`); (size, nothrow_t&)
/// in %rdi, %rsi.
macro_rules! new_plain {
    ($name:ident, $i:literal) => {
        new_op!(
            $name,
            $i,
            malloc,
            ["push rdi", "push rsi"],
            ["pop rsi", "pop rdi"],
            ["cmp rdi, 1", "adc rdi, 0"]
        );
    };
}

/// The aligned forms: `memalign(align, size)`, 0 served as 1; an alignment that is not a power
/// of two is refused (undefined in C++); (size, align, nothrow_t&) in %rdi, %rsi, %rdx.
macro_rules! new_aligned {
    ($name:ident, $i:literal) => {
        new_op!(
            $name,
            $i,
            memalign,
            ["push rdi", "push rsi", "push rdx", "push rcx"],
            ["pop rcx", "pop rdx", "pop rsi", "pop rdi"],
            [
                "xor eax, eax",
                "test rsi, rsi",
                "jz 4f",
                "lea rcx, [rsi - 1]",
                "test rcx, rsi",
                "jnz 4f",
                "mov rcx, rdi",
                "mov rdi, rsi",
                "mov rsi, rcx",
                "cmp rsi, 1",
                "adc rsi, 0"
            ]
        );
    };
}

new_plain!(_Znwm, 0);
new_plain!(_Znam, 1);
new_plain!(_ZnwmRKSt9nothrow_t, 2);
new_plain!(_ZnamRKSt9nothrow_t, 3);
new_aligned!(_ZnwmSt11align_val_t, 4);
new_aligned!(_ZnamSt11align_val_t, 5);
new_aligned!(_ZnwmSt11align_val_tRKSt9nothrow_t, 6);
new_aligned!(_ZnamSt11align_val_tRKSt9nothrow_t, 7);

// C++'s delete family: every form frees through the table's free (blocks of every backend,
// aligned or not, are freed by free; `p` NULL or from this process's allocator). Each is called
// by C++ code with the contract of the operator of that mangled name, which free keeps.
route_forward! {
    _ZdlPv, free, (p: *mut c_void);
    _ZdaPv, free, (p: *mut c_void);
    _ZdlPvm, free, (p: *mut c_void, size: usize);
    _ZdaPvm, free, (p: *mut c_void, size: usize);
    _ZdlPvRKSt9nothrow_t, free, (p: *mut c_void, nt: *const c_void);
    _ZdaPvRKSt9nothrow_t, free, (p: *mut c_void, nt: *const c_void);
    _ZdlPvSt11align_val_t, free, (p: *mut c_void, align: usize);
    _ZdaPvSt11align_val_t, free, (p: *mut c_void, align: usize);
    _ZdlPvmSt11align_val_t, free, (p: *mut c_void, size: usize, align: usize);
    _ZdaPvmSt11align_val_t, free, (p: *mut c_void, size: usize, align: usize);
    _ZdlPvSt11align_val_tRKSt9nothrow_t, free, (p: *mut c_void, align: usize, nt: *const c_void);
    _ZdaPvSt11align_val_tRKSt9nothrow_t, free, (p: *mut c_void, align: usize, nt: *const c_void);
}
