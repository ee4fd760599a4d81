//! [`RedisMutex`]: a re-entrant, fair (or barging) mutex on Redis with health and fencing.

use std::sync::Arc;
use std::time::Duration;

use super::client::RedisClient;
use super::guarded::{Check, Guarded, Holding};
use super::keeper::ms;
use super::participants::RedisParticipant;
use super::scripts::{invocation, Keys, Layout, TOKEN_KEEP_TTLS};
use super::waiting::{How, Waiters};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, LockHealth};
use crate::core::hold::{Granted, RawLock, Reentrant, Report};
use crate::core::lease::LocalLease;
use crate::core::listeners::Dispatch;
use crate::core::lock::Release;

/// The longest lock name, in bytes.
const MAX_NAME: usize = 1024;

/// How often a waiter on a lock in redis-py's layout looks again (redis-py's own default).
const PY_POLL: Duration = Duration::from_millis(100);

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
/// let mutex = zklock::redis::RedisMutex::new(&client, "ledger")?;
/// if let Some(guard) = mutex.try_lock_for(std::time::Duration::from_secs(5))? {
///     if guard.health() == zklock::LockHealth::Held {
///         println!("write with token {}", guard.fencing_token());
///     }
/// }
/// # Ok(()) }
/// ```
pub struct RedisMutex {
    lock: Reentrant<Raw>,
}

/// The mutex without re-entrancy: one name's keys and the wait loop on them.
struct Raw {
    client: RedisClient,
    name: String,
    keys: Keys,
    mode: Mode,
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

/// One thread's hold: the owner id its key holds, the local lease its renewals extend, and
/// its place in the keeper's list (`None` until kept).
struct Grant {
    owner: String,
    lease: Arc<LocalLease>,
    kept: Option<u64>,
}

impl RedisMutex {
    /// A fair mutex named `name` (any text of 1 to 1024 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name; nothing is sent.
    pub fn new(client: &RedisClient, name: &str) -> Result<RedisMutex> {
        Ok(RedisMutex {
            lock: Reentrant::new(Raw::new(client, name, Mode::Fair)?),
        })
    }

    /// A mutex that grants a free lock to whoever asks first, ahead of the queue (waiters are
    /// still woken one at a time): the lowest latency, no fairness.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn barging(client: &RedisClient, name: &str) -> Result<RedisMutex> {
        Ok(RedisMutex {
            lock: Reentrant::new(Raw::new(client, name, Mode::Barging)?),
        })
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
    /// let shared = zklock::redis::RedisMutex::redis_py(&client, "reports")?;
    /// let _guard = shared.lock()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn redis_py(client: &RedisClient, name: &str) -> Result<RedisMutex> {
        Ok(RedisMutex {
            lock: Reentrant::new(Raw::new(client, name, Mode::RedisPy)?),
        })
    }

    /// The read and the write half of the read-write lock `name`.
    pub(crate) fn read_write(client: &RedisClient, name: &str) -> Result<[RedisMutex; 2]> {
        let [read, write] = Reentrant::pair(
            Raw::new(client, name, Mode::Read)?,
            Raw::new(client, name, Mode::Write)?,
        );
        Ok([RedisMutex { lock: read }, RedisMutex { lock: write }])
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lock.raw.name
    }

    /// The key that holds the lock (`zklock:{NAME}`; the name itself on redis-py's layout;
    /// `zklock:rw:{NAME}`, a sorted set, for a read lock and `zklock:rw:{NAME}:writer` for a
    /// write lock).
    pub fn key(&self) -> &str {
        self.lock.raw.key()
    }

    /// Who holds the lock and who waits, in that order (a read-write lock's half: the writer,
    /// the readers, then the queue), read from the server in one script.
    ///
    /// # Errors
    /// A connection error if the server does not answer within the operation timeout.
    pub fn participants(&self) -> Result<Vec<RedisParticipant>> {
        let raw = &self.lock.raw;
        super::participants::read(raw.client.inner(), &raw.keys)
    }
}

impl RedisMutex {
    /// What a guarded write of the calling thread is checked against, and its hold.
    pub(crate) fn guarded(&self) -> (Guarded<'_>, Holding) {
        let raw = &self.lock.raw;
        let check = match raw.mode {
            Mode::Read => Check::Entry,
            _ => Check::Holder,
        };
        let lock = Guarded {
            client: &raw.client,
            name: &raw.name,
            keys: &raw.keys,
            key: raw.key(),
            check,
        };
        let owner = self.lock.mine(|h| h.grant.owner.clone());
        (lock, owner.zip(self.lock.health()))
    }
}

impl Raw {
    fn new(client: &RedisClient, name: &str, mode: Mode) -> Result<Raw> {
        check_name(name)?;
        let layout = match mode {
            Mode::Fair | Mode::Barging => Layout::Queue,
            Mode::RedisPy => Layout::RedisPy,
            Mode::Read | Mode::Write => Layout::ReadWrite,
        };
        let keys = Keys::new(name, layout);
        client.inner().check_keys(&keys)?;
        Ok(Raw {
            client: client.clone(),
            name: name.to_owned(),
            keys,
            mode,
            waiters: Waiters::default(),
        })
    }

    fn key(&self) -> &str {
        match self.mode {
            Mode::Write => &self.keys.writer,
            _ => &self.keys.holder,
        }
    }
}

impl RawLock for Raw {
    type Grant = Grant;
    /// The owner id the same thread's write hold has: a read lock asked by the writer is
    /// granted at once (a downgrade).
    type Shared = String;

    fn share(grant: &Grant) -> String {
        grant.owner.clone()
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
        partner: Option<String>,
    ) -> Result<Option<Granted<Grant>>> {
        let inner = self.client.inner();
        let own_writer = match self.mode {
            Mode::Read => partner,
            _ => None,
        };
        let suffix = match self.mode {
            Mode::Read => "r",
            Mode::Write => "w",
            _ => "",
        };
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
            let answer: (i64, i64) = call.invoke(c)?;
            match inner.replicas() {
                Some(r) if answer.0 == 1 => {
                    replicated(
                        c,
                        r,
                        inner.scripts.release(self.keys.layout),
                        &self.keys,
                        owner,
                    )?;
                    Ok(answer)
                }
                _ => Ok(answer),
            }
        };
        let how = How {
            suffix,
            // A waiter on redis-py's layout polls: no wake-up message comes for it.
            woken: self.mode != Mode::RedisPy,
            poll,
        };
        let granted = (self.waiters).wait(inner, &self.keys, how, deadline, attempt)?;
        Ok(granted.map(|((token, sent), owner)| Granted {
            grant: Grant {
                owner,
                lease: inner.keeper.lease(sent),
                kept: None,
            },
            token: token.into(),
            node: self.key().to_owned(),
        }))
    }

    fn keep(&self, grant: &mut Grant, report: Report) -> Result<()> {
        let inner = self.client.inner();
        let kept = (inner.keeper).keep(&self.keys, &grant.owner, grant.lease.clone(), report);
        grant.kept = Some(kept);
        inner.keep_unless_closed(&self.keys, &grant.owner, kept)
    }

    fn health(&self, grant: &Grant, reported: LockHealth) -> LockHealth {
        worst(reported, grant.lease.health())
    }

    fn release(
        &self,
        grant: Grant,
        how: Release,
        lost: bool,
        _partner: Option<String>,
    ) -> Result<()> {
        let inner = self.client.inner();
        if let Some(kept) = grant.kept {
            inner.keeper.forget(kept);
        }
        match how {
            Release::Background => {
                inner.release_later(&self.keys, &grant.owner);
                Ok(())
            }
            Release::Within(until) => inner.release_within(&self.keys, &grant.owner, until, lost),
        }
    }

    fn cancel_waiters(&self) {
        self.waiters.cancel();
    }

    fn drop_bound(&self) -> Duration {
        self.client.inner().drop_bound()
    }
}

/// Replicated grants: waits until `r.count` replicas have the grant just made on `c`; if fewer
/// do within `r.timeout`, releases it (with `release`) and says so as an error.
pub(crate) fn replicated(
    c: &mut redis::Connection,
    r: super::keeper::Replicas,
    release: &redis::Script,
    keys: &Keys,
    owner: &str,
) -> redis::RedisResult<()> {
    let acked: i64 = r.wait().query(c)?;
    if acked >= i64::from(r.count) {
        return Ok(());
    }
    let mut undo = invocation(release, keys);
    undo.arg(owner);
    let _: i64 = undo.invoke(c)?;
    Err(redis::RedisError::from((
        redis::ErrorKind::Client,
        "a grant not replicated",
        format!(
            "{acked} of the {} replicas asked for confirmed the grant within {:?}: it was \
             released",
            r.count, r.timeout
        ),
    )))
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

crate::core::hold::reentrant_lock!(RedisMutex, "the Client's events thread");
super::guarded::lock_forms!(RedisMutex, "this mutex");
super::guarded::guard_forms!(RedisMutex);

impl std::fmt::Debug for RedisMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMutex")
            .field("name", &self.lock.raw.name)
            .field("mode", &self.lock.raw.mode)
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
        assert!(check_name(&"x".repeat(MAX_NAME)).is_ok());
        assert!(check_name("a}b{c").is_ok());
    }
}
