//! The Redis chaos run: worker processes contend for one fair `RedisMutex` (2 s TTL) and
//! write with their fencing tokens to a [`FencedRegister`](zklock::testing::FencedRegister),
//! while faults hit the holders and the server: kill -9 of the holder, SIGSTOP of the holder
//! past its TTL, SIGSTOP of the server past the TTL, a restart that loses every key, and a
//! failover to a replica that missed the holder's key. After each fault the run waits for a new
//! holder's accepted write, and at the end it checks the register's whole log (no overlap, no
//! stale write accepted) and prints a report per fault: the longest gap between accepted
//! writes, the writes the fence refused, and the late writes of a frozen holder.
//!
//! Workers are this test binary run again (`redis_chaos_worker`), one Client and one thread
//! each (`chaos_lab` has the loop, the lab and the report).

mod chaos_lab;

use std::thread;
use std::time::Duration;

use chaos_lab::{row, Lab};
use zklock::testing::TestingRedis;
use zklock::{RedisClient, RedisMutex};

const WORKER: &str = "ZKLOCK_REDIS_CHAOS_WORKER";
const TTL: Duration = Duration::from_secs(2);
const LOCK: &str = "chaos";

/// The worker: one Client on the URL it is given, the lab's loop on the lock.
#[test]
fn redis_chaos_worker() {
    let Some((url, register, name, checks)) = chaos_lab::worker_args(WORKER) else {
        return; // only as a worker process
    };
    let stop = chaos_lab::stop_on_stdin();
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
