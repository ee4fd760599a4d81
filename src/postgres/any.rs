//! The URL factory's adapter for PostgreSQL: `postgres://` and `postgresql://` open a
//! [`PgClient`].

use std::sync::Arc;
use std::time::Duration;

use super::PgClient;
use crate::any::{AnyClientBuilder, Backend};
use crate::core::error::Result;

pub(crate) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
    let client = PgClient::builder(&b.url)
        .session_timeout(b.session_timeout)
        .connect_timeout(b.connect_timeout)
        .operation_timeout(op)
        .connect()?;
    Ok(Arc::new(client))
}

crate::any::named_backend!(
    "postgres",
    PgClient,
    super::PgMutex,
    super::PgReadWriteLock,
    super::PgSemaphore,
    super::PgLease,
    super::PgLeaderLatch
);
