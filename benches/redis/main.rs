//! RedisMutex against a real `redis-server`, beside the floor of its protocol and redis-py's
//! `Lock`, in the same run on the same server: uncontended latency, contended handoffs/s with 2
//! and 8 sessions, and the drain of 100 and 1000 waiters — each with the requests per
//! acquisition the server counted and the client CPU it took.
//!
//! ```sh
//! cargo bench --features testing,redis --bench redis
//! cargo bench --features testing,redis --bench redis -- --only=contended --secs=10
//! cargo bench --features testing,redis --bench redis -- --only=handoff
//! cargo bench --features testing,redis --bench redis -- --only=replicated
//! ```
//!
//! The hand-off across processes (`handoff.rs`) runs beside python-redis-lock and redis-py.
//! Replicated grants against plain grants (`replicated.rs`) run on a Sentinel set, and only
//! when asked (`--only=replicated`): neither the default run nor the short pass runs them.
//!
//! The floor (`floor.rs`) runs the very same Lua scripts (this file includes the library's
//! `scripts.rs`) on blocking sockets with hand-encoded commands and a subscriber socket per
//! session: what any client of this protocol costs at least. redis-py's `Lock`
//! (`benches/python/redis_py_bench.py`, Debian's `python3-redis`) is what a Python service
//! would use: `SET NX PX`, a compare-and-delete script, and waiters that poll (every 100 ms,
//! its default). In the contended rows each holder swaps its session's id into a key
//! (`SET … GET`, one more command per acquisition for every contender) to count handoffs —
//! acquisitions by another session than the last — and "spread" is the fewest and most
//! acquisitions of one session: a fair lock hands over every time and shares them out, a
//! polling one lets a session that has just released take the lock again before the others
//! wake. Its sessions are processes (threads in
//! one process would share the GIL); its drain's waiters are threads of one process.
//!
//! Costs are the server's own counts (`INFO commandstats` deltas): every command it ran but
//! `INFO` — the commands inside scripts too, so this is the server's work, renewals and
//! wake-up messages included — and, in brackets, the scripts among them (`EVAL`/`EVALSHA`,
//! one round trip each). Client CPU is this process's for zklock and
//! the floor, and the Python processes' own for redis-py; the server's is `redis-server`'s (in
//! steps of 10 ms a turn).
//!
//! The contended rows take turns of at most half a second each, so that a drift of the
//! machine's speed falls on every row alike; a row's figures are the sums over its turns.
//! `--rows=zklock,floor` runs only the contended rows whose names start so (for profiling).
//!
//! `cargo test` runs this bench once too, as a short pass (it keeps the bench working; its
//! figures mean nothing).

#[path = "../common/mod.rs"]
mod common;
mod floor;
mod handoff;
mod replicated;
#[path = "../../src/redis/scripts.rs"]
#[allow(dead_code, unused_imports, unreachable_pub)]
mod scripts;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{num, pid_cpu, process_cpu, secs, Plan, Res};
use hdrhistogram::Histogram;
use zklock::redis::RedisMutex;
use zklock::testing::TestingRedis;
use zklock::RedisClient;

const SESSIONS: [usize; 2] = [2, 8];
const DRAIN_CLIENTS: usize = 10;

fn main() -> Res<()> {
    if let Ok(args) = std::env::var(handoff::WORKER) {
        return handoff::worker(&args);
    }
    let plan = Plan::from_args();
    let server = TestingRedis::start()?;
    if plan.short {
        println!("(short pass: the figures mean nothing)");
    }
    println!(
        "redis-server 127.0.0.1:{} (no persistence)\n",
        server.port()
    );
    if plan.runs("uncontended") {
        uncontended(&plan, &server)?;
    }
    if plan.runs("contended") {
        contended(&plan, &server)?;
    }
    if plan.runs("drain") {
        drain(&plan, &server)?;
    }
    if plan.runs("handoff") {
        handoff::handoff(plan.short, &server)?;
    }
    let asked = |case: &str| {
        plan.only
            .as_deref()
            .is_some_and(|only| only.split(',').any(|c| c == case))
    };
    if asked("replicated") {
        replicated::replicated(&plan)?;
    }
    Ok(())
}

/// The server's counts: every command it has run but `INFO` (those inside scripts too), and
/// the scripts among them (`EVAL`, `EVALSHA`).
fn requests(server: &TestingRedis) -> Res<(u64, u64)> {
    let stats = server.command(&["INFO", "commandstats"])?;
    let calls =
        |l: &str| -> Option<u64> { l.split("calls=").nth(1)?.split(',').next()?.parse().ok() };
    let (mut all, mut scripts) = (0, 0);
    for l in stats.lines().filter(|l| l.starts_with("cmdstat_")) {
        let n = calls(l).unwrap_or(0);
        if !l.starts_with("cmdstat_info:") {
            all += n;
        }
        if l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:") {
            scripts += n;
        }
    }
    Ok((all, scripts))
}

/// What one case cost: server commands (all, and scripts), client CPU, the server's CPU.
#[derive(Default)]
struct Cost {
    commands: u64,
    scripts: u64,
    cpu: Duration,
    server_cpu: Duration,
}

impl Cost {
    fn add(&mut self, more: &Cost) {
        self.commands += more.commands;
        self.scripts += more.scripts;
        self.cpu += more.cpu;
        self.server_cpu += more.server_cpu;
    }
}

fn measure<T>(server: &TestingRedis, f: impl FnOnce() -> Res<(T, Duration)>) -> Res<(T, Cost)> {
    let server_cpu = || server.pid().map_or(Duration::ZERO, pid_cpu);
    let (r0, c0, s0) = (requests(server)?, process_cpu(), server_cpu());
    let (out, child_cpu) = f()?;
    let (cpu, s1) = (process_cpu() - c0 + child_cpu, server_cpu());
    let r1 = requests(server)?;
    let cost = Cost {
        commands: r1.0 - r0.0,
        scripts: r1.1 - r0.1,
        cpu,
        server_cpu: s1.saturating_sub(s0),
    };
    Ok((out, cost))
}

fn per(cost: &Cost, ops: u64) -> String {
    let ops = ops.max(1);
    let ops = ops as f64;
    format!(
        "{:.1} cmds ({:.2} scripts), {:.3} ms CPU, server {:.3} ms",
        cost.commands as f64 / ops,
        cost.scripts as f64 / ops,
        cost.cpu.as_secs_f64() * 1e3 / ops,
        cost.server_cpu.as_secs_f64() * 1e3 / ops
    )
}

// ---------------------------------------------------------------------------
// Uncontended: acquire + release, one session.
// ---------------------------------------------------------------------------

fn uncontended(plan: &Plan, server: &TestingRedis) -> Res<()> {
    println!(
        "## uncontended acquire + release ({} cycles)\n",
        plan.cycles
    );
    println!("| | p50 | p99 | per cycle |\n|---|---|---|---|");
    let client = RedisClient::connect(&server.url())?;
    let mutex = RedisMutex::new(&client, "bench-u")?;
    let (h, cost) = measure(server, || {
        let mut h = Histogram::<u64>::new(3)?;
        for _ in 0..plan.cycles {
            let t = Instant::now();
            mutex.lock()?.release()?;
            h.record(t.elapsed().as_micros() as u64)?;
        }
        Ok((h, Duration::ZERO))
    })?;
    row("zklock", &h, &cost, plan.cycles);
    client.close();

    let shas = floor::load(server.port())?;
    let mut session = floor::Session::open(server.port(), "bench-f", "floor-u", &shas)?;
    let (h, cost) = measure(server, || {
        let mut h = Histogram::<u64>::new(3)?;
        for _ in 0..plan.cycles {
            let t = Instant::now();
            let owner = session.lock()?;
            session.unlock(&owner)?;
            h.record(t.elapsed().as_micros() as u64)?;
        }
        Ok((h, Duration::ZERO))
    })?;
    row("floor", &h, &cost, plan.cycles);

    let (line, cost) = measure(server, || {
        let mut py = redis_py(server, "cycle", &plan.cycles.to_string())?;
        let line = py.finish()?;
        let cpu = secs(line.get(3));
        Ok((line, cpu))
    })?;
    println!(
        "| redis-py | {:.0} µs | {:.0} µs | {} |\n",
        num(line.get(1)),
        num(line.get(2)),
        per(&cost, plan.cycles as u64)
    );
    Ok(())
}

fn row(what: &str, h: &Histogram<u64>, cost: &Cost, ops: usize) {
    common::latency_row(what, h, &per(cost, ops as u64));
}

// ---------------------------------------------------------------------------
// Contended: S sessions in a loop of acquire + release on one lock.
// ---------------------------------------------------------------------------

/// The contended rows, in the order each turn runs them.
const ROWS: [&str; 4] = [
    "zklock (fair)",
    "zklock (barging)",
    "floor (fair)",
    "redis-py",
];

/// The longest turn of a contended row: the rows take turns, so that a drift of the machine's
/// speed (other load, the host) falls on all of them alike.
const TURN: Duration = Duration::from_millis(500);

fn contended(plan: &Plan, server: &TestingRedis) -> Res<()> {
    let turns = (plan.contended.as_secs_f64() / TURN.as_secs_f64())
        .ceil()
        .clamp(1.0, 1000.0) as u32;
    let d = plan.contended / turns;
    println!(
        "## contended: S sessions, acquire + release in a loop, {:?} each, in turns of {d:?}\n",
        plan.contended,
    );
    println!(
        "| S | | acquisitions/s | handoffs/s | spread | per acquisition | handoffs ÷ floor | ÷ redis-py |\n\
         |---|---|---|---|---|---|---|---|"
    );
    for s in SESSIONS {
        let row = |i: usize, f: &dyn Fn() -> Res<(Counts, Duration)>| {
            if plan.runs_row(ROWS[i]) {
                measure(server, f)
            } else {
                Ok((Vec::new(), Cost::default()))
            }
        };
        let mut rows: Vec<(Counts, Cost)> = (0..ROWS.len())
            .map(|_| (Vec::new(), Cost::default()))
            .collect();
        for _ in 0..turns {
            let turn = [
                row(0, &|| {
                    Ok((zklock_contended(server, s, d, true)?, Duration::ZERO))
                })?,
                row(1, &|| {
                    Ok((zklock_contended(server, s, d, false)?, Duration::ZERO))
                })?,
                row(2, &|| Ok((floor_contended(server, s, d)?, Duration::ZERO)))?,
                row(3, &|| python_contended(server, s, d))?,
            ];
            for ((counts, cost), (more, more_cost)) in rows.iter_mut().zip(turn) {
                counts.resize(more.len().max(counts.len()), (0, 0));
                for (c, m) in counts.iter_mut().zip(more) {
                    *c = (c.0 + m.0, c.1 + m.1);
                }
                cost.add(&more_cost);
            }
        }
        let total = |v: &[(u64, u64)]| v.iter().map(|(n, _)| n).sum::<u64>();
        let handoffs = |v: &[(u64, u64)]| v.iter().map(|(_, h)| h).sum::<u64>();
        let rate = |n: u64| n as f64 / plan.contended.as_secs_f64();
        let (fl, py) = (&rows[2].0, &rows[3].0);
        for (i, (what, (v, cost))) in ROWS.iter().zip(&rows).enumerate() {
            if !plan.runs_row(what) {
                continue;
            }
            let ratio = |other: &[(u64, u64)]| match handoffs(other) {
                _ if i >= 2 => String::new(),
                0 => "—".to_owned(),
                h => format!("{:.2}×", handoffs(v) as f64 / h as f64),
            };
            println!(
                "| {s} | {what} | {:.0} | {:.0} | {}–{} | {} | {} | {} |",
                rate(total(v)),
                rate(handoffs(v)),
                v.iter().map(|(n, _)| n).min().unwrap_or(&0),
                v.iter().map(|(n, _)| n).max().unwrap_or(&0),
                per(cost, total(v)),
                ratio(fl),
                ratio(py),
            );
        }
    }
    println!();
    Ok(())
}

/// Each session's acquisitions and handoffs.
type Counts = Vec<(u64, u64)>;

/// Runs `session` on `s` threads for `d` after they are all ready; each session's counts.
fn run_sessions(
    s: usize,
    d: Duration,
    session: impl Fn(usize, &std::sync::atomic::AtomicBool) -> Res<(u64, u64)> + Send + Sync + 'static,
) -> Res<Counts> {
    Ok(common::run_sessions(s, d, || (), session)?.0)
}

fn zklock_contended(server: &TestingRedis, s: usize, d: Duration, fair: bool) -> Res<Counts> {
    let clients: Vec<RedisClient> = (0..s)
        .map(|_| RedisClient::connect(&server.url()))
        .collect::<zklock::Result<_>>()?;
    let name = if fair { "bench-c" } else { "bench-b" };
    let mutexes: Arc<Vec<RedisMutex>> = Arc::new(
        clients
            .iter()
            .map(|c| {
                if fair {
                    RedisMutex::new(c, name)
                } else {
                    RedisMutex::barging(c, name)
                }
            })
            .collect::<zklock::Result<_>>()?,
    );
    let port = server.port();
    let n = run_sessions(s, d, move |i, stop| {
        let mut last = floor::Conn::open(port)?;
        let (mut n, mut handoffs) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            let guard = mutexes[i].lock()?;
            handoffs += swap_last(&mut last, "bench-c:last", i)?;
            guard.release()?;
            n += 1;
        }
        Ok((n, handoffs))
    })?;
    clients.iter().for_each(RedisClient::close);
    Ok(n)
}

fn floor_contended(server: &TestingRedis, s: usize, d: Duration) -> Res<Counts> {
    let port = server.port();
    let shas = Arc::new(floor::load(port)?);
    run_sessions(s, d, move |i, stop| {
        let mut session = floor::Session::open(port, "bench-fc", &format!("floor-{i}"), &shas)?;
        let mut last = floor::Conn::open(port)?;
        let (mut n, mut handoffs) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            let owner = session.lock()?;
            handoffs += swap_last(&mut last, "bench-fc:last", i)?;
            session.unlock(&owner)?;
            n += 1;
        }
        Ok((n, handoffs))
    })
}

/// Records session `i` as the last holder; 1 if another session held the lock before.
fn swap_last(conn: &mut floor::Conn, key: &str, i: usize) -> Res<u64> {
    let me = i.to_string();
    Ok(match conn.call(&["SET", key, &me, "GET"])? {
        floor::Reply::Text(before) if before != me => 1,
        _ => 0,
    })
}

fn python_contended(server: &TestingRedis, s: usize, d: Duration) -> Res<(Counts, Duration)> {
    let mut procs = (0..s)
        .map(|_| redis_py(server, "contend", &d.as_secs_f64().to_string()))
        .collect::<Res<Vec<_>>>()?;
    procs.iter_mut().try_for_each(common::Python::go)?;
    let (mut n, mut cpu) = (Vec::new(), Duration::ZERO);
    for mut p in procs {
        let line = p.finish()?;
        n.push((num(line.get(1)) as u64, num(line.get(3)) as u64));
        cpu += secs(line.get(2));
    }
    Ok((n, cpu))
}

// ---------------------------------------------------------------------------
// Drain: Q waiters queued behind a holder, each releasing as soon as it holds.
// ---------------------------------------------------------------------------

fn drain(plan: &Plan, server: &TestingRedis) -> Res<()> {
    println!("## drain: Q waiters behind a holder, each releasing at once\n");
    println!("| Q | | drain | per handoff | cost per handoff |\n|---|---|---|---|---|");
    let drains: &[usize] = if plan.short { &[10] } else { &[100, 1000] };
    for &q in drains {
        let (took, cost) = measure(server, || Ok((zklock_drain(server, q)?, Duration::ZERO)))?;
        println!(
            "| {q} | zklock | {:.0} ms | {:.3} ms | {} |",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e3 / q as f64,
            per(&cost, q as u64)
        );
        let (took, cost) = measure(server, || {
            let mut py = redis_py(server, "drain", &q.to_string())?;
            let line = py.finish()?;
            Ok((secs(line.get(1)), secs(line.get(3))))
        })?;
        println!(
            "| {q} | redis-py | {:.0} ms | {:.3} ms | {} |",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e3 / q as f64,
            per(&cost, q as u64)
        );
    }
    println!();
    Ok(())
}

/// Queues `q` waiters (over ten Clients) behind a holder, releases, and times the drain. The
/// requests counted include the queueing (one per waiter) as well as the handoffs.
fn zklock_drain(server: &TestingRedis, q: usize) -> Res<Duration> {
    let clients: Vec<RedisClient> = (0..DRAIN_CLIENTS)
        .map(|_| RedisClient::connect(&server.url()))
        .collect::<zklock::Result<_>>()?;
    let mutexes: Vec<Arc<RedisMutex>> = clients
        .iter()
        .map(|c| RedisMutex::new(c, "bench-d").map(Arc::new))
        .collect::<zklock::Result<_>>()?;
    let holder = mutexes[0].lock()?;
    let waiters: Vec<_> = (0..q)
        .map(|i| {
            let m = mutexes[i % DRAIN_CLIENTS].clone();
            thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || -> zklock::Result<()> { m.lock()?.release() })
        })
        .collect::<std::io::Result<_>>()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.command(&["LLEN", "zklock:{bench-d}:queue"])? != q.to_string() {
        if Instant::now() > deadline {
            return Err("the waiters did not queue within 120 s".into());
        }
        thread::sleep(Duration::from_millis(5));
    }
    let start = Instant::now();
    holder.release()?;
    for w in waiters {
        w.join().map_err(|_| "a waiter panicked")??;
    }
    let took = start.elapsed();
    clients.iter().for_each(RedisClient::close);
    Ok(took)
}

// ---------------------------------------------------------------------------
// redis-py processes
// ---------------------------------------------------------------------------

/// A redis-py process running `redis_py_bench.py MODE ARG`.
fn redis_py(server: &TestingRedis, mode: &str, arg: &str) -> Res<common::Python> {
    common::Python::start(
        "redis_py_bench.py",
        &[&server.url(), mode, arg],
        "python3-redis",
    )
}
