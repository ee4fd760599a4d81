//! The URL factory's adapter for Redis: `redis://`, `rediss://`, `redis+sentinel://` and
//! `redis+cluster://` (and their TLS forms) open a [`RedisClient`], the session timeout as
//! its TTL.

use super::RedisClient;

crate::any::named_backend!(
    "redis",
    RedisClient,
    super::RedisMutex,
    super::RedisReadWriteLock,
    super::RedisSemaphore,
    super::RedisLease,
    super::RedisLeaderLatch
);
