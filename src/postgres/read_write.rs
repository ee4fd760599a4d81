//! [`PgReadWriteLock`]: many readers or one writer, on shared and exclusive advisory locks.

use super::client::PgClient;
use super::mutex::PgMutex;
use crate::core::error::Result;

/// A read-write lock on PostgreSQL (Curator's `InterProcessReadWriteLock`): any number of
/// readers, or one writer, among every session using the same name. Each half is a
/// [`PgMutex`] — re-entrant per thread, with guards, health, fencing tokens and the
/// [`Lock`](crate::Lock) trait — as Curator's halves are `InterProcessMutex`es.
///
/// # The key
/// Both halves take the advisory lock `hashtextextended(NAME, 0)` — the read half shared
/// (`pg_advisory_lock_shared`), the write half exclusive (`pg_advisory_lock`) — so a
/// [`PgMutex`] of the same name excludes readers and writers alike, and any SQL client takes
/// the same locks with the same functions.
///
/// # Fairness
/// The server's lock manager queues both in arrival order, and a new shared request that
/// conflicts with a request already waiting joins the queue behind it: **a queued writer
/// holds back every reader that comes after it** (readers do not starve a writer), and
/// `try_lock` of the read half fails while a writer waits, even though only readers hold.
/// Readers queued one after another are granted together.
///
/// # Downgrade, not upgrade
/// A thread that holds the write lock may take the read lock: it is taken at once on the write
/// lock's own session (the server never makes a session wait for its own locks), and the
/// thread may then release the write lock and keep reading. A thread that holds only the read
/// lock and asks for the write lock gets [`Error::WouldDeadlock`](crate::Error::WouldDeadlock):
/// its write lock would wait on another session for its own read lock.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::PgClient::connect("postgres://app:secret@127.0.0.1/app")?;
/// let lock = zklock::postgres::PgReadWriteLock::new(&client, "catalogue")?;
/// {
///     let _write = lock.write_lock().lock()?;
///     // change the catalogue; then downgrade:
///     let _read = lock.read_lock().lock()?;
/// } // both released
/// let _read = lock.read_lock().try_lock_for(std::time::Duration::from_secs(1))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PgReadWriteLock {
    read: PgReadLock,
    write: PgWriteLock,
}

impl PgReadWriteLock {
    /// The read-write lock named `name` (any text of 1 to 1024 bytes without NUL).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty or over-long
    /// name or one with a NUL character; nothing is sent.
    pub fn new(client: &PgClient, name: &str) -> Result<PgReadWriteLock> {
        let [read, write] = PgMutex::read_write(client, name)?;
        Ok(PgReadWriteLock {
            read: PgReadLock::new(read),
            write: PgWriteLock::new(write),
        })
    }

    /// The read half: shared with other readers, excluded by a writer.
    pub fn read_lock(&self) -> &PgReadLock {
        &self.read
    }

    /// The write half: exclusive.
    pub fn write_lock(&self) -> &PgWriteLock {
        &self.write
    }
}

crate::core::half::lock_half!(
    /// The read half of a [`PgReadWriteLock`]: shared with other readers, excluded by a writer. Re-entrant per thread, with guards, health,
    /// a fencing token and the [`Lock`](crate::Lock) trait, as the backend's mutex.
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::PgClient::connect("postgres://app@127.0.0.1/app")?;
    /// let lock = zklock::postgres::PgReadWriteLock::new(&client, "catalogue")?;
    /// let half: &zklock::postgres::PgReadLock = lock.read_lock();
    /// let guard = half.lock()?;
    /// println!("token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    PgReadLock,
    PgMutex,
    "the Client's events thread"
);

impl PgReadLock {
    /// The mutex this half is.
    pub(super) fn mutex(&self) -> &PgMutex {
        &self.mutex
    }

    /// The SQL that takes this half from any SQL client.
    pub fn lock_sql(&self) -> String {
        self.mutex.lock_sql()
    }

    /// The server process of the session that holds this half for the calling thread.
    pub fn backend_pid(&self) -> Option<i32> {
        self.mutex.backend_pid()
    }
}

crate::core::half::lock_half!(
    /// The write half of a [`PgReadWriteLock`]: exclusive: no reader and no other writer. Re-entrant per thread, with guards, health,
    /// a fencing token and the [`Lock`](crate::Lock) trait, as the backend's mutex.
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::PgClient::connect("postgres://app@127.0.0.1/app")?;
    /// let lock = zklock::postgres::PgReadWriteLock::new(&client, "catalogue")?;
    /// let half: &zklock::postgres::PgWriteLock = lock.write_lock();
    /// let guard = half.lock()?;
    /// println!("token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    PgWriteLock,
    PgMutex,
    "the Client's events thread"
);

impl PgWriteLock {
    /// The mutex this half is.
    pub(super) fn mutex(&self) -> &PgMutex {
        &self.mutex
    }

    /// The SQL that takes this half from any SQL client.
    pub fn lock_sql(&self) -> String {
        self.mutex.lock_sql()
    }

    /// The server process of the session that holds this half for the calling thread.
    pub fn backend_pid(&self) -> Option<i32> {
        self.mutex.backend_pid()
    }
}
