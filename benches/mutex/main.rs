//! InterProcessMutex against a real ZooKeeper, beside the floor of its wire client: uncontended
//! latency, contended handoffs/s, and the drain of a queue of waiters (which must stay flat per
//! handoff as the queue grows) — each with what it cost the server and the client.
//!
//! ```sh
//! cargo bench --features testing --bench mutex
//! cargo bench --features testing --bench mutex -- --with-curator     # + Curator 5, same loads
//! ZK_CONNECT=host:port cargo bench --features testing --bench mutex   # your own server
//! cargo bench --features testing --bench mutex -- --only=contended --contended-secs=20
//! ```
//!
//! `--only=` takes a comma-separated list of `uncontended`, `contended`, `drain`.
//! `--rounds=N` runs the uncontended and contended cases N times on each server and ends with
//! the median and range of every ratio over the rounds (each ratio is taken within one round,
//! where floor, zklock and Curator ran back to back).
//!
//! The floor (`floor.rs`) is the lock protocol on `zookeeper-client` directly, one thread per
//! session driving both the wire client and the protocol: what any lock on this wire client
//! costs at least. The socket floor (`socket.rs`, uncontended and contended) is the same
//! protocol on blocking sockets with hand-encoded requests and no wire library: what the kernel
//! and the server cost the client, below which no client can go on the machine at hand; its
//! threaded variant adds a reader thread per session, as any client that keeps its session alive
//! needs. `--with-curator` runs Curator's `InterProcessMutex`
//! (`benches/java/CuratorBench.java`, Debian's `libcurator-recipes-java` and a JDK) beside each
//! contended and drain row, on the same server in the same run, and prints the ratios.
//!
//! Plain `fn main` (harness = false): one run, prints tables. Server-side counters come from
//! the four-letter word `mntr` (deltas of `zk_packets_received`, of the read and write request
//! counts and of the log fsyncs; they include the few pings of the bench's Clients) and, for a
//! TestingServer, from the JVM's `/proc/<pid>/io` (`wchar`: bytes the server wrote, i.e. its
//! responses and watch events plus its transaction log), which shows whether each handoff
//! re-reads the whole queue. Client CPU is this process's (`CLOCK_PROCESS_CPUTIME_ID`, every
//! thread), and the calling threads' own share (`CLOCK_THREAD_CPUTIME_ID`): the rest is the
//! Clients' I/O and watcher threads.
//!
//! `cargo test` runs this bench once too, as a short pass (it keeps the bench working; its
//! figures mean nothing).

mod counters;
mod curator;
mod floor;
mod socket;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use zklock::testing::TestingServer;
use zklock::{Client, CreateMode, InterProcessMutex};

use counters::{thread_cpu, PerOp, Zk, COUNTER_HEAD};
use curator::Curator;

const COMMAND: &str = "cargo bench --features testing --bench mutex";
const CONTENDERS: [usize; 2] = [2, 8];
const DRAIN_CLIENTS: usize = 10;
const WAITER_STACK: usize = 64 * 1024;
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// Gives up on a phase that makes no progress for this long (the bench must never hang).
const STALL: Duration = Duration::from_secs(60);

type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How much of each case runs: all of it under `cargo bench`, a short pass under `cargo test`.
struct Plan {
    /// The short pass of `cargo test`, whose figures mean nothing.
    short: bool,
    warmup: usize,
    iterations: usize,
    contended: Duration,
    queues: &'static [usize],
    drain_runs: usize,
}

const FULL: Plan = Plan {
    short: false,
    warmup: 100,
    iterations: 500,
    contended: Duration::from_secs(5),
    queues: &[20, 100, 1000],
    drain_runs: 3,
};

const SHORT: Plan = Plan {
    short: true,
    warmup: 10,
    iterations: 50,
    contended: Duration::from_millis(500),
    queues: &[20, 100],
    drain_runs: 1,
};

fn main() {
    if let Err(e) = run() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

/// The value of the command-line argument `prefix<value>`.
fn arg(prefix: &str) -> Option<String> {
    std::env::args().find_map(|a| a.strip_prefix(prefix).map(str::to_owned))
}

fn run() -> Res<()> {
    // `cargo bench` passes --bench; `cargo test` does not.
    let mut plan = if std::env::args().any(|a| a == "--bench") {
        FULL
    } else {
        SHORT
    };
    if let Some(secs) = arg("--contended-secs=") {
        plan.contended = Duration::from_secs_f64(secs.parse()?);
    }
    let plan = &plan;
    let nproc = thread::available_parallelism().map_or(0, |n| n.get());
    let zk = match std::env::var("ZK_CONNECT") {
        Ok(connect) if !connect.is_empty() => Zk {
            server: None,
            connect,
        },
        _ => {
            let started = Instant::now();
            let server = TestingServer::start()?;
            eprintln!("TestingServer up in {:.1?}", started.elapsed());
            Zk {
                connect: server.connect_string(),
                server: Some(server),
            }
        }
    };
    let version = zk
        .four_letter("srvr")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Zookeeper version: ").map(str::to_owned))
        })
        .unwrap_or_else(|| "unknown".into());
    let root = format!(
        "/zklock-bench-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );

    println!("# zklock InterProcessMutex bench");
    println!("# command:   {COMMAND}");
    if plan.short {
        println!("# SHORT PASS (run by cargo test): the figures below mean nothing");
    }
    println!(
        "# machine:   nproc={nproc}, {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    println!(
        "# zookeeper: {} at {} (version {version}), session timeout {:?}",
        if zk.server.is_some() {
            "TestingServer (standalone, loopback, forceSync=no)"
        } else {
            "ZK_CONNECT"
        },
        zk.connect,
        SESSION_TIMEOUT
    );
    println!("# counters per op (per handoff in 2 and 3): packets received, read and write requests and log fsyncs (mntr), bytes written by the server JVM (/proc/<pid>/io wchar), this process's CPU (every thread) and the calling threads' own CPU");
    println!();

    let bench_start = Instant::now();
    let curator = if std::env::args().any(|a| a == "--with-curator") {
        Some(Curator::compile()?)
    } else {
        None
    };
    let curator = curator.as_ref();
    let only = arg("--only=");
    let case = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|c| c == name))
    };
    let rounds: usize = arg("--rounds=").map_or(Ok(1), |r| r.parse())?;
    for round in 1..=rounds {
        if rounds > 1 {
            println!("# round {round} of {rounds}");
        }
        if case("uncontended") {
            uncontended(&zk, &root, "", plan)?;
        }
        if case("contended") {
            contended(&zk, &root, "", plan, curator)?;
        }
    }
    // Waiters that release at once, then waiters that hold for a millisecond (longer than a
    // round trip, so each can see that the one ahead of it holds).
    if case("drain") {
        drain(&zk, &root, "", Duration::ZERO, plan, curator)?;
        drain(&zk, &root, "", Duration::from_millis(1), plan, curator)?;
    }
    // The same on a server that fsyncs every transaction, as in production.
    if zk.server.is_some() {
        let durable = TestingServer::start_durable()?;
        let zk = Zk {
            connect: durable.connect_string(),
            server: Some(durable),
        };
        let label = " (forceSync=yes)";
        for round in 1..=rounds {
            if rounds > 1 {
                println!("# round {round} of {rounds}");
            }
            if case("uncontended") {
                uncontended(&zk, &root, label, plan)?;
            }
            if case("contended") {
                contended(&zk, &root, label, plan, curator)?;
            }
        }
        if case("drain") {
            drain(&zk, &root, label, Duration::from_millis(1), plan, curator)?;
        }
    }
    if rounds > 1 {
        print_ratios(rounds);
    }
    println!();
    println!("# total bench time {:.1?}", bench_start.elapsed());
    Ok(())
}

/// Every ratio the rounds printed, by row, in the order they first appeared.
static RATIOS: std::sync::Mutex<Vec<(String, f64)>> = std::sync::Mutex::new(Vec::new());

/// Keeps a ratio for the summary of `--rounds=N`.
fn keep_ratio(what: String, value: Option<f64>) {
    if let (Some(v), Ok(mut ratios)) = (value, RATIOS.lock()) {
        ratios.push((what, v));
    }
}

/// Median and range of each ratio over the rounds: the rows of one round move together with
/// the machine's load, so a ratio taken within a round and summarised over rounds is what can be
/// told apart from noise.
fn print_ratios(rounds: usize) {
    let Ok(ratios) = RATIOS.lock() else { return };
    let mut order: Vec<&str> = Vec::new();
    for (what, _) in ratios.iter() {
        if !order.contains(&what.as_str()) {
            order.push(what);
        }
    }
    println!("## ratios over {rounds} rounds: median [min .. max]");
    for what in order {
        let mut values: Vec<f64> = ratios
            .iter()
            .filter(|(w, _)| w == what)
            .map(|(_, v)| *v)
            .collect();
        values.sort_by(f64::total_cmp);
        let median = if values.len() % 2 == 1 {
            values[values.len() / 2]
        } else {
            (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0
        };
        // Ratios print as "1.23x", the CPU figures as milliseconds.
        let unit = if what.contains("ms/") { " ms" } else { "x" };
        println!(
            "{what:<62} {median:>6.2}{unit} [{:.2} .. {:.2}] (n={})",
            values[0],
            values[values.len() - 1],
            values.len()
        );
    }
}

/// Latencies in microseconds, to three significant figures.
fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("three significant figures are valid")
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = d.as_micros().try_into().unwrap_or(u64::MAX);
    // `record` grows the histogram; `saturating_record` would clamp to its current range.
    if h.record(us).is_err() {
        h.saturating_record(us);
    }
}

/// The `q` quantile of `h`, in ms.
fn quantile_ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------------------
// 1. Uncontended acquire + release, beside the floor.

/// A timed row: latencies, counters and the caller's own CPU.
struct Timed {
    samples: Histogram<u64>,
    per: PerOp,
}

/// Warms `op` up, then times `plan.iterations` of it on this thread.
fn timed(zk: &Zk, plan: &Plan, mut op: impl FnMut() -> Res<()>) -> Res<Timed> {
    for _ in 0..plan.warmup {
        op()?;
    }
    let before = zk.mntr();
    let cpu = thread_cpu();
    let mut samples = histogram();
    for _ in 0..plan.iterations {
        let t = Instant::now();
        op()?;
        record(&mut samples, t.elapsed());
    }
    let cpu = thread_cpu() - cpu;
    // A lock hold's keeper getData runs in the background: let it land.
    thread::sleep(Duration::from_millis(100));
    let after = zk.mntr();
    Ok(Timed {
        samples,
        per: PerOp(before.zip(after), plan.iterations, Some(cpu)),
    })
}

fn uncontended(zk: &Zk, root: &str, label: &str, plan: &Plan) -> Res<()> {
    // The floor: the same protocol on zookeeper-client, on this thread.
    let dir = format!("{root}/floor-uncontended");
    let floor = floor::with_session(&zk.connect, |wire| async move {
        floor::mkdirs(&wire, &dir).await?;
        let cycle = || async {
            let node = floor::acquire(&wire, &dir).await?;
            floor::release(&wire, &node).await
        };
        for _ in 0..plan.warmup {
            cycle().await?;
        }
        let before = zk.mntr();
        let cpu = thread_cpu();
        let mut samples = histogram();
        for _ in 0..plan.iterations {
            let t = Instant::now();
            cycle().await?;
            record(&mut samples, t.elapsed());
        }
        let cpu = thread_cpu() - cpu;
        let after = zk.mntr();
        Ok(Timed {
            samples,
            per: PerOp(before.zip(after), plan.iterations, Some(cpu)),
        })
    })?;

    let client = zk.client()?;
    // The socket floor: the same three requests without any wire library.
    let socket_dir = format!("{root}/socket-floor");
    match client.create(&socket_dir).parents_as_containers().call() {
        Ok(_) | Err(zklock::Error::NodeExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let socket_prefix = format!("{socket_dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    let socket_row = |mut session: socket::Session| {
        let row = timed(zk, plan, || {
            let node = session.create(&socket_prefix)?;
            if session.children(&socket_dir)?.is_empty() {
                return Err("the socket floor's listing missed its node".into());
            }
            session.delete(&node)
        })?;
        session.close()?;
        Res::Ok(row)
    };
    let bare = socket_row(socket::Session::open(&zk.connect, SESSION_TIMEOUT)?)?;
    let threaded = socket_row(socket::Session::open_threaded(
        &zk.connect,
        SESSION_TIMEOUT,
    )?)?;

    let raw_parent = format!("{root}/raw");
    let raw_prefix = format!("{raw_parent}/lock-");
    let raw = timed(zk, plan, || {
        let node = client
            .create(&raw_prefix)
            .mode(CreateMode::EphemeralSequential)
            .parents_as_containers()
            .protected()
            .call()?;
        let children = client.children(&raw_parent)?;
        assert!(!children.is_empty());
        client.delete(&node)?;
        Ok(())
    })?;
    let mutex = InterProcessMutex::new(&client, &format!("{root}/uncontended"))?;
    let lock = timed(zk, plan, || {
        mutex.acquire()?;
        mutex.release()?;
        Ok(())
    })?;
    client.close();

    println!(
        "## 1. uncontended{label}, one session, {} iterations after {} warm-up each",
        plan.iterations, plan.warmup
    );
    println!(
        "{:<72} {:>8} {:>8} {:>8} {COUNTER_HEAD}",
        "operation", "p50 ms", "p99 ms", "mean ms"
    );
    let rows = [
        (
            "floor: zookeeper-client, one thread: create, list, delete",
            &floor,
        ),
        (
            "socket floor: blocking TcpStream, no wire library: same 3 requests",
            &bare,
        ),
        (
            "threaded socket floor: the same, answers read by a session thread",
            &threaded,
        ),
        (
            "zklock Client, no recipe: create(protected, parents), children, delete",
            &raw,
        ),
        ("InterProcessMutex acquire + release", &lock),
    ];
    let mut p50s = Vec::new();
    for (name, row) in rows {
        let p50 = quantile_ms(&row.samples, 0.5);
        p50s.push(p50);
        println!(
            "{name:<72} {p50:>8.3} {:>8.3} {:>8.3} {}",
            quantile_ms(&row.samples, 0.99),
            row.samples.mean() / 1e3,
            row.per
        );
    }
    println!(
        "InterProcessMutex / floor: p50 {:.2}x, client CPU {}; socket floor / floor: p50 {:.2}x, \
         client CPU {}",
        p50s[4] / p50s[0],
        ratio(lock.per.cpu_ms(), floor.per.cpu_ms()),
        p50s[1] / p50s[0],
        ratio(bare.per.cpu_ms(), floor.per.cpu_ms())
    );
    keep_ratio(
        format!("uncontended{label}: zklock / floor p50"),
        Some(p50s[4] / p50s[0]),
    );
    keep_ratio(
        format!("uncontended{label}: socket floor client CPU ms/cycle"),
        bare.per.cpu_ms(),
    );
    keep_ratio(
        format!("uncontended{label}: threaded socket floor client CPU ms/cycle"),
        threaded.per.cpu_ms(),
    );
    keep_ratio(
        format!("uncontended{label}: floor client CPU ms/cycle"),
        floor.per.cpu_ms(),
    );
    keep_ratio(
        format!("uncontended{label}: zklock client CPU ms/cycle"),
        lock.per.cpu_ms(),
    );
    keep_ratio(
        format!("uncontended{label}: zklock / floor client CPU"),
        lock.per
            .cpu_ms()
            .zip(floor.per.cpu_ms())
            .map(|(a, b)| a / b),
    );
    println!();
    Ok(())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "n/a".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Contended handoffs/s: each thread its own session and its own lock on one path.

/// What one contender hands back.
struct Outcome {
    handoffs: u64,
    /// When it stopped.
    end: Instant,
    /// Its own CPU.
    cpu: Duration,
    /// How long each acquire waited.
    waits: Histogram<u64>,
}

impl Outcome {
    /// A contender's tally as it stops; `cpu_start`: its thread CPU when it started.
    fn now(handoffs: u64, cpu_start: Duration, waits: Histogram<u64>) -> Outcome {
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
struct Race {
    /// Non-atomic read-modify-write on purpose: a mutual-exclusion failure loses updates.
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    barrier: Arc<Barrier>,
    /// This contender has passed the barrier.
    started: Arc<AtomicBool>,
}

impl Race {
    /// Waits for every contender and the clock.
    fn start(&self) {
        self.started.store(true, Ordering::Release);
        self.barrier.wait();
    }

    fn bump(&self) {
        let v = self.counter.load(Ordering::SeqCst);
        self.counter.store(v + 1, Ordering::SeqCst);
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::Acquire)
    }
}

/// A contended row's result: handoffs/s and the counters.
struct Row {
    rate: f64,
    per: PerOp,
}

/// Runs `n` contenders (each `contender` on its own thread) for `plan.contended` and prints
/// the row.
fn race<F>(zk: &Zk, name: &str, n: usize, plan: &Plan, contender: F) -> Res<Row>
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

fn contended(zk: &Zk, root: &str, label: &str, plan: &Plan, curator: Option<&Curator>) -> Res<()> {
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

// ---------------------------------------------------------------------------------------------
// 3. Drain: Q queued waiters, released at once by the holder.

struct DrainRun {
    drain: Duration,
    /// Time per handoff of the first 10 % over that of the last 10 %.
    head_tail: f64,
    counters: PerOp,
    setup: Duration,
}

fn drain(
    zk: &Zk,
    root: &str,
    label: &str,
    hold: Duration,
    plan: &Plan,
    curator: Option<&Curator>,
) -> Res<()> {
    let holder_client = zk.client()?;
    let clients = (0..DRAIN_CLIENTS)
        .map(|_| zk.client())
        .collect::<Res<Vec<_>>>()?;
    println!("## 3. drain{label}, each waiter holding {hold:?}: holder takes the lock, Q waiter threads (each its own InterProcessMutex, sharing {DRAIN_CLIENTS} Clients round-robin, {} KiB stacks) queue; once all Q nodes and their watches are on the server the holder releases; drain = release until the last waiter has acquired and released; head/tail = time per handoff of the first 10 % over the last 10 %. {} run(s) per Q, median shown.", WAITER_STACK / 1024, plan.drain_runs);
    println!(
        "{:<8} {:>6} {:>10} {:>12} {:>9} {:>18} {:>8} {COUNTER_HEAD}",
        "", "Q", "drain ms", "per handoff", "head/tail", "runs ms", "setup s"
    );
    let mut per_handoff = Vec::new();
    for &q in plan.queues {
        let mut runs = Vec::new();
        for r in 0..plan.drain_runs {
            let path = format!("{root}/drain-{q}-{r}-{}", hold.as_millis());
            runs.push(drain_once(zk, &holder_client, &clients, &path, q, hold)?);
        }
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&i| runs[i].drain);
        let median = &runs[order[order.len() / 2]];
        let all = order
            .iter()
            .map(|&i| format!("{:.0}", ms(runs[i].drain)))
            .collect::<Vec<_>>()
            .join("/");
        let per = ms(median.drain) / q as f64;
        per_handoff.push((q, per, median.counters.bytes()));
        println!(
            "{:<8} {q:>6} {:>10.1} {:>12.3} {:>9.2} {all:>18} {:>8.1} {}",
            "zklock",
            ms(median.drain),
            per,
            median.head_tail,
            median.setup.as_secs_f64(),
            median.counters
        );
        if let Some(curator) = curator {
            let path = format!("{root}/drain-{q}-{}-curator", hold.as_millis());
            let (drain, head_tail, counters) = curator.drain(zk, &path, q, DRAIN_CLIENTS, hold)?;
            println!(
                "{:<8} {q:>6} {:>10.1} {:>12.3} {head_tail:>9.2} {:>18} {:>8} {}",
                "Curator",
                ms(drain),
                ms(drain) / q as f64,
                "-",
                "-",
                PerOp(counters, q, None)
            );
            println!(
                "{:<15} zklock / Curator drain time: {:.2}x",
                "",
                median.drain.as_secs_f64() / drain.as_secs_f64()
            );
        }
    }
    let (q0, first, first_bytes) = per_handoff[0];
    let (qn, lastc, last_bytes) = per_handoff[per_handoff.len() - 1];
    println!(
        "per-handoff time  Q={qn} / Q={q0}: {:.2}x (flat ~1x: O(n) drain)",
        lastc / first
    );
    if let (Some(a), Some(b)) = (first_bytes, last_bytes) {
        println!(
            "server bytes per handoff Q={qn} / Q={q0}: {:.1}x (flat: no handoff re-reads the queue; \
             growing ~linearly with Q ({}x here): each handoff re-lists the remaining queue, O(n^2) bytes in all)",
            b / a,
            qn / q0
        );
    }
    println!();
    holder_client.close();
    for c in clients {
        c.close();
    }
    Ok(())
}

/// Waits until `q` watches are on the server (every waiter parked), if it answers `wchs`.
fn await_watches(zk: &Zk, q: usize) -> Res<()> {
    let since = Instant::now();
    if zk.watches().is_some() {
        while zk.watches().unwrap_or(u64::MAX) < q as u64 {
            if since.elapsed() > STALL {
                return Err(format!("watches not set after {STALL:?}").into());
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
    thread::sleep(Duration::from_millis(50));
    Ok(())
}

fn drain_once(
    zk: &Zk,
    holder_client: &Client,
    clients: &[Client],
    path: &str,
    q: usize,
    hold: Duration,
) -> Res<DrainRun> {
    let setup_start = Instant::now();
    let holder = InterProcessMutex::new(holder_client, path)?;
    holder.acquire()?;

    let (tx, rx) = mpsc::channel::<Res<Instant>>();
    let mut handles = Vec::with_capacity(q);
    for i in 0..q {
        let (client, path, tx) = (
            clients[i % clients.len()].clone(),
            path.to_owned(),
            tx.clone(),
        );
        let h = thread::Builder::new()
            .name(format!("waiter-{i}"))
            .stack_size(WAITER_STACK)
            .spawn(move || {
                let result = (|| -> Res<Instant> {
                    let mutex = InterProcessMutex::new(&client, &path)?;
                    mutex.acquire()?;
                    if !hold.is_zero() {
                        thread::sleep(hold);
                    }
                    mutex.release()?;
                    Ok(Instant::now())
                })();
                let _ = tx.send(result);
            })?;
        handles.push(h);
    }
    drop(tx);

    // All Q waiters' nodes under the lock path, besides the holder's ...
    let waited = Instant::now();
    loop {
        let n = holder_client.children(path)?.len();
        if n == q + 1 {
            break;
        }
        if waited.elapsed() > STALL {
            return Err(format!("only {n} of {} nodes after {STALL:?}", q + 1).into());
        }
        thread::sleep(Duration::from_millis(10));
    }
    // ... and every waiter parked on its watch (Q getData watches + the holder's keeper).
    await_watches(zk, q)?;
    let setup = setup_start.elapsed();

    let before = zk.mntr();
    let start = Instant::now();
    holder.release()?;
    let mut done = Vec::with_capacity(q);
    for _ in 0..q {
        done.push(
            rx.recv_timeout(STALL)
                .map_err(|_| format!("drain of {q} stalled for {STALL:?}"))??,
        );
    }
    done.sort();
    let drain = done[q - 1] - start;
    let k = (q / 10).max(1);
    let head = done[k - 1] - start;
    let tail = done[q - 1] - if q > k { done[q - 1 - k] } else { start };
    // The last holder's keeper getData runs in the background: let it land.
    thread::sleep(Duration::from_millis(50));
    let after = zk.mntr();
    for h in handles {
        h.join().map_err(|_| "waiter panicked")?;
    }
    Ok(DrainRun {
        drain,
        head_tail: head.as_secs_f64() / tail.as_secs_f64(),
        counters: PerOp(before.zip(after), q, None),
        setup,
    })
}
