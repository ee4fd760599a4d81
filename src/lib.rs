//! zklock — Apache Curator's distributed-lock recipes for Rust, on ZooKeeper.
//!
//! zklock gives plain threaded Rust programs what Java programs get from Apache Curator, with
//! the same node layouts so that Rust and Java services can share one lock. Everything is
//! blocking: no future, runtime or `async` reaches the user.
//!
//! # Which lock?
//!
//! | you need | use |
//! |---|---|
//! | one holder at a time, re-entrant per thread, fair | [`InterProcessMutex`] |
//! | the same, granted in random order | [`InterProcessMutex::with_driver`] with [`UnfairDriver`] |
//! | your own ordering rule | a [`LockDriver`] of your own |
//! | many readers or one writer | [`InterProcessReadWriteLock`] |
//! | at most N holders | [`InterProcessSemaphoreV2`] (N fixed, or a [`SharedCount`]) |
//! | a mutex any thread may release, not re-entrant | [`InterProcessSemaphoreMutex`] |
//! | several locks, all or none | [`InterProcessMultiLock`] |
//! | one leader among many, elected in the background | [`LeaderLatch`] |
//! | a leader that runs a closure while it leads, then lets the next | [`LeaderSelector`], [`elect`] |
//!
//! ```no_run
//! use std::time::Duration;
//! use zklock::{Client, InterProcessMutex, LockHealth};
//!
//! # fn main() -> zklock::Result<()> {
//! let client = Client::connect("127.0.0.1:2181")?;
//! let mutex = InterProcessMutex::new(&client, "/locks/ledger")?;
//! if let Some(guard) = mutex.try_lock_for(Duration::from_secs(10))? {
//!     // Hand the token to the resource so it can refuse a stale holder.
//!     let token = guard.fencing_token();
//!     if guard.health() == LockHealth::Held {
//!         println!("writing with token {token}");
//!     }
//! } // released here
//! # Ok(()) }
//! ```
//!
//! # The Client
//!
//! A [`Client`] (Curator's `CuratorFramework`) keeps one ZooKeeper session through server
//! restarts and leader failover, reports [`ConnectionState`]s with Curator's meaning, opens a new
//! session by itself after expiry, and retries connection losses with a [`RetryPolicy`].
//!
//! ```no_run
//! use std::time::Duration;
//! use zklock::{Client, ConnectionState, CreateMode};
//!
//! # fn main() -> zklock::Result<()> {
//! let client = Client::builder("127.0.0.1:2181")
//!     .session_timeout(Duration::from_secs(10))
//!     .namespace("myapp")
//!     .connect()?;
//! let states = client.connection_states();
//! let node = client.create("/members/m-").mode(CreateMode::EphemeralSequential)
//!     .parents_as_containers().protected().call()?;
//! if let Ok(ConnectionState::Lost) = states.try_recv() {
//!     // the session and `node` are gone; the Client is already opening a new session
//! }
//! # Ok(()) }
//! ```
//!
//! # Blocking and Drop
//!
//! Every call that can block has a bound its docs state, and nothing blocks in `Drop`:
//!
//! * [`acquire`](Lock::acquire) waits until the lock is ours, the retry policy gives up during an
//!   outage (its budget starts afresh after every answered round trip), or another thread calls
//!   [`cancel_waiters`](Lock::cancel_waiters) ([`Error::Cancelled`]).
//! * [`acquire_timeout(d)`](Lock::acquire_timeout) and the `try_lock_*` forms wait at most `d`; a
//!   round trip of the attempt may run past it by the Client's operation timeout (default: its
//!   connection timeout). [`try_lock`](Lock::try_lock) / a zero timeout makes one attempt.
//! * [`release`](Lock::release) reports errors within the operation (else connection) timeout;
//!   [`release_timeout`](Lock::release_timeout) takes a bound of its own.
//! * Dropping a guard, a [`Lease`], a lock or the last [`Client`] returns at once: deletes go to a
//!   background queue that retries, through whatever session is current, until the node is gone.
//! * Listeners and callbacks run on the Client's watcher thread and must not block. An acquire
//!   that may wait, called there, fails at once with [`Error::OnWatcherThread`].
//!
//! # Curator → zklock
//!
//! | Curator | zklock |
//! |---|---|
//! | `CuratorFrameworkFactory.builder()` | [`Client::builder`] → [`ClientBuilder`] |
//! | `create().creatingParentContainersIfNeeded().withProtection().withMode(m).forPath(p)` | `client.create(p).parents_as_containers().protected().mode(m).call()` ([`Create`]) |
//! | `delete().guaranteed()` | [`Client::delete_guaranteed`] |
//! | `authorization(scheme, auth)`, `aclProvider(p)`, `ACLProvider` | [`ClientBuilder::auth`] / [`ClientBuilder::digest_auth`], [`ClientBuilder::acl_provider`], [`AclProvider`] |
//! | `ZooDefs.Ids.CREATOR_ALL_ACL`, `READ_ACL_UNSAFE`, `OPEN_ACL_UNSAFE`, `DigestAuthenticationProvider.generateDigest` | [`Acl::creator_all`], [`Acl::read_unsafe`], [`Acl::open_unsafe`], [`Acl::digest`] |
//! | `getZooKeeper().addAuthInfo(s, a)`, `getACL()`, `setACL()` | [`Client::add_auth`], [`Client::acl`], [`Client::set_acl`] |
//! | `getData().usingWatcher(w)` | [`Client::data_watch`] → [`Watch`] |
//! | `ConnectionStateListener` | [`Client::on_connection_state`], [`Client::connection_states`] |
//! | `InterProcessMutex(client, path)` | [`InterProcessMutex::new`] |
//! | `InterProcessMutex(client, path, driver)`, `LockInternalsDriver`, `StandardLockInternalsDriver` | [`InterProcessMutex::with_driver`], [`LockDriver`], [`StandardDriver`] |
//! | `acquire()`, `acquire(time, unit)`, `release()` | [`acquire`](InterProcessMutex::acquire), [`acquire_timeout`](InterProcessMutex::acquire_timeout) (`Result<bool>`), [`release`](InterProcessMutex::release) |
//! | `acquire(0, unit)` | [`try_lock`](InterProcessMutex::try_lock) or `acquire_timeout(Duration::ZERO)` |
//! | — | [`lock`](InterProcessMutex::lock) / [`try_lock_for`](InterProcessMutex::try_lock_for) / [`try_lock_until`](InterProcessMutex::try_lock_until) → [`MutexGuard`] |
//! | kazoo `Lock.cancel()` | [`cancel_waiters`](InterProcessMutex::cancel_waiters) |
//! | `isAcquiredInThisProcess()`, `isOwnedByCurrentThread()`, `getParticipantNodes()` | [`is_acquired_in_this_process`](InterProcessMutex::is_acquired_in_this_process), [`is_owned_by_current_thread`](InterProcessMutex::is_owned_by_current_thread), [`participant_nodes`](InterProcessMutex::participant_nodes) |
//! | client-wide `ConnectionStateListener` only | per-lock [`LockHealth`]: [`health`](InterProcessMutex::health), [`health_events`](InterProcessMutex::health_events), [`on_health`](InterProcessMutex::on_health) |
//! | — | [`fencing_token`](InterProcessMutex::fencing_token) |
//! | `InterProcessReadWriteLock`, `InterProcessSemaphoreV2`, `Lease`, `SharedCount`, `InterProcessSemaphoreMutex`, `InterProcessMultiLock`, `Revoker`, `InterProcessLock` | [`InterProcessReadWriteLock`], [`InterProcessSemaphoreV2`], [`Lease`], [`SharedCount`], [`InterProcessSemaphoreMutex`], [`InterProcessMultiLock`], [`Revoker`], [`Lock`] |
//! | `LeaderLatch`, `LeaderLatchListener`, `LeaderLatch.CloseMode` | [`LeaderLatch`], [`LeaderLatch::on_change`] / [`LeaderLatch::changes`] → [`LeadershipChange`], [`CloseMode`] |
//! | `LeaderSelector`, `LeaderSelectorListener.takeLeadership` | [`LeaderSelector`], a closure taking [`Leadership`] (cooperative cancellation) |
//! | `Participant`, `getParticipants()`, `getLeader()` | [`Participant`], `participants()`, `leader()` |
//! | `ConnectionStateErrorPolicy` (`Standard…`, `Session…`) | [`ErrorPolicy`] (`Standard`, `SessionOnly`) |
//! | kazoo `Election(path, id).run(f)` | [`elect`] |
//! | `org.apache.curator.retry.*` | [`ExponentialBackoffRetry`], [`BoundedExponentialBackoffRetry`], [`RetryNTimes`], [`RetryOneTime`], [`RetryUntilElapsed`], [`RetryForever`] |
//! | `TestingServer`, `TestingCluster`, `KillSession` | `testing::TestingServer`, `testing::TestingCluster`, `testing::expire_session` (feature `testing`) |
//!
//! # Errors
//!
//! Every fallible call returns [`Result`] with the one [`Error`] enum. Bad input (paths, connect
//! strings, timeouts, data over 1 MiB) is refused before any I/O.
#![warn(missing_docs, unreachable_pub)]
#![deny(unsafe_code)]

mod client;
mod deadline;
mod error;
mod leader;
mod locks;
mod path;
mod retry;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::client::{
    Acl, AclProvider, Client, ClientBuilder, ConnectionState, Create, CreateMode, ErrorPolicy,
    LockHealth, Perms, Stat, Watch, WatchEvent, WatchEventKind,
};
pub use crate::error::{Error, Result};
pub use crate::leader::{
    elect, CloseMode, LeaderLatch, LeaderLatchBuilder, LeaderSelector, LeaderSelectorBuilder,
    Leadership, LeadershipChange, Participant,
};
pub use crate::locks::{
    ArcLockGuard, HealthEvent, InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease, Lock, LockDriver, LockGuard,
    LockNode, MutexGuard, Predicate, ReadLock, Revoker, SharedCount, StandardDriver, UnfairDriver,
    VersionedCount, WriteLock,
};
pub use crate::retry::{
    BoundedExponentialBackoffRetry, ExponentialBackoffRetry, RetryForever, RetryNTimes,
    RetryOneTime, RetryPolicy, RetryUntilElapsed,
};
