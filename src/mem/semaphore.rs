//! [`MemSemaphore`] and its [`MemLease`]: up to N holders at once, fair, in the process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{check_name, MemClient};
use super::mutex::release;
use super::store::{next_id, Ask, Kind, MemParticipant, Place, Role};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{HealthFeed, LockHealth};
use crate::core::leased::{Leased, RawLease};
use crate::core::listeners::on_listener_thread;
use crate::core::lock::Release;

/// A counting semaphore in the process (Curator's `InterProcessSemaphoreV2`): at most
/// `max_leases` [`MemLease`]s are out at once among every Client of the store. Fair: waiters
/// are granted in arrival order. Every participant passes its own `max_leases`, as with
/// Curator; give them all the same. Not re-entrant: each acquire takes one more lease. A
/// lease's health reads as a lock's and moves with the same controls
/// ([`MemClient::lose_holds`] frees the permit at once).
///
/// # Example
/// ```
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::mem::MemClient::connect("semaphore-doc")?;
/// let pool = zklock::mem::MemSemaphore::new(&client, "workers", 2)?;
/// let a = pool.acquire()?;
/// let b = pool.try_acquire()?.expect("a second lease");
/// assert!(pool.try_acquire()?.is_none(), "two of two are out");
/// a.release()?;
/// drop(b);
/// # Ok(()) }
/// ```
pub struct MemSemaphore {
    client: MemClient,
    name: String,
    max_leases: u32,
    feed: Arc<HealthFeed>,
    id: u64,
}

impl MemSemaphore {
    /// A semaphore named `name` (any text of 1 to 1024 bytes) with `max_leases` permits.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name or no permits.
    pub fn new(client: &MemClient, name: &str, max_leases: u32) -> Result<MemSemaphore> {
        check_name("semaphore", name)?;
        if max_leases == 0 {
            return Err(Error::invalid("a semaphore needs at least one lease"));
        }
        Ok(MemSemaphore {
            client: client.clone(),
            name: name.to_owned(),
            max_leases,
            feed: Arc::default(),
            id: next_id(),
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

    /// Who has a lease and who waits, in that order.
    ///
    /// # Errors
    /// As [`MemMutex::participants`](super::MemMutex::participants).
    pub fn participants(&self) -> Result<Vec<MemParticipant>> {
        let inner = self.client.inner();
        inner.pass(None)?;
        Ok(inner.store().participants(Kind::Semaphore, &self.name))
    }

    /// Waits for a lease, for as long as it takes.
    ///
    /// # Errors
    /// [`Error::Cancelled`] after [`cancel_waiters`](Self::cancel_waiters), [`Error::Closed`]
    /// once the Client is closed, [`Error::OnWatcherThread`] from a callback,
    /// [`Error::ConnectionLoss`] on a frozen Client after its operation timeout.
    pub fn acquire(&self) -> Result<MemLease> {
        self.acquire_by(Deadline::NEVER)?
            .ok_or_else(|| Error::invalid("a wait without a deadline ended without a lease"))
    }

    /// Waits at most `timeout` for a lease; `None` if none came (the wait left nothing behind).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<MemLease>> {
        self.acquire_by(Deadline::after(timeout))
    }

    /// A lease if one is free now and nobody waits ahead.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Result<Option<MemLease>> {
        self.acquire_by(Deadline::after(Duration::ZERO))
    }

    /// Ends every acquire of this object in progress with [`Error::Cancelled`].
    pub fn cancel_waiters(&self) {
        (self.client.inner().store()).cancel(Kind::Semaphore, &self.name, self.id);
    }

    fn acquire_by(&self, deadline: Deadline) -> Result<Option<MemLease>> {
        let inner = self.client.inner();
        if on_listener_thread() && !deadline.expired() {
            return Err(Error::OnWatcherThread);
        }
        inner.pass(None)?;
        let started = Instant::now();
        let _waiting = crate::core::metrics::Waiting::new(&self.name);
        let ask = Ask {
            kind: Kind::Semaphore,
            name: &self.name,
            client: inner.id(),
            asker: self.id,
            role: Role::Lease(self.max_leases),
        };
        let granted = (inner.store()).acquire(&ask, deadline, None, &|| inner.closed())?;
        let Some((entry, token)) = granted else {
            crate::core::metrics::timed_out(&self.name);
            return Ok(None);
        };
        crate::core::metrics::acquired(&self.name, started.elapsed());
        let id = format!("{}#{entry}", self.name);
        let (health, report) = (self.feed).hold(super::client::dispatch(), &self.name, &id, token);
        let place = Place {
            kind: Kind::Semaphore,
            name: self.name.clone(),
            entry,
        };
        if !inner.store().keep(&place, report.clone()) {
            if inner.closed() {
                return Err(Error::Closed);
            }
            report(LockHealth::Lost);
        }
        let held = Held {
            client: self.client.clone(),
            place,
        };
        Ok(Some(MemLease {
            lease: Leased::new(held, &self.name, id, token, health)
                .capped(self.feed.max_hold(), report),
        }))
    }
}

crate::core::health::forward_health_api!(MemSemaphore, feed, "the mem:// events thread");
crate::core::leased::capped_semaphore!(MemSemaphore, feed);

impl std::fmt::Debug for MemSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemSemaphore")
            .field("name", &self.name)
            .field("max_leases", &self.max_leases)
            .finish_non_exhaustive()
    }
}

/// One permit of a [`MemSemaphore`]; its `id()` is `NAME#ENTRY`. Returned by
/// [`release`](Self::release) (on a frozen Client waiting at most its operation timeout for the
/// thaw, the return then done at the thaw), or on drop (at once; on a frozen Client within the
/// drop bound, the rest at the thaw).
///
/// # Example
/// ```
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::mem::MemClient::connect("lease-doc")?;
/// let pool = zklock::mem::MemSemaphore::new(&client, "uploads", 2)?;
/// let lease = pool.acquire()?;
/// assert_eq!(lease.health(), zklock::LockHealth::Held);
/// drop(lease); // returned here
/// # Ok(()) }
/// ```
#[must_use = "dropping a lease returns it at once"]
pub struct MemLease {
    lease: Leased<Held>,
}

crate::core::leased::leased!(MemLease);

/// A held lease in the store: its entry.
struct Held {
    client: MemClient,
    place: Place,
}

impl RawLease for Held {
    fn health(&self, reported: LockHealth) -> LockHealth {
        if self.client.inner().closed() {
            return LockHealth::Lost;
        }
        reported
    }

    fn release(&mut self, how: Release, lost: bool) -> Result<()> {
        release(&self.client, self.place.clone(), how, lost)
    }

    fn drop_release(&self) -> Release {
        crate::core::leased::within(self.client.inner().drop_bound())
    }
}
