//! The `Lock` trait over the lock family, and the guard every lock hands out.

use std::marker::PhantomData;
use std::time::Duration;

use crate::client::LockHealth;
use crate::error::Result;

mod sealed {
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// What every lock of zklock can do; lets [`LockGuard`] (and code generic over locks) take any
/// of them. Sealed: implemented by zklock's locks only.
///
/// # Example
/// ```no_run
/// use zklock::{InterProcessMutex, Lock};
///
/// fn with_lock<L: Lock>(lock: &L, work: impl FnOnce()) -> zklock::Result<()> {
///     let _guard = lock.lock()?;
///     work();
///     Ok(())
/// }
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// with_lock(&InterProcessMutex::new(&client, "/locks/a")?, || println!("held"))?;
/// # Ok(()) }
/// ```
pub trait Lock: Sealed + Send + Sync {
    /// Blocks until the calling thread holds the lock.
    fn acquire(&self) -> Result<()>;

    /// Waits up to `timeout`: `false` on timeout, with nothing left behind.
    fn acquire_timeout(&self, timeout: Duration) -> Result<bool>;

    /// Releases one hold of the calling thread.
    fn release(&self) -> Result<()>;

    /// The calling thread's fencing token, if it holds the lock.
    fn fencing_token(&self) -> Option<u64>;

    /// The health of the calling thread's hold, if it holds the lock.
    fn health(&self) -> Option<LockHealth>;

    /// [`acquire`](Lock::acquire), returning a guard that releases on drop.
    fn lock(&self) -> Result<LockGuard<'_, Self>>
    where
        Self: Sized,
    {
        self.acquire()?;
        Ok(LockGuard::new(self))
    }

    /// [`acquire_timeout`](Lock::acquire_timeout), returning a guard, or `None` on timeout.
    fn try_lock_for(&self, timeout: Duration) -> Result<Option<LockGuard<'_, Self>>>
    where
        Self: Sized,
    {
        Ok(self.acquire_timeout(timeout)?.then(|| LockGuard::new(self)))
    }
}

/// Holds a lock for the calling thread; releases it when dropped.
///
/// Not `Send`: zklock's locks are re-entrant per thread, so a hold must be released on the
/// thread that took it.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let mutex = zklock::InterProcessMutex::new(&client, "/locks/a")?;
/// let guard = mutex.lock()?;
/// let token = guard.fencing_token();
/// guard.release()?; // or just drop it; this way errors are seen
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard<'a, L: Lock> {
    lock: &'a L,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl<'a, L: Lock> LockGuard<'a, L> {
    pub(crate) fn new(lock: &'a L) -> Self {
        LockGuard {
            lock,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// Releases now, reporting errors (dropping the guard only logs them).
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.lock.release()
    }

    /// This hold's fencing token.
    pub fn fencing_token(&self) -> u64 {
        self.lock.fencing_token().unwrap_or_default()
    }

    /// This hold's health.
    pub fn health(&self) -> LockHealth {
        self.lock.health().unwrap_or(LockHealth::Lost)
    }
}

impl<L: Lock> Drop for LockGuard<'_, L> {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = self.lock.release() {
                log::warn!("releasing a lock on guard drop: {e}");
            }
        }
    }
}

impl<L: Lock> std::fmt::Debug for LockGuard<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("released", &self.released)
            .finish()
    }
}
