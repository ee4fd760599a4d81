//! The ensemble faults: rolling restarts (leader last, leader first) and a reconfiguration
//! that adds two members and removes three of the original ones, while the workers contend.
//! No session may be lost through them; the longest gap between two accepted writes is
//! measured on every lock.

use super::faults::Outcome;
use super::*;

impl Fault {
    /// The ensemble faults, in the order a schedule runs them: the reconfiguration last (it
    /// retires members the lab's proxies point at).
    pub(crate) const ENSEMBLE: [Fault; 3] = [
        Fault::RollingRestart { leader_last: true },
        Fault::RollingRestart { leader_last: false },
        Fault::Reconfigure,
    ];

    /// Whether every session must live through the fault (no `Lost` anywhere).
    pub(crate) fn keeps_sessions(self) -> bool {
        matches!(self, Fault::RollingRestart { .. } | Fault::Reconfigure)
    }
}

impl Lab {
    /// Restarts every member of the configuration in turn, the leader last or first, each
    /// waited for until the quorum is whole again.
    pub(crate) fn rolling_restart(&mut self, leader_last: bool, row: &mut Row) -> Outcome {
        let now = Instant::now();
        let mut out = Outcome {
            start: now,
            end: now,
            victim_held: None,
            restart: Vec::new(),
            given_up: None,
        };
        let order = match self.cluster.restart_order(leader_last) {
            Ok(order) => order,
            Err(e) => {
                row.violations.push(format!("no restart order: {e}"));
                return out;
            }
        };
        out.start = Instant::now();
        if let Err(e) = self.cluster.rolling_restart(&order) {
            row.violations
                .push(format!("the rolling restart did not complete: {e}"));
        }
        out.end = Instant::now();
        row.notes.push(format!(
            "restarted members {order:?} in turn, leader {} {}, in {:.1} s",
            order[if leader_last { order.len() - 1 } else { 0 }],
            if leader_last { "last" } else { "first" },
            (out.end - out.start).as_secs_f64()
        ));
        out
    }

    /// Adds two members, removes three of the original ones (`reconfig`) and stops them, then
    /// waits until every worker's session is served by a member still in the configuration:
    /// the zklock Clients and Curator follow `/zookeeper/config` by themselves.
    pub(crate) fn reconfigure(&mut self, workers: &mut [WorkerProc], row: &mut Row) -> Outcome {
        let now = Instant::now();
        let mut out = Outcome {
            start: now,
            end: now,
            victim_held: None,
            restart: Vec::new(),
            given_up: None,
        };
        let original = self.cluster.members_in_config();
        let leaving: Vec<usize> = original.iter().copied().take(3).collect();
        out.start = Instant::now();
        let added = match self.cluster.add_members(2) {
            Ok(added) => added,
            Err(e) => {
                row.violations.push(format!("cannot add two members: {e}"));
                return out;
            }
        };
        if let Err(e) = self.cluster.remove_members(&leaving) {
            row.violations
                .push(format!("cannot remove members {leaving:?}: {e}"));
            return out;
        }
        for &i in &leaving {
            if let Err(e) = self.cluster.stop(i) {
                row.violations.push(format!("cannot stop member {i}: {e}"));
            }
        }
        let staying = self.cluster.members_in_config();
        let serving = |lab: &Lab, s: i64| lab.member_serving(s).filter(|m| staying.contains(m));
        let end = Instant::now() + patience();
        let mut behind: Vec<String> = Vec::new();
        while Instant::now() < end {
            behind = workers
                .iter_mut()
                .filter(|w| !w.killed)
                .flat_map(|w| {
                    let (_, current) = w.sessions();
                    current.into_iter().collect::<Vec<_>>()
                })
                .filter(|(_, s)| serving(self, *s).is_none())
                .map(|(slot, s)| format!("{slot} (0x{s:x})"))
                .collect();
            if behind.is_empty() {
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
        out.end = Instant::now();
        if !behind.is_empty() {
            row.violations.push(format!(
                "sessions not on a member of the new configuration: {}",
                behind.join(", ")
            ));
        }
        row.notes.push(format!(
            "added members {added:?}, removed and stopped {leaving:?}; every worker session \
             on one of {staying:?} {:.1} s after the first reconfig",
            (out.end - out.start).as_secs_f64()
        ));
        out
    }

    /// Notes the longest gap between two accepted writes on each lock and on any lock, over
    /// the fault (from the last write before its start to the first after its end).
    pub(crate) fn write_gaps(&self, regs: &[Register], out: &Outcome, row: &mut Row) {
        let gap_of = |mut at: Vec<Instant>| -> Option<Duration> {
            at.sort();
            at.windows(2)
                .filter(|w| w[1] >= out.start && w[0] <= out.end)
                .map(|w| w[1] - w[0])
                .max()
        };
        let accepted = |r: &Register| -> Vec<Instant> {
            r.register
                .log()
                .iter()
                .filter(|e| e.kind == FenceEventKind::Accepted)
                .map(|e| r.at(e))
                .collect()
        };
        let per: Vec<String> = regs
            .iter()
            .map(|r| format!("{} {}", r.recipe.name(), ms(gap_of(accepted(r)))))
            .collect();
        let any = gap_of(regs.iter().flat_map(accepted).collect());
        let worst = regs.iter().filter_map(|r| gap_of(accepted(r))).max();
        row.notes.push(format!(
            "longest gap between two accepted writes: {} on one lock ({}), {} on any lock",
            ms(worst),
            per.join(", "),
            ms(any)
        ));
    }
}

/// Runs `faults` in order on a lab of `members` and returns the report; panics on any
/// violation.
pub(crate) fn run_ensemble_schedule(plan: Plan, members: usize, faults: &[Fault], title: &str) {
    let started = Instant::now();
    let mut lab = Lab::start_with(plan, 1, members);
    lab.track_ensemble = true;
    let mut rows = Vec::new();
    for &fault in faults {
        rows.push(lab.run_and_tell(fault, rows.len() + 1));
    }
    let text = report(
        &rows,
        &format!(
            "{title}: {} faults in {:.0} s on {members} members, session {:?}, {} zklock \
             workers (mutex + read-write + semaphore + leader selector each) + {} Curator \
             mutex + {} Curator leader",
            rows.len(),
            started.elapsed().as_secs_f64(),
            plan.session,
            plan.zklock_workers,
            plan.curator_workers,
            plan.curator_leaders
        ),
    );
    println!("{text}");
    assert!(
        rows.iter().all(|r| r.violations.is_empty()),
        "violations:\n{text}"
    );
}
