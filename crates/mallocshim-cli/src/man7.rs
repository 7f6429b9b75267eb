//! `mallocshim(7)`, the environment variables: generated (by `mallocshim generate DIR`, which
//! `scripts/package.sh` runs) from the README's options table, compiled in. That table matches
//! the shim's own (`src/hot/config.rs`, `OPTIONS`) row for row and cell for cell
//! (tests/config.rs), so the page cannot drift from what the shim reads. Text only, no I/O.

/// The README, as built.
const README: &str = include_str!("../../../README.md");

/// The options table's rows: (variable, default, meaning), backticks removed.
pub fn options() -> Vec<(String, String, String)> {
    let clean = |c: &str| c.trim().trim_matches('`').replace("\\|", "|");
    README
        .lines()
        .skip_while(|l| !l.starts_with("| variable | default | meaning |"))
        .skip(2)
        .take_while(|l| l.starts_with("| `MALLOCSHIM_"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim().trim_matches('|').split(" | ").collect();
            (cells.len() == 3).then(|| (clean(cells[0]), clean(cells[1]), cells[2].trim().replace('`', "")))
        })
        .collect()
}

/// Escapes roff's special characters in running text.
fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// The page, in roff (man(7) macros).
pub fn page() -> String {
    let mut o = String::new();
    o.push_str(&format!(
        ".TH MALLOCSHIM 7 \"\" \"mallocshim {}\" \"mallocshim\"\n",
        env!("CARGO_PKG_VERSION")
    ));
    o.push_str(".SH NAME\nmallocshim \\- environment variables of libmallocshim.so\n");
    o.push_str(".SH DESCRIPTION\nlibmallocshim.so, preloaded into a program (LD_PRELOAD, mysqld_safe \\-\\-malloc\\-lib, a systemd drop\\-in), reads these variables once, at start. A bad value gives one line prefixed \"mallocshim:\" on stderr and the default is kept. With systemd, set them with Environment= in a drop\\-in; with mysqld_safe (no systemd), export them in /etc/default/mariadb (each line with export).\n");
    o.push_str(".SH ENVIRONMENT\n");
    for (name, default, doc) in options() {
        o.push_str(&format!(".TP\n.B {}\n{} (default: {})\n", roff(&name), roff(&doc), roff(&default)));
    }
    o.push_str(
        ".SH FILES\n/usr/lib/x86_64\\-linux\\-gnu/libmallocshim.so\n.br\n/usr/share/doc/mallocshim/\n",
    );
    o.push_str(".SH SEE ALSO\n.BR mallocshim (1)\n");
    o
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_row_of_the_readme_table_is_in_the_page() {
        let rows = super::options();
        assert!(rows.len() >= 27, "{rows:?}");
        assert_eq!(rows[0].0, "MALLOCSHIM_BACKEND");
        let page = super::page();
        for (name, _, _) in &rows {
            assert!(page.contains(&format!(".B {}", super::roff(name))), "{name}");
        }
    }
}
