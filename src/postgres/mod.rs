//! The PostgreSQL backend (feature `postgres`): [`PgClient`] and the PostgreSQL locks, on
//! session-level advisory locks; and [`PgXactLock`], the same lock inside a transaction of the
//! caller's own connection (features `postgres-sync`, `postgres-async`). See `docs/postgres.md` in the repository for what it
//! guarantees and what it cannot. The same names are at the crate root.
//!
//! # Example
//! ```no_run
//! use zklock::postgres::{PgClient, PgMutex};
//! use zklock::Lock;
//!
//! # fn main() -> zklock::Result<()> {
//! let client = PgClient::connect("postgres://app:secret@127.0.0.1/app")?;
//! let mutex = PgMutex::new(&client, "ledger")?;
//! let _guard = mutex.lock()?;
//! # Ok(()) }
//! ```

mod advisory;
pub(crate) mod any;
mod client;
mod connect;
/// The caller-driven session: an eventfd and epoll, so Linux only.
#[cfg(target_os = "linux")]
mod drive;
mod error;
mod guarded;
mod hold;
mod keeper;
mod latch;
mod libpq;
mod mutex;
mod participants;
mod read_write;
mod semaphore;
mod session;
mod sql;
mod tls;
mod tokens;
mod values;
mod xact;

pub use client::{PgClient, PgClientBuilder};
pub use latch::PgLeaderLatch;
pub use mutex::PgMutex;
pub use participants::PgParticipant;
pub use read_write::{PgReadLock, PgReadWriteLock, PgWriteLock};
pub use semaphore::{PgLease, PgSemaphore};
pub use values::{PgRows, PgStatement, PgValue};
pub use xact::PgXactLock;
