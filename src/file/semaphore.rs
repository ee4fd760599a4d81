//! [`FileSemaphore`] and its [`FileLease`]: up to N holders at once among the processes of a
//! host, fair.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{FileClient, Held};
use super::queue::{Queue, Stop, Verdict};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, HealthFeed, LockHealth};
use crate::core::leased::{Leased, RawLease};
use crate::core::lock::Release;

/// A counting semaphore among every process of the host that opens the same directory: at
/// most `max_leases` [`FileLease`]s are out at once. Fair: the first `max_leases` live entries
/// of the directory `sem.NAME` hold leases, the others wait in arrival order (looking again
/// within a millisecond of any change). A lease whose process dies is freed by the kernel:
/// no permit is ever leaked.
///
/// Every participant passes its own `max_leases`; give them all the same. Not re-entrant:
/// each acquire takes one more lease. Leases are `Send`.
///
/// # Example
/// ```
/// # fn main() -> zklock::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("zklock-doc-sem-{}", std::process::id()));
/// let client = zklock::FileClient::open(&dir)?;
/// let pool = zklock::file::FileSemaphore::new(&client, "encoders", 3)?;
/// if let Some(lease) = pool.acquire_timeout(std::time::Duration::from_secs(5))? {
///     println!("one of 3, token {}", lease.fencing_token());
///     lease.release()?;
/// }
/// # client.close(); let _ = std::fs::remove_dir_all(&dir);
/// # Ok(()) }
/// ```
pub struct FileSemaphore {
    client: FileClient,
    name: String,
    queue: Queue,
    max_leases: u32,
    feed: Arc<HealthFeed>,
    cancel: AtomicU64,
}

impl FileSemaphore {
    /// A semaphore named `name` (names as for [`FileMutex::new`](super::FileMutex::new)) with
    /// `max_leases` permits.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name or no permits.
    pub fn new(client: &FileClient, name: &str, max_leases: u32) -> Result<FileSemaphore> {
        if max_leases == 0 {
            return Err(Error::invalid("a semaphore needs at least one lease"));
        }
        Ok(FileSemaphore {
            client: client.clone(),
            name: name.to_owned(),
            queue: Queue::new(client.inner().lock_dir("sem", name)?),
            max_leases,
            feed: Arc::default(),
            cancel: AtomicU64::new(0),
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of leases this participant allows at once.
    pub fn max_leases(&self) -> u32 {
        self.max_leases
    }

    /// Who has a lease and who waits, in that order (the first `max_leases` of this
    /// participant hold). Dead entries found on the way are removed.
    ///
    /// # Errors
    /// [`Error::Io`] if the directory cannot be read.
    pub fn participants(&self) -> Result<Vec<super::FileParticipant>> {
        super::participants::read(&self.queue, self.max_leases as usize)
    }

    /// Waits for a lease, for as long as it takes.
    ///
    /// # Errors
    /// [`Error::Cancelled`] after [`cancel_waiters`](Self::cancel_waiters), [`Error::Closed`]
    /// once the Client is closed, [`Error::Io`] if the directory cannot be written.
    pub fn acquire(&self) -> Result<FileLease> {
        self.acquire_by(Deadline::NEVER)?
            .ok_or_else(|| Error::invalid("a wait without a deadline ended without a lease"))
    }

    /// Waits at most `timeout` for a lease; `None` if none came (nothing is left behind).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<FileLease>> {
        self.acquire_by(Deadline::after(timeout))
    }

    /// A lease if one is free now and nobody waits ahead.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Result<Option<FileLease>> {
        self.acquire_by(Deadline::after(Duration::ZERO))
    }

    /// Ends every acquire of this object in progress with [`Error::Cancelled`]; their entries
    /// are removed.
    pub fn cancel_waiters(&self) {
        self.cancel.fetch_add(1, Ordering::AcqRel);
    }

    fn acquire_by(&self, deadline: Deadline) -> Result<Option<FileLease>> {
        let inner = self.client.inner();
        let closed = || inner.closed();
        let stop = Stop {
            cancel: &self.cancel,
            generation: self.cancel.load(Ordering::Acquire),
            closed: &closed,
        };
        stop.check()?;
        let started = Instant::now();
        let _waiting = crate::core::metrics::Waiting::new(&self.name);
        let Some(entry) = self
            .queue
            .enqueue(super::queue::Kind::Lease, deadline, &stop)?
        else {
            crate::core::metrics::timed_out(&self.name);
            return Ok(None);
        };
        let max = self.max_leases as usize;
        let granted = self.queue.wait(&entry, deadline, &stop, |listing, index| {
            if index < max {
                return Verdict::Granted;
            }
            // Leases come back in any order: look again at every change, not at one entry.
            // Dead entries ahead are removed on the way.
            for l in &listing[..index] {
                self.queue.alive(&l.name);
            }
            Verdict::Look
        })?;
        if granted.is_none() {
            crate::core::metrics::timed_out(&self.name);
            return Ok(None);
        }
        crate::core::metrics::acquired(&self.name, started.elapsed());
        let token = entry.seq;
        let id = entry.name();
        let node = entry.path.display().to_string();
        let held = Arc::new(Held::new(entry, &self.queue.dir));
        let (health, report) = self.feed.hold(inner.dispatch(), &self.name, &node, token);
        let kept = inner.keep(held.clone(), report.clone())?;
        let raw = Entry {
            client: self.client.clone(),
            held,
            kept,
        };
        Ok(Some(FileLease {
            lease: Leased::new(raw, &self.name, id, token, health)
                .capped(self.feed.max_hold(), report),
        }))
    }
}

crate::core::health::forward_health_api!(FileSemaphore, feed, "the Client's events thread");
crate::core::leased::capped_semaphore!(FileSemaphore, feed);

impl std::fmt::Debug for FileSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSemaphore")
            .field("name", &self.name)
            .field("max_leases", &self.max_leases)
            .finish_non_exhaustive()
    }
}

/// One permit of a [`FileSemaphore`]; its `id()` is its entry's name in the semaphore's
/// directory. Returned by [`release`](Self::release) or on drop (a file removal and a close:
/// microseconds, nothing that can block on another process).
///
/// # Example
/// ```
/// # fn main() -> zklock::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("zklock-doc-lease-{}", std::process::id()));
/// # let client = zklock::FileClient::open(&dir)?;
/// let pool = zklock::file::FileSemaphore::new(&client, "uploads", 2)?;
/// let lease = pool.acquire()?;
/// if lease.health() == zklock::LockHealth::Held {
///     // work under the permit
/// }
/// drop(lease); // returned here
/// # client.close(); let _ = std::fs::remove_dir_all(&dir);
/// # Ok(()) }
/// ```
#[must_use = "dropping a lease returns it at once"]
pub struct FileLease {
    lease: Leased<Entry>,
}

crate::core::leased::leased!(FileLease);

/// A held lease: its entry in the semaphore's directory, under its operating-system lock.
struct Entry {
    client: FileClient,
    held: Arc<Held>,
    kept: u64,
}

impl RawLease for Entry {
    fn health(&self, reported: LockHealth) -> LockHealth {
        worst(reported, self.held.check())
    }

    /// A removal and a close, whatever `how` says: nothing that can wait on another process.
    fn release(&mut self, _: Release, _: bool) -> Result<()> {
        self.client.inner().forget(self.kept);
        self.held.remove();
        Ok(())
    }

    fn drop_release(&self) -> Release {
        Release::Background
    }
}
