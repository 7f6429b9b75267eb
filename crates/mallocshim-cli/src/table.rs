//! Tables for the terminal and for Markdown, and the cell formatting `report` and `diff` share.

use clap::ValueEnum;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for a terminal.
    Text,
    /// Markdown tables (pipes), for issues and pull requests.
    Markdown,
}

pub fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1u64 << 20) as f64)
}

/// A percentile, or "-" when the row has no samples (the dump writes 0 then).
pub fn pct(sampled: u64, ns: u64) -> String {
    if sampled == 0 {
        "-".into()
    } else {
        ns.to_string()
    }
}

/// B/A with two decimals; "-" when either side is missing or has no samples.
pub fn ratio(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> String {
    match (a, b) {
        (Some((sa, va)), Some((sb, vb))) if sa > 0 && sb > 0 && va > 0 => {
            format!("{:.2}", vb as f64 / va as f64)
        }
        _ => "-".into(),
    }
}

pub fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// One line about a dump: backend, pid, uptime, sampling.
pub fn describe(d: &mallocshim_format::Dump) -> String {
    let calls = if d.profiling {
        format!("sampling 1 call in {}", d.sample_every)
    } else {
        "profiling off (MALLOCSHIM_PROFILE=off): calls neither counted nor timed, memory figures only".into()
    };
    format!("backend {} pid {}, uptime {:.1}s, {calls}", d.backend, d.pid, d.uptime_s)
}

#[derive(Copy, Clone, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table rendered as aligned text or as Markdown.
pub struct Table {
    head: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(cols: &[(&str, Align)]) -> Table {
        Table {
            head: cols.iter().map(|c| c.0.to_string()).collect(),
            align: cols.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.head.len());
        self.rows.push(cells);
    }

    pub fn render(&self, fmt: Format, out: &mut String) {
        let esc = |s: &str| if fmt == Format::Markdown { s.replace('|', "\\|") } else { s.to_string() };
        let head: Vec<String> = self.head.iter().map(|s| esc(s)).collect();
        let rows: Vec<Vec<String>> = self.rows.iter().map(|r| r.iter().map(|s| esc(s)).collect()).collect();
        let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String], out: &mut String| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| match self.align[i] {
                    Align::Left => format!("{c:<width$}", width = w[i]),
                    Align::Right => format!("{c:>width$}", width = w[i]),
                })
                .collect();
            match fmt {
                Format::Text => out.push_str(parts.join("  ").trim_end()),
                Format::Markdown => {
                    out.push_str("| ");
                    out.push_str(&parts.join(" | "));
                    out.push_str(" |");
                }
            }
            out.push('\n');
        };
        line(&head, out);
        match fmt {
            Format::Text => {
                let rule: Vec<String> = w.iter().map(|&n| "-".repeat(n)).collect();
                out.push_str(&rule.join("  "));
                out.push('\n');
            }
            Format::Markdown => {
                let rule: Vec<String> = w
                    .iter()
                    .zip(&self.align)
                    .map(|(&n, a)| match a {
                        Align::Left => format!(":{}", "-".repeat(n.max(2) - 1)),
                        Align::Right => format!("{}:", "-".repeat(n.max(2) - 1)),
                    })
                    .collect();
                out.push_str("| ");
                out.push_str(&rule.join(" | "));
                out.push_str(" |\n");
            }
        }
        for r in &rows {
            line(r, out);
        }
    }
}

pub fn heading(fmt: Format, text: &str, out: &mut String) {
    match fmt {
        Format::Text => {
            out.push_str(text);
            out.push('\n');
        }
        Format::Markdown => {
            out.push_str("### ");
            out.push_str(text);
            out.push_str("\n\n");
        }
    }
}

/// Milliseconds since the epoch as a wall-clock time, `2026-11-28 19:50:21 UTC` (the proleptic
/// Gregorian calendar, days to civil date after Howard Hinnant's `civil_from_days`).
pub fn utc(unix_ms: u64) -> String {
    let (days, secs) = ((unix_ms / 1000) / 86400, (unix_ms / 1000) % 86400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Seconds between two epoch-millisecond times, for "N s apart".
pub fn apart_s(a_ms: u64, b_ms: u64) -> String {
    let s = b_ms.abs_diff(a_ms) as f64 / 1000.0;
    if s >= 10.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(super::utc(1_795_228_865_338), "2026-11-21 02:41:05 UTC");
        assert_eq!(super::apart_s(1000, 109_400), "108 s");
    }
}
