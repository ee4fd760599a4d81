//! LeaderSelector: Curator's selector. It queues on the election's mutex
//! (`<path>/_c_<uuid>-lock-<seq10>`, data = id) without a thread of its own, as a latch does,
//! and runs the user's closure on a thread of the term's own while it leads; the closure's
//! return ends the term. `elect` is the same term on the caller's thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

use super::participant::{close_on_drop, election, take_part, Candidate, Recipe, Settings};
use super::term::Term;
use super::Participant;
use crate::core::channel::Receiver;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::zookeeper::client::{AclProvider, Client, ErrorPolicy};
use crate::zookeeper::locks::{Acquired, LockInternals, Release};

/// Curator's lock node name for mutexes and leader selectors.
const LOCK_NAME: &str = "lock-";

/// The leader's handle on its term, passed to the closure that runs while it leads.
///
/// Rust has no thread interrupt: a term ends *cooperatively*. When leadership is interrupted
/// ([`LeaderSelector::interrupt_leadership`], [`LeaderSelector::close`]) or the node's health
/// breaks the [`ErrorPolicy`] (`Suspended` under `Standard`, `Lost` always), the handle is
/// cancelled, and the closure is expected to notice — poll
/// [`is_cancelled`](Self::is_cancelled) between steps, wait with
/// [`wait_cancelled`](Self::wait_cancelled), or receive from [`cancelled`](Self::cancelled) —
/// and return. Until it returns the selector still holds the node, so no one else leads; but a
/// closure that goes on writing after cancellation writes without leadership: check before each
/// write and pass [`fencing_token`](Self::fencing_token) to the resource.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// zklock::zookeeper::elect(&client, "/election", "worker-1", |leadership| {
///     while !leadership.wait_cancelled(Duration::from_secs(1)) {
///         println!("leading in epoch {}", leadership.fencing_token());
///     }
/// })?;
/// # Ok(()) }
/// ```
pub struct Leadership {
    term: Arc<Term>,
    id: String,
}

impl Leadership {
    /// Whether the term is over: interrupted, closed, or the node's health (computed now)
    /// breaks the error policy.
    pub fn is_cancelled(&self) -> bool {
        self.term.is_over()
    }

    /// Waits up to `timeout` for the term to end; whether it has.
    pub fn wait_cancelled(&self, timeout: Duration) -> bool {
        self.term.wait_over(Some(timeout))
    }

    /// A channel that receives `()` once the term is over.
    pub fn cancelled(&self) -> Receiver<()> {
        Receiver::new(self.term.over_channel())
    }

    /// The term's epoch: the czxid of our node, rising strictly from term to term on the path.
    pub fn fencing_token(&self) -> u64 {
        self.term.epoch()
    }

    /// Our node's health, computed now (see [`LockHealth`]).
    pub fn health(&self) -> LockHealth {
        self.term.health()
    }

    /// Our node's path.
    pub fn node(&self) -> &str {
        self.term.node()
    }

    /// Our participant id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("node", &self.term.node())
            .field("epoch", &self.term.epoch())
            .finish_non_exhaustive()
    }
}

type Task = Box<dyn FnMut(&Leadership) -> Result<()> + Send>;

/// Curator's `LeaderSelector`: participants queue on the election path's mutex, and the one
/// that holds it leads by running the closure given to [`build`](LeaderSelectorBuilder::build).
/// Returning from the closure gives leadership up. Java `LeaderSelector`s and
/// `InterProcessMutex`es on the same path queue in the same line.
///
/// # Threads
/// A selector has a thread only while its closure runs: each term starts a `zklock-selector`
/// thread that runs the closure and ends with the term, so two terms of one selector may run
/// on different threads (thread-locals do not carry over). While it waits for its turn, it
/// has none: its steps run on the `zklock-elect` threads that every waiting selector and
/// [`LeaderLatch`](crate::LeaderLatch) of the process share (see its "Threads").
///
/// # Requeueing
/// After a term the selector takes part again only if [`auto_requeue`](
/// LeaderSelectorBuilder::auto_requeue) is set or [`requeue`](Self::requeue) is called. A
/// closure that returns an error or panics ends its term like a return (the panic is caught
/// and logged).
///
/// # Cancellation
/// See [`Leadership`]: interruption, close and a connection problem (by the
/// [`ErrorPolicy`]) cancel the handle, and the closure must return.
///
/// # Blocking and Drop
/// `start`, `requeue`, `interrupt_leadership` and `close` return at once; after `close` the
/// node goes as soon as the closure (if running) returns. Dropping the selector closes it and
/// waits at most 1 s (or the Client's operation timeout, if shorter) for the closure to return.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use zklock::LeaderSelector;
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let selector = LeaderSelector::builder(&client, "/services/billing/leader")
///     .id("billing-1")
///     .auto_requeue(true)
///     .build(|leadership| {
///         // Lead for a while, then let someone else.
///         leadership.wait_cancelled(Duration::from_secs(10));
///         Ok(())
///     })?;
/// selector.start()?;
/// # Ok(()) }
/// ```
pub struct LeaderSelector {
    inner: Arc<Inner>,
}

/// Configures a [`LeaderSelector`].
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let selector = zklock::LeaderSelector::builder(&client, "/election")
///     .id("worker-7")
///     .auto_requeue(true)
///     .error_policy(zklock::ErrorPolicy::SessionOnly)
///     .build(|_leadership| Ok(()))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderSelectorBuilder {
    settings: Settings,
    auto_requeue: bool,
}

struct Inner {
    candidate: Candidate<Queue>,
    auto_requeue: bool,
    task: Mutex<Task>,
}

/// The selector's part of the state.
struct Queue {
    /// Take part again once the current turn is over (`requeue` while waiting or leading).
    queued: bool,
}

impl LeaderSelectorBuilder {
    /// The participant id, written into our node; default: host name and process id.
    pub fn id(mut self, id: &str) -> Self {
        self.settings.id(id);
        self
    }

    /// Take part again after every term (Curator's `autoRequeue()`); default off.
    pub fn auto_requeue(mut self, yes: bool) -> Self {
        self.auto_requeue = yes;
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

    /// When leadership is given up because of the connection; default: the Client's.
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.settings.error_policy(policy);
        self
    }

    /// The selector, running `lead` while it leads; not yet taking part: call
    /// [`LeaderSelector::start`].
    pub fn build(
        self,
        lead: impl FnMut(&Leadership) -> Result<()> + Send + 'static,
    ) -> Result<LeaderSelector> {
        Ok(LeaderSelector {
            inner: Arc::new(Inner {
                candidate: self
                    .settings
                    .build(LOCK_NAME, true, Queue { queued: true })?,
                auto_requeue: self.auto_requeue,
                task: Mutex::new(Box::new(lead)),
            }),
        })
    }
}

impl LeaderSelector {
    /// A selector on `path` with the default id, no auto-requeue and the Client's error policy.
    pub fn new(
        client: &Client,
        path: &str,
        lead: impl FnMut(&Leadership) -> Result<()> + Send + 'static,
    ) -> Result<LeaderSelector> {
        Self::builder(client, path).build(lead)
    }

    /// Configures a selector on `path`.
    pub fn builder(client: &Client, path: &str) -> LeaderSelectorBuilder {
        LeaderSelectorBuilder {
            settings: Settings::new(client, path),
            auto_requeue: false,
        }
    }

    /// Starts taking part; returns at once.
    pub fn start(&self) -> Result<()> {
        self.inner.candidate.start("selector")?;
        self.inner.candidate.state.lock().own.queued = false;
        take_part(&self.inner);
        Ok(())
    }

    /// Takes part once more after the current turn (Curator's `requeue()`); whether it was not
    /// queued already. Fails before `start` and after `close`.
    pub fn requeue(&self) -> Result<bool> {
        let candidate = &self.inner.candidate;
        if candidate.is_closed() {
            return Err(Error::Closed);
        }
        let mut state = candidate.state.lock();
        if !state.started {
            return Err(Error::invalid("the selector was not started"));
        }
        if state.idle() {
            drop(state);
            take_part(&self.inner);
            return Ok(true);
        }
        let fresh = !state.own.queued;
        state.own.queued = true;
        Ok(fresh)
    }

    /// Cancels the current term's [`Leadership`]: the closure is expected to return.
    pub fn interrupt_leadership(&self) {
        let term = self.inner.candidate.state.lock().term.clone();
        if let Some(term) = term {
            term.end();
        }
    }

    /// Whether we lead now: a term is on and not cancelled.
    pub fn has_leadership(&self) -> bool {
        self.inner.candidate.state.lock().leads()
    }

    /// The participant that leads: the holder of the election's mutex (read from the server).
    ///
    /// # Blocking and errors
    /// As [`participants`](Self::participants).
    pub fn leader(&self) -> Result<Option<Participant>> {
        self.inner.candidate.leader()
    }

    /// Every participant in queue order, the leader first (read from the server).
    ///
    /// # Blocking
    /// A listing and a read per participant, each bounded by the operation timeout.
    ///
    /// # Errors
    /// A connection error if the server cannot be reached in time.
    pub fn participants(&self) -> Result<Vec<Participant>> {
        self.inner.candidate.participants()
    }

    /// This selector's participant id.
    pub fn id(&self) -> &str {
        &self.inner.candidate.id
    }

    /// Stops taking part: a waiting turn ends at once, a running term is cancelled, and our node
    /// goes when the closure returns. Returns at once; idempotent.
    pub fn close(&self) {
        self.inner.candidate.close();
    }

    /// [`close`](Self::close), then waits up to `timeout` for the selector to be done (the
    /// closure to return and our node's delete to be handed to the background); whether it is.
    ///
    /// # Blocking
    /// At most `timeout`; a closure that ignores its cancellation keeps its thread (and the
    /// node) until it returns, and `false` says so.
    pub fn close_timeout(&self, timeout: Duration) -> bool {
        let candidate = &self.inner.candidate;
        candidate.close();
        candidate.wait_at_rest(Deadline::after(timeout))
    }
}

impl Drop for LeaderSelector {
    /// Closes, waiting at most 1 s (or the Client's operation timeout, if shorter) for the
    /// closure to return and the selector to be done (as [`close_timeout`](Self::close_timeout)
    /// with that bound); a closure that ignores its cancellation keeps its thread and the node
    /// past the drop.
    fn drop(&mut self) {
        close_on_drop(&self.inner);
    }
}

impl std::fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.candidate.fmt_as("LeaderSelector", f)
    }
}

impl Recipe for Inner {
    type Own = Queue;

    fn candidate(&self) -> &Candidate<Queue> {
        &self.candidate
    }

    /// A term begins, on a thread of its own that runs the closure.
    fn granted(self: &Arc<Self>, acquired: Acquired) {
        let (term, state) = self.candidate.begin(acquired);
        drop(state);
        self.candidate.changed.notify_all();
        let inner = self.clone();
        let running = term.clone();
        let started = thread::Builder::new()
            .name("zklock-selector".into())
            .spawn(move || inner.lead(&running));
        if let Err(e) = started {
            tracing::error!(
                "{}: could not start a thread for the term: {e}",
                self.candidate.internals.path
            );
            self.candidate.end(&term);
            self.candidate.state.lock().own.queued = true;
            self.next_turn();
        }
    }
}

impl Inner {
    /// The term's thread: runs the closure unless the term is already over, then ends the term
    /// and queues again if requeued.
    fn lead(self: &Arc<Self>, term: &Arc<Term>) {
        let leadership = Leadership {
            term: term.clone(),
            id: self.candidate.id.clone(),
        };
        if !term.is_over() {
            let mut task = self.task.lock();
            run_term(&self.candidate.internals.path, &leadership, |l| (*task)(l));
        }
        self.candidate.end(term);
        self.next_turn();
    }

    /// After a term: takes part again with `auto_requeue` or when requeued meanwhile.
    fn next_turn(self: &Arc<Self>) {
        let again = std::mem::take(&mut self.candidate.state.lock().own.queued);
        if again || self.auto_requeue {
            take_part(self);
        }
    }
}

/// Runs a leader's closure, catching a panic (logged; the term ends as on a return).
fn run_term<T>(path: &str, leadership: &Leadership, f: impl FnOnce(&Leadership) -> T) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(|| f(leadership))) {
        Ok(out) => Some(out),
        Err(_) => {
            tracing::error!("{path}: the leader's closure panicked; its term is over");
            None
        }
    }
}

/// kazoo's `Election(path, id).run(f)`: blocks until this caller leads the election on `path`
/// (queued with [`LeaderSelector`]s and Curator selectors there), runs `f` on the calling
/// thread, and gives leadership up when `f` returns; `f`'s result.
///
/// Blocks like [`Lock::acquire`](crate::Lock::acquire) until elected (and, like it, fails at
/// once with [`Error::OnWatcherThread`] from a listener); the term's [`Leadership`] is
/// cancelled as a selector's is (by the Client's [`ErrorPolicy`]). However `f` ends, a panic
/// included, leadership is given up: our node is deleted before this returns (within 1 s, or
/// the Client's operation timeout if shorter; the rest in the background).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let epoch = zklock::zookeeper::elect(&client, "/jobs/nightly", "host-a", |leadership| {
///     // run the nightly job once, as the only leader
///     leadership.fencing_token()
/// })?;
/// # Ok(()) }
/// ```
pub fn elect<T>(
    client: &Client,
    path: &str,
    id: &str,
    f: impl FnOnce(&Leadership) -> T,
) -> Result<T> {
    let internals = election(client, path, LOCK_NAME, id)?;
    let acquired = internals
        .attempt_lock(Deadline::NEVER)?
        .ok_or(Error::Timeout)?;
    let term = Arc::new(Term::begin(client, acquired, client.error_policy()));
    let leadership = Leadership {
        term: term.clone(),
        id: id.to_owned(),
    };
    // Deletes our node however `f` ends, a panic included: in this thread within a drop's
    // bound, so that the next leader can take over as this returns; the rest in the background.
    struct StepDown<'a>(&'a LockInternals<Client>, &'a Term, std::time::Duration);
    impl Drop for StepDown<'_> {
        fn drop(&mut self) {
            self.1.end();
            let by = crate::core::deadline::instant_after(self.2);
            let _ = self
                .0
                .release(self.1.node(), self.1.session(), Release::Within(Some(by)));
        }
    }
    let _step_down = StepDown(&internals, &term, client.drop_bound());
    Ok(f(&leadership))
}
