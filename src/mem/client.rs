//! [`MemClient`]: one session on an in-process store, and the controls a unit test uses to
//! stage what a server would do to it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::store::{next_id, Store};
use crate::core::connection::{ConnectionState, States};
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::lease::boot_clock;
use crate::core::listeners::{become_listener_thread, start_events_thread, Dispatch, Event};
use crate::core::options::Options;

/// The longest store or lock name, in bytes.
pub(crate) const MAX_NAME: usize = 1024;

/// A session on the in-process store `mem://NAME`: every Client made from the same name in
/// this process shares its locks (as Clients of one server do), Clients of different names
/// never do. The store lives while a Client of it does; cheap to clone (a clone is the same
/// session). Dropping the last handle (every clone, lock, lease and latch made from it) closes
/// it, as [`close`](Self::close) does.
///
/// No server, thread or I/O: a grant is a few hundred nanoseconds, and a test that makes a
/// hold go `Lost` runs in microseconds. Callbacks (health, connection states, leadership) run
/// on one events thread shared by every `mem://` Client of the process.
///
/// # Controls for tests
/// What a server or a network would do to a session, staged on purpose:
///
/// | call | what the session's holds and calls see |
/// |---|---|
/// | [`suspend_holds`](Self::suspend_holds) / [`suspend_hold`](Self::suspend_hold) | holds read `Suspended` (events fire); still held |
/// | [`restore_holds`](Self::restore_holds) / [`restore_hold`](Self::restore_hold) | `Suspended` holds read `Held` again |
/// | [`lose_holds`](Self::lose_holds) / [`lose_hold`](Self::lose_hold) | holds read `Lost` and are freed for others at once; a later release says [`Error::LockLost`] |
/// | [`freeze`](Self::freeze) / [`unfreeze`](Self::unfreeze) | every call waits for the thaw up to its bound, then fails with [`Error::ConnectionLoss`] |
/// | [`freeze_store`](Self::freeze_store), [`unfreeze_store`](Self::unfreeze_store), [`restart_store`](Self::restart_store) | the same for every Client of the store: a frozen server; a restart that kept no session |
///
/// The `*_holds` calls move the Client's [`state`](Self::state) as a connection would
/// (`Suspended`, `Reconnected`, `Lost` then `Reconnected` in a new session); the per-lock calls
/// and freezing leave it alone.
///
/// # Example
/// ```
/// use zklock::mem::{MemClient, MemMutex};
/// use zklock::{Error, LockHealth};
///
/// # fn main() -> zklock::Result<()> {
/// let client = MemClient::connect("client-doc")?;
/// let mutex = MemMutex::new(&client, "ledger")?;
/// mutex.acquire()?;
/// client.lose_holds(); // the session expired
/// assert_eq!(mutex.health(), Some(LockHealth::Lost));
/// assert_eq!(mutex.release(), Err(Error::LockLost));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemClient {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    id: u64,
    store: Arc<Store>,
    operation_timeout: Duration,
    session_timeout: Duration,
    closed: AtomicBool,
    states: States,
}

/// Options of a [`MemClient`], from [`MemClient::builder`].
///
/// # Example
/// ```
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::mem::MemClient::builder("builder-doc")
///     .operation_timeout(std::time::Duration::from_millis(5))
///     .connect()?;
/// assert_eq!(client.operation_timeout(), std::time::Duration::from_millis(5));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect`"]
pub struct MemClientBuilder {
    name: String,
    /// The shared options: a frozen Client's calls wait at most the operation timeout, the
    /// session timeout is the connection states' (no timer frees a `mem://` hold by itself),
    /// and with no connection the connect timeout only stands in for an unset operation
    /// timeout and the retry policy is not used.
    options: Options,
}

impl MemClient {
    /// A Client of the store `name` (1 to 1024 bytes of any text), with the default options.
    ///
    /// # Errors
    /// As [`MemClientBuilder::connect`].
    pub fn connect(name: &str) -> Result<MemClient> {
        MemClient::builder(name).connect()
    }

    /// A Client of a store of its own, which no other name reaches: for tests that run side
    /// by side in one process. Other Clients join it by its [`store_name`](Self::store_name).
    pub fn isolated() -> MemClient {
        let name = format!("#isolated-{}", next_id());
        MemClient::builder(&name)
            .connect()
            .unwrap_or_else(|_| unreachable!("a generated name is valid"))
    }

    /// Options for a Client of the store `name`: the operation timeout bounds each call on a
    /// frozen Client (see [`MemClient::freeze`]; default, as on every backend, the connect
    /// timeout, [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT)).
    pub fn builder(name: &str) -> MemClientBuilder {
        MemClientBuilder {
            name: name.to_owned(),
            options: Options::default(),
        }
    }

    /// The store's name (what follows `mem://`).
    pub fn store_name(&self) -> &str {
        self.inner.store.name()
    }

    /// This Client's id, unique in the process (what
    /// [`MemParticipant::client`](super::MemParticipant::client) names).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The bound of each call on a frozen Client.
    pub fn operation_timeout(&self) -> Duration {
        self.inner.operation_timeout
    }

    /// The session timeout it was given (kept for the URL factory's one set of options: no
    /// timer frees a `mem://` hold by itself; [`lose_holds`](Self::lose_holds) does).
    pub fn session_timeout(&self) -> Duration {
        self.inner.session_timeout
    }

    /// The connection state: `Connected` unless the controls moved it.
    pub fn state(&self) -> ConnectionState {
        self.inner.states.state()
    }

    /// Ends every wait of this Client with [`Error::Closed`] and frees every hold at once
    /// (they read `Lost`; latches stop); later calls fail with [`Error::Closed`]. Returns at
    /// once, frozen or not; idempotent.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Every hold of this Client reads `Suspended` (a lost connection: still held, validity
    /// unknown); health events fire, the state turns `Suspended`. Returns how many holds
    /// changed.
    pub fn suspend_holds(&self) -> usize {
        let n = self.inner.fault(LockHealth::Suspended, None);
        self.inner.states.change(ConnectionState::Suspended);
        n
    }

    /// Every `Suspended` hold of this Client reads `Held` again (the connection came back to
    /// the same session); the state turns `Reconnected`. Returns how many holds changed.
    pub fn restore_holds(&self) -> usize {
        let n = self.inner.fault(LockHealth::Held, None);
        if !self.state().is_connected() {
            self.inner.states.change(ConnectionState::Reconnected);
        }
        n
    }

    /// The session expired: every hold of this Client reads `Lost` and is freed for others at
    /// once (health events fire, latches' terms end); its releases will say
    /// [`Error::LockLost`]. The state turns `Lost`, then `Reconnected` (a new session: waits
    /// go on, later acquires work). Returns how many holds were lost.
    pub fn lose_holds(&self) -> usize {
        self.inner.states.change(ConnectionState::Lost);
        let n = self.inner.fault(LockHealth::Lost, None);
        self.inner.states.change(ConnectionState::Reconnected);
        n
    }

    /// As [`suspend_holds`](Self::suspend_holds), for this Client's holds of the lock (or
    /// semaphore, read-write lock, election) named `lock` only; the state stays.
    pub fn suspend_hold(&self, lock: &str) -> usize {
        self.inner.fault(LockHealth::Suspended, Some(lock))
    }

    /// As [`restore_holds`](Self::restore_holds), for the holds of `lock` only.
    pub fn restore_hold(&self, lock: &str) -> usize {
        self.inner.fault(LockHealth::Held, Some(lock))
    }

    /// As [`lose_holds`](Self::lose_holds), for the holds of `lock` only (as a lock node
    /// deleted by someone else); the state stays.
    pub fn lose_hold(&self, lock: &str) -> usize {
        self.inner.fault(LockHealth::Lost, Some(lock))
    }

    /// Freezes this Client, as a network that stopped answering: every later call (acquire,
    /// release, participants) waits for [`unfreeze`](Self::unfreeze) up to its bound — the
    /// operation timeout, a release's own timeout, a guard's drop bound — then fails with
    /// [`Error::ConnectionLoss`]; a release that failed so is done at the thaw, as the
    /// background retry of a server backend. Holds keep their health; waits already parked
    /// go on; [`close`](Self::close) still returns at once.
    pub fn freeze(&self) {
        self.inner.store.freeze(Some(self.inner.id), true);
    }

    /// Ends [`freeze`](Self::freeze): calls waiting at the gate go on.
    pub fn unfreeze(&self) {
        self.inner.store.freeze(Some(self.inner.id), false);
    }

    /// Whether this Client (or its store) is frozen.
    pub fn is_frozen(&self) -> bool {
        self.inner.store.frozen(self.inner.id)
    }

    /// Freezes every Client of this store, as a server stopped with SIGSTOP.
    pub fn freeze_store(&self) {
        self.inner.store.freeze(None, true);
    }

    /// Ends [`freeze_store`](Self::freeze_store).
    pub fn unfreeze_store(&self) {
        self.inner.store.freeze(None, false);
    }

    /// Every hold of every Client of this store reads `Lost` and is freed, as a server that
    /// restarted without keeping its sessions; waits go on. Returns how many holds were lost.
    pub fn restart_store(&self) -> usize {
        self.inner.store.fault(LockHealth::Lost, &|_, _| true)
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    pub(crate) fn inner_arc(&self) -> &Arc<Inner> {
        &self.inner
    }
}

crate::core::connection::forward_connection_api!(MemClient, inner.states);

impl std::fmt::Debug for MemClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemClient")
            .field("store", &self.inner.store.name())
            .field("id", &self.inner.id)
            .field("closed", &self.inner.closed())
            .finish_non_exhaustive()
    }
}

crate::core::options::connection_options!(MemClientBuilder);

impl MemClientBuilder {
    /// The Client, on the store of its name (made if the process has none).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name or one over 1024 bytes.
    pub fn connect(self) -> Result<MemClient> {
        check_name("store", &self.name)?;
        Ok(MemClient {
            inner: Arc::new(Inner {
                id: next_id(),
                store: Store::open(&self.name),
                operation_timeout: self.options.operation_timeout(),
                session_timeout: self.options.session_timeout(),
                closed: AtomicBool::new(false),
                states: States::new(
                    "mem",
                    self.options.session_timeout(),
                    boot_clock(),
                    dispatch(),
                ),
            }),
        })
    }
}

impl Inner {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The gate of a call: waits while frozen until `until` (`None`: one operation timeout
    /// from now).
    pub(crate) fn pass(&self, until: Option<Instant>) -> Result<()> {
        if self.closed() {
            return Err(Error::Closed);
        }
        let until =
            until.unwrap_or_else(|| crate::core::deadline::instant_after(self.operation_timeout));
        self.store.pass(self.id, until, &|| self.closed())
    }

    /// How long a guard's drop waits for its release on a frozen Client.
    pub(crate) fn drop_bound(&self) -> Duration {
        self.operation_timeout.min(crate::core::lock::DROP_BOUND)
    }

    fn fault(&self, health: LockHealth, lock: Option<&str>) -> usize {
        let me = self.id;
        self.store.fault(health, &|client, name| {
            client == me && lock.is_none_or(|l| l == name)
        })
    }

    fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.store.close_client(self.id);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

/// Where the callbacks of every `mem://` Client run: one events thread for the process,
/// started with the first Client. It is a listener thread: an acquire that would wait there
/// fails with [`Error::OnWatcherThread`].
pub(crate) fn dispatch() -> Dispatch {
    static EVENTS: OnceLock<Option<crossbeam_channel::Sender<Event>>> = OnceLock::new();
    let events = EVENTS.get_or_init(|| {
        let never = Arc::new(AtomicBool::new(false));
        match start_events_thread("zklock-mem-events", never) {
            Ok((tx, _thread)) => {
                let _ = tx.send(Box::new(become_listener_thread));
                Some(tx)
            }
            Err(e) => {
                tracing::error!("zklock: mem:// callbacks run in the caller: {e}");
                None
            }
        }
    });
    match events.clone() {
        Some(tx) => Arc::new(move |f: Event| {
            if let Err(e) = tx.send(f) {
                (e.into_inner())();
            }
        }),
        None => Arc::new(|f: Event| f()),
    }
}

/// A store or lock name is any text of 1 to [`MAX_NAME`] bytes.
pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!(
            "a mem:// {what} name must not be empty"
        )));
    }
    if name.len() > MAX_NAME {
        return Err(Error::invalid(format!(
            "a mem:// {what} name is at most {MAX_NAME} bytes, not {}",
            name.len()
        )));
    }
    Ok(())
}
