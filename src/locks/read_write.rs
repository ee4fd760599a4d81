//! InterProcessReadWriteLock: Curator's read-write lock, two drivers over one lock path.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::Instant;

use crossbeam_channel::Receiver;
use parking_lot::Mutex;

use super::driver::{sequence_key, LockDriver, LockNode, Predicate};
use super::guard::{forward_lock_api, Lock, Release, Sealed};
use super::reentrant::{Detached, Holding, Reentrant};
use crate::client::{Client, CreateMode, LockHealth};
use crate::deadline::Deadline;
use crate::error::{Error, Result};

/// Curator's node names: `<path>/_c_<uuid>-__READ__<seq>` and `..-__WRIT__<seq>`.
const READ_LOCK_NAME: &str = "__READ__";
const WRITE_LOCK_NAME: &str = "__WRIT__";

/// Readers and writers sort together, by sequence.
fn rw_sort_key(node: &str) -> u64 {
    if node.contains(WRITE_LOCK_NAME) {
        sequence_key(node, WRITE_LOCK_NAME)
    } else {
        sequence_key(node, READ_LOCK_NAME)
    }
}

/// Writers: exclusive and fair against readers and writers alike.
struct WriteDriver;

impl LockDriver for WriteDriver {
    fn create_lock_node(&self, _lock_name: &str) -> LockNode {
        LockNode::new(WRITE_LOCK_NAME, CreateMode::EphemeralSequential)
    }

    fn sort_key(&self, node: &str, _lock_name: &str) -> u64 {
        rw_sort_key(node)
    }

    fn sorts_by_creation(&self) -> bool {
        true
    }
}

/// Readers: granted while no writer is queued ahead; else wait on the first writer ahead.
struct ReadDriver;

impl LockDriver for ReadDriver {
    fn create_lock_node(&self, _lock_name: &str) -> LockNode {
        LockNode::new(READ_LOCK_NAME, CreateMode::EphemeralSequential)
    }

    fn gets_the_lock(
        &self,
        children: &[String],
        our_node: &str,
        _max_leases: usize,
    ) -> Result<Predicate> {
        let ours = children
            .iter()
            .position(|c| c == our_node)
            .ok_or_else(|| Error::NoNode(our_node.to_owned()))?;
        match children[..ours]
            .iter()
            .find(|c| c.contains(WRITE_LOCK_NAME))
        {
            None => Ok(Predicate::Granted),
            Some(writer) => Ok(Predicate::Watch(writer.clone())),
        }
    }

    fn sort_key(&self, node: &str, _lock_name: &str) -> u64 {
        rw_sort_key(node)
    }
}

struct Inner {
    read: Reentrant,
    write: Reentrant,
    /// Read holds taken by a thread while it held the write lock; after it releases the write
    /// lock, its write node is kept until the last of them goes (CURATOR-621).
    downgrades: Mutex<HashMap<ThreadId, Downgrade>>,
}

struct Downgrade {
    reads: u32,
    kept: Option<Holding>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let kept: Vec<Holding> = self
            .downgrades
            .lock()
            .drain()
            .filter_map(|(_, d)| d.kept)
            .collect();
        for holding in kept {
            let _ = self.write.finish(holding, Release::Background);
        }
    }
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
/// take the read lock (downgrade); when it then releases the write lock it keeps its place at
/// the head of the queue until it releases the read lock, so a queued writer cannot jump ahead
/// (CURATOR-621). Readers queued behind it wait too. Taking the write lock while holding the read
/// lock (upgrade) would wait for itself forever — Curator deadlocks there; zklock refuses it with
/// [`Error::WouldDeadlock`].
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
            .field("path", &self.read.inner.read.internals.path)
            .finish()
    }
}

impl InterProcessReadWriteLock {
    /// A read-write lock on `path`.
    pub fn new(client: &Client, path: &str) -> Result<InterProcessReadWriteLock> {
        let inner = Arc::new(Inner {
            read: Reentrant::new(client, path, READ_LOCK_NAME, Arc::new(ReadDriver))?,
            write: Reentrant::new(client, path, WRITE_LOCK_NAME, Arc::new(WriteDriver))?,
            downgrades: Mutex::new(HashMap::new()),
        });
        Ok(InterProcessReadWriteLock {
            read: ReadLock {
                inner: inner.clone(),
            },
            write: WriteLock { inner },
        })
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
            .field("path", &self.inner.read.internals.path)
            .finish()
    }
}

impl std::fmt::Debug for WriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLock")
            .field("path", &self.inner.write.internals.path)
            .finish()
    }
}

impl ReadLock {
    fn acquire_until(&self, deadline: Deadline) -> Result<bool> {
        let me = thread::current().id();
        {
            let mut downgrades = self.inner.downgrades.lock();
            if let Some(d) = downgrades.get_mut(&me) {
                d.reads += 1;
                return Ok(true);
            }
            if self.inner.write.is_owned_by_current_thread() {
                downgrades.insert(
                    me,
                    Downgrade {
                        reads: 1,
                        kept: None,
                    },
                );
                return Ok(true);
            }
        }
        self.inner.read.acquire_until(deadline)
    }

    /// Releases one read hold of the calling thread.
    fn release_read(&self, how: Release) -> Result<()> {
        let me = thread::current().id();
        let kept = {
            let mut downgrades = self.inner.downgrades.lock();
            match downgrades.get_mut(&me) {
                None => None,
                Some(d) if d.reads > 1 => {
                    d.reads -= 1;
                    return Ok(());
                }
                Some(_) => Some(downgrades.remove(&me).expect("present").kept),
            }
        };
        match kept {
            None => self.inner.read.release(how),
            Some(None) => Ok(()),
            Some(Some(write_node)) => self.inner.write.finish(write_node, how),
        }
    }

    /// Whether the calling thread holds a read lock (its own node, or a downgrade).
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.inner.read.is_owned_by_current_thread()
            || self
                .inner
                .downgrades
                .lock()
                .contains_key(&thread::current().id())
    }

    /// Whether any thread of this process holds a read lock through this object.
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.inner.read.is_acquired_in_this_process() || !self.inner.downgrades.lock().is_empty()
    }

    /// Curator's `makeRevocable` for the read lock: see
    /// [`InterProcessMutex::make_revocable`](crate::InterProcessMutex::make_revocable).
    pub fn make_revocable(&self, listener: impl Fn() + Send + Sync + 'static) {
        self.inner.read.make_revocable(listener)
    }

    /// Full paths of the readers' nodes, in queue order.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.inner.read.internals.participant_nodes()
    }

    /// A channel receiving every later health change of read holds through this object.
    pub fn health_events(&self) -> Receiver<LockHealth> {
        self.inner.read.health_events()
    }

    fn downgraded<T>(&self, f: impl FnOnce(&Holding) -> T) -> Option<T> {
        let downgrades = self.inner.downgrades.lock();
        downgrades
            .get(&thread::current().id())
            .and_then(|d| d.kept.as_ref().map(f))
    }
}

impl WriteLock {
    fn acquire_until(&self, deadline: Deadline) -> Result<bool> {
        if self.inner.write.reenter() {
            return Ok(true);
        }
        let me = thread::current().id();
        if self.inner.read.is_owned_by_current_thread()
            || self.inner.downgrades.lock().contains_key(&me)
        {
            return Err(Error::WouldDeadlock);
        }
        self.inner.write.acquire_until(deadline)
    }

    /// Releases one write hold of the calling thread. If the thread took read holds while
    /// writing, its node stays (keeping its place) until the last of them is released.
    fn release_write(&self, how: Release) -> Result<()> {
        match self.inner.write.detach()? {
            Detached::StillHeld => Ok(()),
            Detached::Released(holding) => {
                let me = thread::current().id();
                let mut downgrades = self.inner.downgrades.lock();
                if let Some(d) = downgrades.get_mut(&me) {
                    d.kept = Some(holding);
                    return Ok(());
                }
                drop(downgrades);
                self.inner.write.finish(holding, how)
            }
        }
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
        self.inner.write.make_revocable(listener)
    }

    /// Full paths of the writers' nodes, in queue order.
    pub fn participant_nodes(&self) -> Result<Vec<String>> {
        self.inner.write.internals.participant_nodes()
    }

    /// A channel receiving every later health change of write holds through this object.
    pub fn health_events(&self) -> Receiver<LockHealth> {
        self.inner.write.health_events()
    }
}

forward_lock_api!(ReadLock);
forward_lock_api!(WriteLock);

impl Sealed for ReadLock {
    fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
        ReadLock::acquire_until(self, Deadline::until(until))
    }

    fn release_as(&self, how: Release) -> Result<()> {
        self.release_read(how)
    }

    fn cancel(&self) {
        self.inner.read.cancel_waiters()
    }
}

impl Sealed for WriteLock {
    fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
        WriteLock::acquire_until(self, Deadline::until(until))
    }

    fn release_as(&self, how: Release) -> Result<()> {
        self.release_write(how)
    }

    fn cancel(&self) {
        self.inner.write.cancel_waiters()
    }
}

impl Lock for ReadLock {
    /// The czxid of the reader's node (readers share: not unique among concurrent readers).
    fn fencing_token(&self) -> Option<u64> {
        self.inner
            .read
            .fencing_token()
            .or_else(|| self.downgraded(Holding::token))
            .or_else(|| self.inner.write.fencing_token())
    }

    fn health(&self) -> Option<LockHealth> {
        self.inner
            .read
            .health()
            .or_else(|| self.downgraded(|h| h.health(self.inner.write.client())))
            .or_else(|| self.inner.write.health())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn readers_share_until_a_writer_is_queued_ahead() {
        let c = names(&[
            "a-__READ__0000000001",
            "b-__READ__0000000002",
            "c-__WRIT__0000000003",
        ]);
        assert_eq!(
            ReadDriver.gets_the_lock(&c, &c[1], 1).unwrap(),
            Predicate::Granted
        );
        let c = names(&[
            "a-__READ__0000000001",
            "w-__WRIT__0000000002",
            "x-__WRIT__0000000003",
            "r-__READ__0000000004",
        ]);
        assert_eq!(
            ReadDriver.gets_the_lock(&c, &c[3], 1).unwrap(),
            Predicate::Watch(c[1].clone())
        );
        assert_eq!(
            WriteDriver.gets_the_lock(&c, &c[1], 1).unwrap(),
            Predicate::Watch(c[0].clone())
        );
        assert!(ReadDriver.gets_the_lock(&c, "gone", 1).is_err());
    }

    #[test]
    fn readers_and_writers_sort_by_sequence_together() {
        let mut c = names(&[
            "z-__WRIT__0000000003",
            "y-__READ__0000000001",
            "a-__READ__0000000002",
        ]);
        c.sort_by_key(|n| rw_sort_key(n));
        assert_eq!(
            c,
            names(&[
                "y-__READ__0000000001",
                "a-__READ__0000000002",
                "z-__WRIT__0000000003"
            ])
        );
    }
}
