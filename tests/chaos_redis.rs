//! The Redis chaos run: worker processes contend for one fair `RedisMutex` (2 s TTL) and
//! write with their fencing tokens to a [`FencedRegister`](zklock::testing::FencedRegister),
//! while faults hit the holders and the server: kill -9 of the holder, SIGSTOP of the holder
//! past its TTL, SIGSTOP of the server past the TTL, a restart that loses every key, and a
//! failover to a replica that missed the holder's key. After each fault the run waits for a new
//! holder's accepted write, and at the end it checks the register's whole log (no overlap, no
//! stale write accepted) and prints a report per fault: the longest gap between accepted
//! writes, the writes the fence refused, and the late writes of a frozen holder.
//!
//! Then Sentinel failovers: the workers reach a Sentinel set (a primary, two replicas, three
//! sentinels) through its `redis+sentinel://` URL, whose first sentinel they reach through a
//! proxy. The primary is killed, then silenced — frozen (SIGSTOP) together with the workers'
//! first sentinel (the proxy stops forwarding: it accepts and answers nothing), as when the host
//! of both goes quiet — until the other sentinels have promoted a replica (the sentinel stays
//! silent until the workers' writes went on), then failed over with `SENTINEL FAILOVER`, the
//! silent round every other time (`ZKLOCK_CHAOS_FAILOVERS` failovers, 2 by default: a kill and
//! a silent round; `scripts/chaos.sh` runs 20) — once with replicated grants (each grant and
//! renewal confirmed by a replica), where no two holders may overlap, and once without, where a
//! grant the new primary never received can let two overlap and the fence must refuse every
//! stale write.
//!
//! Then the same on a Redis Cluster (three primaries, three replicas) through its
//! `redis+cluster://` URL: the primary of the lock's slot is killed (and started again, to
//! rejoin as a replica), then, in turn, frozen (SIGSTOP: a silent primary) until its replica has
//! taken over and failed over with `CLUSTER FAILOVER` on its replica (CI's 2 failovers: a kill
//! and a silent primary), with and without replicated grants.
//!
//! Workers are this test binary run again (`redis_chaos_worker`,
//! `redis_replicated_chaos_worker`), one Client and one thread each (`chaos_lab` has the loop,
//! the lab and the report).

mod chaos_lab;

use std::thread;
use std::time::{Duration, Instant};

use chaos_lab::{patience, row, Lab};
use zklock::redis::RedisMutex;
use zklock::testing::{FaultProxy, TestingRedis, TestingRedisCluster, TestingSentinel};
use zklock::RedisClient;

const WORKER: &str = "ZKLOCK_REDIS_CHAOS_WORKER";
const TTL: Duration = Duration::from_secs(2);
const LOCK: &str = "chaos";

const REPLICATED_WORKER: &str = "ZKLOCK_REDIS_REPLICATED_CHAOS_WORKER";

/// The worker: one Client on the URL it is given, the lab's loop on the lock.
#[test]
fn redis_chaos_worker() {
    work(WORKER, false);
}

/// The worker with replicated grants: one replica confirms each grant and renewal.
#[test]
fn redis_replicated_chaos_worker() {
    work(REPLICATED_WORKER, true);
}

fn work(var: &str, replicated: bool) {
    let Some((url, register, name, checks)) = chaos_lab::worker_args(var) else {
        return; // only as a worker process
    };
    let stop = chaos_lab::stop_on_stdin();
    let client = chaos_lab::connect_until_up(|| {
        let builder = RedisClient::builder(&url)
            .ttl(TTL)
            .connect_timeout(Duration::from_secs(1))
            .operation_timeout(Duration::from_millis(500));
        if replicated {
            builder.wait_for_replicas(1, Duration::from_millis(200))
        } else {
            builder
        }
        .connect()
    });
    let mutex = RedisMutex::new(&client, LOCK).unwrap();
    chaos_lab::work(&mutex, &register, &name, checks, &stop);
    client.close();
}

#[test]
fn redis_chaos_schedule() {
    let mut primary = TestingRedis::start().unwrap();
    let mut replica = TestingRedis::replica_of(&primary).unwrap();
    let mut lab = Lab::new(primary.url(), "redis_chaos_worker", WORKER);
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(20, "before the first fault");
    let mut rows = Vec::new();

    // kill -9 of the holder: another holds within the TTL.
    let from = lab.next_seq();
    lab.kill_holder();
    lab.progress(10, "after the holder was killed");
    rows.push(row("kill -9 of the holder", &lab, from, None));
    lab.start_worker();

    // SIGSTOP of the holder past its TTL: the others go on; once it runs again a holder that
    // checks health() writes nothing, one that does not is refused by the fence.
    let from = lab.next_seq();
    let frozen = lab.freeze_holder(TTL);
    rows.push(row(
        "SIGSTOP of the holder for > TTL",
        &lab,
        from,
        Some((&frozen.0, frozen.1)),
    ));

    // SIGSTOP of the server past the TTL.
    let from = lab.next_seq();
    primary.pause().unwrap();
    thread::sleep(TTL + TTL / 2);
    primary.resume().unwrap();
    lab.progress(10, "after the server ran again");
    rows.push(row("SIGSTOP of the server for > TTL", &lab, from, None));

    // A restart that loses every key.
    let from = lab.next_seq();
    lab.holder();
    primary.restart().unwrap();
    lab.progress(10, "after the server restarted without its keys");
    rows.push(row("restart without persistence", &lab, from, None));

    // A failover to a replica that missed the holder's key: the replica is paused and its link
    // cut, the primary grants and dies, the replica is promoted; workers pointed at it carry on.
    let from = lab.next_seq();
    replica.pause().unwrap();
    primary
        .command(&["CLIENT", "KILL", "TYPE", "replica"])
        .unwrap();
    lab.progress(5, "after the replica's link was cut");
    lab.holder();
    primary.kill().unwrap();
    replica.resume().unwrap();
    replica.promote().unwrap();
    lab.url = replica.url();
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(10, "after the failover");
    rows.push(row(
        "failover to a replica that missed the key",
        &lab,
        from,
        None,
    ));

    lab.finish(&rows, 100);
    drop(replica);
}

#[test]
fn sentinel_failovers_with_replicated_grants() {
    let overlaps = sentinel_failovers(true);
    assert_eq!(overlaps, 0);
}

#[test]
fn sentinel_failovers_without_replicated_grants() {
    sentinel_failovers(false);
}

/// Failovers of a Sentinel set under the fenced register: the first kills the primary, the
/// even ones silence it and the workers' first sentinel, the others are `SENTINEL FAILOVER`s;
/// after each the run waits for the sentinels to agree on the new primary and for the workers'
/// writes to go on. Returns how many holds overlapped.
fn sentinel_failovers(replicated: bool) -> usize {
    let rounds = chaos_lab::failovers();
    let mut set = TestingSentinel::start().unwrap();
    // The workers' first sentinel, behind a proxy that can go silent.
    let first = FaultProxy::start_raw(("127.0.0.1", set.sentinel_ports()[0])).unwrap();
    let ports = set.sentinel_ports();
    let url = format!(
        "redis+sentinel://{},127.0.0.1:{},127.0.0.1:{}/{}",
        first.connect_string(),
        ports[1],
        ports[2],
        set.master_name()
    );
    let mut lab = if replicated {
        Lab::new(url, "redis_replicated_chaos_worker", REPLICATED_WORKER)
    } else {
        Lab::new(url, "redis_chaos_worker", WORKER)
    };
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(20, "before the first failover");
    let mut rows = Vec::new();
    let mut silenced = 0;
    for round in 1..=rounds {
        let from = lab.next_seq();
        lab.holder();
        let started = Instant::now();
        let (fault, old) = if round == 1 {
            ("kill -9 of the primary", set.kill_primary().unwrap())
        } else if round % 2 == 0 {
            // A silent primary and a silent first sentinel: both accept connections and
            // answer nothing until the other sentinels have promoted a replica; then the old
            // primary runs again (they make it a replica), and the first sentinel answers
            // once the workers' writes went on without it.
            first.blackhole(true);
            let old = set.pause_primary().unwrap();
            silenced += 1;
            ("SIGSTOP of the primary, first sentinel silent", old)
        } else {
            ("SENTINEL FAILOVER", failover(&set))
        };
        set.wait_for_new_primary(old).unwrap();
        let agreed = started.elapsed();
        let silent = round != 1 && round % 2 == 0;
        if silent {
            // Replicated grants need a replica of the new primary: the old one, once it runs.
            set.resume(old).unwrap();
        }
        lab.progress(10, "after the failover");
        if silent {
            first.heal();
        }
        println!(
            "failover {round} ({fault}): the sentinels agreed in {agreed:?}, 10 writes \
             accepted {:?} after the fault",
            started.elapsed()
        );
        rows.push(row(fault, &lab, from, None));
    }
    // Without replicated grants a failover may lose a grant: holders may overlap then.
    let overlaps = lab.finish_with(&rows, 20 * rounds, |_, _| !replicated);
    println!(
        "{rounds} failovers {} replicated grants ({silenced} with the primary and the first \
         sentinel silent): {overlaps} overlapping holds",
        if replicated { "with" } else { "without" }
    );
    overlaps
}

/// `SENTINEL FAILOVER`, tried again while the sentinels refuse it (the last one may still be
/// settling, or the demoted primary not yet a replica in sync); the old primary's port.
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

#[test]
fn cluster_failovers_with_replicated_grants() {
    let overlaps = cluster_failovers(true);
    assert_eq!(overlaps, 0);
}

#[test]
fn cluster_failovers_without_replicated_grants() {
    cluster_failovers(false);
}

/// Failovers of the primary of the lock's slot on a cluster under the fenced register: the
/// first kills it (it is started again once its replica has taken over, and rejoins as that
/// one's replica), the even ones freeze it (SIGSTOP: a silent primary, let run again once its
/// replica has taken over), the others are `CLUSTER FAILOVER`s on its replica; after each the
/// run waits for the nodes to agree on the new primary and for the workers' writes to go on.
/// Returns how many holds overlapped.
fn cluster_failovers(replicated: bool) -> usize {
    let rounds = chaos_lab::failovers();
    let key = format!("zklock:{{{LOCK}}}");
    let mut cluster = TestingRedisCluster::start().unwrap();
    let mut lab = if replicated {
        Lab::new(
            cluster.url(),
            "redis_replicated_chaos_worker",
            REPLICATED_WORKER,
        )
    } else {
        Lab::new(cluster.url(), "redis_chaos_worker", WORKER)
    };
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(20, "before the first failover");
    let mut rows = Vec::new();
    let mut last = Instant::now();
    for round in 1..=rounds {
        // A primary votes for a replica of the same primary at most once in two node
        // timeouts (2 s): a failover back sooner would be given up.
        thread::sleep(Duration::from_secs(3).saturating_sub(last.elapsed()));
        let from = lab.next_seq();
        lab.holder();
        let started = Instant::now();
        let (fault, old, new) = if round == 1 {
            let old = cluster.kill_primary_of(&key).unwrap();
            let new = cluster.wait_for_new_primary(&key, old).unwrap();
            ("kill -9 of the lock's primary", old, new)
        } else if round % 2 == 0 {
            // A silent primary: it accepts connections and answers nothing until its replica
            // has taken over; then it runs again, and rejoins as that one's replica.
            let old = cluster.pause_primary_of(&key).unwrap();
            let new = cluster.wait_for_new_primary(&key, old).unwrap();
            cluster.resume_node(old).unwrap();
            ("SIGSTOP of the lock's primary", old, new)
        } else {
            let (old, new) = cluster_failover(&cluster, &key);
            ("CLUSTER FAILOVER", old, new)
        };
        let agreed = started.elapsed();
        if round == 1 {
            // Back as the new primary's replica: the next rounds fail over to it, and
            // replicated grants need it.
            cluster.restart_node(old).unwrap();
        }
        lab.progress(10, "after the failover");
        last = Instant::now();
        let row = row(fault, &lab, from, None);
        println!(
            "failover {round} ({fault}, {old} -> {new}): the nodes agreed in {agreed:?}, 10 \
             writes accepted {:?} after the fault, the longest gap between accepted writes \
             {:?}, {} writes refused by the fence",
            started.elapsed(),
            row.longest_gap,
            row.rejected
        );
        rows.push(row);
    }
    // Without replicated grants a failover may lose a grant: holders may overlap then.
    let mut gaps: Vec<Duration> = rows.iter().map(|r| r.longest_gap).collect();
    gaps.sort();
    let refused: usize = rows.iter().map(|r| r.rejected).sum();
    let overlaps = lab.finish_with(&rows, 20 * rounds, |_, _| !replicated);
    println!(
        "{rounds} cluster failovers {} replicated grants: {overlaps} overlapping holds, \
         {refused} stale writes refused by the fence; the longest gap between accepted writes \
         {:?} (median of the rounds), {:?} (most)",
        if replicated { "with" } else { "without" },
        gaps[gaps.len() / 2],
        gaps.last().copied().unwrap_or_default()
    );
    overlaps
}

/// `CLUSTER FAILOVER` on a replica of `key`'s primary, tried again while it is refused, or
/// while no new primary is agreed on 10 s after it was accepted (a manual failover that does
/// not finish within 5 s is given up by the replica); the old and the new primary's ports.
fn cluster_failover(cluster: &TestingRedisCluster, key: &str) -> (u16, u16) {
    let deadline = Instant::now() + patience();
    loop {
        match cluster.failover(key) {
            Ok(old) => {
                match cluster.wait_for_new_primary_within(key, old, Duration::from_secs(10)) {
                    Ok(new) => return (old, new),
                    Err(e) => println!("CLUSTER FAILOVER of {old} given up: {e}; again"),
                }
            }
            Err(e) => println!("CLUSTER FAILOVER refused: {e}"),
        }
        assert!(Instant::now() < deadline, "no failover");
        thread::sleep(Duration::from_millis(200));
    }
}
