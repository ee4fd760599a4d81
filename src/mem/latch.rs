//! [`MemLeaderLatch`]: one leader among the Clients of a store, with an epoch per term. A
//! latch has no thread: the store begins its term when its entry is granted.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::client::{check_name, Inner, MemClient};
use super::store::{Contender, Kind, Place};
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::hold::Report;
use crate::core::leadership::Election;
use crate::core::lease::LocalLease;

/// A term's lease: never late by itself; the controls date its last answer back to make it
/// read `Suspended`.
const FOREVER: Duration = Duration::MAX;

/// Curator's `LeaderLatch` in the process: every latch on a name queues in the queue of the
/// [`MemMutex`](super::MemMutex) of that name, and the one that holds it leads until it
/// closes, its Client closes, or its hold is lost ([`MemClient::lose_holds`]); a latch whose
/// hold was lost queues again at the back.
///
/// [`has_leadership`](Self::has_leadership) is `true` while a term is on and its hold reads
/// `Held` (a hold made `Suspended` by [`MemClient::suspend_holds`] does not lead). Every term
/// has an [`epoch`](Self::epoch), rising from term to term.
///
/// # Blocking and Drop
/// `start`, `has_leadership`, `epoch` and `close` return at once; `await_leadership_timeout(d)`
/// waits at most `d`. Dropping the latch closes it. Listeners run on the mem:// events
/// thread and must not block.
///
/// # Example
/// ```
/// use std::time::Duration;
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::mem::MemClient::connect("latch-doc")?;
/// let latch = zklock::mem::MemLeaderLatch::start(&client, "billing-leader")?;
/// assert!(latch.await_leadership_timeout(Duration::from_secs(1))?);
/// println!("leading in epoch {:?}", latch.epoch());
/// latch.close();
/// # Ok(()) }
/// ```
pub struct MemLeaderLatch {
    client: MemClient,
    contest: Arc<Contest>,
}

/// A latch's side of the store: its entry, its election and its term's lease.
struct Contest {
    client: Weak<Inner>,
    name: String,
    election: Arc<Election>,
    lease: Arc<LocalLease>,
    /// The queue entry of the current attempt or term.
    entry: Mutex<Option<u64>>,
    /// How the current term hears that its hold is lost.
    term: Mutex<Option<Report>>,
}

impl MemLeaderLatch {
    /// Starts taking part in the election `name` (any text of 1 to 1024 bytes); returns at
    /// once (leading already if nobody else takes part).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name, [`Error::Closed`] if the
    /// Client is closed.
    pub fn start(client: &MemClient, name: &str) -> Result<MemLeaderLatch> {
        check_name("election", name)?;
        let inner = client.inner();
        if inner.closed() {
            return Err(Error::Closed);
        }
        let contest = Arc::new(Contest {
            client: Arc::downgrade(client.inner_arc()),
            name: name.to_owned(),
            election: Arc::new(Election::new(super::client::dispatch())),
            lease: Arc::new(LocalLease::new()),
            entry: Mutex::new(None),
            term: Mutex::new(None),
        });
        contest.queue();
        Ok(MemLeaderLatch {
            client: client.clone(),
            contest,
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.contest.name
    }

    /// Stops taking part: a leader's term ends (its listeners hear `Lost`) and the latch
    /// leaves the queue. Returns at once; idempotent.
    pub fn close(&self) {
        self.contest.election.close();
        self.contest.leave();
    }
}

impl Contest {
    /// Takes a new place at the back of the queue (a term begins when it is granted).
    fn queue(self: &Arc<Self>) {
        let Some(inner) = self.client.upgrade() else {
            return;
        };
        if inner.closed() || self.election.is_closed() {
            return;
        }
        let me: Arc<dyn Contender> = self.clone();
        let entry = inner.store().join(&self.name, inner.id(), me);
        *self.entry.lock() = Some(entry);
        if self.election.is_closed() {
            self.leave();
        }
    }

    /// Leaves the queue (a term on ends with it).
    fn leave(&self) {
        let entry = self.entry.lock().take();
        if let (Some(entry), Some(inner)) = (entry, self.client.upgrade()) {
            inner.store().release(&Place {
                kind: Kind::Mutex,
                name: self.name.clone(),
                entry,
            });
        }
        self.election.let_go();
    }
}

impl Contender for Contest {
    fn granted(&self, _entry: u64, token: u64) -> Report {
        self.lease.open(FOREVER, FOREVER);
        let ends = self.election.gained(token, self.lease.clone());
        *self.term.lock() = Some(ends);
        let lease = self.lease.clone();
        Arc::new(move |health| match health {
            LockHealth::Held => lease.open(FOREVER, FOREVER),
            // Heard last at the clock's start: late beyond any suspend threshold of zero.
            LockHealth::Suspended => lease.open_at(FOREVER, Duration::ZERO, Duration::ZERO),
            // Lost: the store takes the entry out and calls `lost`.
            _ => {}
        })
    }

    fn lost(self: Arc<Self>, closed: bool) {
        let ends = self.term.lock().take();
        if let Some(ends) = ends {
            ends(LockHealth::Lost);
        }
        *self.entry.lock() = None;
        self.election.let_go();
        if closed {
            self.election.close();
        } else {
            self.queue();
        }
    }
}

crate::core::leadership::forward_election_api!(MemLeaderLatch, contest.election);

impl Drop for MemLeaderLatch {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for MemLeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemLeaderLatch")
            .field("name", &self.contest.name)
            .field("leads", &self.has_leadership())
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}
