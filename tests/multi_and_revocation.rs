//! InterProcessMultiLock and revocation against a real ZooKeeper.

mod common;

use std::thread;
use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::zookeeper::UnfairDriver;
use zklock::{
    Acl, Client, Error, InterProcessMultiLock, InterProcessMutex, Lock, LockHealth, Revoker,
};

fn session_client(server: &TestingServer) -> Client {
    client(&server.connect_string(), Duration::from_secs(20))
}

#[test]
fn a_failing_second_acquire_releases_the_first_and_propagates() {
    let server = TestingServer::start().unwrap();
    let owner = Client::builder(&server.connect_string())
        .digest_auth("alice", "secret")
        .connect()
        .unwrap();
    owner
        .create("/secure")
        .acl(vec![Acl::creator_all()])
        .call()
        .unwrap();
    let client = session_client(&server);
    let multi = InterProcessMultiLock::new(&client, &["/multi/free", "/secure/lock"]).unwrap();
    let err = multi.acquire_timeout(patience()).unwrap_err();
    assert!(matches!(err, Error::NoAuth(_)), "{err:?}");
    // The first lock is rolled back in the background.
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/multi/free",
    );
}

#[test]
fn a_failing_release_still_releases_the_others_and_reports_the_failure() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let second = InterProcessMutex::new(&client, "/multi/b").unwrap();
    let events = second.health_events();
    let multi = InterProcessMultiLock::from_locks(vec![
        Box::new(InterProcessMutex::new(&client, "/multi/a").unwrap()),
        Box::new(second),
    ])
    .unwrap();
    multi.acquire().unwrap();
    // Someone deletes the second lock's node: that hold is lost.
    let other = session_client(&server);
    let node = other.children("/multi/b").unwrap().pop().unwrap();
    other.delete(&format!("/multi/b/{node}")).unwrap();
    assert_eq!(events.recv_timeout(patience()).unwrap(), LockHealth::Lost);
    assert_eq!(Lock::health(&multi), Some(LockHealth::Lost));
    assert_eq!(multi.release(), Err(Error::LockLost));
    assert_clean(|| server.four_letter("wchc").unwrap(), &client, "/multi/a");
    assert_clean(|| server.four_letter("wchc").unwrap(), &client, "/multi/b");
}

#[test]
fn multi_lock_excludes_and_times_out_with_nothing_left() {
    let server = TestingServer::start().unwrap();
    let a = session_client(&server);
    let b = session_client(&server);
    let first = InterProcessMultiLock::new(&a, &["/multi/x", "/multi/y"]).unwrap();
    let second = InterProcessMultiLock::new(&b, &["/multi/x", "/multi/y"]).unwrap();
    let guard = first.lock().unwrap();
    assert!(!second.acquire_timeout(Duration::from_millis(500)).unwrap());
    drop(guard);
    assert!(second.acquire_timeout(patience()).unwrap());
    second.release().unwrap();
    assert_clean(|| server.four_letter("wchc").unwrap(), &a, "/multi/x");
    assert_clean(|| server.four_letter("wchc").unwrap(), &a, "/multi/y");
}

#[test]
fn a_revoked_holder_is_told_and_the_revoker_gets_the_lock() {
    let server = TestingServer::start().unwrap();
    let (revoked_tx, revoked_rx) = crossbeam_channel::unbounded();
    let (held_tx, held_rx) = crossbeam_channel::unbounded();
    let holder = {
        let client = session_client(&server);
        thread::spawn(move || {
            let mutex = InterProcessMutex::new(&client, "/locks/revocable").unwrap();
            mutex.make_revocable(move || {
                let _ = revoked_tx.send(thread::current().name().map(String::from));
            });
            mutex.acquire().unwrap();
            held_tx.send(()).unwrap();
            // Cooperative: this thread releases once it is asked to.
            let listener_thread = revoked_rx
                .recv_timeout(patience())
                .expect("revocation request");
            assert!(listener_thread
                .unwrap_or_default()
                .starts_with("zklock-watch-"));
            mutex.release().unwrap();
        })
    };
    held_rx.recv_timeout(patience()).unwrap();
    let client = session_client(&server);
    let mutex = InterProcessMutex::new(&client, "/locks/revocable").unwrap();
    let holder_node = mutex.participant_nodes().unwrap()[0].clone();
    Revoker::attempt_revoke(&client, &holder_node).unwrap();
    let guard = mutex
        .try_lock_for(patience())
        .unwrap()
        .expect("the holder let go");
    holder.join().unwrap();
    drop(guard);
    Revoker::attempt_revoke(&client, &holder_node).unwrap(); // gone already: fine
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/revocable",
    );
}

/// With `UnfairDriver` a revocation request on a node that is only waiting is no claim: when
/// the holder releases, that waiter still takes the lock.
#[test]
fn an_unfair_waiter_asked_to_release_still_takes_the_lock() {
    let server = TestingServer::start().unwrap();
    let path = "/locks/unfair-revoked";
    let holder_client = session_client(&server);
    let holder = InterProcessMutex::with_driver(&holder_client, path, UnfairDriver).unwrap();
    holder.acquire().unwrap();
    let held = holder.lock_node().unwrap();
    let (got_tx, got_rx) = crossbeam_channel::bounded(1);
    let waiter_client = session_client(&server);
    let waiter = thread::spawn(move || {
        let mutex = InterProcessMutex::with_driver(&waiter_client, path, UnfairDriver).unwrap();
        let got = mutex.acquire_timeout(patience()).unwrap();
        got_tx.send(got).unwrap();
        if got {
            mutex.release().unwrap();
        }
    });
    let client = session_client(&server);
    wait_for("the waiter's node", || {
        client.children(path).map(|c| c.len()).unwrap_or(0) == 2
    });
    let waiting = holder.participant_nodes().unwrap();
    let waiting = waiting.iter().find(|n| **n != held).unwrap();
    Revoker::attempt_revoke(&client, waiting).unwrap();
    holder.release().unwrap();
    let got = got_rx.recv_timeout(patience() * 2).unwrap();
    assert!(got, "the revoked waiter never took the free lock");
    waiter.join().unwrap();
    assert_clean(|| server.four_letter("wchc").unwrap(), &client, path);
}

#[test]
fn a_revoked_writer_is_told() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let rw = zklock::InterProcessReadWriteLock::new(&client, "/locks/rw-revocable").unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    rw.write_lock().make_revocable(move || {
        let _ = tx.send(());
    });
    let guard = rw.write_lock().lock().unwrap();
    let other = session_client(&server);
    let node = rw.write_lock().participant_nodes().unwrap()[0].clone();
    Revoker::attempt_revoke(&other, &node).unwrap();
    rx.recv_timeout(patience())
        .expect("the writer's listener ran");
    guard.release().unwrap();
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/rw-revocable",
    );
}

/// An owned guard lives in a struct beside its lock; a mutex shared through an `Arc` is locked
/// directly by one thread and as part of a multi-lock by another, and they exclude each other.
#[test]
fn owned_guards_and_a_multi_lock_over_a_shared_mutex() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use zklock::ArcLockGuard;

    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let shared = Arc::new(InterProcessMutex::new(&client, "/multi/shared").unwrap());

    struct Job {
        guard: ArcLockGuard<InterProcessMutex>,
        token: u64,
    }
    let guard = shared.lock_arc().unwrap();
    let job = Job {
        token: guard.fencing_token(),
        guard,
    };
    assert!(Arc::ptr_eq(job.guard.lock(), &shared));
    assert_eq!(job.guard.health(), LockHealth::Held);
    assert_eq!(shared.fencing_token(), Some(job.token));

    // Another thread's multi-lock over the same mutex (and one more) waits for the job.
    let multi = InterProcessMultiLock::from_locks(vec![
        Box::new(shared.clone()),
        Box::new(InterProcessMutex::new(&client, "/multi/other").unwrap()),
    ])
    .unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let waiter = {
        let inside = inside.clone();
        thread::spawn(move || {
            assert!(!multi.is_acquired_in_this_process());
            let g = multi.lock().unwrap();
            inside.store(true, Ordering::SeqCst);
            assert!(multi.is_acquired_in_this_process(), "every lock is held");
            g.release().unwrap();
            assert!(!multi.is_acquired_in_this_process());
        })
    };
    wait_for("the multi-lock to queue on the shared mutex", || {
        shared.participant_nodes().unwrap().len() == 2
    });
    thread::sleep(Duration::from_millis(200));
    assert!(
        !inside.load(Ordering::SeqCst),
        "the multi-lock got in beside the job"
    );
    job.guard.release().unwrap();
    waiter.join().unwrap();
    assert!(inside.load(Ordering::SeqCst));
    assert!(shared
        .try_lock_arc_for(Duration::from_secs(5))
        .unwrap()
        .is_some());
}
