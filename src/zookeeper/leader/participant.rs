//! Taking part in an election, as both leader recipes do: the settings their builders collect,
//! the lock our node queues on, the attempt that waits for our turn without a thread of its own
//! (resumed on the shared `zklock-elect` threads of `pool.rs` whenever its waiter is woken), the
//! current term, and the participants as read from the server.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::pool;
use super::term::Term;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::zookeeper::client::{AclProvider, Client, ErrorPolicy, RecipeAcl};
use crate::zookeeper::locks::{
    Acquired, Leases, LockInternals, Progress, Release, Resumable, StandardDriver,
};
use crate::zookeeper::path;

/// A participant in an election, as read from its node (Curator's `Participant`).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let latch = zklock::LeaderLatch::builder(&client, "/election").id("node-a").build()?;
/// latch.start()?;
/// for p in latch.participants()? {
///     println!("{} {} {}", p.id, p.node, if p.is_leader { "leads" } else { "waits" });
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// The participant's id: its node's data as UTF-8 (lossy).
    pub id: String,
    /// The full path of its node.
    pub node: String,
    /// Whether it is the leader: the first in sequence order.
    pub is_leader: bool,
}

/// What a leader recipe's builder collects.
#[derive(Debug)]
pub(super) struct Settings {
    client: Client,
    path: String,
    id: Option<String>,
    policy: Option<ErrorPolicy>,
    acl: RecipeAcl,
}

impl Settings {
    pub(super) fn new(client: &Client, path: &str) -> Settings {
        Settings {
            client: client.clone(),
            path: path.to_owned(),
            id: None,
            policy: None,
            acl: RecipeAcl::default(),
        }
    }

    pub(super) fn id(&mut self, id: &str) {
        self.id = Some(id.to_owned());
    }

    pub(super) fn acl_provider(&mut self, provider: impl AclProvider) {
        self.acl = RecipeAcl(Some(Arc::new(provider)));
    }

    pub(super) fn error_policy(&mut self, policy: ErrorPolicy) {
        self.policy = Some(policy);
    }

    /// Our side of the election, queueing nodes named `lock_name`; `own` is the recipe's part
    /// of the state.
    pub(super) fn build<X>(
        self,
        lock_name: &str,
        holder_marks: bool,
        own: X,
    ) -> Result<Candidate<X>> {
        let id = self.id.unwrap_or_else(default_id);
        let mut internals = election(&self.client, &self.path, lock_name, &id)?;
        if !holder_marks {
            internals = internals.without_holder_marks();
        }
        if let Some(provider) = self.acl.0 {
            internals.set_acl_provider(provider);
        }
        Ok(Candidate {
            policy: self.policy.unwrap_or(self.client.error_policy()),
            client: self.client,
            internals: Arc::new(internals),
            id,
            state: Mutex::new(State {
                started: false,
                term: None,
                attempt: None,
                resuming: false,
                again: false,
                scheduled: false,
                pausing: false,
                pause: FIRST_PAUSE,
                own,
            }),
            changed: Condvar::new(),
            closed: AtomicBool::new(false),
        })
    }
}

/// The lock an election on `path` queues on, with nodes named `lock_name` whose data is `id`.
pub(super) fn election(
    client: &Client,
    path: &str,
    lock_name: &str,
    id: &str,
) -> Result<LockInternals<Client>> {
    check_path(path)?;
    let internals = LockInternals::new(
        client.clone(),
        path,
        lock_name,
        Arc::new(StandardDriver),
        Leases::Fixed(1),
    )?;
    internals.set_node_data(Some(id.as_bytes().to_vec()))?;
    Ok(internals)
}

/// Refuses an election path before any I/O.
fn check_path(election: &str) -> Result<()> {
    path::validate(election, false)?;
    if election == "/" {
        return Err(Error::InvalidPath {
            path: "/".into(),
            reason: "an election needs its own node",
        });
    }
    Ok(())
}

/// The participant id used when none is given: this host's name and the process id.
fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!("{host}:{}", std::process::id())
}

/// The pause after a failed attempt; it doubles up to [`LAST_PAUSE`], and a grant resets it.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LAST_PAUSE: Duration = Duration::from_secs(2);

/// A built leader recipe's side of the election: our settings and lock, the attempt in
/// progress, and the current term.
pub(super) struct Candidate<X> {
    pub(super) client: Client,
    pub(super) internals: Arc<LockInternals<Client>>,
    pub(super) id: String,
    pub(super) policy: ErrorPolicy,
    pub(super) state: Mutex<State<X>>,
    /// Notified when a term begins or ends, when an attempt ends, on close, and by the recipe.
    pub(super) changed: Condvar,
    closed: AtomicBool,
}

pub(super) struct State<X> {
    pub(super) started: bool,
    pub(super) term: Option<Arc<Term>>,
    /// Our attempt while it is parked; taken out while a `zklock-elect` thread resumes it.
    attempt: Option<Resumable<Client>>,
    /// A `zklock-elect` thread is resuming our attempt or handling its end.
    resuming: bool,
    /// Woken while resuming: resume once more.
    again: bool,
    /// A resume is queued on the pool.
    scheduled: bool,
    /// A failed attempt's pause is on; the next attempt starts when it ends.
    pausing: bool,
    pause: Duration,
    pub(super) own: X,
}

impl<X> State<X> {
    /// Whether a term is on and not over (its health computed now).
    pub(super) fn leads(&self) -> bool {
        self.term.as_ref().is_some_and(|t| !t.is_over())
    }

    /// Neither waiting for our turn nor leading: no attempt, no term, nothing running for us.
    pub(super) fn at_rest(&self) -> bool {
        self.attempt.is_none() && !self.resuming && self.term.is_none()
    }

    /// At rest and not pausing before the next attempt.
    pub(super) fn idle(&self) -> bool {
        self.at_rest() && !self.pausing
    }
}

/// A leader recipe, as the shared threads drive it: its candidate, and what it does with a
/// grant.
pub(super) trait Recipe: Send + Sync + Sized + 'static {
    type Own: Send;

    fn candidate(&self) -> &Candidate<Self::Own>;

    /// Our node was granted: begin the term (on a `zklock-elect` thread; must not block).
    fn granted(self: &Arc<Self>, acquired: Acquired);
}

/// Starts an attempt to lead, unless closed or one is on (or a term). The attempt captures
/// the lock's current cancel before the closed flag is read, so a `close` that comes later
/// cancels it.
pub(super) fn take_part<R: Recipe>(recipe: &Arc<R>) {
    let candidate = recipe.candidate();
    let weak = Arc::downgrade(recipe);
    let attempt = Resumable::new(
        candidate.internals.clone(),
        Arc::new(move || {
            if let Some(recipe) = weak.upgrade() {
                schedule(&recipe);
            }
        }),
    );
    {
        let mut state = candidate.state.lock();
        if candidate.is_closed() || state.attempt.is_some() || state.term.is_some() {
            return;
        }
        state.attempt = Some(attempt);
    }
    schedule(recipe);
}

/// A recipe's drop: closes, then waits at most the Client's drop bound (1 s, or the operation
/// timeout if shorter) until nothing runs for us and no job of the shared threads holds the
/// recipe any more. The recipe's Client handle then goes with the caller's: were a job still to
/// hold it as `main` ends, the user's last handle would not be the last one, and the session
/// (with our node, if its delete has not gone out) would outlive the process until it expires.
pub(super) fn close_on_drop<R: Recipe>(recipe: &Arc<R>) {
    let candidate = recipe.candidate();
    candidate.close();
    let deadline = Deadline::after(candidate.client.drop_bound());
    candidate.wait_at_rest(deadline);
    // The job that ended our term lets go of the recipe right after it said so.
    while Arc::strong_count(recipe) > 1 && !deadline.expired() {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Has a `zklock-elect` thread resume our attempt (once, however often it is woken).
fn schedule<R: Recipe>(recipe: &Arc<R>) {
    let mut state = recipe.candidate().state.lock();
    if state.resuming {
        state.again = true;
        return;
    }
    if std::mem::replace(&mut state.scheduled, true) {
        return;
    }
    drop(state);
    let recipe = recipe.clone();
    pool::spawn(move || resume(&recipe));
}

/// Resumes our attempt until it parks or ends, and handles its end: a grant begins a term; a
/// failure is logged and the next attempt starts after a pause (100 ms, doubling to 2 s); a
/// cancel (close) ends it; a closed Client closes us too.
fn resume<R: Recipe>(recipe: &Arc<R>) {
    let candidate = recipe.candidate();
    loop {
        let mut attempt = {
            let mut state = candidate.state.lock();
            state.scheduled = false;
            if state.resuming {
                state.again = true;
                return;
            }
            // Nothing can be done while the Client is disconnected: the attempt stays parked
            // (no thread held), and the next connection-state change wakes it. A close or a
            // closed Client runs it, to end it.
            if !candidate.is_closed()
                && !candidate.client.is_connected()
                && !candidate.client.is_closed()
            {
                return;
            }
            let Some(attempt) = state.attempt.take() else {
                return;
            };
            state.resuming = true;
            state.again = false;
            attempt
        };
        match attempt.resume() {
            Progress::Parked => {
                let mut state = candidate.state.lock();
                state.attempt = Some(attempt);
                state.resuming = false;
                if !std::mem::take(&mut state.again) {
                    return;
                }
            }
            Progress::Done(result) => {
                drop(attempt);
                candidate.ended(recipe, result);
                let mut state = candidate.state.lock();
                state.resuming = false;
                candidate.changed.notify_all();
                if !std::mem::take(&mut state.again) || state.attempt.is_none() {
                    return;
                }
            }
        }
    }
}

impl<X> Candidate<X> {
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Marks the recipe started, once, and not after close.
    pub(super) fn start(&self, recipe: &str) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let mut state = self.state.lock();
        if state.started {
            return Err(Error::invalid(format!("the {recipe} was started already")));
        }
        state.started = true;
        Ok(())
    }

    /// Closes, once: the attempt in progress ends, a term is over, and waiters wake.
    pub(super) fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.internals.cancel_waiters();
        let term = self.state.lock().term.clone();
        if let Some(term) = term {
            term.end();
        }
        self.changed.notify_all();
    }

    /// Waits until nothing runs for us (see [`State::at_rest`]), at most until `until`;
    /// whether nothing does. After `close` that comes promptly for a latch (its work is crate
    /// code, and our node's delete goes to the background); a selector's term waits for its
    /// closure to return.
    pub(super) fn wait_at_rest(&self, until: Deadline) -> bool {
        let mut state = self.state.lock();
        while !state.at_rest() {
            match until.instant() {
                Some(at) => {
                    if self.changed.wait_until(&mut state, at).timed_out() {
                        return state.at_rest();
                    }
                }
                None => self.changed.wait(&mut state),
            }
        }
        true
    }

    /// An attempt's end (see [`resume`]).
    fn ended<R: Recipe<Own = X>>(&self, recipe: &Arc<R>, result: Result<Acquired>) {
        match result {
            Ok(acquired) => {
                self.state.lock().pause = FIRST_PAUSE;
                recipe.granted(acquired);
            }
            Err(Error::Cancelled) => {}
            // The Client is closed: nothing can be led through it any more. The participant
            // closes too, so its waiters hear `Closed`.
            Err(Error::Closed) => self.close(),
            Err(e) => {
                tracing::warn!("{}: taking part failed: {e}", self.internals.path);
                let pause = {
                    let mut state = self.state.lock();
                    state.pausing = true;
                    let pause = state.pause;
                    state.pause = (pause * 2).min(LAST_PAUSE);
                    pause
                };
                let weak: Weak<R> = Arc::downgrade(recipe);
                pool::after(pause, move || {
                    if let Some(recipe) = weak.upgrade() {
                        recipe.candidate().state.lock().pausing = false;
                        recipe.candidate().changed.notify_all();
                        take_part(&recipe);
                    }
                });
            }
        }
    }

    /// Begins and records the term of a grant (over at once if we are closed); the state is
    /// returned still locked. Its lease is looked at on the shared timer.
    pub(super) fn begin(&self, acquired: Acquired) -> (Arc<Term>, MutexGuard<'_, State<X>>) {
        let term = Arc::new(Term::begin(&self.client, acquired, self.policy));
        pool::watch_lease(Arc::downgrade(&term));
        let mut state = self.state.lock();
        if self.is_closed() {
            term.end();
        }
        state.term = Some(term.clone());
        (term, state)
    }

    /// Ends `term`: it is forgotten and our node goes in the background.
    pub(super) fn end(&self, term: &Term) {
        term.end();
        self.state.lock().term = None;
        self.changed.notify_all();
        let _ = self
            .internals
            .release(term.node(), term.session(), Release::Background);
    }
    /// Every participant, the leader first. A node that goes while being read is left out.
    pub(super) fn participants(&self) -> Result<Vec<Participant>> {
        let nodes = self.internals.participant_nodes()?;
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            match self.client.data(&node) {
                Ok((data, _)) => out.push(Participant {
                    id: String::from_utf8_lossy(&data).into_owned(),
                    is_leader: out.is_empty(),
                    node,
                }),
                Err(Error::NoNode(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    pub(super) fn leader(&self) -> Result<Option<Participant>> {
        Ok(self.participants()?.into_iter().next())
    }

    /// The recipe's `Debug`: its path and id.
    pub(super) fn fmt_as(&self, recipe: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(recipe)
            .field("path", &self.internals.path)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}
