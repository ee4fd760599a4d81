//! InterProcessMutex: Curator's re-entrant, fair distributed mutex.

use std::sync::Arc;
use std::time::Instant;

use super::driver::{LockDriver, StandardDriver};
use super::kazoo::KazooDriver;
use super::raw::{self, NodeLock, Reentrant};
use crate::core::channel::Receiver;
use crate::core::deadline::Deadline;
use crate::core::error::Result;
use crate::core::health::HealthEvent;
use crate::core::health::LockHealth;
use crate::core::lock::{forward_lock_api, Lock, LockGuard, Release, Sealed};
use crate::zookeeper::client::{AclProvider, Client};

/// Curator's lock node name for mutexes and leader selectors.
const LOCK_NAME: &str = "lock-";

/// A re-entrant mutex shared by every process that uses the same path: Curator's
/// `InterProcessMutex`, with the same node layout (`<path>/_c_<uuid>-lock-<seq10>`), so Java
/// and Rust processes exclude each other.
///
/// # Fairness
/// With the default [`StandardDriver`] waiters are granted in the order they asked (their
/// nodes' sequence order). [`UnfairDriver`](crate::zookeeper::UnfairDriver) grants in random order.
///
/// # Re-entrancy
/// Re-entrant per (mutex object, thread): a thread that holds it may acquire it again and must
/// release it as often; the node is deleted at the outermost release. Another thread of the
/// same process using the same object waits like any other contender. Clones share the object
/// (and its per-thread holds), like an `Arc`.
///
/// # Lock health
/// A held lock can be lost without the holder doing anything: the session may expire or the
/// node may be deleted. [`health`](InterProcessMutex::health) tells Held / Suspended (connection
/// gone, validity unknown) / Lost, and [`health_events`](InterProcessMutex::health_events) or
/// [`on_health`](InterProcessMutex::on_health) push every change. Curator offers only the
/// client-wide connection listener.
///
/// # Fencing token
/// [`fencing_token`](InterProcessMutex::fencing_token) strictly increases across successive
/// holders of the path (the czxid of the holder's node): hand it to the resource you protect so
/// that it can refuse a stale holder.
///
/// # Blocking and Drop
/// See [`Lock`] for how long each acquire may block. Dropping a [`MutexGuard`] deletes the node
/// in the calling thread within 1 s (or the Client's operation timeout, if shorter), the rest
/// in the background (see [`LockGuard`](crate::LockGuard)).
/// [`release`](InterProcessMutex::release) reports errors and is bounded by the Client's
/// operation (else connection) timeout;
/// [`release_timeout`](InterProcessMutex::release_timeout) takes a bound of its own.
/// [`cancel_waiters`](InterProcessMutex::cancel_waiters) ends the waits of other threads.
///
/// # Errors
/// [`Error::NotOwner`](crate::Error::NotOwner) when a thread releases what it does not hold;
/// [`Error::LockLost`](crate::Error::LockLost) when a release finds the lock had been lost;
/// [`Error::Cancelled`](crate::Error::Cancelled) for a cancelled wait;
/// [`Error::OnWatcherThread`](crate::Error::OnWatcherThread) for a wait asked for from a
/// listener; connection errors once the retry policy gives up.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use zklock::{Client, InterProcessMutex};
///
/// # fn main() -> zklock::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let mutex = InterProcessMutex::new(&client, "/locks/invoices")?;
/// {
///     let guard = mutex.lock()?;                      // released when dropped
///     println!("token {}", guard.fencing_token());
/// }
/// if mutex.acquire_timeout(Duration::from_secs(5))? { // Curator style
///     mutex.release()?;
/// }
/// if let Some(guard) = mutex.try_lock()? {             // one attempt, no wait
///     drop(guard);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct InterProcessMutex {
    core: Arc<Reentrant>,
}

/// The guard of an [`InterProcessMutex`].
pub type MutexGuard<'a> = LockGuard<'a, InterProcessMutex>;

impl std::fmt::Debug for InterProcessMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessMutex")
            .field("path", &self.path())
            .field(
                "acquired_in_this_process",
                &self.is_acquired_in_this_process(),
            )
            .finish()
    }
}

impl InterProcessMutex {
    /// A fair mutex on `path` (Curator's standard driver).
    pub fn new(client: &Client, path: &str) -> Result<InterProcessMutex> {
        Self::with_driver(client, path, StandardDriver)
    }

    /// A mutex on `path` in kazoo's layout, shared with Python processes using kazoo's
    /// `Lock(path, identifier)`: nodes `<path>/<uuid hex>__lock__<seq10>` holding `identifier`
    /// (see [`KazooDriver`](crate::zookeeper::KazooDriver), which also takes kazoo's extra lock patterns).
    /// Fair, re-entrant, and with lock health and fencing tokens, like every mutex here; kazoo's
    /// own `Lock` is not re-entrant.
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// // Python beside it: zk.Lock("/locks/report", "py-worker-1")
    /// let mutex = zklock::InterProcessMutex::kazoo(&client, "/locks/report", "rust-worker-1")?;
    /// let _guard = mutex.lock()?;
    /// assert!(mutex.contenders()?.contains(&"rust-worker-1".to_owned()));
    /// # Ok(()) }
    /// ```
    pub fn kazoo(client: &Client, path: &str, identifier: &str) -> Result<InterProcessMutex> {
        let mutex = Self::with_driver(client, path, KazooDriver::new())?;
        mutex.set_node_data(identifier.as_bytes())?;
        Ok(mutex)
    }

    /// A mutex on `path` with a custom [`LockDriver`].
    pub fn with_driver(
        client: &Client,
        path: &str,
        driver: impl LockDriver,
    ) -> Result<InterProcessMutex> {
        Ok(InterProcessMutex {
            core: Arc::new(Reentrant::new(NodeLock::new(
                client,
                path,
                LOCK_NAME,
                Arc::new(driver),
                None,
            )?)),
        })
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        &self.core.raw.internals.path
    }

    /// The lock in the core's re-entrant shell.
    pub(crate) fn reentrant(&self) -> &Reentrant {
        &self.core
    }

    /// Data for the lock nodes this object creates from now on (default: the Client's default
    /// data, the host's address).
    pub fn set_node_data(&self, data: &[u8]) -> Result<()> {
        self.core.raw.internals.set_node_data(Some(data.to_vec()))
    }

    /// The ACL provider for the nodes this object creates from now on, and for the parents it
    /// creates (default: the Client's, see [`ClientBuilder::acl_provider`](crate::ClientBuilder::acl_provider)).
    pub fn set_acl_provider(&self, provider: impl AclProvider) {
        self.core.raw.internals.set_acl_provider(Arc::new(provider));
    }

    /// Whether any thread of this process holds the lock through this object.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.core.is_acquired_in_this_process()
    }

    /// Whether the calling thread holds the lock through this object.
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.core.is_owned_by_current_thread()
    }

    /// The calling thread's fencing token, if it holds the lock.
    pub fn fencing_token(&self) -> Option<u64> {
        self.core.fencing_token()
    }

    /// The calling thread's lock node, if it holds the lock.
    pub fn lock_node(&self) -> Option<String> {
        raw::lock_node(&self.core)
    }

    /// The health of the calling thread's hold, if it holds the lock.
    pub fn health(&self) -> Option<LockHealth> {
        self.core.health()
    }

    /// A channel receiving every later health change of holds through this object, each with
    /// its hold's node and fencing token.
    pub fn health_events(&self) -> Receiver<HealthEvent> {
        self.core.feed.channel()
    }

    /// Calls `f` with every later health change of holds through this object, on the Client's
    /// watcher thread (it must not block); returns an id for
    /// [`remove_health_listener`](Self::remove_health_listener).
    pub fn on_health(&self, f: impl FnMut(HealthEvent) + Send + 'static) -> u64 {
        self.core.feed.on_health(f)
    }

    /// Removes a callback added by [`on_health`](Self::on_health); whether it was there.
    pub fn remove_health_listener(&self, id: u64) -> bool {
        self.core.feed.remove(id)
    }

    /// Curator's `makeRevocable`: from now on, when another process asks (with
    /// [`Revoker::attempt_revoke`](crate::Revoker::attempt_revoke)) the holder of this object's
    /// lock to release, `listener` runs on the Client's watcher thread. It cannot release for
    /// the holding thread (the hold is that thread's); tell that thread to release.
    pub fn make_revocable(&self, listener: impl Fn() + Send + Sync + 'static) {
        self.core.raw.make_revocable(listener)
    }

    /// Full paths of the contenders' nodes, the holder first (Curator's `getParticipantNodes`).
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.core.raw.internals.participant_nodes()
    }

    /// The contenders' node data as text (their identifiers in kazoo's layout), in lock order,
    /// the holder first: kazoo's `contenders()`, on either layout. Bounded by the Client's
    /// operation (else connection) timeout.
    pub fn contenders(&self) -> Result<Vec<String>> {
        self.core.raw.internals.driver_contenders()
    }
}

forward_lock_api!(InterProcessMutex);

impl Sealed for InterProcessMutex {
    fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
        self.core.acquire(Deadline::until(until))
    }

    fn release_as(&self, how: Release) -> Result<()> {
        self.core.release(how)
    }

    fn cancel(&self) {
        self.core.cancel_waiters()
    }

    fn cap_holds(&self, max_hold: Option<std::time::Duration>) -> Result<()> {
        self.core.set_max_hold(max_hold)
    }

    fn acquired_here(&self) -> bool {
        self.core.is_acquired_in_this_process()
    }

    fn hold_id(&self) -> Option<u64> {
        self.core.hold_id()
    }

    fn drop_bound(&self) -> std::time::Duration {
        self.core.drop_bound()
    }
}

impl Lock for InterProcessMutex {
    fn fencing_token(&self) -> Option<u64> {
        InterProcessMutex::fencing_token(self)
    }

    fn health(&self) -> Option<LockHealth> {
        InterProcessMutex::health(self)
    }
}
