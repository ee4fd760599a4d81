//! The lab: a 3-node ensemble, a fault proxy per member, a fenced register per lock, the
//! workers, and the checks run after every fault.

use super::*;

/// The shape of a run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) session: Duration,
    /// zklock worker processes, each with a mutex, a read-write, a semaphore and a leader slot.
    pub(crate) zklock_workers: usize,
    /// Curator workers on the mutex.
    pub(crate) curator_workers: usize,
    /// Curator `LeaderSelector` workers on the election.
    pub(crate) curator_leaders: usize,
    /// kazoo workers (Python) on the kazoo-layout mutex.
    pub(crate) kazoo_workers: usize,
    /// Slots of the burst worker.
    pub(crate) burst: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    LeaderKill,
    PauseHolder { curator: bool },
    KillHolder,
    PauseServer,
    CutOff,
    LostCreateReply,
    EnsembleDown,
    Burst,
    LeaderFreezeCutOff,
    PauseKazooHolder,
    // The ensemble faults (`ensemble.rs`): every member restarted in turn, and two members
    // added with three of the original ones removed.
    RollingRestart { leader_last: bool },
    Reconfigure,
}

impl Fault {
    pub(crate) const ALL: [Fault; 11] = [
        Fault::LeaderKill,
        Fault::PauseHolder { curator: false },
        Fault::PauseHolder { curator: true },
        Fault::KillHolder,
        Fault::PauseServer,
        Fault::CutOff,
        Fault::LostCreateReply,
        Fault::EnsembleDown,
        Fault::Burst,
        Fault::LeaderFreezeCutOff,
        Fault::PauseKazooHolder,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::LeaderKill => "leader kill + return",
            Fault::PauseHolder { curator: false } => "SIGSTOP zklock holder 2.5x session",
            Fault::PauseHolder { curator: true } => "SIGSTOP Curator holder 2.5x session",
            Fault::KillHolder => "kill -9 zklock holder",
            Fault::PauseServer => "SIGSTOP a worker's server",
            Fault::CutOff => "worker cut off from its server",
            Fault::LostCreateReply => "lost create reply",
            Fault::EnsembleDown => "ensemble down past session",
            Fault::Burst => "burst of workers",
            Fault::LeaderFreezeCutOff => "frozen leader, its clients cut off",
            Fault::PauseKazooHolder => "SIGSTOP kazoo holder 2.5x session",
            Fault::RollingRestart { leader_last: true } => "rolling restart, leader last",
            Fault::RollingRestart { leader_last: false } => "rolling restart, leader first",
            Fault::Reconfigure => "reconfig: add 2 members, remove 3 original",
        }
    }
}

pub(crate) struct Register {
    pub(crate) recipe: Recipe,
    pub(crate) path: String,
    pub(crate) register: FencedRegister,
    /// Just before the register started: `started + event.at` is when it logged an event.
    pub(crate) started: Instant,
}

impl Register {
    pub(crate) fn at(&self, e: &FenceEvent) -> Instant {
        self.started + e.at
    }

    pub(crate) fn events_after(&self, t: Instant) -> Vec<FenceEvent> {
        self.register
            .log()
            .into_iter()
            .filter(|e| self.at(e) > t)
            .collect()
    }

    pub(crate) fn enters_after(&self, t: Instant) -> usize {
        self.events_after(t)
            .iter()
            .filter(|e| e.kind == FenceEventKind::Enter)
            .count()
    }

    pub(crate) fn first_accepted_after(
        &self,
        t: Instant,
        by: impl Fn(&str) -> bool,
    ) -> Option<Duration> {
        self.events_after(t)
            .iter()
            .find(|e| e.kind == FenceEventKind::Accepted && by(&e.worker))
            .map(|e| self.at(e).saturating_duration_since(t))
    }

    /// (worker, token) of the holders inside now: an enter without its exit.
    pub(crate) fn inside(&self) -> Vec<(String, u64)> {
        let mut open: Vec<(String, u64)> = Vec::new();
        for e in self.register.log() {
            let key = (e.worker.clone(), e.token);
            match e.kind {
                FenceEventKind::Enter => open.push(key),
                FenceEventKind::Exit => open.retain(|k| *k != key),
                _ => {}
            }
        }
        open
    }

    /// The directories holding this lock's nodes.
    pub(crate) fn node_dirs(&self) -> Vec<String> {
        match self.recipe {
            Recipe::Semaphore => vec![
                format!("{}/locks", self.path),
                format!("{}/leases", self.path),
            ],
            _ => vec![self.path.clone()],
        }
    }
}

/// One fault's figures: a row of the report.
#[derive(Default)]
pub(crate) struct Row {
    pub(crate) fault: String,
    /// How long the fault lasted (start to end).
    pub(crate) length: Duration,
    /// Enters per kind: zklock mutex / rw write / semaphore / leader terms / Curator mutex /
    /// Curator leader terms / burst.
    pub(crate) acquisitions: BTreeMap<&'static str, u64>,
    pub(crate) reads: u64,
    pub(crate) overlaps: usize,
    pub(crate) stale_accepted: usize,
    pub(crate) stale_rejected: usize,
    /// Writes a paused zklock holder's frozen hold made after it woke (register log), and the
    /// writes its health check stopped.
    pub(crate) late_zklock: Option<(usize, u64)>,
    /// Writes a paused Curator holder's frozen hold made after it woke: (made, rejected).
    pub(crate) late_curator: Option<(usize, usize)>,
    /// Writes skipped by zklock workers because health() was not Held (all faults).
    pub(crate) skipped: u64,
    pub(crate) orphans: usize,
    pub(crate) duplicates: usize,
    pub(crate) watches: (usize, usize),
    /// Fault start → first accepted write by another worker on a lock the victim held.
    pub(crate) takeover: Option<Duration>,
    /// Fault end → next accepted write on any lock, and on every lock.
    pub(crate) recovery: Option<Duration>,
    pub(crate) recovery_all: Option<Duration>,
    pub(crate) lost: u64,
    /// The kazoo-layout mutex's figures (its own table).
    pub(crate) kazoo: KazooRow,
    pub(crate) notes: Vec<String>,
    pub(crate) violations: Vec<String>,
}

pub(crate) struct Lab {
    pub(crate) cluster: TestingCluster,
    pub(crate) proxies: Vec<FaultProxy>,
    pub(crate) java: Option<Java>,
    pub(crate) observer: Client,
    pub(crate) plan: Plan,
    pub(crate) run: u32,
    pub(crate) rng: fastrand::Rng,
    /// Whether the zklock workers' Clients follow `/zookeeper/config`: only for the ensemble
    /// faults. The members name their own addresses there, not the proxies', so a tracking
    /// Client whose proxies all fail (a cut-off, say) would move past the fault to them.
    pub(crate) track_ensemble: bool,
}

pub(crate) fn ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.2} s", d.as_secs_f64()))
        .unwrap_or_else(|| "-".to_owned())
}

impl Lab {
    pub(crate) fn start(plan: Plan, seed: u64) -> Lab {
        Lab::start_with(plan, seed, 3)
    }

    /// Runs `fault` (the `n`th of a schedule) and says on stderr how long it took and whether
    /// it was clean.
    pub(crate) fn run_and_tell(&mut self, fault: Fault, n: usize) -> Row {
        let t = Instant::now();
        let row = self.run_fault(fault);
        eprintln!(
            "chaos: fault {n} ({}) done in {:.1} s: {}",
            fault.name(),
            t.elapsed().as_secs_f64(),
            if row.violations.is_empty() {
                "clean"
            } else {
                "VIOLATION"
            }
        );
        row
    }

    /// A lab on an ensemble of `members`.
    pub(crate) fn start_with(plan: Plan, seed: u64, members: usize) -> Lab {
        let cluster = TestingCluster::start(members).expect("an ensemble");
        let proxies = FaultProxy::for_cluster(&cluster).expect("proxies");
        let java = (plan.curator_workers + plan.curator_leaders > 0)
            .then(|| Java::compile(&CURATOR_WORKER));
        if plan.kazoo_workers > 0 {
            check_kazoo();
        }
        let observer = client(&cluster.connect_string(), Duration::from_secs(30));
        Lab {
            cluster,
            proxies,
            java,
            observer,
            plan,
            run: 0,
            rng: fastrand::Rng::with_seed(seed),
            track_ensemble: false,
        }
    }

    pub(crate) fn connect(&self) -> String {
        FaultProxy::ensemble_connect_string(&self.proxies)
    }

    /// Watches on paths under /chaos, over every member that answers.
    pub(crate) fn watches(&self) -> usize {
        (0..self.cluster.len())
            .filter_map(|i| self.cluster.four_letter(i, "wchc").ok())
            .map(|w| w.lines().filter(|l| l.trim().starts_with("/chaos")).count())
            .sum()
    }

    /// The member whose `cons` lists session `s`.
    pub(crate) fn member_serving(&self, s: i64) -> Option<usize> {
        let sid = format!("sid=0x{:x},", s as u64);
        (0..self.cluster.len()).find(|&i| {
            self.cluster
                .four_letter(i, "cons")
                .is_ok_and(|c| c.contains(&sid))
        })
    }

    /// Nodes under the lock directories: (dir, name); an error if a directory cannot be
    /// listed (past a brief retry), never "nothing left".
    pub(crate) fn nodes(&self, regs: &[Register]) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        for r in regs {
            for dir in r.node_dirs() {
                let children = children_left(&self.observer, &dir)?;
                out.extend(children.into_iter().map(|c| (dir.clone(), c)));
            }
        }
        Ok(out)
    }

    pub(crate) fn spawn_zklock(&self, name: &str, slots: Vec<SlotSpec>) -> WorkerProc {
        let spec = worker_spec(
            &self.connect(),
            self.plan.session,
            self.track_ensemble,
            &slots,
        );
        WorkerProc::rust(name, spec)
    }

    /// A Curator worker: an `InterProcessMutex`, or a `LeaderSelector` if `reg` is the
    /// election's register.
    pub(crate) fn spawn_curator(&self, name: &str, reg: &Register) -> WorkerProc {
        let java = self.java.as_ref().expect("compiled");
        let mode = match reg.recipe {
            Recipe::Leader => "leader",
            _ => "mutex",
        };
        let proc = java.spawn(
            name,
            &[
                &self.connect(),
                &reg.path,
                &reg.register.addr().to_string(),
                name,
                &self.plan.session.as_millis().to_string(),
                mode,
            ],
        );
        WorkerProc::java(name, proc)
    }

    pub(crate) fn ensure_healthy(&mut self, row: &mut Row) {
        // Members removed by a reconfiguration stay stopped.
        for i in self.cluster.members_in_config() {
            let _ = self.cluster.resume(i);
            if self.cluster.pid(i).is_none() {
                if let Err(e) = self.cluster.restart(i) {
                    row.violations
                        .push(format!("member {i} does not restart: {e}"));
                }
            }
        }
        for p in &self.proxies {
            p.heal();
        }
        if let Err(e) = self.cluster.wait_for_leader(patience()) {
            row.violations.push(format!("no leader: {e}"));
        }
    }

    /// Runs one fault with fresh workers, registers and lock paths; returns its row.
    pub(crate) fn run_fault(&mut self, fault: Fault) -> Row {
        self.run += 1;
        let mut row = Row {
            fault: fault.name().to_owned(),
            ..Row::default()
        };
        self.ensure_healthy(&mut row);
        let session = self.plan.session;
        let base = format!("/chaos/r{}", self.run);
        let regs: Vec<Register> = Recipe::ALL
            .into_iter()
            .map(|recipe| {
                let started = Instant::now();
                Register {
                    recipe,
                    path: format!("{base}/{}", recipe.name()),
                    register: FencedRegister::start().expect("register"),
                    started,
                }
            })
            .collect();
        let watches_before = self.watches();

        let mut workers: Vec<WorkerProc> = Vec::new();
        for i in 1..=self.plan.zklock_workers {
            let name = format!("z{i}");
            let slots = regs
                .iter()
                .map(|r| SlotSpec {
                    recipe: r.recipe,
                    attempt: ATTEMPT,
                    name: format!("{name}.{}", r.recipe.name()),
                    path: r.path.clone(),
                    register: r.register.addr().to_string(),
                })
                .collect();
            workers.push(self.spawn_zklock(&name, slots));
        }
        for j in 1..=self.plan.curator_workers {
            workers.push(self.spawn_curator(&format!("j{j}"), &regs[0]));
        }
        let election = regs.iter().find(|r| r.recipe == Recipe::Leader).unwrap();
        for j in 1..=self.plan.curator_leaders {
            workers.push(self.spawn_curator(&format!("jl{j}"), election));
        }
        workers.extend(self.spawn_kazoo_workers(&regs));
        let expected_ready: usize = self.plan.zklock_workers * Recipe::ALL.len()
            + self.plan.curator_workers
            + self.plan.curator_leaders
            + self.plan.kazoo_workers;
        wait_for("every worker to connect", || {
            workers.iter_mut().map(|w| w.count("ready")).sum::<usize>() >= expected_ready
        });
        let warm = Instant::now();
        wait_for("every lock to be taken before the fault", || {
            regs.iter().all(|r| r.enters_after(warm) >= 2)
        });

        // The duplicate sampler: two nodes of one protected attempt in one directory.
        let sampling = Arc::new(AtomicBool::new(fault == Fault::LostCreateReply));
        let duplicates = Arc::new(Mutex::new(BTreeSet::<String>::new()));
        let sampler = {
            let (sampling, duplicates, observer) =
                (sampling.clone(), duplicates.clone(), self.observer.clone());
            let dirs: Vec<String> = regs.iter().flat_map(Register::node_dirs).collect();
            thread::spawn(move || {
                while sampling.load(Ordering::SeqCst) {
                    for dir in &dirs {
                        let Ok(children) = observer.children(dir) else {
                            continue;
                        };
                        let mut seen = HashMap::new();
                        for c in children {
                            // `_c_<uuid>-...`: the protection prefix of one attempt.
                            let prefix: String = c.chars().take(3 + 36).collect();
                            if let Some(other) = seen.insert(prefix, c.clone()) {
                                duplicates
                                    .lock()
                                    .unwrap()
                                    .insert(format!("{dir}: {other} and {c}"));
                            }
                        }
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            })
        };

        let outcome = self.inject(fault, &regs, &mut workers, &mut row);
        let (start, end) = (outcome.start, outcome.end);
        row.length = end.saturating_duration_since(start);

        // Recovery: the next accepted write after the fault's end, on any lock and on each.
        let mut first = None;
        let deadline = Instant::now() + patience() + session * 3;
        while Instant::now() < deadline {
            let per: Vec<Option<Duration>> = regs
                .iter()
                .map(|r| r.first_accepted_after(end, |_| true))
                .collect();
            first = first.or(per.iter().flatten().min().copied());
            if per.iter().all(Option::is_some) {
                row.recovery_all = per.iter().flatten().max().copied();
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        row.recovery = first;
        if fault.keeps_sessions() {
            self.write_gaps(&regs, &outcome, &mut row);
        }
        if row.recovery_all.is_none() {
            row.violations
                .push("a lock was not written again after the fault".to_owned());
            let stalled: Vec<&Register> = regs
                .iter()
                .filter(|r| r.first_accepted_after(end, |_| true).is_none())
                .collect();
            self.stall_report(&stalled, &mut workers, &mut row);
        }
        if let Some(victim) = &outcome.victim_held {
            let mut worst = Some(Duration::ZERO);
            for (ri, _token) in victim.held.iter() {
                let w = victim.worker.clone();
                let took = regs[*ri].first_accepted_after(start, |name| {
                    !(name == w || name.starts_with(&format!("{w}.")))
                });
                worst = match (worst, took) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
            row.takeover = worst;
            if fault == Fault::KillHolder {
                let bound = session + Duration::from_secs(2);
                match worst {
                    Some(t) if t <= bound => {}
                    other => row.notes.push(format!(
                        "takeover {} exceeded session + 2 s = {:.1} s",
                        ms(other),
                        bound.as_secs_f64()
                    )),
                }
            }
        }
        self.aftermath(fault, &outcome, &mut row);
        let more = Instant::now();
        let flowing = {
            let end = Instant::now() + patience();
            loop {
                if regs.iter().all(|r| r.enters_after(more) >= 2) {
                    break true;
                }
                if Instant::now() > end {
                    break false;
                }
                thread::sleep(Duration::from_millis(25));
            }
        };
        if !flowing {
            row.violations
                .push("a lock was not taken twice more after the fault's aftermath".to_owned());
            let stalled: Vec<&Register> =
                regs.iter().filter(|r| r.enters_after(more) < 2).collect();
            self.stall_report(&stalled, &mut workers, &mut row);
        }
        if let Some(check) = &outcome.given_up {
            self.given_up_nodes(check, &regs, &mut workers, end, &mut row);
        }

        // Stop every worker and let it report.
        for w in workers.iter_mut() {
            w.send_stop();
        }
        let stop_deadline = Instant::now() + patience();
        while Instant::now() < stop_deadline
            && !workers.iter_mut().all(|w| w.killed || w.has_exited())
        {
            thread::sleep(Duration::from_millis(25));
        }
        sampling.store(false, Ordering::SeqCst);
        let _ = sampler.join();
        row.duplicates = duplicates.lock().unwrap().len();
        for d in duplicates.lock().unwrap().iter() {
            row.notes.push(format!("duplicate protected nodes: {d}"));
        }
        let mut stats = SlotStats::default();
        for w in workers.iter_mut() {
            let clean = w.reap();
            if !w.killed && !clean {
                row.violations
                    .push(format!("worker {} did not stop cleanly", w.name));
            }
            for (_, s) in w.stats() {
                stats.add(s);
            }
            if w.killed {
                stats.lost += w.count("lost") as u64;
            }
        }
        row.skipped = stats.skipped;
        row.reads = stats.reads;
        row.lost = stats.lost;
        if fault.keeps_sessions() && row.lost > 0 {
            row.violations
                .push(format!("{} sessions lost through the fault", row.lost));
        }
        // A call that fails as if its session had expired while the session goes on (a
        // request left on a wire client the session moved off) can leave a released lock's
        // node behind in that session.
        if fault.keeps_sessions() && stats.expired > 0 {
            row.violations.push(format!(
                "{} zklock calls failed with SessionExpired through the fault",
                stats.expired
            ));
        }
        for w in workers.iter_mut() {
            w.pump();
            for e in w.events.iter().filter(|e| e.starts_with("expired ")) {
                row.notes
                    .push(format!("a call failed with SessionExpired: {e}"));
            }
        }
        // The workers' own view: a write that returned more than a session after the step
        // before it (its request may have left before a stall: the register's log, above,
        // is what counts).
        let z_late: u64 = workers
            .iter_mut()
            .filter(|w| !w.is_java() && !w.is_kazoo())
            .flat_map(|w| w.stats().into_values())
            .map(|s| s.late_attempted)
            .sum();
        if z_late > 0 {
            row.notes.push(format!(
                "zklock workers saw {z_late} writes return more than a session after their previous step"
            ));
        }
        if let (Some((made, _)), Some(v)) = (row.late_zklock, &outcome.victim_held) {
            // Writes of the frozen holds that health() stopped after the wake-up.
            let w = workers.iter_mut().find(|w| w.name == v.worker);
            let stopped = w.map_or(0, |w| {
                w.pump();
                w.events
                    .iter()
                    .filter_map(|e| e.strip_prefix("skip "))
                    .filter(|e| {
                        let p: Vec<&str> = e.split(' ').collect();
                        p.len() == 3
                            && v.held.iter().any(|(ri, t)| {
                                p[0].ends_with(&format!(".{}", regs[*ri].recipe.name()))
                                    && p[1] == t.to_string()
                            })
                    })
                    .count()
            });
            row.late_zklock = Some((made, stopped as u64));
        }

        // Nothing left under the locks, no watch left on them.
        let orphan_deadline = Instant::now() + patience() + session * 2;
        let mut left = self.nodes(&regs);
        while left.as_ref().is_ok_and(|l| !l.is_empty()) && Instant::now() < orphan_deadline {
            thread::sleep(Duration::from_millis(50));
            left = self.nodes(&regs);
        }
        match left {
            Ok(left) => {
                row.orphans = left.len();
                if !left.is_empty() {
                    row.violations.push(format!("orphan nodes: {left:?}"));
                }
            }
            Err(e) => row
                .violations
                .push(format!("no check for orphan nodes: {e}")),
        }
        let mut after = self.watches();
        while after > watches_before && Instant::now() < orphan_deadline {
            thread::sleep(Duration::from_millis(50));
            after = self.watches();
        }
        row.watches = (watches_before, after);
        if after > watches_before {
            row.violations
                .push(format!("watches {watches_before} before, {after} after"));
        }

        // The fence's verdict.
        for r in &regs {
            let report = FenceReport::check(&r.register.log());
            row.overlaps += report.overlaps.len();
            row.stale_accepted += report.stale_accepted.len();
            row.stale_rejected += report.stale_rejected;
            if !report.is_clean() {
                row.violations
                    .push(format!("{} register:\n{report}", r.recipe.name()));
            }
            for (worker, s) in &report.workers {
                let kind = if worker.starts_with("jl") {
                    "curator-leader"
                } else if worker.starts_with('j') {
                    "curator"
                } else if worker.starts_with('b') {
                    "burst"
                } else if worker.starts_with('k') {
                    "kazoo"
                } else {
                    match r.recipe {
                        Recipe::Mutex => "mutex",
                        Recipe::ReadWrite => "rw-write",
                        Recipe::Semaphore => "semaphore",
                        Recipe::Leader => "leader",
                        Recipe::Kazoo => "kazoo-zklock",
                    }
                };
                *row.acquisitions.entry(kind).or_default() += s.acquisitions;
            }
        }
        self.kazoo_figures(&regs, &mut workers, &mut row);
        self.ensure_healthy(&mut row);
        row
    }
}
