//! [`FileClient`]: the locks of one directory on a local filesystem, with the keeper thread
//! that watches their holds and runs the latches' turns.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::queue::{ident_at, io, Entry, Ident};
use crate::core::connection::ConnectionState;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::hold::Report;
use crate::core::listeners::{start_events_thread, Dispatch, Event};

/// How often the keeper looks at every hold's entry and directory (a `stat` of each).
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(500);

/// How often the keeper looks at a waiting latch's turn.
const LATCH_EVERY: Duration = Duration::from_millis(2);

/// The longest lock name, in bytes once encoded for the directory's name.
const MAX_ENCODED: usize = 240;

/// A Client of the locks kept in one directory of a local filesystem (`file:///dir`): every
/// process of the host that opens the same directory shares its locks. No server, no session:
/// a lock is an entry file the holder keeps an operating-system lock on, which the kernel frees
/// when the process dies.
///
/// Cloning is cheap and shares the Client. Dropping the last clone closes it.
///
/// # Example
/// ```
/// use zklock::Lock;
///
/// # fn main() -> zklock::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("zklock-doc-client-{}", std::process::id()));
/// let client = zklock::FileClient::open(&dir)?;
/// let mutex = zklock::file::FileMutex::new(&client, "ledger")?;
/// let guard = mutex.lock()?;
/// println!("held with token {}", guard.fencing_token());
/// # drop(guard); client.close(); let _ = std::fs::remove_dir_all(&dir);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FileClient {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    root: PathBuf,
    closed: Arc<AtomicBool>,
    events: Mutex<Option<crossbeam_channel::Sender<Event>>>,
    kept: Mutex<HashMap<u64, Kept>>,
    latches: Mutex<Vec<Weak<dyn Turn>>>,
    next_id: AtomicU64,
    wake: Arc<Wake>,
}

/// A hold the keeper watches.
struct Kept {
    held: Arc<Held>,
    report: Report,
}

/// What the keeper runs for a latch on each of its rounds.
pub(crate) trait Turn: Send + Sync {
    /// Takes the latch's turn if it has come, lets go of a term that ended.
    fn tick(&self, client: &FileClient);
    /// Whether the latch is done (closed and out of the election).
    fn finished(&self) -> bool;
    /// The Client closes.
    fn close(&self);
    /// Whether the latch waits for its turn (the keeper then looks often).
    fn waiting(&self) -> bool;
}

/// A granted entry: the entry (removed on release or close) and the identities that tell
/// whether it is still ours.
pub(crate) struct Held {
    entry: Mutex<Entry>,
    dir: PathBuf,
    dir_ident: Ident,
    lost: AtomicBool,
}

impl Held {
    pub(crate) fn new(entry: Entry, dir: &Path) -> Held {
        Held {
            dir_ident: ident_at(dir).flatten(),
            dir: dir.to_owned(),
            entry: Mutex::new(entry),
            lost: AtomicBool::new(false),
        }
    }

    /// `Lost` once released, closed, or once its entry or the lock's directory was removed or
    /// replaced (their identities compared); `Held` otherwise. Two `stat` calls.
    pub(crate) fn check(&self) -> LockHealth {
        if self.lost.load(Ordering::Acquire) {
            return LockHealth::Lost;
        }
        let (path, ident, open) = {
            let e = self.entry.lock();
            (e.path.clone(), e.ident, e.file.is_some())
        };
        let sound =
            open && ident_at(&path) == Some(ident) && ident_at(&self.dir) == Some(self.dir_ident);
        if sound {
            LockHealth::Held
        } else {
            self.lost.store(true, Ordering::Release);
            LockHealth::Lost
        }
    }

    /// Removes the entry and frees its lock (idempotent).
    pub(crate) fn remove(&self) {
        self.lost.store(true, Ordering::Release);
        self.entry.lock().remove();
    }
}

impl FileClient {
    /// Opens the locks kept in `dir`, creating it if it is missing.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty path, or a directory on a network filesystem
    /// (NFS, SMB/CIFS, AFS, Ceph, 9p, FUSE, Lustre, GFS2, OCFS2; detected on Linux): there,
    /// operating-system locks may not be honoured across hosts or may be dropped when the
    /// server restarts, so a lock could be held twice. [`Error::Io`] when the directory cannot
    /// be created or is not a directory.
    pub fn open(dir: impl AsRef<Path>) -> Result<FileClient> {
        let root = dir.as_ref();
        if root.as_os_str().is_empty() {
            return Err(Error::invalid("a file:// lock directory must not be empty"));
        }
        std::fs::create_dir_all(root)
            .map_err(|e| io(format!("creating {}", root.display()), &e))?;
        let meta =
            std::fs::metadata(root).map_err(|e| io(format!("opening {}", root.display()), &e))?;
        if !meta.is_dir() {
            return Err(Error::invalid(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        check_filesystem(root)?;
        let closed = Arc::new(AtomicBool::new(false));
        let (events, _thread) = start_events_thread("zklock-file-events", closed.clone())?;
        let inner = Arc::new(Inner {
            root: root.to_owned(),
            closed,
            events: Mutex::new(Some(events)),
            kept: Mutex::default(),
            latches: Mutex::default(),
            next_id: AtomicU64::new(1),
            wake: Arc::default(),
        });
        let (weak, wake) = (Arc::downgrade(&inner), inner.wake.clone());
        std::thread::Builder::new()
            .name("zklock-file-keeper".into())
            .spawn(move || keeper(weak, wake))
            .map_err(|e| Error::thread_start("zklock-file-keeper", &e))?;
        Ok(FileClient { inner })
    }

    /// The directory the locks are kept in.
    pub fn dir(&self) -> &Path {
        &self.inner.root
    }

    /// `Connected` until [`close`](Self::close), then `Lost`: there is no connection to lose.
    pub fn state(&self) -> ConnectionState {
        if self.inner.closed() {
            ConnectionState::Lost
        } else {
            ConnectionState::Connected
        }
    }

    /// Closes the Client: every waiter ends with [`Error::Closed`] within a millisecond, every
    /// hold's entry is removed and its lock freed now (holds read `Lost`), every latch leaves
    /// its election. Returns at once; idempotent.
    pub fn close(&self) {
        self.inner.close();
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

impl Inner {
    pub(crate) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Where a lock of `prefix` (`lock`, `rw`, `sem`) named `name` keeps its entries.
    pub(crate) fn lock_dir(&self, prefix: &str, name: &str) -> Result<PathBuf> {
        Ok(self.root.join(format!("{prefix}.{}", encode(name)?)))
    }

    pub(crate) fn dispatch(&self) -> Dispatch {
        let events = self.events.lock().clone();
        Arc::new(move |f| {
            if let Some(events) = &events {
                let _ = events.send(f);
            }
        })
    }

    /// Watches a fresh hold; [`Error::Closed`] (with the entry removed) if the Client closed.
    pub(crate) fn keep(&self, held: Arc<Held>, report: Report) -> Result<u64> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut kept = self.kept.lock();
        if self.closed() {
            held.remove();
            return Err(Error::Closed);
        }
        kept.insert(id, Kept { held, report });
        Ok(id)
    }

    pub(crate) fn forget(&self, id: u64) {
        self.kept.lock().remove(&id);
    }

    /// Lets the keeper run `turn` on each of its rounds.
    pub(crate) fn add_latch(&self, turn: Weak<dyn Turn>) {
        self.latches.lock().push(turn);
        self.wake();
    }

    pub(crate) fn wake(&self) {
        let _guard = self.wake.lock.lock();
        self.wake.cond.notify_all();
    }

    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let kept: Vec<Kept> = self.kept.lock().drain().map(|(_, k)| k).collect();
        for k in kept {
            k.held.remove();
            (k.report)(LockHealth::Lost);
        }
        let latches: Vec<_> = self.latches.lock().drain(..).collect();
        for latch in latches.iter().filter_map(Weak::upgrade) {
            latch.close();
        }
        self.events.lock().take();
        self.wake();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

/// The keeper: looks at every hold every [`CHECK_EVERY`] (a hold found removed or replaced
/// reads `Lost` and its subscribers hear it), and runs the latches' turns every
/// [`LATCH_EVERY`] while one waits. Holds the Client only during a round: it ends when the
/// Client closes or is dropped.
fn keeper(inner: Weak<Inner>, wake: Arc<Wake>) {
    let mut last_check = std::time::Instant::now();
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        if strong.closed() {
            return;
        }
        let client = FileClient { inner: strong };
        let latches: Vec<_> = client.inner.latches.lock().clone();
        let mut waiting = false;
        for latch in latches.iter().filter_map(Weak::upgrade) {
            latch.tick(&client);
            waiting |= latch.waiting();
        }
        (client.inner.latches.lock()).retain(|l| l.upgrade().is_some_and(|l| !l.finished()));
        if last_check.elapsed() >= CHECK_EVERY {
            last_check = std::time::Instant::now();
            let kept: Vec<(Arc<Held>, Report)> = (client.inner.kept.lock().values())
                .map(|k| (k.held.clone(), k.report.clone()))
                .collect();
            for (held, report) in kept {
                if held.check() == LockHealth::Lost {
                    report(LockHealth::Lost);
                }
            }
        }
        drop(client);
        let pause = if waiting { LATCH_EVERY } else { CHECK_EVERY };
        let mut guard = wake.lock.lock();
        if inner.upgrade().is_none_or(|i| i.closed()) {
            return;
        }
        wake.cond.wait_for(&mut guard, pause);
    }
}

/// The keeper's wake-up, apart from the Client so that waiting for it does not keep the
/// Client alive.
#[derive(Default)]
struct Wake {
    lock: Mutex<()>,
    cond: Condvar,
}

/// A lock name as a directory name: lower-case letters, digits, `_` and `-` as they are, every
/// other byte as `%XX` (so that names differing only in case, or holding `/`, `.` or anything
/// else, stay distinct and safe on every filesystem).
pub(crate) fn encode(name: &str) -> Result<String> {
    if name.is_empty() {
        return Err(Error::invalid("a file:// lock name must not be empty"));
    }
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
        if out.len() > MAX_ENCODED {
            return Err(Error::invalid(format!(
                "a file:// lock name is at most {MAX_ENCODED} bytes once encoded (lower-case \
                 letters, digits, '_' and '-' take one byte, any other byte three): {} bytes \
                 given",
                name.len()
            )));
        }
    }
    Ok(out)
}

/// Refuses a directory on a network filesystem, where an operating-system lock may not
/// exclude another host's holder or may vanish in a server restart (Linux: `statfs`).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn check_filesystem(dir: &Path) -> Result<()> {
    let stat = rustix::fs::statfs(dir).map_err(|e| {
        io(
            format!("reading the filesystem of {}", dir.display()),
            &std::io::Error::from(e),
        )
    })?;
    #[allow(clippy::unnecessary_cast)] // the field's type differs between architectures
    let magic = (stat.f_type as i64 as u64) & 0xFFFF_FFFF;
    let name = match magic {
        0x6969 => "NFS",
        0x517B => "SMB",
        0xFF53_4D42 => "CIFS",
        0xFE53_4D42 => "SMB2",
        0x5346_414F => "AFS",
        0x00C3_6400 => "Ceph",
        0x0102_1997 => "9p",
        0x6573_5546 => "FUSE",
        0x0BD0_0BD0 => "Lustre",
        0x0116_1970 => "GFS2",
        0x7461_636F => "OCFS2",
        0x564C => "NCP",
        0x7375_7245 => "Coda",
        _ => return Ok(()),
    };
    Err(Error::invalid(format!(
        "{} is on {name}, a network filesystem: its file locks may not exclude a process of \
         another host, or may be dropped when its server restarts, so file:// refuses it. Use \
         a directory on a local filesystem (one host), or a server backend (zk://, redis://, \
         postgres://, mysql://) across hosts",
        dir.display()
    )))
}

/// Other platforms: no check (documented).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn check_filesystem(_: &Path) -> Result<()> {
    Ok(())
}

impl std::fmt::Debug for FileClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileClient")
            .field("dir", &self.inner.root)
            .field("closed", &self.inner.closed())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_encode_to_distinct_safe_directory_names() {
        assert_eq!(encode("ledger-1_a").unwrap(), "ledger-1_a");
        assert_eq!(encode("A/b.c").unwrap(), "%41%2Fb%2Ec");
        assert_ne!(encode("A").unwrap(), encode("a").unwrap());
        assert!(encode("").is_err());
        assert!(encode(&"x".repeat(MAX_ENCODED)).is_ok());
        assert!(encode(&"x".repeat(MAX_ENCODED + 1)).is_err());
        assert!(encode(&"/".repeat(100)).is_err());
    }
}
