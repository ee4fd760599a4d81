//! The scenarios, each written once over [`Backend`]: what every backend promises.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::backends::{Backend, Opts};
use crate::checker::{Access, Log};
use crate::common::{patience, wait_for};
use zklock::{AnyClient, Error, Lock, LockHealth};

/// Far above a wake-up on a loaded machine, far below every backend's re-check period with the
/// default session timeout (a third of 30 s): a hand-off that waits for a re-check fails.
const HAND_OFF_BOUND: Duration = Duration::from_secs(2);

/// Slack for a loaded 2-core machine on top of a documented bound.
const SLACK: Duration = Duration::from_secs(1);

fn connect(b: &dyn Backend, url: &str) -> AnyClient {
    b.connect(url, Opts::default())
}

/// Two Clients, three threads each on one lock object per Client, 60 sections in all: the log
/// shows no two inside at once.
pub fn exclusion(b: &dyn Backend) {
    let server = b.shared();
    let log = Arc::new(Log::default());
    let sections = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    let conns: Vec<_> = (0..2).map(|_| connect(b, &server.url())).collect();
    for (c, conn) in conns.iter().enumerate() {
        let lock = conn.mutex("exclusion").unwrap();
        for t in 0..3 {
            let (lock, log, sections) = (lock.clone(), log.clone(), sections.clone());
            threads.push(thread::spawn(move || {
                let who = c * 10 + t;
                for _ in 0..10 {
                    lock.acquire().unwrap();
                    log.enter(who, Access::Write);
                    thread::sleep(Duration::from_millis(2));
                    log.exit(who, Access::Write);
                    lock.release().unwrap();
                    sections.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
    }
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(log.sections(), 60);
    assert_eq!(log.check(1), Ok(1));
}

/// Waiters of three Clients queued one after another are granted in that order.
pub fn fifo(b: &dyn Backend) {
    if !b.fifo() {
        println!(
            "{}: SKIPPED fifo: the backend does not promise arrival order",
            b.name()
        );
        return;
    }
    let server = b.shared();
    let holder = connect(b, &server.url());
    let lock = holder.mutex("fifo").unwrap();
    lock.acquire().unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    let mut conns = Vec::new();
    for i in 0..3 {
        let conn = connect(b, &server.url());
        conns.push(conn.clone());
        let order = order.clone();
        waiters.push(thread::spawn(move || {
            let lock = conn.mutex("fifo").unwrap();
            assert!(lock.acquire_timeout(patience()).unwrap());
            order.lock().push(i);
            lock.release().unwrap();
        }));
        // Time to queue: the order of arrival is what is checked.
        thread::sleep(Duration::from_millis(500));
    }
    lock.release().unwrap();
    waiters.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*order.lock(), vec![0, 1, 2]);
}

/// A thread re-enters its hold; the lock is free only after as many releases; another thread
/// cannot release it.
pub fn reentrancy_and_not_owner(b: &dyn Backend) {
    let server = b.shared();
    let (a, other) = (connect(b, &server.url()), connect(b, &server.url()));
    let lock = a.mutex("reentrant").unwrap();
    let theirs = other.mutex("reentrant").unwrap();
    assert_eq!(lock.release(), Err(Error::NotOwner));
    lock.acquire().unwrap();
    assert!(lock.acquire_timeout(Duration::ZERO).unwrap(), "re-entry");
    let token = lock.fencing_token().unwrap();
    {
        let lock = lock.clone();
        let r = thread::spawn(move || lock.release()).join().unwrap();
        assert_eq!(r, Err(Error::NotOwner), "another thread released it");
    }
    lock.release().unwrap();
    assert_eq!(lock.health(), Some(LockHealth::Held), "one hold is left");
    assert!(
        !theirs.acquire_timeout(Duration::ZERO).unwrap(),
        "free too soon"
    );
    lock.release().unwrap();
    assert_eq!(lock.health(), None);
    assert_eq!(lock.release(), Err(Error::NotOwner));
    assert!(theirs.acquire_timeout(patience()).unwrap());
    assert!(theirs.fencing_token().unwrap() > token, "tokens rise");
    theirs.release().unwrap();
}

/// A waiter on another Client is granted within [`HAND_OFF_BOUND`] of the release, after holds
/// of `hold`, three times.
pub fn hand_off(b: &dyn Backend, hold: Duration) {
    let server = b.shared();
    let (a, w) = (connect(b, &server.url()), connect(b, &server.url()));
    let name = format!("hand-off-{}", hold.as_millis());
    let lock = a.mutex(&name).unwrap();
    let waiter = w.mutex(&name).unwrap();
    for round in 0..3 {
        lock.acquire().unwrap();
        let (tx, rx) = mpsc::channel();
        let t = {
            let waiter = waiter.clone();
            thread::spawn(move || {
                assert!(waiter.acquire_timeout(patience()).unwrap());
                tx.send(Instant::now()).unwrap();
                waiter.release().unwrap();
            })
        };
        thread::sleep(hold);
        let released = Instant::now();
        lock.release().unwrap();
        let granted = rx.recv_timeout(patience()).expect("the waiter was served");
        let gap = granted.saturating_duration_since(released);
        println!(
            "{}: hand-off after a {hold:?} hold, round {round}: {gap:?}",
            b.name()
        );
        assert!(
            gap < HAND_OFF_BOUND,
            "hand-off after a {hold:?} hold took {gap:?}"
        );
        t.join().unwrap();
    }
}

/// Against a held lock: `try_lock` answers at once, `acquire_timeout(d)` after about `d`, and
/// neither leaves anything that delays the next holder.
pub fn try_and_timeout(b: &dyn Backend) {
    let server = b.shared();
    let (a, w) = (connect(b, &server.url()), connect(b, &server.url()));
    let lock = a.mutex("busy").unwrap();
    let other = w.mutex("busy").unwrap();
    lock.acquire().unwrap();
    let t = Instant::now();
    assert!(!other.acquire_timeout(Duration::ZERO).unwrap());
    let tried = t.elapsed();
    let t = Instant::now();
    assert!(!other.acquire_timeout(Duration::from_millis(300)).unwrap());
    let waited = t.elapsed();
    println!("{}: try {tried:?}, timeout of 300 ms {waited:?}", b.name());
    assert!(tried < SLACK, "try_lock took {tried:?}");
    // PostgreSQL's wait ends by the server's `lock_timeout`, timed on the server's clock in
    // milliseconds: a few microseconds short of the client's measure.
    assert!(
        waited >= Duration::from_millis(295),
        "returned early: {waited:?}"
    );
    assert!(waited < Duration::from_millis(300) + SLACK, "{waited:?}");
    lock.release().unwrap();
    let t = Instant::now();
    assert!(other.acquire_timeout(patience()).unwrap());
    let next = t.elapsed();
    assert!(
        next < HAND_OFF_BOUND,
        "a timed-out waiter's trace delayed the lock: {next:?}"
    );
    other.release().unwrap();
}

/// `cancel_waiters` ends a waiting thread with `Cancelled` at once, and leaves no queue entry:
/// the next waiter is served as soon as the holder lets go.
pub fn cancel_waiters(b: &dyn Backend) {
    let server = b.shared();
    let (a, w, n) = (
        connect(b, &server.url()),
        connect(b, &server.url()),
        connect(b, &server.url()),
    );
    let lock = a.mutex("cancel").unwrap();
    let waiter = w.mutex("cancel").unwrap();
    lock.acquire().unwrap();
    let (tx, rx) = mpsc::channel();
    let t = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let r = waiter.acquire_timeout(patience());
            tx.send(Instant::now()).unwrap();
            r
        })
    };
    thread::sleep(Duration::from_millis(300));
    let cancelled = Instant::now();
    waiter.cancel_waiters();
    let ended = rx.recv_timeout(patience()).expect("the waiter ended");
    assert_eq!(t.join().unwrap(), Err(Error::Cancelled));
    let took = ended.saturating_duration_since(cancelled);
    println!("{}: cancelled in {took:?}", b.name());
    assert!(took < HAND_OFF_BOUND, "cancel took {took:?}");
    let next = n.mutex("cancel").unwrap();
    let t = {
        let next = next.clone();
        thread::spawn(move || {
            assert!(next.acquire_timeout(patience()).unwrap());
            let at = Instant::now();
            next.release().unwrap();
            at
        })
    };
    thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    lock.release().unwrap();
    let gap = t.join().unwrap().saturating_duration_since(released);
    assert!(
        gap < HAND_OFF_BOUND,
        "the cancelled entry delayed the next: {gap:?}"
    );
}

/// `close()` on a Client with a waiting thread: the waiter ends with `Closed` at once, and a
/// waiter of another Client queued behind it is served as soon as the holder lets go.
pub fn close_while_waiting(b: &dyn Backend) {
    let server = b.shared();
    let (a, w, n) = (
        connect(b, &server.url()),
        connect(b, &server.url()),
        connect(b, &server.url()),
    );
    let lock = a.mutex("close-waiting").unwrap();
    lock.acquire().unwrap();
    let waiter = w.mutex("close-waiting").unwrap();
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let r = waiter.acquire_timeout(patience());
        tx.send(Instant::now()).unwrap();
        r
    });
    thread::sleep(Duration::from_millis(300));
    let next = n.mutex("close-waiting").unwrap();
    let behind = {
        let next = next.clone();
        thread::spawn(move || {
            assert!(next.acquire_timeout(patience()).unwrap());
            let at = Instant::now();
            next.release().unwrap();
            at
        })
    };
    thread::sleep(Duration::from_millis(300));
    let closed = Instant::now();
    w.close();
    let ended = rx.recv_timeout(patience()).expect("the waiter ended");
    let took = ended.saturating_duration_since(closed);
    let r = t.join().unwrap();
    println!("{}: waiter ended {took:?} after close: {r:?}", b.name());
    assert_eq!(r, Err(Error::Closed));
    assert!(
        took < HAND_OFF_BOUND,
        "the waiter ended {took:?} after close"
    );
    let released = Instant::now();
    lock.release().unwrap();
    let gap = behind.join().unwrap().saturating_duration_since(released);
    println!("{}: the waiter behind served in {gap:?}", b.name());
    assert!(
        gap < HAND_OFF_BOUND,
        "the closed Client's entry delayed the next: {gap:?}"
    );
}

/// `close()` on a Client with holds: they read `Lost` when it returns, and another Client
/// takes the lock at once.
pub fn close_while_holding(b: &dyn Backend) {
    let server = b.shared();
    let (a, w) = (connect(b, &server.url()), connect(b, &server.url()));
    let lock = a.mutex("close-holding").unwrap();
    lock.acquire().unwrap();
    let other = w.mutex("close-holding").unwrap();
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        assert!(other.acquire_timeout(patience()).unwrap());
        tx.send(Instant::now()).unwrap();
        other.release().unwrap();
    });
    thread::sleep(Duration::from_millis(300));
    let closed = Instant::now();
    a.close();
    let health = lock.health();
    let granted = rx
        .recv_timeout(patience())
        .expect("the other Client took it");
    t.join().unwrap();
    let gap = granted.saturating_duration_since(closed);
    println!(
        "{}: after close: {health:?}, taken over in {gap:?}",
        b.name()
    );
    assert_eq!(health, Some(LockHealth::Lost), "a hold after close");
    assert!(
        gap < HAND_OFF_BOUND,
        "the closed Client's hold lasted {gap:?}"
    );
    assert_eq!(lock.release(), Err(Error::LockLost));
}

/// With the server frozen (SIGSTOP), every call returns within its documented bound: a try or
/// a release within a few round trips' timeouts, a timed wait within its timeout plus those.
pub fn frozen_server(b: &dyn Backend) {
    if let Some(why) = b.no_server() {
        return println!("{}: SKIPPED frozen_server: {why}", b.name());
    }
    let server = b.start();
    let op = Duration::from_secs(1);
    let opts = Opts {
        op,
        ..Opts::default()
    };
    let a = b.connect(&server.url(), opts);
    let held = a.mutex("frozen-held").unwrap();
    let free = a.mutex("frozen-free").unwrap();
    held.acquire().unwrap();
    server.pause();
    let measure = |what: &str, bound: Duration, f: &dyn Fn()| {
        let t = Instant::now();
        f();
        let took = t.elapsed();
        println!(
            "{}: {what} against a frozen server: {took:?} (bound {bound:?})",
            b.name()
        );
        took < bound + SLACK
    };
    let results = [
        measure("try_lock", 2 * op, &|| {
            let _ = free.acquire_timeout(Duration::ZERO);
        }),
        measure("acquire_timeout(1 s)", op + 2 * op, &|| {
            let _ = free.acquire_timeout(op);
        }),
        measure("release", op, &|| {
            let _ = held.release();
        }),
        measure("close", 2 * op, &|| a.close()),
    ];
    server.resume();
    assert_eq!(results, [true; 4], "calls overran their bounds (see above)");
}

/// Says that `scenario` is skipped on `b`, whose locks no other process shares: never a
/// silent pass.
fn skipped_in_process(b: &dyn Backend, scenario: &str) {
    println!(
        "{}: SKIPPED {scenario}: its holder is another process, and the backend's locks are \
         shared within one process only (a lost hold is staged with its Client's controls \
         instead, see its docs page)",
        b.name()
    );
}

/// Says that `scenario` is skipped on `b`, which does not have `recipe`: never a silent pass.
fn skipped(b: &dyn Backend, scenario: &str, recipe: &str) {
    println!(
        "{}: SKIPPED {scenario}: the backend has no {recipe} (see its docs page)",
        b.name()
    );
}

/// Names and durations that cannot work are refused before any I/O, and none panics.
pub fn bad_input(b: &dyn Backend) {
    let server = b.shared();
    let a = connect(b, &server.url());
    match a.mutex("") {
        Err(Error::InvalidArgument(_) | Error::InvalidPath { .. }) => {}
        other => panic!("an empty name: {:?}", other.map(|_| ())),
    }
    // A long name is refused before I/O or works; either way nothing panics.
    match a.mutex(&"x".repeat(100_000)) {
        Err(Error::InvalidArgument(_) | Error::InvalidPath { .. }) => {}
        Err(e) => panic!("a long name: {e:?}"),
        Ok(lock) => {
            if lock.acquire_timeout(Duration::ZERO).unwrap() {
                lock.release().unwrap();
            }
        }
    }
    assert!(
        a.semaphore("zero-leases", 0).is_err(),
        "a semaphore of no lease"
    );
    if !b.has_semaphore() {
        assert!(
            matches!(a.semaphore("sem", 2), Err(Error::InvalidArgument(_))),
            "a semaphore the backend does not have is refused"
        );
    }
    let lock = a.mutex("bad-input-durations").unwrap();
    assert!(lock.acquire_timeout(Duration::MAX).unwrap());
    assert!(lock.release_timeout(Duration::MAX).is_ok());
}

/// Six threads on three Clients share a semaphore of two leases: never three inside; two
/// leases are held at once and a third is refused until one is given back.
pub fn semaphore_at_most_n(b: &dyn Backend) {
    if !b.has_semaphore() {
        return skipped(b, "semaphore_at_most_n", "semaphore");
    }
    let server = b.shared();
    let log = Arc::new(Log::default());
    let mut threads = Vec::new();
    let conns: Vec<AnyClient> = (0..3).map(|_| connect(b, &server.url())).collect();
    for (c, conn) in conns.iter().enumerate() {
        let sem = Arc::new(conn.semaphore("sem", 2).unwrap());
        for t in 0..2 {
            let (sem, log) = (sem.clone(), log.clone());
            threads.push(thread::spawn(move || {
                let who = c * 10 + t;
                for _ in 0..8 {
                    let lease = sem.acquire_timeout(patience()).unwrap().unwrap();
                    assert_eq!(lease.health(), LockHealth::Held);
                    assert!(!lease.id().is_empty(), "a lease's identity");
                    log.enter(who, Access::Write);
                    thread::sleep(Duration::from_millis(5));
                    log.exit(who, Access::Write);
                    lease.release().unwrap();
                }
            }));
        }
    }
    threads.into_iter().for_each(|t| t.join().unwrap());
    let peak = log.check(2).unwrap();
    assert!(peak >= 1, "no lease was held");
    // Two leases at once on two Clients, and no third.
    let sems: Vec<_> = conns
        .iter()
        .map(|c| c.semaphore("sem", 2).unwrap())
        .collect();
    let first = sems[0]
        .acquire_timeout(patience())
        .unwrap()
        .expect("a first lease");
    let second = sems[1]
        .acquire_timeout(patience())
        .unwrap()
        .expect("a second lease");
    assert_ne!(first.id(), second.id());
    assert!(
        sems[2].try_acquire().unwrap().is_none(),
        "a third lease of two"
    );
    first.release().unwrap();
    let third = sems[2]
        .acquire_timeout(patience())
        .unwrap()
        .expect("the freed lease");
    third.release().unwrap();
    second.release().unwrap();
}

/// Readers share, a writer is alone, and a writer that waits goes before readers that came
/// after it.
pub fn read_write(b: &dyn Backend) {
    if !b.has_read_write() {
        return skipped(b, "read_write", "read-write lock");
    }
    let server = b.shared();
    let log = Arc::new(Log::default());
    let conns: Vec<AnyClient> = (0..2).map(|_| connect(b, &server.url())).collect();
    let mut threads = Vec::new();
    for (c, conn) in conns.iter().enumerate() {
        let rw = Arc::new(conn.read_write_lock("rw").unwrap());
        for t in 0..3 {
            let (rw, log) = (rw.clone(), log.clone());
            threads.push(thread::spawn(move || {
                let who = c * 10 + t;
                for i in 0..6 {
                    let (lock, access) = if (i + t) % 3 == 0 {
                        (rw.write_lock(), Access::Write)
                    } else {
                        (rw.read_lock(), Access::Read)
                    };
                    lock.acquire().unwrap();
                    log.enter(who, access);
                    thread::sleep(Duration::from_millis(3));
                    log.exit(who, access);
                    lock.release().unwrap();
                }
            }));
        }
    }
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(log.check(1), Ok(1));

    // Writer preference: a reader holds, a writer queues, a later reader waits for the writer.
    let (a, w, r) = (&conns[0], &conns[1], connect(b, &server.url()));
    let first = a.read_write_lock("pref").unwrap();
    first.read_lock().acquire().unwrap();
    let writer = w.read_write_lock("pref").unwrap();
    let writer = thread::spawn(move || {
        assert!(writer.write_lock().acquire_timeout(patience()).unwrap());
        let at = Instant::now();
        writer.write_lock().release().unwrap();
        at
    });
    thread::sleep(Duration::from_millis(500));
    let late = r.read_write_lock("pref").unwrap();
    assert!(
        !late
            .read_lock()
            .acquire_timeout(Duration::from_millis(300))
            .unwrap(),
        "a reader went ahead of a waiting writer"
    );
    first.read_lock().release().unwrap();
    writer.join().unwrap();
    assert!(late.read_lock().acquire_timeout(patience()).unwrap());
    late.read_lock().release().unwrap();
}

/// Three latches on three Clients: one leader at a time; when it leaves another leads, with a
/// higher epoch.
pub fn leader_latch(b: &dyn Backend) {
    if !b.has_latch() {
        return skipped(b, "leader_latch", "leader latch");
    }
    let server = b.shared();
    let conns: Vec<_> = (0..3).map(|_| connect(b, &server.url())).collect();
    let mut latches: Vec<_> = conns
        .iter()
        .map(|c| Some(c.leader_latch("election").unwrap()))
        .collect();
    assert!(latches[0]
        .as_ref()
        .unwrap()
        .await_leadership_timeout(Duration::ZERO)
        .is_ok());
    let mut last_epoch = 0;
    for _ in 0..3 {
        wait_for("one leader", || {
            latches
                .iter()
                .flatten()
                .filter(|l| l.has_leadership())
                .count()
                == 1
        });
        thread::sleep(Duration::from_millis(200));
        let leaders: Vec<usize> = (0..latches.len())
            .filter(|&i| latches[i].as_ref().is_some_and(|l| l.has_leadership()))
            .collect();
        assert_eq!(leaders.len(), 1, "leaders: {leaders:?}");
        let leader = latches[leaders[0]].take().unwrap();
        let epoch = leader.epoch().expect("a leader's epoch");
        assert!(epoch > last_epoch, "epoch {epoch} after {last_epoch}");
        last_epoch = epoch;
        leader.close();
    }
}

/// The session timeout of a holder process: short, so that the server frees a silent holder
/// soon.
const WORKER_SESSION: Duration = Duration::from_secs(4);

/// How long after a holder falls silent every backend's server has freed its lock: the session
/// timeout, then as long again for the server's timer to run and the waiter to look.
fn takeover_bound() -> Duration {
    2 * WORKER_SESSION + HAND_OFF_BOUND
}

/// A server restart while one Client holds and another waits, on a server that keeps its locks
/// on disk. No call hangs. The hold either survives (a ZooKeeper session outlives a short
/// restart, a persistent Redis keeps the key: it reads `Held` again) or reads `Lost` (a
/// database session ended). The waiter is
/// served — after a lost hold within the takeover bound, after a surviving hold's release at
/// once — and never while the holder still reads `Held`. A waiter whose wait failed with the
/// connection (its own session ended) tries again, as a caller would.
pub fn server_restart(b: &dyn Backend) {
    if let Some(why) = b.no_server() {
        return println!("{}: SKIPPED server_restart: {why}", b.name());
    }
    let mut server = b.start_durable();
    let opts = Opts {
        session: WORKER_SESSION,
        ..Opts::default()
    };
    let (a, w) = (
        b.connect(&server.url(), opts),
        b.connect(&server.url(), opts),
    );
    let lock = a.mutex("restart").unwrap();
    lock.acquire().unwrap();
    let waiter = w.mutex("restart").unwrap();
    let (tx, granted) = mpsc::channel();
    let t = thread::spawn(move || {
        let mut failures = Vec::new();
        let end = Instant::now() + patience();
        loop {
            match waiter.acquire_timeout(end.saturating_duration_since(Instant::now())) {
                Ok(true) => break,
                Ok(false) => panic!("the waiter was never served (after {failures:?})"),
                Err(e) => {
                    failures.push(e);
                    thread::sleep(Duration::from_millis(100));
                }
            }
        }
        tx.send(Instant::now()).unwrap();
        let released = waiter.release();
        (failures, released)
    });
    thread::sleep(Duration::from_millis(300));
    // A server may free and grant as it shuts down (MariaDB does, session by session): the
    // takeover counts from the restart's start.
    let restarting = Instant::now();
    server.restart();
    let restarted = Instant::now();
    // The hold's fate: `Lost`, or `Held` still once a lost session would have been noticed.
    let survived_after = 2 * WORKER_SESSION + SLACK;
    let mut released_at = None;
    let served = loop {
        if let Ok(at) = granted.try_recv() {
            break at;
        }
        let health = lock.health();
        assert!(
            restarted.elapsed() < patience(),
            "{}: the waiter was not served; the hold reads {health:?}",
            b.name()
        );
        if health == Some(LockHealth::Held)
            && released_at.is_none()
            && restarted.elapsed() > survived_after
        {
            lock.release().unwrap();
            released_at = Some(Instant::now());
        }
        thread::sleep(Duration::from_millis(20));
    };
    // Sampled after the grant was seen: a holder that still thought it held would read `Held`.
    let health_at_grant = lock.health();
    let (failures, released) = t.join().unwrap();
    let since = served.saturating_duration_since(released_at.unwrap_or(restarting));
    println!(
        "{}: hold {}, waiter served {since:?} after the {}, its failed waits {failures:?}",
        b.name(),
        if released_at.is_some() {
            "survived"
        } else {
            "lost"
        },
        if released_at.is_some() {
            "release"
        } else {
            "restart"
        },
    );
    released.unwrap();
    match released_at {
        Some(_) => assert!(
            since < HAND_OFF_BOUND,
            "hand-off after the restart: {since:?}"
        ),
        None => {
            assert_ne!(
                health_at_grant,
                Some(LockHealth::Held),
                "the waiter was served while the holder read Held"
            );
            assert!(
                since < takeover_bound() + SLACK,
                "a lost hold was taken over {since:?} after the restart"
            );
            assert_eq!(lock.release(), Err(Error::LockLost));
        }
    }
}

/// The environment variable that makes this test binary a holder process:
/// `URL NAME` of the lock to hold.
pub const WORKER: &str = "ZKLOCK_CONFORMANCE_WORKER";

/// A holder process (this binary run again as `BACKEND::holder_worker`): holds the lock, says
/// `held TOKEN`, then answers each line on its standard input with `health HEALTH`.
pub fn holder_worker(b: &dyn Backend) {
    let Ok(args) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let (url, name) = args.split_once(' ').unwrap();
    let opts = Opts {
        session: WORKER_SESSION,
        ..Opts::default()
    };
    let conn = b.connect(url, opts);
    let lock = conn.mutex(name).unwrap();
    lock.acquire().unwrap();
    crate::common::worker::say(&format!("held {}", lock.fencing_token().unwrap()));
    for _ in std::io::stdin().lines() {
        crate::common::worker::say(&format!("health {:?}", lock.health()));
    }
}

/// A holder process killed (`kill -9`) or frozen (SIGSTOP) is replaced within the server's
/// stated bound; the frozen one reads `Lost` on waking, and the next token is higher. Where a
/// frozen holder keeps the lock (no server-side timer: file://), it does: a waiter is not
/// served while it is frozen, it reads `Held` on waking, and once killed it is replaced.
pub fn silent_holder(b: &dyn Backend, signal: &str) {
    if b.in_process() {
        return skipped_in_process(b, &format!("silent_holder {signal}"));
    }
    if signal == "-STOP" && b.frozen_holder_keeps_the_lock() {
        return frozen_holder_keeps_the_lock(b);
    }
    let server = b.shared();
    let name = format!("silent{}", signal.to_lowercase());
    let test = format!("{}::holder_worker", b.name());
    let mut worker =
        crate::common::worker::Worker::start(&test, WORKER, &format!("{} {name}", server.url()));
    let token: u64 = worker.expect("held ").parse().unwrap();
    let conn = connect(b, &server.url());
    let lock = conn.mutex(&name).unwrap();
    let silent = Instant::now();
    worker.signal(signal);
    assert!(lock.acquire_timeout(patience()).unwrap());
    let took = silent.elapsed();
    println!(
        "{}: the holder's {signal}, taken over in {took:?}",
        b.name()
    );
    assert!(took < takeover_bound(), "taken over after {took:?}");
    assert!(lock.fencing_token().unwrap() > token, "tokens rise");
    if signal == "-STOP" {
        worker.signal("-CONT");
        worker.tell("health?");
        let health = worker.expect("health ");
        assert_eq!(health, "Some(Lost)", "the frozen holder on waking");
    }
    lock.release().unwrap();
}

/// The frozen holder of a backend without a server-side timer keeps its lock.
fn frozen_holder_keeps_the_lock(b: &dyn Backend) {
    let server = b.shared();
    let test = format!("{}::holder_worker", b.name());
    let mut worker =
        crate::common::worker::Worker::start(&test, WORKER, &format!("{} frozen", server.url()));
    let token: u64 = worker.expect("held ").parse().unwrap();
    let conn = connect(b, &server.url());
    let lock = conn.mutex("frozen").unwrap();
    worker.signal("-STOP");
    assert!(
        !lock.acquire_timeout(Duration::from_secs(2)).unwrap(),
        "a waiter was served while the holder was frozen"
    );
    worker.signal("-CONT");
    worker.tell("health?");
    assert_eq!(
        worker.expect("health "),
        "Some(Held)",
        "the frozen holder on waking"
    );
    let killed = Instant::now();
    worker.signal("-KILL");
    assert!(lock.acquire_timeout(patience()).unwrap());
    println!(
        "{}: the frozen holder kept the lock; once killed, taken over in {:?}",
        b.name(),
        killed.elapsed()
    );
    assert!(lock.fencing_token().unwrap() > token, "tokens rise");
    lock.release().unwrap();
}

/// The environment variable that makes this test binary an exiting holder process: `URL NAME`
/// of the lock to hold until told to exit.
pub const EXIT_WORKER: &str = "ZKLOCK_CONFORMANCE_EXIT_WORKER";

/// The idiomatic program (`exit_worker`): a Client with the default options, a guard held to
/// the end, and nothing else — the guard, the lock and the Client dropped as the function
/// returns, and the process exits.
pub fn exit_worker(b: &dyn Backend) {
    let Ok(args) = std::env::var(EXIT_WORKER) else {
        return; // only as a worker process
    };
    let (url, name) = args.split_once(' ').unwrap();
    let conn = b.connect(url, Opts::default());
    let lock = conn.mutex(name).unwrap();
    let _guard = lock.lock().unwrap();
    crate::common::worker::say("held");
    let _ = std::io::stdin().lines().next();
}

/// A process that returns from its work with the guard and the Client dropped frees the lock
/// as it exits: a waiter of another Client is served within the hand-off bound of the exit,
/// not after the session timeout (30 s by default).
pub fn exit_frees_the_lock(b: &dyn Backend) {
    if b.in_process() {
        return skipped_in_process(b, "exit_frees_the_lock");
    }
    let server = b.shared();
    let test = format!("{}::exit_worker", b.name());
    let mut worker =
        crate::common::worker::Worker::start(&test, EXIT_WORKER, &format!("{} exit", server.url()));
    worker.expect("held");
    let conn = connect(b, &server.url());
    let lock = conn.mutex("exit").unwrap();
    let (tx, granted) = mpsc::channel();
    let waiter = {
        thread::spawn(move || {
            assert!(lock.acquire_timeout(patience()).unwrap());
            tx.send(Instant::now()).unwrap();
            lock.release().unwrap();
        })
    };
    thread::sleep(Duration::from_millis(300));
    let told = Instant::now();
    worker.tell("exit");
    let status = worker.child.wait().unwrap();
    let exited = Instant::now();
    assert!(status.success(), "the worker: {status}");
    let at = granted
        .recv_timeout(patience())
        .expect("the waiter was served");
    waiter.join().unwrap();
    let gap = at.saturating_duration_since(exited);
    println!(
        "{}: served {:?} after the holder was told to return, {gap:?} after its exit",
        b.name(),
        at.saturating_duration_since(told)
    );
    assert!(
        gap < HAND_OFF_BOUND,
        "the lock outlived its process by {gap:?}"
    );
}

/// `drop(guard)` and at once `try_lock()` on another Client: granted, 20 times of 20 (the drop
/// releases in the caller when the server answers).
pub fn drop_then_try_lock(b: &dyn Backend) {
    let server = b.shared();
    let (a, c) = (connect(b, &server.url()), connect(b, &server.url()));
    let (mine, theirs) = (a.mutex("drop-try").unwrap(), c.mutex("drop-try").unwrap());
    let mut granted = 0;
    for _ in 0..20 {
        let guard = mine.lock().unwrap();
        drop(guard);
        if let Some(guard) = theirs.try_lock().unwrap() {
            granted += 1;
            drop(guard);
        }
    }
    println!("{}: {granted} of 20 granted", b.name());
    assert_eq!(granted, 20);
}

/// `Duration::MAX` and `Duration::ZERO` for every option of the URL factory and for every timed
/// call (a bounded wait of 50 ms beside them): refused with `InvalidArgument` or working, never
/// a panic, never a hang. A release given no time may answer `Timeout` and finish in the
/// background; the lock is free for others either way.
pub fn extreme_durations(b: &dyn Backend) {
    let server = b.shared();
    let url = server.url();
    let other = connect(b, &url);
    let builders = [
        (
            "session_timeout(ZERO)",
            AnyClient::builder(&url).session_timeout(Duration::ZERO),
        ),
        (
            "session_timeout(MAX)",
            AnyClient::builder(&url).session_timeout(Duration::MAX),
        ),
        (
            "connect_timeout(ZERO)",
            AnyClient::builder(&url).connect_timeout(Duration::ZERO),
        ),
        (
            "connect_timeout(MAX)",
            AnyClient::builder(&url).connect_timeout(Duration::MAX),
        ),
        (
            "operation_timeout(ZERO)",
            AnyClient::builder(&url).operation_timeout(Duration::ZERO),
        ),
        (
            "operation_timeout(MAX)",
            AnyClient::builder(&url).operation_timeout(Duration::MAX),
        ),
    ];
    for (what, builder) in builders {
        let a = match builder.connect() {
            Err(Error::InvalidArgument(why)) => {
                println!("{}: {what}: refused ({why})", b.name());
                continue;
            }
            Err(e) => panic!("{}: {what}: {e}", b.name()),
            Ok(a) => a,
        };
        println!("{}: {what}: taken", b.name());
        let mine = a.mutex("durations").unwrap();
        let theirs = other.mutex("durations").unwrap();
        for t in [Duration::MAX, Duration::ZERO, Duration::from_secs(1)] {
            assert!(
                mine.acquire_timeout(t).unwrap(),
                "{what}: acquire_timeout({t:?})"
            );
            for wait in [Duration::ZERO, Duration::from_millis(50)] {
                assert!(!theirs.acquire_timeout(wait).unwrap(), "{what}: {wait:?}");
            }
            match mine.release_timeout(t) {
                Ok(()) => {}
                // No time at all: the delete may go on in the background, as documented.
                Err(Error::Timeout) if t.is_zero() => {}
                Err(e) => panic!("{what}: release_timeout({t:?}): {e}"),
            }
            // Free for others (at once, or once the background release is done).
            wait_for("the release", || {
                let free = theirs.acquire_timeout(Duration::ZERO).unwrap();
                if free {
                    theirs.release().unwrap();
                }
                free
            });
        }
        if b.has_semaphore() {
            let pool = a.semaphore("durations-pool", 1).unwrap();
            for t in [Duration::MAX, Duration::ZERO, Duration::from_secs(1)] {
                let lease = pool.acquire_timeout(t).unwrap().expect("a free lease");
                for wait in [Duration::ZERO, Duration::from_millis(50)] {
                    assert!(pool.acquire_timeout(wait).unwrap().is_none(), "{what}");
                }
                lease.release().unwrap();
            }
        }
        let latch = a.leader_latch("durations-latch").unwrap();
        assert!(
            latch.await_leadership_timeout(Duration::MAX).unwrap(),
            "{what}"
        );
        assert!(
            latch.await_leadership_timeout(Duration::ZERO).unwrap(),
            "{what}"
        );
        latch.close();
        a.close();
    }
    other.close();
}

/// How many holds [`release_during_slow_renewal`] releases while a renewal is in flight: 20,
/// or `ZKLOCK_SLOW_RELEASES` (each takes about a renewal period, a second).
#[cfg(feature = "metrics")]
fn slow_releases_count() -> usize {
    std::env::var("ZKLOCK_SLOW_RELEASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20)
}

/// A hold released while its renewal is slow — sent before the release, reaching the server
/// after it, through a proxy that holds what the Client sends while it is slow — is no loss:
/// in each such release the lock's health turns neither `Lost` nor `Suspended` (its events,
/// counted through the `metrics` feature), and the Client stays `Connected`.
pub fn release_during_slow_renewal(b: &dyn Backend) {
    if let Some(why) = b.no_proxy() {
        return println!("{}: SKIPPED release_during_slow_renewal: {why}", b.name());
    }
    slow_releases(b);
}

#[cfg(not(feature = "metrics"))]
fn slow_releases(b: &dyn Backend) {
    println!(
        "{}: SKIPPED release_during_slow_renewal: health events are \
         counted through the `metrics` feature",
        b.name()
    );
}

#[cfg(feature = "metrics")]
fn slow_releases(b: &dyn Backend) {
    use crate::slow::SlowProxy;
    use zklock::ConnectionState;

    let server = b.shared();
    let port = server
        .port()
        .expect("a server a proxy can stand in front of");
    let proxy = SlowProxy::start(port);
    let url = server.url().replacen(
        &format!("127.0.0.1:{port}"),
        &format!("127.0.0.1:{}", proxy.port()),
        1,
    );
    // Renewals every second or so (each backend's share of the session timeout), each held
    // 100 ms: far within every backend's bound for a renewal (a sixth of the session timeout
    // on Redis and PostgreSQL), also on a loaded machine.
    let opts = Opts {
        session: Duration::from_secs(3),
        op: Duration::from_secs(5),
    };
    let client = b.connect(&url, opts);
    let name = format!("slow-renewal-{}", b.name());
    let lock = client.mutex(&name).unwrap();
    let changes = health_changes();
    let slow = Duration::from_millis(100);
    let started = Instant::now();
    let releases = slow_releases_count();
    for i in 0..=releases {
        lock.acquire().unwrap();
        let held = proxy.held();
        proxy.set_delay(slow);
        wait_for("the Client to send something while slow", || {
            proxy.held() > held
        });
        proxy.set_delay(Duration::ZERO);
        // The keeper sent again: it has read the answer to what it sent before the last
        // release, and reported what it found.
        let (lost, suspended) = changes(&name);
        assert_eq!(
            (lost, suspended),
            (0, 0),
            "{}: Lost and Suspended events after {i} releases during slow renewals",
            b.name()
        );
        if i == releases {
            wait_for("the slow bytes forwarded", || proxy.pending() == 0);
        }
        lock.release().unwrap();
        assert_eq!(
            client.state(),
            ConnectionState::Connected,
            "{}: after {} releases during slow renewals",
            b.name(),
            i + 1
        );
    }
    println!(
        "{}: {releases} releases during slow renewals in {:?}: no Lost, no Suspended",
        b.name(),
        started.elapsed()
    );
}

/// Counts the health events of a lock, by its name: `(lost, suspended)`.
#[cfg(feature = "metrics")]
pub fn health_changes() -> impl Fn(&str) -> (u64, u64) {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use std::sync::OnceLock;

    static SNAPSHOTS: OnceLock<Snapshotter> = OnceLock::new();
    let snapshots = SNAPSHOTS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other metrics recorder in this test binary");
        snapshotter
    });
    move |name: &str| {
        let (mut lost, mut suspended) = (0, 0);
        for (key, _, _, value) in snapshots.snapshot().into_vec() {
            let key = key.key();
            let label = |l: &str| {
                key.labels()
                    .find(|x| x.key() == l)
                    .map(|x| x.value().to_owned())
                    .unwrap_or_default()
            };
            if key.name() != "zklock_health_changes_total" || !label("path").ends_with(name) {
                continue;
            }
            let DebugValue::Counter(n) = value else {
                continue;
            };
            match label("to").as_str() {
                "lost" => lost += n,
                "suspended" => suspended += n,
                _ => {}
            }
        }
        (lost, suspended)
    }
}
