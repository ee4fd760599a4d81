//! The zklock worker: this test binary run again, one thread and one Client per slot, driven
//! over stdin (`stop`; `dump` has every slot say what it is doing) and reporting on stdout
//! lines marked `chaos: `.

use super::*;

pub(crate) const WORKER: &str = "ZKLOCK_CHAOS_WORKER";
pub(crate) const MARK: &str = "chaos: ";
/// One acquisition attempt.
pub(crate) const ATTEMPT: Duration = Duration::from_secs(1);
/// Writes per hold, one every `STEP`.
pub(crate) const WRITES: u32 = 3;
pub(crate) const STEP: Duration = Duration::from_millis(40);
/// Every `READ_EVERY`-th round of a read-write slot takes the read half and reads.
pub(crate) const READ_EVERY: u64 = 3;

/// The recipe a zklock slot contends with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Recipe {
    Mutex,
    ReadWrite,
    Semaphore,
    /// A `LeaderSelector` with auto-requeue: each term is one hold, and returning steps down.
    Leader,
    /// A mutex in kazoo's layout (`InterProcessMutex::kazoo`), shared with the kazoo workers.
    Kazoo,
}

impl Recipe {
    pub(crate) const ALL: [Recipe; 5] = [
        Recipe::Mutex,
        Recipe::ReadWrite,
        Recipe::Semaphore,
        Recipe::Leader,
        Recipe::Kazoo,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Recipe::Mutex => "mutex",
            Recipe::ReadWrite => "rw",
            Recipe::Semaphore => "sem",
            Recipe::Leader => "leader",
            Recipe::Kazoo => "kazoo",
        }
    }

    pub(crate) fn parse(s: &str) -> Recipe {
        Recipe::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .unwrap_or_else(|| panic!("unknown recipe {s:?}"))
    }
}

/// One contender of a worker: `<recipe>,<name>,<lock path>,<register address>,<attempt ms>`.
pub(crate) struct SlotSpec {
    pub(crate) recipe: Recipe,
    /// How long one acquisition attempt waits.
    pub(crate) attempt: Duration,
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) register: String,
}

/// `<connect>;<session ms>;<slot>;<slot>...` (a connect string has commas, never `;`).
pub(crate) fn worker_spec(
    connect: &str,
    session: Duration,
    track_ensemble: bool,
    slots: &[SlotSpec],
) -> String {
    let mut spec = format!("{connect};{};{track_ensemble}", session.as_millis());
    for s in slots {
        let _ = write!(
            spec,
            ";{},{},{},{},{}",
            s.recipe.name(),
            s.name,
            s.path,
            s.register,
            s.attempt.as_millis()
        );
    }
    spec
}

/// What one slot did, as its worker reports it (`stats <name> key=value...`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlotStats {
    pub(crate) acq: u64,
    pub(crate) accepted: u64,
    pub(crate) rejected: u64,
    /// Writes not made because `health()` was not Held.
    pub(crate) skipped: u64,
    /// Writes made after the process stood still for longer than its session timeout.
    pub(crate) late_attempted: u64,
    /// Of the skipped writes, those after such a pause.
    pub(crate) late_stopped: u64,
    pub(crate) late_rejected: u64,
    pub(crate) reads: u64,
    pub(crate) timeouts: u64,
    pub(crate) errors: u64,
    /// Of the errors, calls that failed with `SessionExpired`.
    pub(crate) expired: u64,
    pub(crate) lost: u64,
}

impl SlotStats {
    pub(crate) const KEYS: [&'static str; 12] = [
        "acq",
        "accepted",
        "rejected",
        "skipped",
        "late_attempted",
        "late_stopped",
        "late_rejected",
        "reads",
        "timeouts",
        "errors",
        "expired",
        "lost",
    ];

    pub(crate) fn fields(&mut self) -> [&mut u64; 12] {
        [
            &mut self.acq,
            &mut self.accepted,
            &mut self.rejected,
            &mut self.skipped,
            &mut self.late_attempted,
            &mut self.late_stopped,
            &mut self.late_rejected,
            &mut self.reads,
            &mut self.timeouts,
            &mut self.errors,
            &mut self.expired,
            &mut self.lost,
        ]
    }

    pub(crate) fn line(mut self) -> String {
        let values: Vec<u64> = self.fields().iter().map(|v| **v).collect();
        Self::KEYS
            .iter()
            .zip(values)
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub(crate) fn parse(text: &str) -> SlotStats {
        let mut stats = SlotStats::default();
        for pair in text.split_whitespace() {
            if let Some((k, v)) = pair.split_once('=') {
                if let Some(i) = Self::KEYS.iter().position(|key| *key == k) {
                    *stats.fields()[i] = v.parse().unwrap_or(0);
                }
            }
        }
        stats
    }

    pub(crate) fn add(&mut self, mut other: SlotStats) {
        let theirs: Vec<u64> = other.fields().iter().map(|v| **v).collect();
        for (mine, t) in self.fields().into_iter().zip(theirs) {
            *mine += t;
        }
    }
}

/// What each slot of this worker is doing now, for `dump`: its Client, its phase and since
/// when, the token of its hold, its last error.
static STATUS: Mutex<BTreeMap<String, SlotStatus>> = Mutex::new(BTreeMap::new());

struct SlotStatus {
    client: Client,
    phase: &'static str,
    since: Instant,
    token: Option<u64>,
    last_error: Option<(Instant, String)>,
}

/// Records that slot `name` entered `phase` (with `token` while it holds).
fn phase(name: &str, phase: &'static str, token: Option<u64>) {
    if let Some(s) = STATUS.lock().unwrap().get_mut(name) {
        s.phase = phase;
        s.since = Instant::now();
        s.token = token;
    }
}

/// Records the last error of slot `name` and counts it; a `SessionExpired` is also told
/// (`expired <slot> while <phase>`).
fn failed(name: &str, error: &zklock::Error, stats: &mut SlotStats) {
    stats.errors += 1;
    let expired = *error == zklock::Error::SessionExpired;
    stats.expired += u64::from(expired);
    if let Some(s) = STATUS.lock().unwrap().get_mut(name) {
        if expired {
            say(&format!(
                "expired {name} while {} (session 0x{:x})",
                s.phase,
                s.client.session_id().unwrap_or(0) as u64
            ));
        }
        s.last_error = Some((Instant::now(), error.to_string().replace('\n', " ")));
    }
}

/// `dump`: one `state` line per slot: phase and for how long, token, session, connection
/// state, the members its Client knows, and its last error.
fn dump() {
    for (name, s) in STATUS.lock().unwrap().iter() {
        say(&format!(
            "state {name} {} for {:.1} s; token {}; session 0x{:x}; {:?}; members {}; last error {}",
            s.phase,
            s.since.elapsed().as_secs_f64(),
            s.token.map_or("-".to_owned(), |t| t.to_string()),
            s.client.session_id().unwrap_or(0) as u64,
            s.client.state(),
            s.client.connect_string(),
            s.last_error.as_ref().map_or("none".to_owned(), |(at, e)| format!(
                "{:.1} s ago: {e}",
                at.elapsed().as_secs_f64()
            )),
        ));
    }
}

pub(crate) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{MARK}{line}");
    let _ = out.flush();
}

pub(crate) fn run_slot(
    slot: &SlotSpec,
    connect: &str,
    session: Duration,
    track_ensemble: bool,
    stop: &AtomicBool,
) {
    let client = Client::builder(connect)
        .session_timeout(session)
        .ensemble_tracker(track_ensemble)
        .connection_timeout(Duration::from_secs(30))
        .connect()
        .expect("connect");
    let lost = Arc::new(AtomicU64::new(0));
    {
        let (lost, name) = (lost.clone(), slot.name.clone());
        client.on_connection_state(move |s| {
            if s == ConnectionState::Lost {
                lost.fetch_add(1, Ordering::Relaxed);
                say(&format!("lost {name}"));
            }
        });
    }
    let mut session_id = client.session_id().unwrap_or(0);
    STATUS.lock().unwrap().insert(
        slot.name.clone(),
        SlotStatus {
            client: client.clone(),
            phase: "ready",
            since: Instant::now(),
            token: None,
            last_error: None,
        },
    );
    say(&format!("ready {} {:x}", slot.name, session_id as u64));
    let monitor_stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (client, name, monitor_stop) =
            (client.clone(), slot.name.clone(), monitor_stop.clone());
        thread::spawn(move || {
            while !monitor_stop.load(Ordering::SeqCst) {
                if let Some(s) = client.session_id().filter(|s| *s != session_id && *s != 0) {
                    session_id = s;
                    say(&format!("session {name} {:x}", s as u64));
                }
                thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let mut fence = FenceClient::connect(slot.register.as_str()).expect("register");
    let mut stats = SlotStats::default();
    let name = slot.name.as_str();
    let stopped = || stop.load(Ordering::SeqCst);
    match slot.recipe {
        Recipe::Mutex | Recipe::Kazoo => {
            let mutex = if slot.recipe == Recipe::Kazoo {
                InterProcessMutex::kazoo(&client, &slot.path, name).unwrap()
            } else {
                InterProcessMutex::new(&client, &slot.path).unwrap()
            };
            while !stopped() {
                phase(name, "acquiring", None);
                match mutex.try_lock_for(slot.attempt) {
                    Ok(Some(guard)) => {
                        let token = guard.fencing_token();
                        phase(name, "holding", Some(token));
                        hold(
                            &mut fence,
                            name,
                            session,
                            token,
                            || guard.health(),
                            || false,
                            &mut stats,
                        );
                        phase(name, "releasing", Some(token));
                        if let Err(e) = guard.release() {
                            failed(name, &e, &mut stats);
                        }
                    }
                    Ok(None) => stats.timeouts += 1,
                    Err(e) => backoff(name, &e, &mut stats),
                }
            }
        }
        Recipe::ReadWrite => {
            let rw = InterProcessReadWriteLock::new(&client, &slot.path).unwrap();
            let mut round = 0u64;
            while !stopped() {
                round += 1;
                if round.is_multiple_of(READ_EVERY) {
                    phase(name, "acquiring read", None);
                    match rw.read_lock().try_lock_for(slot.attempt) {
                        Ok(Some(guard)) => {
                            phase(name, "reading", Some(guard.fencing_token()));
                            match fence.read() {
                                Ok(_) => stats.reads += 1,
                                Err(_) => stats.errors += 1,
                            }
                            phase(name, "releasing read", None);
                            if let Err(e) = guard.release() {
                                failed(name, &e, &mut stats);
                            }
                        }
                        Ok(None) => stats.timeouts += 1,
                        Err(e) => backoff(name, &e, &mut stats),
                    }
                    continue;
                }
                phase(name, "acquiring write", None);
                match rw.write_lock().try_lock_for(slot.attempt) {
                    Ok(Some(guard)) => {
                        let token = guard.fencing_token();
                        phase(name, "holding write", Some(token));
                        hold(
                            &mut fence,
                            name,
                            session,
                            token,
                            || guard.health(),
                            || false,
                            &mut stats,
                        );
                        phase(name, "releasing write", Some(token));
                        if let Err(e) = guard.release() {
                            failed(name, &e, &mut stats);
                        }
                    }
                    Ok(None) => stats.timeouts += 1,
                    Err(e) => backoff(name, &e, &mut stats),
                }
            }
        }
        Recipe::Semaphore => {
            let semaphore = InterProcessSemaphoreV2::new(&client, &slot.path, 1).unwrap();
            while !stopped() {
                phase(name, "acquiring", None);
                match semaphore.acquire_timeout(slot.attempt) {
                    Ok(Some(lease)) => {
                        let token = lease.fencing_token();
                        phase(name, "holding", Some(token));
                        hold(
                            &mut fence,
                            name,
                            session,
                            token,
                            || lease.health(),
                            || false,
                            &mut stats,
                        );
                        phase(name, "releasing", Some(token));
                        if let Err(e) = lease.return_lease() {
                            failed(name, &e, &mut stats);
                        }
                    }
                    Ok(None) => stats.timeouts += 1,
                    Err(e) => backoff(name, &e, &mut stats),
                }
            }
        }
        Recipe::Leader => {
            // The closure runs on the selector's thread: it owns the register connection and
            // its figures while it leads, and hands them back after `close`.
            let term = Arc::new(Mutex::new((fence, SlotStats::default())));
            let selector = {
                let (term, name) = (term.clone(), name.to_owned());
                LeaderSelector::builder(&client, &slot.path)
                    .id(&name)
                    .auto_requeue(true)
                    .build(move |leadership| {
                        let mut held = term.lock().unwrap();
                        let (fence, stats) = &mut *held;
                        // One term = one hold; returning steps down so that terms rotate.
                        hold(
                            fence,
                            &name,
                            session,
                            leadership.fencing_token(),
                            || leadership.health(),
                            || leadership.is_cancelled(),
                            stats,
                        );
                        Ok(())
                    })
                    .expect("a leader selector")
            };
            selector.start().expect("start the selector");
            phase(name, "leader selector", None);
            while !stopped() {
                thread::sleep(Duration::from_millis(20));
            }
            if !selector.close_timeout(Duration::from_secs(30)) {
                stats.errors += 1;
            }
            stats.add(term.lock().unwrap().1);
        }
    }
    stats.lost = lost.load(Ordering::Relaxed);
    phase(name, "stopped", None);
    say(&format!("stats {name} {}", stats.line()));
    monitor_stop.store(true, Ordering::SeqCst);
    let _ = monitor.join();
    client.close();
}

pub(crate) fn backoff(name: &str, error: &zklock::Error, stats: &mut SlotStats) {
    failed(name, error, stats);
    phase(name, "backoff", None);
    thread::sleep(Duration::from_millis(50));
}

/// One hold (or leadership term): enter, `WRITES` writes each after a check that the hold is
/// not `cancelled` and its health is Held, exit.
pub(crate) fn hold(
    fence: &mut FenceClient,
    name: &str,
    session: Duration,
    token: u64,
    health: impl Fn() -> LockHealth,
    cancelled: impl Fn() -> bool,
    stats: &mut SlotStats,
) {
    stats.acq += 1;
    if fence.enter(token, name).is_err() {
        stats.errors += 1;
        return;
    }
    let mut last = Instant::now();
    for k in 0..WRITES {
        // Stood still (SIGSTOP, a stall) for longer than the session since the last step?
        let late = last.elapsed() > session;
        let h = health();
        let reason = if cancelled() {
            Some("Cancelled".to_owned())
        } else {
            (h != LockHealth::Held).then(|| format!("{h:?}"))
        };
        if let Some(reason) = reason {
            say(&format!("skip {name} {token} {reason}"));
            stats.skipped += 1;
            if late {
                stats.late_stopped += 1;
            }
            break;
        }
        let checked = Instant::now();
        let outcome = fence.write(token, name, &format!("{name}#{k}"));
        // A stall between the check and the write makes it late too.
        let late = late || checked.elapsed() > session;
        if late {
            stats.late_attempted += 1;
        }
        match outcome {
            Ok(WriteOutcome::Accepted) => stats.accepted += 1,
            Ok(WriteOutcome::Rejected { .. }) => {
                stats.rejected += 1;
                if late {
                    stats.late_rejected += 1;
                }
            }
            Err(_) => {
                stats.errors += 1;
                break;
            }
        }
        thread::sleep(STEP);
        last = Instant::now();
    }
    if fence.exit(token, name).is_err() {
        stats.errors += 1;
    }
}

/// The worker process: runs every slot of its spec on its own thread and Client until stdin
/// says `stop` (or closes). A no-op unless the environment names this process a worker.
pub(crate) fn run() {
    let Ok(spec) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    // A worker must not outlive the test that started it, even a frozen one.
    #[cfg(target_os = "linux")]
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .expect("PR_SET_PDEATHSIG");
    // RUST_LOG set: the worker's events go to the test's stderr, named by thread.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_thread_names(true)
            .try_init();
    }
    let mut fields = spec.split(';');
    let connect = fields.next().expect("connect string").to_owned();
    let session = Duration::from_millis(fields.next().unwrap().parse().unwrap());
    let track_ensemble: bool = fields.next().unwrap().parse().unwrap();
    let slots: Vec<SlotSpec> = fields
        .map(|f| {
            let p: Vec<&str> = f.split(',').collect();
            SlotSpec {
                recipe: Recipe::parse(p[0]),
                name: p[1].to_owned(),
                path: p[2].to_owned(),
                register: p[3].to_owned(),
                attempt: Duration::from_millis(p[4].parse().unwrap()),
            }
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                match line {
                    Ok(l) if l.trim() == "stop" => break,
                    Ok(l) if l.trim() == "dump" => dump(),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            stop.store(true, Ordering::SeqCst);
        });
    }
    let threads: Vec<_> = slots
        .into_iter()
        .map(|slot| {
            let (connect, stop) = (connect.clone(), stop.clone());
            thread::Builder::new()
                .name(slot.name.clone())
                .spawn(move || run_slot(&slot, &connect, session, track_ensemble, &stop))
                .unwrap()
        })
        .collect();
    let failed = threads
        .into_iter()
        .map(|t| t.join())
        .filter(Result::is_err)
        .count();
    say(&format!("done failed={failed}"));
    assert_eq!(failed, 0, "a slot panicked");
}
