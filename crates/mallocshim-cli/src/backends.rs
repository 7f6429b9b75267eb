//! The hidden `mallocshim backends`: the workspace's backend table
//! (`mallocshim_format::backends::TABLE`) printed for scripts, so that they read it instead of
//! keeping a list of their own (`scripts/package.sh` takes the package's Recommends from
//! `--packages`). Reads nothing but the table.

use mallocshim_format::backends::TABLE;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print only the Debian packages of the libraries the shim dlopen()s (one per line).
    #[arg(long)]
    pub packages: bool,
}

/// The table as tab-separated lines (name, package, library, dlopen, environment; `-` for none),
/// or with `--packages` the run-time packages.
pub fn run(a: &Args) -> Result<String, String> {
    let mut out = String::new();
    for b in &TABLE {
        if a.packages {
            if let (true, Some(p)) = (b.dlopen, b.package) {
                out += &format!("{p}\n");
            }
            continue;
        }
        out += &format!(
            "{}\t{}\t{}\t{}\t{}\n",
            b.name(),
            b.package.unwrap_or("-"),
            b.lib_path().unwrap_or("-"),
            if b.dlopen { "dlopen" } else { "linked" },
            if b.env.is_empty() { "-".to_string() } else { b.env.join(",") },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn packages_are_the_dlopened_backends() {
        let p = super::run(&super::Args { packages: true }).unwrap();
        assert_eq!(p, "libtcmalloc-minimal4\nlibmimalloc2.0\n");
        let all = super::run(&super::Args { packages: false }).unwrap();
        assert_eq!(all.lines().count(), mallocshim_format::BACKENDS.len());
        assert!(all.starts_with("glibc\t-\t-\tlinked\t-\n"), "{all}");
    }
}
