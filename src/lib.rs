//! zklock — Apache Curator's distributed-lock recipes for Rust, on ZooKeeper.
//!
//! zklock gives plain threaded Rust programs what Java programs get from Apache Curator, with
//! the same node layouts so that Rust and Java services can share one lock. Everything is
//! blocking: no future, runtime or `async` reaches the user.
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
//! # Curator → zklock
//!
//! | Curator | zklock |
//! |---|---|
//! | `CuratorFrameworkFactory.builder()` | [`Client::builder`] → [`ClientBuilder`] |
//! | `create().creatingParentContainersIfNeeded().withProtection().withMode(m).forPath(p)` | `client.create(p).parents_as_containers().protected().mode(m).call()` ([`Create`]) |
//! | `delete().guaranteed()` | [`Client::delete_guaranteed`] |
//! | `getData().usingWatcher(w)` | [`Client::data_watch`] → [`Watch`] |
//! | `ConnectionStateListener` | [`Client::on_connection_state`], [`Client::connection_states`] |
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
mod locks;
mod path;
mod retry;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::client::{
    Acl, Client, ClientBuilder, ConnectionState, Create, CreateMode, LockHealth, Perms, Stat,
    Watch, WatchEvent, WatchEventKind,
};
pub use crate::error::{Error, Result};
pub use crate::locks::{
    InterProcessMutex, LockDriver, LockNode, MutexGuard, Predicate, StandardDriver, UnfairDriver,
};
pub use crate::retry::{
    BoundedExponentialBackoffRetry, ExponentialBackoffRetry, RetryForever, RetryNTimes,
    RetryOneTime, RetryPolicy, RetryUntilElapsed,
};
