//! The Markdown report of a run: one row per fault.

use super::*;

pub(crate) fn report(rows: &[Row], header: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}\n");
    let _ = writeln!(
        out,
        "| # | fault | length | acquisitions (mutex / rw-write / semaphore / leader terms / Curator / Curator leader terms / burst) | reads | overlaps | stale accepted | stale rejected | late writes zklock (made / stopped by health) | late writes Curator (made / rejected) | orphans | duplicates | watches before → after | takeover | recovery (any / every lock) | Lost | verdict |"
    );
    let _ = writeln!(
        out,
        "|---:|---|---:|---|---:|---:|---:|---:|---|---|---:|---:|---|---:|---|---:|---|"
    );
    for (i, r) in rows.iter().enumerate() {
        let a = |k: &str| r.acquisitions.get(k).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} s | {} / {} / {} / {} / {} / {} / {} | {} | {} | {} | {} | {} | {} | {} | {} | {} → {} | {} | {} / {} | {} | {} |",
            i + 1,
            r.fault,
            r.length.as_secs_f64(),
            a("mutex"),
            a("rw-write"),
            a("semaphore"),
            a("leader"),
            a("curator"),
            a("curator-leader"),
            a("burst"),
            r.reads,
            r.overlaps,
            r.stale_accepted,
            r.stale_rejected,
            r.late_zklock
                .map(|(m, s)| format!("{m} / {s}"))
                .unwrap_or_else(|| "-".into()),
            r.late_curator
                .map(|(m, s)| format!("{m} / {s}"))
                .unwrap_or_else(|| "-".into()),
            r.orphans,
            r.duplicates,
            r.watches.0,
            r.watches.1,
            ms(r.takeover),
            ms(r.recovery),
            ms(r.recovery_all),
            r.lost,
            if r.violations.is_empty() {
                "clean"
            } else {
                "**VIOLATION**"
            }
        );
    }
    let _ = writeln!(out);
    out.push_str(&kazoo_table(rows));
    let _ = writeln!(out);
    for (i, r) in rows.iter().enumerate() {
        for n in &r.notes {
            let _ = writeln!(out, "- {}: {n}", i + 1);
        }
        for v in &r.violations {
            let _ = writeln!(out, "- {}: **violation**: {v}", i + 1);
        }
    }
    out
}
