//! The table mode of [`MySqlMutex`](super::MySqlMutex): a lock is a row of the table
//! `zklock_lock_record` (the lease record of the documents this project started from), not a
//! `GET_LOCK` of one server, so it works wherever a table does — Galera, Group Replication,
//! TiDB, Vitess — at the price of waiters that poll.
//!
//! A record has a unique name, an owner, an expiry by the database's clock (`NOW(6)`, UTC in
//! every zklock session) and a version, the fencing token. A waiter reads the record; when it
//! is missing it inserts it (version 1), when it has expired it takes it over with an
//! optimistic update on the version it read (`… version = version + 1 WHERE lock_name = ? AND
//! version = ? AND expire_time < NOW(6)`), so of many contenders exactly one matches. The
//! Client's keeper renews each held record at a third of the lease (`… WHERE lock_owner = ?
//! AND version = ? AND expire_time >= NOW(6)`): a renewal that matches nothing means the record
//! expired by the database's clock or was taken, and the hold is `Lost`. A release keeps the
//! row and sets its expiry in the past, so the version never goes back, also across releases.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use super::client::{Inner, MySqlClient};
use super::session::Session;
use super::sql::{
    check_name, dequeue_sql, expire_sql, key_sql, look_sql, queue_sql, Record, RECORDS, RELEASED,
};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, LockHealth};
use crate::core::hold::{Granted, Report};
use crate::core::lease::{boot_clock, LocalLease};
use crate::core::lock::Release;
use crate::core::retry::RetryBudget;

/// `ER_DUP_ENTRY`: another waiter inserted the record first.
const DUPLICATE: &str = "error 1062,";
/// `ER_LOCK_DEADLOCK`: on Galera, another node's write to the record won certification.
const DEADLOCK: &str = "error 1213,";

/// A mutex of the table mode, without re-entrancy.
pub(crate) struct Raw {
    client: MySqlClient,
    pub(crate) name: String,
    /// The record's name as an SQL expression.
    pub(crate) key: String,
    /// Counts `cancel_waiters` calls; a waiter that sees it change ends.
    cancelled: AtomicU64,
}

/// One thread's hold: its record, the local lease its renewals extend, and its place in the
/// keeper's list (`None` until kept).
pub(crate) struct Kept {
    pub(crate) record: Record,
    pub(crate) lease: Arc<LocalLease>,
    kept: Option<u64>,
}

impl Raw {
    pub(crate) fn new(client: &MySqlClient, name: &str) -> Result<Raw> {
        check_name(name)?;
        Ok(Raw {
            client: client.clone(),
            name: name.to_owned(),
            key: key_sql(name),
            cancelled: AtomicU64::new(0),
        })
    }

    /// The Client this lock is of.
    pub(crate) fn client(&self) -> &MySqlClient {
        &self.client
    }

    /// The SQL an outside client runs to take the same lease for `@ms` milliseconds as
    /// `@owner`, and to let it go.
    pub(crate) fn lock_sql(&self) -> String {
        let key = &self.key;
        format!(
            "SET time_zone = '+00:00'; \
             INSERT IGNORE INTO {RECORDS} (lock_name, lock_owner, expire_time, version) \
             VALUES ({key}, '', {RELEASED}, 0); \
             SELECT version INTO @v FROM {RECORDS} WHERE lock_name = {key}; \
             UPDATE {RECORDS} SET lock_owner = @owner, \
             expire_time = NOW(6) + INTERVAL @ms * 1000 MICROSECOND, version = version + 1 \
             WHERE lock_name = {key} AND version = @v AND expire_time < NOW(6); \
             SELECT ROW_COUNT() AS taken, @v + 1 AS token; \
             -- release: UPDATE {RECORDS} SET expire_time = {RELEASED} \
             WHERE lock_name = {key} AND lock_owner = @owner AND version = @v + 1"
        )
    }

    pub(crate) fn acquire(&self, deadline: Deadline) -> Result<Option<Granted<Kept>>> {
        self.acquire_unless(deadline, &|| false)
    }

    /// As [`acquire`](Self::acquire), ending with [`Error::Cancelled`] also once `stop` says so
    /// (looked at before each poll; [`Inner::wake_waiters`] wakes a waiter to look).
    pub(crate) fn acquire_unless(
        &self,
        deadline: Deadline,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<Granted<Kept>>> {
        let inner = self.client.inner();
        let owner = new_owner();
        let mut queued = None;
        let answer = self.poll(inner, deadline, stop, &owner, &mut queued);
        if queued.is_some() {
            // A wait that ended without a grant (a grant deletes its row): the row goes, and
            // stops counting anyway at the end of its life.
            inner.keeper.dequeue_later(self.key.clone(), owner);
        }
        answer
    }

    /// Looks at the record until it is granted to `owner`, the deadline passes or `stop`
    /// says so; `queued` is when `owner`'s queue row was last written, if it was.
    fn poll(
        &self,
        inner: &Inner,
        deadline: Deadline,
        stop: &dyn Fn() -> bool,
        owner: &str,
        queued: &mut Option<Duration>,
    ) -> Result<Option<Granted<Kept>>> {
        let gen = self.cancelled.load(Ordering::SeqCst);
        let mut budget = RetryBudget::new(inner.retry.clone());
        loop {
            if inner.closed() {
                return Err(Error::Closed);
            }
            if self.cancelled.load(Ordering::SeqCst) != gen || stop() {
                return Err(Error::Cancelled);
            }
            let seen = *inner.keeper.nap.lock();
            // A try without time to wait does not queue.
            let queue = deadline.remaining().is_none_or(|left| !left.is_zero());
            match self.attempt(inner, owner, queue, queued) {
                Ok(Some(granted)) => return Ok(Some(granted)),
                Ok(None) => {
                    budget.reset();
                    let Some(left) = deadline.remaining() else {
                        nap(inner, seen, jittered(inner.poll_interval));
                        continue;
                    };
                    if left.is_zero() {
                        return Ok(None);
                    }
                    nap(inner, seen, jittered(inner.poll_interval).min(left));
                }
                Err(e) if e.is_retryable() && !inner.closed() => {
                    // A try without time left reports the error rather than "not granted".
                    let Some(sleep) = budget.next_sleep().filter(|_| !deadline.expired()) else {
                        return Err(e);
                    };
                    if deadline.remaining().is_some_and(|left| left <= sleep) {
                        return Ok(None);
                    }
                    tracing::debug!("zklock: MySQL session lost ({e}), retrying in {sleep:?}");
                    nap(inner, seen, sleep);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One look at the record, and a take if it is missing or has expired: granted, held by
    /// another, or an error.
    fn attempt(
        &self,
        inner: &Inner,
        owner: &str,
        queue: bool,
        queued: &mut Option<Duration>,
    ) -> Result<Option<Granted<Kept>>> {
        let session = inner.pooled()?;
        let live = queue_life(inner.poll_interval);
        let taken = take(
            inner,
            &session,
            &self.key,
            owner,
            queue.then_some(live),
            queued,
        );
        inner.put_back(session);
        let Some((version, sent)) = taken? else {
            return Ok(None);
        };
        let lease = LocalLease::new();
        lease.open_at(inner.session_timeout, inner.session_timeout / 2, sent);
        // The take is an answer of the server's, which the Client's connection state hears.
        inner.states.heard(sent);
        Ok(Some(Granted {
            node: format!("{RECORDS} {} version {version}", self.key),
            token: version.into(),
            grant: Kept {
                record: Record {
                    key: self.key.clone(),
                    owner: owner.to_owned(),
                    version,
                },
                lease: Arc::new(lease),
                kept: None,
            },
        }))
    }

    pub(crate) fn keep(&self, grant: &mut Kept, report: Report) -> Result<()> {
        let inner = self.client.inner();
        if inner.closed() {
            // Granted as the Client closed: the record is let go of at once.
            let _ = inner
                .keeper
                .expire(std::slice::from_ref(&grant.record), inner.operation_timeout);
            return Err(Error::Closed);
        }
        grant.kept = Some(
            inner
                .keeper
                .lease(grant.record.clone(), grant.lease.clone(), report),
        );
        Ok(())
    }

    pub(crate) fn health(grant: &Kept, reported: LockHealth) -> LockHealth {
        worst(reported, grant.lease.health())
    }

    pub(crate) fn release(&self, grant: Kept, how: Release, lost: bool) -> Result<()> {
        let inner = self.client.inner();
        if let Some(kept) = grant.kept {
            inner.keeper.forget_lease(kept);
        }
        // Lost: the record has expired or was taken, there is nothing to let go of.
        if lost {
            return Err(Error::LockLost);
        }
        let until = match how {
            Release::Background => {
                inner.keeper.release_later(grant.record);
                return Ok(());
            }
            Release::Within(until) => until,
        };
        let op = inner.operation_timeout;
        let timeout = until
            .map(|u| u.saturating_duration_since(Instant::now()))
            .map_or(op, |left| left.min(op))
            .max(Duration::from_millis(1));
        let by = crate::core::deadline::instant_after(timeout);
        // An idle session, or a new one within the same bound.
        let (session, new) = match inner.pooled_by(by) {
            Ok(opened) => opened,
            Err(e) => {
                inner.keeper.release_later(grant.record);
                return Err(e);
            }
        };
        let left = by
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let sql = expire_sql(std::slice::from_ref(&grant.record));
        let matched = session.with(Some(left), op, |c| {
            c.query_drop(&sql)?;
            Ok(c.affected_rows())
        });
        match new {
            true => session.close(),
            false => inner.put_back(session),
        }
        match matched {
            Ok(1) => {
                inner.keeper.wake_waiters();
                Ok(())
            }
            // Taken by another after it expired by the database's clock.
            Ok(_) => Err(Error::LockLost),
            Err(e) => {
                // Its fate unknown: the keeper tries again; the record expires anyway.
                inner.keeper.release_later(grant.record);
                Err(e)
            }
        }
    }

    pub(crate) fn cancel_waiters(&self) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
        self.client.inner().keeper.wake_waiters();
    }

    pub(crate) fn closed(&self) -> bool {
        self.client.inner().closed()
    }

    pub(crate) fn dispatch(&self) -> crate::core::listeners::Dispatch {
        self.client.inner().dispatch()
    }
}

/// Reads the record `key` on `session` and takes it for `owner` if it is missing, or has expired
/// and no live queue row is ahead of `owner`'s, or is already `owner`'s (a take whose answer
/// was lost): the version taken and the send time of the take, `None` if another holds it, is
/// ahead in the queue or won the race. Not taken, `owner` is queued for a row life of `queue`,
/// if given (its row written when `queued`, the time of the last write, is `None` or a third
/// of the life ago); taken, its row is deleted (and `queued` emptied) on the same session, so
/// that it does not stay ahead of the next waiters.
fn take(
    inner: &Inner,
    session: &Session,
    key: &str,
    owner: &str,
    queue: Option<Duration>,
    queued: &mut Option<Duration>,
) -> Result<Option<(u64, Duration)>> {
    let op = inner.operation_timeout;
    let row: Option<(u64, String, i64, i64)> =
        session.with(Some(op), op, |c| c.query_first(look_sql(key, owner)))?;
    let micros = inner.session_timeout.as_micros();
    let (sql, version) = match row {
        None => (
            format!(
                "INSERT INTO {RECORDS} (lock_name, lock_owner, expire_time, version) \
                 VALUES ({key}, '{owner}', NOW(6) + INTERVAL {micros} MICROSECOND, 1)"
            ),
            1,
        ),
        Some((version, holder, expired, ahead))
            if (expired != 0 && ahead == 0) || holder == owner =>
        {
            (
                format!(
                    "UPDATE {RECORDS} SET lock_owner = '{owner}', \
                     expire_time = NOW(6) + INTERVAL {micros} MICROSECOND, \
                     version = version + 1 \
                     WHERE lock_name = {key} AND version = {version} \
                     AND (expire_time < NOW(6) OR lock_owner = '{owner}')"
                ),
                version + 1,
            )
        }
        Some(_) => return wait(inner, session, key, owner, queue, queued),
    };
    // The lease starts no later than the take is sent.
    let sent = boot_clock();
    let matched = session.with(Some(op), op, |c| {
        c.query_drop(&sql)?;
        Ok(c.affected_rows())
    });
    match matched {
        Ok(1) => {
            if queued.is_some() {
                leave(inner, session, key, owner, queued);
            }
            Ok(Some((version, sent)))
        }
        // Another was first: this one queues too, or the winner's next take would come
        // before its next look.
        Ok(_) => wait(inner, session, key, owner, queue, queued),
        Err(Error::MySql(why)) if why.contains(DUPLICATE) || why.contains(DEADLOCK) => {
            wait(inner, session, key, owner, queue, queued)
        }
        Err(e) => Err(e),
    }
}

/// Not taken: `owner` queues for `key` for a row life of `queue`, if given — its row written
/// when `queued`, the time of the last write, is `None` or a third of the life ago. Without
/// `queue` (a try, or the last look of a wait whose time is up) a row `owner` has is deleted
/// now, so that a wait that ended holds no one back.
fn wait(
    inner: &Inner,
    session: &Session,
    key: &str,
    owner: &str,
    queue: Option<Duration>,
    queued: &mut Option<Duration>,
) -> Result<Option<(u64, Duration)>> {
    let op = inner.operation_timeout;
    let Some(live) = queue.filter(|_| !inner.closed()) else {
        if queued.is_some() {
            leave(inner, session, key, owner, queued);
        }
        return Ok(None);
    };
    let now = boot_clock();
    if queued.is_none_or(|at| now.saturating_sub(at) >= live / 3) {
        session.with(Some(op), op, |c| c.query_drop(queue_sql(key, owner, live)))?;
        if queued.replace(now).is_none() {
            inner.keeper.queued(key, owner);
        }
        // Closed meanwhile: its close may have deleted the queued rows before this one.
        if inner.closed() {
            leave(inner, session, key, owner, queued);
        }
    }
    Ok(None)
}

/// Deletes `owner`'s queue row for `key` on `session`; deleted, `queued` is emptied (else the
/// keeper deletes it: the caller sees `queued`).
fn leave(inner: &Inner, session: &Session, key: &str, owner: &str, queued: &mut Option<Duration>) {
    let op = inner.operation_timeout;
    let rows = [(key.to_owned(), owner.to_owned())];
    if session
        .with(Some(op), op, |c| c.query_drop(dequeue_sql(&rows)))
        .is_ok()
    {
        *queued = None;
        inner.keeper.unqueued(key, owner);
    }
}

/// An owner for one acquisition: 128 random bits and a count, in hex.
fn new_owner() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:016x}{:016x}-{:x}",
        fastrand::u64(..),
        fastrand::u64(..),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

/// How long a waiter's queue row counts without being written again: three times its poll
/// interval, at least 3 s (it is written again every third of that as the waiter polls).
fn queue_life(poll: Duration) -> Duration {
    3 * poll.max(Duration::from_secs(1))
}

/// `d` give or take a fifth, so that waiters that started together do not poll together.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.8 + 0.4 * fastrand::f64())
}

/// Sleeps `d`, or less if the Client's waiters are woken (a cancel, a close, a lease let go
/// of here) after the count read `seen`.
fn nap(inner: &Inner, seen: u64, d: Duration) {
    let mut count = inner.keeper.nap.lock();
    if *count == seen {
        inner.keeper.naps.wait_for(&mut count, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_distinct_and_fit_the_column() {
        let (a, b) = (new_owner(), new_owner());
        assert_ne!(a, b);
        assert!(a.len() <= 64 && a.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-'));
    }
}
