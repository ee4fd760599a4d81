//! The `mem://` backend's own rules: sharing by store name, the controls, freezing, close.
//! The contract every backend keeps is checked by the conformance suite.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::core::error::Error;
use crate::core::health::LockHealth;
use crate::core::lock::Lock;
use crate::ConnectionState;

/// Far above any wait here on a loaded machine; the tests never assert a duration below it.
const PATIENCE: Duration = Duration::from_secs(20);

fn store() -> (MemClient, MemClient) {
    let a = MemClient::isolated();
    let b = MemClient::connect(a.store_name()).unwrap();
    (a, b)
}

/// Polls `f` until it holds or [`PATIENCE`] passes.
fn wait_for(what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < end, "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn clients_of_one_name_share_locks_and_other_names_do_not() {
    let (a, b) = store();
    let other = MemClient::isolated();
    let mine = MemMutex::new(&a, "x").unwrap();
    mine.acquire().unwrap();
    let theirs = MemMutex::new(&b, "x").unwrap();
    assert!(!std::thread::scope(|s| s
        .spawn(|| theirs.acquire_timeout(Duration::ZERO).unwrap())
        .join()
        .unwrap()));
    let elsewhere = MemMutex::new(&other, "x").unwrap();
    assert!(elsewhere.acquire_timeout(Duration::ZERO).unwrap());
    elsewhere.release().unwrap();
    mine.release().unwrap();
}

#[test]
fn a_store_is_freed_with_its_last_client() {
    let name = format!("freed-{}", store::next_id());
    let a = MemClient::connect(&name).unwrap();
    let m = MemMutex::new(&a, "x").unwrap();
    m.acquire().unwrap();
    let token = m.fencing_token().unwrap();
    drop(m);
    drop(a);
    let b = MemClient::connect(&name).unwrap();
    let m = MemMutex::new(&b, "x").unwrap();
    assert!(m.acquire_timeout(Duration::ZERO).unwrap(), "a fresh store");
    assert!(
        m.fencing_token().unwrap() > token,
        "tokens rise across stores"
    );
    m.release().unwrap();
}

#[test]
fn exclusion_and_tokens_under_contention() {
    let (a, b) = store();
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(parking_lot::Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for c in [&a, &b, &a, &b] {
            let lock = MemMutex::new(c, "contended").unwrap();
            let (inside, overlaps, tokens) = (&inside, &overlaps, &tokens);
            s.spawn(move || {
                for _ in 0..200 {
                    let guard = lock.lock().unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokens.lock().push(guard.fencing_token());
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    let tokens = tokens.lock();
    assert_eq!(tokens.len(), 800);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens rise in grant order"
    );
}

#[test]
fn suspend_restore_and_lose_a_clients_holds_with_events() {
    let (a, b) = store();
    let mutex = MemMutex::new(&a, "held").unwrap();
    let events = mutex.health_events();
    let states = a.connection_states();
    mutex.acquire().unwrap();
    assert_eq!(a.suspend_holds(), 1);
    assert_eq!(mutex.health(), Some(LockHealth::Suspended));
    let theirs = MemMutex::new(&b, "held").unwrap();
    let free = || {
        std::thread::scope(|s| {
            s.spawn(|| {
                let got = theirs.acquire_timeout(Duration::ZERO).unwrap();
                if got {
                    theirs.release().unwrap();
                }
                got
            })
            .join()
            .unwrap()
        })
    };
    assert!(!free(), "a suspended hold is still held");
    assert_eq!(a.restore_holds(), 1);
    assert_eq!(mutex.health(), Some(LockHealth::Held));
    assert_eq!(a.lose_holds(), 1);
    assert_eq!(mutex.health(), Some(LockHealth::Lost));
    assert!(free(), "a lost hold is freed at once");
    assert_eq!(mutex.release(), Err(Error::LockLost));
    let seen: Vec<LockHealth> = events.try_iter().map(|e| e.health).collect();
    assert_eq!(
        seen,
        [LockHealth::Suspended, LockHealth::Held, LockHealth::Lost]
    );
    let states: Vec<ConnectionState> = states.try_iter().collect();
    assert_eq!(
        states,
        [
            ConnectionState::Suspended,
            ConnectionState::Reconnected,
            ConnectionState::Lost,
            ConnectionState::Reconnected
        ]
    );
    assert!(
        mutex.acquire_timeout(Duration::ZERO).unwrap(),
        "a new session"
    );
    mutex.release().unwrap();
}

#[test]
fn one_lock_lost_leaves_the_others_held() {
    let client = MemClient::isolated();
    let (x, y) = (
        MemMutex::new(&client, "x").unwrap(),
        MemMutex::new(&client, "y").unwrap(),
    );
    x.acquire().unwrap();
    y.acquire().unwrap();
    assert_eq!(client.suspend_hold("x"), 1);
    assert_eq!(x.health(), Some(LockHealth::Suspended));
    assert_eq!(client.lose_hold("x"), 1);
    assert_eq!(x.health(), Some(LockHealth::Lost));
    assert_eq!(y.health(), Some(LockHealth::Held));
    assert_eq!(client.state(), ConnectionState::Connected);
    assert_eq!(x.release(), Err(Error::LockLost));
    y.release().unwrap();
}

#[test]
fn a_frozen_client_fails_within_its_bound_and_releases_at_the_thaw() {
    let a = MemClient::builder(&format!("frozen-{}", store::next_id()))
        .operation_timeout(Duration::from_millis(20))
        .connect()
        .unwrap();
    let b = MemClient::connect(a.store_name()).unwrap();
    let mine = MemMutex::new(&a, "f").unwrap();
    mine.acquire().unwrap();
    a.freeze();
    assert!(a.is_frozen() && !b.is_frozen());
    assert_eq!(
        mine.participants().map(|p| p.len()),
        Err(Error::ConnectionLoss)
    );
    assert_eq!(mine.release(), Err(Error::ConnectionLoss));
    let theirs = MemMutex::new(&b, "f").unwrap();
    assert!(
        !theirs.acquire_timeout(Duration::ZERO).unwrap(),
        "the release waits for the thaw"
    );
    a.unfreeze();
    assert!(
        theirs.acquire_timeout(PATIENCE).unwrap(),
        "released at the thaw"
    );
    theirs.release().unwrap();
}

#[test]
fn a_frozen_call_goes_on_when_thawed_in_time() {
    let client = MemClient::isolated();
    let mutex = MemMutex::new(&client, "thaw").unwrap();
    client.freeze_store();
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let got = mutex.acquire_timeout(PATIENCE);
            (got, mutex.release())
        });
        std::thread::sleep(Duration::from_millis(20));
        client.unfreeze_store();
        assert_eq!(t.join().unwrap(), (Ok(true), Ok(())));
    });
}

#[test]
fn close_ends_waiters_and_frees_holds() {
    let (a, b) = store();
    let held = MemMutex::new(&a, "c").unwrap();
    let waiting = MemMutex::new(&a, "d").unwrap();
    let other = MemMutex::new(&b, "d").unwrap();
    held.acquire().unwrap();
    other.acquire().unwrap();
    std::thread::scope(|s| {
        let t = s.spawn(|| waiting.acquire());
        wait_for("the waiter queued", || {
            other.participants().unwrap().len() == 2
        });
        a.close();
        assert_eq!(t.join().unwrap(), Err(Error::Closed));
    });
    assert_eq!(held.health(), Some(LockHealth::Lost));
    assert_eq!(held.release(), Err(Error::LockLost));
    assert_eq!(
        other.participants().unwrap().len(),
        1,
        "nothing left behind"
    );
    assert_eq!(waiting.acquire_timeout(Duration::ZERO), Err(Error::Closed));
    other.release().unwrap();
}

#[test]
fn cancel_ends_only_this_objects_waiters() {
    let (a, b) = store();
    let holder = MemMutex::new(&a, "k").unwrap();
    holder.acquire().unwrap();
    let (one, two) = (
        MemMutex::new(&b, "k").unwrap(),
        MemMutex::new(&b, "k").unwrap(),
    );
    std::thread::scope(|s| {
        let t1 = s.spawn(|| one.acquire());
        let t2 = s.spawn(|| two.acquire_timeout(PATIENCE));
        wait_for("both queued", || holder.participants().unwrap().len() == 3);
        one.cancel_waiters();
        assert_eq!(t1.join().unwrap(), Err(Error::Cancelled));
        holder.release().unwrap();
        assert_eq!(t2.join().unwrap(), Ok(true));
    });
}

#[test]
fn read_write_downgrade_and_no_upgrade() {
    let client = MemClient::isolated();
    let rw = MemReadWriteLock::new(&client, "rw").unwrap();
    rw.write_lock().acquire().unwrap();
    rw.read_lock().acquire().unwrap();
    rw.write_lock().release().unwrap();
    assert_eq!(rw.write_lock().acquire(), Err(Error::WouldDeadlock));
    let other = MemReadWriteLock::new(&client, "rw").unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(other.read_lock().acquire_timeout(Duration::ZERO).unwrap());
            other.read_lock().release().unwrap();
            assert!(!other.write_lock().acquire_timeout(Duration::ZERO).unwrap());
        });
    });
    rw.read_lock().release().unwrap();
}

#[test]
fn a_lost_lease_frees_its_permit() {
    let (a, b) = store();
    let pool = MemSemaphore::new(&a, "p", 1).unwrap();
    let lease = pool.acquire().unwrap();
    let theirs = MemSemaphore::new(&b, "p", 1).unwrap();
    assert!(theirs.try_acquire().unwrap().is_none());
    assert_eq!(a.lose_hold("p"), 1);
    assert_eq!(lease.health(), LockHealth::Lost);
    let next = theirs.try_acquire().unwrap().expect("the freed permit");
    assert!(next.fencing_token() > lease.fencing_token());
    assert_eq!(lease.release(), Err(Error::LockLost));
    next.release().unwrap();
}

#[test]
fn a_latch_whose_hold_is_lost_steps_down_and_queues_again() {
    let (a, b) = store();
    let first = MemLeaderLatch::start(&a, "e").unwrap();
    let second = MemLeaderLatch::start(&b, "e").unwrap();
    assert!(first.has_leadership() && !second.has_leadership());
    let epoch = first.epoch().unwrap();
    a.suspend_holds();
    assert!(!first.has_leadership(), "a suspended term does not lead");
    assert_eq!(first.health(), Some(LockHealth::Suspended));
    a.restore_holds();
    assert!(first.has_leadership());
    a.lose_holds();
    assert!(!first.has_leadership());
    assert!(second.await_leadership_timeout(PATIENCE).unwrap());
    assert!(second.epoch().unwrap() > epoch);
    second.close();
    assert!(
        first.await_leadership_timeout(PATIENCE).unwrap(),
        "queued again"
    );
}

#[test]
fn a_callback_cannot_wait_but_may_try() {
    let client = MemClient::isolated();
    let mutex = Arc::new(MemMutex::new(&client, "cb").unwrap());
    let (tx, rx) = crossbeam_channel::unbounded();
    let inner = mutex.clone();
    mutex.on_health(move |_| {
        let _ = tx.send((
            inner.acquire_timeout(PATIENCE),
            inner.try_lock().map(|g| g.is_some()),
        ));
    });
    mutex.acquire().unwrap();
    client.suspend_holds();
    let (waited, tried) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(waited, Err(Error::OnWatcherThread));
    assert_eq!(tried, Ok(false), "held by the test's thread");
    mutex.release().unwrap();
}

#[test]
fn names_and_urls_are_checked() {
    assert!(MemClient::connect("").is_err());
    assert!(MemClient::connect(&"s".repeat(2000)).is_err());
    let client = MemClient::isolated();
    assert!(MemMutex::new(&client, "").is_err());
    assert!(MemSemaphore::new(&client, "s", 0).is_err());
    assert!(matches!(
        crate::connect("mem://"),
        Err(Error::InvalidArgument(_))
    ));
    let any = crate::connect(&format!("mem://{}", client.store_name())).unwrap();
    assert_eq!(any.backend(), "mem");
}

#[test]
fn a_multi_lock_of_mem_mutexes_takes_all_or_none() {
    let (a, b) = store();
    let all = crate::InterProcessMultiLock::from_locks(vec![
        Box::new(MemMutex::new(&a, "m1").unwrap()),
        Box::new(MemMutex::new(&a, "m2").unwrap()),
    ])
    .unwrap();
    let theirs = MemMutex::new(&b, "m2").unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            theirs.acquire().unwrap();
        })
        .join()
        .unwrap();
        assert!(!all.acquire_timeout(Duration::ZERO).unwrap(), "m2 is taken");
        let m1 = MemMutex::new(&b, "m1").unwrap();
        assert!(m1.acquire_timeout(Duration::ZERO).unwrap(), "m1 was let go");
        m1.release().unwrap();
    });
    a.restart_store();
    assert!(all.acquire_timeout(Duration::ZERO).unwrap());
    all.release().unwrap();
}
