//! The PostgreSQL semaphore against a real server: never more than N holders (a checker that
//! can fail, and a test that it does), the documented keys, a lease that a killed holder
//! process cannot keep, cancel and bad input.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::postgres::{client, worker_client};
use common::worker::{say, wait_to_be_killed, Worker};
use common::{patience, wait_for};

use zklock::postgres::PgSemaphore;
use zklock::testing::TestingPostgres;
use zklock::{Error, LockHealth, PgClient};

const WORKER: &str = "ZKLOCK_PG_SEMAPHORE_WORKER";

/// The session timeout of the worker processes.
const WORKER_SESSION: Duration = Duration::from_secs(3);

/// Counts holders in and out and remembers every time there were more than `limit`.
struct Occupancy {
    limit: usize,
    now: AtomicUsize,
    most: AtomicUsize,
    over: AtomicUsize,
}

impl Occupancy {
    fn new(limit: usize) -> Occupancy {
        Occupancy {
            limit,
            now: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            over: AtomicUsize::new(0),
        }
    }

    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        if now > self.limit {
            self.over.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn exit(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many sessions wait for lease `i` of `name`.
fn waiting(server: &TestingPostgres, name: &str, i: u32) -> usize {
    server
        .sql(&format!(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 \
             AND NOT granted \
             AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('{name}', {i})"
        ))
        .unwrap()
        .len()
}

#[test]
fn never_more_than_n_holders() {
    let server = TestingPostgres::start().unwrap();
    let occupancy = Arc::new(Occupancy::new(3));
    let clients = [client(&server), client(&server)];
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let c = clients[t % 2].clone();
            let occupancy = occupancy.clone();
            thread::spawn(move || {
                let semaphore = PgSemaphore::new(&c, "three", 3).unwrap();
                let mut tokens = Vec::new();
                for _ in 0..8 {
                    let lease = semaphore.acquire().unwrap();
                    assert!((1..=3).contains(&lease.index()));
                    tokens.push(lease.fencing_token());
                    occupancy.enter();
                    thread::sleep(Duration::from_millis(20));
                    occupancy.exit();
                    lease.release().unwrap();
                }
                assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let most = occupancy.most.load(Ordering::SeqCst);
    println!("6 threads on 3 leases: at most {most} held at once");
    assert_eq!(occupancy.over.load(Ordering::SeqCst), 0, "more than 3");
    assert!(most >= 2, "the leases were shared: {most}");
}

#[test]
fn the_checker_catches_one_holder_too_many() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    // Three leases held at once, counted by a checker that allows two.
    let semaphore = PgSemaphore::new(&c, "checked", 3).unwrap();
    let occupancy = Occupancy::new(2);
    let leases: Vec<_> = (0..3).map(|_| semaphore.acquire().unwrap()).collect();
    for _ in &leases {
        occupancy.enter();
    }
    assert_eq!(occupancy.over.load(Ordering::SeqCst), 1);
    drop(leases);
}

#[test]
fn leases_are_the_documented_keys_and_return_on_release_or_drop() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let semaphore = PgSemaphore::new(&c, "keys", 2).unwrap();
    let a = semaphore.try_acquire().unwrap().expect("free");
    let b = semaphore.try_acquire().unwrap().expect("free");
    assert!(semaphore.try_acquire().unwrap().is_none(), "both out");
    let mut indexes = vec![a.index(), b.index()];
    indexes.sort_unstable();
    assert_eq!(indexes, vec![1, 2]);
    assert_eq!(a.health(), LockHealth::Held);
    assert!(b.fencing_token() > a.fencing_token());
    // The key of lease i is hashtextextended(name, i), as any SQL client computes it.
    let rows = server
        .sql(&format!(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted \
             AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('keys', {})",
            a.index()
        ))
        .unwrap();
    assert_eq!(
        rows,
        vec![vec![Some(a.backend_pid().to_string())]],
        "lease {} on its key",
        a.index()
    );
    // A waiter gets the lease that comes back, whichever key it is on.
    let waiter = {
        let c = c.clone();
        thread::spawn(move || {
            PgSemaphore::new(&c, "keys", 2)
                .unwrap()
                .acquire_timeout(patience())
                .unwrap()
                .map(|l| l.index())
        })
    };
    // Queued on one of the two keys, or about to try them again.
    wait_for("the waiter to queue", || {
        waiting(&server, "keys", 1) + waiting(&server, "keys", 2) == 1
    });
    let freed = a.index();
    a.release().unwrap();
    assert_eq!(waiter.join().unwrap(), Some(freed));
    drop(b);
    wait_for("the dropped lease to come back", || {
        semaphore.try_acquire().unwrap().is_some()
    });
}

#[test]
fn a_waiter_times_out_or_is_cancelled_and_bad_input_is_refused() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let semaphore = Arc::new(PgSemaphore::new(&c, "one", 1).unwrap());
    let _held = semaphore.acquire().unwrap();
    assert!(semaphore
        .acquire_timeout(Duration::from_millis(300))
        .unwrap()
        .is_none());
    let waiter = {
        let semaphore = semaphore.clone();
        thread::spawn(move || semaphore.acquire())
    };
    wait_for("the waiter to queue", || waiting(&server, "one", 1) == 1);
    semaphore.cancel_waiters();
    assert!(matches!(waiter.join().unwrap(), Err(Error::Cancelled)));
    wait_for("the cancelled waiter to leave", || {
        waiting(&server, "one", 1) == 0
    });
    for (name, n) in [("", 1), ("x", 0), ("x", 10_001)] {
        assert!(
            matches!(
                PgSemaphore::new(&c, name, n),
                Err(Error::InvalidArgument(_))
            ),
            "{name:?} {n}"
        );
    }
}

/// The worker: takes the one lease of "worker" and holds it until killed.
#[test]
fn lease_worker() {
    let Some(client) = worker_client(WORKER, WORKER_SESSION) else {
        return; // only as a worker process
    };
    // Held first, so that the lease is taken on a session opened for it (not the Client's
    // first), whose limits are set as it opens.
    let first = PgSemaphore::new(&client, "worker's first", 1).unwrap();
    let _first = first.acquire().unwrap();
    let semaphore = PgSemaphore::new(&client, "worker", 1).unwrap();
    let lease = semaphore.acquire().unwrap();
    say(&format!("held {}", lease.fencing_token()));
    wait_to_be_killed();
}

/// Starts a worker that holds the one lease of "worker", sends it `signal`, and takes the
/// lease when it comes back; prints how long that took.
fn lease_back_after(signal: &str, what: &str) {
    let server = TestingPostgres::start().unwrap();
    let worker = Worker::start("lease_worker", WORKER, &server.url());
    let held: u64 = worker.expect("held").parse().unwrap();
    let c = client(&server);
    let semaphore = PgSemaphore::new(&c, "worker", 1).unwrap();
    assert!(
        semaphore.try_acquire().unwrap().is_none(),
        "the worker holds"
    );
    worker.signal(signal);
    let started = Instant::now();
    let lease = semaphore
        .acquire_timeout(patience())
        .unwrap()
        .expect("the lease came back");
    println!(
        "the lease came back {:?} after {what} (session timeout {WORKER_SESSION:?})",
        started.elapsed()
    );
    assert!(lease.fencing_token() > held);
    drop(lease);
    if signal == "-STOP" {
        worker.signal("-CONT");
    }
}

#[test]
fn a_killed_lease_holder_process_gives_its_lease_back() {
    lease_back_after("-KILL", "kill -9");
}

#[test]
fn a_frozen_lease_holder_process_gives_its_lease_back() {
    lease_back_after("-STOP", "SIGSTOP");
}

#[test]
fn a_try_on_a_stopped_server_is_an_error_not_a_refusal() {
    let mut server = TestingPostgres::start().unwrap();
    let c = PgClient::builder(&server.url())
        .retry_policy(zklock::RetryNTimes::new(1, Duration::from_millis(50)).unwrap())
        .connect()
        .unwrap();
    let semaphore = PgSemaphore::new(&c, "stopped", 2).unwrap();
    let mutex = zklock::postgres::PgMutex::new(&c, "stopped").unwrap();
    server.stop().unwrap();
    let tried = semaphore.try_acquire();
    assert!(tried.is_err(), "{tried:?}");
    let tried = mutex.try_lock();
    assert!(tried.is_err(), "{tried:?}");
}

/// A lease granted after a wait carries its token as one taken at once does: above every token
/// handed out before it.
#[test]
fn a_lease_granted_after_a_wait_has_a_rising_token() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let semaphore = Arc::new(PgSemaphore::new(&c, "waited lease", 2).unwrap());
    let first = semaphore.acquire().unwrap();
    let second = semaphore.acquire().unwrap();
    let before = first.fencing_token().max(second.fencing_token());
    assert!(first.fencing_token() > 0 && second.fencing_token() > 0);
    let waiter = {
        let semaphore = semaphore.clone();
        thread::spawn(move || {
            let lease = semaphore.acquire().unwrap();
            lease.fencing_token()
        })
    };
    // Queued on one of the two keys, then served by its release.
    wait_for("a waiter", || {
        waiting(&server, "waited lease", 1) + waiting(&server, "waited lease", 2) > 0
    });
    drop(first);
    drop(second);
    let token = waiter.join().unwrap();
    assert!(token > before, "{token} after {before}");
}
