//! The Redis semaphore against real `redis-server` processes: never more holders than permits
//! (checked by a counter that can fail), arrival order, a killed holder's lease coming back
//! within its TTL, health, cancellation, and nothing left on the server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use zklock::redis::RedisSemaphore;
use zklock::testing::{FencedRegister, TestingRedis};
use zklock::{Error, LockHealth};

mod redis_common;
use redis_common::{client, lock_keys, patience, start_worker, wait_for};

/// Counts holders in and out and remembers the most at once.
#[derive(Default)]
struct Occupancy {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Occupancy {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
    }

    fn exit(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn never_more_holders_than_permits() {
    let server = TestingRedis::start().unwrap();
    let occupancy = Arc::new(Occupancy::default());
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let url = server.url();
            let occupancy = occupancy.clone();
            thread::spawn(move || {
                let client = zklock::RedisClient::connect(&url).unwrap();
                let semaphore = RedisSemaphore::new(&client, "pool", 3).unwrap();
                for _ in 0..10 {
                    let lease = semaphore.acquire().unwrap();
                    occupancy.enter();
                    thread::sleep(Duration::from_millis(5));
                    occupancy.exit();
                    lease.release().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let most = occupancy.most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders at once with 3 permits");
    assert!(most >= 2, "the permits were shared ({most} at most)");
    wait_for("the semaphore's keys to go", || {
        lock_keys(&server).lines().all(|k| k.ends_with(":token"))
    });
}

/// The occupancy check above fails when it should: one permit too many is seen.
#[test]
fn the_occupancy_check_catches_one_holder_too_many() {
    let occupancy = Occupancy::default();
    for _ in 0..4 {
        occupancy.enter();
    }
    assert_eq!(occupancy.most.load(Ordering::SeqCst), 4);
}

#[test]
fn waiters_get_leases_in_arrival_order() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let semaphore = Arc::new(RedisSemaphore::new(&c, "order", 2).unwrap());
    let first = semaphore.acquire().unwrap();
    let second = semaphore.acquire().unwrap();
    assert!(
        semaphore.try_acquire().unwrap().is_none(),
        "both permits are out"
    );
    let order = Arc::new(Mutex::new(Vec::new()));
    let queue = format!("{}:queue", semaphore.key());
    let mut waiters = Vec::new();
    for i in 0..4 {
        let (semaphore, order) = (semaphore.clone(), order.clone());
        waiters.push(thread::spawn(move || {
            let lease = semaphore.acquire().unwrap();
            // Two hold at once: the grant order is the tokens' (the server's), not the
            // order in which the threads get here.
            order.lock().unwrap().push((lease.fencing_token(), i));
            thread::sleep(Duration::from_millis(20));
            lease.release().unwrap();
        }));
        // Each one queued before the next starts.
        wait_for("the waiter to queue", || {
            server.command(&["LLEN", &queue]).unwrap().trim() == (i + 1).to_string()
        });
    }
    drop(first);
    second.release().unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    let mut granted = order.lock().unwrap().clone();
    granted.sort();
    let granted: Vec<_> = granted.into_iter().map(|(_, i)| i).collect();
    assert_eq!(granted, [0, 1, 2, 3]);
}

#[test]
fn a_killed_holders_lease_comes_back_within_its_ttl() {
    let server = TestingRedis::start().unwrap();
    let register = FencedRegister::start().unwrap();
    let mut worker = start_worker(&server, &register, "lease");
    let held: u64 = worker.expect("held").parse().unwrap();
    let c = client(&server, Duration::from_secs(2));
    let semaphore = RedisSemaphore::new(&c, "worker", 1).unwrap();
    assert!(
        semaphore.try_acquire().unwrap().is_none(),
        "the worker's lease is out"
    );
    worker.signal("-KILL");
    let _ = worker.child.wait();
    let started = Instant::now();
    let lease = semaphore
        .acquire_timeout(patience())
        .unwrap()
        .expect("the killed holder's permit came back");
    println!("lease back {:?} after kill -9 (TTL 2 s)", started.elapsed());
    assert!(lease.fencing_token() > held);
    assert_eq!(lease.health(), LockHealth::Held);
    lease.release().unwrap();
}

#[test]
fn a_lease_lost_on_the_server_reads_lost_and_its_release_says_so() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_millis(600));
    let semaphore = RedisSemaphore::new(&c, "lost", 2).unwrap();
    let events = semaphore.health_events();
    let lease = semaphore.acquire().unwrap();
    server.command(&["DEL", semaphore.key()]).unwrap();
    let event = events.recv_timeout(patience()).unwrap();
    assert_eq!(event.health, LockHealth::Lost);
    assert_eq!(event.fencing_token, lease.fencing_token());
    assert_eq!(lease.health(), LockHealth::Lost);
    assert!(matches!(lease.release(), Err(Error::LockLost)));
}

#[test]
fn cancel_waiters_ends_a_wait_and_leaves_the_queue() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let semaphore = Arc::new(RedisSemaphore::new(&c, "cancel", 1).unwrap());
    let held = semaphore.acquire().unwrap();
    let waiting = {
        let semaphore = semaphore.clone();
        thread::spawn(move || semaphore.acquire().map(drop))
    };
    let queue = format!("{}:queue", semaphore.key());
    wait_for("the waiter to queue", || {
        server.command(&["LLEN", &queue]).unwrap().trim() == "1"
    });
    semaphore.cancel_waiters();
    assert!(matches!(waiting.join().unwrap(), Err(Error::Cancelled)));
    assert_eq!(server.command(&["LLEN", &queue]).unwrap().trim(), "0");
    drop(held);
    wait_for("the dropped lease to be returned", || {
        server.command(&["ZCARD", semaphore.key()]).unwrap().trim() == "0"
    });
}

#[test]
fn bad_arguments_are_refused_before_any_io() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let no_permits = RedisSemaphore::new(&c, "none", 0).unwrap_err();
    assert!(
        matches!(no_permits, Error::InvalidArgument(_)),
        "{no_permits}"
    );
    assert!(matches!(
        RedisSemaphore::new(&c, "", 1),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(lock_keys(&server), "");
}

/// Dropping a lease returns its permit in the caller: once the drop returns, another Client
/// takes the permit at once, every time (not only when the background release wins the race).
#[test]
fn a_dropped_lease_is_free_for_another_client_at_once() {
    let server = TestingRedis::start().unwrap();
    let a = client(&server, Duration::from_secs(30));
    let b = client(&server, Duration::from_secs(30));
    let mine = RedisSemaphore::new(&a, "dropped", 1).unwrap();
    let theirs = RedisSemaphore::new(&b, "dropped", 1).unwrap();
    let mut granted = 0;
    for _ in 0..20 {
        let lease = mine.acquire().unwrap();
        drop(lease);
        if let Some(lease) = theirs.try_acquire().unwrap() {
            granted += 1;
            lease.release().unwrap();
        } else {
            wait_for("the permit to come back", || {
                server.command(&["ZCARD", "zklock:sem:{dropped}"]).unwrap() == "0"
            });
        }
    }
    println!("granted {granted} of 20 at once after the drop");
    assert_eq!(granted, 20);
}
