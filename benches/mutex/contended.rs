//! 2. Contended handoffs/s: each thread its own session and its own lock on one path.

use super::*;

/// What one contender hands back.
pub(crate) struct Outcome {
    pub(crate) handoffs: u64,
    /// When it stopped.
    pub(crate) end: Instant,
    /// Its own CPU.
    pub(crate) cpu: Duration,
    /// How long each acquire waited.
    pub(crate) waits: Histogram<u64>,
}

impl Outcome {
    /// A contender's tally as it stops; `cpu_start`: its thread CPU when it started.
    pub(crate) fn now(handoffs: u64, cpu_start: Duration, waits: Histogram<u64>) -> Outcome {
        Outcome {
            handoffs,
            end: Instant::now(),
            cpu: thread_cpu() - cpu_start,
            waits,
        }
    }
}

/// The shared state of a contended row.
#[derive(Clone)]
pub(crate) struct Race {
    /// Non-atomic read-modify-write on purpose: a mutual-exclusion failure loses updates.
    pub(crate) counter: Arc<AtomicU64>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) barrier: Arc<Barrier>,
    /// This contender has passed the barrier.
    pub(crate) started: Arc<AtomicBool>,
}

impl Race {
    /// Waits for every contender and the clock.
    pub(crate) fn start(&self) {
        self.started.store(true, Ordering::Release);
        self.barrier.wait();
    }

    pub(crate) fn bump(&self) {
        let v = self.counter.load(Ordering::SeqCst);
        self.counter.store(v + 1, Ordering::SeqCst);
    }

    pub(crate) fn running(&self) -> bool {
        !self.stop.load(Ordering::Acquire)
    }
}

/// A contended row's result: handoffs/s and the counters.
pub(crate) struct Row {
    pub(crate) rate: f64,
    pub(crate) per: PerOp,
}

/// Runs `n` contenders (each `contender` on its own thread) for `plan.contended` and prints
/// the row.
pub(crate) fn race<F>(zk: &Zk, name: &str, n: usize, plan: &Plan, contender: F) -> Res<Row>
where
    F: Fn(Race) -> Res<Outcome> + Send + Sync + 'static,
{
    let contender = Arc::new(contender);
    let race = Race {
        counter: Arc::new(AtomicU64::new(0)),
        stop: Arc::new(AtomicBool::new(false)),
        barrier: Arc::new(Barrier::new(n + 1)),
        started: Arc::new(AtomicBool::new(false)),
    };
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let race = Race {
                started: Arc::new(AtomicBool::new(false)),
                ..race.clone()
            };
            let contender = contender.clone();
            thread::spawn(move || {
                let outcome = contender(race.clone());
                // Failed before the start: still let the others (and the clock) go.
                if !race.started.load(Ordering::Acquire) {
                    race.barrier.wait();
                }
                outcome
            })
        })
        .collect();
    let before = zk.mntr();
    race.barrier.wait();
    let start = Instant::now();
    thread::sleep(plan.contended);
    race.stop.store(true, Ordering::Release);
    let (mut per_thread, mut last, mut callers) = (Vec::new(), start, Duration::ZERO);
    let mut waits = histogram();
    for h in handles {
        let mine = h.join().map_err(|_| "contender panicked")??;
        per_thread.push(mine.handoffs);
        last = last.max(mine.end);
        callers += mine.cpu;
        waits
            .add(&mine.waits)
            .map_err(|e| format!("merging waits: {e}"))?;
    }
    let after = zk.mntr();
    let elapsed = last - start;
    let total: u64 = per_thread.iter().sum();
    let lost = total - race.counter.load(Ordering::SeqCst);
    let (lo, hi) = (
        per_thread.iter().min().copied().unwrap_or(0),
        per_thread.iter().max().copied().unwrap_or(0),
    );
    let row = Row {
        rate: total as f64 / elapsed.as_secs_f64(),
        per: PerOp(before.zip(after), total as usize, Some(callers)),
    };
    println!(
        "{name:<10} {n:>3} {total:>9} {:>11.1} {:>8.3} {:>8.3} {:>12} {lost:>5} {:>8.2}s {}",
        row.rate,
        quantile_ms(&waits, 0.5),
        quantile_ms(&waits, 0.99),
        format!("{lo}..{hi}"),
        elapsed.as_secs_f64(),
        row.per
    );
    Ok(row)
}

pub(crate) fn contended(
    zk: &Zk,
    root: &str,
    label: &str,
    plan: &Plan,
    curator: Option<&Curator>,
) -> Res<()> {
    println!(
        "## 2. contended{label}, {:?} per row, each thread its own session and lock on one path, loop acquire -> counter += 1 -> release",
        plan.contended
    );
    println!(
        "{:<10} {:>3} {:>9} {:>11} {:>8} {:>8} {:>12} {:>5} {:>9} {COUNTER_HEAD}",
        "", "n", "handoffs", "handoffs/s", "wait p50", "wait p99", "per-thread", "lost", "elapsed"
    );
    for &n in &CONTENDERS {
        let path = format!("{root}/contended-{n}");

        let (connect, dir) = (zk.connect.clone(), format!("{path}-floor"));
        let floor = race(zk, "floor", n, plan, move |race| {
            let dir = dir.clone();
            floor::with_session(&connect, |wire| async move {
                floor::mkdirs(&wire, &dir).await?;
                race.start();
                let (cpu, mut mine, mut waits) = (thread_cpu(), 0, histogram());
                while race.running() {
                    let t = Instant::now();
                    let node = floor::acquire(&wire, &dir).await?;
                    record(&mut waits, t.elapsed());
                    race.bump();
                    mine += 1;
                    floor::release(&wire, &node).await?;
                }
                Ok(Outcome::now(mine, cpu, waits))
            })
        })?;

        // The same protocol on blocking sockets, without a wire library.
        let dir = format!("{path}-socket");
        let setup = zk.client()?;
        match setup.create(&dir).parents_as_containers().call() {
            Ok(_) | Err(zklock::Error::NodeExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        setup.close();
        let socket_race = |name: &str, threaded: bool| {
            let (connect, dir) = (zk.connect.clone(), dir.clone());
            race(zk, name, n, plan, move |race| {
                let mut session = if threaded {
                    socket::Session::open_threaded(&connect, SESSION_TIMEOUT)?
                } else {
                    socket::Session::open(&connect, SESSION_TIMEOUT)?
                };
                race.start();
                let (cpu, mut mine, mut waits) = (thread_cpu(), 0, histogram());
                while race.running() {
                    let t = Instant::now();
                    let node = session.acquire(&dir)?;
                    record(&mut waits, t.elapsed());
                    race.bump();
                    mine += 1;
                    session.delete(&node)?;
                }
                let outcome = Outcome::now(mine, cpu, waits);
                session.close()?;
                Ok(outcome)
            })
        };
        let bare = socket_race("socket", false)?;
        let threaded = socket_race("threaded", true)?;
        keep_ratio(
            format!("contended{label} n={n}: socket floor client CPU ms/handoff"),
            bare.per.cpu_ms(),
        );
        keep_ratio(
            format!("contended{label} n={n}: threaded socket floor client CPU ms/handoff"),
            threaded.per.cpu_ms(),
        );
        keep_ratio(
            format!("contended{label} n={n}: floor client CPU ms/handoff"),
            floor.per.cpu_ms(),
        );

        let clients = (0..n).map(|_| zk.client()).collect::<Res<Vec<_>>>()?;
        let pool = Arc::new(std::sync::Mutex::new(clients.clone()));
        let zk_path = path.clone();
        let lock = race(zk, "zklock", n, plan, move |race| {
            let client = pool
                .lock()
                .map_err(|_| "poisoned")?
                .pop()
                .ok_or("no Client")?;
            let mutex = InterProcessMutex::new(&client, &zk_path)?;
            race.start();
            let (cpu, mut mine, mut waits) = (thread_cpu(), 0, histogram());
            while race.running() {
                let t = Instant::now();
                mutex.acquire()?;
                record(&mut waits, t.elapsed());
                race.bump();
                mine += 1;
                mutex.release()?;
            }
            Ok(Outcome::now(mine, cpu, waits))
        })?;
        for c in clients {
            c.close();
        }
        println!(
            "{:<14} zklock / floor: handoffs/s {:.2}x, client CPU {}",
            "",
            lock.rate / floor.rate,
            ratio(lock.per.cpu_ms(), floor.per.cpu_ms())
        );
        keep_ratio(
            format!("contended{label} n={n}: zklock / floor handoffs/s"),
            Some(lock.rate / floor.rate),
        );
        keep_ratio(
            format!("contended{label} n={n}: zklock / floor client CPU"),
            lock.per
                .cpu_ms()
                .zip(floor.per.cpu_ms())
                .map(|(a, b)| a / b),
        );
        keep_ratio(
            format!("contended{label} n={n}: zklock client CPU ms/handoff"),
            lock.per.cpu_ms(),
        );

        if let Some(curator) = curator {
            let (handoffs, elapsed, counters) =
                curator.contended(zk, &format!("{path}-curator"), n, plan.contended)?;
            let rate = handoffs as f64 / elapsed.as_secs_f64();
            println!(
                "{:<10} {n:>3} {handoffs:>9} {rate:>11.1} {:>8} {:>8} {:>12} {:>5} {:>8.2}s {}",
                "Curator",
                "-",
                "-",
                "-",
                "-",
                elapsed.as_secs_f64(),
                PerOp(counters, handoffs as usize, None)
            );
            println!(
                "{:<14} zklock / Curator: handoffs/s {:.2}x",
                "",
                lock.rate / rate
            );
            keep_ratio(
                format!("contended{label} n={n}: zklock / Curator handoffs/s"),
                Some(lock.rate / rate),
            );
        }
    }
    println!();
    Ok(())
}
