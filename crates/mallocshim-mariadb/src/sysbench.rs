//! A sysbench run (any lua workload, threads, time or events) and the figures of its report
//! (sysbench 1.0's text: qps, tps, queries, 95th percentile latency, errors).

use std::path::PathBuf;

/// What to run: `sysbench WORKLOAD <connection> --threads --time --events ... run`.
#[derive(Clone, Debug)]
pub struct Sysbench {
    /// A built-in workload (`oltp_read_only`, `oltp_point_select`) or a path to a `.lua` script.
    pub workload: String,
    pub threads: u32,
    /// `--time` in seconds (0: no limit).
    pub time_s: u64,
    /// `--events` (0: no limit).
    pub events: u64,
    /// The database (`sbtest`).
    pub db: String,
    /// Pass the instance's `--tables` and `--table-size` (the oltp_* workloads on `sbtest`; a
    /// custom lua script may reject them). True unless [`Sysbench::db`] names another database.
    pub oltp_dataset: bool,
    /// More arguments, after the harness's.
    pub extra: Vec<String>,
    /// Where its output goes (default: a new file in the instance's directory).
    pub log: Option<PathBuf>,
}

impl Sysbench {
    pub fn new(workload: impl Into<String>, threads: u32) -> Sysbench {
        Sysbench {
            workload: workload.into(),
            threads,
            time_s: 0,
            events: 0,
            db: "sbtest".into(),
            oltp_dataset: true,
            extra: Vec::new(),
            log: None,
        }
    }
    /// Runs for `secs` seconds (events unlimited).
    pub fn time(mut self, secs: u64) -> Sysbench {
        self.time_s = secs;
        self
    }
    /// Runs `n` events (time unlimited unless set too).
    pub fn events(mut self, n: u64) -> Sysbench {
        self.events = n;
        self
    }
    /// Another database than `sbtest` (then without the oltp dataset's options).
    pub fn db(mut self, db: &str) -> Sysbench {
        self.oltp_dataset = db == "sbtest";
        self.db = db.into();
        self
    }
    /// Writes its output to `path`.
    pub fn log(mut self, path: impl Into<PathBuf>) -> Sysbench {
        self.log = Some(path.into());
        self
    }
    pub fn arg(mut self, a: impl Into<String>) -> Sysbench {
        self.extra.push(a.into());
        self
    }

    pub(crate) fn run_args(&self) -> Vec<String> {
        let mut v = vec![
            format!("--threads={}", self.threads),
            format!("--time={}", self.time_s),
            format!("--events={}", self.events),
            "--report-interval=0".into(),
            "--histogram=off".into(),
            "--percentile=95".into(),
        ];
        v.extend(self.extra.iter().cloned());
        v.push("run".into());
        v
    }
}

/// sysbench's figures. A figure missing from the report is `None`.
#[derive(Clone, Debug, Default)]
pub struct SysbenchReport {
    /// sysbench's exit status (shell style).
    pub exit: i32,
    /// Queries per second and their total.
    pub qps: Option<f64>,
    pub queries: Option<u64>,
    /// Transactions (events) per second.
    pub tps: Option<f64>,
    /// 95th percentile latency of an event, ms.
    pub p95_ms: Option<f64>,
    pub ignored_errors: Option<u64>,
    pub reconnects: Option<u64>,
    /// Lines holding `FATAL`.
    pub fatal_lines: u64,
    /// ignored errors + reconnects + FATAL lines; at least 1 when the report lacks either count.
    pub errors: u64,
    /// The report's file.
    pub output: PathBuf,
}

impl SysbenchReport {
    /// Parses sysbench 1.0's report.
    pub fn parse(text: &str, exit: i32, output: PathBuf) -> SysbenchReport {
        let mut r = SysbenchReport { exit, output, ..SysbenchReport::default() };
        // "queries:  123456 (1234.56 per sec.)"
        let counted = |rest: &str| -> (Option<u64>, Option<f64>) {
            let mut it = rest.split_whitespace();
            let n = it.next().and_then(|v| v.parse().ok());
            let rate = it.next().and_then(|v| v.trim_start_matches('(').parse().ok());
            (n, rate)
        };
        for l in text.lines() {
            let t = l.trim_start();
            if let Some(rest) = t.strip_prefix("queries:") {
                if r.qps.is_none() {
                    (r.queries, r.qps) = counted(rest);
                }
            } else if let Some(rest) = t.strip_prefix("transactions:") {
                r.tps = r.tps.or(counted(rest).1);
            } else if let Some(rest) = t.strip_prefix("ignored errors:") {
                r.ignored_errors = r.ignored_errors.or(counted(rest).0);
            } else if let Some(rest) = t.strip_prefix("reconnects:") {
                r.reconnects = r.reconnects.or(counted(rest).0);
            } else if let Some(rest) = t.strip_prefix("95th percentile:") {
                r.p95_ms = r.p95_ms.or(rest.trim().parse().ok());
            }
            if l.contains("FATAL") {
                r.fatal_lines += 1;
            }
        }
        r.errors = r.ignored_errors.unwrap_or(0) + r.reconnects.unwrap_or(0) + r.fatal_lines;
        if r.ignored_errors.is_none() || r.reconnects.is_none() {
            r.errors = r.errors.max(1); // no complete report: that is an error
        }
        r
    }

    /// qps as text ("n/a" when missing), for tables.
    pub fn qps_text(&self) -> String {
        self.qps.map(|q| format!("{q:.2}")).unwrap_or_else(|| "n/a".into())
    }

    /// Exit 0 and no error.
    pub fn ok(&self) -> bool {
        self.exit == 0 && self.errors == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "SQL statistics:
    queries performed:
        read:                            54782
        other:                           7826
        total:                           62608
    transactions:                        3913   (390.63 per sec.)
    queries:                             62608  (6250.01 per sec.)
    ignored errors:                      2      (0.20 per sec.)
    reconnects:                          1      (0.10 per sec.)

Latency (ms):
         min:                                    4.11
         95th percentile:                       17.95
";

    #[test]
    fn parses_sysbench_1_0() {
        let r = SysbenchReport::parse(REPORT, 0, PathBuf::new());
        assert_eq!(r.qps, Some(6250.01));
        assert_eq!(r.queries, Some(62608));
        assert_eq!(r.tps, Some(390.63));
        assert_eq!(r.p95_ms, Some(17.95));
        assert_eq!(r.errors, 3);
        assert!(!r.ok());
    }

    #[test]
    fn fatal_and_missing_report_are_errors() {
        let r = SysbenchReport::parse("FATAL: mysql_drv_query() returned error 1064\n", 1, PathBuf::new());
        assert_eq!(r.qps, None);
        assert_eq!(r.errors, 1);
        let r = SysbenchReport::parse("", 0, PathBuf::new());
        assert_eq!(r.errors, 1);
        let clean = REPORT.replace("2      (0.20", "0      (0.00").replace("1      (0.10", "0      (0.00");
        assert!(SysbenchReport::parse(&clean, 0, PathBuf::new()).ok());
    }
}
