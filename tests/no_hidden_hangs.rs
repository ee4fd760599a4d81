//! Every call bounded, every node cleaned up, try and cancel as users expect, against a real
//! server.

mod common;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::{Client, ConnectionState, Error, InterProcessMutex, InterProcessSemaphoreV2};

/// Runs `f` on a thread and waits (generously) for it to return: a call that blocks for a
/// minute or forever fails the test instead of hanging it.
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20) * timing())
        .unwrap_or_else(|_| panic!("{what} did not return"))
}

/// How many nodes are under `path`; a reaped container parent counts as none.
fn nodes(client: &Client, path: &str) -> Option<usize> {
    match client.children(path) {
        Ok(c) => Some(c.len()),
        Err(Error::NoNode(_)) => Some(0),
        Err(_) => None,
    }
}

#[test]
fn a_listener_may_add_listeners_and_an_acquire_from_it_fails_at_once() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(30));
    let mutex = Arc::new(InterProcessMutex::new(&client, "/locks/listener").unwrap());
    let (added_tx, added_rx) = crossbeam_channel::unbounded();
    let (acquired_tx, acquired_rx) = crossbeam_channel::unbounded();
    let once = Arc::new(Mutex::new(Some(added_tx)));
    {
        // Registers another listener from inside a listener (deadlocked the watcher thread).
        let c = client.clone();
        client.on_connection_state(move |_| {
            if let Some(tx) = once.lock().unwrap().take() {
                c.on_connection_state(move |s| {
                    let _ = tx.send(s);
                });
            }
        });
    }
    {
        // Blocks on a lock from inside a listener (waited for an event queued behind itself).
        let m = mutex.clone();
        client.on_connection_state(move |s| {
            if s == ConnectionState::Suspended {
                let _ = acquired_tx.send(m.acquire());
                let _ = acquired_tx.send(m.try_lock().map(|_| ()));
            }
        });
    }
    server.restart().unwrap();
    let from_listener = acquired_rx
        .recv_timeout(patience())
        .expect("the listener's acquire never returned");
    assert_eq!(from_listener, Err(Error::OnWatcherThread));
    assert!(
        acquired_rx.recv_timeout(patience()).is_ok(),
        "try_lock from a listener returns (it may fail while disconnected)"
    );
    // The listener added from a listener hears the later states.
    wait_for(
        "the listener added from a listener to hear Reconnected",
        || {
            added_rx
                .try_iter()
                .any(|s| s == ConnectionState::Reconnected)
        },
    );
    let c = client.clone();
    assert!(returns("block_until_connected", move || c
        .block_until_connected(Duration::from_secs(20))));
    // Watches still flow.
    client.create("/w").data(b"1").call().unwrap();
    let (_, _, watch) = client.data_watch("/w").unwrap();
    client.set_data("/w", b"2").unwrap();
    assert!(
        watch.wait_timeout(patience()).is_some(),
        "watch never fired"
    );
    let guard = mutex.lock().unwrap();
    guard.release().unwrap();
}

#[test]
fn a_guard_drop_returns_at_once_in_an_outage_and_its_node_goes_after() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(30));
    let mutex = Arc::new(InterProcessMutex::new(&client, "/locks/drop").unwrap());
    let (held_tx, held_rx) = crossbeam_channel::bounded(0);
    let (drop_tx, drop_rx) = crossbeam_channel::bounded::<()>(0);
    let holder = {
        let mutex = mutex.clone();
        thread::spawn(move || {
            let guard = mutex.lock().unwrap();
            held_tx.send(()).unwrap();
            drop_rx.recv().unwrap();
            drop(guard);
        })
    };
    held_rx.recv().unwrap();
    server.stop().unwrap();
    // Before: 65 s with the full retry budget in the foreground.
    drop_tx.send(()).unwrap();
    returns("dropping a guard with the server down", move || {
        holder.join().unwrap()
    });
    server.restart().unwrap();
    wait_for("the dropped guard's node to be deleted", || {
        nodes(&client, "/locks/drop") == Some(0)
    });
    // The Client's own drop returns at once too.
    server.stop().unwrap();
    returns("dropping the last Client with the server down", move || {
        drop(mutex);
        drop(client)
    });
}

#[test]
fn a_waiter_survives_four_outages_with_the_default_retry_policy() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let session = Duration::from_secs(40);
    // Each outage (2 s, then the server's restart) outlasts the connection timeout, so it
    // costs the waiter at least one retry (the default policy allows 3), and fewer retries
    // than the policy allows in one go: four waits of 3 s and the backoff between them, more
    // than a restart takes on a loaded machine.
    let connect = |s: &TestingServer| {
        Client::builder(&s.connect_string())
            .session_timeout(session)
            .connection_timeout(Duration::from_secs(3))
            .connect()
            .unwrap()
    };
    let holder_client = connect(&server);
    let waiter_client = connect(&server);
    let holder = InterProcessMutex::new(&holder_client, "/locks/long").unwrap();
    holder.acquire().unwrap();
    let waiter_view = waiter_client.clone();
    let waiter = thread::spawn(move || {
        let m = InterProcessMutex::new(&waiter_client, "/locks/long").unwrap();
        let got = m.acquire();
        if got.is_ok() {
            m.release().unwrap();
        }
        got
    });
    wait_for("the waiter to queue", || {
        nodes(&holder_client, "/locks/long") == Some(2)
    });
    for i in 0..4 {
        server.stop().unwrap();
        let down = std::time::Instant::now();
        thread::sleep(Duration::from_millis(2000));
        server.restart().unwrap();
        println!("outage {i}: {:?}", down.elapsed());
        // Each outage ends for both sessions before the next begins.
        for c in [&holder_client, &waiter_view] {
            assert!(
                c.block_until_connected(patience()),
                "outage {i}: a client did not reconnect"
            );
        }
        if waiter.is_finished() {
            let got = waiter.join().unwrap();
            panic!("outage {i} ended the wait: {got:?}");
        }
        // Separate outages: the waiter gets past its backoff sleep (1–2 s, then 2–4 s, then
        // 4–8 s with the default policy; a loaded machine may have it on its third) to a
        // round trip the server answers before the next one.
        thread::sleep(Duration::from_secs(12));
    }
    holder.release().unwrap();
    let got = returns("the waiter", move || waiter.join().unwrap());
    assert_eq!(got, Ok(()), "the waiter gave up");
}

#[test]
fn try_lock_takes_a_free_lock_and_leaves_nothing_on_a_held_one() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let a = client(&server.connect_string(), Duration::from_secs(30));
    let b = client(&server.connect_string(), Duration::from_secs(30));
    let ma = InterProcessMutex::new(&a, "/locks/try").unwrap();
    let mb = InterProcessMutex::new(&b, "/locks/try").unwrap();
    let guard = ma.try_lock().unwrap().expect("a free lock");
    assert!(mb.try_lock().unwrap().is_none());
    assert!(!mb.acquire_timeout(Duration::ZERO).unwrap());
    let until = std::time::Instant::now() + Duration::from_millis(1);
    assert!(mb.try_lock_until(until).unwrap().is_none());
    wait_for("only the holder's node", || {
        nodes(&a, "/locks/try") == Some(1)
    });
    drop(guard);
    wait_for("the lock to be free", || nodes(&a, "/locks/try") == Some(0));
    assert!(mb.acquire_timeout(Duration::ZERO).unwrap());
    mb.release().unwrap();
    let pool = InterProcessSemaphoreV2::new(&a, "/sem/try", 1).unwrap();
    let lease = pool.try_acquire().unwrap().expect("a free lease");
    assert!(pool.try_acquire().unwrap().is_none());
    lease.return_lease().unwrap();
}

#[test]
fn cancel_waiters_ends_a_blocked_acquire_and_deletes_its_node() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let a = client(&server.connect_string(), Duration::from_secs(30));
    let b = client(&server.connect_string(), Duration::from_secs(30));
    let holder = InterProcessMutex::new(&a, "/locks/cancel").unwrap();
    holder.acquire().unwrap();
    let waiting = Arc::new(InterProcessMutex::new(&b, "/locks/cancel").unwrap());
    let w = {
        let waiting = waiting.clone();
        thread::spawn(move || waiting.acquire())
    };
    wait_for("the waiter to queue", || {
        nodes(&a, "/locks/cancel") == Some(2)
    });
    waiting.cancel_waiters();
    let got = returns("the cancelled acquire", move || w.join().unwrap());
    assert_eq!(got, Err(Error::Cancelled));
    wait_for("the cancelled node to go", || {
        nodes(&a, "/locks/cancel") == Some(1)
    });
    // The object still works.
    holder.release().unwrap();
    assert!(waiting.acquire_timeout(patience()).unwrap());
    waiting.release().unwrap();
}

/// A create sent just before the server froze is applied when it thaws, long after the attempt
/// that sent it gave up: that node must still be found and deleted.
#[test]
fn a_create_applied_after_its_attempt_gave_up_leaves_no_node() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let path = "/locks/late-create";
    let holder = client(&server.connect_string(), Duration::from_secs(30));
    let held = InterProcessMutex::new(&holder, path).unwrap();
    held.acquire().unwrap();
    // The attempt's round trips are bounded by the operation timeout, not the connection's.
    let waiter = Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(30))
        .operation_timeout(Duration::from_millis(500))
        .connect()
        .unwrap();
    let mutex = InterProcessMutex::new(&waiter, path).unwrap();
    // Parents exist: the attempt's first request is its create.
    assert!(mutex.try_lock().unwrap().is_none());

    server.pause().unwrap();
    let attempt = returns("an attempt against a frozen server", move || {
        let r = mutex
            .try_lock_for(Duration::from_millis(300))
            .map(|g| g.is_some());
        (r, mutex)
    });
    assert_ne!(attempt.0, Ok(true), "acquired a held lock");
    thread::sleep(Duration::from_secs(2));
    server.resume().unwrap();

    wait_for("only the holder's node under the lock", || {
        nodes(&holder, path) == Some(1)
    });
    held.release().unwrap();
    wait_for("the lock path to be empty", || {
        nodes(&holder, path) == Some(0)
    });
    drop(attempt);
}
