//! PostgreSQL's advisory-lock protocol, as every lock of the backend uses it: one lock of a
//! name is `hashtextextended(NAME, seed)`, asked for on a session (waiting with a server-side
//! `lock_timeout`, cancelled on the server when the caller gives up), granted with the
//! session's marker checked and, for a mutex, the fencing token.

use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::client::Inner;
use super::error::{error, retryable};
use super::session::{int, Session};
use super::sql::{self, Statements, EXCLUSIVE, EXCLUSIVE_WITH_TOKEN, SHARED};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::lease::boot_clock;
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

    pub(crate) const fn shared(seed: i64) -> Key {
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

/// A grant: the session that holds, the token (unless it is read when asked for), when the
/// lease starts.
pub(crate) struct Grant {
    pub(crate) session: Arc<Session>,
    pub(crate) token: Option<u64>,
    pub(crate) sent: Duration,
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
    let sql = inner.try_lock_sql(key.sql);
    let row = session
        .row(
            inner.operation_timeout,
            sql,
            &[
                (name, Type::TEXT),
                (&session.marker, Type::INT8),
                (&key.seed, Type::INT8),
            ],
        )
        .await
        .map_err(|e| refused(inner, sql, e))?;
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
    let sql = inner.lock_sql(key.sql);
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
        let lock = pin!(session.query(sql, &params));
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
            // The server has not answered the Client for a session timeout: it has ended (or
            // will end) this session too. The session is dropped, which closes it (a server
            // that wakes sees the close and ends the wait), and the retry policy decides.
            () = client_lost(inner, sent) => {
                tracing::debug!("zklock: the PostgreSQL Client reads Lost: a wait gives up its session");
                return Err(Error::ConnectionLoss);
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
        // The server's lock timeout. The lock may have been handed to the session as the
        // timeout fired: the server then reports the timeout and keeps the grant, and a
        // session-level lock outlives the statement's error. So the session is dropped, which
        // closes it and frees such a grant, rather than pooled: pooled, the next acquisition
        // on it would be granted at once (its own lock), ahead of every waiter, hold after hold.
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => return Ok(None),
        other => other.map_err(|e| refused(inner, sql, error(&e, false)))?,
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

/// Ready once the Client reads `Lost` while a wait sent at `sent` has lasted half a session
/// timeout, and a heartbeat on another session confirms it: the server has answered none of
/// the Client's heartbeats for a whole session timeout, and does not answer this one (opened
/// within the connection timeout, answered within the operation timeout). A server that
/// answers it is alive and the wait goes on: the Client's heartbeat may have failed because
/// its time (a sixth of the session timeout) was short for a loaded machine. (The half: a
/// Client that read `Lost` as the wait began reads `Reconnected` within it if the server
/// answers again.)
async fn client_lost(inner: &Inner, sent: Duration) {
    let timeout = inner.session_timeout;
    let look = (timeout / 20).clamp(Duration::from_millis(5), Duration::from_millis(500));
    loop {
        tokio::time::sleep(look).await;
        if inner.states.state() != crate::core::connection::ConnectionState::Lost
            || boot_clock().saturating_sub(sent) < timeout / 2
        {
            continue;
        }
        let beat = async {
            let (session, _) = inner.session().await?;
            let sent = session.beat(inner.operation_timeout).await?;
            inner.give_back(session);
            Ok::<_, Error>(sent)
        };
        match Box::pin(beat).await {
            Ok(sent) => inner.states.heard(sent),
            Err(e) => {
                tracing::debug!(
                    "zklock: the PostgreSQL server does not answer a waiter's heartbeat: {e}"
                );
                return;
            }
        }
    }
}

/// `e`, the answer to the lock statement `sql`; [`Error::ConnectionLoss`] when it is the
/// server refusing the table of tokens (see [`Inner::tokens_refused`]), so that the caller
/// drops the session (which frees a lock the statement may have taken) and asks again, now
/// with the plain statement.
pub(crate) fn refused(inner: &Inner, sql: &str, e: Error) -> Error {
    if inner.tokens_refused(sql, &e) {
        Error::ConnectionLoss
    } else {
        e
    }
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

/// The fencing token of the hold of `key` on `name` on `session`, read now ([`sql::TOKEN`],
/// recorded in the table of tokens if the Client writes it); refused when the session is gone
/// or is not its own.
pub(crate) fn read_token(
    client: &Weak<Inner>,
    session: &Weak<Session>,
    name: &str,
    key: Key,
) -> Result<u64> {
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
        let name: &(dyn ToSql + Sync) = &name;
        let shared: &(dyn ToSql + Sync) = &key.sql.shared;
        let params = [
            (&session.marker as &(dyn ToSql + Sync), Type::INT8),
            (name, Type::TEXT),
            (&key.seed, Type::INT8),
            (shared, Type::BOOL),
        ];
        let sql = inner.token_sql().0;
        let row = match session.row(inner.operation_timeout, sql, &params).await {
            // Refused (its transaction rolled back): read again without the table.
            Err(e) if inner.tokens_refused(sql, &e) => {
                (session.row(inner.operation_timeout, sql::TOKEN, &params)).await?
            }
            row => row?,
        };
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
