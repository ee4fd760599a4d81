//! Promises kept under a hostile read: what the docs say about `close()`, sizes and durations
//! holds for the arguments a careless or hostile caller would pass.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::{client, patience};
use zklock::testing::TestingServer;
use zklock::{Error, InterProcessMultiLock, InterProcessMutex, LockHealth};

/// `close()` ends the session even while a user's `Watch` is alive: the lock the Client held
/// is free at once for another Client (well before the 20 s session could expire), and the
/// watch returns `None`.
#[test]
fn close_ends_the_session_whatever_watches_are_alive() {
    let server = TestingServer::start().unwrap();
    let holder = client(&server.connect_string(), Duration::from_secs(20));
    let mutex = InterProcessMutex::new(&holder, "/hardening/close").unwrap();
    mutex.acquire().unwrap();
    holder.create("/watched").call().unwrap();
    let (_, _, watch) = holder.data_watch("/watched").unwrap();
    let (_, child_watch) = holder.children_watch("/watched").unwrap();

    holder.close();

    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send((watch.wait(), child_watch.wait()));
    });
    let ended = rx.recv_timeout(patience());
    assert!(
        matches!(ended, Ok((None, None))),
        "a Watch of a closed Client must return None: {ended:?}"
    );
    let other = client(&server.connect_string(), Duration::from_secs(20));
    let theirs = InterProcessMutex::new(&other, "/hardening/close").unwrap();
    // Less than the holder's session: only a closed session frees the lock this soon.
    let guard = theirs.try_lock_for(Duration::from_secs(10)).unwrap();
    assert!(
        guard.is_some(),
        "the closed Client's lock was still held: its session outlived close()"
    );
}

/// A write the server would refuse for its size (its packet limit is 1 MiB − 1 bytes for the
/// whole request) is refused before any I/O, with a clear error: the connection stays up and a
/// held lock stays `Held`.
#[test]
fn an_oversized_write_is_refused_before_any_io() {
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(20));
    let states = c.connection_states();
    let mutex = InterProcessMutex::new(&c, "/hardening/size").unwrap();
    let guard = mutex.lock().unwrap();
    c.create("/big").call().unwrap();
    // setData of "/big": 8 bytes of header, the path and the data with their lengths, and the
    // version: 24 + 4 + data. The largest that fits, as the server counts it, is written...
    let fits = 1024 * 1024 - 1 - 28;
    c.set_data("/big", &vec![7u8; fits]).unwrap();
    // ... and one byte more is refused, as is anything larger.
    for len in [fits + 1, 1024 * 1024 - 16, 1024 * 1024, 1024 * 1024 + 1] {
        let err = c.set_data("/big", &vec![7u8; len]).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(why) if why.contains("packet")),
            "{len} bytes: {err:?}"
        );
        let err = c
            .create("/big/child")
            .data(&vec![7u8; len])
            .call()
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument(_)),
            "{len} bytes: {err:?}"
        );
    }
    assert_eq!(guard.health(), LockHealth::Held);
    let seen: Vec<_> = states.try_iter().collect();
    assert!(
        seen.is_empty(),
        "connection states after the refusals: {seen:?}"
    );
    assert!(c.is_connected());
}

/// `Duration::MAX` means "no limit" in every call that takes a duration; nothing panics.
#[test]
fn duration_max_is_accepted_everywhere() {
    let server = TestingServer::start().unwrap();
    // A connection timeout bounds how soon a dead connection is noticed: "never" is refused,
    // with the reason, before any I/O.
    let refused = zklock::Client::builder(&server.connect_string())
        .connection_timeout(Duration::MAX)
        .connect()
        .unwrap_err();
    assert!(
        matches!(&refused, Error::InvalidArgument(why) if why.contains("connection timeout")),
        "{refused:?}"
    );
    let c = zklock::Client::builder(&server.connect_string())
        .session_timeout(Duration::MAX)
        .operation_timeout(Duration::MAX)
        .retry_policy(zklock::RetryNTimes::new(3, Duration::MAX).unwrap())
        .connect()
        .unwrap();
    assert!(c.block_until_connected(Duration::MAX));
    assert!(c.exists("/").unwrap().is_some());
    let mutex = InterProcessMutex::new(&c, "/hardening/max").unwrap();
    assert!(mutex.acquire_timeout(Duration::MAX).unwrap());
    mutex.release_timeout(Duration::MAX).unwrap();
    let guard = mutex.try_lock_for(Duration::MAX).unwrap().expect("free");
    drop(guard);
    let latch = zklock::LeaderLatch::new(&c, "/hardening/latch").unwrap();
    latch.start().unwrap();
    assert!(latch.await_leadership_timeout(Duration::MAX).unwrap());
    latch.close().unwrap();
}

/// A multi-lock that names one path twice takes it once (it would otherwise wait for itself),
/// and two multi-locks naming the same paths in opposite orders cannot deadlock each other.
#[test]
fn a_multi_lock_takes_duplicates_once_and_paths_in_one_order() {
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(20));
    let twice = InterProcessMultiLock::new(&c, &["/hardening/a", "/hardening/a"]).unwrap();
    assert!(
        twice.acquire_timeout(patience()).unwrap(),
        "a multi-lock over one path twice waited for itself"
    );
    twice.release().unwrap();

    let other = client(&server.connect_string(), Duration::from_secs(20));
    let ab = InterProcessMultiLock::new(&c, &["/hardening/a", "/hardening/b"]).unwrap();
    let ba = InterProcessMultiLock::new(&other, &["/hardening/b", "/hardening/a"]).unwrap();
    let rounds = 20;
    thread::scope(|s| {
        for lock in [&ab, &ba] {
            s.spawn(move || {
                for _ in 0..rounds {
                    assert!(
                        lock.acquire_timeout(patience()).unwrap(),
                        "deadlocked on opposite orders"
                    );
                    lock.release().unwrap();
                }
            });
        }
    });
}

/// A thread whose hold was lost (its node deleted by someone else) does not get `Ok` for
/// entering it again: it hears `LockLost`, and the release says so too.
#[test]
fn reentering_a_lost_hold_is_an_error() {
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(20));
    let mutex = InterProcessMutex::new(&c, "/hardening/lost").unwrap();
    mutex.acquire().unwrap();
    let node = mutex.lock_node().expect("held");
    let other = client(&server.connect_string(), Duration::from_secs(20));
    other.delete(&node).unwrap();
    common::wait_for("the hold to read Lost", || {
        mutex.health() == Some(LockHealth::Lost)
    });
    let err = mutex.acquire().unwrap_err();
    assert!(matches!(err, Error::LockLost), "{err:?}");
    assert!(matches!(mutex.release(), Err(Error::LockLost)));
    // Released, the lock can be taken anew.
    assert!(mutex.try_lock().unwrap().is_some());
}

/// A listener runs on the Client's watcher thread, which delivers connection states and watch
/// events itself: a blocking receive there would wait for itself. Each kind returns at once.
#[test]
fn blocking_receives_in_a_listener_return_at_once() {
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(20));
    c.create("/listened").call().unwrap();
    let states = c.connection_states();
    let (_, _, watch) = c.data_watch("/listened").unwrap();
    let mutex = InterProcessMutex::new(&c, "/hardening/listener").unwrap();
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let mut once = Some((states, watch));
    mutex.on_health(move |event| {
        if event != LockHealth::Lost {
            return;
        }
        if let Some((states, watch)) = once.take() {
            let recv = states.recv().is_err();
            let timed = states.recv_timeout(Duration::from_secs(3600)).is_err();
            let iterated = states.iter().count();
            let waited = watch.wait();
            let waited_long = watch.wait_timeout(Duration::from_secs(3600));
            let _ = tx
                .lock()
                .unwrap()
                .send((recv, timed, iterated, waited, waited_long));
        }
    });
    mutex.acquire().unwrap();
    let other = client(&server.connect_string(), Duration::from_secs(20));
    other.delete(&mutex.lock_node().unwrap()).unwrap();
    let got = rx.recv_timeout(patience());
    assert!(
        matches!(got, Ok((true, true, 0, None, None))),
        "a blocking receive in a listener: {got:?}"
    );
}

/// A latch whose Client is closed under it ends: it no longer leads, waiting for leadership
/// says `Closed` at once, and its own close returns (it used to retry every 2 s forever).
#[test]
fn a_latch_ends_with_its_client() {
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(20));
    let latch = zklock::LeaderLatch::new(&c, "/hardening/closed-latch").unwrap();
    latch.start().unwrap();
    assert!(latch.await_leadership_timeout(patience()).unwrap());
    c.close();
    common::wait_for("the latch to give up leadership", || {
        !latch.has_leadership()
    });
    let (tx, rx) = mpsc::channel();
    let latch = std::sync::Arc::new(latch);
    let waiting = latch.clone();
    thread::spawn(move || {
        let _ = tx.send(waiting.await_leadership_timeout(Duration::from_secs(3600)));
    });
    let awaited = rx.recv_timeout(patience());
    assert!(
        matches!(awaited, Ok(Err(Error::Closed))),
        "awaiting leadership of a latch whose Client closed: {awaited:?}"
    );
    let _ = latch.close();
}

/// A guard is bound to the hold it was made for: once that hold was released through the lock
/// (and the lock taken again), the stale guard's drop releases nothing, its `release` says so,
/// and it reports the hold it had.
#[test]
fn a_stale_guard_releases_nothing() {
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(20));
    let m = zklock::InterProcessSemaphoreMutex::new(&c, "/hardening/stale").unwrap();
    let first = m.lock().unwrap();
    let first_token = first.fencing_token();
    m.release().unwrap(); // any thread may release a semaphore mutex
    let second = m.lock().unwrap();
    assert_ne!(second.fencing_token(), first_token);
    assert_eq!(first.fencing_token(), first_token);
    assert_eq!(first.health(), LockHealth::Lost);
    drop(first);
    assert!(
        m.is_acquired_in_this_process(),
        "the stale guard released the later hold"
    );
    assert_eq!(second.health(), LockHealth::Held);
    second.release().unwrap();

    let mutex = InterProcessMutex::new(&c, "/hardening/stale-mutex").unwrap();
    let old = mutex.lock().unwrap();
    mutex.release().unwrap();
    let new = mutex.lock().unwrap();
    assert!(matches!(old.release(), Err(Error::NotAcquired)));
    assert!(mutex.is_owned_by_current_thread());
    new.release().unwrap();
}

/// A call blocked on one thread when another thread closes the Client returns `Closed`: a
/// waiting acquire, and a plain call waiting for a connection that will not come back.
#[test]
fn close_from_another_thread_ends_blocked_calls() {
    let mut server = TestingServer::start().unwrap();
    let holder = client(&server.connect_string(), Duration::from_secs(20));
    let held = InterProcessMutex::new(&holder, "/hardening/blocked").unwrap();
    held.acquire().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(20));
    let waiting = InterProcessMutex::new(&c, "/hardening/blocked").unwrap();
    let (tx, rx) = mpsc::channel();
    thread::scope(|s| {
        s.spawn(|| {
            let _ = tx.send(waiting.acquire());
        });
        common::wait_for("the waiter to queue", || {
            holder.children("/hardening/blocked").unwrap().len() == 2
        });
        c.close();
        let got = rx.recv_timeout(patience());
        assert!(matches!(got, Ok(Err(Error::Closed))), "{got:?}");
    });

    // A call waiting out an outage: the server is gone, the retry policy would wait long.
    let c = zklock::Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(20))
        .retry_policy(zklock::RetryForever::new(Duration::from_millis(200)).unwrap())
        .connect()
        .unwrap();
    server.stop().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::scope(|s| {
        s.spawn(|| {
            let _ = tx.send(c.exists("/"));
        });
        thread::sleep(Duration::from_millis(300));
        c.close();
        let got = rx.recv_timeout(patience());
        assert!(matches!(got, Ok(Err(Error::Closed))), "{got:?}");
    });
    holder.close();
}
