//! The URL factory's adapter for MySQL and MariaDB: `mysql://` and `mariadb://` open a
//! [`MySqlClient`].

use std::sync::Arc;
use std::time::Duration;

use super::{
    MySqlClient, MySqlLeaderLatch, MySqlLease, MySqlMutex, MySqlReadWriteLock, MySqlSemaphore,
};
use crate::any::{AnyClientBuilder, Backend, Latch, ReadWrite, Semaphore};
use crate::core::connection::ConnectionState;
use crate::core::error::Result;
use crate::core::lock::Lock;

pub(crate) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
    let client = MySqlClient::builder(&b.url)
        .session_timeout(b.session_timeout)
        .connect_timeout(b.connect_timeout)
        .operation_timeout(op)
        .connect()?;
    Ok(Arc::new(client))
}

crate::any::from_client!(MySqlClient);

impl Backend for MySqlClient {
    fn name(&self) -> &'static str {
        "mysql"
    }
    fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
        Ok(Arc::new(MySqlMutex::new(self, name)?))
    }
    fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
        Ok(Box::new(MySqlReadWriteLock::new(self, name)?))
    }
    fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
        Ok(Box::new(MySqlSemaphore::new(self, name, max_leases)?))
    }
    fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
        Ok(Box::new(MySqlLeaderLatch::start(self, name)?))
    }
    fn state(&self) -> ConnectionState {
        MySqlClient::state(self)
    }
    fn close(&self) {
        MySqlClient::close(self)
    }
}

crate::any::adapters!(
    MySqlReadWriteLock,
    MySqlSemaphore,
    MySqlLease,
    MySqlLeaderLatch
);
