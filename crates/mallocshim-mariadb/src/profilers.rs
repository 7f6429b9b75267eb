//! How mariadbd is started for each measured mode of the heap-profile benches (and the older
//! `direct`/`shim`/`routing` modes of query_instr): the launch, the library that must show in
//! /proc/PID/maps, the `@@version_malloc_library` expected, and heaptrack's recorder process.
//! Heaptrack is started as `/usr/bin/heaptrack` starts it (a FIFO, `heaptrack_interpret < fifo |
//! gzip -c > file`, the server with `LD_PRELOAD=libheaptrack_preload.so
//! DUMP_HEAPTRACK_OUTPUT=fifo`), but by the harness, so the server stays its direct child (the
//! script would fork it). Nothing here measures.

use crate::error::fail;
use crate::{Launch, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Heaptrack's preload library and interpreter (Debian's `heaptrack` package).
pub const HEAPTRACK_PRELOAD: &str = "/usr/lib/heaptrack/libheaptrack_preload.so";
pub const HEAPTRACK_INTERPRET: &str = "/usr/lib/heaptrack/libexec/heaptrack_interpret";
/// jemalloc's own sampler at the shim's default mean (2^19 = 524288 bytes).
pub const JEPROF_CONF: &str = "prof:true,lg_prof_sample:19";
/// The shim's default heap-profile sampling mean, set explicitly by `shim-heapprof`.
pub const PROF_SAMPLE_BYTES: &str = "524288";
/// The modes that set a heap-profile mean, and the mean each sets (`shim-heapprof`: the default).
pub const HEAP_MEANS: [(&str, &str); 3] =
    [("shim-heapprof", PROF_SAMPLE_BYTES), ("shim-heapprof-1m", "1048576"), ("shim-heapprof-2m", "2097152")];

/// Every mode: `direct` (the backend's allocator without the shim: glibc unpreloaded, or
/// Debian's library preloaded), `shim` (defaults), `routing` (`MALLOCSHIM_PROFILE=off`),
/// `shim-heapprof` (defaults, `MALLOCSHIM_PROF_SAMPLE_BYTES=524288`), `shim-heapprof-1m` and
/// `shim-heapprof-2m` (the same at a mean of 1 and 2 MiB, to price the mean; the harness clears
/// the caller's `MALLOCSHIM_*`, so a rate can only come from a mode), `shim-noheapprof` (the same
/// with `0`), `shim-heapprof-fp` (as `shim-heapprof`, stacks by frame pointers only:
/// `MALLOCSHIM_PROF_UNWIND=fp`, to price the CFI unwinding), `shim-recording` (defaults, with a
/// recording window open from start to exit: `MALLOCSHIM_RECORD=<dir>/trace.%p.mst`, budget 8G,
/// to price the traced entry points; issue 24), `shim-nohistory` (defaults with the memory
/// history off, `MALLOCSHIM_HISTORY_MS=0`, to price the ring against `shim`), `jeprof` (jemalloc
/// only: Debian's libjemalloc2 preloaded with
/// `MALLOC_CONF=prof:true,lg_prof_sample:19`), `heaptrack` (glibc only: heaptrack's preload).
pub const MODES: [&str; 12] = [
    "direct",
    "shim",
    "routing",
    "shim-heapprof",
    "shim-heapprof-1m",
    "shim-heapprof-2m",
    "shim-noheapprof",
    "shim-heapprof-fp",
    "shim-recording",
    "shim-nohistory",
    "jeprof",
    "heaptrack",
];

/// Whether `mode` applies to `backend` (jeprof needs jemalloc, heaptrack glibc's malloc).
pub fn valid(backend: &str, mode: &str) -> bool {
    match mode {
        "jeprof" => backend == "jemalloc",
        "heaptrack" => backend == "glibc",
        m => MODES.contains(&m),
    }
}

/// Whether `@@version_malloc_library` is what `backend`/`mode` should show.
pub fn expected_lib(backend: &str, mode: &str, lib: &str) -> bool {
    match (mode, backend) {
        ("heaptrack", _) | ("direct", "glibc") => lib == "system",
        ("direct", "jemalloc") | ("jeprof", _) => lib.starts_with("jemalloc 5."),
        ("direct", "tcmalloc") => lib.starts_with("tcmalloc gperftools"),
        // MariaDB names jemalloc (by `mallctl`) and tcmalloc (by `tc_version`), else "system".
        ("direct", "mimalloc") => lib == "system",
        ("direct", _) => false,
        (_, b) => lib.starts_with("jemalloc mallocshim ") && lib.contains(&format!("({b} ")),
    }
}

/// One mode's start: the launch, the library its maps must hold (None: none of the allocators'
/// nor the shim's), and heaptrack's recorder when the mode is heaptrack.
pub struct Started {
    pub launch: Launch,
    pub lib: Option<String>,
    pub heaptrack: Option<Heaptrack>,
}

/// The launch of `backend`/`mode`; `dir` receives heaptrack's FIFO and file and jemalloc's final
/// profile (`prof_final`, written at exit: proof that its profiler ran, free during the run).
pub fn start(shim: &Path, backend: &str, mode: &str, dir: &Path) -> Result<Started> {
    if !valid(backend, mode) {
        fail!("mode {mode} does not apply to backend {backend}");
    }
    let shim_s = shim.display().to_string();
    let heap_mean = HEAP_MEANS.iter().find(|e| e.0 == mode).map(|e| e.1);
    let (launch, lib, heaptrack) = match (mode, backend) {
        ("direct", b) => match crate::direct_lib(b) {
            Some(lib) => (Launch::preload(lib), Some(lib.into()), None),
            None => (Launch::plain(), None, None),
        },
        ("jeprof", _) => {
            crate::require_file(crate::JEMALLOC_LIB)?;
            let conf = format!("{JEPROF_CONF},prof_final:true,prof_prefix:{}/jeprof", dir.display());
            (
                Launch::preload(crate::JEMALLOC_LIB).var("MALLOC_CONF", conf),
                Some(crate::JEMALLOC_LIB.into()),
                None,
            )
        }
        ("heaptrack", _) => {
            let h = Heaptrack::start(dir)?;
            (h.launch(), Some(HEAPTRACK_PRELOAD.into()), Some(h))
        }
        ("routing", b) => (Launch::shim(shim, b).var("MALLOCSHIM_PROFILE", "off"), Some(shim_s), None),
        (_, b) if heap_mean.is_some() => (
            Launch::shim(shim, b).var("MALLOCSHIM_PROF_SAMPLE_BYTES", heap_mean.unwrap_or_default()),
            Some(shim_s),
            None,
        ),
        ("shim-heapprof-fp", b) => (
            Launch::shim(shim, b)
                .var("MALLOCSHIM_PROF_SAMPLE_BYTES", PROF_SAMPLE_BYTES)
                .var("MALLOCSHIM_PROF_UNWIND", "fp"),
            Some(shim_s),
            None,
        ),
        ("shim-recording", b) => (
            Launch::shim(shim, b)
                .var("MALLOCSHIM_RECORD", dir.join("trace.%p.mst").display().to_string())
                .var("MALLOCSHIM_RECORD_MAX_BYTES", "8G"),
            Some(shim_s),
            None,
        ),
        ("shim-nohistory", b) => {
            (Launch::shim(shim, b).var("MALLOCSHIM_HISTORY_MS", "0"), Some(shim_s), None)
        }
        ("shim-noheapprof", b) => {
            (Launch::shim(shim, b).var("MALLOCSHIM_PROF_SAMPLE_BYTES", "0"), Some(shim_s), None)
        }
        (_, b) => (Launch::shim(shim, b), Some(shim_s), None),
    };
    Ok(Started { launch, lib, heaptrack })
}

/// The jemalloc profiles `prof_final` wrote in `dir` (jeprof modes).
pub fn jeprof_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    v.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("jeprof.") && n.ends_with(".heap"))
    });
    v
}

/// Heaptrack's recorder: `heaptrack_interpret` reading the FIFO, its output gzip'ed to a file.
pub struct Heaptrack {
    fifo: PathBuf,
    out: PathBuf,
    interpret: Option<Child>,
    gzip: Option<Child>,
}

impl Heaptrack {
    /// Makes `dir/heaptrack.fifo` and starts `heaptrack_interpret < fifo | gzip -c >
    /// dir/heaptrack.mariadbd.gz` (the interpreter opens the FIFO once the server's preload does).
    pub fn start(dir: &Path) -> Result<Heaptrack> {
        crate::require_file(HEAPTRACK_PRELOAD)?;
        crate::require_file(HEAPTRACK_INTERPRET)?;
        let gzip_bin = crate::require("gzip")?;
        let sh = crate::require("sh")?;
        let fifo = dir.join("heaptrack.fifo");
        let out = dir.join("heaptrack.mariadbd.gz");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.display().to_string()).map_err(|e| e.to_string())?;
        // SAFETY: mkfifo(3) with a NUL-terminated path we own.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            fail!("mkfifo {}: {}", fifo.display(), std::io::Error::last_os_error());
        }
        let file = std::fs::File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        let mut gzip = Command::new(gzip_bin);
        gzip.arg("-c").stdin(Stdio::piped()).stdout(file).stderr(Stdio::null());
        pdeathsig(&mut gzip);
        let mut gzip = gzip.spawn().map_err(|e| format!("gzip: {e}"))?;
        let pipe = gzip.stdin.take().ok_or_else(|| "gzip's stdin".to_string())?;
        // `sh` opens the FIFO (blocking until the server opens it) and execs the interpreter.
        let mut interp = Command::new(sh);
        interp
            .arg("-c")
            .arg("exec \"$0\" < \"$1\"")
            .arg(HEAPTRACK_INTERPRET)
            .arg(&fifo)
            .stdin(Stdio::null())
            .stdout(pipe)
            .stderr(Stdio::null());
        pdeathsig(&mut interp);
        let interpret = interp.spawn().map_err(|e| format!("heaptrack_interpret: {e}"))?;
        Ok(Heaptrack { fifo, out, interpret: Some(interpret), gzip: Some(gzip) })
    }

    /// The server's launch: heaptrack's preload writing to the FIFO (glibc's malloc beneath).
    pub fn launch(&self) -> Launch {
        Launch::preload(HEAPTRACK_PRELOAD).var("DUMP_HEAPTRACK_OUTPUT", self.fifo.display().to_string())
    }

    /// Waits (after the server stopped) for the interpreter and gzip to finish, up to `timeout`,
    /// and returns the size of the recorded file in bytes. Kills them past the timeout.
    pub fn finish(mut self, timeout: Duration) -> Result<u64> {
        let t0 = Instant::now();
        for c in [self.interpret.as_mut(), self.gzip.as_mut()].into_iter().flatten() {
            loop {
                if c.try_wait().map_err(|e| e.to_string())?.is_some() {
                    break;
                }
                if t0.elapsed() > timeout {
                    fail!(
                        "heaptrack_interpret/gzip still running {} s after the server stopped",
                        timeout.as_secs()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.interpret = None;
        self.gzip = None;
        let _ = std::fs::remove_file(&self.fifo);
        Ok(std::fs::metadata(&self.out).map(|m| m.len()).unwrap_or(0))
    }

    /// The pids of its two processes (`heaptrack_interpret`, then gzip) while they run: their
    /// CPU time is the profiler's cost beside the server's (read with [`crate::procfs::cpu_seconds`]).
    pub fn helper_pids(&self) -> Vec<u32> {
        [self.interpret.as_ref(), self.gzip.as_ref()].into_iter().flatten().map(|c| c.id()).collect()
    }

    /// The recorded file.
    pub fn output(&self) -> &Path {
        &self.out
    }
}

impl Drop for Heaptrack {
    fn drop(&mut self) {
        for c in [self.interpret.take(), self.gzip.take()].into_iter().flatten() {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.fifo);
    }
}

fn pdeathsig(c: &mut Command) {
    crate::clean_env(c);
    // SAFETY: prctl(2) is async-signal-safe; it only sets the child's parent-death signal.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_libraries() {
        assert!(valid("jemalloc", "jeprof") && !valid("glibc", "jeprof") && !valid("tcmalloc", "jeprof"));
        assert!(valid("glibc", "heaptrack") && !valid("jemalloc", "heaptrack"));
        assert!(valid("tcmalloc", "shim-heapprof") && !valid("glibc", "sometimes"));
        let je = "jemalloc 5.3.0-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c";
        let shim = "jemalloc mallocshim 0.1.0 (glibc 2.36)";
        assert!(expected_lib("jemalloc", "jeprof", je) && !expected_lib("jemalloc", "jeprof", shim));
        assert!(expected_lib("glibc", "heaptrack", "system") && !expected_lib("glibc", "heaptrack", shim));
        assert!(
            expected_lib("glibc", "shim-heapprof", shim) && expected_lib("glibc", "shim-noheapprof", shim)
        );
        assert!(!expected_lib("jemalloc", "shim-heapprof", shim) && !expected_lib("glibc", "direct", shim));
    }

    #[test]
    fn launches() {
        let dir = std::env::temp_dir();
        let s = start(Path::new("/x/libmallocshim.so"), "glibc", "shim-noheapprof", &dir).unwrap();
        assert_eq!(s.launch.get("MALLOCSHIM_PROF_SAMPLE_BYTES"), Some("0"));
        assert_eq!(s.launch.get("LD_PRELOAD"), Some("/x/libmallocshim.so"));
        let s = start(Path::new("/x/libmallocshim.so"), "jemalloc", "shim-heapprof", &dir).unwrap();
        assert_eq!(s.launch.get("MALLOCSHIM_PROF_SAMPLE_BYTES"), Some(PROF_SAMPLE_BYTES));
        for (mode, mean) in [("shim-heapprof-1m", "1048576"), ("shim-heapprof-2m", "2097152")] {
            let s = start(Path::new("/x/libmallocshim.so"), "mimalloc", mode, &dir).unwrap();
            assert_eq!(s.launch.get("MALLOCSHIM_PROF_SAMPLE_BYTES"), Some(mean), "{mode}");
            assert!(expected_lib("mimalloc", mode, "jemalloc mallocshim 0.1.0 (mimalloc 2.0.9)"), "{mode}");
        }
        let s = start(Path::new("/x/libmallocshim.so"), "jemalloc", "jeprof", &dir).unwrap();
        assert!(s.launch.get("MALLOC_CONF").unwrap().starts_with(JEPROF_CONF));
        assert_eq!(s.launch.get("LD_PRELOAD"), Some(crate::JEMALLOC_LIB));
        assert!(start(Path::new("/x/libmallocshim.so"), "glibc", "jeprof", &dir).is_err());
    }
}
