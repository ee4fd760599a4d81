//! The Client: Curator's `CuratorFramework` for plain threads.

mod acl;
mod backoff;
mod builder;
mod cleanup;
mod create;
mod follow;
mod runtime;
mod session;
#[cfg(feature = "tls")]
mod tls;
mod types;
mod watcher;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_lite::future;
use zookeeper_client as zk;

pub use self::acl::AclProvider;
pub(crate) use self::acl::{RecipeAcl, SharedAcl};
pub use self::builder::ClientBuilder;
pub(crate) use self::builder::MAX_DATA_LEN;
pub(crate) use self::cleanup::Doomed;
pub use self::create::Create;
pub(crate) use self::create::{create_protected, NodeOps, NodeSpec, Siblings};
pub(crate) use self::follow::{FollowGuard, NodeNews, NodeRead};
pub(crate) use self::runtime::Runtime;
pub(crate) use self::runtime::Signal;
use self::session::Shared;
pub use self::types::{
    Acl, ConnectionState, CreateMode, ErrorPolicy, Perms, Stat, Watch, WatchEvent, WatchEventKind,
};
pub(crate) use self::watcher::{
    is_watcher_thread, Parked, Registration, Registry, Reread, WatchTarget,
};
use self::watcher::{Message, WatcherThread};
use crate::core::channel::Receiver;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::lease::LocalLease;
use crate::core::retry::RetryBudget;
use crate::zookeeper::path;

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
    fn drop(&mut self) {
        self.close_in_background();
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

    /// Starts the close and returns at once: the Client's tasks close the session on the I/O
    /// thread and stop (within [`CLOSE_BOUND`]), the watcher thread after what is queued for it.
    fn close_in_background(&self) {
        if self.shared.set_closed() {
            self.shared.registry.wake_all();
        }
        self.runtime
            .shutdown_after(self.shared.finished.clone(), CLOSE_BOUND);
        self.watcher.detach();
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

/// Fails with [`Error::ConnectionLoss`] once the connection has been down for `grace` without
/// coming back. A request sent just as the connection broke may be held by the wire client for
/// the next connection; without this its caller would wait until the session ended.
async fn disconnected_for<T>(zk: zk::Client, grace: Duration) -> Result<T> {
    let mut states = zk.state_watcher();
    loop {
        match states.peek_state() {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                states.changed().await;
            }
            // The request itself fails with the session.
            s if s.is_terminated() => future::pending::<()>().await,
            _ => {
                let back = future::or(async { Some(states.changed().await) }, async {
                    runtime::sleep(grace).await;
                    None
                });
                if back.await.is_none() {
                    return Err(Error::ConnectionLoss);
                }
            }
        }
    }
}

/// The deadline and retry budget of one user call, shared by its nested steps (CURATOR-559).
/// The budget starts afresh after every round trip the server answered.
pub(crate) struct Call {
    pub(crate) deadline: Deadline,
    pub(crate) budget: RetryBudget,
    /// Set from another thread to end the call with [`Error::Cancelled`].
    pub(crate) cancel: Option<Signal>,
}

impl Client {
    /// A builder for the connect string `host:port[,host:port…]`.
    pub fn builder(connect_string: &str) -> ClientBuilder {
        ClientBuilder::new(connect_string)
    }

    /// Connects with the defaults and waits for the first session (up to 15 s).
    pub fn connect(connect_string: &str) -> Result<Client> {
        Client::builder(connect_string).connect()
    }

    fn start(config: builder::Config) -> Result<Client> {
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
        self.shared().config.builder.error_policy
    }

    /// Why the last attempt to open a session failed, if it did.
    pub(crate) fn last_open_error(&self) -> Option<Error> {
        self.shared().last_open_error.lock().clone()
    }

    /// The hosts of the connect string.
    pub(crate) fn hosts(&self) -> &str {
        &self.shared().config.hosts
    }

    fn shared_arc(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// Deletes `doomed` in the background, through whatever session is current, until it is
    /// gone or the Client closes. Returns at once.
    pub(crate) fn delete_in_background(&self, doomed: Doomed) {
        cleanup::spawn(&self.inner.shared, doomed);
    }

    /// [`delete_in_background`](Client::delete_in_background) once `after` is set, or at the
    /// latest after the operation (else connection) timeout.
    pub(crate) fn delete_in_background_after(&self, doomed: Doomed, after: Signal) {
        cleanup::spawn_after(&self.inner.shared, doomed, Some((after, self.io_grace())));
    }

    /// How long one ZooKeeper step of a lock attempt may take beyond the caller's wait: the
    /// operation timeout, else the connection timeout.
    pub(crate) fn io_grace(&self) -> Duration {
        let b = &self.shared().config.builder;
        b.operation_timeout.unwrap_or(b.connection_timeout)
    }

    /// Closes the session (its ephemeral nodes go) and ends the Client's threads, waiting for
    /// them: at most about 5 s for the session's close, at most 10 s more for the shared I/O
    /// thread to let this Client's tasks go (at once unless that thread is held up), plus
    /// whatever listener is running. Every later call fails with [`Error::Closed`]. Idempotent.
    ///
    /// Dropping the last clone does the same without waiting: it returns at once and the
    /// threads end by themselves shortly after.
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

    // ----- operations -----

    pub(crate) fn new_call(&self, deadline: Deadline) -> Call {
        Call {
            deadline,
            budget: RetryBudget::new(self.shared().config.builder.retry.clone()),
            cancel: None,
        }
    }

    fn user_call(&self) -> Call {
        let deadline = match self.shared().config.builder.operation_timeout {
            Some(d) => Deadline::after(d),
            None => Deadline::NEVER,
        };
        self.new_call(deadline)
    }

    /// Runs one operation with the call's deadline and retry budget.
    pub(crate) fn run<T, F, Fut>(&self, what: &str, call: &mut Call, mut op: F) -> Result<T>
    where
        F: FnMut(zk::Client, u64) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        loop {
            match self.run_once(call, &mut op) {
                Err(e) if e.is_retryable() => {
                    tracing::debug!("{what}: {e}");
                    self.backoff(call, e)?;
                }
                other => return other,
            }
        }
    }

    /// One attempt: waits for a connected session (up to the connection timeout), then runs `op`.
    pub(crate) fn run_once<T, F, Fut>(&self, call: &mut Call, op: F) -> Result<T>
    where
        F: FnOnce(zk::Client, u64) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let (zk, generation) = self.shared().session(call.deadline, call.cancel.as_ref())?;
        let cancelled = async {
            match &call.cancel {
                Some(c) => c.wait().await,
                None => future::pending().await,
            }
            Err(Error::Cancelled)
        };
        let stalled = disconnected_for(zk.clone(), self.shared().config.builder.connection_timeout);
        let result = runtime::block_on(
            future::or(op(zk, generation), future::or(cancelled, stalled)),
            call.deadline,
        )
        .unwrap_or(Err(Error::Timeout));
        match &result {
            Err(e) if e.outcome_unknown() => {}
            _ => call.budget.reset(),
        }
        result
    }

    /// After a retryable failure: sleeps as the retry policy says and returns `Ok`, or returns
    /// the error when the policy (or the deadline) gives up.
    pub(crate) fn backoff(&self, call: &mut Call, err: Error) -> Result<()> {
        let Some(sleep) = call.budget.next_sleep() else {
            return Err(err);
        };
        if call.deadline.remaining().is_some_and(|left| left <= sleep) {
            return Err(Error::Timeout);
        }
        tracing::debug!("{err}; retry {} in {sleep:?}", call.budget.retries());
        self.shared().sleep(sleep, call.cancel.as_ref());
        if self.is_closed() {
            return Err(Error::Closed);
        }
        if call.cancel.as_ref().is_some_and(Signal::is_set) {
            return Err(Error::Cancelled);
        }
        Ok(())
    }

    /// Starts creating a node; finish with [`Create::call`].
    pub fn create<'a>(&'a self, path: &'a str) -> Create<'a> {
        Create::new(self, path)
    }

    /// Deletes a node, whatever its version.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent, [`NotEmpty`](Error::NotEmpty) if it has
    /// children.
    pub fn delete(&self, path: &str) -> Result<()> {
        self.delete_in(path, None, &mut self.user_call())
    }

    /// Deletes a node if its data version is `version`.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`], plus [`BadVersion`](Error::BadVersion) on a version mismatch.
    pub fn delete_version(&self, path: &str, version: i32) -> Result<()> {
        self.delete_in(path, Some(version), &mut self.user_call())
    }

    pub(crate) fn delete_in(
        &self,
        path: &str,
        version: Option<i32>,
        call: &mut Call,
    ) -> Result<()> {
        path::validate(path, false)?;
        self.run("delete", call, |zk, _| async move {
            zk.delete(path, version)
                .await
                .map_err(|e| Error::from_zk(e, path))
        })
    }

    /// Curator's guaranteed delete: deletes the node (a missing node counts as deleted); if that
    /// fails for lack of a connection, the error is returned and the delete is retried in the
    /// background, through whatever session is current, until the node is gone or the Client
    /// closes.
    ///
    /// # Blocking and errors
    /// As [`delete`](Client::delete); a delete that cannot be confirmed goes on in the
    /// background until the node is gone, and the error is returned.
    pub fn delete_guaranteed(&self, path: &str) -> Result<()> {
        self.delete_guaranteed_in(path, &mut self.user_call())
    }

    pub(crate) fn delete_guaranteed_in(&self, path: &str, call: &mut Call) -> Result<()> {
        match self.delete_in(path, None, call) {
            Ok(()) | Err(Error::NoNode(_)) => Ok(()),
            Err(e) if e.outcome_unknown() => {
                self.delete_in_background(Doomed::node(path, None));
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// The names of a node's children (unsorted, as the server returns them).
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if the node is absent.
    pub fn children(&self, path: &str) -> Result<Vec<String>> {
        self.children_in(path, &mut self.user_call())
    }

    pub(crate) fn children_in(&self, path: &str, call: &mut Call) -> Result<Vec<String>> {
        path::validate(path, false)?;
        self.run("children", call, |zk, _| async move {
            zk.list_children(path)
                .await
                .map_err(|e| Error::from_zk(e, path))
        })
    }

    /// A node's children (unsorted) and a one-shot [`Watch`] that fires when a child is added or
    /// removed, or the node is deleted (Curator's `getChildren().usingWatcher(..)`).
    ///
    /// # Errors
    /// [`Error::NoNode`] if the node does not exist (no watch is left behind then).
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if the node is absent (no watch is left).
    pub fn children_watch(&self, path: &str) -> Result<(Vec<String>, Watch)> {
        path::validate(path, false)?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cancel = Signal::default();
        let (children, watcher) = self.run(
            "children_watch",
            &mut self.user_call(),
            |zk, _| async move {
                zk.list_and_watch_children(path)
                    .await
                    .map_err(|e| Error::from_zk(e, path))
            },
        )?;
        let events = self.shared().events.clone();
        let stop = cancel.clone();
        self.shared().spawn(async move {
            let fired = future::or(async { Some(watcher.changed().await) }, async {
                stop.wait().await;
                None
            })
            .await;
            if let Some(event) = fired {
                let _ = events.send(Message::Watch(tx, WatchEvent::from_zk(event)));
            }
        });
        Ok((
            children,
            Watch {
                rx: Receiver::new(rx),
                cancel,
            },
        ))
    }

    /// A node's data and stat.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent.
    pub fn data(&self, path: &str) -> Result<(Vec<u8>, Stat)> {
        self.data_in(path, &mut self.user_call())
    }

    pub(crate) fn data_in(&self, path: &str, call: &mut Call) -> Result<(Vec<u8>, Stat)> {
        path::validate(path, false)?;
        self.run("data", call, |zk, _| async move {
            let (data, stat) = zk
                .get_data(path)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok((data, Stat::from_zk(stat)))
        })
    }

    /// A node's data and stat, and a one-shot [`Watch`] that fires on its next change or
    /// deletion. Uses `getData`, so no watch is left behind on a node that does not exist.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent (no watch is left).
    pub fn data_watch(&self, path: &str) -> Result<(Vec<u8>, Stat, Watch)> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cancel = Signal::default();
        let (data, stat) = self.data_watch_in(
            path,
            WatchTarget::Channel(tx),
            cancel.clone(),
            &mut self.user_call(),
        )?;
        Ok((
            data,
            stat,
            Watch {
                rx: Receiver::new(rx),
                cancel,
            },
        ))
    }

    /// `getData` with a watch whose firing goes to `target`; setting `cancel` removes the watch.
    pub(crate) fn data_watch_in(
        &self,
        path: &str,
        target: WatchTarget,
        cancel: Signal,
        call: &mut Call,
    ) -> Result<(Vec<u8>, Stat)> {
        path::validate(path, false)?;
        let (data, stat, watcher, zk) = self.run("data_watch", call, |zk, _| async move {
            let (data, stat, watcher) = zk
                .get_and_watch_data(path)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok((data, stat, watcher, zk))
        })?;
        self.forward_watch(zk, path, watcher, target, cancel);
        Ok((data, Stat::from_zk(stat)))
    }

    /// Hands the event of `watcher` (set on `path` through `zk`) to `target` when it fires;
    /// setting `cancel` removes the watch.
    fn forward_watch(
        &self,
        zk: zk::Client,
        path: &str,
        mut watcher: zk::OneshotWatcher,
        target: WatchTarget,
        cancel: Signal,
    ) {
        let events = self.shared().events.clone();
        let path = path.to_owned();
        self.shared().spawn(async move {
            let mut target = target;
            loop {
                let fired = future::or(async { Some(watcher.changed().await) }, async {
                    cancel.wait().await;
                    None
                })
                .await;
                // On cancel the watcher is dropped here, which removes the watch from the server.
                let Some(event) = fired else { return };
                let event = WatchEvent::from_zk(event);
                match target {
                    WatchTarget::Channel(tx) => {
                        let _ = events.send(Message::Watch(tx, event));
                        return;
                    }
                    WatchTarget::Call(call) => return call(event),
                    WatchTarget::Reading {
                        parent,
                        mut deliver,
                    } => {
                        if event.kind != WatchEventKind::NodeDataChanged {
                            return deliver(event, None);
                        }
                        // Both requests go out now, one behind the other: one round trip.
                        let node = zk.get_and_watch_data(&path);
                        let parent_stat = parent.then(|| zk.check_stat(path::parent(&path)));
                        let node = node.await;
                        let parent_stat = match parent_stat {
                            Some(stat) => stat.await.ok().flatten().map(Stat::from_zk),
                            None => None,
                        };
                        let (node, next) = match node {
                            Ok((data, stat, next)) => {
                                (Ok(Some((Stat::from_zk(stat), data))), Some(next))
                            }
                            Err(zk::Error::NoNode) => (Ok(None), None),
                            Err(e) => (Err(Error::from_zk(e, &path)), None),
                        };
                        deliver(
                            event,
                            Some(Reread {
                                node,
                                parent: parent_stat,
                            }),
                        );
                        let Some(next) = next else { return };
                        watcher = next;
                        target = WatchTarget::Reading { parent, deliver };
                    }
                }
            }
        });
    }

    /// Sends a setData at `version` before it returns, without waiting for the answer: a read
    /// sent after it sees the new data. The signal is set once the answer came (or failed, or
    /// there was no session to send it on).
    pub(crate) fn set_data_unawaited(&self, path: &str, data: &[u8], version: i32) -> Signal {
        let answered = Signal::default();
        let Some(zk) = self.shared().conn.lock().zk.clone() else {
            answered.set();
            return answered;
        };
        let sent = zk.set_data(path, data, Some(version));
        let path = path.to_owned();
        let done = answered.clone();
        self.shared().spawn(async move {
            if let Err(e) = sent.await {
                tracing::debug!("setData {path} (unawaited): {e}");
            }
            done.set();
        });
        answered
    }

    /// One attempt at `ops` as one transaction (ZooKeeper's multi): the stats of its setData
    /// operations (`None` for checks), or the index of the operation that failed and why.
    pub(crate) fn multi_once(&self, ops: &[MultiOp<'_>], call: &mut Call) -> Result<MultiOutcome> {
        self.run_once(call, |zk, _| async move {
            let mut multi = zk.new_multi_writer();
            for op in ops {
                match *op {
                    MultiOp::Check { path, version } => multi
                        .add_check_version(path, version)
                        .map_err(|e| Error::from_zk(e, path))?,
                    MultiOp::SetData {
                        path,
                        data,
                        version,
                    } => multi
                        .add_set_data(path, data, Some(version))
                        .map_err(|e| Error::from_zk(e, path))?,
                }
            }
            match multi.commit().await {
                Ok(results) => Ok(Ok(results
                    .into_iter()
                    .map(|r| match r {
                        zk::MultiWriteResult::SetData { stat } => Some(Stat::from_zk(stat)),
                        _ => None,
                    })
                    .collect())),
                Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                    let path = ops.get(index).map_or("", MultiOp::path);
                    Ok(Err((index, Error::from_zk(source, path))))
                }
                Err(zk::MultiWriteError::RequestFailed { source }) => {
                    let path = ops.first().map_or("", MultiOp::path);
                    Err(Error::from_zk(source, path))
                }
            }
        })
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

    /// Sets a node's data, whatever its version; returns the new stat.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent; data over 1 MiB is refused before I/O.
    pub fn set_data(&self, path: &str, data: &[u8]) -> Result<Stat> {
        self.set_data_in(path, data, None, &mut self.user_call())
    }

    /// Sets a node's data if its version is `version`.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`], plus [`BadVersion`](Error::BadVersion) on a version mismatch.
    pub fn set_data_version(&self, path: &str, data: &[u8], version: i32) -> Result<Stat> {
        self.set_data_in(path, data, Some(version), &mut self.user_call())
    }

    pub(crate) fn set_data_in(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
        call: &mut Call,
    ) -> Result<Stat> {
        path::validate(path, false)?;
        check_data(data)?;
        self.run("set_data", call, |zk, _| async move {
            let stat = zk
                .set_data(path, data, version)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok(Stat::from_zk(stat))
        })
    }

    /// A node's stat, or `None` if it does not exist. Sets no watch.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]; an absent node is `Ok(None)`, not an error.
    pub fn exists(&self, path: &str) -> Result<Option<Stat>> {
        self.exists_in(path, &mut self.user_call())
    }

    pub(crate) fn exists_in(&self, path: &str, call: &mut Call) -> Result<Option<Stat>> {
        path::validate(path, false)?;
        self.run("exists", call, |zk, _| async move {
            let stat = zk
                .check_stat(path)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok(stat.map(Stat::from_zk))
        })
    }

    /// A node's ACL and stat (Curator's `getACL()`).
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent.
    pub fn acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        path::validate(path, false)?;
        self.run("acl", &mut self.user_call(), |zk, _| async move {
            let (acl, stat) = zk
                .get_acl(path)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok((acl.iter().map(Acl::from_zk).collect(), Stat::from_zk(stat)))
        })
    }

    /// Replaces a node's ACL, whatever its ACL version (Curator's `setACL()`); returns the new
    /// stat. An empty ACL is refused before any I/O.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent; an invalid ACL is
    /// [`InvalidArgument`](Error::InvalidArgument).
    pub fn set_acl(&self, path: &str, acl: &[Acl]) -> Result<Stat> {
        path::validate(path, false)?;
        if acl.is_empty() {
            return Err(Error::invalid("ACL must not be empty"));
        }
        let acl: Vec<zk::Acl> = acl.iter().map(Acl::to_zk).collect();
        let acl = &acl;
        self.run("set_acl", &mut self.user_call(), |zk, _| async move {
            let stat = zk
                .set_acl(path, acl, None)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok(Stat::from_zk(stat))
        })
    }

    /// Adds authentication to the session (Curator's `addAuthInfo`), e.g. `("digest",
    /// b"user:password")`: the current session is authenticated at once, and every session the
    /// Client opens later (after expiry) is too. Nodes created earlier keep the ACLs they were
    /// created with.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] before any I/O for an empty scheme or a digest without `:`.
    /// If the server refuses the authentication it ends the session (ZooKeeper's
    /// `AuthFailed`): the error is returned and the authentication is not kept.
    ///
    /// # Blocking
    /// One round trip, within the Client's retry policy.
    pub fn add_auth(&self, scheme: &str, auth: &[u8]) -> Result<()> {
        builder::check_auth(scheme, auth)?;
        let entry = (scheme.to_owned(), auth.to_vec());
        // Kept first, so a session opened meanwhile gets it too.
        self.shared().added_auth.lock().push(entry.clone());
        let result = self.run("add_auth", &mut self.user_call(), |zk, _| async move {
            zk.auth(scheme, auth)
                .await
                .map_err(|e| Error::from_zk(e, scheme))
        });
        if let Err(e) = &result {
            if !e.is_retryable() {
                let mut added = self.shared().added_auth.lock();
                if let Some(i) = added.iter().rposition(|a| *a == entry) {
                    added.remove(i);
                }
            }
        }
        result
    }

    /// Waits until the server this Client is connected to has caught up with the leader.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`].
    pub fn sync(&self, path: &str) -> Result<()> {
        path::validate(path, false)?;
        self.run("sync", &mut self.user_call(), |zk, _| async move {
            zk.sync(path).await.map_err(|e| Error::from_zk(e, path))
        })
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
    pub(crate) fn session_for_testing(&self) -> Option<(String, zk::SessionInfo)> {
        let conn = self.shared().conn.lock();
        conn.zk
            .as_ref()
            .map(|zk| (self.shared().config.hosts.clone(), zk.session().clone()))
    }
}

/// What a transaction the server answered did: the stats of its setData operations (`None` for
/// checks), or the index of the operation that failed and why.
pub(crate) type MultiOutcome = std::result::Result<Vec<Option<Stat>>, (usize, Error)>;

/// One operation of [`Client::multi_once`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum MultiOp<'a> {
    /// Fails the transaction unless the node's data version is `version`.
    Check { path: &'a str, version: i32 },
    /// Sets the node's data if its version is `version`.
    SetData {
        path: &'a str,
        data: &'a [u8],
        version: i32,
    },
}

impl MultiOp<'_> {
    fn path(&self) -> &str {
        match self {
            MultiOp::Check { path, .. } | MultiOp::SetData { path, .. } => path,
        }
    }
}

/// Removes one of the crate's own watches when dropped.
#[must_use]
pub(crate) struct WatchGuard(pub(crate) Signal);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.set();
    }
}

fn check_data(data: &[u8]) -> Result<()> {
    if data.len() > MAX_DATA_LEN {
        return Err(Error::invalid(format!(
            "node data of {} bytes is over ZooKeeper's 1 MiB limit",
            data.len()
        )));
    }
    Ok(())
}
