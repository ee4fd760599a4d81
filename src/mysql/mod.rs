//! The MySQL / MariaDB backend (feature `mysql`): [`MySqlClient`](client::MySqlClient) and
//! [`MySqlMutex`](mutex::MySqlMutex), on `GET_LOCK`. See `docs/mysql.md` in the repository
//! for what it guarantees and what it cannot.

mod client;
mod latch;
mod mutex;
mod read_write;
mod semaphore;
mod session;

pub use client::{MySqlClient, MySqlClientBuilder};
pub use latch::MySqlLeaderLatch;
pub use mutex::MySqlMutex;
pub use read_write::MySqlReadWriteLock;
pub use semaphore::{MySqlLease, MySqlSemaphore};
