//! The MySQL / MariaDB backend (feature `mysql`): [`MySqlClient`] and the MySQL locks, on
//! `GET_LOCK`. See `docs/mysql.md` in the repository for what it guarantees and what it
//! cannot. The same names are at the crate root.
//!
//! # Example
//! ```no_run
//! use zklock::mysql::{MySqlClient, MySqlMutex};
//! use zklock::Lock;
//!
//! # fn main() -> zklock::Result<()> {
//! let client = MySqlClient::connect("mysql://app:secret@127.0.0.1/app")?;
//! let mutex = MySqlMutex::new(&client, "ledger")?;
//! let _guard = mutex.lock()?;
//! # Ok(()) }
//! ```

pub(crate) mod any;
mod client;
mod get_lock;
mod guarded;
mod keeper;
mod latch;
mod mode;
mod mutex;
mod participants;
mod read_write;
mod semaphore;
mod session;
mod sql;
mod table;
mod tables;
mod tls;
mod values;

pub use client::{MySqlClient, MySqlClientBuilder};
pub use latch::MySqlLeaderLatch;
pub use mode::MySqlMode;
pub use mutex::MySqlMutex;
pub use participants::MySqlParticipant;
pub use read_write::{MySqlReadLock, MySqlReadWriteLock, MySqlWriteLock};
pub use semaphore::{MySqlLease, MySqlSemaphore};
pub use values::{MySqlRows, MySqlStatement, MySqlValue};
