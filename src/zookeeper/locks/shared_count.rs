//! SharedCount: Curator's integer shared through a node (4 bytes, big-endian), with versioned
//! reads, compare-and-set and change listeners.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

use crate::core::error::{Error, Result};
use crate::core::listeners::Listeners;
use crate::zookeeper::client::Client;

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
/// one-shot). Clones share the count and its listeners; the watching thread ends shortly after
/// the last clone is dropped.
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
    watching: Mutex<bool>,
    stop: Arc<AtomicBool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
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
                watching: Mutex::new(false),
                stop: Arc::new(AtomicBool::new(false)),
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
    /// block); returns an id for [`remove_listener`](Self::remove_listener). Starts the
    /// count's watching thread on first use.
    pub fn on_change(&self, f: impl FnMut(VersionedCount) + Send + 'static) -> Result<u64> {
        let id = self.inner.listeners.add(0, Box::new(f));
        let mut watching = self.inner.watching.lock();
        if !*watching {
            let (client, path) = (self.inner.client.clone(), self.inner.path.clone());
            let (listeners, stop) = (self.inner.listeners.clone(), self.inner.stop.clone());
            thread::Builder::new()
                .name("zklock-shared-count".into())
                .spawn(move || watch(client, path, listeners, stop))
                .map_err(|e| Error::thread_start("zklock-shared-count", &e))?;
            *watching = true;
        }
        Ok(id)
    }

    /// Removes a listener added by [`on_change`](Self::on_change); whether it was there.
    pub fn remove_listener(&self, id: u64) -> bool {
        self.inner.listeners.remove(id)
    }
}

/// Follows the count's node with one-shot watches until `stop`; tells the listeners of every
/// new version.
fn watch(
    client: Client,
    path: String,
    listeners: Arc<Listeners<VersionedCount>>,
    stop: Arc<AtomicBool>,
) {
    let mut last: Option<i32> = None;
    while !stop.load(Ordering::SeqCst) && !client.is_closed() {
        let (data, stat, watch) = match client.data_watch(&path) {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!("watching shared count {path}: {e}");
                thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        if last.is_some_and(|v| v != stat.version) {
            match parse(&path, &data) {
                Ok(count) => {
                    let seen = VersionedCount {
                        version: stat.version,
                        count,
                    };
                    let listeners = listeners.clone();
                    client.on_watcher_thread(move || listeners.call(u64::MAX, seen));
                }
                Err(e) => tracing::warn!("{e}"),
            }
        }
        last = Some(stat.version);
        while !stop.load(Ordering::SeqCst) && !client.is_closed() {
            if watch.wait_timeout(Duration::from_millis(200)).is_some() {
                break;
            }
        }
    }
}
