//! [`RedisSemaphore`] and its [`RedisLease`]: up to N holders at once, fair, with leases that a
//! crashed holder cannot keep.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::RedisClient;
use super::keeper::ms;
use super::mutex::check_name;
use super::participants::RedisParticipant;
use super::scripts::{invocation, Keys, Layout, TOKEN_KEEP_TTLS};
use super::waiting::{How, Waiters};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, HealthCell, HealthFeed, LockHealth};
use crate::core::lease::LocalLease;
use crate::core::lock::Release;

/// A counting semaphore on Redis (Curator's `InterProcessSemaphoreV2`, Redisson's
/// `RPermitExpirableSemaphore`): at most `max_leases` [`RedisLease`]s are out at once among
/// every process using the same name. Fair: waiters are granted in arrival order, each woken
/// by a message of its own when a permit is free for it.
///
/// Each lease is an entry of the sorted set `zklock:sem:{NAME}` that expires one TTL (the
/// Client's) after its last renewal; the Client renews its leases at a third of the TTL. A
/// holder that crashes or stops loses its lease one TTL after its last renewal and the permit
/// comes back by itself: no permit is ever leaked. A lease's `health()` reads as a lock's:
/// `Suspended` once half a TTL has passed since the last acknowledged renewal was sent, `Lost`
/// once a whole TTL has, or at once when a renewal finds the lease gone.
///
/// Every participant passes its own `max_leases`, as with Curator; give them all the same.
/// The semaphore is not re-entrant: each acquire takes one more lease. Leases are `Send`: any
/// thread may return them.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
/// let pool = zklock::redis::RedisSemaphore::new(&client, "report-workers", 3)?;
/// if let Some(lease) = pool.acquire_timeout(std::time::Duration::from_secs(5))? {
///     println!("one of 3, token {}", lease.fencing_token());
///     lease.release()?;
/// }
/// # Ok(()) }
/// ```
pub struct RedisSemaphore {
    client: RedisClient,
    name: String,
    keys: Keys,
    max_leases: u32,
    feed: Arc<HealthFeed>,
    waiters: Waiters,
}

impl RedisSemaphore {
    /// A semaphore named `name` (any text of 1 to 1024 bytes) with `max_leases` permits.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name or no permits; nothing is sent.
    pub fn new(client: &RedisClient, name: &str, max_leases: u32) -> Result<RedisSemaphore> {
        check_name(name)?;
        if max_leases == 0 {
            return Err(Error::invalid("a semaphore needs at least one lease"));
        }
        let keys = Keys::new(name, Layout::Semaphore);
        client.inner().check_keys(&keys)?;
        Ok(RedisSemaphore {
            client: client.clone(),
            name: name.to_owned(),
            keys,
            max_leases,
            feed: Arc::default(),
            waiters: Waiters::default(),
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The sorted set that holds the leases (`zklock:sem:{NAME}`).
    pub fn key(&self) -> &str {
        &self.keys.holder
    }

    /// The number of leases this participant allows at once.
    pub fn max_leases(&self) -> u32 {
        self.max_leases
    }

    /// Who has a lease and who waits, in that order, read from the server in one script.
    ///
    /// # Errors
    /// A connection error if the server does not answer within the operation timeout.
    pub fn participants(&self) -> Result<Vec<RedisParticipant>> {
        super::participants::read(self.client.inner(), &self.keys)
    }

    /// Waits for a lease, for as long as it takes.
    ///
    /// # Errors
    /// [`Error::Cancelled`] after [`cancel_waiters`](Self::cancel_waiters), [`Error::Closed`]
    /// once the Client is closed, [`Error::ConnectionLoss`] once the retry policy gives up.
    pub fn acquire(&self) -> Result<RedisLease> {
        self.acquire_by(Deadline::NEVER)?
            .ok_or_else(|| Error::Redis("a wait without a deadline ended without a lease".into()))
    }

    /// Waits at most `timeout` for a lease; `None` if none came (the wait left nothing behind).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<RedisLease>> {
        self.acquire_by(Deadline::after(timeout))
    }

    /// A lease if one is free now and nobody waits ahead; one script call.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Result<Option<RedisLease>> {
        self.acquire_by(Deadline::after(Duration::ZERO))
    }

    /// Ends every [`acquire`](Self::acquire) of this object in progress with
    /// [`Error::Cancelled`]; their queue entries are taken out.
    pub fn cancel_waiters(&self) {
        self.waiters.cancel();
    }

    fn acquire_by(&self, deadline: Deadline) -> Result<Option<RedisLease>> {
        let inner = self.client.inner();
        if inner.closed() {
            return Err(Error::Closed);
        }
        let started = Instant::now();
        let _waiting = crate::core::metrics::Waiting::new(&self.name);
        let ttl = inner.ttl();
        let script = inner.scripts.acquire(Layout::Semaphore);
        let attempt = |c: &mut redis::Connection, owner: &str, entry: u64| {
            let mut call = invocation(script, &self.keys);
            call.arg(owner)
                .arg(ms(ttl))
                .arg(entry)
                .arg(self.max_leases)
                .arg(ms(ttl * TOKEN_KEEP_TTLS));
            let answer: (i64, i64) = call.invoke(c)?;
            match inner.replicas() {
                Some(r) if answer.0 == 1 => {
                    let release = inner.scripts.release(Layout::Semaphore);
                    super::mutex::replicated(c, r, release, &self.keys, owner)?;
                    Ok(answer)
                }
                _ => Ok(answer),
            }
        };
        let how = How {
            suffix: "",
            woken: true,
            poll: ttl / 3,
        };
        let granted = (self.waiters).wait(inner, &self.keys, how, deadline, attempt)?;
        let Some(((token, sent), owner)) = granted else {
            crate::core::metrics::timed_out(&self.name);
            return Ok(None);
        };
        crate::core::metrics::acquired(&self.name, started.elapsed());
        let lease = inner.keeper.lease(sent);
        let (health, report) =
            self.feed
                .hold(inner.dispatch(), &self.name, &self.keys.holder, token);
        let kept = inner.keeper.keep(&self.keys, &owner, lease.clone(), report);
        inner.keep_unless_closed(&self.keys, &owner, kept)?;
        Ok(Some(RedisLease {
            client: self.client.clone(),
            name: self.name.clone(),
            keys: self.keys.clone(),
            owner,
            token,
            health,
            lease,
            kept,
            since: Instant::now(),
            returned: false,
        }))
    }
}

crate::core::health::forward_health_api!(RedisSemaphore, feed, "the Client's events thread");

impl std::fmt::Debug for RedisSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSemaphore")
            .field("name", &self.name)
            .field("max_leases", &self.max_leases)
            .finish_non_exhaustive()
    }
}

/// One permit of a [`RedisSemaphore`], renewed by the Client while it is out. Returned by
/// [`release`](Self::release), or on drop: in the caller, waiting at most 1 s (or the
/// Client's operation timeout if shorter), so that once the drop returns with the server
/// reachable another process can take the permit; what is not done by then goes on in the
/// background.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
/// let pool = zklock::redis::RedisSemaphore::new(&client, "uploads", 2)?;
/// let lease = pool.acquire()?;
/// if lease.health() == zklock::LockHealth::Held {
///     // work under the permit
/// }
/// drop(lease); // returned here
/// # Ok(()) }
/// ```
#[must_use = "dropping a lease returns it at once"]
pub struct RedisLease {
    client: RedisClient,
    name: String,
    keys: Keys,
    owner: String,
    token: u64,
    health: HealthCell,
    lease: Arc<LocalLease>,
    kept: u64,
    since: Instant,
    returned: bool,
}

impl RedisLease {
    /// The lease's id in the semaphore's sorted set (`CLIENT:SEQ`).
    pub fn id(&self) -> &str {
        &self.owner
    }

    /// The fencing token of this grant: above every token granted before it on this
    /// semaphore, as for [`RedisMutex`](super::RedisMutex).
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// The lease's health, computed now.
    pub fn health(&self) -> LockHealth {
        worst(*self.health.lock(), self.lease.health())
    }

    /// Returns the lease, waiting at most the Client's operation timeout; what is not done by
    /// then goes on in the background.
    ///
    /// # Errors
    /// [`Error::LockLost`] if the lease had expired or been lost; a connection error if the
    /// return could not be confirmed (it goes on in the background).
    pub fn release(mut self) -> Result<()> {
        self.release_as(Release::Within(None))
    }

    /// As [`release`](Self::release), waiting at most `timeout`.
    ///
    /// # Errors
    /// As [`release`](Self::release).
    pub fn release_timeout(mut self, timeout: Duration) -> Result<()> {
        self.release_as(Release::Within(Instant::now().checked_add(timeout)))
    }

    fn release_as(&mut self, how: Release) -> Result<()> {
        self.returned = true;
        let inner = self.client.inner();
        inner.keeper.forget(self.kept);
        crate::core::metrics::released(&self.name, self.since.elapsed());
        let lost = self.health() == LockHealth::Lost;
        let until = match how {
            Release::Background => {
                inner.release_later(&self.keys, &self.owner);
                return Ok(());
            }
            Release::Within(until) => until,
        };
        inner.release_within(&self.keys, &self.owner, until, lost)
    }
}

impl Drop for RedisLease {
    fn drop(&mut self) {
        if !self.returned {
            let by = self.client.inner().drop_deadline();
            if let Err(e) = self.release_as(Release::Within(Some(by))) {
                tracing::warn!("zklock: returning a Redis lease on drop: {e}");
            }
        }
    }
}

impl std::fmt::Debug for RedisLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLease")
            .field("semaphore", &self.name)
            .field("id", &self.owner)
            .field("fencing_token", &self.token)
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}
