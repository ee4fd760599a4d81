//! [`FileLeaderLatch`]: one leader among the processes of a host on a name, with an epoch per
//! term; no thread per latch.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::client::{FileClient, Held, Turn};
use super::queue::{Entry, Kind, Queue, Stop};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::leadership::Election;
use crate::core::lease::LocalLease;

/// As good as never: a file hold has no server-side timer, so its term's lease never runs out.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Curator's `LeaderLatch` on a directory: every latch on a name queues in the
/// [`FileMutex`](super::FileMutex) queue of that name (`lock.NAME`), and the one whose entry
/// is the lowest live one leads until it closes, its Client closes, its process dies, or its
/// entry is removed under it. Latches and mutexes on the same name share one queue.
///
/// # No thread per latch
/// [`start`](Self::start) makes the latch's entry and returns. The Client's keeper thread
/// looks at the turn of every waiting latch every 2 ms (one listing of the directory and one
/// lock probe of the entry ahead), and checks the leader's entry every 500 ms.
///
/// # Epochs
/// Every term's [`epoch`](Self::epoch) is its entry's number: rising from term to term on the
/// name, across crashes and reboots.
///
/// # Blocking and Drop
/// `start` waits at most 1 s for the directory's counter (held by another process for
/// microseconds, unless that process is frozen); `has_leadership`, `epoch` and `close` return
/// at once; `await_leadership_timeout(d)` waits at most `d`. Dropping the latch closes it.
///
/// # Example
/// ```
/// use std::time::Duration;
/// # fn main() -> zklock::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("zklock-doc-latch-{}", std::process::id()));
/// let client = zklock::FileClient::open(&dir)?;
/// let latch = zklock::file::FileLeaderLatch::start(&client, "billing-leader")?;
/// if latch.await_leadership_timeout(Duration::from_secs(30))? {
///     println!("leading in epoch {:?}", latch.epoch());
/// }
/// latch.close();
/// # client.close(); let _ = std::fs::remove_dir_all(&dir);
/// # Ok(()) }
/// ```
pub struct FileLeaderLatch {
    client: FileClient,
    name: String,
    contest: Arc<Contest>,
}

/// A latch's place in its election, run by the keeper.
struct Contest {
    client: FileClient,
    queue: Queue,
    election: Arc<Election>,
    state: Mutex<Place>,
}

#[derive(Default)]
struct Place {
    /// The entry waiting for its turn.
    waiting: Option<Entry>,
    /// The term's entry, and its place among the keeper's holds.
    holding: Option<(Arc<Held>, u64)>,
    finished: bool,
}

impl FileLeaderLatch {
    /// Starts taking part in the election `name` (names as for
    /// [`FileMutex::new`](super::FileMutex::new)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, [`Error::Closed`] if the Client is closed,
    /// [`Error::Io`] if the entry cannot be made, [`Error::Timeout`] if the directory's
    /// counter stayed busy for 1 s.
    pub fn start(client: &FileClient, name: &str) -> Result<FileLeaderLatch> {
        let inner = client.inner();
        let queue = Queue::new(inner.lock_dir("lock", name)?);
        if inner.closed() {
            return Err(Error::Closed);
        }
        let entry = enqueue(&queue, client, Deadline::after(Duration::from_secs(1)))?
            .ok_or(Error::Timeout)?;
        let contest = Arc::new(Contest {
            client: client.clone(),
            queue,
            election: Arc::new(Election::new(inner.dispatch())),
            state: Mutex::new(Place {
                waiting: Some(entry),
                ..Place::default()
            }),
        });
        let turn: Arc<dyn Turn> = contest.clone();
        inner.add_latch(Arc::downgrade(&turn));
        contest.tick(client);
        Ok(FileLeaderLatch {
            client: client.clone(),
            name: name.to_owned(),
            contest,
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops taking part: a leader's term ends (its listeners hear `Lost`) and the entry is
    /// removed. Returns at once; idempotent.
    pub fn close(&self) {
        self.contest.close();
    }
}

/// One entry for the latch, waiting for the directory's counter until `deadline`.
fn enqueue(queue: &Queue, client: &FileClient, deadline: Deadline) -> Result<Option<Entry>> {
    let cancel = AtomicU64::new(0);
    let closed = || client.inner().closed();
    let stop = Stop {
        cancel: &cancel,
        generation: 0,
        closed: &closed,
    };
    queue.enqueue(Kind::Lock, deadline, &stop)
}

impl Turn for Contest {
    fn tick(&self, client: &FileClient) {
        let mut place = self.state.lock();
        if self.election.term_ended() || self.election.is_closed() {
            if let Some((held, kept)) = place.holding.take() {
                client.inner().forget(kept);
                held.remove();
            }
            self.election.let_go();
        }
        if self.election.is_closed() {
            place.waiting = None;
            place.finished = true;
            return;
        }
        if place.holding.is_some() {
            return;
        }
        let Some(entry) = place.waiting.as_ref() else {
            // A term ended: queue again, at the back.
            if let Ok(entry) = enqueue(&self.queue, client, Deadline::after(Duration::ZERO)) {
                place.waiting = entry;
            }
            return;
        };
        let Ok(listing) = self.queue.list() else {
            return;
        };
        let mine = entry.name();
        match listing.iter().position(|l| l.name == mine) {
            None => place.waiting = None, // removed under us: queue again
            Some(0) => {
                let Some(entry) = place.waiting.take() else {
                    return;
                };
                let epoch = entry.seq;
                let held = Arc::new(Held::new(entry, &self.queue.dir));
                let lease = Arc::new(LocalLease::new());
                lease.open(FOREVER, FOREVER);
                let report = self.election.gained(epoch, lease);
                if let Ok(kept) = client.inner().keep(held.clone(), report) {
                    place.holding = Some((held, kept));
                }
            }
            Some(i) => {
                // Removes the entry ahead if its process is gone.
                self.queue.alive(&listing[i - 1].name);
            }
        }
    }

    fn finished(&self) -> bool {
        self.state.lock().finished
    }

    fn waiting(&self) -> bool {
        let place = self.state.lock();
        !place.finished && place.holding.is_none()
    }

    fn close(&self) {
        self.election.close();
        let mut place = self.state.lock();
        place.waiting = None;
        if let Some((held, kept)) = place.holding.take() {
            self.client.inner().forget(kept);
            held.remove();
        }
        self.election.let_go();
        place.finished = true;
    }
}

crate::core::leadership::forward_election_api!(FileLeaderLatch, contest.election);

impl Drop for FileLeaderLatch {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for FileLeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLeaderLatch")
            .field("name", &self.name)
            .field("leads", &self.has_leadership())
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}
