//! ZooKeeper transactions (`Client::multi`) and writes guarded by a hold (`guarded_multi`),
//! against a real server: all or nothing, the failed operation named, and a holder frozen past
//! its session (SIGSTOP of a worker process, this test binary run again) refused when it wakes
//! and writes through its guard, while the same write through the plain Client lands.
//!
//! `ZKLOCK_GUARDED_ROUNDS` sets how many times the frozen holder is tried (default 3).

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::worker::{say, Worker};
use common::*;
use zklock::testing::TestingServer;
use zklock::zookeeper::{Op, OpResult};
use zklock::{
    Client, CreateMode, Error, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphoreMutex, InterProcessSemaphoreV2,
};

const WORKER: &str = "ZKLOCK_GUARDED_WORKER";
const LOCK: &str = "/guarded/lock";
const DATA: &str = "/guarded/data";
const SESSION: Duration = Duration::from_secs(2);

fn rounds() -> usize {
    std::env::var("ZKLOCK_GUARDED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

fn data_of(client: &Client, path: &str) -> Vec<u8> {
    client.data(path).expect("read the data node").0
}

#[test]
fn a_transaction_applies_every_operation_or_none() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(30));
    client.create("/t").data(b"v0").call().unwrap();
    client.create("/t/old").call().unwrap();

    let results = client
        .multi(&[
            Op::check("/t", 0),
            Op::create("/t/job-", b"j", CreateMode::PersistentSequential),
            Op::set_data_version("/t", b"v1", 0),
            Op::delete("/t/old"),
        ])
        .unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], OpResult::Check);
    let OpResult::Create { path: job, .. } = &results[1] else {
        panic!("{results:?}")
    };
    assert!(job.starts_with("/t/job-") && job.len() == "/t/job-".len() + 10);
    assert!(matches!(&results[2], OpResult::SetData { stat } if stat.version == 1));
    assert_eq!(results[3], OpResult::Delete);
    assert_eq!(data_of(&client, "/t"), b"v1");
    assert_eq!(data_of(&client, job), b"j");
    assert_eq!(client.exists("/t/old").unwrap(), None);

    // The third operation fails: the first two are not applied either.
    let err = client
        .multi(&[
            Op::create("/t/a", b"", CreateMode::Persistent),
            Op::set_data("/t", b"v2"),
            Op::delete_version("/t", 0),
        ])
        .unwrap_err();
    match &err {
        Error::TransactionFailed { index, op, source } => {
            assert_eq!(*index, 2);
            assert_eq!(op, "delete /t at version 0");
            assert!(
                matches!(**source, Error::BadVersion(ref p) if p == "/t"),
                "{source:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("operation 2"), "{err}");
    assert_eq!(client.exists("/t/a").unwrap(), None);
    assert_eq!(data_of(&client, "/t"), b"v1");

    let err = client
        .multi(&[Op::check_exists("/t/missing"), Op::set_data("/t", b"v3")])
        .unwrap_err();
    assert!(
        matches!(&err, Error::TransactionFailed { index: 0, source, .. }
            if matches!(**source, Error::NoNode(_))),
        "{err:?}"
    );

    // Bad input is refused before anything is sent: the valid first operation is not applied.
    let err = client
        .multi(&[
            Op::create("/t/b", b"", CreateMode::Persistent),
            Op::set_data("t/relative", b""),
        ])
        .unwrap_err();
    assert!(matches!(err, Error::InvalidPath { .. }), "{err:?}");
    assert_eq!(client.exists("/t/b").unwrap(), None);
    assert_eq!(client.multi(&[]).unwrap(), Vec::new());
    client.close();
}

#[test]
fn a_guarded_write_lands_while_held_and_is_refused_once_the_node_is_gone() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let admin = client(&server.connect_string(), Duration::from_secs(30));
    let holder = client(&server.connect_string(), Duration::from_secs(30));
    admin.create(DATA).parents_as_containers().call().unwrap();
    let mutex = InterProcessMutex::new(&holder, LOCK).unwrap();

    // Not held: refused before any I/O.
    let err = mutex
        .guarded_multi(&[Op::set_data(DATA, b"x")])
        .unwrap_err();
    assert_eq!(err, Error::NotOwner);

    let guard = mutex.lock().unwrap();
    let results = guard.guarded_multi(&[Op::set_data(DATA, b"held")]).unwrap();
    assert!(
        matches!(results[..], [OpResult::SetData { .. }]),
        "{results:?}"
    );
    assert_eq!(data_of(&admin, DATA), b"held");
    // A failed operation of the caller's keeps its own index.
    let err = guard
        .guarded_multi(&[Op::check(DATA, 1), Op::set_data_version(DATA, b"y", 0)])
        .unwrap_err();
    assert!(
        matches!(&err, Error::TransactionFailed { index: 1, source, .. }
            if matches!(**source, Error::BadVersion(_))),
        "{err:?}"
    );

    // An operator deletes the holder's node: the hold is gone, whatever the holder believes.
    let node = mutex.lock_node().unwrap();
    admin.delete(&node).unwrap();
    let err = guard
        .guarded_multi(&[Op::set_data(DATA, b"stale")])
        .unwrap_err();
    assert!(
        matches!(&err, Error::HoldLost { lock, .. } if lock == LOCK),
        "{err:?}"
    );
    assert_eq!(data_of(&admin, DATA), b"held");
    drop(guard);

    // An owned guard (`lock_arc`) guards the same way, and once released through the lock
    // it refuses before any I/O.
    let shared = std::sync::Arc::new(InterProcessMutex::new(&holder, "/guarded/owned").unwrap());
    let owned = shared.lock_arc().unwrap();
    owned
        .guarded_multi(&[Op::set_data(DATA, b"owned")])
        .unwrap();
    shared.release().unwrap();
    let err = owned
        .guarded_multi(&[Op::set_data(DATA, b"released")])
        .unwrap_err();
    assert_eq!(err, Error::NotOwner);
    assert_eq!(data_of(&admin, DATA), b"owned");
    drop(owned);

    // The read-write lock's halves guard the same way.
    let rw = InterProcessReadWriteLock::new(&holder, "/guarded/rw").unwrap();
    let writing = rw.write_lock().lock().unwrap();
    writing
        .guarded_multi(&[Op::set_data(DATA, b"writer")])
        .unwrap();
    admin.delete(&rw.write_lock().lock_node().unwrap()).unwrap();
    let err = writing
        .guarded_multi(&[Op::set_data(DATA, b"stale writer")])
        .unwrap_err();
    assert!(matches!(err, Error::HoldLost { .. }), "{err:?}");
    assert_eq!(data_of(&admin, DATA), b"writer");
    drop(writing);

    // So do the semaphore mutex and a semaphore's lease.
    let semaphore_mutex = InterProcessSemaphoreMutex::new(&holder, "/guarded/sm").unwrap();
    let held = semaphore_mutex.lock().unwrap();
    held.guarded_multi(&[Op::set_data(DATA, b"semaphore mutex")])
        .unwrap();
    admin.delete(&semaphore_mutex.lock_node().unwrap()).unwrap();
    let err = held
        .guarded_multi(&[Op::set_data(DATA, b"stale semaphore mutex")])
        .unwrap_err();
    assert!(matches!(err, Error::HoldLost { .. }), "{err:?}");
    drop(held);
    let semaphore = InterProcessSemaphoreV2::new(&holder, "/guarded/semaphore", 2).unwrap();
    let lease = semaphore.acquire().unwrap();
    lease
        .guarded_multi(&[Op::set_data(DATA, b"lease")])
        .unwrap();
    admin.delete(lease.path()).unwrap();
    let err = lease
        .guarded_multi(&[Op::set_data(DATA, b"stale lease")])
        .unwrap_err();
    assert!(
        matches!(&err, Error::HoldLost { lock, .. } if lock == "/guarded/semaphore"),
        "{err:?}"
    );
    assert_eq!(data_of(&admin, DATA), b"lease");
    drop(lease);
    holder.close();
    admin.close();
}

/// The worker: holds the lock, then answers `guarded` with a write through its guard and
/// `plain` with the same write through its Client.
#[test]
fn stale_holder_worker() {
    let Ok(connect) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let client = Client::builder(&connect)
        .session_timeout(SESSION)
        .connect()
        .expect("connect");
    let mutex = InterProcessMutex::new(&client, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    say(&format!("held {:?}", guard.health()));
    for line in std::io::stdin().lines() {
        match line.unwrap().as_str() {
            "guarded" => match guard.guarded_multi(&[Op::set_data(DATA, b"stale")]) {
                Ok(_) => say("guarded applied"),
                Err(Error::HoldLost { source, .. }) => say(&format!("guarded refused {source:?}")),
                Err(e) => say(&format!("guarded failed {e:?}")),
            },
            "plain" => match client.set_data(DATA, b"stale") {
                Ok(_) => say("plain applied"),
                Err(e) => say(&format!("plain failed {e:?}")),
            },
            _ => break,
        }
    }
    drop(guard);
    client.close();
}

#[test]
fn a_holder_frozen_past_its_session_is_refused_by_its_guard() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let admin = client(&server.connect_string(), Duration::from_secs(30));
    admin.create(DATA).parents_as_containers().call().unwrap();
    let mutex = InterProcessMutex::new(&admin, LOCK).unwrap();
    let rounds = rounds();
    let mut refusals = Vec::new();
    for round in 0..rounds {
        let mut worker = Worker::start("stale_holder_worker", WORKER, &server.connect_string());
        assert_eq!(worker.expect("held"), "Held");
        worker.signal("-STOP");
        let stopped = Instant::now();
        // The server expires the frozen holder's session; the next holder writes.
        let next = mutex
            .try_lock_for(SESSION * 10 * timing())
            .unwrap()
            .expect("the frozen holder's session expired and its node went");
        let fresh = format!("round {round}");
        next.guarded_multi(&[Op::set_data(DATA, fresh.as_bytes())])
            .unwrap();
        while stopped.elapsed() < SESSION * 5 / 2 {
            thread::sleep(Duration::from_millis(50));
        }
        // The order waits in the pipe: the holder writes the moment it wakes, before its
        // I/O thread has noticed anything.
        worker.tell("guarded");
        worker.signal("-CONT");
        let answer = worker.expect("guarded");
        assert!(
            answer.starts_with("refused"),
            "round {round}: the woken holder's guarded write was not refused: {answer}"
        );
        assert_eq!(
            data_of(&admin, DATA),
            fresh.as_bytes(),
            "round {round}: a stale write landed"
        );
        refusals.push(answer);
        // What the guard prevents: the same write through the plain Client overwrites the
        // next holder's data.
        worker.tell("plain");
        assert_eq!(worker.expect("plain"), "applied", "round {round}");
        assert_eq!(data_of(&admin, DATA), b"stale", "round {round}");
        assert!(next.health() == zklock::LockHealth::Held);
        drop(next);
        worker.tell("exit");
        let status = worker.child.wait().unwrap();
        assert!(
            status.success(),
            "round {round}: the worker failed: {status}"
        );
    }
    eprintln!(
        "guarded writes of a holder frozen past its session: {} of {rounds} refused ({refusals:?})",
        refusals.len()
    );
    assert_eq!(refusals.len(), rounds);
    admin.close();
}
