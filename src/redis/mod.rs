//! The Redis backend (feature `redis`): [`RedisClient`] and the Redis locks. See
//! `docs/redis.md` in the repository for what it guarantees and what it cannot. The same names
//! are at the crate root.
//!
//! # Example
//! ```no_run
//! use zklock::redis::{RedisClient, RedisMutex};
//! use zklock::Lock;
//!
//! # fn main() -> zklock::Result<()> {
//! let client = RedisClient::connect("redis://127.0.0.1:6379")?;
//! let mutex = RedisMutex::new(&client, "ledger")?;
//! let _guard = mutex.lock()?;
//! # Ok(()) }
//! ```

pub(crate) mod any;
mod client;
mod clock;
mod cluster;
mod error;
mod guarded;
mod keeper;
mod latch;
mod mutex;
mod node;
mod ops;
mod participants;
mod read_write;
mod scripts;
mod semaphore;
mod sentinel;
mod server;
mod slots;
mod waiting;
mod wake;

pub use client::{RedisClient, RedisClientBuilder};
pub use latch::RedisLeaderLatch;
pub use mutex::RedisMutex;
pub use ops::{RedisOp, RedisOpResult, RedisScript, RedisValue};
pub use participants::RedisParticipant;
pub use read_write::{RedisReadLock, RedisReadWriteLock, RedisWriteLock};
pub use semaphore::{RedisLease, RedisSemaphore};
