//! MySqlMutex against a real MariaDB server (TestingMariaDb), beside bare connections running
//! `GET_LOCK` (with and without a token's bump) and PyMySQL doing `GET_LOCK`, in the same run on the same server: uncontended latency and
//! contended handoffs/s with 2 and 8 sessions, each with the statements and connections per
//! acquisition the server counted and the client CPU it took.
//!
//! ```sh
//! cargo bench --features testing,mysql --bench mysql
//! cargo bench --features testing,mysql --bench mysql -- --only=contended --secs=10
//! ```
//!
//! Rows:
//! * **zklock**: one MySqlClient per session (as separate processes would have), `lock()` and
//!   `release()`, in the `GET_LOCK` mode: a connection per hold, taken from the Client's idle
//!   ones (a release the server confirmed gives it back); the fencing token is available and
//!   not read, so it is not bumped;
//! * **zklock, token read**: the same, reading `guard.fencing_token()` in every hold (its bump,
//!   one more request on the holding connection);
//! * **zklock, table mode**: the same on `?lock_mode=table` (a lease row, waiters polling every
//!   100 ms and queueing, the one that has waited longest taking the free row);
//! * **floor (GET_LOCK + bump)**: `GET_LOCK` and a token's bump in one request, then
//!   `RELEASE_LOCK`, on one bare `mysql::Conn` per session, kept open: the least a token in
//!   every grant costs (no connection per hold, no heartbeat, no lease, no re-entrancy);
//! * **plain**: `SELECT GET_LOCK(name, 31536000)` and `SELECT RELEASE_LOCK(name)` on a bare
//!   connection, no token: what a hand-written client does;
//! * **PyMySQL**: the plain statements from Python (`benches/python/pymysql_bench.py`, Debian's
//!   `python3-pymysql`), one process per session.
//!
//! The contended rows take turns of at most half a second each, so that a drift of the
//! machine's speed falls on every row alike; a row's figures are the sums over its turns.
//!
//! A handoff is an acquisition by another session than the last; "spread" is the fewest and
//! most acquisitions of one session; "wait" is the time `lock` took, p50 and p99. Statements
//! and connections are the server's `Questions` and `Connections` counters (less the bench's
//! own reading of them). Client CPU is this process's for the Rust rows and the Python
//! processes' own for PyMySQL; the server's is `mariadbd`'s (in steps of 10 ms a turn).
//! `--rows=zklock,floor` runs only the contended rows whose names start so (for profiling).
//!
//! Takeover (`--only=takeover`): a holder process (this bench run again, a MySqlClient with a
//! session timeout T of 3 s, in the `GET_LOCK` mode and in the table mode; or PyMySQL doing
//! `GET_LOCK` on the server's defaults) takes a lock, gets
//! `kill -9` or SIGSTOP, and a MySqlMutex of the same mode in this process waits for the lock:
//! the time from the signal to the grant, over 5 trials, the signal sent at a different point
//! of the holder's heartbeat (or renewal) period each trial.
//!
//! `cargo test` runs this bench once too, as a short pass (it keeps the bench working; its
//! figures mean nothing).

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/holder.rs"]
mod holder;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{num, pid_cpu, process_cpu, secs, Counts, Plan, Res};
use hdrhistogram::Histogram;
use holder::{hold, Holder};
use mysql::prelude::Queryable;
use zklock::mysql::MySqlMutex;
use zklock::testing::TestingMariaDb;
use zklock::MySqlClient;

const SESSIONS: [usize; 2] = [2, 8];

fn main() -> Res<()> {
    if let Ok(args) = std::env::var(HOLDER) {
        return holder(&args);
    }
    let plan = Plan::from_args();
    let _ = SOCKET.set(std::env::args().any(|a| a == "--socket"));
    let server = TestingMariaDb::start()?;
    if plan.short {
        println!("(short pass: the figures mean nothing)");
    }
    let version = server.root_sql("SELECT @@version")?;
    println!("MariaDB {} on 127.0.0.1:{}\n", version[0][0], server.port());
    if plan.runs("uncontended") {
        uncontended(&plan, &server)?;
    }
    if plan.runs("contended") {
        contended(&plan, &server)?;
    }
    if plan.runs("takeover") {
        takeover(&plan, &server)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// What a case costs
// ---------------------------------------------------------------------------

/// The server's `Questions` and `Connections` so far.
fn counters(server: &TestingMariaDb) -> Res<(u64, u64)> {
    let rows = server
        .root_sql("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Connections')")?;
    let get = |name: &str| -> Res<u64> {
        Ok(rows.iter().find(|r| r[0] == name).ok_or("no such status")?[1].parse()?)
    };
    Ok((get("Questions")?, get("Connections")?))
}

/// What one case cost: statements and connections the server counted, client CPU, the
/// server's CPU.
#[derive(Default)]
struct Cost {
    statements: u64,
    connections: u64,
    cpu: Duration,
    server_cpu: Duration,
}

/// Runs `f` (which returns its result and the CPU of processes other than this one) and counts
/// what it cost.
fn measure<T>(server: &TestingMariaDb, f: impl FnOnce() -> Res<(T, Duration)>) -> Res<(T, Cost)> {
    let server_cpu = || server.pid().map_or(Duration::ZERO, pid_cpu);
    let ((q0, c0), cpu0, s0) = (counters(server)?, process_cpu(), server_cpu());
    let (out, child_cpu) = f()?;
    let (cpu, s1) = (process_cpu() - cpu0 + child_cpu, server_cpu());
    let (q1, c1) = counters(server)?;
    // Less the reading's own statement and connection.
    Ok((
        out,
        Cost {
            statements: (q1 - q0).saturating_sub(1),
            connections: (c1 - c0).saturating_sub(1),
            cpu,
            server_cpu: s1.saturating_sub(s0),
        },
    ))
}

fn per(cost: &Cost, ops: u64) -> String {
    let ops = ops.max(1) as f64;
    format!(
        "{:.2} stmts, {:.2} conns, {:.3} ms CPU, server {:.3} ms",
        cost.statements as f64 / ops,
        cost.connections as f64 / ops,
        cost.cpu.as_secs_f64() * 1e3 / ops,
        cost.server_cpu.as_secs_f64() * 1e3 / ops
    )
}

/// Whether the Rust and Python rows connect through the server's Unix socket (`--socket`)
/// rather than TCP on loopback.
static SOCKET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// The server's URL for the rows: TCP on loopback, or its Unix socket with `--socket`.
fn url(server: &TestingMariaDb) -> String {
    match SOCKET.get() {
        Some(true) => format!("{}?socket={}", server.url(), server.socket().display()),
        _ => server.url(),
    }
}

fn client(server: &TestingMariaDb, table: bool) -> Res<MySqlClient> {
    let url = url(server);
    let url = match table {
        false => url,
        true if url.contains('?') => format!("{url}&lock_mode=table"),
        true => format!("{url}?lock_mode=table"),
    };
    Ok(MySqlClient::connect(&url)?)
}

// ---------------------------------------------------------------------------
// The floor: the same SQL on a bare connection.
// ---------------------------------------------------------------------------

/// Which statements a floor session runs.
#[derive(Clone, Copy)]
enum Sql {
    /// `GET_LOCK` and the token's bump in one request, then `RELEASE_LOCK`.
    Same,
    /// `GET_LOCK` and `RELEASE_LOCK` alone.
    Plain,
}

struct Floor {
    conn: mysql::Conn,
    name: String,
    sql: Sql,
}

impl Floor {
    fn open(server: &TestingMariaDb, name: &str, sql: Sql) -> Res<Floor> {
        // The transport the zklock rows use: the URL's, never a switch to a local socket.
        let opts = mysql::OptsBuilder::from_opts(mysql::Opts::from_url(&url(server))?)
            .prefer_socket(false);
        let mut conn = mysql::Conn::new(opts)?;
        conn.query_drop(
            "CREATE TABLE IF NOT EXISTS zklock_tokens (name VARCHAR(64) CHARACTER SET utf8mb4 \
             COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, token BIGINT UNSIGNED NOT NULL) \
             ENGINE=InnoDB",
        )?;
        Ok(Floor {
            conn,
            name: name.to_owned(),
            sql,
        })
    }

    fn lock(&mut self) -> Res<()> {
        let name = &self.name;
        match self.sql {
            Sql::Same => {
                let sql = format!(
                    "SET @zklock_key = '{name}'; \
                     SET @zklock_got = GET_LOCK(@zklock_key, 31536000); \
                     INSERT INTO zklock_tokens (name, token) SELECT @zklock_key, \
                     LAST_INSERT_ID(1) FROM DUAL WHERE @zklock_got >= 1 \
                     ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1); \
                     SELECT @zklock_got, IF(@zklock_got >= 1, LAST_INSERT_ID(), NULL)"
                );
                let mut last: Option<(i64, u64)> = None;
                let mut result = self.conn.query_iter(sql)?;
                while let Some(set) = result.iter() {
                    for row in set {
                        last = Some(mysql::from_row(row?));
                    }
                }
                match last {
                    Some((1, _)) => Ok(()),
                    other => Err(format!("not granted: {other:?}").into()),
                }
            }
            Sql::Plain => {
                let got: Option<i64> = self
                    .conn
                    .query_first(format!("SELECT GET_LOCK('{name}', 31536000)"))?;
                match got {
                    Some(1) => Ok(()),
                    other => Err(format!("not granted: {other:?}").into()),
                }
            }
        }
    }

    fn unlock(&mut self) -> Res<()> {
        let released: Option<i64> = self
            .conn
            .query_first(format!("SELECT RELEASE_LOCK('{}')", self.name))?;
        match released {
            Some(1) => Ok(()),
            other => Err(format!("unlock: {other:?}").into()),
        }
    }
}

// ---------------------------------------------------------------------------
// Uncontended: lock + release, one session.
// ---------------------------------------------------------------------------

fn uncontended(plan: &Plan, server: &TestingMariaDb) -> Res<()> {
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
    for (what, table, token) in [
        ("zklock", false, false),
        ("zklock, token read", false, true),
        ("zklock, table mode", true, false),
    ] {
        let (h, cost) = measure(server, || {
            let client = client(server, table)?;
            let mutex = MySqlMutex::new(&client, "bench-u")?;
            let out = cycle(Box::new(move || {
                let guard = mutex.lock()?;
                if token && guard.fencing_token() == 0 {
                    return Err("no fencing token".into());
                }
                Ok(guard.release()?)
            }));
            client.close();
            out
        })?;
        row(what, &h, &cost, plan.cycles);
    }
    for (what, sql) in [
        ("floor (GET_LOCK + bump)", Sql::Same),
        ("plain GET_LOCK", Sql::Plain),
    ] {
        let (h, cost) = measure(server, || {
            let mut s = Floor::open(server, "bench-u", sql)?;
            cycle(Box::new(move || {
                s.lock()?;
                s.unlock()
            }))
        })?;
        row(what, &h, &cost, plan.cycles);
    }
    let (line, cost) = measure(server, || {
        let mut py = pymysql(server, "cycle", &plan.cycles.to_string(), None)?;
        let line = py.finish()?;
        let cpu = secs(line.get(3));
        Ok((line, cpu))
    })?;
    println!(
        "| PyMySQL | {:.0} µs | {:.0} µs | {} |\n",
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

/// The rows of the contended case, in the order they are printed.
const ROWS: [&str; 6] = [
    "zklock",
    "zklock, token read",
    "zklock, table mode",
    "floor (GET_LOCK + bump)",
    "plain GET_LOCK",
    "PyMySQL",
];

fn contended(plan: &Plan, server: &TestingMariaDb) -> Res<()> {
    let turns = turns(plan.contended);
    println!(
        "## contended: S sessions, lock + release in a loop, {:?} each, in turns of {:?}\n",
        plan.contended,
        plan.contended / turns
    );
    println!(
        "| S | | acquisitions/s | handoffs/s | spread | wait p50 / p99 | per acquisition | \
         handoffs ÷ plain | ÷ PyMySQL |\n|---|---|---|---|---|---|---|---|---|"
    );
    for s in SESSIONS {
        let d = plan.contended / turns;
        let mut rows: Vec<Option<(Vec<Counts>, Cost)>> = (0..ROWS.len()).map(|_| None).collect();
        for _ in 0..turns {
            let row = |i: usize, f: &dyn Fn() -> Res<(Vec<Counts>, Duration)>| {
                if plan.runs_row(ROWS[i]) {
                    measure(server, f)
                } else {
                    Ok((Vec::new(), Cost::default()))
                }
            };
            let turn = [
                row(0, &|| {
                    Ok((
                        zklock_contended(server, s, d, false, false)?,
                        Duration::ZERO,
                    ))
                })?,
                row(1, &|| {
                    Ok((zklock_contended(server, s, d, false, true)?, Duration::ZERO))
                })?,
                row(2, &|| {
                    Ok((zklock_contended(server, s, d, true, false)?, Duration::ZERO))
                })?,
                row(3, &|| {
                    Ok((floor_contended(server, s, d, Sql::Same)?, Duration::ZERO))
                })?,
                row(4, &|| {
                    Ok((floor_contended(server, s, d, Sql::Plain)?, Duration::ZERO))
                })?,
                row(5, &|| python_contended(server, s, d))?,
            ];
            for (row, more) in rows.iter_mut().zip(turn) {
                *row = Some(match row.take() {
                    None => more,
                    Some(so_far) => add(so_far, more)?,
                });
            }
        }
        let rows: Vec<(Vec<Counts>, Cost)> = rows
            .into_iter()
            .map(|r| r.expect("at least one turn"))
            .collect();
        let d = plan.contended.as_secs_f64();
        let total = |r: &[Counts]| r.iter().map(|c| c.n).sum::<u64>();
        let handoffs = |r: &[Counts]| r.iter().map(|c| c.handoffs).sum::<u64>();
        let (plain, python) = (&rows[4].0, &rows[5].0);
        for (what, (r, cost)) in ROWS.iter().zip(&rows) {
            if !plan.runs_row(what) {
                continue;
            }
            let mut waits = Histogram::<u64>::new(3)?;
            for c in r {
                waits.add(&c.waits)?;
            }
            let ratio = |other: &[Counts]| match handoffs(other) {
                0 => "—".to_owned(),
                h => format!("{:.2}×", handoffs(r) as f64 / h as f64),
            };
            println!(
                "| {s} | {what} | {:.0} | {:.0} | {}–{} | {:.2} / {:.2} ms | {} | {} | {} |",
                total(r) as f64 / d,
                handoffs(r) as f64 / d,
                r.iter().map(|c| c.n).min().unwrap_or(0),
                r.iter().map(|c| c.n).max().unwrap_or(0),
                waits.value_at_quantile(0.5) as f64 / 1e3,
                waits.value_at_quantile(0.99) as f64 / 1e3,
                per(cost, total(r)),
                ratio(plain),
                ratio(python),
            );
        }
    }
    match TOKENS_NOT_READ.load(Ordering::Relaxed) {
        0 => println!(),
        n => println!("\n{n} holds of the token rows could not read their token\n"),
    }
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

/// One row's turns together: counts summed session by session, costs summed.
fn add(
    (mut run, mut cost): (Vec<Counts>, Cost),
    (more, more_cost): (Vec<Counts>, Cost),
) -> Res<(Vec<Counts>, Cost)> {
    for (c, m) in run.iter_mut().zip(more) {
        c.n += m.n;
        c.handoffs += m.handoffs;
        c.waits.add(&m.waits)?;
    }
    cost.statements += more_cost.statements;
    cost.connections += more_cost.connections;
    cost.cpu += more_cost.cpu;
    cost.server_cpu += more_cost.server_cpu;
    Ok((run, cost))
}

/// Holds of the "token read" rows whose token could not be read (the reason is logged).
static TOKENS_NOT_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The holder before: swaps in session `i`, 1 if another session held the lock last.
fn handoff(last: &AtomicUsize, i: usize) -> u64 {
    u64::from(last.swap(i, Ordering::Relaxed) != i)
}

fn zklock_contended(
    server: &TestingMariaDb,
    s: usize,
    d: Duration,
    table: bool,
    token: bool,
) -> Res<Vec<Counts>> {
    let clients = (0..s)
        .map(|_| client(server, table))
        .collect::<Res<Vec<_>>>()?;
    let mutexes = Arc::new(
        clients
            .iter()
            .map(|c| MySqlMutex::new(c, "bench-c"))
            .collect::<zklock::Result<Vec<_>>>()?,
    );
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let (out, ()) = common::run_sessions(
        s,
        d,
        || (),
        move |i, stop| {
            let mut c = Counts::new()?;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let guard = mutexes[i].lock()?;
                c.waits.record(t.elapsed().as_micros() as u64)?;
                c.handoffs += handoff(&last, i);
                if token && guard.fencing_token() == 0 {
                    // Not read within the operation timeout (logged): counted, not fatal.
                    TOKENS_NOT_READ.fetch_add(1, Ordering::Relaxed);
                }
                guard.release()?;
                c.n += 1;
            }
            Ok(c)
        },
    )?;
    clients.iter().for_each(MySqlClient::close);
    Ok(out)
}

fn floor_contended(server: &TestingMariaDb, s: usize, d: Duration, sql: Sql) -> Res<Vec<Counts>> {
    // Opened before the run, as the zklock row's Clients are.
    let sessions: Vec<_> = (0..s)
        .map(|_| Floor::open(server, "bench-fc", sql).map(parking_lot::Mutex::new))
        .collect::<Res<_>>()?;
    let sessions = Arc::new(sessions);
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let (out, ()) = common::run_sessions(
        s,
        d,
        || (),
        move |i, stop| {
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
        },
    )?;
    Ok(out)
}

fn python_contended(
    server: &TestingMariaDb,
    s: usize,
    d: Duration,
) -> Res<(Vec<Counts>, Duration)> {
    let last = tempfile::NamedTempFile::new()?;
    let path = last.path().display().to_string();
    let mut procs = (0..s)
        .map(|_| pymysql(server, "contend", &d.as_secs_f64().to_string(), Some(&path)))
        .collect::<Res<Vec<_>>>()?;
    procs.iter_mut().try_for_each(common::Python::go)?;
    let (mut counts, mut cpu) = (Vec::new(), Duration::ZERO);
    for mut p in procs {
        let line = p.finish()?;
        // Only the percentiles are known: a histogram with the two.
        counts.push(Counts::of_python(&line)?);
        cpu += secs(line.get(2));
    }
    Ok((counts, cpu))
}

/// A PyMySQL process running `pymysql_bench.py MODE ARG [FILE]`.
fn pymysql(
    server: &TestingMariaDb,
    mode: &str,
    arg: &str,
    file: Option<&str>,
) -> Res<common::Python> {
    let url = url(server);
    let mut args = vec![url.as_str(), mode, arg];
    args.extend(file);
    common::Python::start("pymysql_bench.py", &args, "python3-pymysql")
}

// ---------------------------------------------------------------------------
// Takeover: the next holder after its holder process is killed or frozen.
// ---------------------------------------------------------------------------

/// Set for a holder process of the takeover case (this bench, run again): "URL NAME MS".
const HOLDER: &str = "ZKLOCK_MYSQL_BENCH_HOLDER";

/// A holder process: a MySqlClient with a session timeout of MS takes NAME, says "held", and
/// holds it until it is killed or its stdin closes.
fn holder(args: &str) -> Res<()> {
    let [url, name, ms] = args.split(' ').collect::<Vec<_>>()[..] else {
        return Err(format!("{HOLDER}: URL NAME MS, not {args:?}").into());
    };
    let client = MySqlClient::builder(url)
        .session_timeout(Duration::from_millis(ms.parse()?))
        .connect()?;
    let mutex = MySqlMutex::new(&client, name)?;
    hold(|| Ok(mutex.lock()?))
}

/// kill -9 and SIGSTOP of a holder process with session timeout T, in each mode: how long
/// until a MySqlMutex in this process holds the lock.
fn takeover(plan: &Plan, server: &TestingMariaDb) -> Res<()> {
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
    for (mode, table) in [
        ("zklock GET_LOCK", false),
        ("zklock table mode (poll 100 ms)", true),
    ] {
        let url = match table {
            false => server.url(),
            true => format!("{}?lock_mode=table", server.url()),
        };
        let client = MySqlClient::builder(&url).session_timeout(t).connect()?;
        for (fault, signal, key) in [
            ("kill -9", Signal::KILL, "kill"),
            ("SIGSTOP", Signal::STOP, "stop"),
        ] {
            let mut took = Vec::new();
            for i in 0..trials {
                let name = format!("bench-takeover-{}-{key}-{i}", u8::from(table));
                let holder = Holder::zklock(HOLDER, &format!("{url} {name} {}", t.as_millis()))?;
                let mutex = MySqlMutex::new(&client, &name)?;
                // At a different point of the holder's heartbeat period each trial.
                std::thread::sleep(t * i / trials);
                let started = Instant::now();
                holder.signal(signal)?;
                let guard = mutex
                    .try_lock_for(t * 4 + Duration::from_secs(10))?
                    .ok_or("not taken over within 4T + 10 s")?;
                took.push(started.elapsed());
                guard.release()?;
                drop(holder);
            }
            took.sort();
            println!(
                "| {mode}, T = {t:?} | {fault} | {:.1?} / {:.1?} / {:.1?} | {} |",
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
        client.close();
    }
    // The server's defaults: a killed holder's kernel closes its connection; a frozen one's
    // keeps it up, and only wait_timeout (this server's, below) ends its session.
    let client = MySqlClient::builder(&server.url())
        .session_timeout(t)
        .connect()?;
    let name = "bench-takeover-pymysql-kill";
    let holder = Holder::python(pymysql(server, "hold", name, None)?, "PyMySQL")?;
    let mutex = MySqlMutex::new(&client, name)?;
    let started = Instant::now();
    holder.signal(Signal::KILL)?;
    let guard = mutex
        .try_lock_for(Duration::from_secs(60))?
        .ok_or("not taken over from a killed PyMySQL within 60 s")?;
    println!(
        "| PyMySQL `GET_LOCK`, the server's defaults | kill -9 | {:.1?} (1 trial) | yes |",
        started.elapsed()
    );
    guard.release()?;
    drop(holder);
    let name = "bench-takeover-pymysql-stop";
    let holder = Holder::python(pymysql(server, "hold", name, None)?, "PyMySQL")?;
    let mutex = MySqlMutex::new(&client, name)?;
    holder.signal(Signal::STOP)?;
    let waited = t * 3;
    let got = mutex.try_lock_for(waited)?;
    println!(
        "| PyMySQL `GET_LOCK`, the server's defaults | SIGSTOP | {} | {} |",
        if got.is_some() {
            format!("within {waited:?}")
        } else {
            format!("still held after {waited:?}")
        },
        if got.is_some() { "yes" } else { "no" },
    );
    drop(got);
    drop(holder);
    client.close();
    let wait_timeout = server.root_sql("SELECT @@global.wait_timeout")?;
    println!(
        "\nThis server's wait_timeout (what ends a frozen holder's session without zklock's \
         limits): {} s.\n",
        wait_timeout[0][0]
    );
    Ok(())
}
