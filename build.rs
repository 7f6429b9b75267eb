//! Build script: links the built-in jemalloc without its load-time constructor.
//!
//! tikv-jemalloc-sys's `libjemalloc_pic.a` has one `.init_array` entry (jemalloc.c's
//! `jemalloc_constructor`, which calls `malloc_init`): left in, it would initialise jemalloc when
//! the shim is loaded, whatever backend is chosen (mmaps, `_RJEM_MALLOC_CONF`, and its
//! pthread_atfork handlers, which deadlock a fork nested in a signal handler). This script copies
//! the archive into OUT_DIR with `objcopy --remove-section=.init_array` and links the copy first:
//! the linker resolves every jemalloc symbol from it, so the bundled original is never pulled
//! in. jemalloc then initialises only when the jemalloc backend loads it (`backend::jemalloc::load`).
//! The same copy moves jemalloc's 2 MiB radix-tree root (`arena_emap_global`, its own section:
//! jemalloc is built with `-fdata-sections`) from `.bss` into `.lbss`, which the linker places
//! after every `.bss` section, beside the shim's bootstrap pool (`hot::bootstrap`). In the middle
//! of `.bss` it spread the small statics every process writes over three 2 MiB page-table ranges,
//! and every fork copies one page-table page per range (issue 21; docs/results/fork.md).
//! The build fails when objcopy (binutils) is missing, the copy still has a constructor, or the
//! root's section is not there to move.
//!
//! It also links libgcc's unwinder statically (`libgcc_eh.a`, found with `cc
//! -print-file-name`, whole-archive, ahead of std's `-lgcc_s`), as `gcc -static-libgcc` does for
//! a C library: std's few `_Unwind_*` references then resolve inside the shim (hidden by the
//! cdylib's version script) and `--as-needed` drops `libgcc_s.so.1` from its DT_NEEDED. Each
//! library the preload maps costs every fork of the host (issue 21: libm and libgcc_s alone made
//! a fork-from-SIGALRM program 2.5x slower). The build fails when the archive is missing.

use std::path::PathBuf;
use std::process::Command;

/// jemalloc's extent map (its 2 MiB radix-tree root), renamed into `.lbss` (see the module doc).
const EMAP: &str = ".bss._rjem_je_arena_emap_global";

fn main() {
    let root =
        std::env::var("DEP_JEMALLOC_ROOT").expect("DEP_JEMALLOC_ROOT (from tikv-jemalloc-sys's `links`)");
    let src = PathBuf::from(root).join("lib/libjemalloc_pic.a");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let dst = out.join("libjemalloc_noinit.a");
    let moved = format!(".lbss{}", &EMAP[4..]);
    let objcopy = std::env::var("OBJCOPY").unwrap_or_else(|_| "objcopy".into());
    let st = Command::new(&objcopy)
        .args(["--remove-section=.init_array", "--remove-section=.rela.init_array"])
        .arg(format!("--rename-section={EMAP}={moved},alloc"))
        .arg(&src)
        .arg(&dst)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {objcopy} (binutils): {e}"));
    assert!(st.success(), "{objcopy} {} failed", src.display());
    let objdump = Command::new("objdump").arg("-h").arg(&dst).output().expect("run objdump (binutils)");
    assert!(objdump.status.success(), "objdump -h {} failed", dst.display());
    assert!(
        !String::from_utf8_lossy(&objdump.stdout).contains("init_array"),
        "{} still has an .init_array section",
        dst.display()
    );
    assert!(
        String::from_utf8_lossy(&objdump.stdout).contains(&moved),
        "{} has no section {EMAP} to move after .bss (jemalloc built without -fdata-sections?)",
        src.display()
    );
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=jemalloc_noinit");
    link_unwinder_statically(&out);
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=OBJCOPY");
}

/// Copies gcc's `libgcc_eh.a` into `out` and links all of it (see the module doc).
fn link_unwinder_statically(out: &std::path::Path) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} (gcc) to find libgcc_eh.a: {e}"));
    let path = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert!(path.is_absolute() && path.exists(), "{cc} does not know libgcc_eh.a (gcc's static unwinder)");
    std::fs::copy(&path, out.join("libmallocshim_unwind.a")).expect("copy libgcc_eh.a");
    println!("cargo:rustc-link-lib=static:+whole-archive=mallocshim_unwind");
    println!("cargo:rerun-if-changed={}", path.display());
    println!("cargo:rerun-if-env-changed=CC");
}
