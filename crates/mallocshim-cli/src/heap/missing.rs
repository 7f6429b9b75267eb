//! The note `heap` prints when the program (the profile's first mapping) has no debug
//! symbols: which module, how many of its frames stayed unnamed, and how to get the symbols on
//! Debian (the `-dbgsym` package of the package that ships the file, from the debug archive)
//! or by hand (`--debug-dir`). Runs `dpkg-query -S` and reads /etc/os-release; never fails:
//! without them the note names the steps in general terms.

use super::symbolize::Unsymbolized;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Debian package that ships `path` (`dpkg-query -S`), if any.
fn package_of(path: &str) -> Option<String> {
    // Merged /usr: dpkg knows /lib/x86_64-linux-gnu/libc.so.6, the process maps /usr/lib/....
    let also = path.strip_prefix("/usr").filter(|r| r.starts_with("/lib")).map(str::to_string);
    std::iter::once(path.to_string()).chain(also).find_map(|p| owner(&p))
}

fn owner(path: &str) -> Option<String> {
    let o = Command::new("dpkg-query").arg("-S").arg(path).output().ok()?;
    if !o.status.success() {
        return None;
    }
    let line = String::from_utf8_lossy(&o.stdout).lines().next()?.to_string();
    // "mariadb-server-core: /usr/sbin/mariadbd" (or "pkg:amd64: path").
    let pkg = line.split(": ").next()?.split(':').next()?.trim().to_string();
    (!pkg.is_empty() && !pkg.contains(',')).then_some(pkg)
}

/// This host's Debian codename (`VERSION_CODENAME` of /etc/os-release), if any.
fn codename() -> Option<String> {
    let s = std::fs::read_to_string("/etc/os-release").ok()?;
    s.lines().find_map(|l| l.strip_prefix("VERSION_CODENAME=")).map(|c| c.trim_matches('"').to_string())
}

/// The note for `m`, given the debug directories searched, the package shipping the file
/// and the host's codename (both looked up by the caller; pure for the tests).
pub fn note_for(m: &Unsymbolized, dirs: &[PathBuf], pkg: Option<&str>, codename: Option<&str>) -> String {
    let file =
        Path::new(&m.path).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or(m.path.clone());
    let id =
        if m.build_id.is_empty() { "no build ID".to_string() } else { format!("build ID {}", m.build_id) };
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let mut o = format!(
        "{file} has no debug symbols ({}, {id}; none under {}): {} of its {} frames are left as \
         file offsets (static and inlined functions; the rest are named from its exported symbols only)\n",
        m.path,
        searched.join(", "),
        m.unnamed,
        m.frames,
    );
    match (pkg, codename) {
        // glibc's symbols are in the main archive.
        (Some("libc6"), _) => o += "  on Debian: apt-get install libc6-dbg, then run heap again\n",
        (Some(p), c) => {
            let suite = c.map(|c| format!("{c}-debug")).unwrap_or_else(|| "<codename>-debug".into());
            o += &format!(
                "  on Debian: echo 'deb http://deb.debian.org/debian-debug {suite} main' > \
                 /etc/apt/sources.list.d/debug.list && apt-get update && apt-get install {p}-dbgsym \
                 (the version of the installed {p}), then run heap again\n"
            );
        }
        (None, _) => {
            o += "  no Debian package ships it: keep its debug file when you strip it (objcopy --only-keep-debug)\n"
        }
    }
    if m.build_id.len() > 2 {
        o += &format!(
            "  or copy its debug file to DIR/.build-id/{}/{}.debug and pass --debug-dir DIR\n",
            &m.build_id[..2],
            &m.build_id[2..]
        );
    } else {
        o += "  or pass --debug-dir DIR with its debug file at DIR/.build-id/xx/rest.debug\n";
    }
    o
}

/// The notes for every module of `list` (at most three).
pub fn notes(list: &[Unsymbolized], dirs: &[PathBuf]) -> String {
    let code = codename();
    list.iter().take(3).map(|m| note_for(m, dirs, package_of(&m.path).as_deref(), code.as_deref())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_package_the_suite_and_the_debug_path() {
        let m = Unsymbolized {
            path: "/usr/sbin/mariadbd".into(),
            build_id: "439da8d94412de2c7eb3e2c5554bc0f31f438dc3".into(),
            frames: 200,
            unnamed: 31,
        };
        let n =
            note_for(&m, &[PathBuf::from("/usr/lib/debug")], Some("mariadb-server-core"), Some("bookworm"));
        assert!(n.starts_with("mariadbd has no debug symbols (/usr/sbin/mariadbd, build ID 439da8d9"), "{n}");
        assert!(n.contains("31 of its 200 frames"), "{n}");
        assert!(n.contains("debian-debug bookworm-debug main"), "{n}");
        assert!(n.contains("apt-get install mariadb-server-core-dbgsym"), "{n}");
        assert!(n.contains("DIR/.build-id/43/9da8d94412de2c7eb3e2c5554bc0f31f438dc3.debug"), "{n}");
        assert_eq!(n.lines().count(), 3, "{n}");
        let bare = note_for(&Unsymbolized { build_id: String::new(), ..m.clone() }, &[], None, None);
        assert!(bare.contains("no Debian package ships it") && bare.contains("xx/rest.debug"), "{bare}");
        let libc = note_for(&m, &[], Some("libc6"), Some("bookworm"));
        assert!(libc.contains("apt-get install libc6-dbg,") && !libc.contains("debian-debug"), "{libc}");
    }
}
