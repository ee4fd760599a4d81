//! The URL factory's adapter for PostgreSQL: `postgres://` and `postgresql://` open a
//! [`PgClient`].

use super::PgClient;

crate::any::named_backend!(
    "postgres",
    PgClient,
    super::PgMutex,
    super::PgReadWriteLock,
    super::PgSemaphore,
    super::PgLease,
    super::PgLeaderLatch
);
