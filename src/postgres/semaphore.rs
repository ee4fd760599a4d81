//! [`PgSemaphore`] and its [`PgLease`]: up to N holders at once, each holding one of N advisory
//! locks on a session of its own, so that a crashed holder's lease comes back when the server
//! ends its session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_postgres::types::{ToSql, Type};

use super::advisory::{attempt, check_name, granted, refused, Grant, Key};
use super::client::{Inner, PgClient};
use super::error::retryable;
use super::hold::{let_go, Holding};
use super::session::{int, Session};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, HealthFeed, LockHealth};
use crate::core::lease::boot_clock;
use crate::core::leased::{Leased, RawLease};
use crate::core::lock::Release;

/// The most leases a semaphore may have (each is an advisory lock tried in turn).
const MAX_LEASES: u32 = 10_000;

/// How long a waiter waits on the one key it queues for before it tries all the keys again.
const WAIT_SLICE: Duration = Duration::from_secs(1);

/// A counting semaphore on PostgreSQL (Curator's `InterProcessSemaphoreV2`): at most
/// `max_leases` [`PgLease`]s are out at once among every session using the same name.
///
/// # The keys
/// Lease `i` (from 1 to `max_leases`) is the session-level advisory lock whose key is
/// `hashtextextended(NAME, i)`, computed by the server (seed 0 is the [`PgMutex`]'s key of
/// the same name, so the two never meet). A lease is one of these locks held on a session of
/// its own: when a holder crashes, is frozen or is cut off, the server ends its session within
/// the Client's session timeout (see [`PgClient`]) and the lease is free again — no lease is
/// ever leaked. Any SQL client can take a lease:
/// `SELECT pg_try_advisory_lock(hashtextextended('NAME', i))` for some `i` up to N.
///
/// # Waiting and fairness
/// `acquire` tries the N keys in order in one statement and takes the first free one. When none
/// is free it queues on one key chosen at random in the server's lock queue, for a slice of at
/// most a second (`lock_timeout`), then tries all N again, until its deadline. A lease freed
/// on the waiter's key is handed to it at once, in the order that key's waiters queued; a
/// lease freed on another key is found at the next try, within a second. So the semaphore is
/// **not FIFO**: a newcomer can take a freed lease before a waiter queued on another key. Each
/// waiter costs one session and about two statements a second.
///
/// Every participant passes its own `max_leases`, as with Curator; give them all the same (a
/// participant with a larger N takes keys the others do not count). The semaphore is not
/// re-entrant: each acquire takes one more lease. Leases are `Send`: any thread may return
/// them.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::PgClient::connect("postgres://app:secret@127.0.0.1/app")?;
/// let pool = zklock::postgres::PgSemaphore::new(&client, "report-workers", 3)?;
/// if let Some(lease) = pool.acquire_timeout(std::time::Duration::from_secs(5))? {
///     println!("lease {} of 3, token {}", lease.index(), lease.fencing_token());
///     lease.release()?;
/// }
/// # Ok(()) }
/// ```
///
/// [`PgMutex`]: super::PgMutex
pub struct PgSemaphore {
    client: PgClient,
    name: String,
    max_leases: u32,
    feed: Arc<HealthFeed>,
    /// Counts `cancel_waiters` calls; a waiter ends when it changes.
    cancelled: watch::Sender<u64>,
}

impl PgSemaphore {
    /// A semaphore named `name` (any text of 1 to 1024 bytes without NUL) with `max_leases`
    /// leases (1 to 10,000).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name or a number of leases out of range; nothing is
    /// sent.
    pub fn new(client: &PgClient, name: &str, max_leases: u32) -> Result<PgSemaphore> {
        check_name(name)?;
        if !(1..=MAX_LEASES).contains(&max_leases) {
            return Err(Error::invalid(format!(
                "a PostgreSQL semaphore has 1 to {MAX_LEASES} leases, not {max_leases}"
            )));
        }
        Ok(PgSemaphore {
            client: client.clone(),
            name: name.to_owned(),
            max_leases,
            feed: Arc::default(),
            cancelled: watch::Sender::new(0),
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of leases this participant allows at once.
    pub fn max_leases(&self) -> u32 {
        self.max_leases
    }

    /// Waits for a lease, for as long as it takes.
    ///
    /// # Errors
    /// [`Error::Cancelled`] after [`cancel_waiters`](Self::cancel_waiters), [`Error::Closed`]
    /// once the Client is closed, [`Error::ConnectionLoss`] once the retry policy gives up.
    pub fn acquire(&self) -> Result<PgLease> {
        self.acquire_by(Deadline::NEVER)?.ok_or_else(|| {
            Error::Postgres("a wait without a deadline ended without a lease".into())
        })
    }

    /// Waits at most `timeout` for a lease; `None` if none came.
    ///
    /// # Blocking
    /// At most `timeout` plus twice the connection timeout and four operation timeouts (a try
    /// of every key, then the last slice's wait, bounded as
    /// [`PgMutex::try_lock_for`](super::PgMutex::try_lock_for)).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<PgLease>> {
        self.acquire_by(Deadline::after(timeout))
    }

    /// A lease if one is free now: one statement (and a session, if none is pooled).
    ///
    /// # Blocking
    /// At most the connection timeout plus the operation timeout.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Result<Option<PgLease>> {
        self.acquire_by(Deadline::after(Duration::ZERO))
    }

    /// Ends every [`acquire`](Self::acquire) of this object in progress with
    /// [`Error::Cancelled`]; each leaves the server's queue.
    pub fn cancel_waiters(&self) {
        self.cancelled.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn acquire_by(&self, deadline: Deadline) -> Result<Option<PgLease>> {
        let inner = self.client.inner();
        if inner.closed() {
            return Err(Error::Closed);
        }
        let started = Instant::now();
        let mut cancelled = self.cancelled.subscribe();
        cancelled.mark_unchanged();
        let _waiting = crate::core::metrics::Waiting::new(&self.name);
        let asked = inner.block_on(self.attempt(inner, deadline, &mut cancelled));
        let (grant, index) = match asked {
            Ok(Some(_)) if inner.closed() => {
                // Granted as the Client closed: dropping the grant ends its session.
                return Err(Error::Closed);
            }
            Ok(Some(granted)) => granted,
            Ok(None) => {
                crate::core::metrics::timed_out(&self.name);
                return Ok(None);
            }
            Err(e) if inner.closed() => {
                tracing::debug!("zklock: acquiring {:?} ended by close: {e}", self.name);
                return Err(Error::Closed);
            }
            Err(e) => return Err(e),
        };
        crate::core::metrics::acquired(&self.name, started.elapsed());
        let node = format!(
            "semaphore {:?} lease {index} (backend {})",
            self.name, grant.session.pid
        );
        let (health, report) = self.feed.hold(
            inner.dispatch(),
            &self.name,
            &node,
            grant.token.unwrap_or_default(),
        );
        let lease = Holding::lease(inner, &grant);
        let holding = Holding::start(inner, grant, lease, health.clone(), report.clone());
        let token = holding.token;
        let held = Held {
            client: self.client.clone(),
            name: self.name.clone(),
            index,
            holding: Some(holding),
        };
        let id = format!("{}:{index}", self.name);
        Ok(Some(PgLease {
            lease: Leased::new(held, &self.name, id, token, health)
                .capped(self.feed.max_hold(), report),
        }))
    }

    /// Tries every key, then queues on one for a slice, until granted or out of time.
    async fn attempt(
        &self,
        inner: &Inner,
        deadline: Deadline,
        cancelled: &mut watch::Receiver<u64>,
    ) -> Result<Option<(Grant, u32)>> {
        loop {
            match self.try_any(inner, cancelled).await {
                Ok(Some(granted)) => return Ok(Some(granted)),
                Ok(None) => {}
                // The queued wait below retries through the policy; a try without time
                // left reports the error rather than "no lease".
                Err(e) if retryable(&e) && !deadline.expired() => {}
                Err(e) => return Err(e),
            }
            if deadline.expired() {
                return Ok(None);
            }
            let index = fastrand::u32(1..=self.max_leases);
            let slice = deadline.min_after(WAIT_SLICE);
            // With the token: a lease's comes with its grant.
            let key = Key::exclusive_with_token(i64::from(index));
            if let Some(grant) = attempt(inner, &self.name, key, slice, cancelled).await? {
                return Ok(Some((grant, index)));
            }
        }
    }

    /// One statement that takes the first free key, if any; a pooled session found ended is
    /// replaced at once (each is dropped, so this ends with the pool).
    async fn try_any(
        &self,
        inner: &Inner,
        cancelled: &mut watch::Receiver<u64>,
    ) -> Result<Option<(Grant, u32)>> {
        loop {
            let (session, pooled) = tokio::select! {
                s = inner.session() => s?,
                _ = cancelled.changed() => return Err(Error::Cancelled),
                () = inner.closing() => return Err(Error::Closed),
            };
            match self.try_any_on(inner, session).await {
                Err(e) if retryable(&e) && pooled && !inner.closed() => {
                    tracing::debug!("zklock: a pooled PostgreSQL session had ended ({e}); another");
                }
                other => return other,
            }
        }
    }

    /// [`try_any`](Self::try_any) on `session`.
    async fn try_any_on(
        &self,
        inner: &Inner,
        session: Arc<Session>,
    ) -> Result<Option<(Grant, u32)>> {
        let name: &(dyn ToSql + Sync) = &self.name;
        let n = i64::from(self.max_leases);
        let sent = boot_clock();
        let sql = inner.token_sql().1;
        let row = session
            .row(
                inner.operation_timeout,
                sql,
                &[
                    (name, Type::TEXT),
                    (&session.marker, Type::INT8),
                    (&n, Type::INT8),
                ],
            )
            .await
            .map_err(|e| refused(inner, sql, e))?;
        session.check_own(&row, 0, 2)?;
        if row.try_get::<_, Option<i64>>(5).ok().flatten().is_none() {
            inner.give_back(session);
            return Ok(None);
        }
        let index = u32::try_from(int(&row, 5)?)
            .map_err(|_| Error::Postgres("a lease key out of range".into()))?;
        Ok(Some((granted(session, &row, sent)?, index)))
    }
}

crate::core::health::forward_health_api!(PgSemaphore, feed, "the Client's events thread");
crate::core::leased::capped_semaphore!(PgSemaphore, feed);

impl std::fmt::Debug for PgSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSemaphore")
            .field("name", &self.name)
            .field("max_leases", &self.max_leases)
            .finish_non_exhaustive()
    }
}

/// One lease of a [`PgSemaphore`]: advisory lock `hashtextextended(NAME, index)` held on a
/// session of its own, kept alive by its heartbeat while it is out. Its `id()` is `NAME:INDEX`;
/// its fencing token the transaction id assigned at the grant, above every token granted
/// before it on the server (see [`PgMutex`](super::PgMutex)). Returned by
/// [`release`](Self::release) (if the unlock is not confirmed within the Client's operation
/// timeout, the session is closed, which frees the key), or on drop by closing its session
/// (dropping never blocks).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::PgClient::connect("postgres://app:secret@127.0.0.1/app")?;
/// let pool = zklock::postgres::PgSemaphore::new(&client, "uploads", 2)?;
/// let lease = pool.acquire()?;
/// if lease.health() == zklock::LockHealth::Held {
///     // work under the lease
/// }
/// drop(lease); // its session is closed: the server frees the key
/// # Ok(()) }
/// ```
#[must_use = "dropping a lease returns it at once"]
pub struct PgLease {
    lease: Leased<Held>,
}

crate::core::leased::leased!(PgLease);

impl PgLease {
    /// Which of the semaphore's keys this lease holds (1 to N): its advisory lock is
    /// `hashtextextended(NAME, index)`.
    pub fn index(&self) -> u32 {
        self.lease.with_raw(|r| r.index)
    }

    /// The server process (`pg_backend_pid()`) of the lease's session.
    pub fn backend_pid(&self) -> i32 {
        (self.lease).with_raw(|r| r.holding.as_ref().map_or(0, |h| h.session.pid))
    }
}

/// A held lease: its advisory lock on a session of its own, kept alive by its heartbeat.
struct Held {
    client: PgClient,
    name: String,
    index: u32,
    /// Taken when the lease is returned.
    holding: Option<Holding>,
}

impl RawLease for Held {
    fn health(&self, reported: LockHealth) -> LockHealth {
        (self.holding.as_ref()).map_or(LockHealth::Lost, |h| worst(reported, h.health()))
    }

    /// Unlocks within the deadline; if the unlock is not confirmed by then (or in the
    /// background), closes the session, which frees the key.
    fn release(&mut self, how: Release, lost: bool) -> Result<()> {
        let Some(holding) = self.holding.take() else {
            return Ok(());
        };
        let key = Key::exclusive(i64::from(self.index));
        let session = holding.stop();
        let_go(
            self.client.inner(),
            &self.name,
            key,
            session,
            how,
            lost,
            false,
        )
    }

    fn drop_release(&self) -> Release {
        Release::Background
    }
}
