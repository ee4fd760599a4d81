//! Writes guarded by a hold: the caller's statements run on the session that holds the
//! advisory lock, in one transaction that begins with a check that the session still holds
//! it, so they commit only while the hold is the caller's.
//!
//! A session-level advisory lock lives exactly as long as its session unless the session lets
//! go of it, and no other session can take it from it. So once the check, inside the
//! transaction, has seen the lock held by this very session, the hold can end before the
//! commit only with the session, and a session's end aborts its open transaction: what commits
//! was written under the hold. A holder that stood still past its session timeout (the server
//! ended its session and a competitor took the lock) is refused: before any I/O when its hold
//! reads `Lost` (its lease has run out), else by the server (its session is gone, so the
//! transaction cannot even begin).

use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_postgres::types::{ToSql, Type};

use super::advisory::Key;
use super::client::Inner;
use super::error::error;
use super::mutex::PgMutex;
use super::read_write::{PgReadLock, PgWriteLock};
use super::session::Session;
use super::sql;
use super::values::{param, values, PgRows, PgStatement};
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::lease::{boot_clock, LocalLease};

/// The transaction's steps that can go wrong, for the error each gives.
enum Failed {
    /// The session ended, or does not hold the lock: nothing was applied and the hold is gone.
    Hold(Error),
    /// A statement of the caller's failed (`index`), or the commit did (`index` = the number
    /// of statements): rolled back, the hold kept.
    Statement(usize, String, Error),
    /// The commit's answer did not come: applied or not, nobody knows.
    Unknown,
    /// Anything else on the way (a server error to the check): the transaction rolled back.
    Other(Error),
}

/// Runs `statements` on `session`, the holder of `key` of the lock `name`, in one transaction
/// that commits only while `session` holds the lock. The whole call takes at most twice the
/// operation timeout; each statement at most the operation timeout on the server.
fn transaction(
    inner: &Inner,
    name: &str,
    key: Key,
    session: &Arc<Session>,
    lease: &LocalLease,
    statements: &[PgStatement],
) -> Result<Vec<PgRows>> {
    for statement in statements {
        statement.check()?;
    }
    if session.ended() {
        return Err(Error::hold_lost(name, Error::ConnectionLoss));
    }
    let limit = inner.operation_timeout;
    let committing = AtomicBool::new(false);
    let run = run(inner, name, key, session, lease, statements, &committing);
    let outcome = inner.block_on(async {
        match tokio::time::timeout(limit.saturating_mul(2), run).await {
            Ok(outcome) => Ok(outcome),
            Err(_) => Ok(Err(if committing.load(Ordering::SeqCst) {
                Failed::Unknown
            } else {
                Failed::Hold(Error::Timeout)
            })),
        }
    })?;
    match outcome {
        Ok(rows) => Ok(rows),
        Err(failed) => {
            if matches!(failed, Failed::Hold(_) | Failed::Unknown) {
                // Whatever the session was doing, it ends now: the server aborts an open
                // transaction and frees the lock as it reads the end; the hold reads `Lost`.
                session.end();
            }
            Err(match failed {
                Failed::Hold(source) => Error::hold_lost(name, source),
                Failed::Statement(index, op, source) => Error::TransactionFailed {
                    index,
                    op,
                    source: Box::new(source),
                },
                Failed::Other(e) => e,
                Failed::Unknown => Error::ConnectionLoss,
            })
        }
    }
}

/// The transaction: `BEGIN`, the check, the caller's statements, `COMMIT`; a rollback after a
/// failed statement. `committing` turns true as the commit is sent.
async fn run(
    inner: &Inner,
    name: &str,
    key: Key,
    session: &Session,
    lease: &LocalLease,
    statements: &[PgStatement],
    committing: &AtomicBool,
) -> std::result::Result<Vec<PgRows>, Failed> {
    // A heartbeat on its way finishes first (within its own bound); later ones are skipped
    // while the transaction runs.
    let _turn = session.turn.lock().await;
    let on_the_way = |e: tokio_postgres::Error| match error(&e, false) {
        Error::ConnectionLoss => Failed::Hold(Error::ConnectionLoss),
        other => Failed::Other(other),
    };
    simple(session, "BEGIN").await.map_err(on_the_way)?;
    let sent = boot_clock();
    let mode = if key.sql.function.ends_with("_shared") {
        "ShareLock"
    } else {
        "ExclusiveLock"
    };
    let ms = inner
        .operation_timeout
        .as_millis()
        .clamp(1, i32::MAX as u128)
        .to_string();
    let checked = {
        let name: &(dyn ToSql + Sync) = &name;
        let mode: &(dyn ToSql + Sync) = &mode;
        let ms: &(dyn ToSql + Sync) = &ms;
        let params = [
            (&session.marker as &(dyn ToSql + Sync), Type::INT8),
            (name, Type::TEXT),
            (&key.seed as &(dyn ToSql + Sync), Type::INT8),
            (mode, Type::TEXT),
            (ms, Type::TEXT),
        ];
        let rows = pin!(session.query(sql::GUARD, &params));
        session.drive(rows).await.map_err(on_the_way)?
    };
    let held = checked
        .first()
        .ok_or_else(|| Failed::Other(Error::Postgres("the guard's check returned no row".into())))
        .and_then(|row| {
            session.check_own(row, 0, 1).map_err(Failed::Other)?;
            Ok(row.try_get::<_, bool>(2).unwrap_or(false))
        });
    match held {
        Ok(true) => {}
        Ok(false) => {
            rollback(session).await;
            return Err(Failed::Hold(Error::Postgres(format!(
                "the session no longer holds the advisory lock {name:?}"
            ))));
        }
        Err(e) => {
            rollback(session).await;
            return Err(e);
        }
    }
    // An answer on the holding session renews the hold, as a heartbeat's would.
    lease.heard_at(sent);
    inner.states.heard(sent);
    let mut answers = Vec::with_capacity(statements.len());
    for (index, statement) in statements.iter().enumerate() {
        let sent = boot_clock();
        match one(session, statement).await {
            Ok(rows) => {
                lease.heard_at(sent);
                answers.push(rows);
            }
            Err(Error::ConnectionLoss) => return Err(Failed::Hold(Error::ConnectionLoss)),
            Err(e) => {
                rollback(session).await;
                return Err(Failed::Statement(index, statement.shown(), e));
            }
        }
    }
    committing.store(true, Ordering::SeqCst);
    match simple(session, "COMMIT").await {
        Ok(()) => Ok(answers),
        Err(e) => match error(&e, false) {
            Error::ConnectionLoss => Err(Failed::Unknown),
            // The server refused the commit (a deferred constraint, a serialization failure):
            // the transaction rolled back.
            other => Err(Failed::Statement(statements.len(), "COMMIT".into(), other)),
        },
    }
}

/// One statement of the caller's: prepared (the server says its parameters' types), bound,
/// run; its rows read.
async fn one(session: &Session, statement: &PgStatement) -> Result<PgRows> {
    let client = &session.client;
    let prepared = {
        let prepare = pin!(client.prepare(statement.sql()));
        session.drive(prepare).await.map_err(|e| error(&e, false))?
    };
    let types = prepared.params();
    if types.len() != statement.params().len() {
        return Err(Error::invalid(format!(
            "the statement has {} parameters, and {} values were bound",
            types.len(),
            statement.params().len()
        )));
    }
    let bound = statement
        .params()
        .iter()
        .zip(types)
        .map(|(value, ty)| param(value, ty))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(Error::invalid)?;
    let refs: Vec<&(dyn ToSql + Sync)> = bound
        .iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect();
    if prepared.columns().is_empty() {
        let run = pin!(client.execute(&prepared, &refs));
        let affected = session.drive(run).await.map_err(|e| error(&e, false))?;
        return Ok(PgRows::new(affected, Vec::new()));
    }
    let run = pin!(client.query(&prepared, &refs));
    let rows = session.drive(run).await.map_err(|e| error(&e, false))?;
    let read = rows
        .iter()
        .map(values)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(Error::Postgres)?;
    Ok(PgRows::new(read.len() as u64, read))
}

/// A statement without parameters or rows (`BEGIN`, `COMMIT`, `ROLLBACK`).
async fn simple(session: &Session, sql: &str) -> std::result::Result<(), tokio_postgres::Error> {
    let run = pin!(session.client.batch_execute(sql));
    session.drive(run).await
}

/// Rolls the transaction back (within the call's bound); a rollback that fails ends the
/// session, which aborts the transaction on the server all the same.
async fn rollback(session: &Session) {
    if let Err(e) = simple(session, "ROLLBACK").await {
        tracing::debug!("zklock: a guarded transaction's rollback failed ({e}): its session ends");
        session.end();
    }
}

/// A guarded transaction on the hold `hold` of the lock `name`: [`Error::NotOwner`] before any
/// I/O without a hold, [`Error::HoldLost`] before any I/O for one that reads `Lost`.
fn held(mutex: &PgMutex, statements: &[PgStatement]) -> Result<Vec<PgRows>> {
    let (inner, name, key, hold) = mutex.guarded_hold();
    let (session, lease, health) = hold.ok_or(Error::NotOwner)?;
    if health == LockHealth::Lost {
        return Err(Error::hold_lost(name, Error::LockLost));
    }
    transaction(inner, name, key, &session, &lease, statements)
}

impl PgMutex {
    /// Runs `statements` on the session that holds the lock for the calling thread, as one
    /// transaction that commits only while that session holds the lock: it begins with a
    /// check, on the server, that the session holds it. A holder that stood still past its
    /// session timeout (a long pause, a frozen VM) and then writes cannot overwrite what the
    /// lock's next holder wrote: the write is refused. Each statement's rows come back in
    /// order.
    ///
    /// The session's own lock cannot end between the check and the commit without the session
    /// ending, which aborts the transaction: so what commits was written under the hold. A
    /// statement must not end the transaction itself (`COMMIT`, `ROLLBACK`, …: refused before
    /// any I/O).
    ///
    /// # Blocking and errors
    /// At most twice the operation timeout; the server ends any one statement after the
    /// operation timeout (`statement_timeout`, `lock_timeout`, set for the transaction only).
    /// [`Error::NotOwner`] before any I/O if the calling thread does not hold the lock;
    /// [`Error::InvalidArgument`] before any I/O for SQL that is empty, holds NUL or ends the
    /// transaction. [`Error::HoldLost`] if the hold is gone, with nothing applied: before any
    /// I/O when it reads `Lost` (source [`Error::LockLost`]), else when its session has ended
    /// ([`Error::ConnectionLoss`]) or no longer holds the lock ([`Error::Postgres`]), or the
    /// transaction did not finish in its time ([`Error::Timeout`]: the session is ended, which
    /// aborts it, and the hold reads `Lost`). [`Error::TransactionFailed`] when a statement
    /// failed (`index` in `statements`; `index` = `statements.len()` for a refused commit):
    /// the transaction is rolled back and the hold kept. [`Error::ConnectionLoss`] when the
    /// commit's answer was lost: whether it committed is unknown; the session is ended and the
    /// hold reads `Lost`.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::postgres::{PgMutex, PgStatement};
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::PgClient::connect("postgres://app@127.0.0.1/app")?;
    /// let mutex = PgMutex::new(&client, "ledger")?;
    /// mutex.acquire()?;
    /// let write = PgStatement::new("UPDATE ledger SET balance = $1 WHERE id = 1").bind(100);
    /// match mutex.guarded_transaction(&[write]) {
    ///     Ok(_) => {}
    ///     Err(zklock::Error::HoldLost { .. }) => println!("lost the lock: nothing written"),
    ///     Err(e) => return Err(e),
    /// }
    /// # mutex.release()?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_transaction(&self, statements: &[PgStatement]) -> Result<Vec<PgRows>> {
        held(self, statements)
    }
}

impl PgReadLock {
    /// As [`PgMutex::guarded_transaction`], for the calling thread's read hold: the statements
    /// commit only while the read hold lives (no writer can hold the lock meanwhile).
    ///
    /// # Blocking and errors
    /// As [`PgMutex::guarded_transaction`].
    ///
    /// # Example
    /// ```no_run
    /// use zklock::postgres::{PgReadWriteLock, PgStatement};
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::PgClient::connect("postgres://app@127.0.0.1/app")?;
    /// let rw = PgReadWriteLock::new(&client, "catalogue")?;
    /// let _reading = rw.read_lock().lock()?;
    /// rw.read_lock()
    ///     .guarded_transaction(&[PgStatement::new("INSERT INTO readers VALUES (1)")])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_transaction(&self, statements: &[PgStatement]) -> Result<Vec<PgRows>> {
        self.mutex().guarded_transaction(statements)
    }
}

impl PgWriteLock {
    /// As [`PgMutex::guarded_transaction`], for the calling thread's write hold.
    ///
    /// # Blocking and errors
    /// As [`PgMutex::guarded_transaction`].
    ///
    /// # Example
    /// ```no_run
    /// use zklock::postgres::{PgReadWriteLock, PgStatement};
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::PgClient::connect("postgres://app@127.0.0.1/app")?;
    /// let rw = PgReadWriteLock::new(&client, "catalogue")?;
    /// let _writing = rw.write_lock().lock()?;
    /// rw.write_lock()
    ///     .guarded_transaction(&[PgStatement::new("UPDATE catalogue SET version = version + 1")])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_transaction(&self, statements: &[PgStatement]) -> Result<Vec<PgRows>> {
        self.mutex().guarded_transaction(statements)
    }
}

crate::core::guarded::guard_forms!(
    fn guarded_transaction(&self, statements: &[PgStatement]) -> Result<Vec<PgRows>>;
    "`statements` as one transaction that commits only while the hold lives.";
    example {
        /// # Example
        /// ```no_run
        /// use zklock::postgres::{PgMutex, PgStatement};
        /// # fn main() -> zklock::Result<()> {
        /// let client = zklock::PgClient::connect("postgres://app@127.0.0.1/app")?;
        /// let mutex = PgMutex::new(&client, "ledger")?;
        /// let guard = mutex.lock()?;
        /// guard.guarded_transaction(&[PgStatement::new("DELETE FROM pending")])?;
        /// # Ok(()) }
        /// ```
    };
    PgMutex, PgReadLock, PgWriteLock
);

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;

    /// The server's check, with nothing local in the way: a session that let go of the lock
    /// behind the hold's back is refused by the transaction itself, and nothing is applied.
    #[test]
    fn the_server_refuses_a_write_on_a_session_that_no_longer_holds() {
        let server = crate::testing::TestingPostgres::start().unwrap();
        server
            .sql("CREATE TABLE g (v text); INSERT INTO g VALUES ('none')")
            .unwrap();
        let client = super::super::PgClient::connect(&server.url()).unwrap();
        let mutex = PgMutex::new(&client, "g").unwrap();
        mutex.acquire().unwrap();
        let (_, name, key, hold) = mutex.guarded_hold();
        let (session, lease, _) = hold.unwrap();
        let write = |v: &str| {
            transaction(
                client.inner(),
                name,
                key,
                &session,
                &lease,
                &[PgStatement::new("UPDATE g SET v = $1").bind(v)],
            )
        };
        write("held").unwrap();
        // The lock let go of on the holding session itself, outside zklock.
        client
            .inner()
            .block_on(async {
                simple(&session, "SELECT pg_advisory_unlock_all()")
                    .await
                    .map_err(|e| error(&e, false))
            })
            .unwrap();
        let err = write("stale").unwrap_err();
        assert!(
            matches!(&err, Error::HoldLost { lock, source }
                if lock == "g" && matches!(**source, Error::Postgres(_))),
            "{err:?}"
        );
        assert_eq!(
            server.sql("SELECT v FROM g").unwrap(),
            vec![vec![Some("held".to_owned())]]
        );
        let _ = mutex.release();
        client.close();
    }
}
