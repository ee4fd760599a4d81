//! The Redis backend (feature `redis`): [`RedisClient`](client::RedisClient) and the Redis locks.
//! See `docs/redis.md` in the repository for what it guarantees and what it cannot.

mod client;
mod error;
mod keeper;
mod latch;
mod mutex;
mod participants;
mod read_write;
mod scripts;
mod semaphore;
mod server;
mod slots;
mod waiting;
mod wake;

pub use client::{RedisClient, RedisClientBuilder};
pub use latch::RedisLeaderLatch;
pub use mutex::RedisMutex;
pub use participants::RedisParticipant;
pub use read_write::RedisReadWriteLock;
pub use semaphore::{RedisLease, RedisSemaphore};
