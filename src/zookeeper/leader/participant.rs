//! Taking part in an election, as both leader recipes do: the settings their builders collect,
//! the lock our node queues on, the recipe's thread and current term, and the participants as
//! read from the server.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::term::Term;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::zookeeper::client::{AclProvider, Client, ErrorPolicy, RecipeAcl};
use crate::zookeeper::locks::{Acquired, Leases, LockInternals, Release, StandardDriver};
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
            internals,
            id,
            state: Mutex::new(State {
                started: false,
                term: None,
                own,
            }),
            changed: Condvar::new(),
            closed: AtomicBool::new(false),
            thread: Mutex::new(None),
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

/// A built leader recipe's side of the election: our settings and lock, the thread that takes
/// part, and the current term.
pub(super) struct Candidate<X> {
    pub(super) client: Client,
    pub(super) internals: LockInternals<Client>,
    pub(super) id: String,
    pub(super) policy: ErrorPolicy,
    pub(super) state: Mutex<State<X>>,
    /// Notified when a term begins or ends, on close, and by the recipe.
    pub(super) changed: Condvar,
    closed: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

pub(super) struct State<X> {
    pub(super) started: bool,
    pub(super) term: Option<Arc<Term>>,
    pub(super) own: X,
}

impl<X> State<X> {
    /// Whether a term is on and not over (its health computed now).
    pub(super) fn leads(&self) -> bool {
        self.term.as_ref().is_some_and(|t| !t.is_over())
    }
}

impl<X> Candidate<X> {
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Starts the recipe's thread (`zklock-<recipe>`) running `run`; once, and not after close.
    pub(super) fn start(&self, recipe: &str, run: impl FnOnce() + Send + 'static) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        {
            let mut state = self.state.lock();
            if state.started {
                return Err(Error::invalid(format!("the {recipe} was started already")));
            }
            state.started = true;
        }
        let name = format!("zklock-{recipe}");
        let handle = thread::Builder::new()
            .name(name.clone())
            .spawn(run)
            .map_err(|e| Error::thread_start(&name, &e))?;
        *self.thread.lock() = Some(handle);
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

    /// Waits for the recipe's thread to end, unless called on it.
    pub(super) fn join(&self) {
        let handle = self.thread.lock().take();
        if let Some(handle) = handle {
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    /// One attempt to lead: our node's grant, or `None` when cancelled by close or after a
    /// failure (logged; `failed` runs, then a `pause` cut short by close, after which the pause
    /// doubles up to 2 s; a grant resets it).
    pub(super) fn attempt(
        &self,
        pause: &mut Duration,
        failed: impl FnOnce(&mut State<X>),
    ) -> Option<Acquired> {
        match self.internals.attempt_lock(Deadline::NEVER) {
            Ok(Some(acquired)) => {
                *pause = Duration::from_millis(100);
                Some(acquired)
            }
            Ok(None) | Err(Error::Cancelled) => None,
            // The Client is closed: nothing can be led through it any more. The participant
            // closes too, so its thread ends and its waiters hear `Closed`.
            Err(Error::Closed) => {
                self.close();
                None
            }
            Err(e) => {
                tracing::warn!("{}: taking part failed: {e}", self.internals.path);
                let mut state = self.state.lock();
                failed(&mut state);
                if !self.is_closed() {
                    self.changed.wait_for(&mut state, *pause);
                }
                *pause = (*pause * 2).min(Duration::from_secs(2));
                None
            }
        }
    }

    /// Begins and records the term of a grant (over at once if we are closed); the state is
    /// returned still locked.
    pub(super) fn begin(
        &self,
        acquired: Acquired,
        on_end: impl Fn() + Send + Sync + 'static,
    ) -> (Arc<Term>, MutexGuard<'_, State<X>>) {
        let term = Arc::new(Term::begin(&self.client, acquired, self.policy, on_end));
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
