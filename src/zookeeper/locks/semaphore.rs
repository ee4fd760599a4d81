//! InterProcessSemaphoreV2 and its Lease: Curator's counting semaphore.
//!
//! Layout as Curator's: `<path>/locks` holds an internal mutex that serialises acquirers, and
//! each lease is `<path>/leases/_c_<uuid>-lease-<seq>`. Both waits are LockInternals: the
//! internal mutex with one lease, the leases with `max_leases` (granted while among the first
//! `max_leases` nodes; else wait on the node `max_leases` ahead). Holding the internal mutex while
//! waiting means only the head acquirer waits on the leases.

use std::sync::Arc;
use std::time::Duration;

use super::driver::{LockDriver, LockNode, StandardDriver};
use super::internals::{shared_count, Leases, LockInternals};
use super::keeper::{keep_node, vouch, KeeperGuard};
use super::shared_count::SharedCount;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{HealthFeed, LockHealth};
use crate::core::leased::{Leased, RawLease};
use crate::core::lock::Release;
use crate::zookeeper::client::{on_io_thread, AclProvider, Client, CreateMode, Doomed, SharedAcl};
use crate::zookeeper::path;

const LOCK_PARENT: &str = "locks";
const LEASE_PARENT: &str = "leases";
const LOCK_NAME: &str = "lock-";
const LEASE_NAME: &str = "lease-";

/// Lease nodes: ephemeral sequential, FIFO by sequence.
struct LeaseDriver;

impl LockDriver for LeaseDriver {
    fn create_lock_node(&self, lock_name: &str) -> LockNode {
        LockNode::new(lock_name, CreateMode::EphemeralSequential)
    }

    fn sorts_by_creation(&self) -> bool {
        true
    }
}

/// Curator's `InterProcessSemaphoreV2`: at most `max_leases` leases held at once across every
/// process using the path, Curator's included.
///
/// # Fairness
/// Acquirers queue on an internal fair mutex, then for a lease in creation order.
///
/// # Leases
/// A [`Lease`] is returned on drop (or with [`Lease::return_lease`] to see errors); it may be
/// returned from any thread. Leases are not re-entrant: a thread asking twice needs two.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let pool = zklock::InterProcessSemaphoreV2::new(&client, "/semaphores/db", 5)?;
/// let lease = pool.acquire()?;          // one of five
/// let two = pool.acquire_many(2)?;      // two more
/// pool.return_all(two)?;
/// drop(lease);
/// # Ok(()) }
/// ```
pub struct InterProcessSemaphoreV2 {
    client: Client,
    lock: LockInternals<Client>,
    leases: LockInternals<Client>,
    max_leases: Leases,
    feed: Arc<HealthFeed>,
}

crate::core::health::forward_health_api!(
    InterProcessSemaphoreV2,
    feed,
    "the Client's watcher thread"
);
crate::core::leased::capped_semaphore!(InterProcessSemaphoreV2, feed);

impl std::fmt::Debug for InterProcessSemaphoreV2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessSemaphoreV2")
            .field("leases", &self.leases.path)
            .field("max_leases", &self.max_leases)
            .finish()
    }
}

impl InterProcessSemaphoreV2 {
    /// A semaphore on `path` with `max_leases` leases (at least one).
    pub fn new(client: &Client, path: &str, max_leases: u32) -> Result<InterProcessSemaphoreV2> {
        if max_leases == 0 {
            return Err(Error::invalid("a semaphore needs at least one lease"));
        }
        Self::with_leases(client, path, Leases::Fixed(max_leases as usize))
    }

    /// A semaphore on `path` whose number of leases is read from a [`SharedCount`] (Curator's
    /// `InterProcessSemaphoreV2(client, path, SharedCountReader)`); a change wakes waiters.
    pub fn with_shared_count(
        client: &Client,
        path: &str,
        count: &SharedCount,
    ) -> Result<InterProcessSemaphoreV2> {
        Self::with_leases(client, path, Leases::Shared(count.path().to_owned()))
    }

    fn with_leases(client: &Client, path: &str, leases: Leases) -> Result<InterProcessSemaphoreV2> {
        crate::zookeeper::path::validate(path, false)?;
        let lock_path = path::join(path, LOCK_PARENT);
        let lease_path = path::join(path, LEASE_PARENT);
        let one = Leases::Fixed(1);
        Ok(InterProcessSemaphoreV2 {
            client: client.clone(),
            lock: LockInternals::new(
                client.clone(),
                &lock_path,
                LOCK_NAME,
                Arc::new(StandardDriver),
                one,
            )?,
            leases: LockInternals::new(
                client.clone(),
                &lease_path,
                LEASE_NAME,
                Arc::new(LeaseDriver),
                leases.clone(),
            )?,
            max_leases: leases,
            feed: Arc::default(),
        })
    }

    /// Data for the lease nodes this object creates from now on.
    pub fn set_node_data(&self, data: &[u8]) -> Result<()> {
        self.leases.set_node_data(Some(data.to_vec()))
    }

    /// The ACL provider for the nodes this object creates from now on, and for the parents it
    /// creates (default: the Client's, see [`ClientBuilder::acl_provider`](crate::ClientBuilder::acl_provider)).
    pub fn set_acl_provider(&self, provider: impl AclProvider) {
        let provider: SharedAcl = Arc::new(provider);
        self.lock.set_acl_provider(provider.clone());
        self.leases.set_acl_provider(provider);
    }

    /// Blocks until a lease is free.
    ///
    /// # Blocking
    /// Without limit while every lease is held; through an outage until the retry policy gives
    /// up.
    ///
    /// # Errors
    /// As [`Lock::acquire`](crate::Lock::acquire).
    pub fn acquire(&self) -> Result<Lease> {
        Ok(self.acquire_one(Deadline::NEVER)?.expect("no deadline"))
    }

    /// Waits up to `timeout` for a lease; `None` on timeout, with nothing left behind. A zero
    /// timeout makes one attempt without waiting.
    ///
    /// # Blocking
    /// At most `timeout` waiting; each round trip may run past it by the operation timeout.
    ///
    /// # Errors
    /// As [`Lock::acquire`](crate::Lock::acquire); running out of time is `Ok(None)`.
    #[must_use = "`None` means no lease was acquired"]
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<Lease>> {
        self.acquire_one(Deadline::after(timeout))
    }

    /// One attempt, no wait: a lease if one is free now, else `None`.
    ///
    /// # Blocking and errors
    /// A few round trips, each bounded by the operation timeout. Errors as
    /// [`Lock::acquire`](crate::Lock::acquire).
    #[must_use = "`None` means no lease was acquired"]
    pub fn try_acquire(&self) -> Result<Option<Lease>> {
        self.acquire_one(Deadline::after(Duration::ZERO))
    }

    /// How long a lease's drop waits for the delete (see [`Client::drop_bound`]).
    pub(crate) fn drop_bound(&self) -> Duration {
        self.client.drop_bound()
    }

    /// Ends every acquisition of this object waiting now, on any thread, with
    /// [`Error::Cancelled`]; nothing is left behind.
    pub fn cancel_waiters(&self) {
        self.lock.cancel_waiters();
        self.leases.cancel_waiters();
    }

    /// Blocks until `n` leases are held.
    ///
    /// # Blocking
    /// Without limit while every lease is held; through an outage until the retry policy gives
    /// up.
    ///
    /// # Errors
    /// As [`Lock::acquire`](crate::Lock::acquire), and
    /// [`InvalidArgument`](Error::InvalidArgument) for `n` of 0 or above the number of leases.
    pub fn acquire_many(&self, n: u32) -> Result<Vec<Lease>> {
        Ok(self.acquire_n(n, Deadline::NEVER)?.expect("no deadline"))
    }

    /// Waits up to `timeout` for `n` leases; `None` on timeout, with the leases taken so far
    /// given back. The timeout covers all `n`. The acquirer keeps its place at the head of the
    /// queue until it has all `n`, so concurrent multi-lease acquirers cannot deadlock (Curator
    /// takes them one queue turn at a time and can).
    ///
    /// # Blocking
    /// At most `timeout` waiting; each round trip may run past it by the operation timeout.
    ///
    /// # Errors
    /// As [`Lock::acquire`](crate::Lock::acquire); running out of time is `Ok(None)`;
    /// [`InvalidArgument`](Error::InvalidArgument) for `n` of 0 or above the number of leases.
    #[must_use = "`None` means no lease was acquired"]
    pub fn acquire_many_timeout(&self, n: u32, timeout: Duration) -> Result<Option<Vec<Lease>>> {
        self.acquire_n(n, Deadline::after(timeout))
    }

    fn acquire_n(&self, n: u32, deadline: Deadline) -> Result<Option<Vec<Lease>>> {
        let max = self.max_leases()?;
        if n == 0 || n > max {
            return Err(Error::invalid(format!(
                "cannot acquire {n} leases of a semaphore with {max}"
            )));
        }
        // Unlike Curator, hold the internal lock for the whole batch: two acquirers that each
        // hold some leases and wait for more could otherwise wait for each other forever.
        let Some(lock) = self.lock.attempt_lock(deadline)? else {
            return Ok(None);
        };
        let mut leases = Vec::with_capacity(n as usize);
        let mut outcome = Ok(true);
        while leases.len() < n as usize {
            match self.take_lease(deadline) {
                Ok(Some(lease)) => leases.push(lease),
                Ok(None) => {
                    outcome = Ok(false);
                    break;
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        if let Err(e) = self
            .lock
            .release(&lock.path, lock.session, Release::Within(None))
        {
            tracing::debug!("releasing the semaphore's internal lock: {e}");
        }
        // On timeout or error, dropping what was taken gives it back.
        Ok(outcome?.then_some(leases))
    }

    pub(crate) fn acquire_one(&self, deadline: Deadline) -> Result<Option<Lease>> {
        Ok(self.acquire_n(1, deadline)?.and_then(|mut v| v.pop()))
    }

    /// One lease, by a caller that holds the internal lock.
    fn take_lease(&self, deadline: Deadline) -> Result<Option<Lease>> {
        let Some(acquired) = self.leases.attempt_lock(deadline)? else {
            return Ok(None);
        };
        let (health, report) = self.feed.hold(
            self.client.dispatch(),
            crate::zookeeper::path::parent(&acquired.path),
            &acquired.path,
            acquired.token,
        );
        let keeper = keep_node(
            &self.client,
            &acquired.path,
            acquired.session,
            report.clone(),
            None,
            acquired.primed,
        );
        let node = LeaseNode {
            client: self.client.clone(),
            path: acquired.path.clone(),
            session: acquired.session,
            keeper: Some(keeper),
        };
        let name = path::parent(&acquired.path).to_owned();
        Ok(Some(Lease {
            lease: Leased::new(node, &name, acquired.path, acquired.token, health)
                .capped(self.feed.max_hold(), report),
        }))
    }

    /// Returns a lease (Curator's `returnLease`); same as [`Lease::return_lease`].
    pub fn return_lease(&self, lease: Lease) -> Result<()> {
        lease.return_lease()
    }

    /// Returns every lease, trying all of them; reports the first failure.
    pub fn return_all(&self, leases: Vec<Lease>) -> Result<()> {
        let mut first = Ok(());
        for lease in leases {
            if let Err(e) = lease.return_lease() {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Full paths of the lease nodes (holders first, then the head acquirer's).
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.leases.participant_nodes()
    }

    /// The number of leases (read from the shared count, if there is one).
    pub fn max_leases(&self) -> Result<u32> {
        match &self.max_leases {
            Leases::Fixed(n) => Ok(*n as u32),
            Leases::Shared(count) => {
                let (data, _) = self.client.data(count)?;
                Ok(shared_count(count, &data)? as u32)
            }
        }
    }
}

/// A lease of an [`InterProcessSemaphoreV2`]: its node is deleted when the lease is returned or
/// dropped. May be moved to and returned from any thread. Dropping it deletes the node in the
/// calling thread within 1 s (or the Client's operation timeout, if shorter), the rest in the
/// background, as a [`LockGuard`](crate::LockGuard)'s drop does;
/// [`return_lease`](Lease::return_lease) waits longer and reports errors.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// # let pool = zklock::InterProcessSemaphoreV2::new(&client, "/semaphores/db", 5)?;
/// let lease = pool.acquire()?;
/// println!("holding {}", lease.path());
/// lease.return_lease()?;
/// # Ok(()) }
/// ```
#[must_use = "the lease is returned when dropped"]
pub struct Lease {
    lease: Leased<LeaseNode>,
}

crate::core::leased::leased!(Lease);

impl Lease {
    /// The lease node's path (also its [`id`](Self::id)).
    pub fn path(&self) -> &str {
        self.lease.id()
    }

    /// The Client the lease was taken through.
    pub(crate) fn client(&self) -> Client {
        self.lease.with_raw(|r| r.client.clone())
    }

    /// The lease node's data.
    pub fn data(&self) -> Result<Vec<u8>> {
        self.client().data(self.path()).map(|(d, _)| d)
    }

    /// Returns the lease now, reporting errors (Curator's `returnLease`); the same as
    /// [`release`](Self::release).
    ///
    /// # Blocking
    /// At most the Client's operation timeout (default: its connection timeout); a delete that
    /// cannot be done in time goes on in the background and the error is returned.
    ///
    /// # Errors
    /// [`LockLost`](Error::LockLost) if the lease had been lost before; a connection error if
    /// the delete could not be confirmed in time.
    pub fn return_lease(self) -> Result<()> {
        self.release()
    }

    /// [`return_lease`](Self::return_lease) bounded by `timeout`; the same as
    /// [`release_timeout`](Self::release_timeout).
    ///
    /// # Blocking and errors
    /// At most `timeout`; errors as [`return_lease`](Self::return_lease).
    pub fn return_lease_timeout(self, timeout: Duration) -> Result<()> {
        self.release_timeout(timeout)
    }

    pub(crate) fn return_as(&mut self, how: Release) -> Result<()> {
        self.lease.release_as(how)
    }
}

/// A held lease node of the Client's session (an [`InterProcessSemaphoreV2`]'s or a
/// [`KazooSemaphore`](super::KazooSemaphore)'s), followed by its keeper for health.
pub(super) struct LeaseNode {
    pub(super) client: Client,
    pub(super) path: String,
    pub(super) session: i64,
    /// Dropped when the lease is returned.
    pub(super) keeper: Option<KeeperGuard>,
}

impl RawLease for LeaseNode {
    /// `reported`, or Lost once the session expired: a process that stood still past its
    /// session reads Lost before its I/O thread notices.
    fn health(&self, reported: LockHealth) -> LockHealth {
        vouch(&self.client, self.session, reported)
    }

    /// Deletes the node by the deadline (`None`: the Client's operation timeout, else its
    /// connection timeout); what cannot be done in time goes on in the background.
    fn release(&mut self, how: Release, _: bool) -> Result<()> {
        self.keeper.take();
        match how {
            // The I/O thread cannot wait for its own reply.
            Release::Within(_) if on_io_thread() => self.delete_later(),
            Release::Background => self.delete_later(),
            Release::Within(by) => {
                let deadline = match by {
                    Some(at) => Deadline::at(at),
                    None => Deadline::after(self.client.io_grace()),
                };
                let mut call = self.client.new_call(deadline);
                self.client.delete_guaranteed_in(&self.path, &mut call)
            }
        }
    }

    fn drop_release(&self) -> Release {
        crate::core::leased::within(self.client.drop_bound())
    }
}

impl LeaseNode {
    fn delete_later(&self) -> Result<()> {
        let doomed = Doomed::node(&self.path, Some(self.session));
        self.client.delete_in_background(doomed);
        Ok(())
    }
}
