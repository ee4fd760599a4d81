//! [`MySqlSemaphore`] and its [`MySqlLease`]: up to N holders at once, each holding one of N
//! `GET_LOCK` names on a connection of its own, so that a crashed holder's lease comes back
//! when the server ends its session.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{MySqlClient, Waiter};
use super::get_lock::{attempt, granted, last_row, let_go, refuse_in_table_mode, Grant, Waits};
use super::sql::{bump_sql, check_name, key_sql};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, HealthFeed, LockHealth};
use crate::core::lease::boot_clock;
use crate::core::leased::{Leased, RawLease};
use crate::core::lock::Release;

/// The most leases a semaphore may have (each a `GET_LOCK` name tried in one statement).
pub(crate) const MAX_LEASES: u32 = 1_000;

/// How long a waiter waits on the one name it queues for before it tries all the names again.
const WAIT_SLICE: Duration = Duration::from_secs(1);

/// A counting semaphore on MySQL or MariaDB (Curator's `InterProcessSemaphoreV2`): at most
/// `max_leases` [`MySqlLease`]s are out at once among every session using the same name.
///
/// # The names
/// Lease `i` (from 1 to `max_leases`) is the `GET_LOCK` name of the text `NAME;i`, as a
/// [`MySqlMutex`](super::MySqlMutex) named `NAME;i` takes it (so hashed by `SHA2` unless
/// plain). A lease is one of these locks held on a connection of its own: when a holder
/// crashes, is frozen or is cut off, the server ends its session within the Client's session
/// timeout and the lease is free again. Any SQL client can take a lease:
/// `SELECT GET_LOCK('NAME;i', 0)` for some `i` up to N.
///
/// # Waiting and fairness
/// `acquire` tries the N names in order in one statement and takes the first free one. When
/// none is free it queues on one name chosen at random, for a slice of at most a second, then
/// tries all N again, until its deadline. A lease freed on the waiter's name is handed to it at
/// once; one freed on another name is found at the next try, within a second. So the semaphore
/// is **not FIFO**. Each waiter opens about two connections a second.
///
/// Every participant passes its own `max_leases`; give them all the same. The semaphore is not
/// re-entrant: each acquire takes one more lease. Leases are `Send`.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::MySqlClient::connect("mysql://app:secret@127.0.0.1/app")?;
/// let pool = zklock::mysql::MySqlSemaphore::new(&client, "report-workers", 3)?;
/// if let Some(lease) = pool.acquire_timeout(std::time::Duration::from_secs(5))? {
///     println!("lease {} of 3, token {}", lease.index(), lease.fencing_token());
///     lease.release()?;
/// }
/// # Ok(()) }
/// ```
pub struct MySqlSemaphore {
    client: MySqlClient,
    name: String,
    max_leases: u32,
    /// Each lease's `GET_LOCK` name, as SQL.
    keys: Vec<String>,
    feed: Arc<HealthFeed>,
    id: usize,
    cancelled: AtomicU64,
}

impl MySqlSemaphore {
    /// A semaphore named `name` (any text of 1 to 1024 bytes) with `max_leases` leases (1 to
    /// 1,000).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, a number of leases out of range, or a Client
    /// in the table mode (which has no semaphore); nothing is sent.
    pub fn new(client: &MySqlClient, name: &str, max_leases: u32) -> Result<MySqlSemaphore> {
        check_name(name)?;
        refuse_in_table_mode(client, "semaphore")?;
        if !(1..=MAX_LEASES).contains(&max_leases) {
            return Err(Error::invalid(format!(
                "a MySQL semaphore has 1 to {MAX_LEASES} leases, not {max_leases}"
            )));
        }
        static IDS: AtomicU64 = AtomicU64::new(1 << 40);
        Ok(MySqlSemaphore {
            client: client.clone(),
            name: name.to_owned(),
            max_leases,
            keys: (1..=max_leases)
                .map(|i| key_sql(&format!("{name};{i}")))
                .collect(),
            feed: Arc::default(),
            id: IDS.fetch_add(1, Ordering::Relaxed) as usize,
            cancelled: AtomicU64::new(0),
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
    pub fn acquire(&self) -> Result<MySqlLease> {
        self.acquire_by(Deadline::NEVER)?
            .ok_or_else(|| Error::MySql("a wait without a deadline ended without a lease".into()))
    }

    /// Waits at most `timeout` for a lease; `None` if none came.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<MySqlLease>> {
        self.acquire_by(Deadline::after(timeout))
    }

    /// A lease if one is free now: one statement on an idle or new connection.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Result<Option<MySqlLease>> {
        self.acquire_by(Deadline::after(Duration::ZERO))
    }

    /// Ends every [`acquire`](Self::acquire) of this object in progress with
    /// [`Error::Cancelled`].
    pub fn cancel_waiters(&self) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
        self.client.inner().cancel_waiters(self.id);
    }

    fn acquire_by(&self, deadline: Deadline) -> Result<Option<MySqlLease>> {
        let inner = self.client.inner();
        if inner.closed() {
            return Err(Error::Closed);
        }
        let started = Instant::now();
        let _waiting = crate::core::metrics::Waiting::new(&self.name);
        let waits = Waits {
            owner: self.id,
            cancelled: &self.cancelled,
            gen: self.cancelled.load(Ordering::SeqCst),
        };
        let mut errors = crate::core::retry::RetryBudget::new(inner.retry.clone());
        let (grant, index) = loop {
            match self.try_any(&waits) {
                Ok(Some(granted)) => break granted,
                Ok(None) => {}
                Err(e) if e.is_retryable() && !deadline.expired() && !inner.closed() => {
                    let Some(sleep) = errors.next_sleep() else {
                        return Err(e);
                    };
                    std::thread::sleep(sleep.min(deadline.remaining().unwrap_or(sleep)));
                }
                Err(e) if inner.closed() => {
                    tracing::debug!("zklock: acquiring {:?} ended by close: {e}", self.name);
                    return Err(Error::Closed);
                }
                Err(e) => return Err(e),
            }
            if deadline.expired() {
                crate::core::metrics::timed_out(&self.name);
                return Ok(None);
            }
            let index = fastrand::u32(1..=self.max_leases);
            let slice = deadline.min_after(WAIT_SLICE);
            match attempt(inner, &self.keys[index as usize - 1], slice, &waits) {
                Ok(Some(grant)) => break (grant, index),
                Ok(None) => {}
                Err(e) if e.is_retryable() && !inner.closed() => {}
                Err(_) if inner.closed() => return Err(Error::Closed),
                Err(e) => return Err(e),
            }
        };
        crate::core::metrics::acquired(&self.name, started.elapsed());
        let node = format!(
            "semaphore {:?} lease {index} (connection {})",
            self.name, grant.session.id
        );
        let (health, report) = self.feed.hold(
            inner.dispatch(),
            &self.name,
            &node,
            grant.token.unwrap_or_default(),
        );
        let kept = inner
            .keeper
            .keep(grant.session.clone(), grant.lease.clone(), report.clone());
        let key = self.keys[index as usize - 1].clone();
        let token = grant.token.unwrap_or_default();
        let held = Held {
            client: self.client.clone(),
            key: key.clone(),
            kept,
            grant: Some(grant),
        };
        Ok(Some(MySqlLease {
            index,
            lease: Leased::new(held, &self.name, key, token, health)
                .capped(self.feed.max_hold(), report),
        }))
    }

    /// One statement on an idle or new connection that takes the first free name, if any, and bumps
    /// its token.
    fn try_any(&self, waits: &Waits<'_>) -> Result<Option<(Grant, u32)>> {
        let inner = self.client.inner();
        let session = Arc::new(inner.pooled()?);
        let done = Arc::new(AtomicBool::new(false));
        inner.add_waiter(Waiter {
            owner: self.id,
            session: session.clone(),
            done: done.clone(),
        });
        let tries: String = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| format!("WHEN GET_LOCK({k}, 0) = 1 THEN {} ", i + 1))
            .collect();
        let sql = format!(
            "SET @zklock_slot = CASE {tries}ELSE 0 END; \
             SET @zklock_key = ELT(@zklock_slot, {keys}); \
             {bump}; SELECT @zklock_slot, IF(@zklock_slot > 0, LAST_INSERT_ID(), NULL)",
            keys = self.keys.join(", "),
            bump = bump_sql("@zklock_key", "@zklock_slot > 0")
        );
        let op = inner.operation_timeout;
        let sent = boot_clock();
        let answer = if waits.cancelled() || inner.closed() {
            Err(Error::Cancelled)
        } else {
            session.with(Some(op), op, |c| last_row(c, &sql))
        };
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
        match answer {
            Ok(Some((Some(slot), Some(token)))) if slot > 0 => {
                let index = u32::try_from(slot)
                    .ok()
                    .filter(|i| (1..=self.max_leases).contains(i))
                    .ok_or_else(|| Error::MySql(format!("a lease out of range: {slot}")));
                match index {
                    Ok(index) => Ok(Some((granted(inner, session, Some(token), sent)?, index))),
                    Err(e) => {
                        session.close();
                        Err(e)
                    }
                }
            }
            Ok(Some((Some(0), _))) => {
                session.close();
                Ok(None)
            }
            Ok(other) => {
                session.close();
                Err(Error::MySql(format!(
                    "unexpected answer to the semaphore's try: {other:?}"
                )))
            }
            Err(e) => {
                session.close();
                Err(e)
            }
        }
    }
}

crate::core::health::forward_health_api!(MySqlSemaphore, feed, "the Client's events thread");
crate::core::leased::capped_semaphore!(MySqlSemaphore, feed);

impl std::fmt::Debug for MySqlSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlSemaphore")
            .field("name", &self.name)
            .field("max_leases", &self.max_leases)
            .finish_non_exhaustive()
    }
}

/// One lease of a [`MySqlSemaphore`]: the `GET_LOCK` name of `NAME;index` held on a connection
/// of its own, kept alive by its heartbeat while it is out; its `id()` is that name, its
/// fencing token the name's counter in `zklock_tokens`, rising across successive holders of
/// the name. Returned by [`release`](Self::release) (the connection is closed either way,
/// which frees the name), or on drop by closing its connection (dropping never blocks).
#[must_use = "dropping a lease returns it at once"]
pub struct MySqlLease {
    index: u32,
    lease: Leased<Held>,
}

crate::core::leased::leased!(MySqlLease);

impl MySqlLease {
    /// Which of the semaphore's names this lease holds (1 to N).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The server session (`CONNECTION_ID()`) of the lease.
    pub fn connection_id(&self) -> u32 {
        (self.lease).with_raw(|r| r.grant.as_ref().map_or(0, |g| g.session.id))
    }
}

/// A held lease: its `GET_LOCK` name on a connection of its own, kept alive by the keeper.
struct Held {
    client: MySqlClient,
    key: String,
    kept: u64,
    /// Taken when the lease is returned.
    grant: Option<Grant>,
}

impl RawLease for Held {
    fn health(&self, reported: LockHealth) -> LockHealth {
        let Some(grant) = &self.grant else {
            return LockHealth::Lost;
        };
        if grant.session.ended() {
            return LockHealth::Lost;
        }
        worst(reported, grant.lease.health())
    }

    /// Releases the name within the deadline (in the background: closes the connection at
    /// once); the connection is closed either way, which frees the name.
    fn release(&mut self, how: Release, lost: bool) -> Result<()> {
        let Some(grant) = self.grant.take() else {
            return Ok(());
        };
        let inner = self.client.inner();
        inner.keeper.forget(self.kept);
        let_go(inner, &self.key, grant.session, how, lost, true, false)
    }

    fn drop_release(&self) -> Release {
        Release::Background
    }
}
