//! What `mallocshim plot` (crates/mallocshim-cli, writing through its secure_write.rs, the
//! helper the comparison runner uses for every file it writes) does with its `--out` file in a
//! shared directory under /tmp: a symlink planted at that name (to a victim file, or dangling) is
//! neither followed nor replaced, and the command fails with one `mallocshim plot:` line and
//! status 2; a directory or another user's file there is refused the same way; a new
//! image is mode 0600; a regular file of ours there is replaced by a valid PNG/SVG of mode 0600;
//! no temporary file is left behind. The helper's own cases (create, move across file systems,
//! FIFOs) are its unit tests: `cargo test --release -p mallocshim-cli`.

mod common;

use common::{cli_bin, describe, stderr};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The memlog header, from the format crate the shim writes through.
use mallocshim_format::memlog::HEADER;
use mallocshim_format::MemRow;

fn mallocshim(args: &[&str]) -> Output {
    Command::new(cli_bin()).args(args).output().expect("run mallocshim")
}

/// A fresh directory under /tmp (where predictable names are the danger), unique to this test.
fn tmp_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(format!("/tmp/mallocshim-secfiles.{}.{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create the test directory in /tmp");
    d
}

/// A small memlog CSV in `dir`, written through the format crate.
fn memlog(dir: &Path) -> String {
    let mut s = format!("{HEADER}\n").into_bytes();
    for i in 0..10u64 {
        let rss = (100 + i * 3) << 20;
        let row = MemRow {
            unix_ms: 1_767_225_600_000 + i * 1000,
            rss_bytes: rss,
            vsz_bytes: rss * 4,
            backend_allocated_bytes: Some(rss / 2),
            backend_resident_bytes: Some(rss * 3 / 4),
            backend_free_bytes: Some(rss / 4),
            trims: Some(0),
            released_bytes: Some(0),
            ..MemRow::default()
        };
        row.write_line(&mut s).expect("memlog line");
    }
    let p = dir.join("glibc.csv");
    std::fs::write(&p, s).expect("write memlog");
    p.to_string_lossy().into_owned()
}

fn plot(out: &Path, csv: &str) -> Output {
    mallocshim(&["plot", "--out", out.to_str().expect("utf-8 path"), csv])
}

/// The names in `dir`, sorted (a leftover temporary file would show here).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).expect("stat").permissions().mode() & 0o7777
}

/// The command failed as a refusal: status 2, exactly one stderr line naming `out` and `what`.
fn assert_refused(o: &Output, out: &Path, what: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{}", describe(o));
    assert_eq!(e.lines().count(), 1, "one error line\n{}", describe(o));
    assert!(
        e.starts_with(&format!("mallocshim plot: refusing to write {}: it is ", out.display())),
        "{}",
        describe(o)
    );
    assert!(e.contains(what), "expected {what:?}\n{}", describe(o));
}

/// A PNG of the plot's size that decodes.
fn assert_png(p: &Path) {
    let bytes = std::fs::read(p).expect("PNG written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{}: PNG signature", p.display());
    let mut r = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("PNG header");
    let mut buf = vec![0; r.output_buffer_size()];
    let info = r.next_frame(&mut buf).expect("PNG data decodes");
    assert_eq!((info.width, info.height), (1000, 900), "two stacked panels");
    assert!(buf.iter().any(|&x| x != 255), "not blank");
}

fn assert_svg(p: &Path) {
    let s = std::fs::read_to_string(p).expect("SVG written");
    assert!(
        s.trim_start().starts_with("<svg") && s.trim_end().ends_with("</svg>"),
        "{}: not an SVG document",
        p.display()
    );
    assert!(s.contains("glibc"), "{}: the legend names the CSV", p.display());
}

#[test]
fn planted_symlink_is_neither_followed_nor_replaced() {
    let d = tmp_dir("symlink");
    let csv = memlog(&d);
    let victim = d.join("victim");
    std::fs::write(&victim, b"precious data\n").expect("victim");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod victim");
    for name in ["x.png", "x.svg"] {
        let out = d.join(name);
        symlink(&victim, &out).expect("plant the symlink");
        let o = plot(&out, &csv);
        assert_refused(&o, &out, &format!("a symbolic link to {}", victim.display()));
        assert_eq!(
            std::fs::read(&victim).expect("victim"),
            b"precious data\n",
            "{name}: the victim was written"
        );
        assert_eq!(mode(&victim), 0o644, "{name}: the victim's mode changed");
        assert_eq!(std::fs::read_link(&out).expect("the symlink is still there"), victim, "{name}");
    }
    // a dangling symlink: its target is not created
    let gone = d.join("would-be-created");
    let out = d.join("dangling.png");
    symlink(&gone, &out).expect("plant the dangling symlink");
    let o = plot(&out, &csv);
    assert_refused(&o, &out, "a symbolic link");
    assert!(std::fs::symlink_metadata(&gone).is_err(), "the dangling symlink's target was created");
    assert_eq!(std::fs::read_link(&out).expect("still a symlink"), gone);
    assert_eq!(
        names(&d),
        ["dangling.png", "glibc.csv", "victim", "x.png", "x.svg"],
        "no temporary file left"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn new_image_is_0600_and_own_file_is_replaced() {
    let d = tmp_dir("replace");
    let csv = memlog(&d);
    // a new file, whatever the umask lets through
    for name in ["new.png", "new.svg"] {
        let out = d.join(name);
        let o = plot(&out, &csv);
        assert!(o.status.success(), "{}", describe(&o));
        assert_eq!(mode(&out), 0o600, "{name}: mode of a new image");
    }
    assert_png(&d.join("new.png"));
    assert_svg(&d.join("new.svg"));
    // a regular file of ours (0644, other content, a second hard link) is replaced by a new inode
    for name in ["old.png", "old.svg"] {
        let out = d.join(name);
        std::fs::write(&out, b"an older file of ours, longer than nothing\n").expect("plant our file");
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let link = d.join(format!("{name}.link"));
        std::fs::hard_link(&out, &link).expect("second name");
        let o = plot(&out, &csv);
        assert!(o.status.success(), "{}", describe(&o));
        assert_eq!(mode(&out), 0o600, "{name}: mode after replacing");
        assert_eq!(
            std::fs::read(&link).expect("link"),
            b"an older file of ours, longer than nothing\n",
            "{name}: written through the old inode"
        );
        assert_eq!(std::fs::metadata(&out).expect("stat").nlink(), 1, "{name}: a new file");
    }
    assert_png(&d.join("old.png"));
    assert_svg(&d.join("old.svg"));
    assert_eq!(
        names(&d),
        ["glibc.csv", "new.png", "new.svg", "old.png", "old.png.link", "old.svg", "old.svg.link"],
        "no temporary file left"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn directory_at_out_is_refused() {
    let d = tmp_dir("dir");
    let csv = memlog(&d);
    let out = d.join("x.png");
    std::fs::create_dir(&out).expect("plant a directory");
    let o = plot(&out, &csv);
    assert_refused(&o, &out, "a directory");
    assert_eq!(names(&out), Vec::<String>::new(), "nothing written into the directory");
    assert_eq!(names(&d), ["glibc.csv", "x.png"], "no temporary file left");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn other_users_file_is_refused() {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(uid, 0, "this test needs root: it plants a file owned by another user (chown to 65534)");
    let d = tmp_dir("uid");
    let csv = memlog(&d);
    let out = d.join("x.png");
    std::fs::write(&out, b"theirs\n").expect("plant their file");
    std::os::unix::fs::chown(&out, Some(65534), Some(65534)).expect("chown to nobody");
    let o = plot(&out, &csv);
    assert_refused(&o, &out, "a file owned by uid 65534");
    assert_eq!(std::fs::read(&out).expect("their file"), b"theirs\n");
    assert_eq!(std::fs::metadata(&out).expect("stat").uid(), 65534);
    assert_eq!(names(&d), ["glibc.csv", "x.png"], "no temporary file left");
    let _ = std::fs::remove_dir_all(&d);
}
