//! [`MySqlMutex`]: a re-entrant mutex on MySQL's and MariaDB's `GET_LOCK` (or, in the table
//! mode, a lease record), with health and fencing.

use std::sync::Arc;

use super::client::{Inner, MySqlClient};
use super::get_lock::{self, Mode};
use super::mode::MySqlMode;
use super::session::Session;
use super::sql::Record;
use super::table;
use crate::core::deadline::Deadline;
use crate::core::error::Result;
use crate::core::health::LockHealth;
use crate::core::hold::{Granted, RawLock, Reentrant, Report};
use crate::core::lease::LocalLease;
use crate::core::listeners::Dispatch;
use crate::core::lock::Release;

/// A mutex on MySQL or MariaDB: one holder at a time among every session that takes the same
/// `GET_LOCK` name, re-entrant per thread (through this object), with [`LockHealth`] and
/// fencing tokens.
///
/// # The name
/// Any text of 1 to 1024 bytes; two distinct names are two locks, byte for byte (no case
/// folding, no trailing space dropped, a NUL byte kept). A *plain* name — 1 to 64 bytes of
/// lower-case ASCII letters, digits and `_-.:;/`, not 64 hex digits — is the `GET_LOCK` name
/// itself; any other is the 64 hex digits of the SHA-256 of its UTF-8 bytes, computed by the
/// server (`SHA2(…, 256)`), within MySQL's and MariaDB's limits. Any SQL client
/// takes the same lock with the SQL [`lock_sql`](Self::lock_sql) gives (`SELECT
/// GET_LOCK('NAME', TIMEOUT)`, then `SELECT RELEASE_LOCK('NAME')`), so a `mysql` script or a
/// Python or Java service excludes zklock and is excluded by it.
///
/// # Fairness
/// Waiters queue in the server's metadata lock manager: measured on MariaDB 10.11, granted in
/// the order they asked. (Not measured on MySQL 8.) [`try_lock`](Self::try_lock) takes a free
/// lock without queueing.
///
/// # Sessions
/// Each holding thread holds on a connection of its own, and each waiting thread waits on one:
/// see [`MySqlClient`]. Ending that connection frees the lock, which is how a guard's drop and
/// every failure let go; a `release()` the server confirmed keeps the connection, which then
/// holds nothing, for the Client's next acquisition; [`cancel_waiters`](crate::Lock::cancel_waiters) and the Client's close end a
/// wait by `KILL CONNECTION` of the waiting session from the Client's own.
///
/// # Health
/// The holding session sends a heartbeat (`COM_PING`) at a third of the Client's session
/// timeout. `health()` reads `Suspended` once half the session timeout has passed since the
/// last acknowledged heartbeat was sent, `Lost` once all of it has (the server has ended the
/// session by its `wait_timeout`, or will when it next looks), and `Lost` once the server ends
/// the session (`KILL`, a restart: the Client looks at idle holds' sockets every twentieth of
/// the session timeout, at most every 500 ms) or a heartbeat fails.
///
/// # Fencing
/// The token is a counter in the table `zklock_tokens`, one row per `GET_LOCK` name, bumped
/// the first time the hold's token is asked for ([`fencing_token`](Self::fencing_token) or the
/// guard's), on the holding session and only while it holds the lock (`INSERT … ON DUPLICATE
/// KEY UPDATE token = token + 1`, committed before the answer comes back, marking the row as
/// the holding connection's), then kept for the hold: a hold whose token is never asked for
/// writes nothing. A hold whose token was read clears the mark in its release's request, so
/// that [`participants`](super::MySqlClient::participants) shows a holder's token only once
/// that hold asked for it. The tokens read rise across
/// successive holders that go through zklock, also across a restart or a kill -9 of the server
/// with InnoDB's default `innodb_flush_log_at_trx_commit = 1` (with 2, across a kill of the
/// server but not a crash of its machine). Once the hold's session is gone, a token not read
/// before cannot be: `None` here, 0 on the guard. A holder that took the lock with plain SQL
/// bumps nothing.
///
/// # The table mode
/// A mutex of a Client in [`MySqlMode::Table`] is a lease row of `zklock_lock_record` instead:
/// the same API, the token is the row's version, waiters poll and queue (the one that has
/// waited longest takes the free row, by the database's clock), the Client's keeper
/// renews the row, `health()` reads `Lost` once a renewal matches nothing (the row expired by
/// the database's clock or was taken) or a whole session timeout has passed without one. See
/// [`MySqlClient`].
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::MySqlClient::connect("mysql://app:secret@127.0.0.1/app")?;
/// let mutex = zklock::mysql::MySqlMutex::new(&client, "ledger")?;
/// if let Some(guard) = mutex.try_lock_for(std::time::Duration::from_secs(5))? {
///     if guard.health() == zklock::LockHealth::Held {
///         println!("write with token {}", guard.fencing_token());
///     }
/// }
/// # Ok(()) }
/// ```
pub struct MySqlMutex {
    lock: Reentrant<Either>,
}

/// The lock of a mutex: `GET_LOCK` or a table lease, as its Client's mode says.
enum Either {
    GetLock(get_lock::Raw),
    Table(table::Raw),
}

/// A hold of an [`Either`].
enum EitherKept {
    GetLock(get_lock::Kept),
    Table(table::Kept),
}

impl MySqlMutex {
    /// A mutex named `name` (any text of 1 to 1024 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty or over-long
    /// name; nothing is sent.
    pub fn new(client: &MySqlClient, name: &str) -> Result<MySqlMutex> {
        let raw = match client.inner().mode {
            MySqlMode::GetLock => Either::GetLock(get_lock::Raw::new(client, name, Mode::Mutex)?),
            MySqlMode::Table => Either::Table(table::Raw::new(client, name)?),
        };
        Ok(MySqlMutex {
            lock: Reentrant::new(raw),
        })
    }

    /// The read and the write half of the read-write lock `name`.
    pub(crate) fn read_write(client: &MySqlClient, name: &str) -> Result<[MySqlMutex; 2]> {
        get_lock::refuse_in_table_mode(client, "read-write lock")?;
        let [read, write] = Reentrant::pair(
            Either::GetLock(get_lock::Raw::new(client, name, Mode::Read)?),
            Either::GetLock(get_lock::Raw::new(client, name, Mode::Write)?),
        );
        Ok([MySqlMutex { lock: read }, MySqlMutex { lock: write }])
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        match &*self.lock.raw {
            Either::GetLock(raw) => &raw.name,
            Either::Table(raw) => &raw.name,
        }
    }

    /// The SQL that takes the same lock from any client.
    ///
    /// In the `GET_LOCK` mode, waiting up to a year: `SELECT GET_LOCK('NAME', 31536000)` for a
    /// plain name (see the type's docs), `SELECT GET_LOCK(SHA2('NAME', 256), 31536000)` for
    /// another of printable ASCII without a quote or backslash, and `SELECT
    /// GET_LOCK(SHA2(X'…', 256), 31536000)` of its bytes for any other (the same under every
    /// `sql_mode` and character set). Release it with `SELECT RELEASE_LOCK(…)` of the same expression, or by
    /// closing the connection.
    ///
    /// In the table mode ([`MySqlMode::Table`]), one try at the lease record with the owner
    /// `@owner` and a lease of `@ms` milliseconds (set both first): the last row says whether
    /// it was taken and its token; the statement that lets it go follows as a comment.
    pub fn lock_sql(&self) -> String {
        match &*self.lock.raw {
            Either::GetLock(raw) => raw.lock_sql(),
            Either::Table(raw) => raw.lock_sql(),
        }
    }

    /// The server session (`CONNECTION_ID()`) of the calling thread's hold, if it holds the
    /// lock: what `IS_USED_LOCK` and `SHOW PROCESSLIST` show for it. `None` in the table mode,
    /// whose holds have no session of their own.
    pub fn connection_id(&self) -> Option<u32> {
        self.lock
            .mine(|h| match &h.grant {
                EitherKept::GetLock(kept) => Some(kept.session.id),
                EitherKept::Table(_) => None,
            })
            .flatten()
    }
}

/// The calling thread's hold, as a guarded transaction checks it.
pub(super) enum GuardedHold {
    /// Held by `session` under the `GET_LOCK` name `key` (an SQL expression).
    GetLock { session: Arc<Session>, key: String },
    /// The table mode's lease record.
    Table(Record),
}

/// The calling thread's hold, with its local lease and health, for a guarded transaction.
pub(super) type Held = (GuardedHold, Arc<LocalLease>, LockHealth);

impl MySqlMutex {
    /// The lock's Client and name, and the calling thread's hold (with its local lease and
    /// health), if it holds the lock: what a guarded transaction checks and runs on.
    pub(super) fn guarded_hold(&self) -> (&Inner, &str, Option<Held>) {
        let inner = match &*self.lock.raw {
            Either::GetLock(raw) => raw.client().inner(),
            Either::Table(raw) => raw.client().inner(),
        };
        let hold = self
            .lock
            .mine(|h| match &h.grant {
                EitherKept::GetLock(kept) => (
                    GuardedHold::GetLock {
                        session: kept.session.clone(),
                        key: kept.key.clone(),
                    },
                    kept.lease.clone(),
                ),
                EitherKept::Table(kept) => {
                    (GuardedHold::Table(kept.record.clone()), kept.lease.clone())
                }
            })
            .map(|(hold, lease)| {
                let health = self.lock.health().unwrap_or(LockHealth::Lost);
                (hold, lease, health)
            });
        (inner, self.name(), hold)
    }
}

impl RawLock for Either {
    type Grant = EitherKept;
    type Shared = ();

    fn share(_: &EitherKept) {}

    fn name(&self) -> &str {
        match self {
            Either::GetLock(raw) => &raw.name,
            Either::Table(raw) => &raw.name,
        }
    }

    fn closed(&self) -> bool {
        match self {
            Either::GetLock(raw) => raw.closed(),
            Either::Table(raw) => raw.closed(),
        }
    }

    fn dispatch(&self) -> Dispatch {
        match self {
            Either::GetLock(raw) => raw.dispatch(),
            Either::Table(raw) => raw.dispatch(),
        }
    }

    fn acquire(
        &self,
        deadline: Deadline,
        partner: Option<()>,
    ) -> Result<Option<Granted<EitherKept>>> {
        fn wrap<G>(g: Granted<G>, kept: fn(G) -> EitherKept) -> Granted<EitherKept> {
            Granted {
                grant: kept(g.grant),
                token: g.token,
                node: g.node,
            }
        }
        Ok(match self {
            Either::GetLock(raw) => raw
                .acquire(deadline, partner)?
                .map(|g| wrap(g, EitherKept::GetLock)),
            Either::Table(raw) => raw.acquire(deadline)?.map(|g| wrap(g, EitherKept::Table)),
        })
    }

    fn keep(&self, grant: &mut EitherKept, report: Report) -> Result<()> {
        match (self, grant) {
            (Either::GetLock(raw), EitherKept::GetLock(grant)) => raw.keep(grant, report),
            (Either::Table(raw), EitherKept::Table(grant)) => raw.keep(grant, report),
            _ => unreachable!("a grant of the other mode"),
        }
    }

    fn health(&self, grant: &EitherKept, reported: LockHealth) -> LockHealth {
        match grant {
            EitherKept::GetLock(grant) => get_lock::Raw::health(grant, reported),
            EitherKept::Table(grant) => table::Raw::health(grant, reported),
        }
    }

    fn release(&self, grant: EitherKept, how: Release, lost: bool, _: Option<()>) -> Result<()> {
        match (self, grant) {
            (Either::GetLock(raw), EitherKept::GetLock(grant)) => raw.release(grant, how, lost),
            (Either::Table(raw), EitherKept::Table(grant)) => raw.release(grant, how, lost),
            _ => unreachable!("a grant of the other mode"),
        }
    }

    fn cancel_waiters(&self) {
        match self {
            Either::GetLock(raw) => raw.cancel_waiters(),
            Either::Table(raw) => raw.cancel_waiters(),
        }
    }
}

crate::core::hold::reentrant_lock!(MySqlMutex, "the Client's events thread");

impl std::fmt::Debug for MySqlMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlMutex")
            .field("name", &self.name())
            .field("held_here", &self.lock.is_acquired_in_this_process())
            .finish_non_exhaustive()
    }
}
