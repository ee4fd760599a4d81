//! The PostgreSQL read-write lock against a real server: readers share, a writer excludes, what
//! the server does with a new reader while a writer waits, downgrade and upgrade, re-entrancy,
//! tokens.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::postgres::client;
use common::{patience, wait_for};

use zklock::postgres::PgReadWriteLock;
use zklock::testing::TestingPostgres;
use zklock::{Error, LockHealth};

/// The modes `pg_locks` shows granted on the key of `name`, sorted.
fn granted_modes(server: &TestingPostgres, name: &str) -> Vec<String> {
    let rows = server
        .sql(&format!(
            "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted \
             AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('{name}', 0) \
             ORDER BY mode"
        ))
        .unwrap();
    rows.into_iter().filter_map(|r| r[0].clone()).collect()
}

#[test]
fn readers_share_and_a_writer_excludes() {
    let server = TestingPostgres::start().unwrap();
    let (a, b) = (client(&server), client(&server));
    let (la, lb) = (
        PgReadWriteLock::new(&a, "rw").unwrap(),
        PgReadWriteLock::new(&b, "rw").unwrap(),
    );
    let ra = la.read_lock().lock().unwrap();
    let rb = lb.read_lock().try_lock().unwrap().expect("readers share");
    assert_eq!(server.advisory_lock("rw").unwrap().0.len(), 2);
    let third = PgReadWriteLock::new(&client(&server), "rw").unwrap();
    assert!(
        third.write_lock().try_lock().unwrap().is_none(),
        "readers hold"
    );
    // This thread reads through `lb`: its write half would wait for ourselves.
    assert!(matches!(
        lb.write_lock().try_lock(),
        Err(Error::WouldDeadlock)
    ));
    assert_eq!(ra.health(), LockHealth::Held);
    ra.release().unwrap();
    rb.release().unwrap();
    let w = lb.write_lock().try_lock().unwrap().expect("free");
    let first = w.fencing_token();
    assert!(
        la.read_lock().try_lock().unwrap().is_none(),
        "a writer holds"
    );
    assert!(
        la.write_lock().try_lock().unwrap().is_none(),
        "a writer holds"
    );
    w.release().unwrap();
    let w = la.write_lock().lock().unwrap();
    assert!(w.fencing_token() > first, "tokens rise");
    w.release().unwrap();
    assert!(la
        .read_lock()
        .lock_sql()
        .contains("pg_advisory_lock_shared(hashtextextended('rw', 0))"));
}

#[test]
fn a_queued_writer_holds_back_new_readers() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let first = PgReadWriteLock::new(&c, "queue").unwrap();
    let reading = first.read_lock().lock().unwrap();
    let (granted_tx, granted) = mpsc::channel();
    let writer = {
        let c = c.clone();
        let granted_tx = granted_tx.clone();
        thread::spawn(move || {
            let lock = PgReadWriteLock::new(&c, "queue").unwrap();
            let guard = lock.write_lock().lock().unwrap();
            granted_tx.send("writer").unwrap();
            thread::sleep(Duration::from_millis(50));
            guard.release().unwrap();
        })
    };
    wait_for("the writer to queue", || {
        server.advisory_lock("queue").unwrap().1.len() == 1
    });
    // Only a reader holds; a writer waits. A new reader:
    let late = PgReadWriteLock::new(&client(&server), "queue").unwrap();
    let tried = late.read_lock().try_lock().unwrap();
    let waited = late
        .read_lock()
        .try_lock_for(Duration::from_millis(500))
        .unwrap();
    println!(
        "a new reader while a reader holds and a writer waits: try_lock {}, \
         try_lock_for(500 ms) {}",
        if tried.is_some() {
            "granted"
        } else {
            "refused"
        },
        if waited.is_some() {
            "granted"
        } else {
            "timed out"
        },
    );
    assert!(tried.is_none() && waited.is_none(), "the writer goes first");
    drop((tried, waited));
    // A reader that queues behind the writer is granted after it.
    let reader = {
        let granted_tx = granted_tx.clone();
        thread::spawn(move || {
            let guard = late.read_lock().lock().unwrap();
            granted_tx.send("reader").unwrap();
            guard.release().unwrap();
        })
    };
    wait_for("the reader to queue", || {
        server.advisory_lock("queue").unwrap().1.len() == 2
    });
    reading.release().unwrap();
    let order: Vec<&str> = (0..2)
        .map(|_| granted.recv_timeout(patience()).unwrap())
        .collect();
    assert_eq!(order, vec!["writer", "reader"]);
    writer.join().unwrap();
    reader.join().unwrap();
}

#[test]
fn a_writer_downgrades_on_its_session_and_an_upgrade_is_refused() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let lock = PgReadWriteLock::new(&c, "grade").unwrap();
    let other = PgReadWriteLock::new(&client(&server), "grade").unwrap();
    lock.write_lock().acquire().unwrap();
    let write_token = lock.write_lock().fencing_token().unwrap();
    lock.read_lock().acquire().unwrap();
    assert!(lock.read_lock().fencing_token().unwrap() > write_token);
    let pid = lock.write_lock().backend_pid().unwrap();
    assert_eq!(lock.read_lock().backend_pid(), Some(pid), "one session");
    assert_eq!(
        granted_modes(&server, "grade"),
        vec!["ExclusiveLock", "ShareLock"]
    );
    lock.write_lock().release().unwrap();
    assert_eq!(granted_modes(&server, "grade"), vec!["ShareLock"]);
    assert_eq!(lock.read_lock().health(), Some(LockHealth::Held));
    let shared = other.read_lock().try_lock().unwrap();
    assert!(shared.is_some(), "downgraded: others read too");
    drop(shared);
    assert!(other.write_lock().try_lock().unwrap().is_none());
    // Holding only the read lock, the write lock would wait for ourselves.
    assert!(matches!(
        lock.write_lock().acquire(),
        Err(Error::WouldDeadlock)
    ));
    lock.read_lock().release().unwrap();
    wait_for("the lock to be free", || {
        server.advisory_lock("grade").unwrap().0.is_empty()
    });
    // Guards dropped in either order let go of both modes.
    for read_first in [true, false] {
        let w = lock.write_lock().lock().unwrap();
        let r = lock.read_lock().lock().unwrap();
        if read_first {
            drop(r);
            drop(w);
        } else {
            drop(w);
            drop(r);
        }
        wait_for("both modes to be let go of", || {
            server.advisory_lock("grade").unwrap().0.is_empty()
        });
    }
    assert!(other.write_lock().try_lock().unwrap().is_some());
}

#[test]
fn both_halves_are_reentrant_per_thread() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let lock = PgReadWriteLock::new(&c, "again").unwrap();
    lock.read_lock().acquire().unwrap();
    lock.read_lock().acquire().unwrap();
    assert_eq!(server.advisory_lock("again").unwrap().0.len(), 1);
    thread::scope(|s| {
        s.spawn(|| {
            assert!(matches!(lock.read_lock().release(), Err(Error::NotOwner)));
            let other = lock.read_lock().try_lock().unwrap().expect("readers share");
            other.release().unwrap();
        });
    });
    lock.read_lock().release().unwrap();
    assert!(lock.read_lock().is_owned_by_current_thread());
    lock.read_lock().release().unwrap();
    lock.write_lock().acquire().unwrap();
    lock.write_lock().acquire().unwrap();
    lock.write_lock().release().unwrap();
    assert!(lock.write_lock().is_owned_by_current_thread());
    lock.write_lock().release().unwrap();
    wait_for("the lock to be free", || {
        server.advisory_lock("again").unwrap().0.is_empty()
    });
    assert!(matches!(
        PgReadWriteLock::new(&c, ""),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn readers_queued_behind_a_writer_are_granted_together() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let lock = PgReadWriteLock::new(&c, "together").unwrap();
    let writing = lock.write_lock().lock().unwrap();
    let (done_tx, done) = std::sync::mpsc::channel::<()>();
    let done = std::sync::Arc::new(std::sync::Mutex::new(done));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (c, done) = (c.clone(), done.clone());
            thread::spawn(move || {
                let lock = PgReadWriteLock::new(&c, "together").unwrap();
                let guard = lock.read_lock().lock().unwrap();
                // Held until the test has seen both readers hold at once.
                let _ = done.lock().unwrap().recv_timeout(patience());
                guard.release().unwrap();
            })
        })
        .collect();
    wait_for("both readers to queue", || {
        server.advisory_lock("together").unwrap().1.len() == 2
    });
    writing.release().unwrap();
    wait_for("both readers to hold at once", || {
        server.advisory_lock("together").unwrap().0.len() == 2
    });
    drop(done_tx);
    for r in readers {
        r.join().unwrap();
    }
}
