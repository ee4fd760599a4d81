//! The URL factory's adapter for Redis: `redis://`, `rediss://`, `redis+sentinel://` and
//! `redis+cluster://` (and their TLS forms) open a [`RedisClient`], the session timeout as
//! its TTL.

use std::sync::Arc;
use std::time::Duration;

use super::{
    RedisClient, RedisLeaderLatch, RedisLease, RedisMutex, RedisReadWriteLock, RedisSemaphore,
};
use crate::any::{AnyClientBuilder, Backend, Latch, ReadWrite, Semaphore};
use crate::core::connection::ConnectionState;
use crate::core::error::Result;
use crate::core::lock::Lock;

pub(crate) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
    let client = RedisClient::builder(&b.url)
        .ttl(b.session_timeout)
        .connect_timeout(b.connect_timeout)
        .operation_timeout(op)
        .connect()?;
    Ok(Arc::new(client))
}

crate::any::from_client!(RedisClient);

impl Backend for RedisClient {
    fn name(&self) -> &'static str {
        "redis"
    }
    fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
        Ok(Arc::new(RedisMutex::new(self, name)?))
    }
    fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
        Ok(Box::new(RedisReadWriteLock::new(self, name)?))
    }
    fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
        Ok(Box::new(RedisSemaphore::new(self, name, max_leases)?))
    }
    fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
        Ok(Box::new(RedisLeaderLatch::start(self, name)?))
    }
    fn state(&self) -> ConnectionState {
        RedisClient::state(self)
    }
    fn close(&self) {
        RedisClient::close(self)
    }
}

crate::any::adapters!(
    RedisReadWriteLock,
    RedisSemaphore,
    RedisLease,
    RedisLeaderLatch
);
