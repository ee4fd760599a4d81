//! [`PgMutex`]: a re-entrant mutex on a PostgreSQL session-level advisory lock, with health
//! and fencing.

use std::sync::Arc;

use tokio::sync::watch;

use super::advisory::{attempt, check_name, read_token, try_on, Key};
use super::client::{Inner, PgClient};
use super::hold;
use super::keeper::{Keeping, Report};
use super::session::Session;
use super::sql;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, LockHealth};
use crate::core::hold::{Granted, RawLock, Reentrant};
use crate::core::lease::LocalLease;
use crate::core::listeners::Dispatch;
use crate::core::lock::Release;
use crate::core::token::Token;

/// Which lock a [`PgMutex`] is: a mutex, or a half of a read-write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Mutex,
    Read,
    Write,
}

/// The calling thread's hold (its session, its lease, its health), for a guarded transaction.
pub(super) type Held = (Arc<Session>, Arc<LocalLease>, LockHealth);

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
/// (asynchronous replication) or after `pg_resetwal`. When the database has the opt-in table
/// `zklock_tokens` (see `docs/postgres.md`), the same statement records the token there, so
/// that [`PgClient::participants`] shows it.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::PgClient::connect("postgres://app:secret@127.0.0.1/app")?;
/// let mutex = zklock::postgres::PgMutex::new(&client, "ledger")?;
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

    /// The server process (`pg_backend_pid()`) of the calling thread's holding session, if it
    /// holds the lock: what `pg_locks` and `pg_stat_activity` show for it.
    pub fn backend_pid(&self) -> Option<i32> {
        self.lock.mine(|h| h.grant.session.pid)
    }

    /// The lock's Client, name and key, and the calling thread's hold (its session, its lease, its
    /// health), if it holds the lock: what a guarded transaction runs on.
    pub(super) fn guarded_hold(&self) -> (&Inner, &str, Key, Option<Held>) {
        let raw = &self.lock.raw;
        let hold = self
            .lock
            .mine(|h| (h.grant.session.clone(), h.grant.lease.clone()))
            .map(|(session, lease)| {
                let health = self.lock.health().unwrap_or(LockHealth::Lost);
                (session, lease, health)
            });
        (raw.client.inner(), &raw.name, raw.key, hold)
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
                        let (name, key) = (self.name.clone(), self.key);
                        Token::later(move || read_token(&client, &session, &name, key))
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

crate::core::hold::reentrant_lock!(PgMutex, "the Client's events thread");

impl std::fmt::Debug for PgMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgMutex")
            .field("name", &self.lock.raw.name)
            .field("held_here", &self.lock.is_acquired_in_this_process())
            .finish_non_exhaustive()
    }
}
