//! [`FileMutex`] and [`FileReadWriteLock`]: the fair mutex and the read-write lock of a
//! directory, on the queue of numbered entries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::client::{FileClient, Held};
use super::participants::FileParticipant;
use super::queue::{Kind, Listed, Queue, Stop, Verdict};
use crate::core::deadline::Deadline;
use crate::core::error::Result;
use crate::core::health::{worst, LockHealth};
use crate::core::hold::{Granted, RawLock, Reentrant, Report};
use crate::core::listeners::Dispatch;
use crate::core::lock::Release;

/// A mutex among every process of the host that opens the same directory: one holder at a
/// time, re-entrant per thread (through this object), fair (first come, first served), with a
/// fencing token and [`LockHealth`].
///
/// Each attempt is a numbered entry file in the directory `lock.NAME` of the Client's
/// directory, on which the attempt keeps an operating-system lock (`flock` on Unix,
/// `LockFileEx` on Windows); the lowest entry whose lock is held holds the mutex. A waiter
/// watches the entry just ahead of it only. The kernel frees a dead process's locks: its
/// entries are then seen as dead and removed by whoever finds them, so a holder killed with
/// `kill -9` is replaced within a millisecond or so. A **frozen** holder (SIGSTOP, a stalled
/// VM) keeps its lock for as long as it is frozen: there is no server whose timer would free it.
///
/// The fencing token is the entry's number, from a counter in the directory's `state` file
/// written and synced before the entry is made: it rises across holders, crashes and reboots
/// (unless the directory is deleted). `health()` reads `Lost` once the entry or the directory
/// was removed or replaced (their inodes are compared when asked, and by the Client's keeper
/// every 500 ms), or the Client closed; never `Suspended`.
///
/// # Example
/// ```
/// use zklock::Lock;
///
/// # fn main() -> zklock::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("zklock-doc-mutex-{}", std::process::id()));
/// let client = zklock::FileClient::open(&dir)?;
/// let mutex = zklock::file::FileMutex::new(&client, "ledger")?;
/// if let Some(guard) = mutex.try_lock_for(std::time::Duration::from_secs(5))? {
///     if guard.health() == zklock::LockHealth::Held {
///         println!("write with token {}", guard.fencing_token());
///     }
/// }
/// # client.close(); let _ = std::fs::remove_dir_all(&dir);
/// # Ok(()) }
/// ```
pub struct FileMutex {
    lock: Reentrant<Raw>,
}

/// The lock without re-entrancy.
struct Raw {
    client: FileClient,
    name: String,
    queue: Queue,
    kind: Kind,
    cancel: AtomicU64,
}

/// One thread's hold: its entry, and its place among the keeper's holds once kept.
struct Grant {
    held: Arc<Held>,
    kept: Option<u64>,
}

impl FileMutex {
    /// A fair mutex named `name` (any text; at most 240 bytes once lower-case letters, digits,
    /// `_` and `-` count one byte and any other byte three).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty or over-long
    /// name; nothing is touched on disk.
    pub fn new(client: &FileClient, name: &str) -> Result<FileMutex> {
        Ok(FileMutex {
            lock: Reentrant::new(Raw::new(client, "lock", name, Kind::Lock)?),
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lock.raw.name
    }

    /// The directory that holds the lock's entries.
    pub fn dir(&self) -> &std::path::Path {
        &self.lock.raw.queue.dir
    }

    /// Who holds the lock and who waits, in that order (a read-write lock's half: both
    /// halves' entries). Dead entries found on the way are removed.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) if the directory cannot be read.
    pub fn participants(&self) -> Result<Vec<FileParticipant>> {
        super::participants::read(&self.lock.raw.queue, 1)
    }
}

impl Raw {
    fn new(client: &FileClient, prefix: &str, name: &str, kind: Kind) -> Result<Raw> {
        let dir = client.inner().lock_dir(prefix, name)?;
        Ok(Raw {
            client: client.clone(),
            name: name.to_owned(),
            queue: Queue::new(dir),
            kind,
            cancel: AtomicU64::new(0),
        })
    }
}

/// The rule of a mutex's or a write lock's entry: the lowest holds, the others wait for the
/// one just ahead.
pub(crate) fn exclusive(listing: &[Listed], index: usize) -> Verdict {
    match index.checked_sub(1) {
        None => Verdict::Granted,
        Some(ahead) => Verdict::WaitFor(listing[ahead].name.clone()),
    }
}

/// The rule of a read lock's entry: granted unless a writer is ahead; else it waits for the
/// nearest writer ahead (a waiting writer goes before readers that came after it).
fn shared(listing: &[Listed], index: usize) -> Verdict {
    match listing[..index]
        .iter()
        .rev()
        .find(|l| l.kind == Kind::Write)
    {
        None => Verdict::Granted,
        Some(writer) => Verdict::WaitFor(writer.name.clone()),
    }
}

impl RawLock for Raw {
    type Grant = Grant;
    /// That the same thread holds the write half: its read lock is granted at once.
    type Shared = ();

    fn share(_: &Grant) {}

    fn name(&self) -> &str {
        &self.name
    }

    fn closed(&self) -> bool {
        self.client.inner().closed()
    }

    fn dispatch(&self) -> Dispatch {
        self.client.inner().dispatch()
    }

    fn acquire(&self, deadline: Deadline, partner: Option<()>) -> Result<Option<Granted<Grant>>> {
        let inner = self.client.inner();
        let closed = || inner.closed();
        let stop = Stop {
            cancel: &self.cancel,
            generation: self.cancel.load(Ordering::Acquire),
            closed: &closed,
        };
        stop.check()?;
        let Some(entry) = self.queue.enqueue(self.kind, deadline, &stop)? else {
            return Ok(None);
        };
        let downgrade = self.kind == Kind::Read && partner.is_some();
        if !downgrade {
            let rule = match self.kind {
                Kind::Read => shared,
                _ => exclusive,
            };
            if self.queue.wait(&entry, deadline, &stop, rule)?.is_none() {
                return Ok(None); // the entry is removed as it drops
            }
        }
        let token = entry.seq;
        let node = entry.path.display().to_string();
        Ok(Some(Granted {
            grant: Grant {
                held: Arc::new(Held::new(entry, &self.queue.dir)),
                kept: None,
            },
            token: token.into(),
            node,
        }))
    }

    fn keep(&self, grant: &mut Grant, report: Report) -> Result<()> {
        grant.kept = Some(self.client.inner().keep(grant.held.clone(), report)?);
        Ok(())
    }

    fn health(&self, grant: &Grant, reported: LockHealth) -> LockHealth {
        worst(reported, grant.held.check())
    }

    fn release(&self, grant: Grant, _: Release, _lost: bool, _: Option<()>) -> Result<()> {
        if let Some(kept) = grant.kept {
            self.client.inner().forget(kept);
        }
        grant.held.remove();
        Ok(())
    }

    fn cancel_waiters(&self) {
        self.cancel.fetch_add(1, Ordering::AcqRel);
    }
}

crate::core::hold::reentrant_lock!(FileMutex, "the Client's events thread");

impl std::fmt::Debug for FileMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileMutex")
            .field("name", &self.lock.raw.name)
            .field("kind", &self.lock.raw.kind)
            .field("held_here", &self.lock.is_acquired_in_this_process())
            .finish_non_exhaustive()
    }
}

/// A read-write lock among the processes of the host: readers share, a writer is alone, and a
/// waiting writer goes before readers that came after it (Curator's rule). Its halves are
/// [`FileMutex`]es, each re-entrant per thread; a thread that holds the write lock may take
/// the read lock (a downgrade), one that holds the read lock cannot wait for the write lock
/// ([`Error::WouldDeadlock`](crate::Error::WouldDeadlock)). Entries live in the directory
/// `rw.NAME`.
///
/// # Example
/// ```
/// use zklock::Lock;
///
/// # fn main() -> zklock::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("zklock-doc-rw-{}", std::process::id()));
/// let client = zklock::FileClient::open(&dir)?;
/// let rw = zklock::file::FileReadWriteLock::new(&client, "catalog")?;
/// let read = rw.read_lock().lock()?; // shared with other readers
/// drop(read);
/// # client.close(); let _ = std::fs::remove_dir_all(&dir);
/// # Ok(()) }
/// ```
pub struct FileReadWriteLock {
    read: FileMutex,
    write: FileMutex,
}

impl FileReadWriteLock {
    /// The read-write lock `name` (names as for [`FileMutex::new`]).
    ///
    /// # Errors
    /// As [`FileMutex::new`].
    pub fn new(client: &FileClient, name: &str) -> Result<FileReadWriteLock> {
        let [read, write] = Reentrant::pair(
            Raw::new(client, "rw", name, Kind::Read)?,
            Raw::new(client, "rw", name, Kind::Write)?,
        );
        Ok(FileReadWriteLock {
            read: FileMutex { lock: read },
            write: FileMutex { lock: write },
        })
    }

    /// The shared half.
    pub fn read_lock(&self) -> &FileMutex {
        &self.read
    }

    /// The exclusive half.
    pub fn write_lock(&self) -> &FileMutex {
        &self.write
    }
}

impl std::fmt::Debug for FileReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReadWriteLock")
            .field("name", &self.read.name())
            .finish_non_exhaustive()
    }
}
