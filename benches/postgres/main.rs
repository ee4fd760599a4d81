//! PgMutex against a real PostgreSQL server (TestingPostgres), beside the floor of its SQL and
//! psycopg2 doing `pg_advisory_lock`, in the same run on the same server: uncontended latency,
//! contended handoffs/s with 2 and 8 sessions, and the connections a held lock and a waiting
//! thread use — each with the statements per acquisition the server counted, the client CPU,
//! threads and memory it took — and how long the next holder waits when a holder process is
//! killed or frozen, with zklock's limits and with the server's defaults.
//!
//! ```sh
//! cargo bench --features testing,postgres --bench postgres
//! cargo bench --features testing,postgres --bench postgres -- --only=contended --secs=10
//! ```
//!
//! Rows:
//! * **zklock**: one PgClient per session (as separate processes would have), `lock()` and
//!   `release()`; the fencing token is available (read from the server when first asked);
//! * **zklock, token read** (contended only): the same, each holder reading its fencing token
//!   (`guard.fencing_token()`: a statement of its own that writes and flushes a WAL record);
//! * **floor**: PgMutex's very statements (`floor.rs` includes the library's `sql.rs`) on one
//!   bare tokio-postgres connection per session: `lock_timeout` and the lock statement
//!   (own-session check) in one round trip, then the unlock;
//! * **floor on an I/O thread** (contended only): the same, each connection driven by a
//!   one-worker runtime of its own while the session's thread waits for each answer, as a
//!   PgClient's caller does: what the thread hops cost;
//! * **plain**: `pg_advisory_lock(hashtextextended(name, 0))` and its unlock on a bare
//!   connection, no token: what a hand-written client does;
//! * **psycopg2**: the plain statements from Python (`benches/python/psycopg2_bench.py`,
//!   Debian's `python3-psycopg2`), one process per session.
//!
//! The contended rows take turns of at most half a second each, so that a drift of the
//! machine's speed falls on every row alike; a row's figures are the sums over its turns.
//!
//! A handoff is an acquisition by another session than the last (in-process for the Rust rows,
//! through a file for psycopg2's processes); "spread" is the fewest and most acquisitions of
//! one session. "wait" is the time `lock` took, p50 and p99. Statements are the server's count
//! of transactions in the database (`pg_stat_database`: every statement outside a transaction
//! block is one — heartbeats included), read once the case's sessions have ended (a backend
//! reports its counts when it exits). Round trips: zklock's and the floor's lock is one (two
//! statements pipelined), the unlock one. Client CPU is this process's for the Rust rows and
//! the Python processes' own for psycopg2; threads are this process's beyond the bench's own,
//! sampled half-way; connections are the server's client backends, sampled half-way.
//!
//! Paths (`--only=paths`, not run unless asked): zklock's caller-driven session (a caller
//! reads and writes its own session's socket) beside the plain path (every statement through
//! the Client's `zklock-pg-io` thread, as `ZKLOCK_PG_CALLER_DRIVES=0` forces it), with
//! `--rtt=MS,…` of added round trip (default `0,0.5,2`; 0 connects directly, more through a
//! [`FaultProxy`](zklock::testing::FaultProxy) in a child process of its own, so that its CPU
//! is not the client's), `--rounds=N` rounds (default 3) alternating the paths: one session's
//! lock + release cycles per second, handoffs/s with 2 and 8 sessions, and the client CPU per
//! acquisition, each for `--secs`.
//!
//! Takeover (`--only=takeover`): a holder process (this bench run again, a PgClient with a
//! session timeout T of 3 s; or psycopg2 on the server's defaults) takes a lock, gets `kill -9`
//! or SIGSTOP, and a PgMutex in this process waits for the lock: the time from the signal to
//! the grant, over 5 trials.
//!
//! `cargo test` runs this bench once too, as a short pass (it keeps the bench working; its
//! figures mean nothing).

#[path = "../common/mod.rs"]
mod common;
mod floor;
#[path = "../common/holder.rs"]
mod holder;
#[path = "../../src/postgres/sql.rs"]
#[allow(dead_code, unused_imports, unused_macros, unreachable_pub)]
mod sql;

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{num, process_cpu, rss_mib, secs, threads, Counts, Plan, Res};
use hdrhistogram::Histogram;
use holder::{hold, Holder};
use zklock::postgres::PgMutex;
use zklock::testing::TestingPostgres;
use zklock::PgClient;

const SESSIONS: [usize; 2] = [2, 8];

fn main() -> Res<()> {
    if let Ok(args) = std::env::var(HOLDER) {
        return holder(&args);
    }
    if let Ok(args) = std::env::var(PROXY) {
        return proxy(&args);
    }
    let plan = Plan::from_args();
    let server = TestingPostgres::start()?;
    if plan.short {
        println!("(short pass: the figures mean nothing)");
    }
    let version = server.sql("SHOW server_version")?;
    println!(
        "PostgreSQL {} on 127.0.0.1:{} (fsync off)\n",
        cell(&version),
        server.port()
    );
    if plan.runs("uncontended") {
        uncontended(&plan, &server)?;
    }
    if plan.runs("contended") {
        contended(&plan, &server)?;
    }
    if plan.runs("connections") {
        connections(&server)?;
    }
    if plan.runs("takeover") {
        takeover(&plan, &server)?;
    }
    // Only when asked: it takes minutes.
    if plan.only.as_deref().is_some_and(|_| plan.runs("paths")) {
        paths(&plan, &server)?;
    }
    Ok(())
}

/// The first cell of the first row of an answer.
fn cell(rows: &[Vec<Option<String>>]) -> String {
    rows.first()
        .and_then(|r| r.first().cloned().flatten())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// What a case costs
// ---------------------------------------------------------------------------

/// The database's transactions so far (each statement outside a transaction block is one).
fn statements(server: &TestingPostgres) -> Res<u64> {
    let rows = server.sql(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'postgres'",
    )?;
    Ok(cell(&rows).parse()?)
}

/// The server's client backends now, but the one asking.
fn backends(server: &TestingPostgres, application: &str) -> Res<u64> {
    let rows = server.sql(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
         AND pid <> pg_backend_pid() AND application_name LIKE '{application}'"
    ))?;
    Ok(cell(&rows).parse()?)
}

/// Waits until every session but the asking one has ended (and so reported its counts).
fn quiet(server: &TestingPostgres) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while backends(server, "%")? > 0 {
        if Instant::now() > deadline {
            return Err("the case's sessions did not end within 60 s".into());
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// What one case cost: statements the server ran and client CPU.
struct Cost {
    statements: u64,
    cpu: Duration,
}

/// Runs `f` (which returns its result and the CPU of processes other than this one) once the
/// server is quiet, and counts what it cost when it is quiet again.
fn measure<T>(server: &TestingPostgres, f: impl FnOnce() -> Res<(T, Duration)>) -> Res<(T, Cost)> {
    quiet(server)?;
    let (s0, c0) = (statements(server)?, process_cpu());
    let (out, child_cpu) = f()?;
    let cpu = process_cpu() - c0 + child_cpu;
    quiet(server)?;
    // Less the two transactions of the first `statements` and `backends` calls' sessions.
    let statements = (statements(server)? - s0).saturating_sub(2);
    Ok((out, Cost { statements, cpu }))
}

fn per(cost: &Cost, ops: u64) -> String {
    let ops = ops.max(1) as f64;
    format!(
        "{:.2} stmts, {:.3} ms CPU",
        cost.statements as f64 / ops,
        cost.cpu.as_secs_f64() * 1e3 / ops
    )
}

fn client(server: &TestingPostgres) -> Res<PgClient> {
    Ok(PgClient::connect(&server.url())?)
}

// ---------------------------------------------------------------------------
// Paths: the caller-driven session beside the plain path, with added round trip.
// ---------------------------------------------------------------------------

/// Set for a proxy process of the paths case (this bench, run again): "PORT DELAY_US".
const PROXY: &str = "ZKLOCK_PG_BENCH_PROXY";

/// A proxy process: a raw FaultProxy to 127.0.0.1:PORT that holds every chunk DELAY_US each
/// way; says its own port, and runs until its stdin closes.
fn proxy(args: &str) -> Res<()> {
    let [port, delay] = args.split(' ').collect::<Vec<_>>()[..] else {
        return Err(format!("{PROXY}: PORT DELAY_US, not {args:?}").into());
    };
    let proxy = zklock::testing::FaultProxy::start_raw(("127.0.0.1", port.parse::<u16>()?))?;
    proxy.delay(Duration::from_micros(delay.parse()?));
    println!("{}", proxy.addr().port());
    std::io::stdout().flush()?;
    let _ = std::io::stdin().read_line(&mut String::new());
    Ok(())
}

/// A proxy process in front of `server` that adds `rtt` to every round trip, and the URL
/// through it.
struct Proxied {
    child: std::process::Child,
    url: String,
}

impl Proxied {
    fn start(server: &TestingPostgres, rtt: Duration) -> Res<Proxied> {
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .env(
                PROXY,
                format!("{} {}", server.port(), (rtt / 2).as_micros()),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let Ok(port) = line.trim().parse::<u16>() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the proxy process said {line:?}, not its port").into());
        };
        let url = server
            .url()
            .replace(&format!(":{}/", server.port()), &format!(":{port}/"));
        Ok(Proxied { child, url })
    }
}

impl Drop for Proxied {
    fn drop(&mut self) {
        // Its stdin closes with it: the proxy process ends.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Which way a PgClient's statements go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    /// The caller drives its own session's socket.
    CallerDrives,
    /// Every statement through the Client's `zklock-pg-io` thread.
    Plain,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::CallerDrives => "caller drives",
            Path::Plain => "plain",
        }
    }

    /// Clients connected from now on take this path (the variable is read at connect).
    fn choose(self) {
        match self {
            Path::CallerDrives => std::env::remove_var("ZKLOCK_PG_CALLER_DRIVES"),
            Path::Plain => std::env::set_var("ZKLOCK_PG_CALLER_DRIVES", "0"),
        }
    }
}

/// One round of one path: uncontended cycles/s, then handoffs/s with 2 and 8 sessions, each
/// with its client CPU per acquisition (ms).
struct Round {
    figures: [(f64, f64); 3],
}

fn paths(plan: &Plan, server: &TestingPostgres) -> Res<()> {
    let rtts: Vec<f64> = plan
        .value("rtt")
        .unwrap_or_else(|| "0,0.5,2".into())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let rounds: usize = match plan.value("rounds") {
        Some(r) => r.parse()?,
        None if plan.short => 1,
        None => 3,
    };
    let d = plan.contended;
    println!(
        "## paths: the caller drives its session, or every statement goes through \
         zklock-pg-io ({rounds} rounds alternating, {d:?} each row)\n"
    );
    println!(
        "| added RTT | path | round | 1 session, cycles/s | CPU | 2 sessions, handoffs/s | CPU \
         | 8 sessions, handoffs/s | CPU |\n|---|---|---|---|---|---|---|---|---|"
    );
    let mut summary = Vec::new();
    for rtt in rtts {
        let rtt = Duration::from_secs_f64(rtt / 1e3);
        let proxied = (!rtt.is_zero())
            .then(|| Proxied::start(server, rtt))
            .transpose()?;
        let url = proxied
            .as_ref()
            .map_or_else(|| server.url(), |p| p.url.clone());
        let mut results: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            // Each round in the other order, so that neither path always goes first.
            let order = if round % 2 == 0 {
                [Path::CallerDrives, Path::Plain]
            } else {
                [Path::Plain, Path::CallerDrives]
            };
            for path in order {
                path.choose();
                let one = path_round(server, &url, d)?;
                let f = one.figures;
                println!(
                    "| {rtt:?} | {} | {} | {:.0} | {:.3} ms | {:.0} | {:.3} ms | {:.0} | {:.3} ms |",
                    path.name(),
                    round + 1,
                    f[0].0,
                    f[0].1,
                    f[1].0,
                    f[1].1,
                    f[2].0,
                    f[2].1,
                );
                results[usize::from(path == Path::Plain)].push(one);
            }
        }
        summary.push((rtt, results));
    }
    Path::CallerDrives.choose();
    println!(
        "\nMedians of the rounds, and the caller-driven path's gain over the plain path \
         (throughput: more is better; CPU: less is better)\n"
    );
    println!(
        "| added RTT | path | 1 session, cycles/s | CPU | 2 sessions, handoffs/s | CPU \
         | 8 sessions, handoffs/s | CPU |\n|---|---|---|---|---|---|---|---|"
    );
    for (rtt, results) in summary {
        let medians: Vec<[(f64, f64); 3]> = results
            .iter()
            .map(|rounds| {
                std::array::from_fn(|i| {
                    (
                        median(rounds.iter().map(|r| r.figures[i].0)),
                        median(rounds.iter().map(|r| r.figures[i].1)),
                    )
                })
            })
            .collect();
        for (path, m) in [Path::CallerDrives, Path::Plain].iter().zip(&medians) {
            println!(
                "| {rtt:?} | {} | {:.0} | {:.3} ms | {:.0} | {:.3} ms | {:.0} | {:.3} ms |",
                path.name(),
                m[0].0,
                m[0].1,
                m[1].0,
                m[1].1,
                m[2].0,
                m[2].1
            );
        }
        let (drives, plain) = (&medians[0], &medians[1]);
        let gain = |i: usize| {
            (
                (drives[i].0 / plain[i].0 - 1.0) * 100.0,
                (1.0 - drives[i].1 / plain[i].1) * 100.0,
            )
        };
        let g: [(f64, f64); 3] = std::array::from_fn(gain);
        println!(
            "| {rtt:?} | gain | {:+.1} % | {:+.1} % | {:+.1} % | {:+.1} % | {:+.1} % | {:+.1} % |",
            g[0].0, g[0].1, g[1].0, g[1].1, g[2].0, g[2].1
        );
    }
    println!();
    Ok(())
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One round of the path the environment chooses, through `url`: uncontended cycles/s, then
/// handoffs/s with 2 and 8 sessions, each for `d` and with its client CPU per acquisition
/// (taken while the sessions run: connecting, with its password hashing, is left out).
fn path_round(server: &TestingPostgres, url: &str, d: Duration) -> Res<Round> {
    let mut figures = [(0.0, 0.0); 3];
    for (i, s) in [1].into_iter().chain(SESSIONS).enumerate() {
        quiet(server)?;
        let clients = (0..s)
            .map(|_| Ok(PgClient::connect(url)?))
            .collect::<Res<Vec<_>>>()?;
        let mutexes = Arc::new(
            clients
                .iter()
                .map(|c| PgMutex::new(c, "bench-paths"))
                .collect::<zklock::Result<Vec<_>>>()?,
        );
        let last = Arc::new(AtomicUsize::new(usize::MAX));
        let cpu = process_cpu();
        let (counts, ()) = common::run_sessions(
            s,
            d,
            || (),
            move |i, stop| {
                let mut c = Counts::new()?;
                while !stop.load(Ordering::Relaxed) {
                    let guard = mutexes[i].lock()?;
                    c.handoffs += handoff(&last, i);
                    guard.release()?;
                    c.n += 1;
                }
                Ok(c)
            },
        )?;
        let cpu = process_cpu() - cpu;
        clients.iter().for_each(PgClient::close);
        let total = counts.iter().map(|c| c.n).sum::<u64>();
        // One session hands off to itself: its cycles are what counts.
        let handoffs = match s {
            1 => total,
            _ => counts.iter().map(|c| c.handoffs).sum::<u64>(),
        };
        figures[i] = (
            handoffs as f64 / d.as_secs_f64(),
            cpu.as_secs_f64() * 1e3 / total.max(1) as f64,
        );
    }
    Ok(Round { figures })
}

// ---------------------------------------------------------------------------
// Uncontended: lock + release, one session.
// ---------------------------------------------------------------------------

fn uncontended(plan: &Plan, server: &TestingPostgres) -> Res<()> {
    println!("## uncontended lock + release ({} cycles)\n", plan.cycles);
    println!("| | p50 | p99 | per cycle |\n|---|---|---|---|");
    let cycle = |mut f: Box<dyn FnMut() -> Res<()>>| -> Res<(Histogram<u64>, Duration)> {
        let mut h = Histogram::<u64>::new(3)?;
        for _ in 0..plan.cycles {
            let t = Instant::now();
            f()?;
            h.record(t.elapsed().as_micros() as u64)?;
        }
        Ok((h, Duration::ZERO))
    };
    let (h, cost) = measure(server, || {
        let client = client(server)?;
        let mutex = PgMutex::new(&client, "bench-u")?;
        let out = cycle(Box::new(move || Ok(mutex.lock()?.release()?)));
        client.close();
        out
    })?;
    row("zklock", &h, &cost, plan.cycles);
    for (what, sql) in [("floor", floor::Sql::Same), ("plain", floor::Sql::Plain)] {
        let (h, cost) = measure(server, || {
            let mut s =
                floor::Session::open(&server.url(), "floor", "bench-u", sql, floor::Driven::Here)?;
            cycle(Box::new(move || {
                s.lock()?;
                s.unlock()
            }))
        })?;
        row(what, &h, &cost, plan.cycles);
    }
    let (line, cost) = measure(server, || {
        let mut py = psycopg2(server, "cycle", &plan.cycles.to_string(), None)?;
        let line = py.finish()?;
        let cpu = secs(line.get(3));
        Ok((line, cpu))
    })?;
    println!(
        "| psycopg2 | {:.0} µs | {:.0} µs | {} |\n",
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
// Contended: S sessions in a loop of lock + release on one lock.
// ---------------------------------------------------------------------------

/// What a run used, sampled half-way: this process's threads beyond the bench's own, its
/// resident memory (MiB), and the server's client backends.
struct Used {
    threads: u64,
    rss: f64,
    connections: u64,
    /// Whether the sessions were processes (psycopg2's): one thread each, `rss` each.
    processes: bool,
}

/// One contended row.
struct Run {
    counts: Vec<Counts>,
    used: Used,
}

fn contended(plan: &Plan, server: &TestingPostgres) -> Res<()> {
    println!(
        "## contended: S sessions, lock + release in a loop, {:?} each, in turns of {:?}\n",
        plan.contended,
        plan.contended / turns(plan.contended)
    );
    println!(
        "| S | | acquisitions/s | handoffs/s | spread | wait p50 / p99 | per acquisition | \
         threads | RSS | connections | handoffs ÷ floor | ÷ psycopg2 |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for s in SESSIONS {
        let turns = turns(plan.contended);
        let d = plan.contended / turns;
        let mut rows: Vec<Option<(Run, Cost)>> = (0..6).map(|_| None).collect();
        for _ in 0..turns {
            let floor = |sql, driven| {
                measure(server, || {
                    Ok((floor_contended(server, s, d, sql, driven)?, Duration::ZERO))
                })
            };
            let zklock = |token| {
                measure(server, || {
                    Ok((zklock_contended(server, s, d, token)?, Duration::ZERO))
                })
            };
            let turn = [
                zklock(false)?,
                zklock(true)?,
                floor(floor::Sql::Same, floor::Driven::Here)?,
                floor(floor::Sql::Same, floor::Driven::IoThread)?,
                floor(floor::Sql::Plain, floor::Driven::Here)?,
                measure(server, || python_contended(server, s, d))?,
            ];
            for (row, more) in rows.iter_mut().zip(turn) {
                *row = Some(match row.take() {
                    None => more,
                    Some(so_far) => add(so_far, more)?,
                });
            }
        }
        let mut rows = rows.into_iter().map(|r| r.expect("at least one turn"));
        let [(zk, zk_cost), (zt, zt_cost), (fl, fl_cost), (io, io_cost), (pl, pl_cost), (py, py_cost)] =
            std::array::from_fn(|_| rows.next().expect("six rows"));
        let d = plan.contended;
        let total = |r: &Run| r.counts.iter().map(|c| c.n).sum::<u64>();
        let handoffs = |r: &Run| r.counts.iter().map(|c| c.handoffs).sum::<u64>();
        let rate = |n: u64| n as f64 / d.as_secs_f64();
        let line = |what: &str, r: &Run, cost: &Cost, ratios: bool| -> Res<()> {
            let mut waits = Histogram::<u64>::new(3)?;
            for c in &r.counts {
                waits.add(&c.waits)?;
            }
            let ratio = |other: &Run| {
                if ratios {
                    format!("{:.2}×", handoffs(r) as f64 / handoffs(other).max(1) as f64)
                } else {
                    String::new()
                }
            };
            let used = if r.used.processes {
                format!("1 per process | {:.0} MiB per process", r.used.rss)
            } else {
                format!("+{} | {:.0} MiB", r.used.threads, r.used.rss)
            };
            println!(
                "| {s} | {what} | {:.0} | {:.0} | {}–{} | {:.2} / {:.2} ms | {} | {used} | {} | {} | {} |",
                rate(total(r)),
                rate(handoffs(r)),
                r.counts.iter().map(|c| c.n).min().unwrap_or(0),
                r.counts.iter().map(|c| c.n).max().unwrap_or(0),
                waits.value_at_quantile(0.5) as f64 / 1e3,
                waits.value_at_quantile(0.99) as f64 / 1e3,
                per(cost, total(r)),
                r.used.connections,
                ratio(&fl),
                ratio(&py),
            );
            Ok(())
        };
        line("zklock", &zk, &zk_cost, true)?;
        line("zklock, token read", &zt, &zt_cost, true)?;
        line("floor (same SQL)", &fl, &fl_cost, false)?;
        line("floor on an I/O thread", &io, &io_cost, true)?;
        line("plain advisory lock", &pl, &pl_cost, true)?;
        line("psycopg2", &py, &py_cost, false)?;
    }
    println!();
    Ok(())
}

/// The longest turn of a contended row: the rows take turns, so that a drift of the machine's
/// speed (other load, the host) falls on all of them alike.
const TURN: Duration = Duration::from_millis(500);

/// How many turns each row of a contended case takes in `d`.
fn turns(d: Duration) -> u32 {
    (d.as_secs_f64() / TURN.as_secs_f64())
        .ceil()
        .clamp(1.0, 1000.0) as u32
}

/// One row's turns together: counts summed session by session, costs summed, the most used.
fn add((mut run, mut cost): (Run, Cost), (more, more_cost): (Run, Cost)) -> Res<(Run, Cost)> {
    for (c, m) in run.counts.iter_mut().zip(more.counts) {
        c.n += m.n;
        c.handoffs += m.handoffs;
        c.waits.add(&m.waits)?;
    }
    run.used.threads = run.used.threads.max(more.used.threads);
    run.used.rss = run.used.rss.max(more.used.rss);
    run.used.connections = run.used.connections.max(more.used.connections);
    cost.statements += more_cost.statements;
    cost.cpu += more_cost.cpu;
    Ok((run, cost))
}

/// Runs `session` on `s` threads for `d`, sampling what the run uses half-way: threads beyond
/// `threads0` (taken before the row's sessions were opened) and the `s` the bench starts.
fn run(
    server: &TestingPostgres,
    threads0: u64,
    s: usize,
    d: Duration,
    session: impl Fn(usize, &std::sync::atomic::AtomicBool) -> Res<Counts> + Send + Sync + 'static,
) -> Res<Run> {
    let (counts, used) = common::run_sessions(
        s,
        d,
        || Used {
            threads: threads().saturating_sub(threads0 + s as u64),
            rss: rss_mib(),
            connections: backends(server, "%").unwrap_or(0),
            processes: false,
        },
        session,
    )?;
    Ok(Run { counts, used })
}

/// The holder before: swaps in session `i`, 1 if another session held the lock last.
fn handoff(last: &AtomicUsize, i: usize) -> u64 {
    u64::from(last.swap(i, Ordering::Relaxed) != i)
}

/// `token`: each holder reads its fencing token.
fn zklock_contended(server: &TestingPostgres, s: usize, d: Duration, token: bool) -> Res<Run> {
    let threads0 = threads();
    let clients = (0..s).map(|_| client(server)).collect::<Res<Vec<_>>>()?;
    let mutexes = Arc::new(
        clients
            .iter()
            .map(|c| PgMutex::new(c, "bench-c"))
            .collect::<zklock::Result<Vec<_>>>()?,
    );
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let out = run(server, threads0, s, d, move |i, stop| {
        let mut c = Counts::new()?;
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            let guard = mutexes[i].lock()?;
            c.waits.record(t.elapsed().as_micros() as u64)?;
            c.handoffs += handoff(&last, i);
            if token && guard.fencing_token() == 0 {
                return Err("no fencing token".into());
            }
            guard.release()?;
            c.n += 1;
        }
        Ok(c)
    });
    clients.iter().for_each(PgClient::close);
    out
}

fn floor_contended(
    server: &TestingPostgres,
    s: usize,
    d: Duration,
    sql: floor::Sql,
    driven: floor::Driven,
) -> Res<Run> {
    let (url, threads0) = (server.url(), threads());
    // Opened before the run, as the zklock row's Clients are.
    let sessions: Vec<_> = (0..s)
        .map(|_| {
            floor::Session::open(&url, "floor", "bench-fc", sql, driven)
                .map(parking_lot::Mutex::new)
        })
        .collect::<Res<_>>()?;
    let sessions = Arc::new(sessions);
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let kept = sessions.clone();
    let out = run(server, threads0, s, d, move |i, stop| {
        let mut session = sessions[i].lock();
        let mut c = Counts::new()?;
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            session.lock()?;
            c.waits.record(t.elapsed().as_micros() as u64)?;
            c.handoffs += handoff(&last, i);
            session.unlock()?;
            c.n += 1;
        }
        Ok(c)
    });
    drop(kept);
    out
}

fn python_contended(server: &TestingPostgres, s: usize, d: Duration) -> Res<(Run, Duration)> {
    let last = tempfile::NamedTempFile::new()?;
    let path = last.path().display().to_string();
    let mut procs = (0..s)
        .map(|_| psycopg2(server, "contend", &d.as_secs_f64().to_string(), Some(&path)))
        .collect::<Res<Vec<_>>>()?;
    procs.iter_mut().try_for_each(common::Python::go)?;
    thread::sleep(d / 2);
    let connections = backends(server, "psycopg2-bench").unwrap_or(0);
    let (mut counts, mut cpu, mut rss) = (Vec::new(), Duration::ZERO, 0.0_f64);
    for mut p in procs {
        let line = p.finish()?;
        // Only the percentiles are known: a histogram with the two.
        counts.push(Counts::of_python(&line)?);
        cpu += secs(line.get(2));
        rss = rss.max(num(line.get(6)));
    }
    let used = Used {
        threads: 1,
        rss,
        connections,
        processes: true,
    };
    Ok((Run { counts, used }, cpu))
}

/// A psycopg2 process running `psycopg2_bench.py MODE ARG [FILE]`.
fn psycopg2(
    server: &TestingPostgres,
    mode: &str,
    arg: &str,
    file: Option<&str>,
) -> Res<common::Python> {
    let url = server.url();
    let mut args = vec![url.as_str(), mode, arg];
    args.extend(file);
    common::Python::start("psycopg2_bench.py", &args, "python3-psycopg2")
}

// ---------------------------------------------------------------------------
// Connections: what a held lock and a waiting thread use.
// ---------------------------------------------------------------------------

fn connections(server: &TestingPostgres) -> Res<()> {
    const WAITERS: usize = 4;
    println!("## connections of one PgClient (the server's client backends)\n");
    quiet(server)?;
    let client = client(server)?;
    let count = || backends(server, "zklock");
    let idle = count()?;
    let a = PgMutex::new(&client, "bench-conn-a")?;
    let b = PgMutex::new(&client, "bench-conn-b")?;
    let held_a = a.lock()?;
    let one = count()?;
    let held_b = b.lock()?;
    let two = count()?;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let client = client.clone();
            thread::spawn(move || -> zklock::Result<()> {
                PgMutex::new(&client, "bench-conn-a")?.lock()?.release()
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.advisory_lock("bench-conn-a")?.1.len() < WAITERS {
        if Instant::now() > deadline {
            return Err("the waiters did not queue within 60 s".into());
        }
        thread::sleep(Duration::from_millis(10));
    }
    let waiting = count()?;
    held_a.release()?;
    for w in waiters {
        w.join().map_err(|_| "a waiter panicked")??;
    }
    held_b.release()?;
    let after = count()?;
    client.close();
    println!("| | connections |\n|---|---|");
    println!("| a connected Client, holding nothing | {idle} |");
    println!("| holding 1 lock | {one} |");
    println!("| holding 2 locks | {two} |");
    println!("| holding 2 locks, {WAITERS} threads waiting | {waiting} |");
    println!("| all released (kept for the next acquisitions) | {after} |");
    println!(
        "\nper held lock: {}, per waiting thread: {:.2}\n",
        two - one,
        (waiting - two) as f64 / WAITERS as f64
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Takeover: the next holder after its holder process is killed or frozen.
// ---------------------------------------------------------------------------

/// Set for a holder process of the takeover case (this bench, run again): "URL NAME MS".
const HOLDER: &str = "ZKLOCK_PG_BENCH_HOLDER";

/// A holder process: a PgClient with a session timeout of MS takes NAME, says "held", and
/// holds it until it is killed or its stdin closes.
fn holder(args: &str) -> Res<()> {
    let [url, name, ms] = args.split(' ').collect::<Vec<_>>()[..] else {
        return Err(format!("{HOLDER}: URL NAME MS, not {args:?}").into());
    };
    let client = PgClient::builder(url)
        .session_timeout(Duration::from_millis(ms.parse()?))
        .connect()?;
    let mutex = PgMutex::new(&client, name)?;
    hold(|| Ok(mutex.lock()?))
}

/// kill -9 and SIGSTOP of a holder process, zklock's (session timeout T) and psycopg2's (the
/// server's defaults): how long until a PgMutex in this process holds the lock.
fn takeover(plan: &Plan, server: &TestingPostgres) -> Res<()> {
    use rustix::process::Signal;
    let (t, trials) = if plan.short {
        (Duration::from_secs(1), 1)
    } else {
        (Duration::from_secs(3), 5)
    };
    let bound = t + Duration::from_secs(2);
    println!("## takeover: the next holder after a holder process is killed or frozen\n");
    println!(
        "| holder | fault | taken over after: min / median / max ({trials} trials) | within T + 2 s |\n\
         |---|---|---|---|"
    );
    let client = client(server)?;
    for (fault, signal, key) in [
        ("kill -9", Signal::KILL, "kill"),
        ("SIGSTOP", Signal::STOP, "stop"),
    ] {
        let mut took = Vec::new();
        for i in 0..trials {
            let name = format!("bench-takeover-{key}-{i}");
            let holder = Holder::zklock(
                HOLDER,
                &format!("{} {name} {}", server.url(), t.as_millis()),
            )?;
            let mutex = PgMutex::new(&client, &name)?;
            // At a different point of the holder's heartbeat period each trial.
            thread::sleep(t * i / trials);
            let started = Instant::now();
            holder.signal(signal)?;
            let guard = mutex
                .try_lock_for(t * 4 + Duration::from_secs(10))?
                .ok_or("not taken over within 4T + 10 s")?;
            took.push(started.elapsed());
            guard.release()?;
        }
        took.sort();
        println!(
            "| zklock, T = {t:?} | {fault} | {:.1?} / {:.1?} / {:.1?} | {} |",
            took[0],
            took[took.len() / 2],
            took[took.len() - 1],
            if took.iter().all(|d| *d <= bound) {
                "yes"
            } else {
                "no"
            }
        );
    }
    // The server's defaults: a killed holder's kernel closes its connection; a frozen one's
    // keeps answering the keepalives, and nothing else ends its session.
    let name = "bench-takeover-psycopg2-kill";
    let holder = Holder::python(psycopg2(server, "hold", name, None)?, "psycopg2")?;
    let mutex = PgMutex::new(&client, name)?;
    let started = Instant::now();
    holder.signal(Signal::KILL)?;
    let guard = mutex
        .try_lock_for(Duration::from_secs(60))?
        .ok_or("not taken over from a killed psycopg2 within 60 s")?;
    println!(
        "| psycopg2, the server's defaults | kill -9 | {:.1?} (1 trial) | yes |",
        started.elapsed()
    );
    guard.release()?;
    drop(holder);
    let name = "bench-takeover-psycopg2-stop";
    let holder = Holder::python(psycopg2(server, "hold", name, None)?, "psycopg2")?;
    let mutex = PgMutex::new(&client, name)?;
    holder.signal(Signal::STOP)?;
    let waited = t * 3;
    let got = mutex.try_lock_for(waited)?;
    println!(
        "| psycopg2, the server's defaults | SIGSTOP | {} | {} |",
        if got.is_some() {
            format!("within {waited:?}")
        } else {
            format!("still held after {waited:?}")
        },
        if got.is_some() { "yes" } else { "no" },
    );
    drop(got);
    drop(holder);
    // What the server does with a vanished machine's session without zklock's limits: its
    // keepalives, as it reports them for a TCP session (the system's defaults, unless set).
    let setting = |name: &str| -> Res<u64> {
        let value = cell(&server.sql(&format!("SHOW {name}"))?);
        Ok(value.trim_end_matches('s').parse()?)
    };
    let (idle, interval, count) = (
        setting("tcp_keepalives_idle")?,
        setting("tcp_keepalives_interval")?,
        setting("tcp_keepalives_count")?,
    );
    let gone = idle + interval * count;
    println!(
        "\nA holder whose machine vanished (not measured: this machine cannot cut its own \
         loopback): with zklock's limits the server ends its session within T (keepalives \
         after T/3, 3 probes T/9 apart; idle_session_timeout T); with this server's keepalives \
         (tcp_keepalives_idle {idle} s, then {count} probes {interval} s apart) after {} h {} \
         min.\n",
        gone / 3600,
        gone % 3600 / 60,
    );
    client.close();
    Ok(())
}
