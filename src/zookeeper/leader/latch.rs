//! LeaderLatch: Curator's latch. It queues a node (`<path>/_c_<uuid>-latch-<seq10>`, data = id)
//! through LockInternals and holds leadership while the node heads the queue, in our live
//! session, and its health keeps to the policy. It has no thread of its own: its attempt parks
//! without one and is resumed on the shared `zklock-elect` threads when woken, and its term
//! ends on the keeper's report or the shared look at the lease.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::participant::{close_on_drop, take_part, Candidate, Recipe, Settings};
use super::pool;
use super::term::Term;
use super::Participant;
use crate::core::channel::Receiver;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::leadership::LeadershipChange;
use crate::core::listeners::Listeners;
use crate::zookeeper::client::{is_watcher_thread, AclProvider, Client, ErrorPolicy};
use crate::zookeeper::locks::Acquired;

/// Curator's lock node name for latches.
const LATCH_NAME: &str = "latch-";

/// Whether [`LeaderLatch::close`] tells the listeners of a leader that it stops leading
/// (Curator's `CloseMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CloseMode {
    /// Close without telling (Curator's default).
    #[default]
    Silent,
    /// A leader's listeners hear [`LeadershipChange::Lost`].
    NotifyLeader,
}

/// Curator's `LeaderLatch`: every participant on a path queues a node; the first in sequence
/// order leads until it closes, loses its session or (by the [`ErrorPolicy`]) its connection.
/// Java `LeaderLatch`es on the same path take part in the same election.
///
/// # Taking part
/// [`start`](Self::start) returns at once; the latch queues our node and follows it, also
/// across reconnections and new sessions: when leadership is given up (policy, lost session,
/// deleted node) the node goes and a new one queues. A node of an earlier session never leads
/// (CURATOR-696). [`close`](Self::close) (or drop) deletes our node.
///
/// # Threads
/// A latch has no thread of its own, waiting or leading. Its steps (a create, a listing, a
/// read of the node ahead, a step-down) run on up to four `zklock-elect` threads that every
/// latch and waiting [`LeaderSelector`](crate::LeaderSelector) of the process share, started
/// on demand and gone after 2 s without work; one `zklock-elect-timer` thread looks at every
/// leader's local lease each 200 ms. So 10,000 latches cost a handful of threads, as 10 do.
///
/// # Asking
/// [`has_leadership`](Self::has_leadership) is computed when called, from the node's health
/// and the Client's local lease on its session ([`LockHealth`](crate::LockHealth)).
/// [`await_leadership`](Self::await_leadership) blocks until we lead;
/// [`changes`](Self::changes) and [`on_change`](Self::on_change) push every change.
///
/// # Epochs
/// Every term has an [`epoch`](Self::epoch): the czxid of the leading node, rising strictly
/// from term to term on the path. Hand it to the resource so that it can refuse a deposed
/// leader (beyond Curator).
///
/// # Blocking and Drop
/// `start`, `has_leadership`, `epoch` return at once; `await_leadership_timeout(d)` waits at
/// most `d`; `close` waits for the latch's step in progress, which runs no user code (the
/// Client's operation, else connection, timeout at most). Dropping the latch closes it, waiting
/// for that step at most 1 s (or the operation timeout, if shorter); our node's delete goes to
/// the background. Listeners run on the Client's watcher thread: a listener that blocks delays the
/// later listener calls and [`Watch`](crate::zookeeper::Watch) deliveries of its Client, and the wake-ups
/// of parked waiters on a connection-state change (they come through that thread); it never
/// delays a latch's grant, its channels or another latch's step.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use zklock::{CloseMode, LeaderLatch};
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let latch = LeaderLatch::builder(&client, "/services/billing/leader")
///     .id("billing-1")
///     .close_mode(CloseMode::NotifyLeader)
///     .build()?;
/// latch.start()?;
/// if latch.await_leadership_timeout(Duration::from_secs(30))? {
///     println!("leading in epoch {:?}", latch.epoch());
/// }
/// latch.close()?;
/// # Ok(()) }
/// ```
pub struct LeaderLatch {
    inner: Arc<Inner>,
}

/// Configures a [`LeaderLatch`].
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let latch = zklock::LeaderLatch::builder(&client, "/election")
///     .id("worker-7")
///     .error_policy(zklock::ErrorPolicy::SessionOnly)
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderLatchBuilder {
    settings: Settings,
    close_mode: CloseMode,
}

struct Inner {
    candidate: Candidate<()>,
    close_mode: CloseMode,
    channels: Mutex<Vec<Sender<LeadershipChange>>>,
    listeners: Arc<Listeners<LeadershipChange>>,
}

impl LeaderLatchBuilder {
    /// The participant id, written into our node (Curator's `id`); default: host name and
    /// process id.
    pub fn id(mut self, id: &str) -> Self {
        self.settings.id(id);
        self
    }

    /// Whether closing a leader tells its listeners; default [`CloseMode::Silent`].
    pub fn close_mode(mut self, mode: CloseMode) -> Self {
        self.close_mode = mode;
        self
    }

    /// The ACL provider for this participant's node and the parents it creates; default: the
    /// Client's ([`ClientBuilder::acl_provider`](crate::ClientBuilder::acl_provider)). Other
    /// participants read each node's id, so give them READ on it. It is asked on a shared
    /// `zklock-elect` thread, so it must not block.
    pub fn acl_provider(mut self, provider: impl AclProvider) -> Self {
        self.settings.acl_provider(provider);
        self
    }

    /// When leadership is given up because of the connection; default: the Client's
    /// ([`ClientBuilder::error_policy`](crate::ClientBuilder::error_policy)).
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.settings.error_policy(policy);
        self
    }

    /// The latch, not yet taking part: call [`LeaderLatch::start`].
    pub fn build(self) -> Result<LeaderLatch> {
        Ok(LeaderLatch {
            inner: Arc::new(Inner {
                // No holder marks: Curator's latches do not follow data changes.
                candidate: self.settings.build(LATCH_NAME, false, ())?,
                close_mode: self.close_mode,
                channels: Mutex::new(Vec::new()),
                listeners: Arc::new(Listeners::default()),
            }),
        })
    }
}

impl LeaderLatch {
    /// A latch on `path` with the default id, close mode and the Client's error policy.
    pub fn new(client: &Client, path: &str) -> Result<LeaderLatch> {
        Self::builder(client, path).build()
    }

    /// Configures a latch on `path`.
    pub fn builder(client: &Client, path: &str) -> LeaderLatchBuilder {
        LeaderLatchBuilder {
            settings: Settings::new(client, path),
            close_mode: CloseMode::default(),
        }
    }

    /// Starts taking part, in the background; returns at once. Fails if the latch was started
    /// before or closed.
    pub fn start(&self) -> Result<()> {
        self.inner.candidate.start("latch")?;
        take_part(&self.inner);
        Ok(())
    }

    /// Whether we lead now: a term is on and its node's health, computed now, keeps to the
    /// error policy.
    pub fn has_leadership(&self) -> bool {
        self.inner.candidate.state.lock().leads()
    }

    /// The current term's health, computed now (`None` between terms): `Held` while its node
    /// and session are sound, `Suspended` while the connection is, `Lost` once the term ended.
    pub fn health(&self) -> Option<LockHealth> {
        let term = self.inner.candidate.state.lock().term.clone()?;
        Some(if term.is_ended() {
            LockHealth::Lost
        } else {
            term.health()
        })
    }

    /// The current term's epoch (fencing token), while we lead.
    pub fn epoch(&self) -> Option<u64> {
        let term = self.inner.candidate.state.lock().term.clone()?;
        (!term.is_over()).then(|| term.epoch())
    }

    /// Blocks until we lead.
    ///
    /// # Blocking
    /// Without limit, until we lead or the latch is closed; no I/O of its own (the shared
    /// threads take part).
    ///
    /// # Errors
    /// [`Error::Closed`] if the latch is closed first (or was never started);
    /// [`Error::OnWatcherThread`] from a listener.
    pub fn await_leadership(&self) -> Result<()> {
        self.await_until(None).map(|_| ())
    }

    /// Waits at most `timeout` for leadership: whether we lead.
    ///
    /// # Blocking and errors
    /// At most `timeout`; errors as [`await_leadership`](Self::await_leadership).
    #[must_use = "`false` means we do NOT lead"]
    pub fn await_leadership_timeout(&self, timeout: Duration) -> Result<bool> {
        self.await_until(Instant::now().checked_add(timeout))
    }

    fn await_until(&self, until: Option<Instant>) -> Result<bool> {
        let deadline = Deadline::until(until);
        if !deadline.expired() && is_watcher_thread() {
            return Err(Error::OnWatcherThread);
        }
        let candidate = &self.inner.candidate;
        let mut state = candidate.state.lock();
        loop {
            if candidate.is_closed() || !state.started {
                return Err(Error::Closed);
            }
            if state.leads() {
                return Ok(true);
            }
            match until {
                Some(at) => {
                    if candidate.changed.wait_until(&mut state, at).timed_out() {
                        return Ok(state.leads());
                    }
                }
                None => candidate.changed.wait(&mut state),
            }
        }
    }

    /// The participant that leads: the first node in sequence order (read from the server).
    ///
    /// # Blocking and errors
    /// As [`participants`](Self::participants).
    pub fn leader(&self) -> Result<Option<Participant>> {
        self.inner.candidate.leader()
    }

    /// Every participant, the leader first (read from the server, as Curator does).
    ///
    /// # Blocking
    /// A listing and a read per participant, each bounded by the operation timeout.
    ///
    /// # Errors
    /// A connection error if the server cannot be reached in time; a participant whose node
    /// goes meanwhile is left out.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        self.inner.candidate.participants()
    }

    /// This latch's participant id.
    pub fn id(&self) -> &str {
        &self.inner.candidate.id
    }

    /// Our node's path while we take part and our node is queued and leads, if it does.
    pub fn leader_node(&self) -> Option<String> {
        let term = self.inner.candidate.state.lock().term.clone()?;
        Some(term.node().to_owned())
    }

    /// A channel of every later change.
    pub fn changes(&self) -> Receiver<LeadershipChange> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.inner.channels.lock().push(tx);
        Receiver::new(rx)
    }

    /// Calls `f` on every later change, on the Client's watcher thread (see "Blocking and
    /// Drop" for what a listener that blocks holds up); returns an id for
    /// [`remove_listener`](Self::remove_listener).
    pub fn on_change(&self, f: impl FnMut(LeadershipChange) + Send + 'static) -> u64 {
        self.inner.listeners.add(0, Box::new(f))
    }

    /// Removes a listener added by [`on_change`](Self::on_change); whether it was there.
    pub fn remove_listener(&self, id: u64) -> bool {
        self.inner.listeners.remove(id)
    }

    /// Stops taking part: our node is deleted, and with [`CloseMode::NotifyLeader`] a leader's
    /// listeners hear `Lost`. Waits for the latch's step in progress (it runs no user code).
    /// Idempotent; may be called from a listener.
    ///
    /// # Blocking
    /// Until the latch's step in progress ends, which it does promptly: a request in flight is
    /// cancelled, and our node's delete is handed to the background, which retries until it
    /// is gone. When all four shared threads are busy, the step that ends the latch first
    /// waits for one of them: at most the time another latch's step takes, each bounded by
    /// its Client's retry policy (steps are not started while their Client is disconnected).
    ///
    /// # Errors
    /// None today; the `Result` is kept for Curator's signature (its `close()` throws).
    pub fn close(&self) -> Result<()> {
        self.inner.candidate.close();
        self.inner.candidate.wait_at_rest(Deadline::NEVER);
        Ok(())
    }
}

impl Drop for LeaderLatch {
    /// Closes, waiting at most 1 s (or the Client's operation timeout, if shorter) for the
    /// latch to be done; our node's delete goes to the background, and the Client's session
    /// close takes it with it when the latch held the last handle.
    fn drop(&mut self) {
        close_on_drop(&self.inner);
    }
}

impl std::fmt::Debug for LeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.candidate.fmt_as("LeaderLatch", f)
    }
}

impl Inner {
    fn tell(&self, change: LeadershipChange) {
        tracing::info!("{}: {change:?}", self.candidate.internals.path);
        self.channels.lock().retain(|tx| tx.send(change).is_ok());
        let listeners = self.listeners.clone();
        self.candidate
            .client
            .on_watcher_thread(move || listeners.call(u64::MAX, change));
    }
}

impl Recipe for Inner {
    type Own = ();

    fn candidate(&self) -> &Candidate<()> {
        &self.candidate
    }

    /// A term begins; it ends on close, on the keeper's report or on the look at the lease,
    /// and then a step-down is queued.
    fn granted(self: &Arc<Self>, acquired: Acquired) {
        let (term, state) = self.candidate.begin(acquired);
        // Told under the lock: a channel opened once `await_leadership` returned does not
        // hear this term's Gained.
        if !term.is_over() {
            self.tell(LeadershipChange::Gained {
                epoch: term.epoch(),
            });
        }
        drop(state);
        self.candidate.changed.notify_all();
        let (latch, ended) = (Arc::downgrade(self), Arc::downgrade(&term));
        term.on_end(move || {
            if let Some(latch) = latch.upgrade() {
                pool::spawn(move || latch.step_down(&ended));
            }
        });
    }
}

impl Inner {
    /// The term is over: listeners hear `Lost` (on close, only with
    /// [`CloseMode::NotifyLeader`]), our node goes, and unless closed a new node queues.
    fn step_down(self: &Arc<Self>, ended: &Weak<Term>) {
        let Some(term) = ended.upgrade() else {
            return;
        };
        let current = self.candidate.state.lock().term.clone();
        if !current.is_some_and(|t| Arc::ptr_eq(&t, &term)) {
            return;
        }
        // Told before the term is forgotten, so that `close` returns after it.
        if !self.candidate.is_closed() || self.close_mode == CloseMode::NotifyLeader {
            self.tell(LeadershipChange::Lost);
        }
        self.candidate.end(&term);
        take_part(self);
    }
}
