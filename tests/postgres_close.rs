//! What `PgClient::close` and a dropped hold promise, against a real server, on a URL with one
//! host (zklock connects the socket itself) and one with two (tokio-postgres connects it):
//! a waiter ends with `Closed` and leaves the server's queue; the sessions of live holds end,
//! so that another Client gets their locks at once; every hold reads `Lost` when `close`
//! returns; a dropped guard, lease or latch frees its lock at once; a try on a pooled session
//! whose backend was ended while idle is made on another session.
//!
//! The bounds asserted are generous (a loaded two-core machine); the measured times are
//! printed.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::postgres::Psql;
use common::{patience, wait_for};

use zklock::postgres::{PgLeaderLatch, PgMutex, PgSemaphore};
use zklock::testing::TestingPostgres;
use zklock::{Error, LockHealth, PgClient};

/// The URLs of `server` for a Client whose sessions show as `app` in `pg_stat_activity`: one
/// host, and two hosts (the first refusing connections).
fn urls(server: &TestingPostgres, app: &str) -> [String; 2] {
    [
        format!("{}?application_name={app}", server.url()),
        format!(
            "postgres://zklock:{}@127.0.0.1:1,127.0.0.1:{}/postgres?application_name={app}",
            server.password(),
            server.port()
        ),
    ]
}

/// How long `f` takes to hold, polled every few milliseconds; panics after `patience()`.
fn time_until(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < patience(), "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

#[test]
fn close_ends_a_waiter_with_closed_and_it_leaves_the_queue() {
    common::init_logging();
    let server = TestingPostgres::start().unwrap();
    let x = PgClient::connect(&server.url()).unwrap();
    let held = PgMutex::new(&x, "k").unwrap();
    let _guard = held.lock().unwrap();
    let mut psql = Psql::start(&server);
    for url in urls(&server, "waiter") {
        for trial in 0..20 {
            let y = PgClient::connect(&url).unwrap();
            let waiter = {
                let y = y.clone();
                thread::spawn(move || {
                    let mutex = PgMutex::new(&y, "k").unwrap();
                    let got = mutex.try_lock_for(Duration::from_secs(30));
                    let ended = Instant::now();
                    (got.map(|g| g.map(|g| g.health())), ended)
                })
            };
            wait_for("the waiter to queue", || {
                server.advisory_lock("k").unwrap().1.len() == 1
            });
            let closed = Instant::now();
            y.close();
            let returned = Instant::now();
            let (got, ended) = waiter.join().unwrap();
            let waited = ended.saturating_duration_since(closed);
            time_until("the waiter to leave pg_locks", || psql.waiters() == 0);
            let gone = returned.elapsed();
            println!(
                "{url} trial {trial}: close took {:?}; the waiter ended {waited:?} after close \
                 began; it was gone from pg_locks within {gone:?} after close returned",
                returned - closed
            );
            assert!(matches!(got, Err(Error::Closed)), "{url}: {got:?}");
            assert!(waited < Duration::from_secs(2), "{url}: {waited:?}");
            assert!(gone < Duration::from_secs(2), "{url}: {gone:?}");
        }
    }
}

#[test]
fn close_ends_the_sessions_of_live_holds_and_every_hold_reads_lost() {
    let server = TestingPostgres::start().unwrap();
    let other = PgClient::connect(&server.url()).unwrap();
    let mut psql = Psql::start(&server);
    let theirs = PgMutex::new(&other, "held").unwrap();
    let their_pool = PgSemaphore::new(&other, "leased", 1).unwrap();
    // A lock or lease taken is released so that its session goes back to the pool: the times
    // measured are not those of opening sessions.
    let take = |m: &PgMutex| {
        m.try_lock()
            .unwrap()
            .map(|g| g.release().unwrap())
            .is_some()
    };
    let take_lease = |p: &PgSemaphore| {
        p.try_acquire()
            .unwrap()
            .map(|l| l.release().unwrap())
            .is_some()
    };
    for url in urls(&server, "holder") {
        for trial in 0..20 {
            let y = PgClient::builder(&url)
                .session_timeout(Duration::from_secs(4))
                .connect()
                .unwrap();
            let mutex = PgMutex::new(&y, "held").unwrap();
            let guard = mutex.lock().unwrap();
            let pool = PgSemaphore::new(&y, "leased", 1).unwrap();
            let lease = pool.acquire().unwrap();
            let latch = PgLeaderLatch::start(&y, "led").unwrap();
            assert!(latch.await_leadership_timeout(patience()).unwrap());
            // The other Client's latch queued, and a session in its pool.
            let their_latch = PgLeaderLatch::start(&other, "led").unwrap();
            wait_for("the other latch to queue", || {
                server.advisory_lock("led").unwrap().1.len() == 1
            });
            assert!(!take(&theirs) && !take_lease(&their_pool));
            y.close();
            let closed = Instant::now();
            let read = (guard.health(), lease.health(), latch.has_leadership());
            assert_eq!(
                read,
                (LockHealth::Lost, LockHealth::Lost, false),
                "{url} trial {trial}: read when close returned"
            );
            let latch_took = time_until("the leadership", || their_latch.has_leadership());
            let lock_took = time_until("the lock", || take(&theirs));
            let lease_took = time_until("the lease", || take_lease(&their_pool));
            // Close ended every connection; the server's backends exit as they read the end
            // (their locks are free already: the other Client took them).
            let left = psql.sessions_of("holder");
            let gone_took = time_until("the sessions to end", || psql.sessions_of("holder") == 0);
            println!(
                "{url} trial {trial}: after close returned, the other Client's latch led \
                 within {latch_took:?}, its try took the lock within {lock_took:?} (after \
                 that), the lease within {lease_took:?} (after that); {left} sessions left \
                 {:?} after close returned, none {gone_took:?} later",
                closed.elapsed()
            );
            their_latch.close();
            for took in [lock_took, lease_took, latch_took, gone_took] {
                assert!(took < Duration::from_secs(2), "{url}: {took:?}");
            }
            assert!(matches!(
                guard.release(),
                Err(Error::LockLost | Error::Closed)
            ));
            drop(lease);
            drop(latch);
            wait_for("the other latch to let go", || {
                server.advisory_lock("led").unwrap().0.is_empty()
            });
        }
    }
}

#[test]
fn a_dropped_guard_lease_or_latch_frees_its_lock_at_once() {
    let server = TestingPostgres::start().unwrap();
    let other = PgClient::connect(&server.url()).unwrap();
    for url in urls(&server, "dropper") {
        let c = PgClient::connect(&url).unwrap();
        let (mut guards, mut leases, mut latches) = (Vec::new(), Vec::new(), Vec::new());
        let mutex = PgMutex::new(&c, "dropped").unwrap();
        let theirs = PgMutex::new(&other, "dropped").unwrap();
        let pool = PgSemaphore::new(&c, "dropped lease", 1).unwrap();
        let their_pool = PgSemaphore::new(&other, "dropped lease", 1).unwrap();
        let their_latch = PgMutex::new(&other, "dropped latch").unwrap();
        // What the other Client takes it releases, so that its session goes back to the pool:
        // the times measured are not those of opening sessions.
        let take = |m: &PgMutex| {
            m.try_lock()
                .unwrap()
                .map(|g| g.release().unwrap())
                .is_some()
        };
        let lease = |p: &PgSemaphore| {
            p.try_acquire()
                .unwrap()
                .map(|l| l.release().unwrap())
                .is_some()
        };
        for _ in 0..10 {
            let guard = mutex.lock().unwrap();
            assert!(!take(&theirs));
            drop(guard);
            guards.push(time_until("the dropped guard's lock", || take(&theirs)));

            let held = pool.acquire().unwrap();
            assert!(!lease(&their_pool));
            drop(held);
            leases.push(time_until("the dropped lease", || lease(&their_pool)));

            let latch = PgLeaderLatch::start(&c, "dropped latch").unwrap();
            assert!(latch.await_leadership_timeout(patience()).unwrap());
            assert!(!take(&their_latch));
            drop(latch);
            latches.push(time_until("the dropped latch's lock", || {
                take(&their_latch)
            }));
        }
        println!(
            "{url}: freed after a drop: guards {guards:?}, leases {leases:?}, latches {latches:?}"
        );
        for (what, times) in [("guard", guards), ("lease", leases), ("latch", latches)] {
            // Freed at the keeper's next pass, every half second, the median was a quarter
            // second.
            let m = median(times);
            assert!(
                m < Duration::from_millis(100),
                "{url}: a {what}'s median {m:?}"
            );
        }
    }
}

#[test]
fn a_try_on_a_pooled_session_ended_while_idle_is_made_on_another() {
    let server = TestingPostgres::start().unwrap();
    for url in urls(&server, "stale") {
        let c = PgClient::connect(&url).unwrap();
        let mutexes: Vec<PgMutex> = (0..3)
            .map(|i| PgMutex::new(&c, &format!("stale {i}")).unwrap())
            .collect();
        let mut failed = Vec::new();
        for trial in 0..10 {
            // Three sessions in the pool.
            let guards: Vec<_> = mutexes.iter().map(|m| m.lock().unwrap()).collect();
            for g in guards {
                g.release().unwrap();
            }
            let ended = server
                .sql(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE application_name = 'stale'",
                )
                .unwrap();
            assert_ne!(ended[0][0].as_deref(), Some("0"));
            match mutexes[0].try_lock() {
                Ok(Some(g)) => g.release().unwrap(),
                other => failed.push(format!("trial {trial}: {other:?}")),
            }
        }
        assert!(failed.is_empty(), "{url}: {failed:?}");
    }
}
