//! `mallocshim plot`: memlog CSVs (`MALLOCSHIM_MEMLOG`) on one figure — RSS and the backend's
//! allocated bytes over time — drawn by the chart code the comparison runner uses. The image is a
//! new file of mode 0600 (secure_write): a symlink, a directory or another user's file at `--out`
//! is an error and stays untouched; a regular file of ours there is replaced.

use crate::plot;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(
    about = "Draw memlog CSVs (MALLOCSHIM_MEMLOG) as one figure",
    long_about = "Draw memlog CSVs (MALLOCSHIM_MEMLOG) as one figure: RSS and the backend's allocated \
                  bytes over time (seconds since each file's first line), one line per CSV. SVG when \
                  --out ends in .svg, PNG otherwise; the file is created mode 0600 and never written \
                  through a symlink.\n\n\
                  Exit status: 0 on success, 2 on any error (one line, prefixed \"mallocshim plot:\").",
    after_help = "Example:\n  mallocshim plot --out mem.png glibc.csv jemalloc.csv tcmalloc.csv"
)]
pub struct Args {
    /// Output image: SVG when the name ends in .svg, PNG otherwise.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Legend labels, comma-separated, one per CSV (default: each file's stem).
    #[arg(long, value_name = "A,B,...")]
    pub label: Option<String>,
    /// Figure title.
    #[arg(long, default_value = "mallocshim memlog")]
    pub title: String,
    /// Memlog CSV files (header unix_ms,rss_bytes,...), one line each on the plot.
    #[arg(value_name = "MEMLOG.csv", required = true)]
    pub csvs: Vec<PathBuf>,
}

/// `mallocshim plot`: reads every CSV, then draws them on one figure; prints the image's path.
pub fn run(args: &Args) -> Result<String, String> {
    let (out, label, title, csvs) = (&args.out, args.label.as_deref(), &args.title, &args.csvs);
    let labels: Vec<String> = match label {
        Some(l) => {
            let v: Vec<String> = l.split(',').map(|s| s.trim().to_string()).collect();
            if v.len() != csvs.len() || v.iter().any(|s| s.is_empty()) {
                return Err(format!(
                    "--label wants {} non-empty names separated by commas (one per CSV), got {l:?}",
                    csvs.len()
                ));
            }
            v
        }
        None => csvs
            .iter()
            .map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default())
            .collect(),
    };
    let mut files = Vec::new();
    for (p, l) in csvs.iter().zip(labels) {
        let rows = mallocshim_format::memlog::read(p)?;
        if rows.is_empty() {
            return Err(format!("{}: no data lines after the header", p.display()));
        }
        files.push((l, rows));
    }
    plot::draw(out, title, &plot::memlog_figure(&files))?;
    Ok(format!("wrote {} ({} lines)\n", out.display(), files.len()))
}
