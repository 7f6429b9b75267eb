//! `diagnose`'s lines on the connections (and server threads) whose held bytes grew the most,
//! each with the `KILL CONNECTION` that frees what the session holds: from the dumps' per-thread
//! `live_bytes` (and, with one dump, its held-bytes checkpoints) joined with the server's
//! PROCESSLIST read now (`held`). Formatting only.

use crate::diagnose::{mib, mibu};
use mallocshim_format::Dump;
use std::fmt::Write;

/// The connections whose held bytes grew from the first to the last dump, or with one dump from
/// its oldest held-bytes checkpoint (`held_checkpoints`, about one history span back) to the
/// dump; with neither, those that hold the most. From the dumps' per-thread `live_bytes` joined
/// with the server's PROCESSLIST now; nothing when the last dump has no heap profile.
pub fn lines(o: &mut String, dumps: &[Dump], conns: &crate::processlist::Conns) {
    let Some(b) = dumps.last().filter(|b| b.prof_sample_bytes > 0) else { return };
    let checkpoint = b.held_checkpoints.first().filter(|_| dumps.len() == 1);
    let from_checkpoint = checkpoint.map(|c| crate::held::at_checkpoint(b, c));
    let a = dumps.first().filter(|_| dumps.len() >= 2).or(from_checkpoint.as_ref());
    let rows = crate::held::grown(a, b, conns, 5);
    let what = match (checkpoint, a) {
        (Some(c), _) => format!(
            "whose held bytes grew the most over the last {:.0} s (from the dump's oldest held-bytes checkpoint)",
            b.unix_time_ms.saturating_sub(c.unix_time_ms) as f64 / 1000.0
        ),
        (None, Some(_)) => "whose held bytes grew the most from the first to the last dump".to_string(),
        (None, None) => "holding the most now".to_string(),
    };
    let _ = writeln!(
        o,
        "connections and threads {what} (heap profile: the live blocks each allocated){}",
        if rows.is_empty() { ": none above 1 MiB and two standard errors" } else { ":" }
    );
    for (who, grew, now, mu) in rows {
        let err = crate::heap::by::std_error(now as i64, b.prof_sample_bytes as i64) as f64;
        let mut l = format!("  {who}: ");
        if a.is_some() {
            l += &format!("+{}, ", mib(grew as f64));
        }
        l += &format!("holds {} ±{:.1}", mibu(now), err / (1u64 << 20) as f64);
        if let Some(m) = mu {
            l += &format!(" (the server's MEMORY_USED {})", mibu(m));
        }
        if let Some(id) = who.strip_prefix("connection ").and_then(|r| r.split([' ', '+']).next()) {
            l += &format!("; ends with the session: KILL CONNECTION {id}");
        }
        let _ = writeln!(o, "{l}");
    }
}
