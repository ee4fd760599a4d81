//! [`MySqlReadWriteLock`]: many readers or one writer, from `GET_LOCK` names (which have no
//! shared mode): a gate and 64 reader names.

use super::client::MySqlClient;
use super::mutex::MySqlMutex;
use crate::core::error::Result;

/// A read-write lock on MySQL or MariaDB (Curator's `InterProcessReadWriteLock`): up to 64
/// readers, or one writer, among every session using the same name. Each half is a
/// [`MySqlMutex`] — re-entrant per thread, with guards, health, fencing tokens and the
/// [`Lock`](crate::Lock) trait.
///
/// # The names
/// `GET_LOCK` has no shared mode, so the lock is made of `GET_LOCK` names (each hashed as a
/// [`MySqlMutex`]'s beyond 64 characters): a gate `NAME;w` and 64 reader names `NAME;r1` …
/// `NAME;r64`. A reader takes the gate (waiting behind any writer that holds it or waits for
/// it), takes the first free reader name and lets the gate go, all in one request; it holds
/// its reader name. A writer takes the gate, then every reader name — waiting for the readers
/// inside to leave — and holds them all. So a writer excludes every reader and every other
/// writer, readers exclude a writer, and up to 64 readers share; a 65th waits (it looks again
/// every 10 ms) until one leaves. `lock_sql()` gives each half's statements.
///
/// # Fairness
/// The gate is queued in arrival order by the server (MariaDB): **a waiting writer holds back
/// every reader that comes after it**, and writers are served in turn.
///
/// # No downgrade, no upgrade
/// A thread that holds the write lock and asks for the read lock gets
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) (its reader name would wait for
/// its own write lock); one that holds the read lock and asks for the write lock gets
/// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::MySqlClient::connect("mysql://app:secret@127.0.0.1/app")?;
/// let lock = zklock::MySqlReadWriteLock::new(&client, "catalogue")?;
/// {
///     let _write = lock.write_lock().lock()?;
///     // change the catalogue
/// }
/// let _read = lock.read_lock().try_lock_for(std::time::Duration::from_secs(1))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MySqlReadWriteLock {
    read: MySqlMutex,
    write: MySqlMutex,
}

impl MySqlReadWriteLock {
    /// The read-write lock named `name` (any text of 1 to 1024 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty or over-long
    /// name, or a Client in the table mode (which has no read-write lock); nothing is sent.
    pub fn new(client: &MySqlClient, name: &str) -> Result<MySqlReadWriteLock> {
        let [read, write] = MySqlMutex::read_write(client, name)?;
        Ok(MySqlReadWriteLock { read, write })
    }

    /// The read half: shared with other readers (up to 64), excluded by a writer.
    pub fn read_lock(&self) -> &MySqlMutex {
        &self.read
    }

    /// The write half: exclusive.
    pub fn write_lock(&self) -> &MySqlMutex {
        &self.write
    }
}
