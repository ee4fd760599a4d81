//! The `GET_LOCK` protocol: a lock is a `GET_LOCK` name held by one server session (a
//! connection of its own), asked for on an idle or new session, kept alive by the Client's
//! keeper, let go of by `RELEASE_LOCK` or by ending the session; the token bumped in the grant's
//! own round trip. The mutex, the read-write lock's halves, the semaphore's leases and the
//! leader latch all take their locks here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use super::client::{Inner, MySqlClient, Waiter};
use super::mode::MySqlMode;
use super::session::Session;
use super::sql::{bump_granted, check_name, key_sql, release_unmark_sql, token_sql, TOKENS};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, LockHealth};
use crate::core::hold::{Granted, Report};
use crate::core::lease::{boot_clock, LocalLease};
use crate::core::listeners::Dispatch;
use crate::core::lock::Release;
use crate::core::retry::RetryBudget;
use crate::core::token::Token;

/// The `GET_LOCK` timeout of a wait without limit, in seconds (a year; the wait is asked for
/// again if it ends).
pub(crate) const FOREVER: u64 = 365 * 86_400;

/// How many readers a read-write lock lets in at once: its reader names.
pub(crate) const READERS: usize = 64;

/// Which lock a [`Raw`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Mutex,
    /// A read-write lock's read half: the gate for a moment, then one reader name.
    Read,
    /// A read-write lock's write half: the gate, then every reader name.
    Write,
}

/// The mutex without re-entrancy: one name's `GET_LOCK`, asked for on a session (or, as a
/// read-write lock's half, its gate and reader names).
pub(crate) struct Raw {
    client: MySqlClient,
    pub(crate) name: String,
    mode: Mode,
    /// The `GET_LOCK` name as an SQL expression (a read-write lock's: its gate).
    key: String,
    /// A read-write lock's reader names, as SQL.
    readers: Vec<String>,
    /// What `cancel_waiters` calls name this lock by.
    id: usize,
    /// Counts `cancel_waiters` calls; a waiter that sees it change ends.
    cancelled: AtomicU64,
}

/// One thread's hold: its session, the name it releases, the local lease its heartbeats
/// extend, its place in the keeper's list (`None` until kept), and for a mutex's hold, set
/// once its token was asked for (its session may have marked the token as its own).
pub(crate) struct Kept {
    pub(crate) session: Arc<Session>,
    pub(crate) key: String,
    pub(crate) lease: Arc<LocalLease>,
    kept: Option<u64>,
    marked: Arc<AtomicBool>,
}

impl Raw {
    pub(crate) fn new(client: &MySqlClient, name: &str, mode: Mode) -> Result<Raw> {
        check_name(name)?;
        static IDS: AtomicU64 = AtomicU64::new(0);
        let (key, readers) = match mode {
            Mode::Mutex => (key_sql(name), Vec::new()),
            Mode::Read | Mode::Write => (
                key_sql(&format!("{name};w")),
                (1..=READERS)
                    .map(|i| key_sql(&format!("{name};r{i}")))
                    .collect(),
            ),
        };
        Ok(Raw {
            client: client.clone(),
            name: name.to_owned(),
            mode,
            key,
            readers,
            id: IDS.fetch_add(1, Ordering::Relaxed) as usize,
            cancelled: AtomicU64::new(0),
        })
    }

    /// The Client this lock is of.
    pub(crate) fn client(&self) -> &MySqlClient {
        &self.client
    }

    /// The SQL that takes this lock from any client, waiting up to a year.
    pub(crate) fn lock_sql(&self) -> String {
        match self.mode {
            Mode::Mutex => format!("SELECT GET_LOCK({}, {FOREVER})", self.key),
            Mode::Read => self.read_sql(&FOREVER.to_string()),
            Mode::Write => self.write_sql(&FOREVER.to_string()),
        }
    }

    /// A reader's statements for a wait of `wait` seconds: the gate (behind a writer that
    /// holds or waits for it), the first free reader name, the token of the gate's name, the
    /// gate let go; the last row is (the reader name's number or 0, token).
    fn read_sql(&self, wait: &str) -> String {
        let tries: String = self
            .readers
            .iter()
            .enumerate()
            .map(|(i, k)| format!("WHEN GET_LOCK({k}, 0) = 1 THEN {} ", i + 1))
            .collect();
        format!(
            "SET @zklock_key = {gate}; SET @zklock_got = GET_LOCK(@zklock_key, {wait}); \
             SET @zklock_got = IF(@zklock_got = 1, CASE {tries}ELSE 0 END, @zklock_got); \
             {bump} DO RELEASE_LOCK(@zklock_key); \
             SELECT @zklock_got, IF(@zklock_got >= 1, LAST_INSERT_ID(), NULL)",
            gate = self.key,
            bump = bump_granted()
        )
    }

    /// A writer's statements for a wait of `wait` seconds: the gate, then every reader name
    /// (each waiting for what is left of `wait`), then the token of the gate's name.
    fn write_sql(&self, wait: &str) -> String {
        let readers: String = self
            .readers
            .iter()
            .map(|k| {
                format!(
                    "SET @zklock_got = IF(@zklock_got = 1, GET_LOCK({k}, GREATEST({wait} - \
                     (UNIX_TIMESTAMP(SYSDATE(6)) - @zklock_t0), 0)), @zklock_got); "
                )
            })
            .collect();
        format!(
            "SET @zklock_key = {gate}; SET @zklock_t0 = UNIX_TIMESTAMP(SYSDATE(6)); \
             SET @zklock_got = GET_LOCK(@zklock_key, {wait}); {readers}{bump} \
             SELECT @zklock_got, IF(@zklock_got >= 1, LAST_INSERT_ID(), NULL)",
            gate = self.key,
            bump = bump_granted()
        )
    }

    fn attempt(
        &self,
        inner: &Inner,
        deadline: Deadline,
        gen: u64,
    ) -> Result<Option<Granted<Kept>>> {
        let waits = Waits {
            owner: self.id,
            cancelled: &self.cancelled,
            gen,
        };
        let granted = match self.mode {
            Mode::Mutex => {
                let sql = |wait: &str| format!("SELECT GET_LOCK({}, {wait})", self.key);
                attempt_sql(inner, &sql, Bump::WhenAsked, deadline, &waits)?
            }
            Mode::Read => {
                let sql = |wait: &str| self.read_sql(wait);
                attempt_sql(inner, &sql, Bump::WithGrant, deadline, &waits)?
            }
            Mode::Write => {
                let sql = |wait: &str| self.write_sql(wait);
                attempt_sql(inner, &sql, Bump::WithGrant, deadline, &waits)?
            }
        };
        Ok(granted.map(|(got, grant)| {
            let key = match self.mode {
                Mode::Read => usize::try_from(got - 1)
                    .ok()
                    .and_then(|i| self.readers.get(i))
                    .cloned()
                    .unwrap_or_else(|| self.key.clone()),
                Mode::Mutex | Mode::Write => self.key.clone(),
            };
            let marked = Arc::new(AtomicBool::new(false));
            let token = match grant.token {
                Some(token) => token.into(),
                None => {
                    let (session, key) = (Arc::downgrade(&grant.session), key.clone());
                    let op = inner.operation_timeout;
                    let marked = marked.clone();
                    Token::later(move || {
                        // Set before the bump is sent: its answer may be lost after it was done.
                        marked.store(true, Ordering::SeqCst);
                        read_token(&session, &key, op)
                    })
                }
            };
            Granted {
                node: format!("GET_LOCK {key} (connection {})", grant.session.id),
                token,
                grant: Kept {
                    session: grant.session,
                    key,
                    lease: grant.lease,
                    kept: None,
                    marked,
                },
            }
        }))
    }
}

/// Who waits, for `cancel_waiters`: the lock's id, its cancel counter, and the count when the
/// wait began.
pub(crate) struct Waits<'a> {
    pub(crate) owner: usize,
    pub(crate) cancelled: &'a AtomicU64,
    pub(crate) gen: u64,
}

impl Waits<'_> {
    pub(crate) fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst) != self.gen
    }
}

/// A grant: the session that holds, the token (`None` for a mutex's, read when asked for), the
/// lease from the lock statement's send time.
pub(crate) struct Grant {
    pub(crate) session: Arc<Session>,
    pub(crate) token: Option<u64>,
    pub(crate) lease: Arc<LocalLease>,
}

/// One attempt on an idle or new session for the `GET_LOCK` name `key` (an SQL expression):
/// granted (with the token), not granted by the deadline, or an error; the session is closed
/// unless granted. The waiting statement names the key itself (`GET_LOCK(<key>, …)`), so the
/// process list shows what it waits for ([`MySqlClient::participants`]).
pub(crate) fn attempt(
    inner: &Inner,
    key: &str,
    deadline: Deadline,
    waits: &Waits<'_>,
) -> Result<Option<Grant>> {
    let bump = bump_granted();
    let sql = |wait: &str| {
        format!(
            "SET @zklock_key = {key}; SET @zklock_got = GET_LOCK({key}, {wait}); \
             {bump} SELECT @zklock_got, IF(@zklock_got >= 1, LAST_INSERT_ID(), NULL)"
        )
    };
    Ok(attempt_sql(inner, &sql, Bump::WithGrant, deadline, waits)?.map(|(_, grant)| grant))
}

/// When a grant's fencing token is bumped.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bump {
    /// In the grant's own request: its statements' last row is (granted, token).
    WithGrant,
    /// Later, when the token is first asked for ([`read_token`]): the request is the one
    /// `GET_LOCK` statement, whose row is (granted).
    WhenAsked,
}

/// Bumps and reads the token of `key` on `session`, which must hold it: the first time a
/// mutex's token is asked for, within the operation timeout `op`. [`Error::LockLost`] when
/// the session has ended or no longer holds `key`.
fn read_token(session: &Weak<Session>, key: &str, op: Duration) -> Result<u64> {
    let Some(session) = session.upgrade().filter(|s| !s.ended()) else {
        return Err(Error::LockLost);
    };
    let sql = token_sql(key);
    match session.with(Some(op), op, |c| last_row(c, &sql))? {
        Some((Some(1), Some(token))) => Ok(token),
        _ => Err(Error::LockLost),
    }
}

/// One attempt on an idle or new session with the statements `sql` gives for a wait of so many
/// seconds (text): their last row is (granted: 1 or more / 0 / NULL, token). The grant and its
/// first column, not granted by the deadline, or an error; the session is closed unless
/// granted.
pub(crate) fn attempt_sql(
    inner: &Inner,
    sql: &dyn Fn(&str) -> String,
    bump: Bump,
    deadline: Deadline,
    waits: &Waits<'_>,
) -> Result<Option<(i64, Grant)>> {
    let session = Arc::new(inner.pooled()?);
    let done = Arc::new(AtomicBool::new(false));
    inner.add_waiter(Waiter {
        owner: waits.owner,
        session: session.clone(),
        done: done.clone(),
    });
    let op = inner.operation_timeout;
    // The server ends the wait at the deadline (GET_LOCK's timeout, in seconds with
    // fractions on MariaDB); the client gives up an operation timeout later.
    let (wait, read) = match deadline.remaining() {
        None => (FOREVER as f64, None),
        Some(left) => (left.as_secs_f64(), Some(left.saturating_add(op))),
    };
    let sql = sql(&format!("{wait:.3}"));
    // The lease starts no later than the lock statement is sent.
    let sent = boot_clock();
    let answer = if waits.cancelled() || inner.closed() {
        Err(Error::Cancelled)
    } else {
        session.with(read, op, |c| match bump {
            Bump::WithGrant => last_row(c, &sql),
            Bump::WhenAsked => Ok(c
                .query_first::<Option<i64>, _>(&sql)?
                .map(|got| (got, None))),
        })
    };
    // From here the session is not killed by a cancel (it may hold): a cancel that came
    // first is seen below.
    done.store(true, Ordering::SeqCst);
    let cancelled = waits.cancelled();
    inner.forget_waiter(&session);
    if inner.closed() {
        session.close();
        return Err(Error::Closed);
    }
    if cancelled {
        session.close();
        return Err(Error::Cancelled);
    }
    let (got, token) = match answer {
        Ok(Some(row)) => row,
        Ok(None) => {
            session.close();
            return Err(Error::MySql("the lock statement returned no row".into()));
        }
        Err(e) => {
            session.close();
            return Err(e);
        }
    };
    match (got, token) {
        // Granted: with its token, or with none yet when it is read when asked for.
        (Some(got @ 1..), _) if token.is_some() || bump == Bump::WhenAsked => {
            granted(inner, session, token, sent).map(|grant| Some((got, grant)))
        }
        (Some(1..), None) => {
            session.close();
            Err(Error::MySql(format!(
                "granted, but no fencing token came from {TOKENS}"
            )))
        }
        (Some(_), _) => {
            session.close();
            Ok(None)
        }
        (None, _) => {
            session.close();
            Err(Error::MySql(
                "GET_LOCK answered NULL (the wait was killed or failed)".into(),
            ))
        }
    }
}

/// The last row of the results of `sql` (several statements), as two integers.
pub(crate) fn last_row(
    c: &mut mysql::Conn,
    sql: &str,
) -> mysql::Result<Option<(Option<i64>, Option<u64>)>> {
    let mut last = None;
    let mut result = c.query_iter(sql)?;
    while let Some(set) = result.iter() {
        for row in set {
            last = Some(row?);
        }
    }
    Ok(last.map(mysql::from_row::<(Option<i64>, Option<u64>)>))
}

/// The grant of `token` on `session`, its lease from `sent` (the lock statement's send time).
pub(crate) fn granted(
    inner: &Inner,
    session: Arc<Session>,
    token: Option<u64>,
    sent: Duration,
) -> Result<Grant> {
    let lease = LocalLease::new();
    lease.open_at(inner.session_timeout, inner.session_timeout / 2, sent);
    // The grant is an answer of the server's, which the Client's connection state hears too:
    // while holds are kept, their heartbeats are the Client's only other news of the server.
    inner.states.heard(sent);
    // After a long wait, the send time says little about when the server's idle timer
    // restarted: a heartbeat gives the lease a recent start.
    if boot_clock().saturating_sub(sent) > inner.session_timeout / 4 {
        let sent = boot_clock();
        if let Err(e) = session.ping(inner.operation_timeout) {
            session.close();
            return Err(e);
        }
        lease.heard_at(sent);
        inner.states.heard(sent);
    }
    Ok(Grant {
        session,
        token,
        lease: Arc::new(lease),
    })
}

/// Lets go of `session`'s hold of `key` as `how` says (its heartbeat stopped);
/// [`Error::LockLost`] if it had been `lost` or the server did not have it as ours. With
/// `reuse` (the session held `key` alone), a session whose `RELEASE_LOCK` the server confirmed
/// holds nothing and goes to the Client's idle sessions for the next acquisition; otherwise it
/// is closed. With `marked` (the session may have marked `key`'s token as its own), the same
/// request clears the mark, so that a later hold of `key` on the reused session is not shown
/// this hold's token; a session whose mark was not cleared is closed.
pub(crate) fn let_go(
    inner: &Inner,
    key: &str,
    session: Arc<Session>,
    how: Release,
    lost: bool,
    reuse: bool,
    marked: bool,
) -> Result<()> {
    let until = match how {
        // Closing the connection frees the lock as the server reads the end.
        Release::Background => {
            session.close();
            return if lost { Err(Error::LockLost) } else { Ok(()) };
        }
        Release::Within(until) => until,
    };
    if lost {
        session.close();
        return Err(Error::LockLost);
    }
    let op = inner.operation_timeout;
    let timeout = until
        .map(|u| u.saturating_duration_since(Instant::now()))
        .map_or(op, |left| left.min(op))
        .max(Duration::from_millis(1));
    let by = crate::core::deadline::instant_after(timeout);
    // The answer of RELEASE_LOCK, and whether the mark is known cleared.
    let release = |c: &mut mysql::Conn| -> mysql::Result<(Option<Option<i64>>, bool)> {
        if !marked {
            let released =
                c.query_first::<Option<i64>, _>(format!("SELECT RELEASE_LOCK({key})"))?;
            return Ok((released, true));
        }
        let mut result = c.query_iter(release_unmark_sql(key))?;
        let mut released = None;
        if let Some(set) = result.iter() {
            for row in set {
                released = Some(mysql::from_row_opt::<Option<i64>>(row?).unwrap_or(None));
            }
        }
        // The mark's UPDATE: an error there leaves the mark, and the session is not reused.
        let mut unmarked = true;
        while let Some(set) = result.iter() {
            for row in set {
                unmarked &= row.is_ok();
            }
        }
        Ok((released, unmarked))
    };
    // The keeper's heartbeat may be using the connection: waited for until the bound, then
    // the connection is ended, which frees the lock as the server reads the end.
    let sent = boot_clock();
    let Some(released) = session.try_with(by, Some(timeout), op, release) else {
        session.end();
        return Ok(());
    };
    // An answer, whatever it says, is news of the server for the Client's connection state.
    if released.is_ok() {
        inner.states.heard(sent);
    }
    let (released, unmarked) = match released {
        Ok((released, unmarked)) => (Ok(released), unmarked),
        Err(e) => (Err(e), false),
    };
    match (&released, reuse && unmarked) {
        (Ok(Some(Some(1))), true) => match Arc::try_unwrap(session) {
            Ok(session) => inner.put_back(session),
            // The keeper is beating on it this moment.
            Err(session) => session.close(),
        },
        _ => session.close(),
    }
    match released {
        Ok(Some(Some(1))) => Ok(()),
        // The server did not have it as ours: the session was not the one that took it.
        Ok(_) => Err(Error::LockLost),
        Err(e) => Err(e),
    }
}
/// [`Error::InvalidArgument`] if `client` is in the table mode, which has no `recipe`.
pub(crate) fn refuse_in_table_mode(client: &MySqlClient, recipe: &str) -> Result<()> {
    match client.inner().mode {
        MySqlMode::GetLock => Ok(()),
        MySqlMode::Table => Err(Error::invalid(format!(
            "the MySQL table mode (lock_mode=table) has mutexes and leader latches, no \
             {recipe}: use a MySqlMutex, or a Client in the GET_LOCK mode on a server where \
             GET_LOCK excludes"
        ))),
    }
}

impl Raw {
    pub(crate) fn acquire(
        &self,
        deadline: Deadline,
        partner: Option<()>,
    ) -> Result<Option<Granted<Kept>>> {
        if self.mode == Mode::Read && partner.is_some() {
            return Err(Error::invalid(
                "a thread that holds a MySQL write lock cannot take its read lock (no \
                 downgrade on MySQL): release the write lock first",
            ));
        }
        let inner = self.client.inner();
        let gen = self.cancelled.load(Ordering::SeqCst);
        let mut budget = RetryBudget::new(inner.retry.clone());
        loop {
            match self.attempt(inner, deadline, gen) {
                Err(e) if e.is_retryable() && !inner.closed() => {
                    // A try without time left reports the error rather than "not granted".
                    let Some(sleep) = budget.next_sleep().filter(|_| !deadline.expired()) else {
                        return Err(e);
                    };
                    if deadline.remaining().is_some_and(|left| left <= sleep) {
                        return Ok(None);
                    }
                    tracing::debug!("zklock: MySQL session lost ({e}), retrying in {sleep:?}");
                    let until = crate::core::deadline::instant_after(sleep);
                    while Instant::now() < until {
                        if inner.closed() {
                            return Err(Error::Closed);
                        }
                        if self.cancelled.load(Ordering::SeqCst) != gen {
                            return Err(Error::Cancelled);
                        }
                        std::thread::sleep(Duration::from_millis(10).min(sleep));
                    }
                }
                // Not granted with time left: a wait without limit that the server ended
                // (after a year), every reader name taken, or a server that counts the
                // timeout in whole seconds. Asked again.
                Ok(None) if !deadline.expired() => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => return other,
            }
        }
    }

    pub(crate) fn keep(&self, grant: &mut Kept, report: Report) -> Result<()> {
        let inner = self.client.inner();
        if inner.closed() {
            // Granted as the Client closed: closing the connection frees the lock.
            grant.session.close();
            return Err(Error::Closed);
        }
        grant.kept = Some(
            inner
                .keeper
                .keep(grant.session.clone(), grant.lease.clone(), report),
        );
        Ok(())
    }

    pub(crate) fn health(grant: &Kept, reported: LockHealth) -> LockHealth {
        let ended = if grant.session.ended() {
            LockHealth::Lost
        } else {
            LockHealth::Held
        };
        worst(worst(reported, grant.lease.health()), ended)
    }

    pub(crate) fn release(&self, grant: Kept, how: Release, lost: bool) -> Result<()> {
        let inner = self.client.inner();
        if let Some(kept) = grant.kept {
            inner.keeper.forget(kept);
        }
        // A writer's session holds the reader names too: it is closed, not reused.
        let reuse = self.mode != Mode::Write;
        let marked = grant.marked.load(Ordering::SeqCst);
        let_go(inner, &grant.key, grant.session, how, lost, reuse, marked)
    }

    pub(crate) fn cancel_waiters(&self) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
        self.client.inner().cancel_waiters(self.id);
    }

    pub(crate) fn closed(&self) -> bool {
        self.client.inner().closed()
    }

    pub(crate) fn dispatch(&self) -> Dispatch {
        self.client.inner().dispatch()
    }
}
