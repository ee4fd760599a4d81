//! InterProcessMutex against a real ZooKeeper: exclusion, fairness, re-entrancy, health,
//! fencing tokens, faults.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use zklock::testing::{expire_session, FaultProxy, TestingCluster, TestingServer};
use zklock::zookeeper::UnfairDriver;
use zklock::{Client, Error, InterProcessMutex, LockHealth};

/// Counts entries and flags any overlap of two holders.
#[derive(Default)]
struct Exclusion {
    inside: AtomicBool,
    overlaps: AtomicU64,
    count: Mutex<u64>,
}

impl Exclusion {
    fn critical_section(&self) {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        // A read-modify-write that loses increments if two holders interleave.
        let seen = *self.count.lock().unwrap();
        thread::yield_now();
        *self.count.lock().unwrap() = seen + 1;
        self.inside.store(false, Ordering::SeqCst);
    }
}

fn session_client(server: &str) -> Client {
    client(server, Duration::from_secs(20))
}

#[test]
fn eight_clients_exclude_each_other() {
    let server = TestingServer::start().unwrap();
    let shared = Arc::new(Exclusion::default());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (cs, shared) = (server.connect_string(), shared.clone());
            thread::spawn(move || {
                let client = session_client(&cs);
                let mutex = InterProcessMutex::new(&client, "/locks/x").unwrap();
                for _ in 0..200 {
                    let guard = mutex.lock().unwrap();
                    shared.critical_section();
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(shared.overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(*shared.count.lock().unwrap(), 1600);
    let client = session_client(&server.connect_string());
    assert_clean(|| server.four_letter("wchc").unwrap(), &client, "/locks/x");
}

/// Calls, waits and releases work from a thread with a small (64 KiB) stack, debug build
/// included: the wire client's session task is never polled on the caller's stack (a version
/// that did overflowed such a thread).
#[test]
fn a_thread_with_a_small_stack_can_wait_for_and_release_a_lock() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server.connect_string());
    let mutex = Arc::new(InterProcessMutex::new(&client, "/locks/small").unwrap());
    let holder = mutex.lock().unwrap();
    let small = thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn({
            let (client, mutex) = (client.clone(), mutex.clone());
            move || {
                client.create("/small").call().unwrap();
                let guard = mutex.lock().unwrap();
                drop(guard);
                for _ in 0..20 {
                    mutex.acquire().unwrap();
                    mutex.release().unwrap();
                }
            }
        })
        .unwrap();
    // The small thread waits behind us, then takes the lock once we let go.
    wait_for("the small thread to queue", || {
        mutex.participant_nodes().unwrap().len() == 2
    });
    holder.release().unwrap();
    small.join().unwrap();
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/small",
    );
}

#[test]
fn eight_threads_sharing_one_client_and_one_mutex_exclude_each_other() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server.connect_string());
    let mutex = Arc::new(InterProcessMutex::new(&client, "/locks/shared").unwrap());
    let shared = Arc::new(Exclusion::default());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (mutex, shared) = (mutex.clone(), shared.clone());
            thread::spawn(move || {
                for _ in 0..200 {
                    mutex.acquire().unwrap();
                    assert!(mutex.is_owned_by_current_thread());
                    shared.critical_section();
                    mutex.release().unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(shared.overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(*shared.count.lock().unwrap(), 1600);
    assert!(!mutex.is_acquired_in_this_process());
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/shared",
    );
}

/// Queues `n` waiters behind a holder one at a time (each after the previous one's node is
/// visible), releases, and returns (queue order, grant order) as waiter indices.
fn queue_then_drain(
    server: &TestingServer,
    path: &str,
    n: usize,
    unfair: bool,
) -> (Vec<usize>, Vec<usize>) {
    let holder_client = session_client(&server.connect_string());
    let holder = InterProcessMutex::new(&holder_client, path).unwrap();
    holder.acquire().unwrap();
    let grants = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..n {
        let (cs, path, grants) = (server.connect_string(), path.to_owned(), grants.clone());
        threads.push(thread::spawn(move || {
            let client = session_client(&cs);
            let mutex = if unfair {
                InterProcessMutex::with_driver(&client, &path, UnfairDriver).unwrap()
            } else {
                InterProcessMutex::new(&client, &path).unwrap()
            };
            mutex.set_node_data(format!("{i}").as_bytes()).unwrap();
            mutex.acquire().unwrap();
            grants.lock().unwrap().push(i);
            mutex.release().unwrap();
        }));
        wait_for("the waiter's node", || {
            holder.participant_nodes().unwrap().len() == i + 2
        });
    }
    let nodes = holder.participant_nodes().unwrap();
    let queue: Vec<usize> = nodes[1..]
        .iter()
        .map(|node| {
            let (data, _) = holder_client.data(node).unwrap();
            String::from_utf8(data).unwrap().parse().unwrap()
        })
        .collect();
    holder.release().unwrap();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_clean(|| server.four_letter("wchc").unwrap(), &holder_client, path);
    let grants = grants.lock().unwrap().clone();
    (queue, grants)
}

#[test]
fn standard_driver_grants_in_queue_order() {
    let server = TestingServer::start().unwrap();
    let (queue, grants) = queue_then_drain(&server, "/locks/fifo", 6, false);
    assert_eq!(
        queue,
        (0..6).collect::<Vec<_>>(),
        "waiters queued in the order they asked"
    );
    assert_eq!(grants, queue, "grant order must equal queue order");
}

#[test]
fn unfair_driver_grants_out_of_queue_order() {
    let server = TestingServer::start().unwrap();
    let mut orders = Vec::new();
    for round in 0..5 {
        let path = format!("/locks/unfair-{round}");
        // Waiters ask in order 0..6; the unfair driver sorts their nodes by random digits, so
        // the grant order follows that random sort instead of the order of asking.
        let (sorted_nodes, grants) = queue_then_drain(&server, &path, 6, true);
        assert_eq!(grants, sorted_nodes, "grants follow the driver's sort");
        let mut everyone = grants.clone();
        everyone.sort();
        let asked: Vec<usize> = (0..6).collect();
        assert_eq!(everyone, asked, "everyone got the lock once");
        if grants != asked {
            return;
        }
        orders.push(grants);
    }
    panic!("five rounds of six waiters were all granted in the order they asked: {orders:?}");
}

#[test]
fn reentrant_per_thread_node_removed_at_the_last_release() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server.connect_string());
    let mutex = Arc::new(InterProcessMutex::new(&client, "/locks/re").unwrap());
    mutex.acquire().unwrap();
    mutex.acquire().unwrap();
    assert!(mutex.acquire_timeout(Duration::from_secs(5)).unwrap());
    assert_eq!(
        client.children("/locks/re").unwrap().len(),
        1,
        "one node for nested holds"
    );
    let token = mutex.fencing_token().unwrap();
    let other = {
        let mutex = mutex.clone();
        thread::spawn(move || {
            assert_eq!(mutex.release(), Err(Error::NotOwner));
            assert!(!mutex.is_owned_by_current_thread());
            assert!(mutex.is_acquired_in_this_process());
        })
    };
    other.join().unwrap();
    mutex.release().unwrap();
    mutex.release().unwrap();
    assert_eq!(client.children("/locks/re").unwrap().len(), 1);
    assert_eq!(
        mutex.fencing_token(),
        Some(token),
        "re-entrant holds keep the token"
    );
    mutex.release().unwrap();
    // The empty container may already be reaped by the server.
    assert_eq!(children_left(&client, "/locks/re"), Ok(vec![]));
    assert_eq!(mutex.release(), Err(Error::NotOwner));
    assert_clean(|| server.four_letter("wchc").unwrap(), &client, "/locks/re");
}

#[test]
fn timed_acquire_returns_false_and_leaves_no_node() {
    let server = TestingServer::start().unwrap();
    let holder_client = session_client(&server.connect_string());
    let holder = InterProcessMutex::new(&holder_client, "/locks/t").unwrap();
    let _held = holder.lock().unwrap();
    let client = session_client(&server.connect_string());
    let mutex = InterProcessMutex::new(&client, "/locks/t").unwrap();
    assert!(!mutex.acquire_timeout(Duration::from_millis(300)).unwrap());
    assert!(mutex
        .try_lock_for(Duration::from_millis(300))
        .unwrap()
        .is_none());
    // A zero timeout is one attempt without waiting (it used to be refused).
    assert!(!mutex.acquire_timeout(Duration::ZERO).unwrap());
    wait_for("the timed-out nodes to go", || {
        client.children("/locks/t").unwrap().len() == 1
    });
    let session = client.session_id().unwrap();
    wait_for("the timed-out waiter's watches to go", || {
        watches_of(&server.four_letter("wchc").unwrap(), session).is_empty()
    });
}

#[test]
fn participants_holder_first_and_node_data_round_trip() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server.connect_string());
    let holder = InterProcessMutex::new(&client, "/locks/p").unwrap();
    holder.set_node_data(b"holder").unwrap();
    let _g = holder.lock().unwrap();
    let waiter_client = session_client(&server.connect_string());
    let waiter = Arc::new(InterProcessMutex::new(&waiter_client, "/locks/p").unwrap());
    let t = {
        let waiter = waiter.clone();
        thread::spawn(move || waiter.try_lock_for(patience()).unwrap().is_some())
    };
    wait_for("two participants", || {
        holder.participant_nodes().unwrap().len() == 2
    });
    let nodes = holder.participant_nodes().unwrap();
    assert_eq!(Some(nodes[0].clone()), holder.lock_node());
    let name = nodes[0].rsplit('/').next().unwrap();
    assert!(
        name.starts_with("_c_") && name.contains("-lock-"),
        "Curator's layout: {name}"
    );
    assert_eq!(client.data(&nodes[0]).unwrap().0, b"holder");
    let default = String::from_utf8(client.data(&nodes[1]).unwrap().0).unwrap();
    assert!(
        default.parse::<std::net::IpAddr>().is_ok(),
        "default data is the host IP: {default}"
    );
    drop(_g);
    assert!(t.join().unwrap());
}

/// kazoo's `contenders()` on Curator's layout: the node data of the holder, then of the
/// waiters in the order they queued, and the next one first once the holder goes.
#[test]
fn contenders_list_the_holder_then_the_waiters_in_queue_order() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server.connect_string());
    let path = "/locks/contenders";
    let holder = InterProcessMutex::new(&client, path).unwrap();
    holder.set_node_data(b"holder").unwrap();
    let held = holder.lock().unwrap();
    // Names that do not sort in queue order, so only the queue can order them.
    let waiters: Vec<_> = ["next", "last"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mutex = InterProcessMutex::new(&client, path).unwrap();
            mutex.set_node_data(name.as_bytes()).unwrap();
            let (in_tx, in_rx) = crossbeam_channel::unbounded();
            let (out_tx, out_rx) = crossbeam_channel::unbounded::<()>();
            let t = thread::spawn(move || {
                let g = mutex.lock().unwrap();
                in_tx.send(()).unwrap();
                out_rx.recv().unwrap();
                g.release().unwrap();
            });
            wait_for(name, || holder.participant_nodes().unwrap().len() == i + 2);
            (t, in_rx, out_tx)
        })
        .collect();
    assert_eq!(holder.contenders().unwrap(), ["holder", "next", "last"]);
    held.release().unwrap();
    let (_, first_in, first_out) = &waiters[0];
    first_in.recv_timeout(patience()).expect("next gets in");
    assert_eq!(holder.contenders().unwrap(), ["next", "last"]);
    first_out.send(()).unwrap();
    let (_, second_in, second_out) = &waiters[1];
    second_in.recv_timeout(patience()).expect("last gets in");
    assert_eq!(holder.contenders().unwrap(), ["last"]);
    second_out.send(()).unwrap();
    for (t, _, _) in waiters {
        t.join().unwrap();
    }
    wait_for("no contenders", || holder.contenders().unwrap().is_empty());
}

#[test]
fn expired_holder_is_told_lost_and_a_waiter_takes_over_with_a_higher_token() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let a_client = session_client(&server.connect_string());
    let a = InterProcessMutex::new(&a_client, "/locks/exp").unwrap();
    let events = a.health_events();
    let (cb_tx, cb_rx) = crossbeam_channel::unbounded();
    a.on_health(move |h| {
        let _ = cb_tx.send((h, thread::current().name().map(String::from)));
    });
    a.acquire().unwrap();
    let a_token = a.fencing_token().unwrap();
    assert_eq!(a.health(), Some(LockHealth::Held));

    let b_client = session_client(&server.connect_string());
    let b = Arc::new(InterProcessMutex::new(&b_client, "/locks/exp").unwrap());
    let waiter = {
        let b = b.clone();
        thread::spawn(move || {
            b.acquire().unwrap();
            let token = b.fencing_token().unwrap();
            b.release().unwrap();
            token
        })
    };
    wait_for("the waiter to queue", || {
        a.participant_nodes().unwrap().len() == 2
    });
    expire_session(&a_client).unwrap();
    loop {
        let h = events.recv_timeout(patience()).expect("health change");
        if h == LockHealth::Lost {
            break;
        }
    }
    let (h, thread_name) = cb_rx.recv_timeout(patience()).unwrap();
    assert!(matches!(h.health, LockHealth::Lost | LockHealth::Suspended));
    assert_eq!(h.fencing_token, a_token);
    assert!(thread_name.unwrap_or_default().starts_with("zklock-watch-"));
    assert_eq!(a.health(), Some(LockHealth::Lost));
    let b_token = waiter.join().unwrap();
    assert!(
        b_token > a_token,
        "fencing tokens must rise: {a_token} then {b_token}"
    );
    assert_eq!(a.release(), Err(Error::LockLost));
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &b_client,
        "/locks/exp",
    );
}

#[test]
fn a_waiter_still_acquires_after_a_server_restart() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let a_client = session_client(&server.connect_string());
    let a = InterProcessMutex::new(&a_client, "/locks/rs").unwrap();
    let events = a.health_events();
    a.acquire().unwrap();
    let b_client = session_client(&server.connect_string());
    let b = Arc::new(InterProcessMutex::new(&b_client, "/locks/rs").unwrap());
    let waiter = {
        let b = b.clone();
        thread::spawn(move || {
            b.acquire().unwrap();
            b.release().unwrap();
        })
    };
    wait_for("the waiter to queue", || {
        a.participant_nodes().unwrap().len() == 2
    });
    server.restart().unwrap();
    assert_eq!(
        events.recv_timeout(patience()).unwrap(),
        LockHealth::Suspended
    );
    assert_eq!(events.recv_timeout(patience()).unwrap(), LockHealth::Held);
    a.release().unwrap();
    waiter.join().unwrap();
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &a_client,
        "/locks/rs",
    );
}

#[test]
fn leader_killed_during_contention_keeps_exclusion_and_sessions() {
    init_logging();
    let mut cluster = TestingCluster::start(3).unwrap();
    let shared = Arc::new(Exclusion::default());
    let clients: Vec<Client> = (0..3)
        .map(|_| session_client(&cluster.connect_string()))
        .collect();
    let sessions: Vec<_> = clients.iter().map(|c| c.session_id().unwrap()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let rounds: Arc<Mutex<HashMap<usize, u64>>> = Arc::default();
    let threads: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, client)| {
            let (client, shared, stop, rounds) =
                (client.clone(), shared.clone(), stop.clone(), rounds.clone());
            thread::spawn(move || {
                let mutex = InterProcessMutex::new(&client, "/locks/ha").unwrap();
                while !stop.load(Ordering::SeqCst) {
                    let guard = mutex.lock().unwrap();
                    shared.critical_section();
                    thread::sleep(Duration::from_millis(2));
                    let _ = guard.release();
                    *rounds.lock().unwrap().entry(i).or_default() += 1;
                }
            })
        })
        .collect();
    wait_for("some contention", || *shared.count.lock().unwrap() > 30);
    let leader = cluster.wait_for_leader(patience()).unwrap();
    cluster.kill(leader).unwrap();
    let before = *shared.count.lock().unwrap();
    wait_for("contention to resume", || {
        *shared.count.lock().unwrap() > before + 30
    });
    stop.store(true, Ordering::SeqCst);
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(shared.overlaps.load(Ordering::SeqCst), 0);
    let now: Vec<_> = clients.iter().map(|c| c.session_id().unwrap()).collect();
    assert_eq!(now, sessions, "sessions must survive a leader failover");
    assert!(
        rounds.lock().unwrap().values().all(|n| *n > 0),
        "{:?}",
        rounds.lock().unwrap()
    );
}

#[test]
fn holder_cut_off_past_its_session_goes_suspended_then_lost_while_the_server_is_down() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(3));
    let mutex = InterProcessMutex::new(&client, "/locks/cut").unwrap();
    let events = mutex.health_events();
    mutex.acquire().unwrap();
    server.stop().unwrap();
    assert_eq!(
        events.recv_timeout(patience()).unwrap(),
        LockHealth::Suspended
    );
    assert_eq!(events.recv_timeout(patience()).unwrap(), LockHealth::Lost);
    assert!(
        server.pid().is_none(),
        "Lost must come while the server is still down"
    );
    server.restart().unwrap();
    assert_eq!(mutex.release(), Err(Error::LockLost));
    // The Client has a new session and the lock works again.
    let guard = mutex.try_lock_for(patience()).unwrap().expect("lock again");
    assert_eq!(guard.health(), LockHealth::Held);
    drop(guard);
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/cut",
    );
}

#[test]
fn unfair_driver_still_excludes_newcomers_that_sort_ahead_of_the_holder() {
    let server = TestingServer::start().unwrap();
    let shared = Arc::new(Exclusion::default());
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (cs, shared) = (server.connect_string(), shared.clone());
            thread::spawn(move || {
                let client = session_client(&cs);
                let mutex =
                    InterProcessMutex::with_driver(&client, "/locks/unfair-x", UnfairDriver)
                        .unwrap();
                let mut last_token = 0;
                for _ in 0..60 {
                    let guard = mutex.lock().unwrap();
                    shared.critical_section();
                    let token = guard.fencing_token();
                    assert!(token > last_token, "tokens rise: {last_token} then {token}");
                    last_token = token;
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(shared.overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(*shared.count.lock().unwrap(), 360);
    let client = session_client(&server.connect_string());
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/unfair-x",
    );
}

/// Two holds in one process (two lock objects on one Client): each event names its own hold's
/// node and token; a removed callback is not called.
#[test]
fn health_events_name_their_hold_and_a_removed_callback_is_not_called() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let holder = session_client(&server.connect_string());
    let mutex = Arc::new(InterProcessMutex::new(&holder, "/locks/events-a").unwrap());
    let other = Arc::new(InterProcessMutex::new(&holder, "/locks/events-b").unwrap());
    let events = mutex.health_events();
    let other_events = other.health_events();
    let (kept_tx, kept) = crossbeam_channel::unbounded();
    let (removed_tx, removed) = crossbeam_channel::unbounded();
    mutex.on_health(move |e| {
        let _ = kept_tx.send(e);
    });
    let id = mutex.on_health(move |e| {
        let _ = removed_tx.send(e);
    });
    assert!(mutex.remove_health_listener(id));
    assert!(!mutex.remove_health_listener(id));
    let a = mutex.lock().unwrap();
    let b = other.lock().unwrap();
    let (a_node, a_token) = (mutex.lock_node().unwrap(), a.fencing_token());
    let (b_node, b_token) = (other.lock_node().unwrap(), b.fencing_token());
    // Both holds are lost: their nodes are deleted by someone else.
    let admin = session_client(&server.connect_string());
    admin.delete(&b_node).unwrap();
    admin.delete(&a_node).unwrap();
    let e = events.recv_timeout(patience()).unwrap();
    assert_eq!(e, LockHealth::Lost);
    assert_eq!(
        (e.node.as_str(), e.fencing_token),
        (a_node.as_str(), a_token)
    );
    let e = other_events.recv_timeout(patience()).unwrap();
    assert_eq!(
        (e.node.as_str(), e.fencing_token),
        (b_node.as_str(), b_token)
    );
    let e = kept.recv_timeout(patience()).unwrap();
    assert_eq!(e.node, a_node);
    assert!(removed.recv_timeout(Duration::from_millis(300)).is_err());
    drop((a, b));
}

/// Clones of a mutex share it and its per-thread holds, as the read-write halves do.
#[test]
fn clones_share_the_mutex_and_its_holds() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server.connect_string());
    let mutex = InterProcessMutex::new(&client, "/locks/clone").unwrap();
    let clone = mutex.clone();
    let guard = mutex.lock().unwrap();
    assert!(
        clone.is_owned_by_current_thread(),
        "a clone sees this thread's hold"
    );
    assert!(
        clone.try_lock().unwrap().is_some(),
        "re-entrant through the clone"
    );
    let other_thread = thread::spawn(move || clone.try_lock().unwrap().is_none());
    assert!(
        other_thread.join().unwrap(),
        "another thread waits like any contender"
    );
    drop(guard);
    assert!(!mutex.is_acquired_in_this_process());
}

/// A waiter granted the moment the holder ahead of it goes (without listing the queue again)
/// is kept from the read that confirmed its node is still there: deleting that node reads Lost,
/// and nothing stays watched after the release.
#[test]
fn a_waiter_granted_when_its_predecessor_goes_is_kept_from_its_first_read() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let cs = server.connect_string();
    let path = "/locks/fast-path";
    let (a, b) = (session_client(&cs), session_client(&cs));
    let first = InterProcessMutex::new(&a, path).unwrap();
    let second = Arc::new(InterProcessMutex::new(&b, path).unwrap());
    let events = second.health_events();
    first.acquire().unwrap();
    let (granted_tx, granted) = crossbeam_channel::bounded(1);
    let (release_tx, release) = crossbeam_channel::bounded::<()>(1);
    let waiter = {
        let second = second.clone();
        thread::spawn(move || {
            second.acquire().unwrap();
            granted_tx
                .send((second.lock_node().unwrap(), second.health()))
                .unwrap();
            release.recv().unwrap();
            second.release()
        })
    };
    wait_for("the waiter's node", || {
        first.participant_nodes().unwrap().len() == 2
    });
    first.release().unwrap();
    let (node, health) = granted.recv_timeout(patience()).unwrap();
    assert_eq!(health, Some(LockHealth::Held));
    let admin = session_client(&cs);
    admin.delete(&node).unwrap();
    let e = events.recv_timeout(patience()).unwrap();
    assert_eq!(
        (e.health, e.node.as_str()),
        (LockHealth::Lost, node.as_str())
    );
    release_tx.send(()).unwrap();
    assert!(matches!(waiter.join().unwrap(), Err(Error::LockLost)));
    assert_clean(|| server.four_letter("wchc").unwrap(), &admin, path);
}

/// A queue long enough for holders to mark their nodes (16 or more), of waiters that release
/// at once — half with `release()`, half by dropping their guard — drains in queue order, one
/// holder at a time, and leaves no node or watch.
#[test]
fn a_long_queue_of_waiters_that_release_at_once_drains_in_order_one_at_a_time() {
    const WAITERS: usize = 40;
    let server = TestingServer::start().unwrap();
    let path = "/locks/long-queue";
    let holder_client = session_client(&server.connect_string());
    let holder = InterProcessMutex::new(&holder_client, path).unwrap();
    holder.acquire().unwrap();
    let clients: Vec<Client> = (0..4)
        .map(|_| session_client(&server.connect_string()))
        .collect();
    let shared = Arc::new(Exclusion::default());
    let grants = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..WAITERS {
        let (client, shared, grants) = (clients[i % 4].clone(), shared.clone(), grants.clone());
        threads.push(thread::spawn(move || {
            let mutex = InterProcessMutex::new(&client, path).unwrap();
            if i % 2 == 0 {
                mutex.acquire().unwrap();
                shared.critical_section();
                grants.lock().unwrap().push(i);
                mutex.release().unwrap();
            } else {
                let _guard = mutex.lock().unwrap();
                shared.critical_section();
                grants.lock().unwrap().push(i);
            }
        }));
        wait_for("the waiter's node", || {
            holder.participant_nodes().unwrap().len() == i + 2
        });
    }
    holder.release().unwrap();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(shared.overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(*shared.count.lock().unwrap(), WAITERS as u64);
    assert_eq!(*grants.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    // The lock path is a container: once empty the server may delete it.
    wait_for(
        "the last guard's background delete",
        || match holder_client.children(path) {
            Ok(children) => children.is_empty(),
            Err(Error::NoNode(_)) => true,
            Err(e) => panic!("{e}"),
        },
    );
    assert_clean(|| server.four_letter("wchc").unwrap(), &holder_client, path);
}

/// Holds released within a few milliseconds start no keeper; one held longer, behind many of
/// them, is still kept: deleting its node reads Lost.
#[test]
fn a_hold_behind_many_short_ones_is_still_kept() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server.connect_string());
    let mutex = InterProcessMutex::new(&client, "/locks/short-then-long").unwrap();
    for _ in 0..50 {
        mutex.lock().unwrap().release().unwrap();
    }
    let events = mutex.health_events();
    let guard = mutex.lock().unwrap();
    let node = mutex.lock_node().unwrap();
    // Past the keeper's first look (5 ms), with margin for a loaded machine.
    thread::sleep(Duration::from_millis(200));
    let admin = session_client(&server.connect_string());
    admin.delete(&node).unwrap();
    let e = events.recv_timeout(patience()).unwrap();
    assert_eq!(
        (e.health, e.node.as_str()),
        (LockHealth::Lost, node.as_str())
    );
    assert_eq!(guard.health(), LockHealth::Lost);
    drop(guard);
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/short-then-long",
    );
}

/// Requests `proxy` forwarded to the server while `work` ran (pings and connects not counted),
/// each end taken once the count stopped moving: background work (keepers, deletes) included.
fn requests_of(proxy: &FaultProxy, work: impl FnOnce()) -> u64 {
    let settled = || {
        let mut last = proxy.stats().requests_forwarded;
        loop {
            thread::sleep(Duration::from_millis(300));
            let now = proxy.stats().requests_forwarded;
            if now == last {
                return now;
            }
            last = now;
        }
    };
    let before = settled();
    work();
    settled() - before
}

#[test]
fn a_first_acquisition_on_a_fresh_path_costs_at_most_one_request_more_than_a_warm_one() {
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    let client = session_client(&proxy.connect_string());
    // Plain nodes, never reaped: the warm path stays warm between its acquisitions.
    client.create("/orders").call().unwrap();
    client.create("/orders/warm").call().unwrap();
    let take_and_release = |path: &str| {
        let mutex = InterProcessMutex::new(&client, path).unwrap();
        mutex.acquire().unwrap();
        mutex.release().unwrap();
    };
    take_and_release("/orders/warm"); // the Client has now seen /orders and /orders/warm
    let warm = requests_of(&proxy, || take_and_release("/orders/warm"));
    let fresh = requests_of(&proxy, || take_and_release("/orders/1"));
    assert!(warm > 0, "the proxy counts requests");
    assert!(
        fresh <= warm + 1,
        "a fresh path took {fresh} requests, a warm one {warm}"
    );
    // Two levels missing: one request more per missing parent.
    let deeper = requests_of(&proxy, || take_and_release("/orders/2/items"));
    assert!(
        deeper <= warm + 2,
        "two missing parents took {deeper} requests, a warm path {warm}"
    );

    // The parents the Client saw are reaped once empty (they are containers); the next
    // acquisition on the path makes them again, and leaves no node behind.
    wait_for("the server to reap the fresh path", || {
        client.exists("/orders/2").unwrap().is_none()
    });
    let direct = session_client(&server.connect_string());
    let mutex = InterProcessMutex::new(&client, "/orders/2/items").unwrap();
    let guard = mutex.lock().unwrap();
    assert_eq!(direct.children("/orders/2/items").unwrap().len(), 1);
    let rival = InterProcessMutex::new(&direct, "/orders/2/items").unwrap();
    assert!(!rival.acquire_timeout(Duration::from_millis(200)).unwrap());
    guard.release().unwrap();
    assert!(rival.acquire_timeout(patience()).unwrap());
    rival.release().unwrap();
    wait_for("the path to be empty", || {
        direct
            .children("/orders/2/items")
            .map(|c| c.is_empty())
            .unwrap_or(true)
    });
}

#[test]
fn lost_replies_to_a_fresh_paths_creates_leave_one_node_that_is_adopted() {
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    let client = Client::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(30))
        .connection_timeout(Duration::from_secs(3))
        .connect()
        .unwrap();
    let direct = session_client(&server.connect_string());
    // The missing parent's create and the lock node's, sent in one round trip: both applied,
    // neither answered until the connection is reset.
    proxy.drop_replies_to(FaultProxy::CREATE_OPS, 2);
    let mutex = InterProcessMutex::new(&client, "/fresh/lost").unwrap();
    let (acquired, release) = std::sync::mpsc::channel();
    let (released_tx, released) = std::sync::mpsc::channel::<()>();
    let taker = thread::spawn(move || {
        mutex.acquire().unwrap();
        acquired.send(mutex.lock_node()).unwrap();
        released.recv().unwrap();
        mutex.release().unwrap();
    });
    wait_for("both create replies to be swallowed", || {
        proxy.stats().replies_dropped == 2
    });
    proxy.reset();
    let node = release.recv_timeout(patience()).expect("the lock is taken");
    let children = direct.children("/fresh/lost").unwrap();
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(node, Some(format!("/fresh/lost/{}", children[0])));
    released_tx.send(()).unwrap();
    taker.join().unwrap();
    wait_for("the node to go", || {
        direct
            .children("/fresh/lost")
            .map(|c| c.is_empty())
            .unwrap_or(true)
    });
}
