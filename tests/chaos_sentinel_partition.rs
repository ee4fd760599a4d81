//! A partition that leaves one sentinel with the old primary, under the fenced register: trial
//! after trial, the sentinels fail a Sentinel set over while one sentinel, cut off with the old
//! primary, goes on naming it — and that old primary goes on answering as one, with the data it
//! had. No two Clients may both hold the lock at once.
//!
//! The old primary is a node that replicates the primary until the partition and then stands
//! alone (`REPLICAOF NO ONE`); it announces a closed port, so the real sentinels never learn of
//! it. The stale sentinel is a stand-in that names the primary until the partition and the old
//! one during it. Five worker processes contend for one `RedisMutex` (2 s TTL) and write with
//! their fencing tokens to a [`FencedRegister`](zklock::testing::FencedRegister):
//!
//! * two on the minority side: their URL names the stale sentinel first and the two others
//!   through proxies that go silent during the partition, so they reach the stale sentinel and
//!   the old primary only;
//! * one whose URL names the stale sentinel first and the real two as they are;
//! * two on the real sentinels' URL.
//!
//! Each trial: the old primary stands alone, the stale sentinel names it, the minority's
//! proxies go silent, and a second later (the sentinels' down-after-milliseconds)
//! `SENTINEL FAILOVER` promotes a replica; once the sentinels agree the run waits for writes,
//! keeps the partition for two TTLs, and counts the holds that began after the partition did
//! and overlapped another's (both inside their hold at once: a double `Held`). Then the
//! partition heals (the old primary replicates the new one). A hold begun before the partition
//! and one begun after may overlap when the failover lost a grant (asynchronous replication,
//! which Redis cannot promise against); every other overlap, any double `Held` and any stale
//! write accepted fail the run.
//!
//! `ZKLOCK_CHAOS_PARTITIONS` trials, 2 by default (CI's); `scripts/chaos.sh` runs 20.

mod chaos_lab;

#[path = "redis_common/stale_sentinel.rs"]
mod stale_sentinel;

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use chaos_lab::{patience, row, Lab};
use stale_sentinel::StaleSentinel;
use zklock::redis::RedisMutex;
use zklock::testing::{FaultProxy, FenceEvent, FenceEventKind, TestingRedis, TestingSentinel};
use zklock::RedisClient;

const WORKER: &str = "ZKLOCK_SENTINEL_PARTITION_WORKER";
const TTL: Duration = Duration::from_secs(2);
const LOCK: &str = "partition";

/// How many trials: `ZKLOCK_CHAOS_PARTITIONS`, 2 by default.
fn trials() -> usize {
    std::env::var("ZKLOCK_CHAOS_PARTITIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
}

/// The worker: one Client on the URL it is given, the lab's loop on the lock.
#[test]
fn sentinel_partition_worker() {
    let Some((url, register, name, checks)) = chaos_lab::worker_args(WORKER) else {
        return; // only as a worker process
    };
    let stop = chaos_lab::stop_on_stdin();
    // `RUST_LOG=zklock=info` shows what the Client decided.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let client = chaos_lab::connect_until_up(|| {
        RedisClient::builder(&url)
            .ttl(TTL)
            .connect_timeout(Duration::from_secs(1))
            .operation_timeout(Duration::from_millis(500))
            .connect()
    });
    let mutex = RedisMutex::new(&client, LOCK).unwrap();
    chaos_lab::work(&mutex, &register, &name, checks, &stop);
    client.close();
}

/// Makes `old` a replica of the node on `primary` and waits until its link is up.
fn replicate(old: &TestingRedis, primary: u16) {
    old.command(&["REPLICAOF", "127.0.0.1", &primary.to_string()])
        .unwrap();
    let deadline = Instant::now() + patience();
    while !old
        .command(&["INFO", "replication"])
        .unwrap_or_default()
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the old primary does not sync");
        thread::sleep(Duration::from_millis(20));
    }
}

/// `SENTINEL FAILOVER`, tried again while the sentinels refuse it; the old primary's port.
fn failover(set: &TestingSentinel) -> u16 {
    let deadline = Instant::now() + patience();
    loop {
        match set.failover() {
            Ok(old) => return old,
            Err(e) => {
                assert!(Instant::now() < deadline, "no failover: {e}");
                thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// One hold as the register saw it: its worker, its `enter` and its `exit` (or the end).
struct Tenure<'a> {
    worker: &'a str,
    enter: u64,
    exit: u64,
}

/// The pairs of holds of different workers, both begun at or after `from`, that were inside at
/// once: two Clients that both read `Held`.
fn double_held(log: &[FenceEvent], from: u64) -> Vec<(String, String)> {
    let end = log.len() as u64;
    let tenures: Vec<Tenure<'_>> = log
        .iter()
        .filter(|e| e.kind == FenceEventKind::Enter && e.seq >= from)
        .map(|e| Tenure {
            worker: &e.worker,
            enter: e.seq,
            exit: log
                .iter()
                .find(|x| {
                    x.kind == FenceEventKind::Exit
                        && x.seq > e.seq
                        && x.worker == e.worker
                        && x.token == e.token
                })
                .map_or(end, |x| x.seq),
        })
        .collect();
    let mut pairs = Vec::new();
    for (i, a) in tenures.iter().enumerate() {
        for b in &tenures[i + 1..] {
            if a.worker != b.worker && a.enter.max(b.enter) < a.exit.min(b.exit) {
                pairs.push((a.worker.to_owned(), b.worker.to_owned()));
            }
        }
    }
    pairs
}

/// The holds of `workers` begun at or after `from`.
fn holds_of(log: &[FenceEvent], from: u64, workers: &[&str]) -> usize {
    log.iter()
        .filter(|e| {
            e.kind == FenceEventKind::Enter && e.seq >= from && workers.contains(&e.worker.as_str())
        })
        .count()
}

#[test]
fn sentinel_partition_trials() {
    let trials = trials();
    let set = TestingSentinel::start().unwrap();
    let ports = set.sentinel_ports();
    let primary = set.primary().unwrap().port();

    // The old primary of each partition: it replicates the primary and announces a closed port.
    let old = TestingRedis::start().unwrap();
    let closed = TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    old.command(&["CONFIG", "SET", "replica-announce-port", &closed])
        .unwrap();
    old.command(&["CONFIG", "SET", "replica-priority", "0"])
        .unwrap();
    replicate(&old, primary);
    let stale = StaleSentinel::start(primary);
    let proxies = [1, 2].map(|i| FaultProxy::start_raw(("127.0.0.1", ports[i])).unwrap());

    let sentinel = |p: u16| format!("127.0.0.1:{p}");
    let minority = format!(
        "redis+sentinel://{},{},{}/{}",
        sentinel(stale.port),
        proxies[0].connect_string(),
        proxies[1].connect_string(),
        set.master_name()
    );
    let stale_first = format!(
        "redis+sentinel://{},{},{}/{}",
        sentinel(stale.port),
        sentinel(ports[1]),
        sentinel(ports[2]),
        set.master_name()
    );
    let mut lab = Lab::new(set.url(), "sentinel_partition_worker", WORKER);
    // w1, w2 on the minority side; w3 asks the stale sentinel first; w4, w5 the real ones.
    for url in [&minority, &minority, &stale_first, &set.url(), &set.url()] {
        lab.url = url.clone();
        lab.start_worker();
    }
    lab.progress(20, "before the first partition");

    let mut rows = Vec::new();
    let mut failed_over = Vec::new();
    let mut doubles = 0;
    let mut minority_holds = 0;
    for trial in 1..=trials {
        let from = lab.next_seq();
        // The partition: the old primary stands alone with the stale sentinel, the minority's
        // Clients reach only those two; the other sentinels promote a replica once they have
        // missed the old primary for their down-after-milliseconds (1 s).
        old.command(&["REPLICAOF", "NO", "ONE"]).unwrap();
        stale.name(old.port());
        for p in &proxies {
            p.blackhole(true);
        }
        failed_over.push(from);
        let started = Instant::now();
        thread::sleep(Duration::from_secs(1));
        let demoted = failover(&set);
        let new = set.wait_for_new_primary(demoted).unwrap();
        lab.progress(10, "during the partition");
        thread::sleep(2 * TTL);
        let log = lab.register.log();
        let pairs = double_held(&log, from);
        let minority = holds_of(&log, from, &["w1", "w2"]);
        let holds = holds_of(&log, from, &["w1", "w2", "w3", "w4", "w5"]);
        println!(
            "trial {trial}: {demoted} -> {new} agreed {:?} after the partition began; during \
             the partition {holds} holds, {minority} of them on the minority side, double \
             Held: {pairs:?}",
            started.elapsed()
        );
        doubles += pairs.len();
        minority_holds += minority;
        // The partition heals.
        for p in &proxies {
            p.heal();
        }
        stale.name(new);
        replicate(&old, new);
        lab.progress(5, "after the partition healed");
        rows.push(row(
            "partition: one sentinel with the old primary",
            &lab,
            from,
            None,
        ));
    }
    let overlaps = lab.finish_with(&rows, 20 * trials, |o, log| {
        failed_over
            .iter()
            .any(|&seq| chaos_lab::began_across(o, log, seq))
    });
    println!(
        "{trials} partitions with one sentinel left with the old primary: {doubles} double \
         Held, {minority_holds} holds on the minority side, {overlaps} overlaps across a \
         failover"
    );
    assert_eq!(doubles, 0, "two Clients held the lock at once");
}
