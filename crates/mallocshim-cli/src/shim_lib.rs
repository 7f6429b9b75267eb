//! Where the shim library is: the one place the command looks for `libmallocshim.so`.

use std::path::{Path, PathBuf};

/// Where the Debian package installs the shim.
pub const INSTALLED: &str = "/usr/lib/x86_64-linux-gnu/libmallocshim.so";

/// The shim library, first found of: `$MALLOCSHIM_LIB` (an explicit choice wins, and is an error
/// when it names no file), the installed [`INSTALLED`], then `libmallocshim.so` next to this
/// program (target/release/ in a checkout, where `cargo build --release` puts both). An error
/// lists what was tried.
pub fn find() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("MALLOCSHIM_LIB").filter(|p| !p.is_empty()).map(PathBuf::from) {
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("MALLOCSHIM_LIB={}: no such file", p.display()))
        };
    }
    let exe = std::env::current_exe().ok();
    let beside = exe.as_deref().and_then(Path::parent).map(|d| d.join("libmallocshim.so"));
    let tried: Vec<PathBuf> = [Some(PathBuf::from(INSTALLED)), beside].into_iter().flatten().collect();
    tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        let names: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
        format!(
            "shim library not found (tried {}); install the package, build it with `cargo build --release`, \
             or set MALLOCSHIM_LIB",
            names.join(", ")
        )
    })
}
