//! InterProcessSemaphoreMutex: Curator's non-re-entrant mutex, a semaphore with one lease.

use std::time::Instant;

use parking_lot::Mutex;

use super::semaphore::{InterProcessSemaphoreV2, Lease};
use crate::core::channel::Receiver;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::HealthEvent;
use crate::core::health::LockHealth;
use crate::core::lock::{forward_lock_api, ArcLockGuard, Lock, LockGuard, Release, Sealed};
use crate::zookeeper::client::{AclProvider, Client};

/// Curator's `InterProcessSemaphoreMutex`: a mutex that is *not* re-entrant (a second acquire,
/// even by the holding thread, waits) and may be released from any thread. Built as an
/// [`InterProcessSemaphoreV2`] with one lease.
///
/// Its guards ([`LockGuard`], [`ArcLockGuard`]) are `Send`, unlike those of the re-entrant
/// locks: take the lock on one thread, hand the guard to another, release it there.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let m = std::sync::Arc::new(zklock::InterProcessSemaphoreMutex::new(&client, "/locks/job")?);
/// m.acquire()?;
/// let m2 = m.clone();
/// std::thread::spawn(move || m2.release()).join().unwrap()?; // released by another thread
/// # Ok(()) }
/// ```
pub struct InterProcessSemaphoreMutex {
    semaphore: InterProcessSemaphoreV2,
    lease: Mutex<Option<Lease>>,
}

impl std::fmt::Debug for InterProcessSemaphoreMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessSemaphoreMutex")
            .field("acquired", &self.is_acquired_in_this_process())
            .finish()
    }
}

impl InterProcessSemaphoreMutex {
    /// A semaphore mutex on `path`.
    pub fn new(client: &Client, path: &str) -> Result<InterProcessSemaphoreMutex> {
        Ok(InterProcessSemaphoreMutex {
            semaphore: InterProcessSemaphoreV2::new(client, path, 1)?,
            lease: Mutex::new(None),
        })
    }

    fn take(&self, lease: Option<Lease>) -> bool {
        match lease {
            Some(lease) => {
                *self.lease.lock() = Some(lease);
                true
            }
            None => false,
        }
    }

    /// Whether this object holds the lock.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.lease.lock().is_some()
    }

    /// Full paths of the lease nodes.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.semaphore.participant_nodes()
    }

    /// The held lease's node, if this object holds the lock.
    pub fn lock_node(&self) -> Option<String> {
        self.lease.lock().as_ref().map(|l| l.path().to_owned())
    }

    /// `f` of the held lease, if this object holds the lock.
    pub(crate) fn with_lease<R>(&self, f: impl FnOnce(&Lease) -> R) -> Option<R> {
        self.lease.lock().as_ref().map(f)
    }

    /// Data for the lock nodes this object creates from now on.
    pub fn set_node_data(&self, data: &[u8]) -> Result<()> {
        self.semaphore.set_node_data(data)
    }

    /// The ACL provider for the nodes this object creates from now on, and for the parents it
    /// creates (default: the Client's, see [`ClientBuilder::acl_provider`](crate::ClientBuilder::acl_provider)).
    pub fn set_acl_provider(&self, provider: impl AclProvider) {
        self.semaphore.set_acl_provider(provider);
    }

    /// A channel of every health change of this object's holds, each naming its node and
    /// fencing token (see [`HealthEvent`]).
    pub fn health_events(&self) -> Receiver<HealthEvent> {
        self.semaphore.health_events()
    }

    /// Calls `f` on the Client's watcher thread at every health change of a hold of this
    /// object; it must not block. Returns an id for
    /// [`remove_health_listener`](Self::remove_health_listener).
    pub fn on_health(&self, f: impl FnMut(HealthEvent) + Send + 'static) -> u64 {
        self.semaphore.on_health(f)
    }

    /// Removes a callback of [`on_health`](Self::on_health); `false` if it was not there.
    pub fn remove_health_listener(&self, id: u64) -> bool {
        self.semaphore.remove_health_listener(id)
    }
}

// SAFETY: a guard holds a shared reference to (or an `Arc` of) the lock and a flag. The lock is
// `Sync`, and a semaphore mutex, unlike the re-entrant locks, may be released from any thread
// (its hold is the object's lease, not the thread's), so its guards may move between threads.
// (The guards are `!Send` through a marker for the re-entrant locks' sake; an auto-trait bound
// chosen per lock would need an associated type on `Lock`, which `dyn Lock` cannot carry.)
#[allow(unsafe_code)]
unsafe impl Send for LockGuard<'_, InterProcessSemaphoreMutex> {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Send for ArcLockGuard<InterProcessSemaphoreMutex> {}

forward_lock_api!(InterProcessSemaphoreMutex);

impl Sealed for InterProcessSemaphoreMutex {
    /// Not re-entrant: also waits if this object already holds it.
    fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
        let lease = self.semaphore.acquire_one(Deadline::until(until))?;
        Ok(self.take(lease))
    }

    /// From any thread; [`Error::NotAcquired`] if not held.
    fn release_as(&self, how: Release) -> Result<()> {
        let mut lease = self.lease.lock().take().ok_or(Error::NotAcquired)?;
        lease.return_as(how)
    }

    fn cancel(&self) {
        self.semaphore.cancel_waiters()
    }

    /// Its semaphore's: the hold is a lease of it.
    fn cap_holds(&self, max_hold: Option<std::time::Duration>) -> Result<()> {
        self.semaphore.set_max_hold(max_hold)
    }

    fn acquired_here(&self) -> bool {
        self.is_acquired_in_this_process()
    }

    /// The lease's token: a semaphore's lease is never re-entered, and each has its own.
    fn hold_id(&self) -> Option<u64> {
        crate::Lock::fencing_token(self)
    }

    fn drop_bound(&self) -> std::time::Duration {
        self.semaphore.drop_bound()
    }
}

impl Lock for InterProcessSemaphoreMutex {
    fn fencing_token(&self) -> Option<u64> {
        self.lease.lock().as_ref().map(Lease::fencing_token)
    }

    fn health(&self) -> Option<LockHealth> {
        self.lease.lock().as_ref().map(Lease::health)
    }
}
