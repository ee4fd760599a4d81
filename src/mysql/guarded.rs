//! Writes guarded by a hold: the caller's statements run in one transaction that begins with a
//! check that the hold is still the caller's, so they commit only while it is.
//!
//! `GET_LOCK`: the transaction runs on the session that holds the lock, and checks
//! `IS_USED_LOCK(name) = CONNECTION_ID()`. A `GET_LOCK` lock belongs to its session until the
//! session lets go of it or ends, and a session's end rolls its open transaction back: once the
//! check has seen the lock held by this very session, what commits was written under the hold.
//!
//! The table mode: the transaction begins with the keeper's renewal of the hold's lease record
//! (this owner, this version, not expired by the database's clock), and goes on only if it
//! matched the record. The renewal is a write of the row: on one server it locks the row until
//! the transaction ends, and taking an expired lease is an update of that row, so no competitor
//! can take the lease before the commit, whenever the lease's time runs out meanwhile; on
//! Galera, where a row lock reaches no other node, the row is in the transaction's write set, so
//! a take-over certified on another node first fails this transaction's certification (or
//! aborts it while it runs), and one certified here first makes the take-over match nothing.
//!
//! A holder that stood still past its session timeout is refused: before any I/O when its
//! hold reads `Lost`, else by the server (its session is gone, or its record has expired or
//! been taken).

use std::cell::Cell;
use std::sync::Arc;

use mysql::prelude::Queryable;

use super::client::Inner;
use super::mutex::{GuardedHold, MySqlMutex};
use super::read_write::{MySqlReadLock, MySqlWriteLock};
use super::session::{error, Session};
use super::sql::renew_sql;
use super::values::{values, MySqlRows, MySqlStatement};
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::lease::{boot_clock, LocalLease};

/// Where the transaction stands, for the error a broken connection gives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Beginning and checking: nothing of the caller's sent.
    Check,
    /// The caller's statement `i`.
    Statement(usize),
    /// The commit is sent.
    Commit,
}

/// How a transaction that reached the server ended, short of committing.
enum Refused {
    /// The check found the hold gone: rolled back.
    Gone(String),
    /// A statement of the caller's failed: rolled back.
    Failed(usize, Error),
}

/// A guarded transaction on the hold `hold` of the lock `name`: [`Error::NotOwner`] before any
/// I/O without a hold, [`Error::HoldLost`] before any I/O for one that reads `Lost`.
fn held(mutex: &MySqlMutex, statements: &[MySqlStatement]) -> Result<Vec<MySqlRows>> {
    let (inner, name, hold) = mutex.guarded_hold();
    let (hold, lease, health) = hold.ok_or(Error::NotOwner)?;
    for statement in statements {
        statement.check()?;
    }
    if health == LockHealth::Lost {
        return Err(Error::hold_lost(name, Error::LockLost));
    }
    if inner.closed() {
        return Err(Error::Closed);
    }
    match hold {
        GuardedHold::GetLock { session, key } => {
            let check = Check::Select(format!("SELECT IS_USED_LOCK({key}) = CONNECTION_ID()"));
            transaction(inner, name, &session, (&check, true), &lease, statements)
        }
        GuardedHold::Table(record) => {
            // The table mode's sessions count matched rows (`CLIENT_FOUND_ROWS`).
            let check = Check::Update(renew_sql(&record, inner.session_timeout));
            let session = Arc::new(inner.pooled()?);
            let outcome = transaction(inner, name, &session, (&check, false), &lease, statements);
            if let Ok(session) = Arc::try_unwrap(session) {
                inner.put_back(session);
            }
            outcome
        }
    }
}

/// The first statement of a guarded transaction: it finds the hold still the caller's, or not.
enum Check {
    /// A query whose answer is 1 while the hold is the caller's.
    Select(String),
    /// An update that matches one row while the hold is the caller's.
    Update(String),
}

/// `START TRANSACTION`, `check`, `statements`, `COMMIT` on
/// `session`; a rollback after a refused check or a failed statement. Each answer is awaited
/// for at most the operation timeout. `holds` says that `session` is the one that holds the
/// lock (`GET_LOCK`): its end is the hold's, and its answers renew the hold.
fn transaction(
    inner: &Inner,
    name: &str,
    session: &Session,
    (check, holds): (&Check, bool),
    lease: &LocalLease,
    statements: &[MySqlStatement],
) -> Result<Vec<MySqlRows>> {
    if session.ended() {
        return Err(Error::hold_lost(name, Error::ConnectionLoss));
    }
    let op = inner.operation_timeout;
    let stage = Cell::new(Stage::Check);
    let heard = Cell::new(None);
    let answer = session.with(Some(op), op, |c| {
        c.query_drop("START TRANSACTION")?;
        let sent = boot_clock();
        let held = match check {
            Check::Select(sql) => c.query_first::<Option<i64>, _>(sql)?.flatten() == Some(1),
            Check::Update(sql) => {
                c.query_drop(sql)?;
                c.affected_rows() == 1
            }
        };
        if !held {
            c.query_drop("ROLLBACK")?;
            return Ok(Err(Refused::Gone(format!(
                "the server no longer has the hold on {name:?} as this session's"
            ))));
        }
        heard.set(Some(sent));
        let mut answers = Vec::with_capacity(statements.len());
        for (index, statement) in statements.iter().enumerate() {
            stage.set(Stage::Statement(index));
            let sent = boot_clock();
            match one(c, statement) {
                Ok(rows) => {
                    heard.set(Some(sent));
                    answers.push(rows);
                }
                Err(e) => {
                    let mapped = error(&e);
                    if matches!(mapped, Error::ConnectionLoss) {
                        return Err(e);
                    }
                    c.query_drop("ROLLBACK")?;
                    return Ok(Err(Refused::Failed(index, mapped)));
                }
            }
        }
        stage.set(Stage::Commit);
        c.query_drop("COMMIT")?;
        Ok(Ok(answers))
    });
    // The last answer on the holding session, the check's or a statement's, renews a
    // `GET_LOCK` hold from its send time, as a heartbeat's would (a table lease is renewed
    // by its record only).
    let answered = matches!(answer, Ok(Ok(_) | Err(Refused::Failed(..))));
    if let (Some(sent), true, true) = (heard.get(), holds, answered) {
        lease.heard_at(sent);
    }
    match answer {
        Ok(Ok(answers)) => Ok(answers),
        Ok(Err(Refused::Gone(why))) => Err(Error::hold_lost(name, Error::MySql(why))),
        Ok(Err(Refused::Failed(index, source))) => Err(Error::TransactionFailed {
            index,
            op: statements[index].shown(),
            source: Box::new(source),
        }),
        Err(e) => {
            let lost = matches!(e, Error::ConnectionLoss);
            if lost {
                // The session is gone or its state unknown: ended now, so the server rolls
                // back whatever is open and frees what it holds.
                session.end();
            }
            Err(match (stage.get(), lost) {
                (Stage::Commit, true) => Error::ConnectionLoss,
                // A session of the Client's broke before the commit (the table mode): rolled
                // back, and the lease is as it was.
                (Stage::Check, true) if !holds => Error::TransactionFailed {
                    index: 0,
                    op: "the check of the hold".into(),
                    source: Box::new(e),
                },
                (Stage::Statement(index), true) if !holds => Error::TransactionFailed {
                    index,
                    op: statements[index].shown(),
                    source: Box::new(e),
                },
                (Stage::Commit, false) => Error::TransactionFailed {
                    index: statements.len(),
                    op: "COMMIT".into(),
                    source: Box::new(e),
                },
                (_, true) => Error::hold_lost(name, e),
                (_, false) => {
                    // A server error to the beginning, the check or a rollback: the session's
                    // state is not known, so it ends (the server rolls back).
                    session.end();
                    e
                }
            })
        }
    }
}

/// One statement of the caller's, prepared and run; its rows read.
fn one(c: &mut mysql::Conn, statement: &MySqlStatement) -> mysql::Result<MySqlRows> {
    let mut result = c.exec_iter(statement.sql(), statement.driver_params())?;
    // Read before the set is: an `UPDATE`'s count is its OK packet's.
    let changed = result.affected_rows();
    let mut rows = Vec::new();
    if let Some(set) = result.iter() {
        for row in set {
            rows.push(values(row?));
        }
    }
    let affected = if rows.is_empty() {
        changed
    } else {
        rows.len() as u64
    };
    drop(result);
    Ok(MySqlRows::new(affected, rows))
}

impl MySqlMutex {
    /// Runs `statements` as one transaction that commits only while the calling thread's hold
    /// lives: it begins with a check, on the server, that the hold is still the caller's. A
    /// holder that stood still past its session timeout (a long pause, a frozen VM) and then
    /// writes cannot overwrite what the lock's next holder wrote: the write is refused. Each
    /// statement's rows come back in order.
    ///
    /// With `GET_LOCK` the transaction runs on the session that holds the lock and checks
    /// `IS_USED_LOCK(name) = CONNECTION_ID()`: the lock cannot leave that session before the
    /// commit without the session ending, which rolls the transaction back. In the table mode
    /// it runs on one of the Client's sessions and reads the lease record with `SELECT … FOR
    /// UPDATE`: no competitor can take the lease until the transaction ends.
    ///
    /// A statement must not end the transaction or commit it implicitly (`COMMIT`, `SET`,
    /// DDL, `LOCK TABLES`, …: refused before any I/O); each runs as a prepared statement.
    ///
    /// # Blocking and errors
    /// Each answer is awaited for at most the operation timeout. [`Error::NotOwner`] before
    /// any I/O if the calling thread does not hold the lock; [`Error::InvalidArgument`] before
    /// any I/O for a statement refused as above. [`Error::HoldLost`] if the hold is gone, with
    /// nothing applied: before any I/O when it reads `Lost` (source [`Error::LockLost`]), else
    /// when the server no longer has it as the caller's ([`Error::MySql`]) or, with
    /// `GET_LOCK`, the holding session broke before the commit was sent
    /// ([`Error::ConnectionLoss`]; the hold then reads `Lost`). [`Error::TransactionFailed`]
    /// when a statement failed (`index` in `statements`; `statements.len()` for a refused
    /// commit), or in the table mode when the session broke before the commit (source
    /// [`Error::ConnectionLoss`]; `index` 0 during the check): rolled back, the hold kept.
    /// [`Error::ConnectionLoss`] when the commit's answer was lost: whether it committed is
    /// unknown.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::mysql::{MySqlMutex, MySqlStatement};
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::MySqlClient::connect("mysql://app@127.0.0.1/app")?;
    /// let mutex = MySqlMutex::new(&client, "ledger")?;
    /// mutex.acquire()?;
    /// let write = MySqlStatement::new("UPDATE ledger SET balance = ? WHERE id = 1").bind(100);
    /// match mutex.guarded_transaction(&[write]) {
    ///     Ok(_) => {}
    ///     Err(zklock::Error::HoldLost { .. }) => println!("lost the lock: nothing written"),
    ///     Err(e) => return Err(e),
    /// }
    /// # mutex.release()?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_transaction(&self, statements: &[MySqlStatement]) -> Result<Vec<MySqlRows>> {
        held(self, statements)
    }
}

impl MySqlReadLock {
    /// As [`MySqlMutex::guarded_transaction`], for the calling thread's read hold: the
    /// statements commit only while the read hold lives (no writer can hold the lock
    /// meanwhile).
    ///
    /// # Blocking and errors
    /// As [`MySqlMutex::guarded_transaction`].
    ///
    /// # Example
    /// ```no_run
    /// use zklock::mysql::{MySqlReadWriteLock, MySqlStatement};
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::MySqlClient::connect("mysql://app@127.0.0.1/app")?;
    /// let rw = MySqlReadWriteLock::new(&client, "catalogue")?;
    /// let _reading = rw.read_lock().lock()?;
    /// rw.read_lock()
    ///     .guarded_transaction(&[MySqlStatement::new("INSERT INTO readers VALUES (1)")])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_transaction(&self, statements: &[MySqlStatement]) -> Result<Vec<MySqlRows>> {
        self.mutex().guarded_transaction(statements)
    }
}

impl MySqlWriteLock {
    /// As [`MySqlMutex::guarded_transaction`], for the calling thread's write hold.
    ///
    /// # Blocking and errors
    /// As [`MySqlMutex::guarded_transaction`].
    ///
    /// # Example
    /// ```no_run
    /// use zklock::mysql::{MySqlReadWriteLock, MySqlStatement};
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::MySqlClient::connect("mysql://app@127.0.0.1/app")?;
    /// let rw = MySqlReadWriteLock::new(&client, "catalogue")?;
    /// let _writing = rw.write_lock().lock()?;
    /// rw.write_lock()
    ///     .guarded_transaction(&[MySqlStatement::new("UPDATE catalogue SET version = version + 1")])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_transaction(&self, statements: &[MySqlStatement]) -> Result<Vec<MySqlRows>> {
        self.mutex().guarded_transaction(statements)
    }
}

crate::core::guarded::guard_forms!(
    fn guarded_transaction(&self, statements: &[MySqlStatement]) -> Result<Vec<MySqlRows>>;
    "`statements` as one transaction that commits only while the hold lives.";
    example {
        /// # Example
        /// ```no_run
        /// use zklock::mysql::{MySqlMutex, MySqlStatement};
        /// # fn main() -> zklock::Result<()> {
        /// let client = zklock::MySqlClient::connect("mysql://app@127.0.0.1/app")?;
        /// let mutex = MySqlMutex::new(&client, "ledger")?;
        /// let guard = mutex.lock()?;
        /// guard.guarded_transaction(&[MySqlStatement::new("DELETE FROM pending")])?;
        /// # Ok(()) }
        /// ```
    };
    MySqlMutex, MySqlReadLock, MySqlWriteLock
);
