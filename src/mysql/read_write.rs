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
/// `GET_LOCK` has no shared mode, so the lock is made of `GET_LOCK` names (each mapped to its key
/// as a [`MySqlMutex`]'s name is): a gate `NAME;w` and 64 reader names `NAME;r1` …
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
/// let lock = zklock::mysql::MySqlReadWriteLock::new(&client, "catalogue")?;
/// {
///     let _write = lock.write_lock().lock()?;
///     // change the catalogue
/// }
/// let _read = lock.read_lock().try_lock_for(std::time::Duration::from_secs(1))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MySqlReadWriteLock {
    read: MySqlReadLock,
    write: MySqlWriteLock,
}

impl MySqlReadWriteLock {
    /// The read-write lock named `name` (any text of 1 to 1024 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty or over-long
    /// name, or a Client in the table mode (which has no read-write lock); nothing is sent.
    pub fn new(client: &MySqlClient, name: &str) -> Result<MySqlReadWriteLock> {
        let [read, write] = MySqlMutex::read_write(client, name)?;
        Ok(MySqlReadWriteLock {
            read: MySqlReadLock::new(read),
            write: MySqlWriteLock::new(write),
        })
    }

    /// The read half: shared with other readers (up to 64), excluded by a writer.
    pub fn read_lock(&self) -> &MySqlReadLock {
        &self.read
    }

    /// The write half: exclusive.
    pub fn write_lock(&self) -> &MySqlWriteLock {
        &self.write
    }
}

crate::core::half::lock_half!(
    /// The read half of a [`MySqlReadWriteLock`]: shared with other readers, excluded by a writer. Re-entrant per thread, with guards, health,
    /// a fencing token and the [`Lock`](crate::Lock) trait, as the backend's mutex.
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::MySqlClient::connect("mysql://app@127.0.0.1/app")?;
    /// let lock = zklock::mysql::MySqlReadWriteLock::new(&client, "catalogue")?;
    /// let half: &zklock::mysql::MySqlReadLock = lock.read_lock();
    /// let guard = half.lock()?;
    /// println!("token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    MySqlReadLock,
    MySqlMutex,
    "the Client's events thread"
);

impl MySqlReadLock {
    /// The mutex this half is.
    pub(super) fn mutex(&self) -> &MySqlMutex {
        &self.mutex
    }

    /// The SQL that takes this half from any SQL client (see
    /// [`MySqlMutex::lock_sql`](super::MySqlMutex::lock_sql)).
    pub fn lock_sql(&self) -> String {
        self.mutex.lock_sql()
    }

    /// The connection that holds this half for the calling thread.
    pub fn connection_id(&self) -> Option<u32> {
        self.mutex.connection_id()
    }
}

crate::core::half::lock_half!(
    /// The write half of a [`MySqlReadWriteLock`]: exclusive: no reader and no other writer. Re-entrant per thread, with guards, health,
    /// a fencing token and the [`Lock`](crate::Lock) trait, as the backend's mutex.
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::MySqlClient::connect("mysql://app@127.0.0.1/app")?;
    /// let lock = zklock::mysql::MySqlReadWriteLock::new(&client, "catalogue")?;
    /// let half: &zklock::mysql::MySqlWriteLock = lock.write_lock();
    /// let guard = half.lock()?;
    /// println!("token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    MySqlWriteLock,
    MySqlMutex,
    "the Client's events thread"
);

impl MySqlWriteLock {
    /// The mutex this half is.
    pub(super) fn mutex(&self) -> &MySqlMutex {
        &self.mutex
    }

    /// The SQL that takes this half from any SQL client (see
    /// [`MySqlMutex::lock_sql`](super::MySqlMutex::lock_sql)).
    pub fn lock_sql(&self) -> String {
        self.mutex.lock_sql()
    }

    /// The connection that holds this half for the calling thread.
    pub fn connection_id(&self) -> Option<u32> {
        self.mutex.connection_id()
    }
}
