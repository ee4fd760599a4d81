//! [`RedisLeaderLatch`]: one leader among every process on a name, with an epoch per term. A
//! latch has no thread: its place in the fair mutex's queue is kept by the Client's keeper
//! thread, which also renews the leader's hold.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};

use super::client::RedisClient;
use super::keeper::Report;
use super::mutex::check_name;
use super::scripts::{Keys, Layout};
use crate::core::channel::Receiver;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::leadership::LeadershipChange;
use crate::core::lease::LocalLease;
use crate::core::listeners::{on_listener_thread, Dispatch, Listeners};

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
/// lost ends the term (listeners hear [`LeadershipChange::Lost`]) and the latch queues again
/// with a new place, at the back.
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
            state: Mutex::default(),
            changed: Condvar::new(),
            channels: Mutex::default(),
            listeners: Arc::default(),
            dispatch: inner.dispatch(),
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

    /// Whether we lead now: a term is on and its hold's health, computed now, is `Held`.
    pub fn has_leadership(&self) -> bool {
        self.contest.state.lock().leads()
    }

    /// The current term's health, computed now (`None` between terms): `Held` while the
    /// leader's hold is renewed, `Suspended` once a renewal is late, `Lost` at the end.
    pub fn health(&self) -> Option<LockHealth> {
        let state = self.contest.state.lock();
        let term = state.term.as_ref()?;
        Some(if state.closed {
            LockHealth::Lost
        } else {
            term.lease.health()
        })
    }

    /// The current term's epoch (fencing token), while a term is on.
    pub fn epoch(&self) -> Option<u64> {
        self.contest.state.lock().term.as_ref().map(|t| t.epoch)
    }

    /// Blocks until we lead.
    ///
    /// # Errors
    /// [`Error::Closed`] if the latch or its Client is closed first;
    /// [`Error::OnWatcherThread`] from a listener (it would wait for itself).
    pub fn await_leadership(&self) -> Result<()> {
        self.await_until(None).map(|_| ())
    }

    /// Waits at most `timeout` for leadership: whether we lead.
    ///
    /// # Errors
    /// As [`await_leadership`](Self::await_leadership).
    #[must_use = "`false` means we do NOT lead"]
    pub fn await_leadership_timeout(&self, timeout: Duration) -> Result<bool> {
        self.await_until(Instant::now().checked_add(timeout))
    }

    fn await_until(&self, until: Option<Instant>) -> Result<bool> {
        if on_listener_thread() && until.is_none_or(|at| at > Instant::now()) {
            return Err(Error::OnWatcherThread);
        }
        let mut state = self.contest.state.lock();
        loop {
            if state.closed || self.client.inner().closed() {
                return Err(Error::Closed);
            }
            if state.leads() {
                return Ok(true);
            }
            // Woken by every change; a term whose health slips is looked at again soon.
            let soon = Instant::now() + Duration::from_millis(50);
            let at = until.map_or(soon, |u| u.min(soon));
            let timed_out = self.contest.changed.wait_until(&mut state, at).timed_out();
            if timed_out && until.is_some_and(|u| Instant::now() >= u) {
                return Ok(state.leads());
            }
        }
    }

    /// A channel of every later change.
    pub fn changes(&self) -> Receiver<LeadershipChange> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.contest.channels.lock().push(tx);
        Receiver::new(rx)
    }

    /// Calls `f` on every later change, on the Client's events thread (it must not block);
    /// returns an id for [`remove_listener`](Self::remove_listener).
    pub fn on_change(&self, f: impl FnMut(LeadershipChange) + Send + 'static) -> u64 {
        self.contest.listeners.add(0, Box::new(f))
    }

    /// Removes a listener added by [`on_change`](Self::on_change); whether it was there.
    pub fn remove_listener(&self, id: u64) -> bool {
        self.contest.listeners.remove(id)
    }

    /// Stops taking part: a leader's term ends (its listeners hear `Lost`) and the keeper
    /// releases the hold, or takes the latch out of the queue, in the background. Returns at
    /// once; idempotent.
    pub fn close(&self) {
        self.contest.close();
        self.client.inner().keeper.wake();
    }
}

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

/// A latch as the keeper sees it: what to queue for, and where to tell what became of it.
pub(crate) struct Contest {
    pub(crate) keys: Keys,
    state: Mutex<State>,
    changed: Condvar,
    channels: Mutex<Vec<Sender<LeadershipChange>>>,
    listeners: Arc<Listeners<LeadershipChange>>,
    dispatch: Dispatch,
}

#[derive(Default)]
struct State {
    closed: bool,
    term: Option<Term>,
    /// The term ended (lost, or the latch closed) and the keeper has not let go of it yet.
    ended: bool,
}

struct Term {
    epoch: u64,
    lease: Arc<LocalLease>,
}

impl State {
    fn leads(&self) -> bool {
        !self.closed
            && self
                .term
                .as_ref()
                .is_some_and(|t| t.lease.health() == LockHealth::Held)
    }
}

impl Contest {
    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Whether the current term ended (lost or closed) and the keeper should let it go.
    pub(crate) fn term_ended(&self) -> bool {
        self.state.lock().ended
    }

    /// The keeper let go of the ended term.
    pub(crate) fn let_go(&self) {
        self.state.lock().ended = false;
    }

    /// A term begins; returns how the keeper reports its hold's health.
    pub(crate) fn gained(self: &Arc<Self>, epoch: u64, lease: Arc<LocalLease>) -> Report {
        {
            let mut state = self.state.lock();
            state.term = Some(Term { epoch, lease });
            state.ended = false;
        }
        self.tell(LeadershipChange::Gained { epoch });
        let contest = Arc::downgrade(self);
        Arc::new(move |health| {
            if health == LockHealth::Lost {
                if let Some(contest) = contest.upgrade() {
                    contest.end_term();
                }
            }
        })
    }

    /// The latch closes: a term on ends.
    pub(crate) fn close(&self) {
        let was = {
            let mut state = self.state.lock();
            state.closed = true;
            state.term.is_some()
        };
        if was {
            self.end_term();
        }
        self.changed.notify_all();
    }

    fn end_term(&self) {
        {
            let mut state = self.state.lock();
            if state.term.take().is_none() {
                return;
            }
            state.ended = true;
        }
        self.tell(LeadershipChange::Lost);
    }

    fn tell(&self, change: LeadershipChange) {
        self.changed.notify_all();
        self.channels.lock().retain(|tx| tx.send(change).is_ok());
        let listeners = self.listeners.clone();
        (self.dispatch)(Box::new(move || listeners.call(u64::MAX, change)));
    }
}
