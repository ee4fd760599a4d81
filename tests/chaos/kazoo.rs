//! The kazoo workers: Debian's python3-kazoo running kazoo's `Lock`
//! (`tests/python/kazoo_chaos_worker.py`) on the kazoo-layout mutex, beside the zklock workers'
//! `InterProcessMutex::kazoo` slots on the same path and register; the fault that freezes one
//! while it holds; and the figures of that mutex, a table of their own in the report.
//!
//! Both languages hand the register the czxid of their lock node as the fencing token. Nodes
//! are granted in sequence order, which is creation order, so the token rises with every
//! holder whichever language it runs in.

use super::faults::{Outcome, Victim};
use super::*;

const KAZOO_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/python/kazoo_chaos_worker.py"
);

/// Debian's Python, which has Debian's kazoo.
fn python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Fails at once, saying what to install, when Python has no kazoo.
pub(crate) fn check_kazoo() {
    let found = Command::new(python())
        .args(["-c", "import kazoo"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "the chaos suite's kazoo workers need Debian's python3-kazoo for {} \
         (scripts/ensure-zookeeper.sh --kazoo installs it)",
        python()
    );
}

/// The kazoo-layout mutex in one fault.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KazooRow {
    /// Holds (register enters) by zklock slots and by kazoo workers.
    pub(crate) zklock_holds: u64,
    pub(crate) kazoo_holds: u64,
    /// Consecutive holds by different languages.
    pub(crate) handovers: usize,
    pub(crate) kazoo_accepted: u64,
    pub(crate) overlaps: usize,
    pub(crate) stale_accepted: usize,
    pub(crate) stale_rejected: usize,
    /// Writes the kazoo workers' state check (CONNECTED, no LOST since the grant) stopped.
    pub(crate) kazoo_skipped: u64,
    /// A frozen kazoo holder's writes the register logged after it woke: (made, rejected).
    pub(crate) late: Option<(usize, usize)>,
    pub(crate) kazoo_lost: u64,
}

impl WorkerProc {
    /// A kazoo worker: `kazoo_chaos_worker.py <args>`.
    pub(crate) fn kazoo(name: &str, args: &[&str]) -> WorkerProc {
        let mut command = Command::new(python());
        command.arg(KAZOO_SCRIPT).args(args);
        WorkerProc::piped(name, command)
    }

    /// kazoo workers are named `k<n>`.
    pub(crate) fn is_kazoo(&self) -> bool {
        self.name.starts_with('k')
    }
}

impl Lab {
    /// The plan's kazoo workers on the kazoo-layout mutex of `regs`.
    pub(crate) fn spawn_kazoo_workers(&self, regs: &[Register]) -> Vec<WorkerProc> {
        let Some(reg) = regs.iter().find(|r| r.recipe == Recipe::Kazoo) else {
            return Vec::new();
        };
        let (connect, addr) = (self.connect(), reg.register.addr().to_string());
        let session = self.plan.session.as_millis().to_string();
        (1..=self.plan.kazoo_workers)
            .map(|k| {
                let name = format!("k{k}");
                WorkerProc::kazoo(&name, &[&connect, &reg.path, &addr, &name, &session])
            })
            .collect()
    }

    /// SIGSTOP of a kazoo worker while it holds, for 2.5× the session, then SIGCONT: zklock
    /// and kazoo contenders take over once its session expires, and whatever it writes after
    /// waking carries its old token, which the register must refuse.
    pub(crate) fn pause_kazoo_holder(
        &mut self,
        regs: &[Register],
        workers: &mut [WorkerProc],
        row: &mut Row,
        out: &mut Outcome,
    ) {
        let candidates: Vec<usize> = (0..workers.len())
            .filter(|&i| workers[i].is_kazoo())
            .collect();
        if candidates.is_empty() {
            row.notes.push("no kazoo worker to freeze".to_owned());
            return;
        }
        let v = candidates[self.rng.usize(..candidates.len())];
        let Some((at, held)) = self.freeze_holder(regs, &mut workers[v]) else {
            row.violations
                .push(format!("{} never held a lock", workers[v].name));
            return;
        };
        // Frozen, and what it sent before the stop has landed: whatever it logs from now on
        // comes after its wake-up, even a write landing before `out.end` is taken.
        let frozen = Instant::now();
        out.start = at;
        while at.elapsed() < self.plan.session * 5 / 2 {
            thread::sleep(Duration::from_millis(20));
        }
        workers[v].signal("-CONT");
        out.end = Instant::now();
        // Give it a moment to do whatever it does on waking.
        thread::sleep(Duration::from_millis(500) + STEP * WRITES);
        let late: Vec<FenceEvent> = held
            .iter()
            .flat_map(|(ri, token)| {
                regs[*ri]
                    .events_after(frozen)
                    .into_iter()
                    .filter(|e| {
                        e.token == *token
                            && workers[v].owns(&e.worker)
                            && matches!(e.kind, FenceEventKind::Accepted | FenceEventKind::Rejected)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let rejected = late
            .iter()
            .filter(|e| e.kind == FenceEventKind::Rejected)
            .count();
        row.kazoo.late = Some((late.len(), rejected));
        let name = workers[v].name.clone();
        row.notes.push(format!(
            "froze kazoo worker {name} holding {} for {:.1} s",
            held.iter()
                .map(|(ri, t)| format!("{}#{t}", regs[*ri].recipe.name()))
                .collect::<Vec<_>>()
                .join(", "),
            (out.end - out.start).as_secs_f64()
        ));
        out.victim_held = Some(Victim { worker: name, held });
    }

    /// Fills `row.kazoo` from the kazoo-layout mutex's register and the kazoo workers'
    /// reports (once they stopped). The register's overlaps and stale writes are already
    /// violations of the row; a run whose kazoo workers never held is one too.
    pub(crate) fn kazoo_figures(
        &self,
        regs: &[Register],
        workers: &mut [WorkerProc],
        row: &mut Row,
    ) {
        let Some(reg) = regs.iter().find(|r| r.recipe == Recipe::Kazoo) else {
            return;
        };
        let log = reg.register.log();
        let report = FenceReport::check(&log);
        let k = &mut row.kazoo;
        k.overlaps = report.overlaps.len();
        k.stale_accepted = report.stale_accepted.len();
        k.stale_rejected = report.stale_rejected;
        for (worker, s) in &report.workers {
            if worker.starts_with('k') {
                k.kazoo_holds += s.acquisitions;
                k.kazoo_accepted += s.accepted;
            } else {
                k.zklock_holds += s.acquisitions;
            }
        }
        let by_kazoo: Vec<bool> = log
            .iter()
            .filter(|e| e.kind == FenceEventKind::Enter)
            .map(|e| e.worker.starts_with('k'))
            .collect();
        k.handovers = by_kazoo.windows(2).filter(|w| w[0] != w[1]).count();
        for w in workers.iter_mut().filter(|w| w.is_kazoo()) {
            for s in w.stats().into_values() {
                k.kazoo_skipped += s.skipped;
                k.kazoo_lost += s.lost;
            }
        }
        if self.plan.kazoo_workers > 0 && k.kazoo_holds == 0 {
            row.violations
                .push("no kazoo worker held the kazoo-layout mutex".to_owned());
        }
    }
}

/// The kazoo-layout mutex's table: one row per fault (empty when no run had kazoo workers).
pub(crate) fn kazoo_table(rows: &[Row]) -> String {
    let mut out = String::new();
    if rows.iter().all(|r| r.kazoo.kazoo_holds == 0) {
        return out;
    }
    let _ = writeln!(
        out,
        "\nThe kazoo-layout mutex: zklock's `InterProcessMutex::kazoo` and kazoo's `Lock` (Python) on one path and register\n"
    );
    let _ = writeln!(
        out,
        "| # | fault | holds zklock / kazoo | handovers across languages | kazoo writes accepted | overlaps | stale accepted | stale rejected | late writes kazoo (made / rejected) | kazoo writes stopped by state | kazoo Lost |"
    );
    let _ = writeln!(out, "|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|");
    for (i, r) in rows.iter().enumerate() {
        let k = &r.kazoo;
        let _ = writeln!(
            out,
            "| {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            r.fault,
            k.zklock_holds,
            k.kazoo_holds,
            k.handovers,
            k.kazoo_accepted,
            k.overlaps,
            k.stale_accepted,
            k.stale_rejected,
            k.late
                .map(|(m, rej)| format!("{m} / {rej}"))
                .unwrap_or_else(|| "-".into()),
            k.kazoo_skipped,
            k.kazoo_lost
        );
    }
    out
}
