//! The Client: Curator's `CuratorFramework` for plain threads.

mod acl;
mod backoff;
mod builder;
mod call;
mod cleanup;
mod config;
mod create;
mod ensemble;
mod follow;
mod hosts;
mod limits;
mod ops;
mod parents;
mod runtime;
mod session;
mod shared;
#[cfg(feature = "tls")]
mod tls;
mod transaction;
mod types;
mod watch;
mod watcher;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use self::acl::AclProvider;
pub(crate) use self::acl::{RecipeAcl, SharedAcl};
pub use self::builder::ClientBuilder;
pub(crate) use self::call::Call;
pub(crate) use self::cleanup::Doomed;
pub use self::create::Create;
pub(crate) use self::create::{create_protected, NodeOps, NodeSpec, Siblings};
pub(crate) use self::follow::{FollowGuard, NodeNews, NodeRead};
pub(crate) use self::limits::MAX_DATA_LEN;
pub(crate) use self::ops::MultiOp;
pub(crate) use self::runtime::Signal;
pub(crate) use self::runtime::{on_io_thread, Runtime};
use self::shared::Shared;
pub use self::transaction::{Op, OpResult};
pub(crate) use self::types::ConnectionState;
pub use self::types::{
    Acl, CreateMode, ErrorPolicy, Perms, Stat, Watch, WatchEvent, WatchEventKind,
};
pub(crate) use self::watch::WatchGuard;
pub(crate) use self::watcher::{
    is_watcher_thread, Parked, Registration, Registry, Reread, WatchTarget,
};
use self::watcher::{Message, WatcherThread};
use crate::core::channel::Receiver;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::lease::LocalLease;

/// A connection to a ZooKeeper ensemble that keeps its session through faults: the analogue of
/// Curator's `CuratorFramework`. Cheap to clone; all clones share one session.
///
/// # Threads
/// Each Client starts a `zklock-watch-N` thread that delivers watch events and connection
/// states, and runs its wire client (sockets, pings, reconnects) on the process's one
/// `zklock-io` thread, shared by every Client of the process (started with the first, ended
/// with the last). They end when [`close`](Client::close) is called or the last clone is
/// dropped. The process also has one `async-io` reactor thread, started on first use.
///
/// # Retries and deadlines
/// Each call is one retry budget from the Client's [`RetryPolicy`](crate::RetryPolicy): a
/// connection loss is retried after the policy's sleep; an attempt waits at most the connection
/// timeout for a connection. With [`ClientBuilder::operation_timeout`] a call also fails with
/// [`Error::Timeout`] once that much time has passed, whatever step it is in.
///
/// # Sessions
/// States follow Curator (see [`ConnectionState`]). After `Lost` the Client opens a new session
/// by itself; operations wait for it.
///
/// # Errors of every ZooKeeper call
/// [`InvalidPath`](Error::InvalidPath) / [`InvalidArgument`](Error::InvalidArgument) before any
/// I/O; [`ConnectionLoss`](Error::ConnectionLoss) when the retry policy gives up during an
/// outage; [`Timeout`](Error::Timeout) past the operation timeout;
/// [`SessionExpired`](Error::SessionExpired) when the session ended under the call;
/// [`NoAuth`](Error::NoAuth) (with the path) when an ACL forbids it; [`Closed`](Error::Closed)
/// after [`close`](Client::close); the node-level answers ([`NoNode`](Error::NoNode),
/// [`NodeExists`](Error::NodeExists), [`NotEmpty`](Error::NotEmpty),
/// [`BadVersion`](Error::BadVersion)) where the method says so.
///
/// # Example
/// ```no_run
/// use zklock::{Client, CreateMode};
/// # fn main() -> zklock::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let path = client.create("/app/workers/w-").mode(CreateMode::EphemeralSequential)
///     .parents_as_containers().data(b"hello").call()?;
/// assert_eq!(client.data(&path)?.0, b"hello");
/// client.close();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    runtime: Runtime,
    watcher: WatcherThread,
}

impl Drop for Inner {
    /// The last handle is gone: the session closes now, so that a program that returns from
    /// `main` leaves no node (and no lock) behind for the server's timer to free.
    fn drop(&mut self) {
        self.close_on_drop();
    }
}

/// How long the session's close may take before the I/O thread ends anyway.
const CLOSE_BOUND: Duration = Duration::from_secs(5);

impl Inner {
    /// Closes the session and waits (at most [`CLOSE_BOUND`] and the time queued listeners
    /// take) until the Client's threads have ended.
    fn close(&self) {
        if self.shared.set_closed() {
            self.shared.registry.wake_all();
            runtime::block_on(self.shared.finished.wait(), Deadline::after(CLOSE_BOUND));
        }
        self.runtime.shutdown();
        self.watcher.shutdown();
    }

    /// Closes the session, waiting for the server's answer at most [`Client::drop_bound`]
    /// (not at all on the I/O thread, which sends it); the rest goes on in the background: the
    /// Client's tasks stop (within [`CLOSE_BOUND`]), the watcher thread after what is queued
    /// for it. Unlike [`close`](Inner::close), never waits for a listener.
    ///
    /// The process may end right after this returns (the end of `main`): the I/O thread goes
    /// with it, so the session's close must have reached the server by then. closeSession ends
    /// the session at once on the server, and with it every ephemeral node — every lock node,
    /// queue entry and lease the Client had — instead of a session timeout later.
    fn close_on_drop(&self) {
        if self.shared.set_closed() {
            self.shared.registry.wake_all();
        }
        if !runtime::on_io_thread() {
            let bound = drop_bound(&self.shared);
            let closed =
                runtime::block_on(self.shared.finished.wait(), Deadline::after(bound)).is_some();
            if !closed {
                tracing::info!(
                    "the session's close was not answered within {bound:?}: it goes on in the \
                     background (the server frees its nodes at session expiry if the process \
                     ends first)"
                );
            }
        }
        self.runtime
            .shutdown_after(self.shared.finished.clone(), CLOSE_BOUND);
        self.watcher.detach();
    }
}

/// How long a drop waits for the server: [`DROP_BOUND`](crate::core::lock::DROP_BOUND) (1 s),
/// or the operation timeout (default: the connection timeout) if that is shorter.
fn drop_bound(shared: &Shared) -> Duration {
    let b = &shared.config;
    let io_grace = b.operation_timeout.unwrap_or(b.connection_timeout);
    io_grace.min(crate::core::lock::DROP_BOUND)
}

/// Deletes nodes in the background for a Client without keeping its session open: what a task
/// on the I/O thread holds instead of a [`Client`] (whose last handle closes the session).
#[derive(Clone)]
pub(crate) struct BackgroundDeleter(Arc<Shared>);

impl BackgroundDeleter {
    /// As [`Client::delete_in_background`]; nothing once the Client is closed.
    pub(crate) fn delete(&self, doomed: Doomed) {
        cleanup::spawn(&self.0, doomed);
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("hosts", &self.inner.shared.config.hosts)
            .field("namespace", &self.inner.shared.config.namespace)
            .field("state", &self.state())
            .finish()
    }
}

static CLIENT_IDS: AtomicU64 = AtomicU64::new(0);

impl Client {
    /// A builder for the connect string `host:port[,host:port…]`.
    pub fn builder(connect_string: &str) -> ClientBuilder {
        ClientBuilder::new(connect_string)
    }

    /// Connects with the defaults and waits for the first session (up to 10 s, the default
    /// connection timeout).
    pub fn connect(connect_string: &str) -> Result<Client> {
        Client::builder(connect_string).connect()
    }

    fn start(config: config::Config) -> Result<Client> {
        let id = CLIENT_IDS.fetch_add(1, Ordering::Relaxed);
        let registry = Arc::new(Registry::default());
        let watch_name = format!("zklock-watch-{id}");
        let watcher = WatcherThread::start(watch_name.clone(), registry.clone())
            .map_err(|e| Error::thread_start(&watch_name, &e))?;
        let runtime = Runtime::start().map_err(|e| Error::thread_start(runtime::IO_THREAD, &e))?;
        let shared = Arc::new(Shared::new(
            config,
            registry,
            watcher.tx.clone(),
            runtime.executor(),
        ));
        runtime.spawn(session::supervise(shared.clone()));
        Ok(Client {
            inner: Arc::new(Inner {
                shared,
                runtime,
                watcher,
            }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// The error policy leader recipes use unless told otherwise.
    pub(crate) fn error_policy(&self) -> ErrorPolicy {
        self.shared().config.error_policy
    }

    /// Why the last attempt to open a session failed, if it did.
    pub(crate) fn last_open_error(&self) -> Option<Error> {
        self.shared().last_open_error.lock().clone()
    }

    /// The hosts of the connect string.
    pub(crate) fn hosts(&self) -> &str {
        &self.shared().config.hosts
    }

    /// The members the next connection will use, as a connect string: the one the Client was
    /// built with, until the ensemble's configuration (see
    /// [`ClientBuilder::ensemble_tracker`]) or
    /// [`update_connect_string`](Client::update_connect_string) changed it.
    pub fn connect_string(&self) -> String {
        self.shared().hosts.lock().clone()
    }

    /// Makes `connect_string` (`host:port[,host:port…]`) the members of every later connection,
    /// for deployments that move the ensemble by other means than ZooKeeper's own
    /// reconfiguration (new DNS names, say). The current connection is kept; the new members
    /// are used once it is lost (a session whose old members all stay out of reach moves to
    /// the new ones, the way it does after a reconfiguration). With the ensemble tracker on, a
    /// later change of `/zookeeper/config` replaces the list again.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a connect string [`Client::builder`] would refuse, or
    /// one with a TLS host when the Client does not use TLS (and the other way round); nothing
    /// is changed then. No I/O.
    ///
    /// # Example
    /// ```no_run
    /// # fn main() -> zklock::Result<()> {
    /// let client = zklock::Client::connect("old1:2181,old2:2181,old3:2181")?;
    /// client.update_connect_string("new1:2181,new2:2181,new3:2181")?;
    /// assert_eq!(client.connect_string(), "new1:2181,new2:2181,new3:2181");
    /// # Ok(()) }
    /// ```
    pub fn update_connect_string(&self, connect_string: &str) -> Result<()> {
        let hosts = hosts::parse_hosts(connect_string)?;
        let tls = |h: &str| {
            h.starts_with(hosts::TLS_PREFIX)
                || (self.shared().config.tls.is_some() && !h.starts_with(hosts::TCP_PREFIX))
        };
        if hosts.split(',').any(tls) != self.shared().config.tls.is_some() {
            return Err(Error::invalid(format!(
                "connect string {connect_string:?} does not match the Client's TLS setting"
            )));
        }
        self.shared()
            .set_hosts(hosts, "Client::update_connect_string");
        Ok(())
    }

    fn shared_arc(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// Deletes `doomed` in the background, through whatever session is current, until it is
    /// gone or the Client closes. Returns at once.
    pub(crate) fn delete_in_background(&self, doomed: Doomed) {
        cleanup::spawn(&self.inner.shared, doomed);
    }

    /// A handle for [`delete_in_background`](Client::delete_in_background) that does not keep
    /// the session open.
    pub(crate) fn background_deleter(&self) -> BackgroundDeleter {
        BackgroundDeleter(self.inner.shared.clone())
    }

    /// How long a drop (a guard's, a lease's, the last handle's) waits for the server before
    /// what is left goes on in the background: 1 s, or the operation timeout (default: the
    /// connection timeout) if that is shorter.
    pub(crate) fn drop_bound(&self) -> Duration {
        drop_bound(self.shared())
    }

    /// [`delete_in_background`](Client::delete_in_background) once `after` is set, or at the
    /// latest after the operation (else connection) timeout.
    pub(crate) fn delete_in_background_after(&self, doomed: Doomed, after: Signal) {
        cleanup::spawn_after(&self.inner.shared, doomed, Some((after, self.io_grace())));
    }

    /// How long one ZooKeeper step of a lock attempt may take beyond the caller's wait: the
    /// operation timeout, else the connection timeout.
    pub(crate) fn io_grace(&self) -> Duration {
        let b = &self.shared().config;
        b.operation_timeout.unwrap_or(b.connection_timeout)
    }

    /// Closes the session (its ephemeral nodes go) and ends the Client's threads, waiting for
    /// them: at most about 5 s for the session's close, at most 10 s more for the shared I/O
    /// thread to let this Client's tasks go (at once unless that thread is held up), plus
    /// whatever listener is running. Every later call fails with [`Error::Closed`]. Idempotent.
    /// The session ends whatever else is alive: every [`Watch`] returns `None`, and the
    /// Client's lock nodes are gone for other Clients at once.
    ///
    /// Dropping the last clone closes the session too, waiting for the server's answer at most
    /// 1 s (or the operation timeout, if shorter): a program that returns from `main` leaves
    /// no node behind. The threads end by themselves shortly after; what the server did not
    /// answer in that time goes on in the background (and is lost if the process ends: the
    /// server then frees the nodes at session expiry). Lock objects and guards hold clones of
    /// their Client: the last of them to go closes the session. Call `close()` before
    /// `std::process::exit` (which runs no destructor), or to wait longer.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Whether [`close`](Client::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared().is_closed()
    }

    /// The latest connection state; `None` before the first connection.
    pub fn state(&self) -> Option<ConnectionState> {
        self.shared().conn.lock().state
    }

    /// Whether requests can be served right now.
    pub fn is_connected(&self) -> bool {
        self.shared().conn.lock().connected
    }

    /// Waits until connected, at most `timeout`; returns whether it is. May be called from a
    /// listener (it only delays the listeners after it).
    ///
    /// # Blocking
    /// At most `timeout`; `false` if not connected by then. It has no error.
    pub fn block_until_connected(&self, timeout: Duration) -> bool {
        self.shared().wait_connected(timeout)
    }

    /// The current session's id, if a session is open.
    pub fn session_id(&self) -> Option<i64> {
        self.shared()
            .conn
            .lock()
            .zk
            .as_ref()
            .map(|zk| zk.session_id().0)
    }

    /// The session timeout the server granted, if a session is open.
    pub fn negotiated_session_timeout(&self) -> Option<Duration> {
        self.shared()
            .conn
            .lock()
            .zk
            .as_ref()
            .map(|zk| zk.session_timeout())
    }

    /// The namespace paths are relative to (`/app`), if any.
    pub fn namespace(&self) -> Option<&str> {
        self.shared().config.namespace.as_deref()
    }

    /// A channel that receives every later connection state, in order.
    pub fn connection_states(&self) -> Receiver<ConnectionState> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let conn = self.shared().conn.lock();
        self.shared().registry.add_channel(conn.seq, tx);
        Receiver::new(rx)
    }

    /// Calls `f` with every later connection state, in order, on the Client's watcher thread.
    /// Returns an id for [`remove_connection_state_listener`](Client::remove_connection_state_listener).
    ///
    /// Listeners must not block: one that waits delays every other listener and every watch
    /// delivery of this Client (never the session itself). A listener may add and remove
    /// listeners and make short zklock calls; a call that would park until a ZooKeeper event
    /// (an `acquire` that may wait) fails at once with [`Error::OnWatcherThread`], because only
    /// this thread could deliver that event. `try_lock()` works there.
    pub fn on_connection_state(&self, f: impl FnMut(ConnectionState) + Send + 'static) -> u64 {
        let conn = self.shared().conn.lock();
        self.shared().registry.add_callback(conn.seq, Box::new(f))
    }

    /// Removes a listener; returns whether it was registered.
    pub fn remove_connection_state_listener(&self, id: u64) -> bool {
        self.shared().registry.remove_callback(id)
    }

    /// Starts creating a node; finish with [`Create::call`].
    pub fn create<'a>(&'a self, path: &'a str) -> Create<'a> {
        Create::new(self, path)
    }

    /// Registers `parked` to be woken by every connection-state change until the
    /// registration drops.
    pub(crate) fn park(&self, parked: Arc<dyn Parked>) -> Registration {
        self.shared().registry.register(parked)
    }

    /// The data nodes get when a create names none.
    pub(crate) fn default_data(&self) -> &[u8] {
        &self.shared().config.default_data
    }

    /// The local lease on the current session.
    pub(crate) fn lease(&self) -> &LocalLease {
        &self.shared().lease
    }

    /// Runs `f` on the Client's watcher thread, after what is queued there already (user
    /// callbacks must never run on the I/O thread).
    pub(crate) fn on_watcher_thread(&self, f: impl FnOnce() + Send + 'static) {
        let _ = self.shared().events.send(Message::Run(Box::new(f)));
    }

    /// [`on_watcher_thread`](Client::on_watcher_thread) as a function the core can keep.
    pub(crate) fn dispatch(&self) -> crate::core::listeners::Dispatch {
        let events = self.shared().events.clone();
        Arc::new(move |f| {
            let _ = events.send(Message::Run(f));
        })
    }

    /// Holds the Client's wire client still (no reads, writes or reconnects) until the
    /// returned value drops, so a test can act on the session without this Client racing it.
    #[cfg(feature = "testing")]
    pub(crate) fn freeze_io_for_testing(&self) -> runtime::Frozen {
        self.inner.runtime.freeze()
    }

    #[cfg(feature = "testing")]
    pub(crate) fn session_for_testing(&self) -> Option<(String, zookeeper_client::SessionInfo)> {
        let conn = self.shared().conn.lock();
        conn.zk
            .as_ref()
            .map(|zk| (self.shared().config.hosts.clone(), zk.session().clone()))
    }
}
