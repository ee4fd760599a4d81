//! `PgXactLock`: an advisory lock inside the caller's own transaction, on the caller's own
//! `postgres` / `tokio-postgres` connection, through a real PgBouncer in transaction mode (the
//! pooler that session locks refuse): it excludes, it is freed by commit and by rollback, a
//! timeout leaves the transaction usable, and the fencing token rises across holders of
//! either kind.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use common::patience;
use postgres_sync::{Client, NoTls};

use zklock::postgres::{PgMutex, PgXactLock};
use zklock::testing::{FencedRegister, TestingPgBouncer, TestingPostgres};
use zklock::{Error, PgClient};

fn connect(bouncer: &TestingPgBouncer) -> Client {
    Client::connect(&bouncer.key_value(), NoTls).expect("connect through PgBouncer")
}

/// A short wait, for the cases that must time out.
const SHORT: Duration = Duration::from_millis(300);

/// Where the workers of [`run_workers`] meet while they hold their first lock: all have
/// entered before any writes, then they write one at a time in the order of their tokens (so
/// the register accepts every write: none is below one accepted before), then all exit. Every
/// write then falls inside every other holder's tenure, and the checker must see overlaps.
struct Meeting {
    all: Barrier,
    tokens: Mutex<Vec<u64>>,
    turn: AtomicUsize,
}

impl Meeting {
    fn new(workers: usize) -> Arc<Meeting> {
        Arc::new(Meeting {
            all: Barrier::new(workers),
            tokens: Mutex::new(Vec::new()),
            turn: AtomicUsize::new(0),
        })
    }

    /// Writes through `write` once every worker has entered and those with lower tokens have
    /// written; returns once every worker has written.
    fn write_in_turn(&self, token: u64, write: impl FnOnce()) {
        self.tokens.lock().unwrap().push(token);
        self.all.wait();
        let rank = self
            .tokens
            .lock()
            .unwrap()
            .iter()
            .filter(|&&t| t < token)
            .count();
        let deadline = std::time::Instant::now() + patience();
        while self.turn.load(Ordering::SeqCst) != rank {
            assert!(
                std::time::Instant::now() < deadline,
                "turn {rank} never came"
            );
            thread::sleep(Duration::from_millis(1));
        }
        write();
        self.turn.fetch_add(1, Ordering::SeqCst);
        self.all.wait();
    }
}

/// Workers that each take `name(w)` in a transaction of their own through the pooler and
/// write to the fenced register with the lock's token while they hold it: the register's log
/// of enters, writes and exits is the checker. With `meet`, the first holds of the workers
/// meet (see [`Meeting`]), so holders of different locks certainly overlap.
fn run_workers(
    bouncer: &TestingPgBouncer,
    register: &FencedRegister,
    name: fn(usize) -> String,
    meet: Option<Arc<Meeting>>,
) -> zklock::testing::FenceReport {
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let mut db = connect(bouncer);
            let mut fence = register.client().unwrap();
            let meet = meet.clone();
            thread::spawn(move || {
                let me = format!("w{w}");
                for i in 0..12 {
                    let mut tx = db.transaction().unwrap();
                    let lock = PgXactLock::acquire(&mut tx, &name(w), patience())
                        .unwrap()
                        .expect("granted within the patience");
                    let token = lock.fencing_token().expect("a token");
                    fence.enter(token, &me).unwrap();
                    match (i, &meet) {
                        (0, Some(meet)) => meet.write_in_turn(token, || {
                            fence.write(token, &me, &i.to_string()).unwrap();
                        }),
                        _ => {
                            fence.write(token, &me, &i.to_string()).unwrap();
                        }
                    }
                    thread::sleep(Duration::from_millis(5));
                    fence.exit(token, &me).unwrap();
                    // Half the holds end with a commit, half with a rollback.
                    if i % 2 == 0 {
                        tx.commit().unwrap();
                    } else {
                        tx.rollback().unwrap();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    register.check()
}

#[test]
fn holders_through_a_transaction_mode_pooler_never_overlap_and_tokens_rise() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    let register = FencedRegister::start().unwrap();
    let report = run_workers(&bouncer, &register, |_| "ledger".to_owned(), None);
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.rejected(), 0, "every token above the last: {report}");
}

/// The checker above can fail: the same workers, each on a lock of its own and meeting while
/// they hold it, overlap.
#[test]
fn the_checker_sees_holders_of_different_locks_overlap() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    let register = FencedRegister::start().unwrap();
    let report = run_workers(
        &bouncer,
        &register,
        |w| format!("own-{w}"),
        Some(Meeting::new(3)),
    );
    assert!(!report.is_clean(), "overlaps found: {report}");
}

#[test]
fn commit_frees_the_lock_and_a_timeout_leaves_the_transaction_usable() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    let (mut a, mut b) = (connect(&bouncer), connect(&bouncer));
    let mut ta = a.transaction().unwrap();
    let held = PgXactLock::acquire(&mut ta, "books", SHORT).unwrap();
    assert!(held.is_some());

    let mut tb = b.transaction().unwrap();
    tb.batch_execute("SET LOCAL lock_timeout = '7s'").unwrap();
    assert_eq!(PgXactLock::acquire(&mut tb, "books", SHORT).unwrap(), None);
    assert_eq!(
        PgXactLock::acquire(&mut tb, "books", Duration::ZERO).unwrap(),
        None
    );
    // The timed-out wait left the transaction as it was: usable, its own lock_timeout back.
    let row = tb.query_one("SHOW lock_timeout", &[]).unwrap();
    assert_eq!(row.get::<_, String>(0), "7s");
    assert_eq!(tb.query_one("SELECT 1", &[]).unwrap().get::<_, i32>(0), 1);

    // A shorter statement_timeout ends the wait first, as an error; the transaction goes on.
    tb.batch_execute("SET LOCAL statement_timeout = '200ms'")
        .unwrap();
    let e = PgXactLock::acquire(&mut tb, "books", patience()).unwrap_err();
    assert!(
        matches!(e, Error::Postgres(ref why) if why.contains("57014")),
        "{e:?}"
    );
    tb.batch_execute("SET LOCAL statement_timeout = 0").unwrap();
    assert_eq!(tb.query_one("SELECT 1", &[]).unwrap().get::<_, i32>(0), 1);

    ta.commit().unwrap();
    let lock = PgXactLock::acquire(&mut tb, "books", SHORT)
        .unwrap()
        .expect("freed by the commit");
    assert_eq!(lock.name(), "books");
    let row = tb.query_one("SHOW lock_timeout", &[]).unwrap();
    assert_eq!(row.get::<_, String>(0), "7s");
    tb.commit().unwrap();
}

#[test]
fn rollback_and_a_dropped_transaction_free_the_lock() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    let (mut a, mut b) = (connect(&bouncer), connect(&bouncer));
    let try_b = |b: &mut Client| {
        let mut tb = b.transaction().unwrap();
        let got = PgXactLock::acquire(&mut tb, "rolled", Duration::ZERO).unwrap();
        tb.rollback().unwrap();
        got.is_some()
    };

    let mut ta = a.transaction().unwrap();
    assert!(PgXactLock::acquire(&mut ta, "rolled", SHORT)
        .unwrap()
        .is_some());
    assert!(!try_b(&mut b));
    ta.rollback().unwrap();
    assert!(try_b(&mut b), "freed by the rollback");

    let mut ta = a.transaction().unwrap();
    assert!(PgXactLock::acquire(&mut ta, "rolled", SHORT)
        .unwrap()
        .is_some());
    assert!(!try_b(&mut b));
    drop(ta);
    assert!(try_b(&mut b), "freed when the transaction is dropped");
}

#[test]
fn a_waiter_is_granted_when_the_holder_commits() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    let mut a = connect(&bouncer);
    let mut b = connect(&bouncer);
    let mut ta = a.transaction().unwrap();
    let first = PgXactLock::acquire(&mut ta, "queue", SHORT)
        .unwrap()
        .unwrap();
    let ready = Arc::new(Barrier::new(2));
    let waiter = {
        let ready = ready.clone();
        thread::spawn(move || {
            let mut tb = b.transaction().unwrap();
            ready.wait();
            let got = PgXactLock::acquire(&mut tb, "queue", patience()).unwrap();
            tb.commit().unwrap();
            got
        })
    };
    ready.wait();
    common::wait_for("the waiter to queue", || {
        server
            .advisory_lock("queue")
            .map(|(_, waiting)| !waiting.is_empty())
            .unwrap_or(false)
    });
    ta.commit().unwrap();
    let second = waiter.join().unwrap().expect("granted after the commit");
    assert!(second.fencing_token() > first.fencing_token());
}

#[test]
fn tokens_rise_across_session_and_transaction_holders_of_one_name() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    // Session locks cannot go through the pooler: the mutex connects to the server itself.
    let pg = PgClient::connect(&server.url()).unwrap();
    let mutex = PgMutex::new(&pg, "mixed").unwrap();
    let mut db = connect(&bouncer);
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let guard = mutex.try_lock_for(patience()).unwrap().expect("granted");
        tokens.push(guard.fencing_token());
        // The mutex excludes the transaction lock of the same name, and the other way round.
        let mut tx = db.transaction().unwrap();
        assert_eq!(PgXactLock::acquire(&mut tx, "mixed", SHORT).unwrap(), None);
        tx.rollback().unwrap();
        guard.release().unwrap();

        let mut tx = db.transaction().unwrap();
        let lock = PgXactLock::acquire(&mut tx, "mixed", SHORT)
            .unwrap()
            .unwrap();
        tokens.push(lock.fencing_token().unwrap());
        assert!(mutex.try_lock().unwrap().is_none());
        tx.commit().unwrap();
    }
    println!("tokens: {tokens:?}");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[test]
fn a_transaction_that_wrote_first_gets_no_token() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    let mut db = connect(&bouncer);
    db.batch_execute("CREATE TABLE t (x int)").unwrap();
    let mut tx = db.transaction().unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).unwrap();
    let lock = PgXactLock::acquire(&mut tx, "late", SHORT)
        .unwrap()
        .unwrap();
    assert_eq!(lock.fencing_token(), None);
    tx.commit().unwrap();
}

#[test]
fn outside_a_transaction_and_bad_names_are_refused() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    let mut db = connect(&bouncer);
    let e = PgXactLock::acquire(&mut db, "autocommit", SHORT).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    for name in ["", "a\0b"] {
        let mut tx = db.transaction().unwrap();
        let e = PgXactLock::acquire(&mut tx, name, SHORT).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        tx.rollback().unwrap();
    }
    // A transaction that failed is named, not retried.
    let mut tx = db.transaction().unwrap();
    assert!(tx.batch_execute("SELECT 1/0").is_err());
    let e = PgXactLock::acquire(&mut tx, "failed", SHORT).unwrap_err();
    assert!(
        matches!(e, Error::Postgres(ref why) if why.contains("25P02")),
        "{e:?}"
    );
    tx.rollback().unwrap();
    // Durations at the ends of their range are accepted.
    let mut tx = db.transaction().unwrap();
    assert!(PgXactLock::acquire(&mut tx, "ends", Duration::MAX)
        .unwrap()
        .is_some());
    assert!(
        PgXactLock::acquire(&mut tx, "ends2", Duration::from_nanos(1))
            .unwrap()
            .is_some()
    );
}

#[test]
fn tokio_postgres_transactions_take_the_same_lock() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connect = || async {
            let (client, connection) = tokio_postgres::connect(&bouncer.key_value(), NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client
        };
        let (mut a, mut b) = (connect().await, connect().await);
        let ta = a.transaction().await.unwrap();
        let lock = PgXactLock::acquire_async(&ta, "async", SHORT)
            .await
            .unwrap()
            .expect("granted");
        assert!(lock.fencing_token().is_some());
        // Re-entrant within its transaction, without a token the second time.
        let again = PgXactLock::acquire_async(&ta, "async", Duration::ZERO)
            .await
            .unwrap()
            .expect("granted again");
        assert_eq!(again.fencing_token(), None);
        let tb = b.transaction().await.unwrap();
        assert_eq!(
            PgXactLock::acquire_async(&tb, "async", SHORT)
                .await
                .unwrap(),
            None
        );
        ta.commit().await.unwrap();
        let next = PgXactLock::acquire_async(&tb, "async", SHORT)
            .await
            .unwrap()
            .expect("freed by the commit");
        assert!(next.fencing_token() > lock.fencing_token());
        tb.commit().await.unwrap();
    });
}
