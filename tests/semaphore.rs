//! InterProcessSemaphoreV2 and InterProcessSemaphoreMutex against a real ZooKeeper (ports of
//! Curator's scenarios).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::{Client, Error, InterProcessSemaphoreMutex, InterProcessSemaphoreV2};

fn session_client(server: &TestingServer) -> Client {
    client(&server.connect_string(), Duration::from_secs(20))
}

/// Counts leases held at once and the highest count seen.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Gauge {
    fn enter(&self, n: usize) {
        let now = self.now.fetch_add(n, Ordering::SeqCst) + n;
        self.max.fetch_max(now, Ordering::SeqCst);
    }
    fn leave(&self, n: usize) {
        self.now.fetch_sub(n, Ordering::SeqCst);
    }
}

#[test]
fn ten_clients_five_leases_reach_exactly_five() {
    let server = TestingServer::start().unwrap();
    let gauge = Arc::new(Gauge::default());
    let threads: Vec<_> = (0..10)
        .map(|_| {
            let (cs, gauge) = (server.connect_string(), gauge.clone());
            thread::spawn(move || {
                let client = client(&cs, Duration::from_secs(20));
                let sem = InterProcessSemaphoreV2::new(&client, "/sem/five", 5).unwrap();
                let lease = sem.acquire().unwrap();
                gauge.enter(1);
                thread::sleep(Duration::from_millis(300));
                gauge.leave(1);
                lease.return_lease().unwrap();
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(gauge.max.load(Ordering::SeqCst), 5);
    let client = session_client(&server);
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/sem/five/leases",
    );
}

#[test]
fn a_hundred_threads_never_hold_more_than_eleven() {
    let server = TestingServer::start().unwrap();
    let clients: Vec<Client> = (0..10).map(|_| session_client(&server)).collect();
    let gauge = Arc::new(Gauge::default());
    let threads: Vec<_> = (0..100)
        .map(|i| {
            let (client, gauge) = (clients[i % 10].clone(), gauge.clone());
            thread::spawn(move || {
                let sem = InterProcessSemaphoreV2::new(&client, "/sem/eleven", 11).unwrap();
                let n = fastrand::u32(1..=3);
                let leases = sem.acquire_many(n).unwrap();
                gauge.enter(n as usize);
                thread::sleep(Duration::from_millis(fastrand::u64(1..20)));
                // Give back in random chunks.
                let mut leases = leases;
                while !leases.is_empty() {
                    let k = fastrand::usize(1..=leases.len());
                    let chunk: Vec<_> = leases.drain(..k).collect();
                    gauge.leave(chunk.len());
                    sem.return_all(chunk).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let max = gauge.max.load(Ordering::SeqCst);
    assert!(max <= 11, "{max} leases held at once");
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &clients[0],
        "/sem/eleven/leases",
    );
}

#[test]
fn at_the_limit_a_timed_acquire_gives_none_until_a_lease_returns() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let sem = InterProcessSemaphoreV2::new(&client, "/sem/limit", 2).unwrap();
    let held = sem.acquire_many(2).unwrap();
    assert!(sem
        .acquire_timeout(Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert!(sem
        .acquire_many_timeout(2, Duration::from_millis(300))
        .unwrap()
        .is_none());
    assert_eq!(
        sem.participant_nodes().unwrap().len(),
        2,
        "timed-out attempts left nothing"
    );
    assert!(matches!(
        sem.acquire_many(3),
        Err(Error::InvalidArgument(_))
    ));
    let mut held = held.into_iter();
    held.next().unwrap().return_lease().unwrap();
    let lease = sem
        .acquire_timeout(patience())
        .unwrap()
        .expect("a lease came back");
    assert!(lease.fencing_token() > 0);
    drop(lease);
    drop(held);
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/sem/limit/leases",
    );
}

#[test]
fn a_waiter_whose_lease_node_is_deleted_recreates_it_and_acquires() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let sem = InterProcessSemaphoreV2::new(&client, "/sem/vanish", 1).unwrap();
    let held = sem.acquire().unwrap();
    let waiter = {
        let c = session_client(&server);
        thread::spawn(move || {
            let sem = InterProcessSemaphoreV2::new(&c, "/sem/vanish", 1).unwrap();
            let lease = sem.acquire_timeout(patience()).unwrap().expect("acquired");
            lease.return_lease().unwrap();
        })
    };
    wait_for("the waiter's lease node", || {
        sem.participant_nodes().unwrap().len() == 2
    });
    let theirs = sem.participant_nodes().unwrap()[1].clone();
    client.delete(&theirs).unwrap();
    held.return_lease().unwrap();
    waiter.join().unwrap();
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/sem/vanish/leases",
    );
}

#[test]
fn a_closed_holder_frees_its_lease() {
    let server = TestingServer::start().unwrap();
    let holder = session_client(&server);
    let sem = InterProcessSemaphoreV2::new(&holder, "/sem/closed", 1).unwrap();
    let lease = sem.acquire().unwrap();
    std::mem::forget(lease); // the process "dies" holding it
    holder.close();
    let client = session_client(&server);
    let sem = InterProcessSemaphoreV2::new(&client, "/sem/closed", 1).unwrap();
    assert!(sem.acquire_timeout(patience()).unwrap().is_some());
}

#[test]
fn everyone_keeps_acquiring_across_a_server_restart() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let gauge = Arc::new(Gauge::default());
    let clients: Vec<Client> = (0..3).map(|_| session_client(&server)).collect();
    let threads: Vec<_> = (0..10)
        .map(|i| {
            let (client, done, gauge) = (clients[i % 3].clone(), done.clone(), gauge.clone());
            thread::spawn(move || {
                let sem = InterProcessSemaphoreV2::new(&client, "/sem/restart", 3).unwrap();
                for _ in 0..15 {
                    let lease = loop {
                        match sem.acquire_timeout(patience()) {
                            Ok(Some(lease)) => break lease,
                            Ok(None) => panic!("no lease within the patience"),
                            // The retry policy gave up during the restart: ask again.
                            Err(Error::ConnectionLoss) => continue,
                            Err(e) => panic!("{e}"),
                        }
                    };
                    gauge.enter(1);
                    thread::sleep(Duration::from_millis(5));
                    gauge.leave(1);
                    let _ = lease.return_lease();
                }
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    server.restart().unwrap();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(done.load(Ordering::SeqCst), 10);
    assert!(gauge.max.load(Ordering::SeqCst) <= 3);
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &clients[0],
        "/sem/restart/leases",
    );
}

#[test]
fn semaphore_mutex_is_not_reentrant_and_releases_from_any_thread() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let m = Arc::new(InterProcessSemaphoreMutex::new(&client, "/sem/mutex").unwrap());
    assert_eq!(m.release(), Err(Error::NotAcquired));
    m.acquire().unwrap();
    assert!(
        !m.acquire_timeout(Duration::from_millis(300)).unwrap(),
        "not re-entrant"
    );
    let other = m.clone();
    thread::spawn(move || other.release())
        .join()
        .unwrap()
        .unwrap();
    assert!(!m.is_acquired_in_this_process());
    let guard = m.try_lock_for(patience()).unwrap().expect("free again");
    assert!(guard.fencing_token() > 0);
    drop(guard);
    assert_eq!(m.release(), Err(Error::NotAcquired));
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/sem/mutex/leases",
    );
}

/// The semaphore mutex's guards are `Send` (its hold is the object's lease, not a thread's):
/// taken here, released on another thread; its health events name the lease's node and token.
#[test]
fn a_semaphore_mutex_guard_moves_to_another_thread_and_its_health_events_name_the_hold() {
    fn is_send<T: Send>(_: &T) {}
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let m = Arc::new(InterProcessSemaphoreMutex::new(&client, "/sem/guard").unwrap());
    m.set_node_data(b"host-a").unwrap();
    let events = m.health_events();
    let (seen_tx, seen) = crossbeam_channel::unbounded();
    let removed = m.on_health(|_| panic!("a removed callback was called"));
    assert!(m.remove_health_listener(removed));
    m.on_health(move |e| {
        let _ = seen_tx.send(e);
    });

    let guard = m.lock_arc().unwrap();
    is_send(&guard);
    let node = m.lock_node().expect("held");
    let token = guard.fencing_token();
    assert_eq!(client.data(&node).unwrap().0, b"host-a");
    let released = thread::spawn(move || guard.release()).join().unwrap();
    released.unwrap();
    assert!(!m.is_acquired_in_this_process());
    assert!(
        client.exists(&node).unwrap().is_none(),
        "released by the other thread"
    );

    let guard = m.lock().unwrap();
    let (node, token2) = (m.lock_node().unwrap(), guard.fencing_token());
    assert!(token2 > token);
    thread::scope(|s| {
        s.spawn(move || drop(guard));
    });
    wait_for("the dropped guard's node to go", || {
        client.exists(&node).unwrap().is_none()
    });

    let lease_holder = m.lock().unwrap();
    let node = m.lock_node().unwrap();
    let token3 = lease_holder.fencing_token();
    let admin = session_client(&server);
    admin.delete(&node).unwrap();
    let e = events.recv_timeout(patience()).expect("a Lost event");
    assert_eq!(e, zklock::LockHealth::Lost);
    assert_eq!((e.node.as_str(), e.fencing_token), (node.as_str(), token3));
    let e = seen.recv_timeout(patience()).expect("the callback's event");
    assert_eq!(e.node, node);
    assert_eq!(lease_holder.release(), Err(Error::LockLost));
}

#[test]
fn raising_the_shared_count_lets_a_waiting_acquire_finish() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let count = zklock::SharedCount::new(&client, "/sem/count", 1).unwrap();
    let sem = InterProcessSemaphoreV2::with_shared_count(&client, "/sem/shared", &count).unwrap();
    assert_eq!(sem.max_leases().unwrap(), 1);
    let held = sem.acquire().unwrap();
    let waiter = {
        let c = session_client(&server);
        thread::spawn(move || {
            let count = zklock::SharedCount::new(&c, "/sem/count", 1).unwrap();
            let sem =
                InterProcessSemaphoreV2::with_shared_count(&c, "/sem/shared", &count).unwrap();
            sem.acquire_timeout(patience())
                .unwrap()
                .expect("a second lease")
                .return_lease()
        })
    };
    wait_for("the waiter to queue", || {
        sem.participant_nodes().unwrap().len() == 2
    });
    count.set_count(2).unwrap();
    assert_eq!(count.count().unwrap(), 2);
    waiter.join().unwrap().unwrap();
    assert_eq!(
        held.health(),
        zklock::LockHealth::Held,
        "the first lease was kept throughout"
    );
    held.return_lease().unwrap();
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/sem/shared/leases",
    );
}
