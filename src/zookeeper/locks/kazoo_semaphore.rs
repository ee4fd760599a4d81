//! KazooSemaphore: kazoo's `Semaphore`, in its layout.
//!
//! `<path>` records `max_leases` as decimal text; each lease is an ephemeral node
//! `<path>/<uuid hex>` holding the participant's identifier. An acquirer first takes a kazoo
//! lock at the sibling `<path>-__lock__`, so only one participant at a time counts the leases;
//! it takes one when fewer than `max_leases` exist, else waits (a children watch) for one to go.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::internals::{LockInternals, Release};
use super::kazoo::KazooDriver;
use super::keeper::keep_node;
use super::semaphore::LeaseNode;
use super::Leases;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::HealthFeed;
use crate::core::leased::Leased;
use crate::zookeeper::client::{Call, Client, CreateMode, NodeOps, NodeSpec};
use crate::zookeeper::path::{self, Layout};

/// kazoo's `Semaphore(path, identifier, max_leases)`, shared with Python processes that use
/// it: at most `max_leases` holders at once across both languages.
///
/// # Layout
/// The semaphore's node `<path>` records `max_leases` as text; leases are ephemeral children
/// `<path>/<uuid hex>` holding the identifier; acquirers queue on a kazoo lock at
/// `<path>-__lock__` (a sibling of `<path>`). Both nodes are persistent, as kazoo makes them.
///
/// # Agreement on `max_leases`
/// The first acquire checks the number `<path>` records (the first participant wrote it) and
/// fails with [`Error::LeaseCountMismatch`] when it differs from this participant's, before
/// taking anything, as kazoo does. Delete `<path>` to change the number.
///
/// # Fairness and blocking
/// Acquirers are served in the order they queued on the lock. `acquire` blocks until a lease
/// is free; `acquire_timeout` gives up (returning `None`) when its time is over, with nothing
/// left behind. Each ZooKeeper step is bounded by the Client's retry policy.
///
/// # Lease health
/// Each [`KazooLease`] has a [`health`](KazooLease::health) (Held, Suspended, Lost) and a
/// fencing token, as zklock's other leases; changes also come through
/// [`health_events`](Self::health_events) and [`on_health`](Self::on_health).
///
/// # Errors
/// [`Error::LeaseCountMismatch`], [`Error::NoNode`] if `<path>` is deleted while waiting,
/// [`Error::Cancelled`] after [`cancel_waiters`](Self::cancel_waiters), and connection errors
/// once the retry policy gives up.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// // Python beside it: zk.Semaphore("/sem/render", "py-1", max_leases=3)
/// let sem = zklock::zookeeper::KazooSemaphore::new(&client, "/sem/render", "rust-1", 3)?;
/// let lease = sem.acquire()?;
/// assert!(sem.lease_holders()?.contains(&"rust-1".to_owned()));
/// lease.return_lease()?;
/// # Ok(()) }
/// ```
pub struct KazooSemaphore {
    client: Client,
    path: String,
    identifier: Vec<u8>,
    max_leases: u32,
    lock: LockInternals<Client>,
    /// `<path>` was found recording our `max_leases` (or made by us).
    agreed: AtomicBool,
    feed: Arc<HealthFeed>,
}

crate::core::health::forward_health_api!(KazooSemaphore, feed, "the Client's watcher thread");
crate::core::leased::capped_semaphore!(KazooSemaphore, feed);

impl std::fmt::Debug for KazooSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KazooSemaphore")
            .field("path", &self.path)
            .field("max_leases", &self.max_leases)
            .finish()
    }
}

impl KazooSemaphore {
    /// A participant in the semaphore at `path` allowing `max_leases` holders, naming itself
    /// `identifier` in its lease and lock nodes.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a path ZooKeeper refuses or `/`;
    /// [`Error::InvalidArgument`] for `max_leases` 0. No I/O.
    pub fn new(
        client: &Client,
        path: &str,
        identifier: &str,
        max_leases: u32,
    ) -> Result<KazooSemaphore> {
        path::validate(path, false)?;
        if path == "/" {
            return Err(Error::InvalidPath {
                path: path.into(),
                reason: "a semaphore needs its own node",
            });
        }
        if max_leases == 0 {
            return Err(Error::invalid("a semaphore needs at least one lease"));
        }
        let lock = LockInternals::new(
            client.clone(),
            &format!("{path}-__lock__"),
            super::kazoo::KAZOO_LOCK_NAME,
            Arc::new(KazooDriver::new()),
            Leases::Fixed(1),
        )?;
        lock.set_node_data(Some(identifier.as_bytes().to_vec()))?;
        Ok(KazooSemaphore {
            client: client.clone(),
            path: path.to_owned(),
            identifier: identifier.as_bytes().to_vec(),
            max_leases,
            lock,
            agreed: AtomicBool::new(false),
            feed: Arc::default(),
        })
    }

    /// The semaphore's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// This participant's `max_leases`.
    pub fn max_leases(&self) -> u32 {
        self.max_leases
    }

    /// Takes a lease, waiting as long as it takes.
    pub fn acquire(&self) -> Result<KazooLease> {
        self.acquire_until(Deadline::NEVER)?.ok_or(Error::Timeout)
    }

    /// Takes a lease if one comes free within `timeout`; `None` otherwise.
    #[must_use = "`None` means no lease was acquired"]
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<KazooLease>> {
        self.acquire_until(Deadline::after(timeout))
    }

    /// Ends the waits of acquirers (in any thread) that are queued now, with
    /// [`Error::Cancelled`].
    pub fn cancel_waiters(&self) {
        self.lock.cancel_waiters();
    }

    /// The identifiers of the lease holders, in no particular order (kazoo's
    /// `lease_holders()`). Bounded by the Client's retry policy.
    pub fn lease_holders(&self) -> Result<Vec<String>> {
        let children = match self.client.children(&self.path) {
            Ok(c) => c,
            Err(Error::NoNode(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut holders = Vec::with_capacity(children.len());
        for child in children {
            match self.client.data(&path::join(&self.path, &child)) {
                Ok((data, _)) => holders.push(String::from_utf8_lossy(&data).into_owned()),
                Err(Error::NoNode(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(holders)
    }

    fn acquire_until(&self, deadline: Deadline) -> Result<Option<KazooLease>> {
        let mut call = self
            .client
            .new_call(Deadline::after(self.client.io_grace()));
        self.agree(&mut call)?;
        let Some(lock) = self.lock.attempt_lock(deadline)? else {
            return Ok(None);
        };
        let taken = self.take_lease(deadline);
        if let Err(e) = self
            .lock
            .release(&lock.path, lock.session, Release::Within(None))
        {
            tracing::debug!("releasing the semaphore's lock {}: {e}", lock.path);
        }
        taken
    }

    /// Makes `<path>` recording our `max_leases`, or checks the number it records.
    fn agree(&self, call: &mut Call) -> Result<()> {
        if self.agreed.load(Ordering::Acquire) {
            return Ok(());
        }
        let ours = self.max_leases.to_string();
        match self.create(&self.path, ours.as_bytes(), CreateMode::Persistent, call) {
            Ok(_) => {}
            Err(Error::NodeExists(_)) => {
                let (data, _) = self.client.data_in(&self.path, call)?;
                // Data that is no number (kazoo writes it just after making the node, or the
                // node serves something else too) is let pass, as kazoo does.
                let recorded = std::str::from_utf8(&data)
                    .ok()
                    .and_then(|t| t.trim().parse::<i64>().ok());
                if let Some(recorded) = recorded {
                    if recorded != i64::from(self.max_leases) {
                        return Err(Error::LeaseCountMismatch {
                            path: self.path.clone(),
                            ours: self.max_leases,
                            recorded,
                        });
                    }
                }
            }
            Err(e) => return Err(e),
        }
        self.agreed.store(true, Ordering::Release);
        Ok(())
    }

    /// Creates `path` (parents persistent), retrying as the policy allows; the stat it has.
    fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
        call: &mut Call,
    ) -> Result<crate::zookeeper::Stat> {
        let spec = NodeSpec {
            path,
            data,
            mode,
            acl: None,
            provider: None,
            parents: true,
            protected: false,
            siblings: None,
            layout: Layout::Kazoo,
        };
        spec.validate()?;
        loop {
            match self.client.create_once(&spec, call) {
                Ok((_, stat)) => return Ok(stat),
                Err(e) if e.is_retryable() => self.client.backoff(call, e)?,
                Err(e) => return Err(e),
            }
        }
    }

    /// With the lock held: takes a lease once fewer than `max_leases` exist.
    fn take_lease(&self, deadline: Deadline) -> Result<Option<KazooLease>> {
        let lease_path = path::join(&self.path, &Layout::Kazoo.new_id());
        loop {
            let (children, watch) = self.client.children_watch(&self.path)?;
            if children.len() < self.max_leases as usize {
                let mut call = self
                    .client
                    .new_call(Deadline::after(self.client.io_grace()));
                let stat = match self.create(
                    &lease_path,
                    &self.identifier,
                    CreateMode::Ephemeral,
                    &mut call,
                ) {
                    Ok(stat) => stat,
                    // Our create went through and its reply was lost.
                    Err(Error::NodeExists(_)) => self
                        .client
                        .exists_in(&lease_path, &mut call)?
                        .filter(|s| Some(s.ephemeral_owner) == self.client.session_id())
                        .ok_or_else(|| Error::NodeExists(lease_path.clone()))?,
                    Err(e) => return Err(e),
                };
                let token = stat.czxid as u64;
                let (health, report) =
                    self.feed
                        .hold(self.client.dispatch(), &self.path, &lease_path, token);
                let keeper = keep_node(
                    &self.client,
                    &lease_path,
                    stat.ephemeral_owner,
                    report.clone(),
                    None,
                    None,
                );
                let node = LeaseNode {
                    client: self.client.clone(),
                    path: lease_path.clone(),
                    session: stat.ephemeral_owner,
                    keeper: Some(keeper),
                };
                let lease = Leased::new(node, &self.path, lease_path, token, health)
                    .capped(self.feed.max_hold(), report);
                return Ok(Some(KazooLease { lease }));
            }
            let fired = match deadline.remaining() {
                None => watch.wait(),
                Some(left) if left.is_zero() => return Ok(None),
                Some(left) => watch.wait_timeout(left),
            };
            if fired.is_none() && deadline.expired() {
                return Ok(None);
            }
        }
    }
}

/// A lease of a [`KazooSemaphore`]: an ephemeral node whose creation zxid is its fencing token
/// (it rises with every lease taken on the ensemble). Returned when dropped (in the calling
/// thread within 1 s, or the Client's operation timeout if shorter; the rest in the
/// background).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let sem = zklock::zookeeper::KazooSemaphore::new(&client, "/sem/render", "rust-1", 3)?;
/// let lease = sem.acquire()?;
/// if lease.health() == zklock::LockHealth::Held {
///     println!("{} (token {})", lease.path(), lease.fencing_token());
/// }
/// lease.return_lease()?;
/// # Ok(()) }
/// ```
#[must_use = "the lease is returned when dropped"]
pub struct KazooLease {
    lease: Leased<LeaseNode>,
}

crate::core::leased::leased!(KazooLease);

impl KazooLease {
    /// The lease's node (also its [`id`](Self::id)).
    pub fn path(&self) -> &str {
        self.lease.id()
    }

    /// Deletes the lease node, within the Client's operation (else connection) timeout; the
    /// same as [`release`](Self::release) (kazoo's name).
    ///
    /// # Errors
    /// [`Error::LockLost`] if the lease had been lost before; a connection error if the delete
    /// could not be confirmed in time (it goes on in the background).
    pub fn return_lease(self) -> Result<()> {
        self.release()
    }
}
