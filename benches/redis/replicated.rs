//! Replicated grants against plain grants, on a Sentinel set (`TestingSentinel`: a primary, two
//! replicas, three sentinels, on loopback): every Client connects on the set's
//! `redis+sentinel://` URL, plainly or with `wait_for_replicas(n, 1 s)` for n = 1 and 2 (a
//! `WAIT n` after each grant). Per mode: uncontended lock + release (p50/p99, cycles/s), and
//! 2 and 8 sessions contending (one Client per session: handoffs/s, the wait from the call to
//! the grant p50/p99), each with the commands the primary counted per acquisition (as the
//! other cases count them; `WAIT`s, and the replicas' `REPLCONF` acknowledgements among
//! them) and the client CPU.
//!
//! The modes run in turns inside each table (plain, 1, 2, then again for the next row), and
//! `--rounds=N` (default 1) repeats the turns, so that a machine's drift falls on every mode
//! alike. Run only when asked (`--only=replicated`): the set takes a few seconds to start and
//! the case about a minute, so neither the default run nor `cargo test`'s short pass runs it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use zklock::redis::RedisMutex;
use zklock::testing::{TestingRedis, TestingSentinel};
use zklock::RedisClient;

use crate::common::{self, Counts, Plan, Res};
use crate::{floor, measure, Cost, SESSIONS};

/// How long a replicated grant waits for its replicas before it is refused.
const WAIT_TIMEOUT: Duration = Duration::from_secs(1);

/// The modes, in the order of every turn: plain grants, then `WAIT` for 1 and for 2 replicas.
const MODES: [Option<u32>; 3] = [None, Some(1), Some(2)];

fn mode_name(mode: Option<u32>) -> String {
    match mode {
        None => "plain".to_owned(),
        Some(n) => format!("WAIT {n}"),
    }
}

fn connect(set: &TestingSentinel, mode: Option<u32>) -> zklock::Result<RedisClient> {
    let builder = RedisClient::builder(&set.url());
    match mode {
        None => builder,
        Some(n) => builder.wait_for_replicas(n, WAIT_TIMEOUT),
    }
    .connect()
}

/// The primary's `WAIT` and `REPLCONF` calls so far.
fn replication_calls(server: &TestingRedis) -> Res<(u64, u64)> {
    let stats = server.command(&["INFO", "commandstats"])?;
    let calls = |name: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|l| l.split("calls=").nth(1)?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    };
    Ok((calls("cmdstat_wait:"), calls("cmdstat_replconf:")))
}

/// `measure`, with the primary's `WAIT` and `REPLCONF` calls the case made.
fn measure_replicated<T>(
    server: &TestingRedis,
    f: impl FnOnce() -> Res<T>,
) -> Res<(T, Cost, (u64, u64))> {
    let before = replication_calls(server)?;
    let (out, cost) = measure(server, || Ok((f()?, Duration::ZERO)))?;
    let after = replication_calls(server)?;
    Ok((out, cost, (after.0 - before.0, after.1 - before.1)))
}

/// The cost per acquisition: commands (scripts, `WAIT`s, `REPLCONF`s) and client CPU.
fn per(cost: &Cost, replication: (u64, u64), ops: u64) -> String {
    let ops = ops.max(1) as f64;
    format!(
        "{:.1} cmds ({:.2} scripts, {:.2} WAIT, {:.2} REPLCONF), {:.3} ms CPU",
        cost.commands as f64 / ops,
        cost.scripts as f64 / ops,
        replication.0 as f64 / ops,
        replication.1 as f64 / ops,
        cost.cpu.as_secs_f64() * 1e3 / ops
    )
}

pub fn replicated(plan: &Plan) -> Res<()> {
    let rounds: usize = match plan.value("rounds") {
        Some(r) => r.parse()?,
        None => 1,
    };
    let started = Instant::now();
    let set = TestingSentinel::start()?;
    let primary = set.primary()?;
    println!(
        "## replicated grants against plain grants: Sentinel set (primary 127.0.0.1:{}, 2 \
         replicas, 3 sentinels; up in {:.1} s), `wait_for_replicas(n, {WAIT_TIMEOUT:?})`, \
         {rounds} round(s)\n",
        primary.port(),
        started.elapsed().as_secs_f64()
    );
    println!("### uncontended lock + release ({} cycles)\n", plan.cycles);
    println!("| round | grants | p50 | p99 | cycles/s | per cycle |\n|---|---|---|---|---|---|");
    for round in 1..=rounds {
        for mode in MODES {
            uncontended(plan, &set, primary, mode, round)?;
        }
    }
    println!(
        "\n### contended: S sessions (one Client each), lock + release in a loop, {:?} each\n",
        plan.contended
    );
    println!(
        "| round | S | grants | handoffs/s | wait p50 | wait p99 | refused | per acquisition |\n\
         |---|---|---|---|---|---|---|---|"
    );
    for round in 1..=rounds {
        for s in SESSIONS {
            for mode in MODES {
                contended(plan, &set, primary, s, mode, round)?;
            }
        }
    }
    println!();
    Ok(())
}

fn uncontended(
    plan: &Plan,
    set: &TestingSentinel,
    primary: &TestingRedis,
    mode: Option<u32>,
    round: usize,
) -> Res<()> {
    let client = connect(set, mode)?;
    let mutex = RedisMutex::new(&client, &format!("bench-r-u-{}", mode.unwrap_or(0)))?;
    // One grant first: the Client's connections are open before the clock starts.
    mutex.lock()?.release()?;
    let ((h, took), cost, replication) = measure_replicated(primary, || {
        let mut h = Histogram::<u64>::new(3)?;
        let start = Instant::now();
        for _ in 0..plan.cycles {
            let t = Instant::now();
            mutex.lock()?.release()?;
            h.record(t.elapsed().as_micros() as u64)?;
        }
        Ok((h, start.elapsed()))
    })?;
    client.close();
    println!(
        "| {round} | {} | {} µs | {} µs | {:.0} | {} |",
        mode_name(mode),
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        plan.cycles as f64 / took.as_secs_f64(),
        per(&cost, replication, plan.cycles as u64)
    );
    Ok(())
}

fn contended(
    plan: &Plan,
    set: &TestingSentinel,
    primary: &TestingRedis,
    s: usize,
    mode: Option<u32>,
    round: usize,
) -> Res<()> {
    let clients: Vec<RedisClient> = (0..s)
        .map(|_| connect(set, mode))
        .collect::<zklock::Result<_>>()?;
    let name = format!("bench-r-c-{}", mode.unwrap_or(0));
    let mutexes: Arc<Vec<RedisMutex>> = Arc::new(
        clients
            .iter()
            .map(|c| RedisMutex::new(c, &name))
            .collect::<zklock::Result<_>>()?,
    );
    let port = primary.port();
    let last = format!("{name}:last");
    let (counts, cost, replication) = measure_replicated(primary, || {
        Ok(common::run_sessions(
            s,
            plan.contended,
            || (),
            move |i, stop| {
                let mut conn = floor::Conn::open(port)?;
                let mut c = Counts::new()?;
                let mut refused = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let guard = match mutexes[i].lock() {
                        Ok(guard) => guard,
                        Err(_) => {
                            refused += 1;
                            continue;
                        }
                    };
                    c.waits.record(t.elapsed().as_micros() as u64)?;
                    c.handoffs += crate::swap_last(&mut conn, &last, i)?;
                    guard.release()?;
                    c.n += 1;
                }
                Ok((c, refused))
            },
        )?
        .0)
    })?;
    clients.iter().for_each(RedisClient::close);
    let mut waits = Histogram::<u64>::new(3)?;
    let (mut n, mut handoffs, mut refused) = (0, 0, 0);
    for (c, r) in &counts {
        waits.add(&c.waits)?;
        n += c.n;
        handoffs += c.handoffs;
        refused += r;
    }
    println!(
        "| {round} | {s} | {} | {:.0} | {:.2} ms | {:.2} ms | {refused} | {} |",
        mode_name(mode),
        handoffs as f64 / plan.contended.as_secs_f64(),
        waits.value_at_quantile(0.5) as f64 / 1e3,
        waits.value_at_quantile(0.99) as f64 / 1e3,
        per(&cost, replication, n)
    );
    Ok(())
}
