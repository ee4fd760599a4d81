//! [`PgXactLock`]: an advisory lock taken inside the caller's own transaction, on a connection
//! the caller owns, and released by that transaction's commit or rollback.
//!
//! The lock is `pg_advisory_xact_lock(hashtextextended(NAME, 0))`: the same key as a
//! [`PgMutex`](super::PgMutex) of the same name, so the two exclude each other, and a fencing
//! token from the same source (a transaction id assigned after the grant), so tokens rise
//! across holders of either kind. Nothing outlives the transaction, which is why it works
//! through a pooler in transaction mode, where a session lock cannot.

use std::time::Duration;

use super::advisory::check_name;
use super::sql::literal;
use crate::core::error::{Error, Result};

/// The savepoint that scopes an attempt: a lock that times out is undone with it, and the
/// caller's transaction goes on.
const SAVEPOINT: &str = "zklock_xact_lock";

/// Undoes a failed attempt: the savepoint's changes (the settings, a lock not granted) go, the
/// caller's transaction is usable again.
#[cfg(any(feature = "postgres-sync", feature = "postgres-async"))]
const UNDO: &str = "ROLLBACK TO SAVEPOINT zklock_xact_lock; RELEASE SAVEPOINT zklock_xact_lock";

/// The longest wait `lock_timeout` can express: `i32::MAX` milliseconds (about 24.8 days).
const MAX_WAIT_MS: u128 = i32::MAX as u128;

/// A transaction-scoped advisory lock held by the caller's own transaction: what
/// `PgXactLock::acquire` (the synchronous `postgres` crate, feature `postgres-sync`) and
/// `PgXactLock::acquire_async` (`tokio-postgres`, feature `postgres-async`) return when the
/// lock is granted.
///
/// The value only describes the hold: the lock belongs to the transaction, and its
/// `COMMIT` or `ROLLBACK` (or the connection's end) releases it. Nothing releases it earlier
/// (PostgreSQL has no unlock for a transaction-level advisory lock), and dropping this value
/// does nothing.
///
/// # How it works
/// One round trip on the caller's connection (a simple-protocol query, so it works through
/// PgBouncer in transaction mode and needs no prepared statement), inside a savepoint: it sets
/// `lock_timeout` to the timeout, waits in the server's queue with
/// `pg_advisory_xact_lock(hashtextextended(NAME, 0))` (`pg_try_advisory_xact_lock` for a zero
/// timeout), reads the fencing token, puts the caller's `lock_timeout` back and releases the
/// savepoint. When the wait times out the savepoint is rolled back (a second round trip) and
/// the caller's transaction goes on as before. It also sets `synchronous_commit = on` for the
/// rest of the transaction, so that the token is durable when the transaction commits.
///
/// # Fencing token
/// The transaction's id (`txid_current()`, epoch included), assigned right after the grant,
/// as every other PostgreSQL hold of zklock's reads its token: it is above the token of every
/// earlier holder of the name, of this kind or a [`PgMutex`](super::PgMutex)'s. It is `None`
/// when the transaction already had an id before the lock (it wrote before taking it, or took
/// the lock before): that id was assigned before the grant and can be below an earlier
/// holder's. Take the lock before the transaction's first write to get a token.
///
/// # Bounds
/// The server ends the wait at the timeout (at least 1 ms, at most `i32::MAX` ms, about 24.8
/// days: `lock_timeout`'s range), and the call returns after one more round trip. The
/// connection is the caller's: against a server that stops answering, the call waits as any
/// statement on it would, bounded by that connection's own settings (`tcp_user_timeout`,
/// keepalives) and not by zklock.
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty or over-long name or one with a NUL character
/// (nothing is sent), and for a connection that is not inside a transaction block (the lock
/// would end with its statement); [`Error::Postgres`] for a transaction already failed and the
/// server's other refusals; [`Error::ConnectionLoss`] when the connection breaks.
///
/// # Example
/// ```no_run
/// # #[cfg(feature = "postgres-sync")]
/// # extern crate postgres_sync as postgres;
/// # #[cfg(feature = "postgres-sync")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use zklock::postgres::PgXactLock;
///
/// let mut client = postgres::Client::connect(
///     "host=127.0.0.1 port=6432 user=app password=secret dbname=app",
///     postgres::NoTls,
/// )?;
/// let mut tx = client.transaction()?;
/// match PgXactLock::acquire(&mut tx, "ledger", Duration::from_secs(5))? {
///     Some(lock) => {
///         let token = lock.fencing_token();
///         tx.execute("UPDATE ledger SET balance = balance + 1", &[])?;
///         println!("wrote under {lock:?}, token {token:?}");
///         tx.commit()?; // releases the lock
///     }
///     None => println!("busy for 5 s"), // dropping `tx` rolls back
/// }
/// # Ok(()) }
/// # #[cfg(not(feature = "postgres-sync"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgXactLock {
    name: String,
    token: Option<u64>,
    backend_pid: i32,
}

impl PgXactLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token: the transaction's id, assigned after the grant; `None` when the
    /// transaction had an id before it (see the type's docs).
    pub fn fencing_token(&self) -> Option<u64> {
        self.token
    }

    /// The server process that runs the transaction (`pg_backend_pid()`), as `pg_locks` shows
    /// it.
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// The SQL that takes the lock, `SELECT pg_advisory_xact_lock(hashtextextended('NAME', 0))`,
    /// with `NAME` quoted so that it reads the same under every setting: for a client other
    /// than `postgres` or `tokio-postgres` that wants to take the same lock.
    ///
    /// # Errors
    /// As `acquire` for a bad name.
    pub fn lock_sql(name: &str) -> Result<String> {
        check_name(name)?;
        Ok(format!(
            "SELECT pg_advisory_xact_lock(hashtextextended({}, 0))",
            literal(name)
        ))
    }
}

#[cfg(feature = "postgres-sync")]
impl PgXactLock {
    /// Takes the lock `name` in the transaction open on `client` (a `postgres::Transaction`,
    /// or a `postgres::Client` inside a `BEGIN`), waiting at most `timeout` in the server's
    /// queue: `Some` once granted, `None` when `timeout` passed first (the caller's
    /// transaction is then as it was). `Duration::ZERO` tries once without waiting.
    ///
    /// The lock is released by the transaction's commit or rollback. Feature
    /// `postgres-sync`.
    ///
    /// # Errors
    /// See the type's docs.
    pub fn acquire<C>(client: &mut C, name: &str, timeout: Duration) -> Result<Option<PgXactLock>>
    where
        C: postgres_sync::GenericClient,
    {
        let attempt = Attempt::new(name, timeout)?;
        match client.simple_query(&attempt.sql) {
            Ok(messages) => attempt.granted(&rows(messages)),
            Err(e) => {
                let outcome = attempt.failed(&e);
                if outcome.undo {
                    if let Err(undo) = client.batch_execute(UNDO) {
                        return Err(attempt.undo_failed(&undo));
                    }
                }
                outcome.result
            }
        }
    }
}

#[cfg(feature = "postgres-async")]
impl PgXactLock {
    /// As `acquire` (feature `postgres-sync`), on a `tokio_postgres::Transaction` (or a
    /// `tokio_postgres::Client` inside a `BEGIN`). Feature `postgres-async`.
    ///
    /// # Errors
    /// See the type's docs.
    pub async fn acquire_async<C>(
        client: &C,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<PgXactLock>>
    where
        C: tokio_postgres::GenericClient + Sync,
    {
        let attempt = Attempt::new(name, timeout)?;
        match client.simple_query(&attempt.sql).await {
            Ok(messages) => attempt.granted(&rows(messages)),
            Err(e) => {
                let outcome = attempt.failed(&e);
                if outcome.undo {
                    if let Err(undo) = client.batch_execute(UNDO).await {
                        return Err(attempt.undo_failed(&undo));
                    }
                }
                outcome.result
            }
        }
    }
}

/// One attempt's statements, and how to read what comes back.
#[cfg_attr(
    not(any(feature = "postgres-sync", feature = "postgres-async")),
    allow(dead_code)
)]
struct Attempt {
    name: String,
    sql: String,
}

/// What a failed attempt returns, and whether its savepoint must be rolled back first.
#[cfg_attr(
    not(any(feature = "postgres-sync", feature = "postgres-async")),
    allow(dead_code)
)]
struct Failed {
    result: Result<Option<PgXactLock>>,
    undo: bool,
}

#[cfg_attr(
    not(any(feature = "postgres-sync", feature = "postgres-async")),
    allow(dead_code)
)]
impl Attempt {
    fn new(name: &str, timeout: Duration) -> Result<Attempt> {
        check_name(name)?;
        Ok(Attempt {
            name: name.to_owned(),
            sql: statements(name, timeout),
        })
    }

    /// The rows tagged `before` and `lock` (see [`statements`]).
    fn granted(&self, rows: &[Vec<Option<String>>]) -> Result<Option<PgXactLock>> {
        let tagged = |tag: &str| {
            rows.iter()
                .find(|r| r.first().and_then(|c| c.as_deref()) == Some(tag))
        };
        let unexpected = || Error::Postgres("unexpected answer to the transaction lock".into());
        let before = tagged("before").ok_or_else(unexpected)?;
        let lock = tagged("lock").ok_or_else(unexpected)?;
        let column = |row: &Vec<Option<String>>, i: usize| row.get(i).cloned().flatten();
        if column(lock, 2).as_deref() != Some("t") {
            return Ok(None);
        }
        let backend_pid = column(lock, 1)
            .and_then(|p| p.parse().ok())
            .ok_or_else(unexpected)?;
        let xid: Option<u64> = column(lock, 3).and_then(|x| x.parse().ok());
        let token = match column(before, 1) {
            // The transaction's id was assigned before the grant: not a token.
            Some(_) => None,
            None => Some(xid.ok_or_else(unexpected)?),
        };
        Ok(Some(PgXactLock {
            name: self.name.clone(),
            token,
            backend_pid,
        }))
    }

    /// A failed round trip: a timeout is `None` once undone; outside a transaction or in a
    /// failed one the savepoint was never made.
    fn failed(&self, e: &tokio_postgres::Error) -> Failed {
        use tokio_postgres::error::SqlState;
        match e.code() {
            Some(code) if *code == SqlState::LOCK_NOT_AVAILABLE => Failed {
                result: Ok(None),
                undo: true,
            },
            Some(code) if *code == SqlState::NO_ACTIVE_SQL_TRANSACTION => Failed {
                result: Err(Error::invalid(
                    "a transaction lock needs a transaction: the connection is not inside one \
                     (use the client's transaction(), or BEGIN first); outside one the lock \
                     would end with its own statement",
                )),
                undo: false,
            },
            Some(code) if *code == SqlState::IN_FAILED_SQL_TRANSACTION => Failed {
                result: Err(super::error::error(e, false)),
                undo: false,
            },
            Some(_) => Failed {
                result: Err(super::error::error(e, false)),
                undo: true,
            },
            // The connection broke: there is nothing to undo on it.
            None => Failed {
                result: Err(super::error::error(e, false)),
                undo: false,
            },
        }
    }

    /// The savepoint could not be rolled back: the caller's transaction is left failed.
    fn undo_failed(&self, e: &tokio_postgres::Error) -> Error {
        match super::error::error(e, false) {
            Error::Postgres(why) => Error::Postgres(format!(
                "the transaction lock {:?} could not undo its attempt, roll the transaction \
                 back: {why}",
                self.name
            )),
            other => other,
        }
    }
}

/// The statements of one attempt, sent as one simple-protocol query (one round trip):
///
/// 1. a savepoint, so that a timed-out wait can be undone and the transaction go on (and the
///    check that there is a transaction at all: `SAVEPOINT` outside one fails);
/// 2. `before`: the transaction's id if it already has one, and the caller's `lock_timeout`
///    kept in a setting of the transaction;
/// 3. the wait's limit, `SET LOCAL lock_timeout` (not for a zero timeout);
/// 4. `lock`: the lock, then (the function in `FROM` returns before the target list is
///    computed) the backend, whether it was granted, the transaction id and its logical
///    message (as the session holds' token: see `TOKEN` in the statements' module), and
///    `synchronous_commit = on` for the rest of the transaction;
/// 5. the caller's `lock_timeout` back, and the savepoint released.
fn statements(name: &str, timeout: Duration) -> String {
    let key = format!("hashtextextended({}, 0)", literal(name));
    let token = [
        "txid_current()",
        "pg_logical_emit_message(true, 'zklock', '')",
        "set_config('synchronous_commit', 'on', true)",
    ];
    let (limit, lock) = if timeout.is_zero() {
        (
            String::new(),
            format!(
                "SELECT 'lock', pg_backend_pid(), l, {} \
                 FROM pg_try_advisory_xact_lock({key}) AS l",
                token
                    .map(|t| format!("CASE WHEN l THEN {t} END"))
                    .join(", ")
            ),
        )
    } else {
        let ms = timeout.as_millis().clamp(1, MAX_WAIT_MS);
        // A part of a millisecond counts as one: `lock_timeout = 0` would wait for ever.
        let ms = if Duration::from_millis(ms as u64) < timeout && ms < MAX_WAIT_MS {
            ms + 1
        } else {
            ms
        };
        (
            format!("SET LOCAL lock_timeout = {ms}; "),
            format!(
                "SELECT 'lock', pg_backend_pid(), true, {} FROM pg_advisory_xact_lock({key})",
                token.join(", ")
            ),
        )
    };
    format!(
        "SAVEPOINT {SAVEPOINT}; \
         SELECT 'before', txid_current_if_assigned(), \
         set_config('zklock.lock_timeout', current_setting('lock_timeout'), true); \
         {limit}{lock}; \
         SELECT set_config('lock_timeout', current_setting('zklock.lock_timeout'), true); \
         RELEASE SAVEPOINT {SAVEPOINT}"
    )
}

/// The rows of a simple-protocol answer, each column as text or null.
#[cfg(any(feature = "postgres-sync", feature = "postgres-async"))]
fn rows(messages: Vec<tokio_postgres::SimpleQueryMessage>) -> Vec<Vec<Option<String>>> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[Option<&str>]) -> Vec<Option<String>> {
        cells.iter().map(|c| c.map(str::to_owned)).collect()
    }

    #[test]
    fn timeouts_become_whole_milliseconds_within_lock_timeouts_range() {
        let limit = |d: Duration| {
            let sql = statements("n", d);
            sql.split("lock_timeout = ")
                .nth(1)
                .map(|s| s.split(';').next().unwrap().to_owned())
        };
        assert_eq!(limit(Duration::ZERO), None);
        assert!(statements("n", Duration::ZERO).contains("pg_try_advisory_xact_lock"));
        assert_eq!(limit(Duration::from_nanos(1)).as_deref(), Some("1"));
        assert_eq!(limit(Duration::from_micros(1500)).as_deref(), Some("2"));
        assert_eq!(limit(Duration::from_millis(250)).as_deref(), Some("250"));
        assert_eq!(limit(Duration::MAX).as_deref(), Some("2147483647"));
    }

    #[test]
    fn names_are_quoted_and_checked() {
        assert!(statements("it's", Duration::ZERO).contains("hashtextextended('it''s', 0)"));
        assert!(Attempt::new("", Duration::ZERO).is_err());
        assert!(Attempt::new("a\0b", Duration::ZERO).is_err());
        assert_eq!(
            PgXactLock::lock_sql("ledger").unwrap(),
            "SELECT pg_advisory_xact_lock(hashtextextended('ledger', 0))"
        );
    }

    #[test]
    fn the_token_is_the_id_assigned_after_the_grant_only() {
        let attempt = Attempt::new("n", Duration::from_secs(1)).unwrap();
        let granted = |before: Option<&str>| {
            attempt
                .granted(&[
                    row(&[Some("before"), before, Some("0")]),
                    row(&[
                        Some("lock"),
                        Some("42"),
                        Some("t"),
                        Some("731"),
                        Some("0/1"),
                        Some("on"),
                    ]),
                    row(&[Some("0")]),
                ])
                .unwrap()
                .unwrap()
        };
        assert_eq!(granted(None).fencing_token(), Some(731));
        assert_eq!(granted(Some("700")).fencing_token(), None);
        assert_eq!(granted(None).backend_pid(), 42);
        let refused = attempt
            .granted(&[
                row(&[Some("before"), None, Some("0")]),
                row(&[Some("lock"), Some("42"), Some("f"), None]),
            ])
            .unwrap();
        assert_eq!(refused, None);
        assert!(attempt.granted(&[]).is_err());
    }
}
