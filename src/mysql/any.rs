//! The URL factory's adapter for MySQL and MariaDB: `mysql://` and `mariadb://` open a
//! [`MySqlClient`].

use std::sync::Arc;
use std::time::Duration;

use super::MySqlClient;
use crate::any::{AnyClientBuilder, Backend};
use crate::core::error::Result;

pub(crate) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
    let client = MySqlClient::builder(&b.url)
        .session_timeout(b.session_timeout)
        .connect_timeout(b.connect_timeout)
        .operation_timeout(op)
        .connect()?;
    Ok(Arc::new(client))
}

crate::any::named_backend!(
    "mysql",
    MySqlClient,
    super::MySqlMutex,
    super::MySqlReadWriteLock,
    super::MySqlSemaphore,
    super::MySqlLease,
    super::MySqlLeaderLatch
);
