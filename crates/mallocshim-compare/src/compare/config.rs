//! The configurations a run compares ([`Config`]: a backend under the shim, with a variant's
//! variables or not, or preloaded directly), and `--variant NAME:K=V`: a configuration of every
//! shim backend with extra environment, so that a setting or a remedy
//! (`MALLOCSHIM_GLIBC_TRIM_THRESHOLD=1M`, `MALLOC_ARENA_MAX=2`, a `MALLOC_CONF`) is measured
//! against the same backend without it, in the same paired rounds.
//! `--live NAME:K=V` is a variant set at run time instead: its cells run on the backend's own
//! server, each right beside the backend's cell of the same workload and thread count, with K
//! set to V through the control channel (`mallocshim set PID K=V`) and set back after, so the
//! pair shares one warm server and its noise.
//! Parsing and checks only; the runner starts each variant like its backend's shim
//! configuration, with these variables after `--env`.

/// One variant: its name (`<backend>+NAME` in the CSV and the report) and its variables, in the
/// order given.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    pub name: String,
    pub envs: Vec<(String, String)>,
    /// Set at run time on the backend's server (`--live`), not by a server of its own.
    pub live: bool,
}

/// One configuration: a backend, under the shim (with a `--variant`'s variables or not) or
/// preloaded directly.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub backend: String,
    pub direct: bool,
    pub variant: Option<Variant>,
}

impl Config {
    /// A backend under the shim (`direct` false) or preloaded directly, no variant.
    pub fn plain(backend: &str, direct: bool) -> Config {
        Config { backend: backend.to_string(), direct, variant: None }
    }

    pub fn name(&self) -> String {
        match (&self.variant, self.direct) {
            (_, true) => format!("{}-direct", self.backend),
            (Some(v), false) => format!("{}+{}", self.backend, v.name),
            (None, false) => self.backend.clone(),
        }
    }
    /// A `--live` variant: run on its backend's server, set at run time.
    pub fn is_live(&self) -> bool {
        self.variant.as_ref().is_some_and(|v| v.live)
    }

    pub fn mode(&self) -> &'static str {
        if self.direct {
            "direct"
        } else {
            "shim"
        }
    }
}

/// The variables the runner sets itself, refused in `--env` and `--variant`.
pub const RUNNER_SETS: [&str; 2] = ["LD_PRELOAD", "MALLOCSHIM_BACKEND"];

/// One `K=V`: the pair, or None when K is empty or one the runner sets.
pub fn var(kv: &str) -> Option<(String, String)> {
    let (k, v) = kv.split_once('=')?;
    (!k.is_empty() && !RUNNER_SETS.contains(&k)).then(|| (k.to_string(), v.to_string()))
}

/// The `--variant` values (`--live` ones with `live`), in order: `NAME:K=V` each; a name given
/// again adds its variable to that variant (V may hold commas and colons: a `MALLOC_CONF`). One
/// line on error.
pub fn parse(values: &[String], live: bool) -> Result<Vec<Variant>, String> {
    let flag = if live { "--live" } else { "--variant" };
    let mut out: Vec<Variant> = Vec::new();
    for s in values {
        let bad = |why: &str| format!("{flag} {s:?}: {why}");
        let (name, kv) = s.split_once(':').ok_or_else(|| bad("want NAME:K=V"))?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(bad("NAME must be letters, digits, '_' or '-'"));
        }
        let pair = var(kv).ok_or_else(|| {
            bad("want NAME:K=V (K not LD_PRELOAD or MALLOCSHIM_BACKEND, which the runner sets)")
        })?;
        match out.iter_mut().find(|v| v.name == name) {
            Some(v) if v.envs.iter().any(|(k, _)| *k == pair.0) => {
                return Err(bad("that variable is given twice"))
            }
            Some(v) => v.envs.push(pair),
            None => out.push(Variant { name: name.to_string(), envs: vec![pair], live }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Vec<Variant>, String> {
        parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>(), false)
    }

    #[test]
    fn a_name_again_adds_a_variable_and_values_keep_colons_and_commas() {
        let v = p(&[
            "thr:MALLOCSHIM_GLIBC_TRIM_THRESHOLD=1M",
            "je:MALLOC_CONF=a:1,b:2",
            "thr:MALLOC_ARENA_MAX=2",
        ])
        .unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].name, "thr");
        assert_eq!(v[0].envs[1], ("MALLOC_ARENA_MAX".into(), "2".into()));
        assert_eq!(v[1].envs, [("MALLOC_CONF".to_string(), "a:1,b:2".to_string())]);
    }

    #[test]
    fn bad_variants_say_why() {
        assert!(p(&["thr"]).unwrap_err().contains("want NAME:K=V"));
        assert!(p(&["a b:K=V"]).unwrap_err().contains("NAME must be"));
        assert!(p(&["x:LD_PRELOAD=/lib.so"]).unwrap_err().contains("which the runner sets"));
        assert!(p(&["x:=1"]).unwrap_err().contains("want NAME:K=V"));
        assert!(p(&["x:K=1", "x:K=2"]).unwrap_err().contains("given twice"));
        let live = parse(&["heap:MALLOCSHIM_PROF_SAMPLE_BYTES=0".to_string()], true).unwrap();
        assert!(live[0].live);
        assert!(parse(&["heap".to_string()], true).unwrap_err().starts_with("--live"));
    }
}
