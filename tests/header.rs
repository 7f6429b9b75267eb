//! The committed C header `shim/include/mallocshim.h` must be what cbindgen generates from
//! `src/boundary/capi.rs` today. `MALLOCSHIM_BLESS=1` rewrites it instead of failing.

use std::path::PathBuf;

#[test]
fn committed_header_is_fresh() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cfg = cbindgen::Config::from_file(root.join("shim/cbindgen.toml")).expect("read shim/cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(cfg)
        .with_src(root.join("src/boundary/capi.rs"))
        .generate()
        .expect("cbindgen generates the header");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).unwrap();
    let path = root.join("shim/include/mallocshim.h");
    if std::env::var_os("MALLOCSHIM_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "shim/include/mallocshim.h is stale: regenerate with `MALLOCSHIM_BLESS=1 cargo test --release --test header` and commit it"
    );
    for f in [
        "mallocshim_backend_name",
        "mallocshim_get_stats",
        "struct mallocshim_stats",
        "backend_resident_bytes",
    ] {
        assert!(fresh.contains(f), "header lacks {f}");
    }
}
