//! The Redis leader latch against a real `redis-server`: one leader at a time with rising
//! epochs, the next elected when the leader closes or is killed, a lost hold ending the term,
//! latches that cost no thread, and a latch sharing its queue with a mutex of the same name.

use std::time::Duration;

use zklock::redis::{RedisLeaderLatch, RedisMutex};
use zklock::testing::{FencedRegister, TestingRedis};
use zklock::{Error, LeadershipChange};

mod redis_common;
use redis_common::{client, lock_keys, patience, start_worker, wait_for};

/// The threads of this process.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line["Threads:".len()..].trim().parse().unwrap()
}

#[test]
fn one_leader_at_a_time_and_the_next_when_it_closes() {
    let server = TestingRedis::start().unwrap();
    let clients: Vec<_> = (0..3)
        .map(|_| client(&server, Duration::from_secs(30)))
        .collect();
    let latches: Vec<_> = clients
        .iter()
        .map(|c| RedisLeaderLatch::start(c, "election").unwrap())
        .collect();
    let mut epochs = Vec::new();
    let mut open: Vec<&RedisLeaderLatch> = latches.iter().collect();
    while !open.is_empty() {
        wait_for("a leader", || open.iter().any(|l| l.has_leadership()));
        let leading: Vec<_> = open.iter().filter(|l| l.has_leadership()).collect();
        assert_eq!(leading.len(), 1, "one leader at a time");
        let leader = *leading[0];
        epochs.push(leader.epoch().unwrap());
        leader.close();
        assert!(!leader.has_leadership());
        open.retain(|l| !std::ptr::eq(*l, leader));
    }
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
    wait_for("the election's keys to go", || {
        lock_keys(&server).lines().all(|k| k.ends_with(":token"))
    });
}

#[test]
fn a_killed_leader_is_replaced_within_its_ttl() {
    let server = TestingRedis::start().unwrap();
    let register = FencedRegister::start().unwrap();
    let mut worker = start_worker(&server, &register, "latch");
    let old: u64 = worker.expect("held").parse().unwrap();
    let c = client(&server, Duration::from_secs(2));
    let latch = RedisLeaderLatch::start(&c, "worker").unwrap();
    let changes = latch.changes();
    assert!(!latch
        .await_leadership_timeout(Duration::from_millis(200))
        .unwrap());
    worker.signal("-KILL");
    let _ = worker.child.wait();
    assert!(latch.await_leadership_timeout(patience()).unwrap());
    let epoch = latch.epoch().unwrap();
    assert!(epoch > old, "epoch {epoch} after {old}");
    assert_eq!(
        changes.recv_timeout(patience()).unwrap(),
        LeadershipChange::Gained { epoch }
    );
}

#[test]
fn a_lost_hold_ends_the_term_and_the_latch_queues_again() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_millis(600));
    let latch = RedisLeaderLatch::start(&c, "lost").unwrap();
    let changes = latch.changes();
    latch.await_leadership_timeout(patience()).unwrap();
    let first = latch.epoch().unwrap();
    assert_eq!(
        changes.recv_timeout(patience()).unwrap(),
        LeadershipChange::Gained { epoch: first }
    );
    server.command(&["DEL", "zklock:{lost}"]).unwrap();
    assert_eq!(
        changes.recv_timeout(patience()).unwrap(),
        LeadershipChange::Lost
    );
    match changes.recv_timeout(patience()).unwrap() {
        LeadershipChange::Gained { epoch } => assert!(epoch > first),
        other => panic!("{other:?}"),
    }
    assert!(latch.has_leadership());
}

#[test]
fn latches_cost_no_thread() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let before = threads();
    let latches: Vec<_> = (0..1000)
        .map(|i| RedisLeaderLatch::start(&c, &format!("shard-{i}")).unwrap())
        .collect();
    wait_for("every latch to lead", || {
        latches.iter().all(RedisLeaderLatch::has_leadership)
    });
    // Other tests of this binary run beside this one and start threads of their own: a
    // thread per latch would be a thousand more.
    let grown = threads().saturating_sub(before);
    assert!(grown < 100, "1000 latches came with {grown} more threads");
    drop(latches);
    wait_for("the latches' keys to go", || {
        lock_keys(&server).lines().all(|k| k.ends_with(":token"))
    });
}

#[test]
fn a_latch_and_a_mutex_of_one_name_share_the_queue() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let mutex = RedisMutex::new(&c, "shared").unwrap();
    let guard = mutex.lock().unwrap();
    let latch = RedisLeaderLatch::start(&c, "shared").unwrap();
    assert!(!latch
        .await_leadership_timeout(Duration::from_millis(200))
        .unwrap());
    drop(guard);
    assert!(latch.await_leadership_timeout(patience()).unwrap());
    assert!(
        mutex.try_lock().unwrap().is_none(),
        "the leader holds the lock"
    );
}

#[test]
fn a_latch_ends_with_its_client() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let latch = RedisLeaderLatch::start(&c, "closing").unwrap();
    latch.await_leadership_timeout(patience()).unwrap();
    c.close();
    assert!(!latch.has_leadership());
    assert!(matches!(latch.await_leadership(), Err(Error::Closed)));
    assert!(matches!(
        RedisLeaderLatch::start(&c, "closing"),
        Err(Error::Closed)
    ));
}
