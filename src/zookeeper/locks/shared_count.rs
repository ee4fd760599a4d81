//! SharedCount: Curator's integer shared through a node (4 bytes, big-endian), with versioned
//! reads, compare-and-set and change listeners.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::core::error::{Error, Result};
use crate::core::listeners::Listeners;
use crate::zookeeper::client::{Client, FollowGuard, NodeNews};

/// How long after a count's node was deleted it is looked for again.
const MISSING_PAUSE: Duration = Duration::from_millis(200);

/// A count and the version of the node it was read from (Curator's `VersionedValue<Integer>`).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let count = zklock::SharedCount::new(&client, "/config/workers", 4)?;
/// let seen = count.versioned()?;
/// println!("{} at version {}", seen.count, seen.version);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct VersionedCount {
    /// The node's data version.
    pub version: i32,
    /// The count.
    pub count: i32,
}

/// Curator's `SharedCount`: an integer shared through a node (4 bytes, big-endian), e.g. the
/// number of leases of [`InterProcessSemaphoreV2::with_shared_count`](crate::InterProcessSemaphoreV2::with_shared_count).
///
/// [`try_set_count`](Self::try_set_count) sets it only if nobody changed it since a
/// [`versioned`](Self::versioned) read; [`on_change`](Self::on_change) calls back on every
/// change seen (rapid changes may be seen as their last one only: ZooKeeper's watches are
/// one-shot). Clones share the count and its listeners. The node is followed by a task on the
/// Client's I/O thread, not a thread of its own; it stops when the last clone is dropped.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let count = zklock::SharedCount::new(&client, "/semaphores/db-size", 5)?;
/// let pool = zklock::InterProcessSemaphoreV2::with_shared_count(&client, "/semaphores/db", &count)?;
/// count.set_count(8)?; // waiters re-check at once
/// loop {
///     let seen = count.versioned()?;
///     if count.try_set_count(seen, seen.count + 1)? {
///         break; // incremented, with nobody in between
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SharedCount {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    path: String,
    listeners: Arc<Listeners<VersionedCount>>,
    /// Set by the first `on_change`: what follows the node.
    watching: Mutex<Option<Arc<Watching>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(w) = self.watching.get_mut().take() {
            w.stop();
        }
    }
}

/// Follows a count's node on the Client's I/O thread and tells the listeners of every new
/// version, on the watcher thread. A deleted node is looked for again every
/// [`MISSING_PAUSE`] until it is back.
struct Watching {
    client: Client,
    path: String,
    listeners: Arc<Listeners<VersionedCount>>,
    /// The version last read; `None` before the first read.
    last: Mutex<Option<i32>>,
    /// The follower of the node; `None` once stopped.
    follower: Mutex<Option<FollowGuard>>,
}

impl Watching {
    fn start(
        client: &Client,
        path: &str,
        listeners: &Arc<Listeners<VersionedCount>>,
    ) -> Arc<Watching> {
        let w = Arc::new(Watching {
            client: client.clone(),
            path: path.to_owned(),
            listeners: listeners.clone(),
            last: Mutex::new(None),
            follower: Mutex::new(None),
        });
        // Held while the follower starts, so that a deletion it reports at once finds it in
        // place and follows again (`follow_node` only spawns: it tells nothing on this thread).
        let mut follower = w.follower.lock();
        *follower = Some(w.follow(Duration::ZERO));
        drop(follower);
        w
    }

    /// Follows the node, first read `first_look` from now.
    fn follow(self: &Arc<Self>, first_look: Duration) -> FollowGuard {
        let weak = Arc::downgrade(self);
        let news = move |news: NodeNews| {
            if let Some(w) = Weak::upgrade(&weak) {
                w.told(news);
            }
        };
        self.client
            .follow_node(&self.path, 0, first_look, Arc::new(news), None)
    }

    /// What the follower tells, on the I/O thread: nothing here blocks.
    fn told(self: &Arc<Self>, news: NodeNews) {
        match news {
            NodeNews::Read { data, version } => {
                let before = self.last.lock().replace(version);
                if before.is_some_and(|v| v != version) {
                    match parse(&self.path, &data) {
                        Ok(count) => {
                            let seen = VersionedCount { version, count };
                            let listeners = self.listeners.clone();
                            self.client
                                .on_watcher_thread(move || listeners.call(u64::MAX, seen));
                        }
                        Err(e) => tracing::warn!("{e}"),
                    }
                }
            }
            NodeNews::Gone => {
                tracing::debug!(
                    "shared count {}: its node is gone; looking again",
                    self.path
                );
                let mut follower = self.follower.lock();
                if follower.is_some() {
                    *follower = Some(self.follow(MISSING_PAUSE));
                }
            }
            NodeNews::Seen | NodeNews::Disconnected | NodeNews::GivenUp => {}
        }
    }

    /// Stops following (the follower's task ends on the I/O thread).
    fn stop(&self) {
        self.follower.lock().take();
    }
}

impl std::fmt::Debug for SharedCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCount")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

fn parse(path: &str, data: &[u8]) -> Result<i32> {
    let bytes: [u8; 4] = data
        .try_into()
        .map_err(|_| Error::ZooKeeper(format!("{path:?} does not hold a shared count")))?;
    Ok(i32::from_be_bytes(bytes))
}

impl SharedCount {
    /// The count at `path`, created with `seed` if the node does not exist yet.
    pub fn new(client: &Client, path: &str, seed: i32) -> Result<SharedCount> {
        match client
            .create(path)
            .data(&seed.to_be_bytes())
            .parents_as_containers()
            .call()
        {
            Ok(_) | Err(Error::NodeExists(_)) => {}
            Err(e) => return Err(e),
        }
        Ok(SharedCount {
            inner: Arc::new(Inner {
                client: client.clone(),
                path: path.to_owned(),
                listeners: Arc::new(Listeners::default()),
                watching: Mutex::new(None),
            }),
        })
    }

    /// The count's node.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// The current count.
    pub fn count(&self) -> Result<i32> {
        self.versioned().map(|v| v.count)
    }

    /// The current count with its node's version, for [`try_set_count`](Self::try_set_count).
    pub fn versioned(&self) -> Result<VersionedCount> {
        let (data, stat) = self.inner.client.data(&self.inner.path)?;
        Ok(VersionedCount {
            version: stat.version,
            count: parse(&self.inner.path, &data)?,
        })
    }

    /// Sets the count.
    pub fn set_count(&self, count: i32) -> Result<()> {
        self.inner
            .client
            .set_data(&self.inner.path, &count.to_be_bytes())
            .map(|_| ())
    }

    /// Sets the count to `count` only if it is still at `previous`'s version: `false`, with
    /// nothing changed, if someone set it meanwhile (Curator's `trySetCount`).
    pub fn try_set_count(&self, previous: VersionedCount, count: i32) -> Result<bool> {
        match self.inner.client.set_data_version(
            &self.inner.path,
            &count.to_be_bytes(),
            previous.version,
        ) {
            Ok(_) => Ok(true),
            Err(Error::BadVersion(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Calls `f` with every later change seen, on the Client's watcher thread (it must not
    /// block); returns an id for [`remove_listener`](Self::remove_listener). The first call
    /// starts following the node (a task on the Client's I/O thread, no thread of its own);
    /// changes made before its first read are not told.
    ///
    /// # Errors
    /// None today; the `Result` is kept for the listener's registration.
    pub fn on_change(&self, f: impl FnMut(VersionedCount) + Send + 'static) -> Result<u64> {
        let id = self.inner.listeners.add(0, Box::new(f));
        let mut watching = self.inner.watching.lock();
        if watching.is_none() {
            *watching = Some(Watching::start(
                &self.inner.client,
                &self.inner.path,
                &self.inner.listeners,
            ));
        }
        Ok(id)
    }

    /// Removes a listener added by [`on_change`](Self::on_change); whether it was there.
    pub fn remove_listener(&self, id: u64) -> bool {
        self.inner.listeners.remove(id)
    }
}
