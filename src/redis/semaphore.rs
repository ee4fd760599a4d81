//! [`RedisSemaphore`] and its [`RedisLease`]: up to N holders at once, fair, with leases that a
//! crashed holder cannot keep.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::RedisClient;
use super::guarded::{Check, Guarded, Holding};
use super::keeper::ms;
use super::mutex::check_name;
use super::ops::{RedisOp, RedisOpResult, RedisScript, RedisValue};
use super::participants::RedisParticipant;
use super::scripts::{invocation, Keys, Layout, TOKEN_KEEP_TTLS};
use super::waiting::{How, Waiters};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, HealthFeed, LockHealth};
use crate::core::lease::LocalLease;
use crate::core::leased::{Leased, RawLease};
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
        let kept = (inner.keeper).keep(&self.keys, &owner, lease.clone(), report.clone());
        inner.keep_unless_closed(&self.keys, &owner, kept)?;
        let held = Held {
            client: self.client.clone(),
            keys: self.keys.clone(),
            owner: owner.clone(),
            lease,
            kept,
        };
        Ok(Some(RedisLease {
            lease: Leased::new(held, &self.name, owner, token, health)
                .capped(self.feed.max_hold(), report),
        }))
    }
}

crate::core::health::forward_health_api!(RedisSemaphore, feed, "the Client's events thread");
crate::core::leased::capped_semaphore!(RedisSemaphore, feed);

impl std::fmt::Debug for RedisSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSemaphore")
            .field("name", &self.name)
            .field("max_leases", &self.max_leases)
            .finish_non_exhaustive()
    }
}

/// One permit of a [`RedisSemaphore`], renewed by the Client while it is out: its `id()` is
/// its entry in the semaphore's sorted set (`CLIENT:SEQ`), its token as a
/// [`RedisMutex`](super::RedisMutex)'s. Returned by [`release`](Self::release), or on drop: in
/// the caller, waiting at most 1 s (or the Client's operation timeout if shorter), so that once
/// the drop returns with the server reachable another process can take the permit; what is not
/// done by then goes on in the background.
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
    lease: Leased<Held>,
}

crate::core::leased::leased!(RedisLease);

impl RedisLease {
    /// `f` of what a guarded write under this lease is checked against, and the lease.
    fn with_guarded<T>(&self, f: impl FnOnce(&Guarded<'_>, Holding) -> T) -> T {
        let (client, keys, owner) = self
            .lease
            .with_raw(|held| (held.client.clone(), held.keys.clone(), held.owner.clone()));
        let lock = Guarded {
            client: &client,
            name: self.lease.name(),
            keys: &keys,
            key: &keys.holder,
            check: Check::Entry,
        };
        f(&lock, Some((owner, self.lease.health())))
    }

    /// As [`RedisMutex::guarded_multi`](super::RedisMutex::guarded_multi), for this lease:
    /// `ops` applied in one server-side step only while the lease lives (its entry in the
    /// semaphore's set is there and has not expired by the server's clock).
    ///
    /// # Blocking and errors
    /// As [`RedisMutex::guarded_multi`](super::RedisMutex::guarded_multi);
    /// [`Error::HoldLost`] once the lease is gone (before any I/O once it reads `Lost`).
    ///
    /// # Example
    /// ```no_run
    /// use zklock::redis::{RedisOp, RedisSemaphore};
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
    /// let pool = RedisSemaphore::new(&client, "uploads", 2)?;
    /// let lease = pool.acquire()?;
    /// lease.guarded_multi(&[RedisOp::set("{uploads}:job-42", lease.id())])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[RedisOp]) -> Result<Vec<RedisOpResult>> {
        self.with_guarded(|lock, holding| super::guarded::multi(lock, holding, ops))
    }

    /// As [`RedisMutex::guarded_script`](super::RedisMutex::guarded_script), for this lease:
    /// `script` run in one server-side step only while the lease lives.
    ///
    /// # Blocking and errors
    /// As [`RedisMutex::guarded_script`](super::RedisMutex::guarded_script);
    /// [`Error::HoldLost`] once the lease is gone.
    pub fn guarded_script(&self, script: &RedisScript) -> Result<RedisValue> {
        self.with_guarded(|lock, holding| super::guarded::script(lock, holding, script))
    }
}

/// A held Redis lease: its entry in the semaphore's set, renewed by the Client's keeper.
struct Held {
    client: RedisClient,
    keys: Keys,
    owner: String,
    lease: Arc<LocalLease>,
    kept: u64,
}

impl RawLease for Held {
    fn health(&self, reported: LockHealth) -> LockHealth {
        worst(reported, self.lease.health())
    }

    fn release(&mut self, how: Release, lost: bool) -> Result<()> {
        let inner = self.client.inner();
        inner.keeper.forget(self.kept);
        match how {
            Release::Background => {
                inner.release_later(&self.keys, &self.owner);
                Ok(())
            }
            Release::Within(until) => inner.release_within(&self.keys, &self.owner, until, lost),
        }
    }

    fn drop_release(&self) -> Release {
        Release::Within(Some(self.client.inner().drop_deadline()))
    }
}
