//! [`RedisLeaderLatch`]: one leader among every process on a name, with an epoch per term. A
//! latch has no thread: its place in the fair mutex's queue is kept by the Client's keeper
//! thread, which also renews the leader's hold.

use std::sync::Arc;

use super::client::RedisClient;
use super::keeper::Report;
use super::mutex::check_name;
use super::scripts::{Keys, Layout};
use crate::core::error::{Error, Result};
use crate::core::leadership::Election;
use crate::core::lease::LocalLease;

/// Curator's `LeaderLatch` on Redis: every latch on a name queues in the fair
/// [`RedisMutex`](super::RedisMutex)'s queue of that name, and the one that holds it leads
/// until it closes, its Client closes, or its hold is lost. Latches and `RedisMutex::new` on
/// the same name share one queue.
///
/// # No thread per latch
/// [`start`](Self::start) returns at once. The Client's keeper thread, which renews its holds,
/// also tries the latch's turn when its wake-up message comes (or at its re-check interval, a
/// third of the TTL), and renews the leader's hold. Ten thousand latches cost ten thousand
/// queue entries, not ten thousand threads.
///
/// # Asking
/// [`has_leadership`](Self::has_leadership) is computed when called: a term is on and its
/// hold's health is `Held` (a late renewal reads `Suspended` and does not count). A hold found
/// lost ends the term (listeners hear [`LeadershipChange::Lost`](crate::LeadershipChange::Lost))
/// and the latch queues again with a new place, at the back.
///
/// # Epochs
/// Every term has an [`epoch`](Self::epoch): the hold's fencing token, rising from term to
/// term on the name (see [`RedisMutex`](super::RedisMutex) for how strong it is).
///
/// # Blocking and Drop
/// `start`, `has_leadership`, `epoch` and `close` return at once (the release or the leave is
/// the keeper's, in the background); `await_leadership_timeout(d)` waits at most `d`. Dropping
/// the latch closes it. Listeners run on the Client's events thread and must not block.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
/// let latch = zklock::RedisLeaderLatch::start(&client, "billing-leader")?;
/// if latch.await_leadership_timeout(Duration::from_secs(30))? {
///     println!("leading in epoch {:?}", latch.epoch());
/// }
/// latch.close();
/// # Ok(()) }
/// ```
pub struct RedisLeaderLatch {
    client: RedisClient,
    name: String,
    contest: Arc<Contest>,
}

impl RedisLeaderLatch {
    /// Starts taking part in the election `name` (any text of 1 to 1024 bytes), in the
    /// background; returns at once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name, [`Error::Closed`] if the
    /// Client is closed; nothing is sent before it returns.
    pub fn start(client: &RedisClient, name: &str) -> Result<RedisLeaderLatch> {
        check_name(name)?;
        let inner = client.inner();
        if inner.closed() {
            return Err(Error::Closed);
        }
        let contest = Arc::new(Contest {
            keys: Keys::new(name, Layout::Queue),
            election: Arc::new(Election::new(inner.dispatch())),
        });
        inner.keeper.contend(contest.clone());
        Ok(RedisLeaderLatch {
            client: client.clone(),
            name: name.to_owned(),
            contest,
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops taking part: a leader's term ends (its listeners hear `Lost`) and the keeper
    /// releases the hold, or takes the latch out of the queue, in the background. Returns at
    /// once; idempotent.
    pub fn close(&self) {
        self.contest.close();
        self.client.inner().keeper.wake();
    }
}

crate::core::leadership::forward_election_api!(RedisLeaderLatch, contest.election);

impl Drop for RedisLeaderLatch {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for RedisLeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLeaderLatch")
            .field("name", &self.name)
            .field("leads", &self.has_leadership())
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

/// A latch as the keeper sees it: what to queue for, and the election it reports to.
pub(crate) struct Contest {
    pub(crate) keys: Keys,
    pub(crate) election: Arc<Election>,
}

impl Contest {
    pub(crate) fn is_closed(&self) -> bool {
        self.election.is_closed()
    }

    /// Whether the current term ended (lost or closed) and the keeper should let it go.
    pub(crate) fn term_ended(&self) -> bool {
        self.election.term_ended()
    }

    /// The keeper let go of the ended term.
    pub(crate) fn let_go(&self) {
        self.election.let_go();
    }

    /// A term begins; returns how the keeper reports its hold's health.
    pub(crate) fn gained(&self, epoch: u64, lease: Arc<LocalLease>) -> Report {
        self.election.gained(epoch, lease)
    }

    /// The latch closes: a term on ends.
    pub(crate) fn close(&self) {
        self.election.close();
    }
}
