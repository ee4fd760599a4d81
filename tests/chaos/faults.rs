//! The faults: each one applied to the lab, waited out, and its outcome measured.

use super::*;

/// A holder frozen or killed by a fault.
pub(crate) struct Victim {
    pub(crate) worker: String,
    /// (register index, token) of the holds it had.
    pub(crate) held: Vec<(usize, u64)>,
}

/// Sessions a fault made clients give up, to look for their nodes afterwards.
pub(crate) struct GivenUp {
    /// Every session the workers had before the fault.
    pub(crate) before: BTreeSet<i64>,
}

pub(crate) struct Outcome {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) victim_held: Option<Victim>,
    /// A member to restart after recovery.
    pub(crate) restart: Vec<usize>,
    pub(crate) given_up: Option<GivenUp>,
}

impl Lab {
    pub(crate) fn pick(&mut self, workers: &[WorkerProc], curator: bool) -> usize {
        let candidates: Vec<usize> = (0..workers.len())
            .filter(|&i| {
                workers[i].is_java() == curator
                    && !workers[i].name.starts_with('b')
                    && !workers[i].is_kazoo()
            })
            .collect();
        candidates[self.rng.usize(..candidates.len())]
    }

    /// Freezes `workers[v]` while it holds a lock: (frozen at, its holds).
    pub(crate) fn freeze_holder(
        &self,
        regs: &[Register],
        w: &mut WorkerProc,
    ) -> Option<(Instant, Vec<(usize, u64)>)> {
        let holds = |w: &WorkerProc| -> Vec<(usize, u64)> {
            regs.iter()
                .enumerate()
                .flat_map(|(i, r)| {
                    r.inside()
                        .into_iter()
                        .filter(|(name, _)| w.owns(name))
                        .map(move |(_, t)| (i, t))
                })
                .collect()
        };
        let end = Instant::now() + patience();
        while Instant::now() < end {
            if holds(w).is_empty() {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            w.signal("-STOP");
            let at = Instant::now();
            // Let what it sent before the stop arrive, then look again: its log is frozen.
            thread::sleep(Duration::from_millis(100));
            let held = holds(w);
            if !held.is_empty() {
                return Some((at, held));
            }
            w.signal("-CONT");
        }
        None
    }

    pub(crate) fn inject(
        &mut self,
        fault: Fault,
        regs: &[Register],
        workers: &mut Vec<WorkerProc>,
        row: &mut Row,
    ) -> Outcome {
        let session = self.plan.session;
        let now = Instant::now();
        let mut out = Outcome {
            start: now,
            end: now,
            victim_held: None,
            restart: Vec::new(),
            given_up: None,
        };
        match fault {
            Fault::LeaderKill => {
                let leader = self.cluster.leader().unwrap_or(0);
                out.start = Instant::now();
                self.cluster.kill(leader).unwrap();
                out.end = out.start;
                out.restart.push(leader);
                row.notes.push(format!("killed leader member {leader}"));
            }
            Fault::PauseHolder { curator } => {
                let v = self.pick(workers, curator);
                let Some((at, held)) = self.freeze_holder(regs, &mut workers[v]) else {
                    row.violations
                        .push(format!("{} never held a lock", workers[v].name));
                    return out;
                };
                // Frozen, and what it sent before the stop has landed: what it logs from now on
                // comes after its wake-up, even a write landing before `out.end` is taken.
                let frozen = Instant::now();
                out.start = at;
                while at.elapsed() < session * 5 / 2 {
                    thread::sleep(Duration::from_millis(20));
                }
                workers[v].signal("-CONT");
                out.end = Instant::now();
                // Writes of the frozen holds that the register logged after the wake-up.
                let name = workers[v].name.clone();
                let late: Vec<FenceEvent> = {
                    // Give it a moment to do whatever it does on waking.
                    thread::sleep(Duration::from_millis(500) + STEP * WRITES);
                    held.iter()
                        .flat_map(|(ri, token)| {
                            regs[*ri]
                                .events_after(frozen)
                                .into_iter()
                                .filter(|e| {
                                    e.token == *token
                                        && workers[v].owns(&e.worker)
                                        && matches!(
                                            e.kind,
                                            FenceEventKind::Accepted | FenceEventKind::Rejected
                                        )
                                })
                                .collect::<Vec<_>>()
                        })
                        .collect()
                };
                let rejected = late
                    .iter()
                    .filter(|e| e.kind == FenceEventKind::Rejected)
                    .count();
                if curator {
                    row.late_curator = Some((late.len(), rejected));
                } else {
                    row.late_zklock = Some((late.len(), 0));
                    if !late.is_empty() {
                        row.violations.push(format!(
                            "zklock holder {name} wrote {} times after waking ({rejected} rejected)",
                            late.len()
                        ));
                    }
                }
                row.notes.push(format!(
                    "froze {name} holding {} for {:.1} s",
                    held.iter()
                        .map(|(ri, t)| format!("{}#{t}", regs[*ri].recipe.name()))
                        .collect::<Vec<_>>()
                        .join(", "),
                    (out.end - out.start).as_secs_f64()
                ));
                out.victim_held = Some(Victim { worker: name, held });
            }
            Fault::KillHolder => {
                let v = self.pick(workers, false);
                let Some((_, held)) = self.freeze_holder(regs, &mut workers[v]) else {
                    row.violations
                        .push(format!("{} never held a lock", workers[v].name));
                    return out;
                };
                workers[v].signal("-KILL");
                workers[v].killed = true;
                out.start = Instant::now();
                out.end = out.start;
                let name = workers[v].name.clone();
                row.notes.push(format!(
                    "killed {name} holding {}",
                    held.iter()
                        .map(|(ri, t)| format!("{}#{t}", regs[*ri].recipe.name()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                out.victim_held = Some(Victim { worker: name, held });
            }
            Fault::PauseServer => {
                let v = self.pick(workers, false);
                let (_, current) = workers[v].sessions();
                let member = current.values().find_map(|s| self.member_serving(*s));
                let Some(member) = member else {
                    row.notes.push("no server found for the victim".to_owned());
                    return out;
                };
                let leader = self.cluster.leader() == Some(member);
                out.start = Instant::now();
                self.cluster.pause(member).unwrap();
                while out.start.elapsed() < session * 3 / 2 {
                    thread::sleep(Duration::from_millis(20));
                }
                self.cluster.resume(member).unwrap();
                out.end = Instant::now();
                row.notes.push(format!(
                    "froze member {member}{} (serving {}) for {:.1} s",
                    if leader { ", the leader" } else { "" },
                    workers[v].name,
                    (out.end - out.start).as_secs_f64()
                ));
            }
            Fault::CutOff => {
                let v = self.pick(workers, false);
                let (_, current) = workers[v].sessions();
                let mut cut = Vec::new();
                for (pi, p) in self.proxies.iter().enumerate() {
                    let on = p.sessions();
                    for s in current.values().filter(|s| on.contains(s)) {
                        p.cut_off(*s);
                        cut.push((pi, *s));
                    }
                }
                out.start = Instant::now();
                while out.start.elapsed() < session * 3 / 2 {
                    thread::sleep(Duration::from_millis(20));
                }
                for (pi, s) in &cut {
                    self.proxies[*pi].restore(*s);
                }
                out.end = Instant::now();
                row.notes.push(format!(
                    "cut {} off its server ({} sessions) for {:.1} s",
                    workers[v].name,
                    cut.len(),
                    (out.end - out.start).as_secs_f64()
                ));
            }
            Fault::LostCreateReply => {
                let pi = (0..self.proxies.len())
                    .max_by_key(|&i| self.proxies[i].sessions().len())
                    .unwrap();
                let p = &self.proxies[pi];
                let before = p.stats().replies_dropped;
                out.start = Instant::now();
                p.drop_replies_to(FaultProxy::CREATE_OPS, 1);
                let dropped = {
                    let end = Instant::now() + patience();
                    loop {
                        if p.stats().replies_dropped > before {
                            break true;
                        }
                        if Instant::now() > end {
                            break false;
                        }
                        thread::sleep(Duration::from_millis(5));
                    }
                };
                thread::sleep(Duration::from_millis(200));
                p.reset();
                p.heal();
                out.end = Instant::now();
                if dropped {
                    row.notes.push(format!(
                        "one create reply dropped on proxy {pi}, then reset"
                    ));
                } else {
                    row.violations
                        .push("no create went through the chosen proxy".to_owned());
                }
            }
            Fault::EnsembleDown => {
                // Every member killed: no server at all for 1.5× the session. Clients give
                // their sessions up locally; the servers, back from their logs, still hold
                // those sessions' nodes until they expire them.
                out.start = Instant::now();
                for m in 0..self.cluster.len() {
                    self.cluster.kill(m).unwrap();
                }
                while out.start.elapsed() < session * 3 / 2 {
                    thread::sleep(Duration::from_millis(20));
                }
                if let Err(e) = self.cluster.restart_all() {
                    row.violations
                        .push(format!("the ensemble does not come back: {e}"));
                }
                out.end = Instant::now();
                row.notes.push(format!(
                    "killed all {} members: no server for {:.1} s",
                    self.cluster.len(),
                    (out.end - out.start).as_secs_f64()
                ));
            }
            Fault::Burst => {
                let name = "b1";
                let slots = (0..self.plan.burst)
                    .map(|i| SlotSpec {
                        recipe: Recipe::Mutex,
                        // Burst clients wait their turn in the queue rather than time out.
                        attempt: patience(),
                        name: format!("{name}.m{i}"),
                        path: regs[0].path.clone(),
                        register: regs[0].register.addr().to_string(),
                    })
                    .collect();
                out.start = Instant::now();
                workers.push(self.spawn_zklock(name, slots));
                out.end = out.start;
                let n = self.plan.burst;
                let end = Instant::now() + patience() * 2;
                let every = loop {
                    let entered: BTreeSet<String> = regs[0]
                        .register
                        .log()
                        .into_iter()
                        .filter(|e| e.kind == FenceEventKind::Enter && e.worker.starts_with("b1."))
                        .map(|e| e.worker)
                        .collect();
                    if entered.len() >= n {
                        break Some(out.start.elapsed());
                    }
                    if Instant::now() > end {
                        break None;
                    }
                    thread::sleep(Duration::from_millis(25));
                };
                match every {
                    Some(t) => row.notes.push(format!(
                        "{n} clients joined at once; each had the mutex within {:.1} s",
                        t.as_secs_f64()
                    )),
                    None => row
                        .violations
                        .push(format!("not every one of {n} burst clients got the mutex")),
                }
            }
            Fault::PauseKazooHolder => self.pause_kazoo_holder(regs, workers, row, &mut out),
            Fault::RollingRestart { leader_last } => {
                out = self.rolling_restart(leader_last, row);
            }
            Fault::Reconfigure => {
                out = self.reconfigure(workers, row);
            }
            Fault::LeaderFreezeCutOff => {
                let leader = self.cluster.leader().unwrap_or(0);
                let mut before = BTreeSet::new();
                let mut on_leader = Vec::new();
                for w in workers.iter_mut() {
                    let (all, current) = w.sessions();
                    before.extend(all);
                    for s in current.values() {
                        if self.member_serving(*s) == Some(leader) {
                            on_leader.push(*s);
                        }
                    }
                }
                out.start = Instant::now();
                self.cluster.pause(leader).unwrap();
                for (pi, p) in self.proxies.iter().enumerate() {
                    if pi != leader {
                        for s in &on_leader {
                            p.cut_off(*s);
                        }
                    }
                }
                while out.start.elapsed() < session * 2 {
                    thread::sleep(Duration::from_millis(20));
                }
                self.cluster.resume(leader).unwrap();
                for p in &self.proxies {
                    p.heal();
                }
                out.end = Instant::now();
                row.notes.push(format!(
                    "froze leader member {leader} for {:.1} s, its {} worker sessions cut off elsewhere",
                    (out.end - out.start).as_secs_f64(),
                    on_leader.len()
                ));
                out.given_up = Some(GivenUp { before });
            }
        }
        out
    }

    pub(crate) fn aftermath(&mut self, fault: Fault, out: &Outcome, row: &mut Row) {
        if fault == Fault::LeaderKill {
            // Return: the old leader rejoins as a follower while the workers go on.
            thread::sleep(Duration::from_secs(1));
            for &m in &out.restart {
                if let Err(e) = self.cluster.restart(m) {
                    row.violations
                        .push(format!("member {m} does not restart: {e}"));
                }
            }
        }
    }

    /// After a fault that made clients give sessions up: how long nodes of sessions no
    /// worker still has stayed under the locks, and whether one headed a queue.
    pub(crate) fn given_up_nodes(
        &self,
        check: &GivenUp,
        regs: &[Register],
        workers: &mut [WorkerProc],
        end: Instant,
        row: &mut Row,
    ) {
        let current: BTreeSet<i64> = workers
            .iter_mut()
            .flat_map(|w| w.sessions().1.into_values())
            .collect();
        let given_up: BTreeSet<i64> = check.before.difference(&current).copied().collect();
        let (mut seen, mut heading, mut gone_at) = (0usize, false, None);
        // A lookup that failed: a round with one cannot tell that nothing is left.
        let mut failed: Option<String> = None;
        let deadline = Instant::now() + patience();
        'poll: while Instant::now() < deadline {
            let mut now_seen = 0;
            failed = None;
            for r in regs {
                for dir in r.node_dirs() {
                    let mut children = match children_left(&self.observer, &dir) {
                        Ok(children) => children,
                        Err(e) => {
                            failed = Some(e);
                            break 'poll;
                        }
                    };
                    children.sort_by_key(|c| c.rsplit('-').next().unwrap_or("").to_owned());
                    for (k, c) in children.iter().enumerate() {
                        let path = format!("{dir}/{c}");
                        let owner = match self.observer.exists(&path) {
                            Ok(stat) => stat.map(|s| s.ephemeral_owner),
                            Err(e) => {
                                failed = Some(format!("cannot look {path} up: {e}"));
                                continue;
                            }
                        };
                        if owner.is_some_and(|o| given_up.contains(&o)) {
                            now_seen += 1;
                            heading |= k == 0;
                        }
                    }
                }
            }
            seen = seen.max(now_seen);
            if now_seen == 0 && failed.is_none() {
                gone_at = Some(end.elapsed());
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
        row.notes.push(format!(
            "{} sessions given up; up to {seen} of their nodes seen after the fault's end{}, \
             none left {}",
            given_up.len(),
            if heading { " (one headed a queue)" } else { "" },
            match gone_at {
                Some(t) => format!("{:.1} s after it", t.as_secs_f64()),
                None => "never (violation)".to_owned(),
            }
        ));
        if let Some(e) = failed {
            row.violations
                .push(format!("no check for nodes of given-up sessions: {e}"));
        } else if gone_at.is_none() {
            row.violations
                .push("nodes of given-up sessions stayed under the lock".to_owned());
        }
    }
}
