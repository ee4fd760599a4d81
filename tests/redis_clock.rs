//! The Redis server's wall clock stepped an hour forward and back under a holder (a server
//! whose clock the test sets, `TestingRedis::start_with_stepped_clock`; the machine's clock is
//! not touched), and a long run with renewals in which the clock is not stepped: the keeper's
//! step detector says nothing there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use zklock::redis::{RedisMutex, RedisSemaphore};
use zklock::testing::TestingRedis;
use zklock::{Error, LockHealth};

mod redis_common;
use redis_common::{client, just_renewed, patience, until_not_held, wait_for, warnings_naming};

/// The log lines that name `server` (the tests run side by side, each on a server of its own).
fn log_of(server: &TestingRedis) -> Vec<String> {
    warnings_naming(&format!("127.0.0.1:{} ", server.port()))
}

/// Forward an hour: every key on the server expires at once, and another Client can take the
/// lock. The holder's next renewal finds its key gone and reads `Lost`, and the log says the
/// server's clock is why.
#[test]
fn a_server_clock_stepped_an_hour_forward_makes_the_holder_lost_at_the_next_renewal() {
    let ttl = Duration::from_secs(2);
    let period = ttl / 3;
    let server = TestingRedis::start_with_stepped_clock().unwrap();
    let _ = log_of(&server);
    let (c, other) = (client(&server, ttl), client(&server, ttl));
    let mutex = RedisMutex::new(&c, "forward").unwrap();
    let guard = mutex.lock().unwrap();
    just_renewed(&server, "zklock:{forward}");
    server.set_clock_ahead(Duration::from_secs(3600)).unwrap();
    let stepped = Instant::now();
    // The key is gone: another Client is granted the lock while the holder may still read
    // Held, until its next renewal. Its token is higher (the fence refuses the old holder).
    let theirs = RedisMutex::new(&other, "forward").unwrap();
    let taken = theirs
        .try_lock()
        .unwrap()
        .expect("the key expired with the step");
    assert!(taken.fencing_token() > guard.fencing_token());
    let (took, health) = until_not_held(stepped, || guard.health());
    println!("{health:?} {took:?} after the step (renewal period {period:?})");
    assert_eq!(health, LockHealth::Lost);
    assert!(took < period + Duration::from_millis(500), "{took:?}");
    wait_for("the log to say why", || {
        log_of(&server)
            .iter()
            .any(|l| l.contains("stepped forward by 3600") && l.contains("expired early"))
    });
    println!("{}", log_of(&server).join("\n"));
    assert!(matches!(guard.release(), Err(Error::LockLost)));
}

/// Back an hour: every key on the server would outlive its TTL by an hour. The holder's next
/// renewal sets its key's TTL again on the new clock (so the hold is still exclusive and would
/// expire on time if the holder died now) and finds the step: the hold reads `Suspended` —
/// the server's clock is not to be trusted until it has kept step for a renewal period — and
/// `Held` again after that. A semaphore lease of the same Client does the same.
#[test]
fn a_server_clock_stepped_an_hour_back_makes_the_holder_suspended_until_the_clocks_agree() {
    let ttl = Duration::from_secs(2);
    let period = ttl / 3;
    let server = TestingRedis::start_with_stepped_clock().unwrap();
    let _ = log_of(&server);
    let c = client(&server, ttl);
    let mutex = RedisMutex::new(&c, "back").unwrap();
    let guard = mutex.lock().unwrap();
    let semaphore = RedisSemaphore::new(&c, "back", 2).unwrap();
    // The lease's renewal may find the step a moment before or after the mutex's: its events
    // say whether it did, where reading its health once could come too early or too late.
    let lease_events = semaphore.health_events();
    let lease = semaphore.acquire().unwrap();
    just_renewed(&server, "zklock:{back}");
    server.set_clock_behind(Duration::from_secs(3600)).unwrap();
    let stepped = Instant::now();
    let (took, health) = until_not_held(stepped, || guard.health());
    println!("{health:?} {took:?} after the step (renewal period {period:?})");
    assert_eq!(health, LockHealth::Suspended);
    assert!(took < period + Duration::from_millis(500), "{took:?}");
    let lease_event = lease_events
        .recv_timeout(patience())
        .expect("the lease's health changed");
    println!(
        "lease {:?} {:?} after the step",
        lease_event.health,
        stepped.elapsed()
    );
    assert_eq!(lease_event.health, LockHealth::Suspended);
    // The renewal that found the step set the key's TTL on the new clock.
    let pttl: i64 = server
        .command(&["PTTL", "zklock:{back}"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(pttl <= 2_000, "the key's TTL is {pttl} ms");
    wait_for("the log to say why", || {
        log_of(&server)
            .iter()
            .any(|l| l.contains("stepped back by 3600") && l.contains("outlives its TTL"))
    });
    println!("{}", log_of(&server).join("\n"));
    wait_for("Held again once the clocks agree", || {
        guard.health() == LockHealth::Held && lease.health() == LockHealth::Held
    });
    println!("Held again {:?} after the step", stepped.elapsed());
    guard.release().unwrap();
    lease.release().unwrap();
}

/// No false alarm: with the clock left alone, 20 s of renewals at a 2 s TTL (30 rounds) for 8
/// holds while 4 threads contend for another lock and 2 more spin on the CPU, the detector
/// says nothing and no hold is lost.
#[test]
fn renewals_under_load_find_no_step_in_a_clock_that_was_not_stepped() {
    let ttl = Duration::from_secs(2);
    let server = TestingRedis::start_with_stepped_clock().unwrap();
    let _ = log_of(&server);
    let c = client(&server, ttl);
    let mutexes: Vec<RedisMutex> = (0..8)
        .map(|i| RedisMutex::new(&c, &format!("quiet{i}")).unwrap())
        .collect();
    let guards: Vec<_> = mutexes.iter().map(|m| m.lock().unwrap()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (c, stop) = (client(&server, ttl), stop.clone());
        load.push(thread::spawn(move || {
            let m = RedisMutex::new(&c, "contended").unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                drop(m.lock().unwrap());
                n += 1;
            }
            n
        }));
    }
    for _ in 0..2 {
        let stop = stop.clone();
        load.push(thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n = n.wrapping_add(1);
            }
            0
        }));
    }
    let started = Instant::now();
    let mut not_held = 0;
    while started.elapsed() < Duration::from_secs(20) {
        for g in &guards {
            assert_ne!(g.health(), LockHealth::Lost);
            if g.health() != LockHealth::Held {
                not_held += 1;
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let handoffs: u64 = load.into_iter().map(|t| t.join().unwrap()).sum();
    let log = log_of(&server);
    println!(
        "{handoffs} contended acquisitions, {not_held} readings not Held (a late renewal), \
         clock log lines: {log:?}"
    );
    assert!(
        log.iter().all(|l| !l.contains("stepped")),
        "a false step: {log:?}"
    );
    for g in guards {
        g.release().unwrap();
    }
}
