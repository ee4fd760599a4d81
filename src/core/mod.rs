//! What every backend's locks share, knowing no coordination service: the `Lock` trait and
//! its guards, the per-thread re-entrancy count, lock health and the local lease behind it,
//! deadlines, retry policies, the error enum, notification channels and listeners, metrics.

// The core serves every backend, and some of it only one: a build without every backend (and
// the check that the core compiles alone) leaves parts unused. Dead code in the core is judged
// in the build with all of them (CI lints `--all-features`).
#![cfg_attr(
    not(all(
        feature = "zookeeper",
        feature = "redis",
        feature = "postgres",
        feature = "mysql"
    )),
    allow(dead_code, unused_imports, unused_macros)
)]

pub(crate) mod channel;
pub(crate) mod connection;
pub(crate) mod deadline;
pub(crate) mod defaults;
pub(crate) mod error;
pub(crate) mod guarded;
pub(crate) mod half;
pub(crate) mod health;
pub(crate) mod hold;
pub(crate) mod leadership;
pub(crate) mod lease;
pub(crate) mod leased;
pub(crate) mod listeners;
pub(crate) mod lock;
pub(crate) mod max_hold;
pub(crate) mod metrics;
pub(crate) mod multi;
pub(crate) mod options;
pub(crate) mod retry;
pub(crate) mod server_clock;
pub(crate) mod statement;
pub(crate) mod thread_holds;
pub(crate) mod token;
