//! InterProcessReadWriteLock: Curator's read-write lock, two drivers over one lock path.

use std::sync::Arc;
use std::time::Instant;

use super::kazoo::{KazooDriver, KAZOO_LOCK_NAME, KAZOO_READ_NAME};
use super::raw::{self, Downgrade, NodeLock, Reentrant};
use super::read_write_driver::{ReadDriver, WriteDriver, READ_LOCK_NAME, WRITE_LOCK_NAME};
use crate::core::channel::Receiver;
use crate::core::deadline::Deadline;
use crate::core::error::Result;
use crate::core::health::HealthEvent;
use crate::core::health::LockHealth;
use crate::core::lock::{forward_lock_api, Lock, Release, Sealed};
use crate::zookeeper::client::{AclProvider, Client, SharedAcl};

struct Inner {
    read: Reentrant,
    write: Reentrant,
    /// kazoo's layout: no downgrade (a kazoo reader behind a writer waits for it).
    kazoo: bool,
}

/// Curator's `InterProcessReadWriteLock`: many readers or one writer, on one path shared with
/// Curator processes (`_c_<uuid>-__READ__<seq>` / `_c_<uuid>-__WRIT__<seq>`).
///
/// # Fairness
/// Writers are granted in queue order against readers and writers alike; a reader is granted
/// while no writer is queued ahead of it, so a queued writer is never starved by later readers.
///
/// # Re-entrancy, downgrade and upgrade
/// Both halves are re-entrant per (lock object, thread). The thread holding the write lock may
/// take the read lock (downgrade) at once, as Curator does: its read node is named after its
/// write node (`__READ__<writer seq><seq>`, Curator 5.5), so when it then releases the write
/// lock the readers queued meanwhile get in beside it — Java readers too — while a queued writer
/// still waits for the downgraded read (CURATOR-621: Curator 5.4 let that writer in). Taking the
/// write lock while holding the read lock (upgrade) would wait for itself forever — Curator
/// deadlocks there; zklock refuses it with [`Error::WouldDeadlock`](crate::Error::WouldDeadlock).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let rw = zklock::InterProcessReadWriteLock::new(&client, "/locks/catalog")?;
/// {
///     let _r = rw.read_lock().lock()?;   // shared with other readers
/// }
/// let w = rw.write_lock().lock()?;       // exclusive
/// let r = rw.read_lock().lock()?;        // downgrade
/// w.release()?;                          // still reading; no writer got in between
/// r.release()?;
/// # Ok(()) }
/// ```
pub struct InterProcessReadWriteLock {
    read: ReadLock,
    write: WriteLock,
}

impl std::fmt::Debug for InterProcessReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessReadWriteLock")
            .field("path", &self.read.inner.read.raw.internals.path)
            .finish()
    }
}

impl InterProcessReadWriteLock {
    /// A read-write lock on `path`.
    pub fn new(client: &Client, path: &str) -> Result<InterProcessReadWriteLock> {
        let [read, write] = Reentrant::pair(
            NodeLock::new(
                client,
                path,
                READ_LOCK_NAME,
                Arc::new(ReadDriver),
                Some(Downgrade::AtOnce),
            )?,
            NodeLock::new(client, path, WRITE_LOCK_NAME, Arc::new(WriteDriver), None)?,
        );
        let inner = Arc::new(Inner {
            read,
            write,
            kazoo: false,
        });
        Ok(Self::of(inner))
    }

    /// A read-write lock on `path` in kazoo's layout, shared with Python processes using kazoo's
    /// `ReadLock(path, identifier)` and `WriteLock(path, identifier)`: readers'
    /// nodes `<path>/<uuid hex>__rlock__<seq10>`, writers' `<uuid hex>__lock__<seq10>`, each
    /// holding `identifier`. A writer waits for every node ahead of it; a reader for the
    /// writers ahead of it.
    ///
    /// Both halves are re-entrant, but the write holder cannot take the read half (a downgrade):
    /// in this layout its read node would queue behind its own write node, so the read half
    /// refuses it with [`Error::WouldDeadlock`](crate::Error::WouldDeadlock).
    ///
    /// kazoo 2.8's `ReadLock` also waits for writers queued *behind* it, so a kazoo reader
    /// that waits while a writer (of either language) queues after it can wait for that writer
    /// while the writer waits for it, for good (kazoo's issue 649, fixed in kazoo 2.9). zklock's
    /// reader waits only for writers ahead of it.
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// // Python beside it: zk.ReadLock("/locks/catalog", "py-1"), zk.WriteLock(...)
    /// let rw = zklock::InterProcessReadWriteLock::kazoo(&client, "/locks/catalog", "rust-1")?;
    /// {
    ///     let _r = rw.read_lock().lock()?;
    /// }
    /// let _w = rw.write_lock().lock()?;
    /// # Ok(()) }
    /// ```
    pub fn kazoo(
        client: &Client,
        path: &str,
        identifier: &str,
    ) -> Result<InterProcessReadWriteLock> {
        let [read, write] = Reentrant::pair(
            NodeLock::new(
                client,
                path,
                KAZOO_READ_NAME,
                Arc::new(KazooDriver::read()),
                Some(Downgrade::Refused),
            )?,
            NodeLock::new(
                client,
                path,
                KAZOO_LOCK_NAME,
                Arc::new(KazooDriver::write()),
                None,
            )?,
        );
        let inner = Arc::new(Inner {
            read,
            write,
            kazoo: true,
        });
        let rw = Self::of(inner);
        rw.set_node_data(identifier.as_bytes())?;
        Ok(rw)
    }

    fn of(inner: Arc<Inner>) -> InterProcessReadWriteLock {
        InterProcessReadWriteLock {
            read: ReadLock {
                inner: inner.clone(),
            },
            write: WriteLock { inner },
        }
    }

    /// The node data of readers and writers alike as text, in lock order (kazoo's
    /// `contenders()` of a read or write lock). Bounded by the Client's operation (else
    /// connection) timeout.
    pub fn contenders(&self) -> Result<Vec<String>> {
        let write = &self.write.inner.write.raw.internals;
        if self.write.inner.kazoo {
            return write.driver_contenders();
        }
        write.contenders(|c| c.contains(READ_LOCK_NAME) || c.contains(WRITE_LOCK_NAME))
    }

    /// The ACL provider for the nodes both halves create from now on, and for the parents it
    /// creates (default: the Client's, see [`ClientBuilder::acl_provider`](crate::ClientBuilder::acl_provider)).
    pub fn set_acl_provider(&self, provider: impl AclProvider) {
        let provider: SharedAcl = Arc::new(provider);
        self.read
            .inner
            .read
            .raw
            .internals
            .set_acl_provider(provider.clone());
        self.read
            .inner
            .write
            .raw
            .internals
            .set_acl_provider(provider);
    }

    /// Data for the nodes both halves create from now on (Curator's `lockData`), e.g. the
    /// host name, so that a holder can be told by its node. At most 1 MiB.
    pub fn set_node_data(&self, data: &[u8]) -> Result<()> {
        self.read.set_node_data(data)?;
        self.write.set_node_data(data)
    }

    /// The shared half.
    pub fn read_lock(&self) -> &ReadLock {
        &self.read
    }

    /// The exclusive half.
    pub fn write_lock(&self) -> &WriteLock {
        &self.write
    }
}

/// The read half of an [`InterProcessReadWriteLock`]. Clones share the lock (and its
/// per-thread holds), so a half can be moved on its own.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let rw = zklock::InterProcessReadWriteLock::new(&client, "/locks/catalog")?;
/// if rw.read_lock().acquire_timeout(std::time::Duration::from_secs(5))? {
///     rw.read_lock().release()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadLock {
    inner: Arc<Inner>,
}

/// The write half of an [`InterProcessReadWriteLock`]. Clones share the lock.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let rw = zklock::InterProcessReadWriteLock::new(&client, "/locks/catalog")?;
/// let guard = rw.write_lock().lock()?;
/// println!("token {}", guard.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WriteLock {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ReadLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadLock")
            .field("path", &self.inner.read.raw.internals.path)
            .finish()
    }
}

impl std::fmt::Debug for WriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLock")
            .field("path", &self.inner.write.raw.internals.path)
            .finish()
    }
}

impl ReadLock {
    /// A thread that holds the write half downgrades (Curator's layout) or is refused
    /// (kazoo's): the read half's [`NodeLock`] decides, told the write node by the shell.
    fn acquire_until(&self, deadline: Deadline) -> Result<bool> {
        self.inner.read.acquire(deadline)
    }

    /// Data for the read nodes this half creates from now on.
    pub fn set_node_data(&self, data: &[u8]) -> Result<()> {
        self.inner
            .read
            .raw
            .internals
            .set_node_data(Some(data.to_vec()))
    }

    /// Whether the calling thread holds a read lock.
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.inner.read.is_owned_by_current_thread()
    }

    /// Whether any thread of this process holds a read lock through this object.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.inner.read.is_acquired_in_this_process()
    }

    /// Curator's `makeRevocable` for the read lock: see
    /// [`InterProcessMutex::make_revocable`](crate::InterProcessMutex::make_revocable).
    pub fn make_revocable(&self, listener: impl Fn() + Send + Sync + 'static) {
        self.inner.read.raw.make_revocable(listener)
    }

    /// Full paths of the readers' nodes, in queue order.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.inner.read.raw.internals.participant_nodes()
    }

    /// A channel receiving every later health change of read holds through this object.
    pub fn health_events(&self) -> Receiver<HealthEvent> {
        self.inner.read.feed.channel()
    }

    /// The calling thread's read hold's health, if it holds the read lock.
    pub fn health(&self) -> Option<LockHealth> {
        self.inner.read.health()
    }

    /// The calling thread's read hold's fencing token (readers share: not unique among
    /// concurrent readers).
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.read.fencing_token()
    }

    /// The calling thread's read node, if it holds the read lock.
    pub fn lock_node(&self) -> Option<String> {
        raw::lock_node(&self.inner.read)
    }

    /// The half in the core's re-entrant shell.
    pub(crate) fn reentrant(&self) -> &Reentrant {
        &self.inner.read
    }
}

impl WriteLock {
    /// A thread that holds the read half is refused ([`Error::WouldDeadlock`]) by the shell.
    fn acquire_until(&self, deadline: Deadline) -> Result<bool> {
        self.inner.write.acquire(deadline)
    }

    /// Data for the write nodes this half creates from now on.
    pub fn set_node_data(&self, data: &[u8]) -> Result<()> {
        self.inner
            .write
            .raw
            .internals
            .set_node_data(Some(data.to_vec()))
    }

    /// Whether the calling thread holds the write lock.
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.inner.write.is_owned_by_current_thread()
    }

    /// Whether any thread of this process holds the write lock through this object.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.inner.write.is_acquired_in_this_process()
    }

    /// Curator's `makeRevocable` for the write lock: see
    /// [`InterProcessMutex::make_revocable`](crate::InterProcessMutex::make_revocable).
    pub fn make_revocable(&self, listener: impl Fn() + Send + Sync + 'static) {
        self.inner.write.raw.make_revocable(listener)
    }

    /// Full paths of the writers' nodes, in queue order.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.inner.write.raw.internals.participant_nodes()
    }

    /// A channel receiving every later health change of write holds through this object.
    pub fn health_events(&self) -> Receiver<HealthEvent> {
        self.inner.write.feed.channel()
    }

    /// The calling thread's write hold's health, if it holds the write lock.
    pub fn health(&self) -> Option<LockHealth> {
        self.inner.write.health()
    }

    /// The calling thread's fencing token, if it holds the write lock.
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.write.fencing_token()
    }

    /// The calling thread's write node, if it holds the write lock.
    pub fn lock_node(&self) -> Option<String> {
        raw::lock_node(&self.inner.write)
    }

    /// The half in the core's re-entrant shell.
    pub(crate) fn reentrant(&self) -> &Reentrant {
        &self.inner.write
    }
}

forward_lock_api!(ReadLock);
forward_lock_api!(WriteLock);

impl Sealed for ReadLock {
    fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
        ReadLock::acquire_until(self, Deadline::until(until))
    }

    fn release_as(&self, how: Release) -> Result<()> {
        self.inner.read.release(how)
    }

    fn cancel(&self) {
        self.inner.read.cancel_waiters()
    }

    fn cap_holds(&self, max_hold: Option<std::time::Duration>) -> Result<()> {
        self.inner.read.set_max_hold(max_hold)
    }

    fn acquired_here(&self) -> bool {
        self.inner.read.is_acquired_in_this_process()
    }

    fn hold_id(&self) -> Option<u64> {
        self.inner.read.hold_id()
    }

    fn drop_bound(&self) -> std::time::Duration {
        self.inner.read.drop_bound()
    }
}

impl Sealed for WriteLock {
    fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
        WriteLock::acquire_until(self, Deadline::until(until))
    }

    fn release_as(&self, how: Release) -> Result<()> {
        self.inner.write.release(how)
    }

    fn cancel(&self) {
        self.inner.write.cancel_waiters()
    }

    fn cap_holds(&self, max_hold: Option<std::time::Duration>) -> Result<()> {
        self.inner.write.set_max_hold(max_hold)
    }

    fn acquired_here(&self) -> bool {
        self.inner.write.is_acquired_in_this_process()
    }

    fn hold_id(&self) -> Option<u64> {
        self.inner.write.hold_id()
    }

    fn drop_bound(&self) -> std::time::Duration {
        self.inner.write.drop_bound()
    }
}

impl Lock for ReadLock {
    /// The czxid of the reader's node (readers share: not unique among concurrent readers).
    fn fencing_token(&self) -> Option<u64> {
        self.inner.read.fencing_token()
    }

    fn health(&self) -> Option<LockHealth> {
        self.inner.read.health()
    }
}

impl Lock for WriteLock {
    fn fencing_token(&self) -> Option<u64> {
        self.inner.write.fencing_token()
    }

    fn health(&self) -> Option<LockHealth> {
        self.inner.write.health()
    }
}
