//! [`RedisReadWriteLock`]: many readers or one writer, on Redis.

use super::client::RedisClient;
use super::guarded::{Guarded, Holding};
use super::mutex::RedisMutex;
use crate::core::error::Result;

/// A read-write lock on Redis (Curator's `InterProcessReadWriteLock`, Redisson's
/// `RReadWriteLock`): any number of readers, or one writer, among every process using the same
/// name. Each half ([`RedisReadLock`], [`RedisWriteLock`]) is
/// a lock of its own, built as a [`RedisMutex`] is — re-entrant per thread, with guards, health, fencing
/// tokens and the [`Lock`](crate::Lock) trait — as Curator's halves are `InterProcessMutex`es.
///
/// **Fairness.** Waiters are granted in arrival order, and a waiting writer holds back every
/// reader that comes after it, so writers are not starved by a stream of readers. Readers
/// queued one after another are granted together: each one granted wakes the next if it reads
/// too.
///
/// **Downgrade, not upgrade.** A thread that holds the write lock may take the read lock at
/// once (ahead of any queue) and then release the write lock, keeping the read lock. A thread
/// that holds only the read lock and asks for the write lock gets
/// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock): it would wait for itself.
///
/// Readers are a sorted set `zklock:rw:{NAME}` (each entry expiring one TTL after its last
/// renewal) and the writer the key `zklock:rw:{NAME}:writer` with a TTL: a reader or writer
/// that crashes is gone one TTL after its last renewal.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
/// let lock = zklock::redis::RedisReadWriteLock::new(&client, "catalogue")?;
/// {
///     let _write = lock.write_lock().lock()?;
///     // change the catalogue; then downgrade:
///     let _read = lock.read_lock().lock()?;
/// } // both released
/// let _read = lock.read_lock().try_lock_for(std::time::Duration::from_secs(1))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisReadWriteLock {
    read: RedisReadLock,
    write: RedisWriteLock,
}

impl RedisReadWriteLock {
    /// The read-write lock named `name` (any text of 1 to 1024 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty or over-long
    /// name; nothing is sent.
    pub fn new(client: &RedisClient, name: &str) -> Result<RedisReadWriteLock> {
        let [read, write] = RedisMutex::read_write(client, name)?;
        Ok(RedisReadWriteLock {
            read: RedisReadLock::new(read),
            write: RedisWriteLock::new(write),
        })
    }

    /// The read half: shared with other readers, excluded by a writer.
    pub fn read_lock(&self) -> &RedisReadLock {
        &self.read
    }

    /// The write half: exclusive.
    pub fn write_lock(&self) -> &RedisWriteLock {
        &self.write
    }
}

crate::core::half::lock_half!(
    /// The read half of a [`RedisReadWriteLock`]: shared with other readers, excluded by a writer. Re-entrant per thread, with guards, health,
    /// a fencing token and the [`Lock`](crate::Lock) trait, as the backend's mutex.
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
    /// let lock = zklock::redis::RedisReadWriteLock::new(&client, "catalogue")?;
    /// let half: &zklock::redis::RedisReadLock = lock.read_lock();
    /// let guard = half.lock()?;
    /// println!("token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    RedisReadLock,
    RedisMutex,
    "the Client's events thread"
);

impl RedisReadLock {
    /// What a guarded write of the calling thread is checked against, and its hold.
    pub(crate) fn guarded(&self) -> (Guarded<'_>, Holding) {
        self.mutex.guarded()
    }

    /// The half's key: the readers' sorted set, or the writer's key.
    pub fn key(&self) -> &str {
        self.mutex.key()
    }

    /// Every holder and waiter of the read-write lock (see
    /// [`RedisMutex::participants`](super::RedisMutex::participants)).
    ///
    /// # Errors
    /// As [`RedisMutex::participants`](super::RedisMutex::participants).
    pub fn participants(&self) -> crate::core::error::Result<Vec<super::RedisParticipant>> {
        self.mutex.participants()
    }
}

crate::core::half::lock_half!(
    /// The write half of a [`RedisReadWriteLock`]: exclusive: no reader and no other writer. Re-entrant per thread, with guards, health,
    /// a fencing token and the [`Lock`](crate::Lock) trait, as the backend's mutex.
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
    /// let lock = zklock::redis::RedisReadWriteLock::new(&client, "catalogue")?;
    /// let half: &zklock::redis::RedisWriteLock = lock.write_lock();
    /// let guard = half.lock()?;
    /// println!("token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    RedisWriteLock,
    RedisMutex,
    "the Client's events thread"
);

impl RedisWriteLock {
    /// What a guarded write of the calling thread is checked against, and its hold.
    pub(crate) fn guarded(&self) -> (Guarded<'_>, Holding) {
        self.mutex.guarded()
    }

    /// The half's key: the readers' sorted set, or the writer's key.
    pub fn key(&self) -> &str {
        self.mutex.key()
    }

    /// Every holder and waiter of the read-write lock (see
    /// [`RedisMutex::participants`](super::RedisMutex::participants)).
    ///
    /// # Errors
    /// As [`RedisMutex::participants`](super::RedisMutex::participants).
    pub fn participants(&self) -> crate::core::error::Result<Vec<super::RedisParticipant>> {
        self.mutex.participants()
    }
}

super::guarded::lock_forms!(RedisReadLock, "this read lock");
super::guarded::guard_forms!(RedisReadLock);

super::guarded::lock_forms!(RedisWriteLock, "this write lock");
super::guarded::guard_forms!(RedisWriteLock);
