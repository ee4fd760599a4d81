//! The URL factory's adapter for Redis: `redis://`, `rediss://`, `redis+sentinel://` and
//! `redis+cluster://` (and their TLS forms) open a [`RedisClient`], the session timeout as
//! its TTL.

use std::sync::Arc;
use std::time::Duration;

use super::RedisClient;
use crate::any::{AnyClientBuilder, Backend};
use crate::core::error::Result;

pub(crate) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
    let client = RedisClient::builder(&b.url)
        .ttl(b.session_timeout)
        .connect_timeout(b.connect_timeout)
        .operation_timeout(op)
        .connect()?;
    Ok(Arc::new(client))
}

crate::any::named_backend!(
    "redis",
    RedisClient,
    super::RedisMutex,
    super::RedisReadWriteLock,
    super::RedisSemaphore,
    super::RedisLease,
    super::RedisLeaderLatch
);
