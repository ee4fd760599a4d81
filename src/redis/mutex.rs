//! [`RedisMutex`]: a re-entrant, fair (or barging) mutex on Redis with health and fencing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::RedisClient;
use super::keeper::ms;
use super::participants::RedisParticipant;
use super::scripts::{invocation, Keys, Layout};
use super::waiting::{How, Waiters};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, HealthCell, HealthFeed, LockHealth};
use crate::core::lease::LocalLease;
use crate::core::lock::{forward_lock_api, Lock, Release, Sealed};
use crate::core::reentrant::{Detached, ThreadHolds};

/// The longest lock name, in bytes.
const MAX_NAME: usize = 1024;

/// How often a waiter on a lock in redis-py's layout looks again (redis-py's own default).
const PY_POLL: Duration = Duration::from_millis(100);

/// How long a token is remembered after its grant, in hold TTLs: a grant within that time of
/// the last one counts up from it even if the server's clock stepped back.
pub(crate) const TOKEN_KEEP_TTLS: u32 = 10;

/// A mutex on Redis: one holder at a time among every process using the same name, re-entrant
/// per thread (through this object), with [`LockHealth`] and fencing tokens. Fair by default:
/// waiters are granted in arrival order, each woken by a message of its own when its turn
/// comes; [`RedisMutex::barging`] lets a newcomer take a free lock ahead of the queue.
///
/// The hold is the key `zklock:{NAME}` with the Client's TTL, renewed by the Client at a third
/// of it. A holder that crashes or stops is freed by the server one TTL after its last renewal.
/// `health()` reads `Suspended` once half a TTL has passed since the last acknowledged renewal
/// was sent, `Lost` once a whole TTL has (the key may be gone), or at once when a renewal finds
/// the key gone or another's.
///
/// The fencing token is the server's clock in microseconds at the grant, or the previous
/// token + 1 if that is higher (the previous one is kept for ten TTLs): it rises across
/// successive holders, also across a restart of Redis that lost every key, unless the
/// server's clock (or a promoted replica's) is behind the one that granted the last token.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
/// let mutex = zklock::RedisMutex::new(&client, "ledger")?;
/// if let Some(guard) = mutex.try_lock_for(std::time::Duration::from_secs(5))? {
///     if guard.health() == zklock::LockHealth::Held {
///         println!("write with token {}", guard.fencing_token());
///     }
/// }
/// # Ok(()) }
/// ```
pub struct RedisMutex {
    client: RedisClient,
    name: String,
    keys: Keys,
    mode: Mode,
    holders: Arc<ThreadHolds<Holding>>,
    /// A read-write lock's other half's holds (a downgrade, a refused upgrade).
    partner: Option<Arc<ThreadHolds<Holding>>>,
    feed: Arc<HealthFeed>,
    waiters: Waiters,
}

/// Who is granted a free lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The first in the queue.
    Fair,
    /// Whoever asks first.
    Barging,
    /// Whoever asks first, on redis-py's layout (no queue: waiters poll).
    RedisPy,
    /// A read-write lock's read half.
    Read,
    /// A read-write lock's write half.
    Write,
}

/// One thread's hold.
struct Holding {
    owner: String,
    token: u64,
    health: HealthCell,
    lease: Arc<LocalLease>,
    kept: u64,
    since: Instant,
}

impl Holding {
    fn health(&self) -> LockHealth {
        worst(*self.health.lock(), self.lease.health())
    }
}

impl RedisMutex {
    /// A fair mutex named `name` (any text of 1 to 1024 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name; nothing is sent.
    pub fn new(client: &RedisClient, name: &str) -> Result<RedisMutex> {
        RedisMutex::build(client, name, Mode::Fair)
    }

    /// A mutex that grants a free lock to whoever asks first, ahead of the queue (waiters are
    /// still woken one at a time): the lowest latency, no fairness.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn barging(client: &RedisClient, name: &str) -> Result<RedisMutex> {
        RedisMutex::build(client, name, Mode::Barging)
    }

    /// A mutex on redis-py's `Lock` layout, so that Python services using
    /// `redis.Redis().lock(name, timeout=…)` and this mutex exclude each other: the key is
    /// `name` itself, its value the holder's id, taken with `SET NX PX`, released by
    /// compare-and-delete, renewed by compare-and-`PEXPIRE` (as redis-py's `extend`).
    ///
    /// As on redis-py there is no queue: a free lock goes to whoever asks first and waiters
    /// look again every 100 ms (or when the holder's key would expire, if sooner). The fencing
    /// token is the server's clock in microseconds at the grant (there is no token key):
    /// rising as long as the server's clock does not step back. Python holders have no token.
    /// Give the Python side a `timeout` (redis-py's default is none: a crashed Python holder
    /// would keep the lock for ever).
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
    /// // Python: with redis.Redis().lock("reports", timeout=30): ...
    /// let shared = zklock::RedisMutex::redis_py(&client, "reports")?;
    /// let _guard = shared.lock()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn redis_py(client: &RedisClient, name: &str) -> Result<RedisMutex> {
        RedisMutex::build(client, name, Mode::RedisPy)
    }

    fn build(client: &RedisClient, name: &str, mode: Mode) -> Result<RedisMutex> {
        check_name(name)?;
        let layout = match mode {
            Mode::Fair | Mode::Barging => Layout::Queue,
            Mode::RedisPy => Layout::RedisPy,
            Mode::Read | Mode::Write => Layout::ReadWrite,
        };
        Ok(RedisMutex {
            client: client.clone(),
            name: name.to_owned(),
            keys: Keys::new(name, layout),
            mode,
            holders: Arc::default(),
            partner: None,
            feed: Arc::default(),
            waiters: Waiters::default(),
        })
    }

    /// The read and the write half of the read-write lock `name`.
    pub(crate) fn read_write(client: &RedisClient, name: &str) -> Result<[RedisMutex; 2]> {
        let mut read = RedisMutex::build(client, name, Mode::Read)?;
        let mut write = RedisMutex::build(client, name, Mode::Write)?;
        read.partner = Some(write.holders.clone());
        write.partner = Some(read.holders.clone());
        Ok([read, write])
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key that holds the lock (`zklock:{NAME}`; the name itself on redis-py's layout;
    /// `zklock:rw:{NAME}`, a sorted set, for a read lock and `zklock:rw:{NAME}:writer` for a
    /// write lock).
    pub fn key(&self) -> &str {
        match self.mode {
            Mode::Write => &self.keys.writer,
            _ => &self.keys.holder,
        }
    }

    /// Who holds the lock and who waits, in that order (a read-write lock's half: the writer,
    /// the readers, then the queue), read from the server in one script.
    ///
    /// # Errors
    /// A connection error if the server does not answer within the operation timeout.
    pub fn participants(&self) -> Result<Vec<RedisParticipant>> {
        super::participants::read(self.client.inner(), &self.keys)
    }

    /// Whether any thread of this process holds the lock through this object.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.holders.any()
    }

    /// Whether the calling thread holds the lock through this object.
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.holders.mine_exists()
    }

    /// The calling thread's fencing token, if it holds the lock.
    pub fn fencing_token(&self) -> Option<u64> {
        self.holders.mine(|h| h.token)
    }

    /// The health of the calling thread's hold, if it holds the lock, computed now.
    pub fn health(&self) -> Option<LockHealth> {
        self.holders.mine(Holding::health)
    }

    fn acquire_by(&self, deadline: Deadline) -> Result<bool> {
        let inner = self.client.inner();
        if inner.closed() {
            return Err(Error::Closed);
        }
        if self.health() == Some(LockHealth::Lost) {
            return Err(Error::LockLost);
        }
        if self.holders.reenter() {
            return Ok(true);
        }
        let partner = self.partner.as_deref();
        if self.mode == Mode::Write && partner.is_some_and(ThreadHolds::mine_exists) {
            // The readers ahead would include ourselves: we would wait for ever.
            return Err(Error::WouldDeadlock);
        }
        // A read lock's thread that holds the write lock reads at once (a downgrade).
        let own_writer = match self.mode {
            Mode::Read => partner.and_then(|w| w.mine(|h| h.owner.clone())),
            _ => None,
        };
        let started = Instant::now();
        let suffix = match self.mode {
            Mode::Read => "r",
            Mode::Write => "w",
            _ => "",
        };
        let _waiting = crate::core::metrics::Waiting::new(&self.name);
        let ttl = inner.ttl();
        let poll = if self.mode == Mode::RedisPy {
            PY_POLL
        } else {
            ttl / 3
        };
        let script = inner.scripts.acquire(self.keys.layout);
        let keep = ms(ttl * TOKEN_KEEP_TTLS);
        let attempt = |c: &mut redis::Connection, owner: &str, entry: u64| {
            let mut call = invocation(script, &self.keys);
            call.arg(owner).arg(ms(ttl));
            match self.mode {
                Mode::RedisPy => {}
                Mode::Fair | Mode::Barging => {
                    let fair = if self.mode == Mode::Fair { "1" } else { "0" };
                    call.arg(entry).arg(fair).arg(keep);
                }
                Mode::Read | Mode::Write => {
                    let own_writer = own_writer.as_deref().unwrap_or("");
                    call.arg(entry).arg(own_writer).arg(keep);
                }
            }
            call.invoke(c)
        };
        let how = How {
            suffix,
            // A waiter on redis-py's layout polls: no wake-up message comes for it.
            woken: self.mode != Mode::RedisPy,
            poll,
        };
        let granted = (self.waiters).wait(inner, &self.keys, how, deadline, attempt)?;
        match granted {
            Some(((token, sent), owner)) => {
                crate::core::metrics::acquired(&self.name, started.elapsed());
                self.hold(owner, token, sent)?;
                Ok(true)
            }
            None => {
                crate::core::metrics::timed_out(&self.name);
                Ok(false)
            }
        }
    }

    fn hold(&self, owner: String, token: u64, sent: Duration) -> Result<()> {
        let inner = self.client.inner();
        let lease = inner.keeper.lease(sent);
        let (health, report) = self
            .feed
            .hold(inner.dispatch(), &self.name, self.key(), token);
        let kept = inner.keeper.keep(&self.keys, &owner, lease.clone(), report);
        inner.keep_unless_closed(&self.keys, &owner, kept)?;
        self.holders.insert(Holding {
            owner,
            token,
            health,
            lease,
            kept,
            since: Instant::now(),
        });
        Ok(())
    }

    /// Lets go of a released hold as `how` says; [`Error::LockLost`] if it had been lost.
    fn finish(&self, holding: Holding, how: Release) -> Result<()> {
        let inner = self.client.inner();
        inner.keeper.forget(holding.kept);
        crate::core::metrics::released(&self.name, holding.since.elapsed());
        let lost = holding.health() == LockHealth::Lost;
        let until = match how {
            Release::Background => {
                inner.release_later(&self.keys, &holding.owner);
                return if lost { Err(Error::LockLost) } else { Ok(()) };
            }
            Release::Within(until) => until,
        };
        inner.release_within(&self.keys, &holding.owner, until, lost)
    }
}

/// A name is any text of 1 to [`MAX_NAME`] bytes.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("a Redis lock name must not be empty"));
    }
    if name.len() > MAX_NAME {
        return Err(Error::invalid(format!(
            "a Redis lock name is at most {MAX_NAME} bytes, not {}",
            name.len()
        )));
    }
    Ok(())
}

impl Sealed for RedisMutex {
    fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
        self.acquire_by(Deadline::until(until))
    }

    fn release_as(&self, how: Release) -> Result<()> {
        match self.holders.detach()? {
            Detached::StillHeld => Ok(()),
            Detached::Released(holding) => self.finish(holding, how),
        }
    }

    fn cancel(&self) {
        self.waiters.cancel();
    }

    fn acquired_here(&self) -> bool {
        self.holders.any()
    }
}

impl Lock for RedisMutex {
    fn fencing_token(&self) -> Option<u64> {
        RedisMutex::fencing_token(self)
    }

    fn health(&self) -> Option<LockHealth> {
        RedisMutex::health(self)
    }
}

forward_lock_api!(RedisMutex);
crate::core::health::forward_health_api!(RedisMutex, feed, "the Client's events thread");

impl Drop for RedisMutex {
    fn drop(&mut self) {
        // Holds left (guards forgotten, or released through another object): released in the
        // caller as a guard's drop does, what is not done in time in the background.
        let inner = self.client.inner();
        let by = inner.drop_deadline();
        for holding in self.holders.drain() {
            inner.keeper.forget(holding.kept);
            if let Err(e) = inner.release_within(&self.keys, &holding.owner, Some(by), false) {
                tracing::warn!("zklock: releasing Redis lock {:?} on drop: {e}", self.name);
            }
        }
    }
}

impl std::fmt::Debug for RedisMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMutex")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .field("held_here", &self.holders.any())
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
        assert!(check_name(&"x".repeat(MAX_NAME)).is_ok());
        assert!(check_name("a}b{c").is_ok());
    }
}
