//! The PostgreSQL leader latch against a real server: one leader among three, the next when
//! it closes, epochs rising, events, a lost term queued again, a killed leader process
//! replaced.

mod common;

use std::time::{Duration, Instant};

use common::postgres::{client, worker_client};
use common::worker::{say, wait_to_be_killed, Worker};
use common::{patience, wait_for};

use zklock::postgres::PgLeaderLatch;
use zklock::testing::TestingPostgres;
use zklock::{Error, LeadershipChange, LockHealth};

const WORKER: &str = "ZKLOCK_PG_LEADER_WORKER";

/// The session timeout of the worker processes.
const WORKER_SESSION: Duration = Duration::from_secs(3);

#[test]
fn one_leader_among_three_then_the_next_with_a_higher_epoch() {
    let server = TestingPostgres::start().unwrap();
    let mut latches: Vec<PgLeaderLatch> = (0..3)
        .map(|_| PgLeaderLatch::start(&client(&server), "election").unwrap())
        .collect();
    let mut last = 0;
    while !latches.is_empty() {
        wait_for("a leader", || {
            latches.iter().any(PgLeaderLatch::has_leadership)
        });
        let leaders: Vec<usize> = (0..latches.len())
            .filter(|&i| latches[i].has_leadership())
            .collect();
        assert_eq!(leaders.len(), 1, "one leader");
        let leader = latches.remove(leaders[0]);
        let epoch = leader.epoch().unwrap();
        assert!(epoch > last, "epoch {epoch} after {last}");
        last = epoch;
        assert_eq!(leader.health(), Some(LockHealth::Held));
        leader.close();
        assert!(!leader.has_leadership());
        assert!(matches!(leader.await_leadership(), Err(Error::Closed)));
    }
    wait_for("the lock to be free", || {
        server.advisory_lock("election").unwrap().0.is_empty()
    });
}

#[test]
fn a_lost_term_is_told_and_the_latch_queues_again() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let latch = PgLeaderLatch::start(&c, "requeue").unwrap();
    latch.await_leadership().unwrap();
    let first = latch.epoch().unwrap();
    // Subscribed once leading: the first Gained may come before any subscription can.
    let changes = latch.changes();
    let pid = server.advisory_lock("requeue").unwrap().0[0];
    assert!(server.terminate_backend(pid).unwrap());
    assert_eq!(
        changes.recv_timeout(patience()).unwrap(),
        LeadershipChange::Lost
    );
    let again = changes.recv_timeout(patience()).unwrap();
    match again {
        LeadershipChange::Gained { epoch } => assert!(epoch > first, "{epoch} after {first}"),
        other => panic!("{other:?}"),
    }
    assert!(latch.await_leadership_timeout(patience()).unwrap());
    drop(latch);
    assert_eq!(
        changes.recv_timeout(patience()).unwrap(),
        LeadershipChange::Lost
    );
    wait_for("the dropped latch to let go", || {
        server.advisory_lock("requeue").unwrap().0.is_empty()
    });
    assert!(matches!(
        PgLeaderLatch::start(&c, ""),
        Err(Error::InvalidArgument(_))
    ));
}

/// The worker: leads "worker" and stays until killed.
#[test]
fn leader_worker() {
    let Some(client) = worker_client(WORKER, WORKER_SESSION) else {
        return; // only as a worker process
    };
    let latch = PgLeaderLatch::start(&client, "worker").unwrap();
    latch.await_leadership().unwrap();
    say(&format!("leading {}", latch.epoch().unwrap()));
    wait_to_be_killed();
}

#[test]
fn a_killed_leader_process_is_replaced() {
    let server = TestingPostgres::start().unwrap();
    let worker = Worker::start("leader_worker", WORKER, &server.url());
    let theirs: u64 = worker.expect("leading").parse().unwrap();
    let latch = PgLeaderLatch::start(&client(&server), "worker").unwrap();
    assert!(!latch
        .await_leadership_timeout(Duration::from_millis(200))
        .unwrap());
    worker.signal("-KILL");
    let started = Instant::now();
    assert!(latch.await_leadership_timeout(patience()).unwrap());
    println!(
        "a new leader {:?} after kill -9 of the leader (session timeout {WORKER_SESSION:?})",
        started.elapsed()
    );
    assert!(latch.epoch().unwrap() > theirs);
}
