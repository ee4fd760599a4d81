//! InterProcessMutex: Curator's re-entrant, fair distributed mutex.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::driver::{LockDriver, StandardDriver};
use super::internals::{Acquired, LockInternals};
use crate::client::{Client, KeeperGuard, LockHealth};
use crate::deadline::Deadline;
use crate::error::{Error, Result};

/// Curator's lock node name for mutexes and leader selectors.
const LOCK_NAME: &str = "lock-";

/// A re-entrant mutex shared by every process that uses the same path: Curator's
/// `InterProcessMutex`, with the same node layout (`<path>/_c_<uuid>-lock-<seq10>`), so Java
/// and Rust processes exclude each other.
///
/// # Fairness
/// With the default [`StandardDriver`] waiters are granted in the order they asked (their
/// nodes' sequence order). [`UnfairDriver`](crate::UnfairDriver) grants in random order.
///
/// # Re-entrancy
/// Re-entrant per (mutex object, thread): a thread that holds it may acquire it again and must
/// release it as often; the node is deleted at the outermost release. Another thread of the
/// same process using the same object waits like any other contender. Share the object between
/// threads with an `Arc`.
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
/// # Errors
/// [`Error::NotOwner`] when a thread releases what it does not hold; [`Error::LockLost`] when a
/// release finds the lock had been lost; connection errors once the retry policy gives up.
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
/// # Ok(()) }
/// ```
pub struct InterProcessMutex {
    client: Client,
    internals: LockInternals<Client>,
    holders: Mutex<HashMap<ThreadId, Holding>>,
    subscribers: Arc<Subscribers>,
}

struct Holding {
    path: String,
    count: u32,
    token: u64,
    health: Arc<Mutex<LockHealth>>,
    _keeper: KeeperGuard,
}

type HealthCallback = Box<dyn FnMut(LockHealth) + Send>;

#[derive(Default)]
struct Subscribers {
    channels: Mutex<Vec<Sender<LockHealth>>>,
    callbacks: Arc<Mutex<Vec<HealthCallback>>>,
}

impl std::fmt::Debug for InterProcessMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessMutex")
            .field("path", &self.internals.path)
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

    /// A mutex on `path` with a custom [`LockDriver`].
    pub fn with_driver(
        client: &Client,
        path: &str,
        driver: impl LockDriver,
    ) -> Result<InterProcessMutex> {
        let internals = LockInternals::new(client.clone(), path, LOCK_NAME, Arc::new(driver), 1)?;
        Ok(InterProcessMutex {
            client: client.clone(),
            internals,
            holders: Mutex::new(HashMap::new()),
            subscribers: Arc::default(),
        })
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        &self.internals.path
    }

    /// Data for the lock nodes this object creates from now on (default: the Client's default
    /// data, the host's address).
    pub fn set_node_data(&self, data: &[u8]) -> Result<()> {
        self.internals.set_node_data(Some(data.to_vec()))
    }

    /// Blocks until this thread holds the lock.
    pub fn acquire(&self) -> Result<()> {
        self.acquire_until(Deadline::NEVER).map(|_| ())
    }

    /// Waits up to `timeout` for the lock: `false` on timeout, with this attempt's node deleted.
    /// The timeout bounds every ZooKeeper step, not only the wait.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        if timeout.is_zero() {
            return Err(Error::invalid("acquire timeout must be greater than zero"));
        }
        self.acquire_until(Deadline::after(timeout))
    }

    fn acquire_until(&self, deadline: Deadline) -> Result<bool> {
        let me = thread::current().id();
        if let Some(h) = self.holders.lock().get_mut(&me) {
            h.count = h
                .count
                .checked_add(1)
                .ok_or_else(|| Error::invalid("re-entered too often"))?;
            return Ok(true);
        }
        let Some(acquired) = self.internals.attempt_lock(deadline)? else {
            return Ok(false);
        };
        let holding = self.hold(acquired);
        self.holders.lock().insert(me, holding);
        Ok(true)
    }

    fn hold(&self, acquired: Acquired) -> Holding {
        let health = Arc::new(Mutex::new(LockHealth::Held));
        let report = {
            let (health, subs, client) = (
                health.clone(),
                self.subscribers.clone(),
                self.client.clone(),
            );
            move |new: LockHealth| {
                {
                    let mut h = health.lock();
                    if *h == new || *h == LockHealth::Lost {
                        return;
                    }
                    *h = new;
                }
                subs.channels.lock().retain(|tx| tx.send(new).is_ok());
                let callbacks = subs.callbacks.clone();
                client.on_watcher_thread(move || {
                    for f in callbacks.lock().iter_mut() {
                        f(new);
                    }
                });
            }
        };
        let keeper = self
            .client
            .keep_node(&acquired.path, acquired.session, Arc::new(report));
        Holding {
            path: acquired.path,
            count: 1,
            token: acquired.token,
            health,
            _keeper: keeper,
        }
    }

    /// Releases one hold of the calling thread; the node is deleted at the outermost release.
    /// [`Error::NotOwner`] if this thread does not hold the lock; [`Error::LockLost`] (after
    /// deleting our node) if the lock had been lost meanwhile.
    pub fn release(&self) -> Result<()> {
        let me = thread::current().id();
        let holding = {
            let mut holders = self.holders.lock();
            let h = holders.get_mut(&me).ok_or(Error::NotOwner)?;
            h.count -= 1;
            if h.count > 0 {
                return Ok(());
            }
            holders.remove(&me).expect("present")
        };
        let lost = *holding.health.lock() == LockHealth::Lost;
        drop(holding._keeper);
        let deleted = self.internals.release(&holding.path);
        if lost {
            return Err(Error::LockLost);
        }
        deleted
    }

    /// [`acquire`](Self::acquire), returning a guard that releases on drop.
    pub fn lock(&self) -> Result<MutexGuard<'_>> {
        self.acquire()?;
        Ok(MutexGuard {
            mutex: self,
            released: false,
            _not_send: PhantomData,
        })
    }

    /// [`acquire_timeout`](Self::acquire_timeout), returning a guard, or `None` on timeout.
    pub fn try_lock_for(&self, timeout: Duration) -> Result<Option<MutexGuard<'_>>> {
        Ok(self.acquire_timeout(timeout)?.then_some(MutexGuard {
            mutex: self,
            released: false,
            _not_send: PhantomData,
        }))
    }

    /// Whether any thread of this process holds the lock through this object.
    pub fn is_acquired_in_this_process(&self) -> bool {
        !self.holders.lock().is_empty()
    }

    /// Whether the calling thread holds the lock through this object.
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.holders.lock().contains_key(&thread::current().id())
    }

    /// The calling thread's fencing token, if it holds the lock.
    pub fn fencing_token(&self) -> Option<u64> {
        self.holders
            .lock()
            .get(&thread::current().id())
            .map(|h| h.token)
    }

    /// The calling thread's lock node, if it holds the lock.
    pub fn lock_node(&self) -> Option<String> {
        self.holders
            .lock()
            .get(&thread::current().id())
            .map(|h| h.path.clone())
    }

    /// The health of the calling thread's hold, if it holds the lock.
    pub fn health(&self) -> Option<LockHealth> {
        self.holders
            .lock()
            .get(&thread::current().id())
            .map(|h| *h.health.lock())
    }

    /// A channel receiving every later health change of holds through this object.
    pub fn health_events(&self) -> Receiver<LockHealth> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.subscribers.channels.lock().push(tx);
        rx
    }

    /// Calls `f` with every later health change of holds through this object, on the Client's
    /// watcher thread.
    pub fn on_health(&self, f: impl FnMut(LockHealth) + Send + 'static) {
        self.subscribers.callbacks.lock().push(Box::new(f));
    }

    /// Full paths of the contenders' nodes, the holder first (Curator's `getParticipantNodes`).
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.internals.participant_nodes()
    }
}

impl Drop for InterProcessMutex {
    fn drop(&mut self) {
        for (_, holding) in self.holders.lock().drain() {
            drop(holding._keeper);
            let _ = self.internals.release(&holding.path);
        }
    }
}

/// Holds an [`InterProcessMutex`] for the calling thread; releases it when dropped.
///
/// Not `Send`: the lock is re-entrant per thread, so it must be released on the thread that
/// took it.
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
pub struct MutexGuard<'a> {
    mutex: &'a InterProcessMutex,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl MutexGuard<'_> {
    /// Releases now, reporting errors (dropping the guard only logs them).
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.mutex.release()
    }

    /// This hold's fencing token.
    pub fn fencing_token(&self) -> u64 {
        self.mutex.fencing_token().expect("held by this thread")
    }

    /// This hold's health.
    pub fn health(&self) -> LockHealth {
        self.mutex.health().expect("held by this thread")
    }
}

impl Drop for MutexGuard<'_> {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = self.mutex.release() {
                log::warn!("releasing {} on guard drop: {e}", self.mutex.path());
            }
        }
    }
}
