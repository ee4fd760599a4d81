//! [`PgMutex`]: a re-entrant mutex on a PostgreSQL session-level advisory lock, with health
//! and fencing.

use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::client::{Inner, PgClient};
use super::hold::{self, Grant};
use super::keeper::{Keeping, Report};
use super::session::{error, int, retryable, Session};
use super::sql::{self, Statements, EXCLUSIVE, EXCLUSIVE_WITH_TOKEN, SHARED};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, LockHealth};
use crate::core::hold::{Granted, RawLock, Reentrant, Token};
use crate::core::lease::{boot_clock, LocalLease};
use crate::core::listeners::Dispatch;
use crate::core::lock::Release;
use crate::core::retry::RetryBudget;

/// The longest lock name, in bytes.
const MAX_NAME: usize = 1024;

/// One advisory lock of a name: `hashtextextended(NAME, seed)`, taken exclusive or shared.
#[derive(Clone, Copy)]
pub(crate) struct Key {
    pub(crate) seed: i64,
    pub(crate) sql: &'static Statements,
}

impl Key {
    pub(crate) const fn exclusive(seed: i64) -> Key {
        Key {
            seed,
            sql: &EXCLUSIVE,
        }
    }

    const fn shared(seed: i64) -> Key {
        Key { seed, sql: &SHARED }
    }

    /// Exclusive, the fencing token read with the grant.
    pub(crate) const fn exclusive_with_token(seed: i64) -> Key {
        Key {
            seed,
            sql: &EXCLUSIVE_WITH_TOKEN,
        }
    }
}

/// Which lock a [`PgMutex`] is: a mutex, or a half of a read-write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Mutex,
    Read,
    Write,
}

/// A mutex on PostgreSQL: one holder at a time among every session that takes the same
/// advisory lock, re-entrant per thread (through this object), with [`LockHealth`] and
/// fencing tokens.
///
/// # The key
/// The lock is the session-level advisory lock whose 64-bit key is
/// `hashtextextended(NAME, 0)`, computed by the server. Any SQL client takes the same lock
/// with `SELECT pg_advisory_lock(hashtextextended('NAME', 0))` (and `pg_advisory_unlock`), so
/// a `psql` script or a Python or Java service excludes zklock and is excluded by it. The
/// hash is of the name's bytes in the database's encoding; keep to one encoding (UTF-8) and
/// use the same database.
///
/// # Fairness
/// Waiters queue in the server's lock manager: granted in the order they asked
/// (`pg_advisory_lock`); [`try_lock`](Self::try_lock) takes a free lock without queueing.
///
/// # Re-entrancy
/// A thread that holds the lock through this object may acquire it again; it is released when
/// every acquisition has been released. The server lock is taken once.
///
/// # Sessions
/// Each holding thread holds on a session (a connection) of its own, and each waiting thread
/// waits on one: see [`PgClient`]. Closing that session frees the lock, which is how a guard's
/// drop and every failure let go.
///
/// # Health
/// The holding session sends a heartbeat at a third of the Client's session timeout. `health()`
/// reads `Suspended` once half the session timeout has passed since the last acknowledged
/// heartbeat was sent, `Lost` once all of it has (the server has ended the session, or will
/// when it next looks), and `Lost` at once when the connection ends (`pg_terminate_backend`,
/// a server restart, a broken connection).
///
/// # Fencing
/// The token is the 64-bit transaction id (`txid_current()`, epoch included) assigned on the
/// holding session the first time it is asked for (`fencing_token()` on the guard or the
/// mutex: one statement, within the operation timeout), then kept for the hold; a hold whose
/// token is never asked for costs no transaction id and no WAL. Transaction ids are handed out
/// in increasing order and a successor is granted only after its predecessor released, so
/// tokens rise strictly across successive holders. Its transaction is committed with
/// `synchronous_commit = on`, so a restart or crash of the server does not hand out a lower id
/// again. Once the hold's session is gone a token not read before cannot be: 0 on the guard
/// (a guard keeps a token it read), `None` on the mutex. It needs no privilege.
/// It can fail to rise after a failover to a replica that had not received the holder's commit
/// (asynchronous replication) or after `pg_resetwal`.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::PgClient::connect("postgres://app:secret@127.0.0.1/app")?;
/// let mutex = zklock::PgMutex::new(&client, "ledger")?;
/// if let Some(guard) = mutex.try_lock_for(std::time::Duration::from_secs(5))? {
///     if guard.health() == zklock::LockHealth::Held {
///         println!("write with token {}", guard.fencing_token());
///     }
/// }
/// # Ok(()) }
/// ```
pub struct PgMutex {
    lock: Reentrant<Raw>,
}

/// The mutex without re-entrancy: one name's advisory lock, asked for on a session.
struct Raw {
    client: PgClient,
    name: String,
    key: Key,
    /// Counts `cancel_waiters` calls; a waiter ends when it changes.
    cancelled: watch::Sender<u64>,
}

/// One thread's hold: its session, the local lease its heartbeats extend, and the heartbeat
/// (`None` until kept).
struct Kept {
    session: Arc<Session>,
    lease: Arc<LocalLease>,
    keeping: Option<Keeping>,
}

impl PgMutex {
    /// A mutex named `name` (any text of 1 to 1024 bytes without NUL).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name or one with a NUL character
    /// (PostgreSQL's text cannot hold it); nothing is sent.
    pub fn new(client: &PgClient, name: &str) -> Result<PgMutex> {
        Ok(PgMutex {
            lock: Reentrant::new(Raw::new(client, name, Mode::Mutex)?),
        })
    }

    /// The read and the write half of the read-write lock `name`.
    pub(crate) fn read_write(client: &PgClient, name: &str) -> Result<[PgMutex; 2]> {
        let [read, write] = Reentrant::pair(
            Raw::new(client, name, Mode::Read)?,
            Raw::new(client, name, Mode::Write)?,
        );
        Ok([PgMutex { lock: read }, PgMutex { lock: write }])
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lock.raw.name
    }

    /// The SQL that takes the same lock from any client: `SELECT
    /// pg_advisory_lock(hashtextextended('NAME', 0))`, with the name quoted so that it reads
    /// the same under every setting (`'` doubled; a name with a backslash as `E'…'`, each
    /// backslash doubled), and `pg_advisory_lock_shared` for a read-write lock's read half.
    pub fn lock_sql(&self) -> String {
        format!(
            "SELECT {}(hashtextextended({}, 0))",
            self.lock.raw.key.sql.function,
            sql::literal(&self.lock.raw.name)
        )
    }

    /// Whether any thread of this process holds the lock through this object.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.lock.is_acquired_in_this_process()
    }

    /// Whether the calling thread holds the lock through this object.
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.lock.is_owned_by_current_thread()
    }

    /// The calling thread's fencing token, if it holds the lock.
    pub fn fencing_token(&self) -> Option<u64> {
        self.lock.fencing_token()
    }

    /// The health of the calling thread's hold, if it holds the lock, computed now.
    pub fn health(&self) -> Option<LockHealth> {
        self.lock.health()
    }

    /// The server process (`pg_backend_pid()`) of the calling thread's holding session, if it
    /// holds the lock: what `pg_locks` and `pg_stat_activity` show for it.
    pub fn backend_pid(&self) -> Option<i32> {
        self.lock.mine(|h| h.grant.session.pid)
    }
}

impl Raw {
    fn new(client: &PgClient, name: &str, mode: Mode) -> Result<Raw> {
        check_name(name)?;
        Ok(Raw {
            client: client.clone(),
            name: name.to_owned(),
            key: match mode {
                Mode::Read => Key::shared(0),
                Mode::Mutex | Mode::Write => Key::exclusive(0),
            },
            cancelled: watch::Sender::new(0),
        })
    }
}

impl RawLock for Raw {
    type Grant = Kept;
    /// The session of the same thread's hold of the other half: a downgrade takes the shared
    /// lock on it.
    type Shared = Arc<Session>;

    fn share(grant: &Kept) -> Arc<Session> {
        grant.session.clone()
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn closed(&self) -> bool {
        self.client.inner().closed()
    }

    fn dispatch(&self) -> Dispatch {
        self.client.inner().dispatch()
    }

    fn acquire(
        &self,
        deadline: Deadline,
        own_session: Option<Arc<Session>>,
    ) -> Result<Option<Granted<Kept>>> {
        let inner = self.client.inner();
        let mut cancelled = self.cancelled.subscribe();
        cancelled.mark_unchanged();
        let asked = match own_session {
            // A downgrade: the write lock's session takes the shared lock too, at once (a
            // session's own locks never conflict with its requests).
            Some(session) => inner.block_on(async {
                match try_on(inner, &self.name, self.key, session).await? {
                    Ok(grant) => Ok(Some(grant)),
                    Err(_) => Err(Error::Postgres(
                        "the server refused a shared lock to the session holding the \
                         exclusive one"
                            .into(),
                    )),
                }
            }),
            None => inner.block_on(attempt(
                inner,
                &self.name,
                self.key,
                deadline,
                &mut cancelled,
            )),
        };
        match asked {
            Ok(Some(grant)) if inner.closed() => {
                // Granted as the Client closed: dropping the grant ends its session.
                drop(grant);
                Err(Error::Closed)
            }
            Ok(Some(grant)) => Ok(Some(Granted {
                node: format!(
                    "advisory lock {:?} (backend {})",
                    self.name, grant.session.pid
                ),
                token: match grant.token {
                    Some(token) => token.into(),
                    None => {
                        let client = self.client.downgrade();
                        let session = Arc::downgrade(&grant.session);
                        Token::later(move || read_token(&client, &session))
                    }
                },
                grant: Kept {
                    lease: hold::lease(inner, &grant),
                    session: grant.session,
                    keeping: None,
                },
            })),
            Ok(None) => Ok(None),
            Err(e) if inner.closed() => {
                tracing::debug!("zklock: acquiring {:?} ended by close: {e}", self.name);
                Err(Error::Closed)
            }
            Err(e) => Err(e),
        }
    }

    fn keep(&self, grant: &mut Kept, report: Report) -> Result<()> {
        let inner = self.client.inner();
        let keeping = (inner.keeper).keep(grant.session.clone(), grant.lease.clone(), report);
        grant.keeping = Some(keeping);
        Ok(())
    }

    fn health(&self, grant: &Kept, reported: LockHealth) -> LockHealth {
        worst(reported, grant.lease.health())
    }

    fn release(
        &self,
        grant: Kept,
        how: Release,
        lost: bool,
        partner: Option<Arc<Session>>,
    ) -> Result<()> {
        // A downgraded lock's halves hold on one session.
        let shared = partner.is_some_and(|s| Arc::ptr_eq(&s, &grant.session));
        // The heartbeat stops.
        drop(grant.keeping);
        let inner = self.client.inner();
        hold::let_go(
            inner,
            &self.name,
            self.key,
            grant.session,
            how,
            lost,
            shared,
        )
    }

    fn cancel_waiters(&self) {
        self.cancelled.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Asks for `key` of `name` until granted, out of time (`None`), or an error; a session lost or
/// not opened is retried through the retry policy, and a pooled session found ended is
/// replaced at once (even for a try without time left: the server did not refuse the lock).
/// A session that may hold anything on an error is dropped, which closes it and frees
/// whatever it held. The Client's close ends it with [`Error::Closed`].
pub(crate) async fn attempt(
    inner: &Inner,
    name: &str,
    key: Key,
    deadline: Deadline,
    cancelled: &mut watch::Receiver<u64>,
) -> Result<Option<Grant>> {
    let mut budget = RetryBudget::new(inner.retry.clone());
    loop {
        let mut pooled = false;
        match ask(inner, name, key, deadline, cancelled, &mut pooled).await {
            // Each such session is dropped, so this ends with the pool.
            Err(e) if retryable(&e) && pooled && !inner.closed() => {
                tracing::debug!("zklock: a pooled PostgreSQL session had ended ({e}); another");
            }
            Err(e) if retryable(&e) => {
                // A try without time left reports the error rather than "not granted".
                let Some(sleep) = budget.next_sleep().filter(|_| !deadline.expired()) else {
                    return Err(e);
                };
                if deadline.remaining().is_some_and(|left| left <= sleep) {
                    return Ok(None);
                }
                tracing::debug!("zklock: PostgreSQL session lost ({e}), retrying in {sleep:?}");
                tokio::select! {
                    () = tokio::time::sleep(sleep) => {}
                    _ = cancelled.changed() => return Err(Error::Cancelled),
                    () = inner.closing() => return Err(Error::Closed),
                }
            }
            other => return other,
        }
    }
}

/// One attempt without waiting on `session`: the grant, or the session back (it holds nothing
/// more than before).
pub(crate) async fn try_on(
    inner: &Inner,
    name: &str,
    key: Key,
    session: Arc<Session>,
) -> Result<std::result::Result<Grant, Arc<Session>>> {
    let name: &(dyn ToSql + Sync) = &name;
    let sent = boot_clock();
    let row = session
        .row(
            inner.operation_timeout,
            key.sql.try_lock,
            &[
                (name, Type::TEXT),
                (&session.marker, Type::INT8),
                (&key.seed, Type::INT8),
            ],
        )
        .await?;
    session.check_own(&row, 0, 2)?;
    if !row.try_get::<_, bool>(5).unwrap_or(false) {
        return Ok(Err(session));
    }
    granted(session, &row, sent).map(Ok)
}

/// One attempt on one session; `pooled` says whether the session came from the pool.
async fn ask(
    inner: &Inner,
    name: &str,
    key: Key,
    deadline: Deadline,
    cancelled: &mut watch::Receiver<u64>,
    pooled: &mut bool,
) -> Result<Option<Grant>> {
    let session = tokio::select! {
        s = inner.session() => s?,
        _ = cancelled.changed() => return Err(Error::Cancelled),
        () = inner.closing() => return Err(Error::Closed),
    };
    let session = {
        *pooled = session.1;
        session.0
    };
    if deadline.expired() {
        // Boxed, as the heartbeat below: rare paths that would make this future a third
        // larger (4.5 KB, not 3.3).
        return match Box::pin(try_on(inner, name, key, session)).await? {
            Ok(grant) => Ok(Some(grant)),
            Err(session) => {
                inner.give_back(session);
                Ok(None)
            }
        };
    }
    let name: &(dyn ToSql + Sync) = &name;
    // The server ends the wait at the deadline (lock_timeout, in ms, at least 1: 0 would
    // mean no limit); the client gives up an operation timeout later if it has not heard.
    let limit = deadline.remaining().map_or_else(
        || "0".to_owned(),
        |d| d.as_millis().clamp(1, i32::MAX as u128).to_string(),
    );
    let hard = inner.statement_deadline(deadline);
    // The lease starts no later than the lock statement is sent.
    let sent = boot_clock();
    // The statement's future borrows the session until the answer is in.
    let rows = {
        let limit: &(dyn ToSql + Sync) = &limit;
        let marker: &(dyn ToSql + Sync) = &session.marker;
        let seed: &(dyn ToSql + Sync) = &key.seed;
        let params = [
            (name, Type::TEXT),
            (marker, Type::INT8),
            (seed, Type::INT8),
            (limit, Type::TEXT),
        ];
        let lock = pin!(session.query(key.sql.lock, &params));
        let driven = session.drive(lock);
        let bounded = async {
            match hard.remaining() {
                None => Ok(driven.await),
                Some(left) => tokio::time::timeout(left, driven).await,
            }
        };
        // Cancelled, the Client closed, or silent past the deadline: the server is asked to
        // cancel the wait (the session's own socket is busy with it), and the session is
        // closed as it is dropped, which frees a grant that may come meanwhile. The close is
        // looked at first: closing shuts the socket down, which ends the statements too.
        tokio::select! {
            biased;
            () = inner.closing() => {
                session.cancel(inner.operation_timeout).await;
                return Err(Error::Closed);
            }
            waited = bounded => match waited {
                Ok(answer) => answer,
                Err(_) => {
                    session.cancel(inner.operation_timeout).await;
                    return Ok(None);
                }
            },
            _ = cancelled.changed() => {
                session.cancel(inner.operation_timeout).await;
                return Err(Error::Cancelled);
            }
        }
    };
    if inner.closed() {
        // The close shut the socket down as the answer came (it sets the flag first): the
        // wait may still be on the server.
        if rows.is_err() {
            session.cancel(inner.operation_timeout).await;
        }
        return Err(Error::Closed);
    }
    let rows = match rows {
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
            inner.give_back(session);
            return Ok(None);
        }
        other => other.map_err(|e| error(&e, false))?,
    };
    let row = rows
        .into_iter()
        .next()
        .ok_or_else(|| Error::Postgres("the lock statement returned no row".into()))?;
    let mut grant = granted(session, &row, sent)?;
    // After a long wait, the send time says little about when the server's idle timer
    // restarted: a heartbeat gives the lease a recent start.
    if boot_clock().saturating_sub(sent) > inner.session_timeout / 4 {
        grant.sent = Box::pin(grant.session.beat(inner.operation_timeout)).await?;
    }
    Ok(Some(grant))
}

/// The grant in `row` (`pg_backend_pid()`, token or null, own) on `session`.
pub(crate) fn granted(
    session: Arc<Session>,
    row: &tokio_postgres::Row,
    sent: Duration,
) -> Result<Grant> {
    session.check_own(row, 0, 2)?;
    let token = match row.try_get::<_, Option<i64>>(1) {
        Ok(None) => None,
        _ => Some(token(row)?),
    };
    Ok(Grant {
        session,
        token,
        sent,
    })
}

/// The transaction id in column 1 of `row`, as a token.
fn token(row: &tokio_postgres::Row) -> Result<u64> {
    u64::try_from(int(row, 1)?)
        .map_err(|_| Error::Postgres("the server gave a negative transaction id".into()))
}

/// The fencing token of the hold on `session`, read now ([`sql::TOKEN`]); refused when the
/// session is gone or is not its own.
fn read_token(client: &Weak<Inner>, session: &Weak<Session>) -> Result<u64> {
    let (Some(inner), Some(session)) = (client.upgrade(), session.upgrade()) else {
        return Err(Error::LockLost);
    };
    if inner.closed() {
        return Err(Error::Closed);
    }
    if session.ended() {
        return Err(Error::LockLost);
    }
    inner.block_on(async {
        let row = session
            .row(
                inner.operation_timeout,
                sql::TOKEN,
                &[(&session.marker, Type::INT8)],
            )
            .await?;
        session.check_own(&row, 0, 2)?;
        token(&row)
    })
}

/// A name is any text of 1 to [`MAX_NAME`] bytes without NUL.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("a PostgreSQL lock name must not be empty"));
    }
    if name.len() > MAX_NAME {
        return Err(Error::invalid(format!(
            "a PostgreSQL lock name is at most {MAX_NAME} bytes, not {}",
            name.len()
        )));
    }
    if name.contains('\0') {
        return Err(Error::invalid(
            "a PostgreSQL lock name cannot contain NUL (PostgreSQL's text cannot hold it)",
        ));
    }
    Ok(())
}

crate::core::hold::reentrant_lock!(PgMutex, "the Client's events thread");

impl std::fmt::Debug for PgMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgMutex")
            .field("name", &self.lock.raw.name)
            .field("held_here", &self.lock.is_acquired_in_this_process())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(MAX_NAME + 1)).is_err());
        assert!(check_name("a\0b").is_err());
        assert!(check_name(&"x".repeat(MAX_NAME)).is_ok());
        assert!(check_name("it's ✓").is_ok());
    }
}
