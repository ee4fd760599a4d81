//! The MySQL chaos run, on MariaDB: worker processes contend for one `MySqlMutex` (session
//! timeout 2 s)
//! and write with their fencing tokens to a [`FencedRegister`](zklock::testing::FencedRegister),
//! while faults hit the holders and the server: kill -9 of the holder, SIGSTOP of the holder
//! past its session timeout, a restart of the server, a kill -9 of the server (then a start on
//! its data), `KILL` of the holder's session, and SIGSTOP of the server past the session
//! timeout. After each fault the run waits
//! for a new holder's accepted write, and at the end it checks the register's whole log (no
//! overlap, no stale write accepted) and prints a report per fault: the longest gap between
//! accepted writes, the writes the fence refused, and the late writes of a frozen holder.
//!
//! A second run, on a Galera cluster of three nodes in table mode: two workers on each node
//! (a Client reaches one node), and the node of the holder silenced — SIGSTOP: the kernel
//! accepts connections and nothing answers, as a node powered off or partitioned away — until
//! the two others have dropped it from the cluster and their workers' writes went on; then it
//! runs again and rejoins (`ZKLOCK_CHAOS_FAILOVERS` rounds, 2 by default; `scripts/chaos.sh`
//! runs 10).
//!
//! A third run, on a primary with a semi-synchronous replica (a commit answered once the
//! replica has it, or after 1 s without): the replica silenced — SIGSTOP — while the workers go
//! on, then let run again to catch up (`ZKLOCK_CHAOS_FAILOVERS` rounds, 2 by default;
//! `scripts/chaos.sh` runs 10); then the primary silenced and the replica promoted, new workers
//! on its URL (a Client names one server), and the silent primary killed once they wrote.
//!
//! Workers are this test binary run again (`mysql_chaos_worker`), one Client and one thread
//! each (`chaos_lab` has the loop, the lab and the report).

mod chaos_lab;

use std::thread;
use std::time::{Duration, Instant};

use chaos_lab::{patience, row, Lab};
use zklock::mysql::MySqlMutex;
use zklock::testing::TestingMariaDb;
use zklock::MySqlClient;

const WORKER: &str = "ZKLOCK_MYSQL_CHAOS_WORKER";
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);
const LOCK: &str = "chaos";

/// The worker: one Client on the URL it is given, the lab's loop on the lock.
#[test]
fn mysql_chaos_worker() {
    let Some((url, register, name, checks)) = chaos_lab::worker_args(WORKER) else {
        return; // only as a worker process
    };
    let stop = chaos_lab::stop_on_stdin();
    // `RUST_LOG=zklock=debug` shows what the Client did.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let client = chaos_lab::connect_until_up(|| {
        MySqlClient::builder(&url)
            .session_timeout(SESSION_TIMEOUT)
            .connect_timeout(Duration::from_secs(1))
            .operation_timeout(Duration::from_millis(500))
            .connect()
    });
    let mutex = MySqlMutex::new(&client, LOCK).unwrap();
    chaos_lab::work(&mutex, &register, &name, checks, &stop);
    client.close();
}

/// The session (`CONNECTION_ID()`) that holds the lock now (waits for one).
fn holding_session(server: &TestingMariaDb) -> u64 {
    let deadline = std::time::Instant::now() + patience();
    loop {
        if let Some(id) = server.lock_holder(LOCK).unwrap() {
            return id;
        }
        assert!(std::time::Instant::now() < deadline, "nobody holds");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn mysql_chaos_schedule() {
    let mut server = TestingMariaDb::start().unwrap();
    let mut lab = Lab::new(server.url(), "mysql_chaos_worker", WORKER);
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(20, "before the first fault");
    let mut rows = Vec::new();

    // kill -9 of the holder: its connection closes with it, the server frees the lock.
    let from = lab.next_seq();
    lab.kill_holder();
    lab.progress(10, "after the holder was killed");
    rows.push(row("kill -9 of the holder", &lab, from, None));
    lab.start_worker();

    // SIGSTOP of the holder past its session timeout: the server ends its silent session and
    // the others go on; once it runs again a holder that checks health() writes nothing, one
    // that does not is refused by the fence.
    let from = lab.next_seq();
    let frozen = lab.freeze_holder(SESSION_TIMEOUT);
    rows.push(row(
        "SIGSTOP of the holder for > session timeout",
        &lab,
        from,
        Some((&frozen.0, frozen.1)),
    ));

    // A restart of the server: every session ends, the workers open new ones.
    let from = lab.next_seq();
    lab.holder();
    server.restart().unwrap();
    lab.progress(10, "after the server restarted");
    rows.push(row("restart of the server", &lab, from, None));

    // kill -9 of the server, then a start on its data: the tokens' counter was committed
    // before each grant was answered, so the fence accepts the next holders' writes.
    let from = lab.next_seq();
    lab.holder();
    server.kill().unwrap();
    server.restart().unwrap();
    lab.progress(10, "after the server was killed and started again");
    rows.push(row("kill -9 of the server", &lab, from, None));

    // KILL of the holder's session: the server frees the lock at once and grants it to the
    // next waiter, while the holder learns of it only when its Client reads the connection's
    // end; until then it may still write, before the new holder's first write (after it, the
    // fence refuses).
    let from = lab.next_seq();
    let killed_at = from;
    let id = holding_session(&server);
    server.kill_session(id).unwrap();
    lab.progress(10, "after the holder's session was killed");
    rows.push(row("KILL of the holder's session", &lab, from, None));

    // SIGSTOP of the server (every process of it) past the session timeout.
    let from = lab.next_seq();
    lab.holder();
    server.pause().unwrap();
    thread::sleep(SESSION_TIMEOUT + SESSION_TIMEOUT / 2);
    server.resume().unwrap();
    lab.progress(10, "after the server ran again");
    rows.push(row(
        "SIGSTOP of the server for > session timeout",
        &lab,
        from,
        None,
    ));

    lab.finish_with(&rows, 100, |o, log| {
        chaos_lab::began_across(o, log, killed_at)
    });
}

/// Silent Galera nodes under the fenced register: each round freezes the node of the worker
/// that holds the lock (its lease row stays, renewed by nobody) until the two other nodes have
/// gone on without it: their workers are granted once the lease has run out by the database's
/// clock, and write. Then the node runs again and rejoins the cluster (if it cannot, it is
/// restarted, which rejoins it), and the writes go on on all three.
#[test]
fn galera_silent_node_chaos() {
    let rounds = chaos_lab::failovers();
    let started = Instant::now();
    let mut nodes = TestingMariaDb::start_galera(3).unwrap();
    println!("3 Galera nodes Synced in {:?}", started.elapsed());
    let url = |node: &TestingMariaDb| format!("{}?lock_mode=table", node.url());
    let mut lab = Lab::new(url(&nodes[0]), "mysql_chaos_worker", WORKER);
    // Worker i (in start order) on node i % 3.
    for i in 0..6 {
        lab.url = url(&nodes[i % 3]);
        lab.start_worker();
    }
    lab.progress(20, "before the first fault");
    let mut rows = Vec::new();
    for round in 1..=rounds {
        let from = lab.next_seq();
        let n = lab.holder() % 3;
        let struck = Instant::now();
        nodes[n].pause().unwrap();
        lab.progress(10, "while a node was silent");
        let others = struck.elapsed();
        // The two others have a cluster of their own (a silent node's own view says nothing
        // until it runs again).
        let other = (n + 1) % 3;
        nodes[other].await_galera(2).unwrap();
        nodes[n].resume().unwrap();
        let rejoined = match nodes.iter().try_for_each(|node| node.await_galera(3)) {
            Ok(()) => "rejoined",
            Err(e) => {
                println!("node {n} did not rejoin when it ran again ({e}); restarted");
                nodes[n].kill().unwrap();
                nodes[n].restart().unwrap();
                for node in &nodes {
                    node.await_galera(3).unwrap();
                }
                "restarted"
            }
        };
        lab.progress(10, "after the silent node ran again");
        println!(
            "round {round}: node {n} silent; 10 writes accepted on the others {others:?} after \
             the fault; the node {rejoined} {:?} after the fault",
            struck.elapsed()
        );
        rows.push(row("SIGSTOP of the holder's Galera node", &lab, from, None));
    }
    lab.finish(&rows, 20 * rounds);
}

/// Silent MariaDB replicas under the fenced register: each round freezes the semi-synchronous
/// replica while the workers contend on the primary (each grant's token commit waits up to the
/// 1 s semi-synchronous timeout, then the primary goes on alone), and lets it run again until
/// it acknowledges again. Then the primary is frozen with the replica acknowledging, and the
/// replica promoted: what was granted is on it (tokens there are above every earlier one), and
/// new workers on its URL go on while the old ones, on the silent primary, read `Lost`.
#[test]
fn replica_silent_node_chaos() {
    let rounds = chaos_lab::failovers();
    let (mut primary, replica) =
        TestingMariaDb::start_with_semi_sync_replica(Duration::from_secs(1)).unwrap();
    let acknowledging = |primary: &TestingMariaDb| {
        primary
            .root_sql("SHOW STATUS LIKE 'Rpl_semi_sync_master_status'")
            .is_ok_and(|rows| {
                rows.iter()
                    .any(|r| r.get(1).map(String::as_str) == Some("ON"))
            })
    };
    let mut lab = Lab::new(primary.url(), "mysql_chaos_worker", WORKER);
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(20, "before the first fault");
    let mut rows = Vec::new();
    for round in 1..=rounds {
        let from = lab.next_seq();
        lab.holder();
        let struck = Instant::now();
        replica.pause().unwrap();
        lab.progress(10, "while the replica was silent");
        let went_on = struck.elapsed();
        replica.resume().unwrap();
        let deadline = Instant::now() + patience();
        while !acknowledging(&primary) {
            assert!(
                Instant::now() < deadline,
                "the replica does not acknowledge again"
            );
            thread::sleep(Duration::from_millis(50));
        }
        lab.progress(5, "after the replica ran again");
        println!(
            "round {round}: 10 writes accepted {went_on:?} after the replica went silent; it \
             acknowledged again {:?} after",
            struck.elapsed()
        );
        rows.push(row(
            "SIGSTOP of the semi-synchronous replica",
            &lab,
            from,
            None,
        ));
    }
    // The primary goes silent; the replica, which has every grant the primary answered, is
    // promoted and new workers go to it.
    let from = lab.next_seq();
    lab.holder();
    let struck = Instant::now();
    primary.pause().unwrap();
    replica.promote().unwrap();
    lab.url = replica.url();
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(10, "after the replica was promoted");
    println!(
        "the primary silent, the replica promoted: 10 writes accepted {:?} after the fault",
        struck.elapsed()
    );
    primary.kill().unwrap();
    rows.push(row(
        "SIGSTOP of the primary, replica promoted",
        &lab,
        from,
        None,
    ));
    lab.finish(&rows, 20 * rounds);
}
