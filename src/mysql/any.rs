//! The URL factory's adapter for MySQL and MariaDB: `mysql://` and `mariadb://` open a
//! [`MySqlClient`].

use super::MySqlClient;

crate::any::named_backend!(
    "mysql",
    MySqlClient,
    super::MySqlMutex,
    super::MySqlReadWriteLock,
    super::MySqlSemaphore,
    super::MySqlLease,
    super::MySqlLeaderLatch
);
