//! Replicated grants (`RedisClientBuilder::wait_for_replicas`): a grant counts only once a
//! replica has it, a renewal batch only once a replica has it — against a real primary and
//! replica, the replica stopped with SIGSTOP to withhold its confirmation.

use std::time::{Duration, Instant};

use zklock::redis::{RedisLeaderLatch, RedisMutex, RedisSemaphore};
use zklock::testing::TestingRedis;
use zklock::{Error, LockHealth, RedisClient};

mod redis_common;
use redis_common::wait_for;

fn replicated_client(primary: &TestingRedis, ttl: Duration) -> RedisClient {
    RedisClient::builder(&primary.url())
        .ttl(ttl)
        .wait_for_replicas(1, Duration::from_millis(200))
        .connect()
        .unwrap()
}

/// With the replica answering, a grant waits for it and is granted; with the replica
/// stopped, the grant is released again after the wait's 200 ms and the acquire fails saying
/// why, leaving the lock free.
#[test]
fn a_grant_no_replica_confirmed_is_released_and_refused() {
    let primary = TestingRedis::start().unwrap();
    let replica = TestingRedis::replica_of(&primary).unwrap();
    let c = replicated_client(&primary, Duration::from_secs(3));
    let mutex = RedisMutex::new(&c, "confirmed").unwrap();
    let started = Instant::now();
    let guard = mutex.try_lock().unwrap().expect("granted and confirmed");
    println!("a confirmed grant took {:?}", started.elapsed());
    assert_eq!(
        replica.command(&["EXISTS", "zklock:{confirmed}"]).unwrap(),
        "1",
        "the replica has the grant when the acquire returns"
    );
    guard.release().unwrap();
    replica.pause().unwrap();
    let other = RedisMutex::new(&c, "unconfirmed").unwrap();
    let started = Instant::now();
    let refused = other.try_lock();
    let took = started.elapsed();
    replica.resume().unwrap();
    match refused {
        Err(Error::Redis(why)) => {
            println!("refused after {took:?}: {why}");
            assert!(why.contains("0 of the 1 replicas"), "{why}");
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert_eq!(
        primary
            .command(&["EXISTS", "zklock:{unconfirmed}"])
            .unwrap(),
        "0",
        "the unconfirmed grant was released"
    );
    assert!(other.try_lock().unwrap().is_some(), "confirmed again");
}

/// A semaphore lease waits for the replica as a mutex's grant does.
#[test]
fn a_lease_no_replica_confirmed_is_released_and_refused() {
    let primary = TestingRedis::start().unwrap();
    let replica = TestingRedis::replica_of(&primary).unwrap();
    let c = replicated_client(&primary, Duration::from_secs(3));
    let semaphore = RedisSemaphore::new(&c, "leases", 2).unwrap();
    let lease = semaphore
        .acquire_timeout(Duration::ZERO)
        .unwrap()
        .expect("granted and confirmed");
    replica.pause().unwrap();
    let refused = semaphore.acquire_timeout(Duration::ZERO);
    replica.resume().unwrap();
    match refused {
        Err(Error::Redis(why)) => assert!(why.contains("0 of the 1 replicas"), "{why}"),
        other => panic!("not refused: {other:?}"),
    }
    assert_eq!(
        primary.command(&["ZCARD", "zklock:sem:{leases}"]).unwrap(),
        "1",
        "only the confirmed lease is out"
    );
    lease.release().unwrap();
}

/// A leader latch whose term no replica confirmed does not lead: it gives the turn up and
/// leads once the replica confirms.
#[test]
fn a_latch_leads_only_once_a_replica_confirms() {
    let primary = TestingRedis::start().unwrap();
    let replica = TestingRedis::replica_of(&primary).unwrap();
    let c = replicated_client(&primary, Duration::from_secs(3));
    replica.pause().unwrap();
    let latch = RedisLeaderLatch::start(&c, "elected").unwrap();
    assert!(
        !latch
            .await_leadership_timeout(Duration::from_millis(1500))
            .unwrap(),
        "led without a replica's confirmation"
    );
    // Each try holds the key only while it waits for the replica (200 ms), then releases it.
    wait_for("the unconfirmed term released", || {
        primary.command(&["EXISTS", "zklock:{elected}"]).unwrap() == "0"
    });
    replica.resume().unwrap();
    let resumed = Instant::now();
    assert!(latch
        .await_leadership_timeout(redis_common::patience())
        .unwrap());
    println!("leads {:?} after the replica resumed", resumed.elapsed());
    latch.close();
}

/// A holder whose renewals no replica confirms reads `Suspended` once half a TTL has passed
/// since the last confirmed one, although the primary renews the key; `Held` again once the
/// replica confirms.
#[test]
fn a_renewal_no_replica_confirmed_does_not_count() {
    let ttl = Duration::from_secs(3);
    let primary = TestingRedis::start().unwrap();
    let replica = TestingRedis::replica_of(&primary).unwrap();
    let c = replicated_client(&primary, ttl);
    let mutex = RedisMutex::new(&c, "renewed").unwrap();
    let guard = mutex.lock().unwrap();
    replica.pause().unwrap();
    let paused = Instant::now();
    wait_for("Suspended", || guard.health() == LockHealth::Suspended);
    println!("Suspended {:?} after the replica stopped", paused.elapsed());
    let pttl: i64 = primary
        .command(&["PTTL", "zklock:{renewed}"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(pttl > 0, "the primary still has the key");
    replica.resume().unwrap();
    wait_for("Held again", || guard.health() == LockHealth::Held);
    guard.release().unwrap();
}

#[test]
fn a_replica_wait_longer_than_the_keepers_bound_is_refused() {
    for (n, wait) in [(1, Duration::from_secs(1)), (0, Duration::from_millis(10))] {
        match RedisClient::builder("redis://127.0.0.1:1")
            .ttl(Duration::from_secs(3))
            .wait_for_replicas(n, wait)
            .connect()
        {
            Err(Error::InvalidArgument(why)) => {
                assert!(why.contains("wait_for_replicas"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }
}
