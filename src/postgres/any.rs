//! The URL factory's adapter for PostgreSQL: `postgres://` and `postgresql://` open a
//! [`PgClient`].

use std::sync::Arc;
use std::time::Duration;

use super::{PgClient, PgLeaderLatch, PgLease, PgMutex, PgReadWriteLock, PgSemaphore};
use crate::any::{AnyClientBuilder, Backend, Latch, ReadWrite, Semaphore};
use crate::core::connection::ConnectionState;
use crate::core::error::Result;
use crate::core::lock::Lock;

pub(crate) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
    let client = PgClient::builder(&b.url)
        .session_timeout(b.session_timeout)
        .connect_timeout(b.connect_timeout)
        .operation_timeout(op)
        .connect()?;
    Ok(Arc::new(client))
}

crate::any::from_client!(PgClient);

impl Backend for PgClient {
    fn name(&self) -> &'static str {
        "postgres"
    }
    fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
        Ok(Arc::new(PgMutex::new(self, name)?))
    }
    fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
        Ok(Box::new(PgReadWriteLock::new(self, name)?))
    }
    fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
        Ok(Box::new(PgSemaphore::new(self, name, max_leases)?))
    }
    fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
        Ok(Box::new(PgLeaderLatch::start(self, name)?))
    }
    fn state(&self) -> ConnectionState {
        PgClient::state(self)
    }
    fn close(&self) {
        PgClient::close(self)
    }
}

crate::any::adapters!(PgReadWriteLock, PgSemaphore, PgLease, PgLeaderLatch);
