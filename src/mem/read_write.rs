//! [`MemReadWriteLock`]: many readers or one writer, in the process.

use super::client::MemClient;
use super::mutex::MemMutex;
use super::store::MemParticipant;
use crate::core::error::Result;

/// A read-write lock in the process, with the rules of every zklock read-write lock: any
/// number of readers or one writer among every Client of the store. Each half
/// ([`MemReadLock`], [`MemWriteLock`]) is a lock of its own — re-entrant per thread, with
/// guards, health, fencing tokens and the [`Lock`](crate::Lock) trait.
///
/// **Fairness.** Waiters are granted in arrival order, and a waiting writer holds back every
/// reader that comes after it; readers queued one after another are granted together.
///
/// **Downgrade, not upgrade.** A thread that holds the write lock may take the read lock at
/// once (ahead of any queue) and then release the write lock, keeping the read lock. A thread
/// that holds only the read lock and asks for the write lock gets
/// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock): it would wait for itself.
///
/// # Example
/// ```
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::mem::MemClient::connect("rw-doc")?;
/// let lock = zklock::mem::MemReadWriteLock::new(&client, "catalogue")?;
/// {
///     let _write = lock.write_lock().lock()?;
///     // change the catalogue; then downgrade:
///     let _read = lock.read_lock().lock()?;
/// } // both released
/// let _read = lock.read_lock().try_lock()?.expect("no writer");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MemReadWriteLock {
    read: MemReadLock,
    write: MemWriteLock,
}

impl MemReadWriteLock {
    /// The read-write lock named `name` (any text of 1 to 1024 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty or over-long
    /// name.
    pub fn new(client: &MemClient, name: &str) -> Result<MemReadWriteLock> {
        let [read, write] = MemMutex::read_write(client, name)?;
        Ok(MemReadWriteLock {
            read: MemReadLock::new(read),
            write: MemWriteLock::new(write),
        })
    }

    /// The read half: shared with other readers, excluded by a writer.
    pub fn read_lock(&self) -> &MemReadLock {
        &self.read
    }

    /// The write half: exclusive.
    pub fn write_lock(&self) -> &MemWriteLock {
        &self.write
    }
}

crate::core::half::lock_half!(
    /// The read half of a [`MemReadWriteLock`]: shared with other readers, excluded by a
    /// writer. Re-entrant per thread, with guards, health, a fencing token and the
    /// [`Lock`](crate::Lock) trait, as the backend's mutex.
    ///
    /// # Example
    /// ```
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::mem::MemClient::connect("read-half-doc")?;
    /// let lock = zklock::mem::MemReadWriteLock::new(&client, "catalogue")?;
    /// let half: &zklock::mem::MemReadLock = lock.read_lock();
    /// let guard = half.lock()?;
    /// println!("token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    MemReadLock,
    MemMutex,
    "the mem:// events thread"
);

impl MemReadLock {
    /// Every holder and waiter of the read-write lock, holders first.
    ///
    /// # Errors
    /// As [`MemMutex::participants`].
    pub fn participants(&self) -> Result<Vec<MemParticipant>> {
        self.mutex.participants()
    }
}

crate::core::half::lock_half!(
    /// The write half of a [`MemReadWriteLock`]: no reader and no other writer. Re-entrant
    /// per thread, with guards, health, a fencing token and the [`Lock`](crate::Lock) trait,
    /// as the backend's mutex.
    ///
    /// # Example
    /// ```
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::mem::MemClient::connect("write-half-doc")?;
    /// let lock = zklock::mem::MemReadWriteLock::new(&client, "catalogue")?;
    /// let half: &zklock::mem::MemWriteLock = lock.write_lock();
    /// let guard = half.lock()?;
    /// println!("token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    MemWriteLock,
    MemMutex,
    "the mem:// events thread"
);

impl MemWriteLock {
    /// Every holder and waiter of the read-write lock, holders first.
    ///
    /// # Errors
    /// As [`MemMutex::participants`].
    pub fn participants(&self) -> Result<Vec<MemParticipant>> {
        self.mutex.participants()
    }
}
