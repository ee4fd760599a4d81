//! PostgreSQL writes guarded by a hold (`guarded_transaction`), against a real server: the
//! statements commit while held and return their rows; a failed statement rolls back and
//! keeps the hold; refusals before any I/O; and a holder frozen past its session timeout
//! (SIGSTOP of a worker process, this test binary run again) refused when it wakes and writes
//! through its guard, while the same write through a plain connection (`psql`) lands.
//!
//! `ZKLOCK_GUARDED_ROUNDS` sets how many times the frozen holder is tried (default 3).

mod common;

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::worker::{say, Worker};
use common::{init_logging, timing, wait_for};
use zklock::postgres::{PgMutex, PgReadWriteLock, PgStatement, PgValue};
use zklock::testing::TestingPostgres;
use zklock::{Error, LockHealth, PgClient};

const WORKER: &str = "ZKLOCK_PG_GUARDED_WORKER";
const LOCK: &str = "guarded";
const SESSION: Duration = Duration::from_secs(2);

fn rounds() -> usize {
    std::env::var("ZKLOCK_GUARDED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// A server with the table `register (k text PRIMARY KEY, v text)` holding `('x', 'none')`.
fn server_with_register() -> TestingPostgres {
    let server = TestingPostgres::start().expect("postgres starts");
    server
        .sql("CREATE TABLE register (k text PRIMARY KEY, v text); INSERT INTO register VALUES ('x', 'none')")
        .unwrap();
    server
}

fn register(server: &TestingPostgres) -> String {
    let rows = server.sql("SELECT v FROM register WHERE k = 'x'").unwrap();
    rows[0][0].clone().unwrap_or_default()
}

fn set(v: &str) -> PgStatement {
    PgStatement::new("UPDATE register SET v = $1 WHERE k = $2")
        .bind(v)
        .bind("x")
}

fn client(server: &TestingPostgres, session: Duration) -> PgClient {
    PgClient::builder(&server.url())
        .session_timeout(session)
        .connect()
        .expect("connect")
}

#[test]
fn a_guarded_transaction_commits_while_held_and_returns_its_rows() {
    init_logging();
    let server = server_with_register();
    let c = client(&server, Duration::from_secs(30));
    let mutex = PgMutex::new(&c, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    let answers = guard
        .guarded_transaction(&[
            set("held"),
            PgStatement::new(
                "SELECT v, length(v)::int8, NULL::text, $1::int4 + 1, 'ab'::bytea FROM register",
            )
            .bind(41),
        ])
        .unwrap();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0].affected(), 1);
    assert!(answers[0].rows().is_empty());
    assert_eq!(
        answers[1].rows(),
        [vec![
            PgValue::Text("held".into()),
            PgValue::Int(4),
            PgValue::Null,
            PgValue::Int(42),
            PgValue::Bytes(b"ab".to_vec()),
        ]]
    );
    assert_eq!(register(&server), "held");
    // The hold is the same after it: held, and still excluding another Client.
    assert_eq!(guard.health(), LockHealth::Held);
    let other = client(&server, Duration::from_secs(30));
    assert!(PgMutex::new(&other, LOCK)
        .unwrap()
        .try_lock()
        .unwrap()
        .is_none());

    // The write half and the read half of a read-write lock guard the same way.
    let rw = PgReadWriteLock::new(&c, "guarded-rw").unwrap();
    let writing = rw.write_lock().lock().unwrap();
    writing.guarded_transaction(&[set("writer")]).unwrap();
    drop(writing);
    let reading = rw.read_lock().lock().unwrap();
    let read = reading
        .guarded_transaction(&[PgStatement::new("SELECT v FROM register")])
        .unwrap();
    assert_eq!(read[0].rows(), [vec![PgValue::Text("writer".into())]]);
    drop(reading);
    drop(guard);
    other.close();
    c.close();
}

#[test]
fn a_failed_statement_rolls_back_and_keeps_the_hold() {
    init_logging();
    let server = server_with_register();
    let c = client(&server, Duration::from_secs(30));
    let mutex = PgMutex::new(&c, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    guard.guarded_transaction(&[set("before")]).unwrap();

    // The second statement fails (a duplicate key): the first is not applied either.
    let err = guard
        .guarded_transaction(&[
            set("half"),
            PgStatement::new("INSERT INTO register VALUES ($1, $2)")
                .bind("x")
                .bind("dup"),
        ])
        .unwrap_err();
    match &err {
        Error::TransactionFailed { index, op, source } => {
            assert_eq!(*index, 1);
            assert!(op.starts_with("INSERT INTO register"), "{op}");
            assert!(
                matches!(**source, Error::Postgres(ref m) if m.contains("23505")),
                "{source:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(register(&server), "before");
    // A value that does not fit its parameter, and a count that does not match.
    let err = guard
        .guarded_transaction(&[PgStatement::new(
            "UPDATE register SET v = 'y' WHERE length(v) = $1",
        )
        .bind("four")])
        .unwrap_err();
    assert!(
        matches!(&err, Error::TransactionFailed { index: 0, source, .. }
            if matches!(**source, Error::InvalidArgument(_))),
        "{err:?}"
    );
    let err = guard
        .guarded_transaction(&[PgStatement::new("SELECT $1::text")])
        .unwrap_err();
    assert!(
        matches!(&err, Error::TransactionFailed { index: 0, .. }),
        "{err:?}"
    );
    // The hold is kept, on the server too: the next guarded write lands.
    assert_eq!(guard.health(), LockHealth::Held);
    guard.guarded_transaction(&[set("after")]).unwrap();
    assert_eq!(register(&server), "after");
    let (holders, _) = server.advisory_lock(LOCK).unwrap();
    assert_eq!(holders, vec![mutex.backend_pid().unwrap()]);
    drop(guard);
    c.close();
}

#[test]
fn without_a_live_hold_nothing_is_sent() {
    init_logging();
    let server = server_with_register();
    let c = client(&server, Duration::from_secs(30));
    let mutex = PgMutex::new(&c, LOCK).unwrap();
    // Not held: refused.
    assert_eq!(
        mutex.guarded_transaction(&[set("never")]).unwrap_err(),
        Error::NotOwner
    );
    mutex.acquire().unwrap();
    // Held by another thread of this process: refused there.
    thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(
                mutex.guarded_transaction(&[set("never")]).unwrap_err(),
                Error::NotOwner
            );
        });
    });
    // A statement that would end the guard's transaction, or empty SQL.
    for sql in ["COMMIT", "  rollback", "", "BEGIN"] {
        let err = mutex
            .guarded_transaction(&[set("never"), PgStatement::new(sql)])
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{sql:?}: {err:?}");
    }
    assert_eq!(register(&server), "none");
    // The session ended behind the hold's back: once the hold reads `Lost`, refused before
    // anything is sent.
    let pid = mutex.backend_pid().unwrap();
    assert!(server.terminate_backend(pid).unwrap());
    wait_for("the hold to read Lost", || {
        mutex.health() == Some(LockHealth::Lost)
    });
    let err = mutex.guarded_transaction(&[set("stale")]).unwrap_err();
    assert!(
        matches!(&err, Error::HoldLost { lock, source }
            if lock == LOCK && **source == Error::LockLost),
        "{err:?}"
    );
    assert_eq!(register(&server), "none");
    assert_eq!(mutex.release(), Err(Error::LockLost));
    c.close();
}

/// A transaction that spans several heartbeat periods: the heartbeats due meanwhile are
/// skipped (none lands inside it), its answers renew the hold, and it commits; the hold is
/// kept, on the server too.
#[test]
fn a_transaction_longer_than_a_heartbeat_period_keeps_the_hold() {
    init_logging();
    let server = server_with_register();
    let session = Duration::from_secs(3);
    let c = client(&server, session);
    let mutex = PgMutex::new(&c, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    let mut statements = vec![set("slow")];
    // Five statements of 0.4 s: 2 s in all, two heartbeat periods (a third of 3 s).
    statements.extend((0..5).map(|_| PgStatement::new("SELECT pg_sleep(0.4)::text")));
    guard.guarded_transaction(&statements).unwrap();
    assert_eq!(register(&server), "slow");
    assert_ne!(guard.health(), LockHealth::Lost);
    // The keeper beats again afterwards: the hold reads Held past a whole session timeout.
    let until = Instant::now() + session + session / 2;
    while Instant::now() < until {
        assert_ne!(guard.health(), LockHealth::Lost);
        thread::sleep(Duration::from_millis(100));
    }
    let (holders, _) = server.advisory_lock(LOCK).unwrap();
    assert_eq!(holders, vec![mutex.backend_pid().unwrap()]);
    guard.guarded_transaction(&[set("after")]).unwrap();
    assert_eq!(register(&server), "after");
    drop(guard);
    c.close();
}

/// The server's own check, whether or not the hold reads `Lost` here yet: a write right after
/// the holding session was terminated is refused, and nothing of it is applied.
#[test]
fn the_server_refuses_a_session_that_is_gone() {
    init_logging();
    let server = server_with_register();
    let c = client(&server, Duration::from_secs(30));
    let mutex = PgMutex::new(&c, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    assert!(server
        .terminate_backend(mutex.backend_pid().unwrap())
        .unwrap());
    let err = guard.guarded_transaction(&[set("stale")]).unwrap_err();
    assert!(
        matches!(&err, Error::HoldLost { lock, .. } if lock == LOCK),
        "{err:?}"
    );
    assert_eq!(register(&server), "none");
    drop(guard);
    c.close();
}

/// Against a frozen server (SIGSTOP of the postmaster and every backend) a guarded transaction
/// returns within its bound, twice the operation timeout `O`, refused as the hold lost (its
/// session is ended, which frees the lock once the server runs again); the time is printed.
#[test]
fn a_guarded_transaction_returns_against_a_frozen_server() {
    init_logging();
    let server = server_with_register();
    let op = Duration::from_secs(1);
    let c = PgClient::builder(&server.url())
        .session_timeout(Duration::from_secs(30))
        .operation_timeout(op)
        .connect()
        .expect("connect");
    let mutex = PgMutex::new(&c, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    server.pause().unwrap();
    let started = Instant::now();
    let err = guard.guarded_transaction(&[set("frozen")]).unwrap_err();
    let took = started.elapsed();
    server.resume().unwrap();
    eprintln!(
        "guarded_transaction against a frozen server: {took:?} (bound 2 O = {:?}): {err:?}",
        op * 2
    );
    assert!(
        matches!(&err, Error::HoldLost { source, .. } if **source == Error::Timeout),
        "{err:?}"
    );
    wait_for("the hold to read Lost", || {
        guard.health() == LockHealth::Lost
    });
    assert_eq!(register(&server), "none");
    drop(guard);
    c.close();
}

/// The worker: holds the lock, then answers `guarded` with a write through its guard and
/// `plain` with the same write through a plain connection (`psql`).
#[test]
fn stale_holder_worker() {
    let Ok(url) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let client = PgClient::builder(&url)
        .session_timeout(SESSION)
        .connect()
        .expect("connect");
    let mutex = PgMutex::new(&client, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    say(&format!("held {:?}", guard.health()));
    for line in std::io::stdin().lines() {
        match line.unwrap().as_str() {
            "guarded" => match guard.guarded_transaction(&[set("stale")]) {
                Ok(_) => say("guarded applied"),
                Err(Error::HoldLost { source, .. }) => say(&format!("guarded refused {source:?}")),
                Err(e) => say(&format!("guarded failed {e:?}")),
            },
            "plain" => {
                let out = Command::new("psql")
                    .args([
                        url.as_str(),
                        "-tA",
                        "-v",
                        "ON_ERROR_STOP=1",
                        "-c",
                        "UPDATE register SET v = 'stale' WHERE k = 'x'",
                    ])
                    .output()
                    .expect("psql runs");
                if out.status.success() {
                    say("plain applied");
                } else {
                    say(&format!(
                        "plain failed {}",
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
            _ => break,
        }
    }
    drop(guard);
    client.close();
}

#[test]
fn a_holder_frozen_past_its_session_is_refused_by_its_guard() {
    init_logging();
    let server = server_with_register();
    let admin = client(&server, Duration::from_secs(30));
    let mutex = PgMutex::new(&admin, LOCK).unwrap();
    let rounds = rounds();
    let mut refusals = Vec::new();
    let started = Instant::now();
    for round in 0..rounds {
        let mut worker = Worker::start("stale_holder_worker", WORKER, &server.url());
        assert_eq!(worker.expect("held"), "Held");
        worker.signal("-STOP");
        let stopped = Instant::now();
        // The server ends the frozen holder's silent session (idle_session_timeout); the next
        // holder writes.
        let next = mutex
            .try_lock_for(SESSION * 10 * timing())
            .unwrap()
            .expect("the frozen holder's session ended and its lock went");
        let fresh = format!("round {round}");
        next.guarded_transaction(&[set(&fresh)]).unwrap();
        while stopped.elapsed() < SESSION * 5 / 2 {
            thread::sleep(Duration::from_millis(50));
        }
        // The order waits in the pipe: the holder writes the moment it wakes, before its I/O
        // thread has noticed anything.
        worker.tell("guarded");
        worker.signal("-CONT");
        let answer = worker.expect("guarded");
        assert!(
            answer.starts_with("refused"),
            "round {round}: the woken holder's guarded write was not refused: {answer}"
        );
        assert_eq!(
            register(&server),
            fresh,
            "round {round}: a stale write landed"
        );
        refusals.push(answer);
        // What the guard prevents: the same write through a plain connection overwrites the
        // next holder's.
        worker.tell("plain");
        assert_eq!(worker.expect("plain"), "applied", "round {round}");
        assert_eq!(register(&server), "stale", "round {round}");
        assert_eq!(next.health(), LockHealth::Held);
        drop(next);
        worker.tell("exit");
        let status = worker.child.wait().unwrap();
        assert!(
            status.success(),
            "round {round}: the worker failed: {status}"
        );
    }
    eprintln!(
        "PostgreSQL guarded writes of a holder frozen past its session: {} of {rounds} refused \
         in {:?} ({refusals:?})",
        refusals.len(),
        started.elapsed()
    );
    assert_eq!(refusals.len(), rounds);
    admin.close();
}
