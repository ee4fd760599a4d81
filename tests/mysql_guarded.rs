//! MySQL writes guarded by a hold (`guarded_transaction`) against a real MariaDB, in the
//! `GET_LOCK` mode and the table mode: the statements commit while held and return their rows;
//! a failed statement rolls back and keeps the hold; refusals before any I/O; and a holder
//! frozen past its session timeout (SIGSTOP of a worker process, this test binary run again)
//! refused when it wakes and writes through its guard, while the same write through a plain
//! connection (`mariadb`) lands.
//!
//! `ZKLOCK_GUARDED_ROUNDS` sets how many times the frozen holder is tried (default 3).

mod common;

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::worker::{say, Worker};
use common::{init_logging, timing, wait_for};
use zklock::mysql::{MySqlMode, MySqlMutex, MySqlReadWriteLock, MySqlStatement, MySqlValue};
use zklock::testing::TestingMariaDb;
use zklock::{Error, LockHealth, MySqlClient};

const WORKER: &str = "ZKLOCK_MYSQL_GUARDED_WORKER";
const LOCK: &str = "guarded";
const SESSION: Duration = Duration::from_secs(2);

fn rounds() -> usize {
    std::env::var("ZKLOCK_GUARDED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// `sql` through the `mariadb` client on `socket`, as root, in the test database: its output.
fn sql(socket: &Path, sql: &str) -> Result<String, String> {
    let out = Command::new("mariadb")
        .arg("--no-defaults")
        .arg(format!("--socket={}", socket.display()))
        .args(["-uroot", "-N", "-B", "zklock", "-e", sql])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A server with the table `register (k VARCHAR(10) PRIMARY KEY, v TEXT)` holding `('x', 'none')`.
fn server_with_register() -> TestingMariaDb {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    sql(
        &server.socket(),
        "CREATE TABLE register (k VARCHAR(10) PRIMARY KEY, v TEXT) ENGINE=InnoDB; \
         INSERT INTO register VALUES ('x', 'none')",
    )
    .unwrap();
    server
}

fn register(server: &TestingMariaDb) -> String {
    sql(&server.socket(), "SELECT v FROM register WHERE k = 'x'").unwrap()
}

fn set(v: &str) -> MySqlStatement {
    MySqlStatement::new("UPDATE register SET v = ? WHERE k = ?")
        .bind(v)
        .bind("x")
}

fn client(server: &TestingMariaDb, mode: MySqlMode, session: Duration) -> MySqlClient {
    MySqlClient::builder(&server.url())
        .mode(mode)
        .session_timeout(session)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .expect("connect")
}

const MODES: [MySqlMode; 2] = [MySqlMode::GetLock, MySqlMode::Table];

#[test]
fn a_guarded_transaction_commits_while_held_and_rolls_back_a_failed_statement() {
    init_logging();
    let server = server_with_register();
    for mode in MODES {
        let c = client(&server, mode, Duration::from_secs(30));
        let mutex = MySqlMutex::new(&c, LOCK).unwrap();
        let guard = mutex.lock().unwrap();
        let answers = guard
            .guarded_transaction(&[
                set("held"),
                MySqlStatement::new("SELECT v, LENGTH(v), NULL, ? + 1 FROM register").bind(41),
            ])
            .unwrap();
        assert_eq!(answers[0].affected(), 1, "{mode:?}");
        assert_eq!(
            answers[1].rows(),
            [vec![
                MySqlValue::Text("held".into()),
                MySqlValue::Int(4),
                MySqlValue::Null,
                MySqlValue::Int(42),
            ]],
            "{mode:?}"
        );
        assert_eq!(register(&server), "held");

        // The second statement fails (a duplicate key): the first is not applied either.
        let err = guard
            .guarded_transaction(&[
                set("half"),
                MySqlStatement::new("INSERT INTO register VALUES (?, ?)")
                    .bind("x")
                    .bind("dup"),
            ])
            .unwrap_err();
        match &err {
            Error::TransactionFailed { index, op, source } => {
                assert_eq!(*index, 1, "{mode:?}");
                assert!(op.starts_with("INSERT INTO register"), "{op}");
                assert!(
                    matches!(**source, Error::MySql(ref m) if m.contains("1062")),
                    "{source:?}"
                );
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        assert_eq!(register(&server), "held", "{mode:?}");
        // The hold is kept, on the server too: another Client cannot take it, and the next
        // guarded write lands.
        assert_eq!(guard.health(), LockHealth::Held, "{mode:?}");
        let other = client(&server, mode, Duration::from_secs(30));
        assert!(
            MySqlMutex::new(&other, LOCK)
                .unwrap()
                .try_lock()
                .unwrap()
                .is_none(),
            "{mode:?}"
        );
        guard.guarded_transaction(&[set("after")]).unwrap();
        assert_eq!(register(&server), "after", "{mode:?}");
        drop(guard);
        other.close();
        c.close();
    }

    // Both halves of a read-write lock (GET_LOCK only).
    let c = client(&server, MySqlMode::GetLock, Duration::from_secs(30));
    let rw = MySqlReadWriteLock::new(&c, "guarded-rw").unwrap();
    let writing = rw.write_lock().lock().unwrap();
    writing.guarded_transaction(&[set("writer")]).unwrap();
    drop(writing);
    let reading = rw.read_lock().lock().unwrap();
    let read = reading
        .guarded_transaction(&[MySqlStatement::new("SELECT v FROM register")])
        .unwrap();
    assert_eq!(read[0].rows(), [vec![MySqlValue::Text("writer".into())]]);
    drop(reading);
    c.close();
}

#[test]
fn without_a_live_hold_nothing_is_sent() {
    init_logging();
    let server = server_with_register();
    for mode in MODES {
        let c = client(&server, mode, Duration::from_secs(30));
        let mutex = MySqlMutex::new(&c, LOCK).unwrap();
        assert_eq!(
            mutex.guarded_transaction(&[set("never")]).unwrap_err(),
            Error::NotOwner
        );
        mutex.acquire().unwrap();
        thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(
                    mutex.guarded_transaction(&[set("never")]).unwrap_err(),
                    Error::NotOwner
                );
            });
        });
        for statement in ["COMMIT", "create table t (i int)", "", "SET autocommit = 1"] {
            let err = mutex
                .guarded_transaction(&[set("never"), MySqlStatement::new(statement)])
                .unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument(_)),
                "{mode:?} {statement:?}: {err:?}"
            );
        }
        assert_eq!(register(&server), "none", "{mode:?}");
        mutex.release().unwrap();
        c.close();
    }
    // A killed holding session: once the hold reads `Lost`, refused before anything is sent.
    let c = client(&server, MySqlMode::GetLock, Duration::from_secs(30));
    let mutex = MySqlMutex::new(&c, LOCK).unwrap();
    mutex.acquire().unwrap();
    let id = mutex.connection_id().unwrap();
    assert!(server.kill_session(id.into()).unwrap());
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
/// skipped or wait (none lands inside it), and it commits; the hold is kept, on the server
/// too, in both modes.
#[test]
fn a_transaction_longer_than_a_heartbeat_period_keeps_the_hold() {
    init_logging();
    let server = server_with_register();
    let session = Duration::from_secs(3);
    for mode in MODES {
        let c = client(&server, mode, session);
        let mutex = MySqlMutex::new(&c, LOCK).unwrap();
        let guard = mutex.lock().unwrap();
        let mut statements = vec![set(&format!("slow {mode:?}"))];
        // Five statements of 0.4 s: 2 s in all, two heartbeat periods (a third of 3 s).
        statements.extend((0..5).map(|_| MySqlStatement::new("SELECT SLEEP(0.4)")));
        guard.guarded_transaction(&statements).unwrap();
        assert_eq!(register(&server), format!("slow {mode:?}"));
        let until = Instant::now() + session + session / 2;
        while Instant::now() < until {
            assert_ne!(guard.health(), LockHealth::Lost, "{mode:?}");
            thread::sleep(Duration::from_millis(100));
        }
        let other = client(&server, mode, Duration::from_secs(30));
        assert!(
            MySqlMutex::new(&other, LOCK)
                .unwrap()
                .try_lock()
                .unwrap()
                .is_none(),
            "{mode:?}"
        );
        guard.guarded_transaction(&[set("after")]).unwrap();
        drop(guard);
        other.close();
        c.close();
    }
}

/// The server's own check, before the hold reads `Lost` here: a table lease expired by the
/// database (its record's time set past) and a killed `GET_LOCK` session are refused by the
/// transaction, and nothing of it is applied.
#[test]
fn the_server_refuses_a_hold_that_is_gone() {
    init_logging();
    let server = server_with_register();
    let c = client(&server, MySqlMode::Table, Duration::from_secs(30));
    let mutex = MySqlMutex::new(&c, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    sql(
        &server.socket(),
        "UPDATE zklock_lock_record SET expire_time = NOW(6) - INTERVAL 1 SECOND",
    )
    .unwrap();
    assert_eq!(guard.health(), LockHealth::Held);
    let err = guard.guarded_transaction(&[set("stale")]).unwrap_err();
    assert!(
        matches!(&err, Error::HoldLost { lock, source }
            if lock == LOCK && matches!(**source, Error::MySql(_))),
        "{err:?}"
    );
    assert_eq!(register(&server), "none");
    drop(guard);
    c.close();

    let c = client(&server, MySqlMode::GetLock, Duration::from_secs(30));
    let mutex = MySqlMutex::new(&c, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    assert!(server
        .kill_session(mutex.connection_id().unwrap().into())
        .unwrap());
    // Whether the Client has seen the end yet or not, the write is refused.
    let err = guard.guarded_transaction(&[set("stale")]).unwrap_err();
    assert!(
        matches!(&err, Error::HoldLost { lock, .. } if lock == LOCK),
        "{err:?}"
    );
    assert_eq!(register(&server), "none");
    drop(guard);
    c.close();
}

/// Against a frozen server (SIGSTOP) a guarded transaction returns within its bound (the
/// first answer's operation timeout `O`, after at most `O` for a heartbeat on the session),
/// nothing applied; the time is printed.
#[test]
fn a_guarded_transaction_returns_against_a_frozen_server() {
    init_logging();
    let server = server_with_register();
    let op = Duration::from_secs(1);
    for mode in MODES {
        let c = MySqlClient::builder(&server.url())
            .mode(mode)
            .session_timeout(Duration::from_secs(30))
            .connect_timeout(op)
            .operation_timeout(op)
            .connect()
            .expect("connect");
        let mutex = MySqlMutex::new(&c, LOCK).unwrap();
        let guard = mutex.lock().unwrap();
        server.pause().unwrap();
        let started = Instant::now();
        let err = guard.guarded_transaction(&[set("frozen")]).unwrap_err();
        let took = started.elapsed();
        server.resume().unwrap();
        eprintln!(
            "MySQL ({mode:?}) guarded_transaction against a frozen server: {took:?} (O = {op:?}): {err:?}"
        );
        match mode {
            MySqlMode::GetLock => assert!(
                matches!(&err, Error::HoldLost { source, .. } if **source == Error::ConnectionLoss),
                "{err:?}"
            ),
            _ => assert!(
                matches!(&err, Error::TransactionFailed { source, .. } if **source == Error::ConnectionLoss),
                "{err:?}"
            ),
        }
        assert_eq!(register(&server), "none", "{mode:?}");
        drop(guard);
        c.close();
    }
}

/// The worker: holds the lock in the mode given, then answers `guarded` with a write through
/// its guard and `plain` with the same write through a plain connection (`mariadb`).
#[test]
fn stale_holder_worker() {
    let Ok(args) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let mut args = args.split('|');
    let (url, socket, mode) = (
        args.next().unwrap(),
        args.next().unwrap(),
        args.next().unwrap(),
    );
    let mode = if mode == "table" {
        MySqlMode::Table
    } else {
        MySqlMode::GetLock
    };
    let client = MySqlClient::builder(url)
        .mode(mode)
        .session_timeout(SESSION)
        .connect()
        .expect("connect");
    let mutex = MySqlMutex::new(&client, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    say(&format!("held {:?}", guard.health()));
    for line in std::io::stdin().lines() {
        match line.unwrap().as_str() {
            "guarded" => match guard.guarded_transaction(&[set("stale")]) {
                Ok(_) => say("guarded applied"),
                Err(Error::HoldLost { source, .. }) => say(&format!("guarded refused {source:?}")),
                Err(e) => say(&format!("guarded failed {e:?}")),
            },
            "plain" => match sql(
                Path::new(socket),
                "UPDATE register SET v = 'stale' WHERE k = 'x'",
            ) {
                Ok(_) => say("plain applied"),
                Err(e) => say(&format!("plain failed {e}")),
            },
            _ => break,
        }
    }
    drop(guard);
    client.close();
}

fn frozen_holder_refused(mode: MySqlMode) {
    init_logging();
    let server = server_with_register();
    let admin = client(&server, mode, Duration::from_secs(30));
    let mutex = MySqlMutex::new(&admin, LOCK).unwrap();
    let rounds = rounds();
    let mut refusals = Vec::new();
    let started = Instant::now();
    let args = format!(
        "{}|{}|{}",
        server.url(),
        server.socket().display(),
        if mode == MySqlMode::Table {
            "table"
        } else {
            "get_lock"
        }
    );
    for round in 0..rounds {
        let mut worker = Worker::start("stale_holder_worker", WORKER, &args);
        assert_eq!(worker.expect("held"), "Held");
        worker.signal("-STOP");
        let stopped = Instant::now();
        // The server ends the frozen holder's silent session (`wait_timeout`), or its lease
        // expires by the database's clock; the next holder writes.
        let next = mutex
            .try_lock_for(SESSION * 10 * timing())
            .unwrap()
            .expect("the frozen holder's lock went");
        let fresh = format!("round {round}");
        next.guarded_transaction(&[set(&fresh)]).unwrap();
        while stopped.elapsed() < SESSION * 5 / 2 {
            thread::sleep(Duration::from_millis(50));
        }
        // The order waits in the pipe: the holder writes the moment it wakes.
        worker.tell("guarded");
        worker.signal("-CONT");
        let answer = worker.expect("guarded");
        assert!(
            answer.starts_with("refused"),
            "{mode:?} round {round}: the woken holder's guarded write was not refused: {answer}"
        );
        assert_eq!(
            register(&server),
            fresh,
            "{mode:?} round {round}: a stale write landed"
        );
        refusals.push(answer);
        // What the guard prevents: the same write through a plain connection overwrites the
        // next holder's.
        worker.tell("plain");
        assert_eq!(worker.expect("plain"), "applied", "{mode:?} round {round}");
        assert_eq!(register(&server), "stale", "{mode:?} round {round}");
        assert_eq!(next.health(), LockHealth::Held);
        drop(next);
        worker.tell("exit");
        let status = worker.child.wait().unwrap();
        assert!(
            status.success(),
            "{mode:?} round {round}: the worker failed: {status}"
        );
    }
    eprintln!(
        "MySQL ({mode:?}) guarded writes of a holder frozen past its session: {} of {rounds} \
         refused in {:?} ({refusals:?})",
        refusals.len(),
        started.elapsed()
    );
    assert_eq!(refusals.len(), rounds);
    admin.close();
}

#[test]
fn a_get_lock_holder_frozen_past_its_session_is_refused_by_its_guard() {
    frozen_holder_refused(MySqlMode::GetLock);
}

#[test]
fn a_table_lease_holder_frozen_past_its_lease_is_refused_by_its_guard() {
    frozen_holder_refused(MySqlMode::Table);
}
