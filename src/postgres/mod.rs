//! The PostgreSQL backend (feature `postgres`): [`PgClient`](client::PgClient) and the
//! PostgreSQL locks, on session-level advisory locks. See `docs/postgres.md` in the repository
//! for what it guarantees and what it cannot.

mod client;
mod drive;
mod hold;
mod latch;
mod mutex;
mod read_write;
mod semaphore;
mod session;
mod sql;
mod tls;

pub use client::{PgClient, PgClientBuilder};
pub use latch::PgLeaderLatch;
pub use mutex::PgMutex;
pub use read_write::PgReadWriteLock;
pub use semaphore::{PgLease, PgSemaphore};
