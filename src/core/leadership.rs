//! What a leader election's listeners hear, and a latch's term and listeners, on every
//! backend.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};

use super::channel::Receiver;
use super::error::{Error, Result};
use super::health::LockHealth;
use super::lease::LocalLease;
use super::listeners::{on_listener_thread, Dispatch, Listeners};

/// What a latch's listeners hear.
///
/// # Example
/// ```
/// use zklock::LeadershipChange;
///
/// fn follow(changes: zklock::Receiver<LeadershipChange>) {
///     for change in changes.iter() {
///         match change {
///             LeadershipChange::Gained { epoch } => println!("leading, epoch {epoch}"),
///             LeadershipChange::Lost => println!("not leading any more"),
///             _ => {}
///         }
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeadershipChange {
    /// We lead, in the term with this epoch (a fencing token: it rises with every term of the
    /// election, so a resource can refuse a deposed leader's late writes).
    Gained {
        /// The term's fencing token.
        epoch: u64,
    },
    /// We do not lead any more.
    Lost,
}

/// One latch's side of an election, on every backend: whether a term is on, its epoch and its
/// hold's lease, and who hears of changes. The backend queues for the lock and calls
/// [`gained`](Election::gained) when it holds; the term ends when the hold is lost or the latch
/// closes, and the backend lets go of the hold once [`term_ended`](Election::term_ended) says
/// so.
pub(crate) struct Election {
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
    /// The term ended (lost, or the latch closed) and the backend has not let go of it yet.
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

impl Election {
    pub(crate) fn new(dispatch: Dispatch) -> Election {
        Election {
            state: Mutex::default(),
            changed: Condvar::new(),
            channels: Mutex::default(),
            listeners: Arc::default(),
            dispatch,
        }
    }

    /// A term is on and its hold's health, computed now, is `Held`.
    pub(crate) fn leads(&self) -> bool {
        self.state.lock().leads()
    }

    /// The current term's health (`None` between terms; `Lost` once closed).
    pub(crate) fn health(&self) -> Option<LockHealth> {
        let state = self.state.lock();
        let term = state.term.as_ref()?;
        Some(if state.closed {
            LockHealth::Lost
        } else {
            term.lease.health()
        })
    }

    pub(crate) fn epoch(&self) -> Option<u64> {
        self.state.lock().term.as_ref().map(|t| t.epoch)
    }

    /// Waits until we lead (`true`), `until` passes (whether we lead), or the latch or its
    /// Client (`client_closed`) closes ([`Error::Closed`]).
    pub(crate) fn await_until(
        &self,
        until: Option<Instant>,
        client_closed: impl Fn() -> bool,
    ) -> Result<bool> {
        if on_listener_thread() && until.is_none_or(|at| at > Instant::now()) {
            return Err(Error::OnWatcherThread);
        }
        let mut state = self.state.lock();
        loop {
            if state.closed || client_closed() {
                return Err(Error::Closed);
            }
            if state.leads() {
                return Ok(true);
            }
            // Woken by every change; a term whose health slips is looked at again soon.
            let soon = Instant::now() + Duration::from_millis(50);
            let at = until.map_or(soon, |u| u.min(soon));
            let timed_out = self.changed.wait_until(&mut state, at).timed_out();
            if timed_out && until.is_some_and(|u| Instant::now() >= u) {
                return Ok(state.leads());
            }
        }
    }

    pub(crate) fn changes(&self) -> Receiver<LeadershipChange> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.channels.lock().push(tx);
        Receiver::new(rx)
    }

    pub(crate) fn on_change(&self, f: impl FnMut(LeadershipChange) + Send + 'static) -> u64 {
        self.listeners.add(0, Box::new(f))
    }

    pub(crate) fn remove_listener(&self, id: u64) -> bool {
        self.listeners.remove(id)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Whether the current term ended (lost or closed) and the backend should let it go.
    pub(crate) fn term_ended(&self) -> bool {
        self.state.lock().ended
    }

    /// The backend let go of the ended term.
    pub(crate) fn let_go(&self) {
        self.state.lock().ended = false;
    }

    /// A term begins; returns how the backend reports its hold's health (`Lost` ends the term).
    pub(crate) fn gained(
        self: &Arc<Self>,
        epoch: u64,
        lease: Arc<LocalLease>,
    ) -> Arc<dyn Fn(LockHealth) + Send + Sync> {
        {
            // Told under the state's lock: whoever sees the term (and subscribes then) is not
            // told of it again.
            let mut state = self.state.lock();
            state.term = Some(Term { epoch, lease });
            state.ended = false;
            self.tell(LeadershipChange::Gained { epoch });
        }
        let election = Arc::downgrade(self);
        Arc::new(move |health| {
            if health == LockHealth::Lost {
                if let Some(election) = election.upgrade() {
                    election.end_term();
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
        let mut state = self.state.lock();
        if state.term.take().is_none() {
            return;
        }
        state.ended = true;
        self.tell(LeadershipChange::Lost);
    }

    /// Called with the state locked; sends without blocking.
    fn tell(&self, change: LeadershipChange) {
        self.changed.notify_all();
        self.channels.lock().retain(|tx| tx.send(change).is_ok());
        let listeners = self.listeners.clone();
        (self.dispatch)(Box::new(move || listeners.call(u64::MAX, change)));
    }
}

/// A latch's questions and listeners (`has_leadership`, `health`, `epoch`,
/// `await_leadership[_timeout]`, `changes`, `on_change`, `remove_listener`) for a latch type
/// whose [`Election`] is at `self.$election` and whose Client is `self.client`.
macro_rules! forward_election_api {
    ($ty:ty, $($election:ident).+) => {
        impl $ty {
            /// Whether we lead now: a term is on and its hold's health, computed now, is
            /// `Held`.
            pub fn has_leadership(&self) -> bool {
                self.$($election).+.leads()
            }

            /// The current term's health, computed now (`None` between terms): `Held` while
            /// the leader's hold is renewed, `Suspended` once a renewal is late, `Lost` at the
            /// end.
            pub fn health(&self) -> Option<$crate::LockHealth> {
                self.$($election).+.health()
            }

            /// The current term's epoch (fencing token), while a term is on.
            pub fn epoch(&self) -> Option<u64> {
                self.$($election).+.epoch()
            }

            /// Blocks until we lead.
            ///
            /// # Errors
            /// [`Error::Closed`](crate::Error::Closed) if the latch or its Client is closed
            /// first; [`Error::OnWatcherThread`](crate::Error::OnWatcherThread) from a
            /// listener (it would wait for itself).
            pub fn await_leadership(&self) -> $crate::Result<()> {
                let inner = self.client.inner();
                self.$($election).+.await_until(None, || inner.closed()).map(|_| ())
            }

            /// Waits at most `timeout` for leadership: whether we lead.
            ///
            /// # Errors
            /// As [`await_leadership`](Self::await_leadership).
            #[must_use = "`false` means we do NOT lead"]
            pub fn await_leadership_timeout(
                &self,
                timeout: std::time::Duration,
            ) -> $crate::Result<bool> {
                let inner = self.client.inner();
                let until = std::time::Instant::now().checked_add(timeout);
                self.$($election).+.await_until(until, || inner.closed())
            }

            /// A channel of every later change.
            pub fn changes(&self) -> $crate::Receiver<$crate::LeadershipChange> {
                self.$($election).+.changes()
            }

            /// Calls `f` on every later change, on the Client's events thread (it must not
            /// block); returns an id for [`remove_listener`](Self::remove_listener).
            pub fn on_change(
                &self,
                f: impl FnMut($crate::LeadershipChange) + Send + 'static,
            ) -> u64 {
                self.$($election).+.on_change(f)
            }

            /// Removes a listener added by [`on_change`](Self::on_change); whether it was
            /// there.
            pub fn remove_listener(&self, id: u64) -> bool {
                self.$($election).+.remove_listener(id)
            }
        }
    };
}
pub(crate) use forward_election_api;
