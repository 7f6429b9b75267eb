//! CI smoke run of the scaling bench (`benches/scale.rs`, issue 36 item 1): runs it at T = 1, 2
//! with a tiny iteration count and one round, and checks that it produced a full table: every
//! backend x configuration x mix x metric x T in its JSON, each with a positive finite ns per
//! pair, and every shim row with a finite added cost; its chart (`--plot`) decodes as a PNG of
//! two panels per mix; and `--from` reads the JSON back into the same tables. No bound on any
//! figure: two busy cores measure nothing; the figure comes from a quiet many-core machine
//! (docs/results/scale.md).

mod common;

use std::process::Command;

#[test]
fn the_scale_bench_fills_its_table_at_one_and_two_threads() {
    let dir = common::work_dir().join("scale-smoke");
    let _ = std::fs::remove_dir_all(&dir);
    let (json, md, png) = (dir.join("scale.json"), dir.join("scale.md"), dir.join("scale.png"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.current_dir(common::root()).args(["bench", "--quiet", "--bench", "scale", "--"]);
    c.args(["--threads", "1,2", "--iters", "3000", "--rounds", "1", "--json"])
        .arg(&json)
        .arg("--md")
        .arg(&md)
        .arg("--plot")
        .arg(&png);
    let o = common::run_ok(c, "cargo bench --bench scale");
    let out = common::stdout(&o);
    let text = std::fs::read_to_string(&json).expect("the bench wrote its JSON");
    let rep: serde_json::Value = serde_json::from_str(&text).expect("the JSON parses");
    assert_eq!(rep["schema"], "mallocshim-scale/1");
    let cells = rep["cells"].as_array().expect("cells");
    let combos = ["all", "small"].into_iter().flat_map(|mix| {
        ["cpu", "wall"].into_iter().flat_map(move |metric| {
            common::BACKENDS.into_iter().flat_map(move |b| {
                ["direct", "shim", "shim-profile-off"]
                    .into_iter()
                    .flat_map(move |config| [1, 2].into_iter().map(move |t| (mix, metric, b, config, t)))
            })
        })
    });
    let mut n = 0;
    for (mix, metric, b, config, t) in combos {
        let what = format!("mix={mix} metric={metric} backend={b} config={config} T={t}");
        let mine: Vec<_> = cells
            .iter()
            .filter(|c| c["mix"] == mix && c["metric"] == metric && c["backend"] == b)
            .filter(|c| c["config"] == config && c["threads"] == t)
            .collect();
        assert_eq!(mine.len(), 1, "{what}: one cell wanted\n{out}");
        let ns = mine[0]["ns_per_pair"].as_f64().unwrap_or(f64::NAN);
        assert!(ns.is_finite() && ns > 0.0, "{what}: ns_per_pair {ns}\n{out}");
        let added = mine[0]["added_ns"].as_f64();
        assert_eq!(added.is_some_and(f64::is_finite), config != "direct", "{what}: added_ns {added:?}");
        let row = format!("| {b} | {config} |");
        assert!(out.contains(&row), "{what}: no table row {row:?} on stdout\n{out}");
        n += 1;
    }
    assert_eq!(cells.len(), n, "cells beyond the table's\n{out}");
    assert_eq!(std::fs::read_to_string(&md).expect("the bench wrote its Markdown"), out);

    // The chart: 60 px of title and 420 per panel, two panels per mix (direct; what the shim adds).
    let dec = png::Decoder::new(std::fs::File::open(&png).expect("the bench drew its chart"));
    let info = dec.read_info().expect("a PNG").info().clone();
    assert_eq!((info.width, info.height), (1000, 60 + 420 * 4), "{}", png.display());

    // Read back: the same tables (figures may differ in a last rounded digit: JSON's floats).
    let md2 = dir.join("again.md");
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(common::root()).args(["bench", "--quiet", "--bench", "scale", "--", "--from"]);
    c.arg(&json).arg("--md").arg(&md2);
    common::run_ok(c, "cargo bench --bench scale -- --from");
    let rows = |t: &str| -> Vec<String> {
        t.lines().map(|l| l.split(" | ").take(2).collect::<Vec<_>>().join(" | ")).collect()
    };
    assert_eq!(rows(&std::fs::read_to_string(&md2).unwrap()), rows(&out), "--from's tables differ");
}

#[test]
fn the_scale_bench_rejects_a_bad_argument_in_one_line() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.current_dir(common::root()).args([
        "bench",
        "--quiet",
        "--bench",
        "scale",
        "--",
        "--backends",
        "ptmalloc",
    ]);
    let o = c.output().expect("run cargo bench");
    assert_eq!(o.status.code(), Some(2), "{}", common::describe(&o));
    let err = common::stderr(&o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("mallocshim scale bench:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("ptmalloc"), "{err}");
}
