//! zklock — Apache Curator's distributed-lock recipes for Rust, on ZooKeeper.
#![warn(missing_docs, unreachable_pub)]
#![deny(unsafe_code)]

mod client;
mod deadline;
mod error;
mod path;
mod retry;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::client::{
    Acl, Client, ClientBuilder, ConnectionState, Create, CreateMode, Perms, Stat, Watch,
    WatchEvent, WatchEventKind,
};
pub use crate::error::{Error, Result};
pub use crate::retry::{
    BoundedExponentialBackoffRetry, ExponentialBackoffRetry, RetryForever, RetryNTimes,
    RetryOneTime, RetryPolicy, RetryUntilElapsed,
};
