//! The session supervisor: a task on the I/O thread that opens sessions, turns the
//! wire client's states into Curator's connection states (with the local `Lost`), and opens a new
//! session after expiry. It is the only writer of the connection state, so states are ordered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_executor::Executor;
use crossbeam_channel::Sender;
use futures_lite::future;
use parking_lot::{Condvar, Mutex};
use zookeeper_client as zk;

use super::backoff::Backoff;
use super::builder::Config;
use super::create::{mkdirs, KnownParents};
use super::runtime::{sleep, Signal};
use super::types::ConnectionState;
use super::watcher::{Message, Registry};
use crate::core::deadline::{instant_after, Deadline};
use crate::core::error::{Error, Result};
use crate::core::lease::LocalLease;

/// What the Client, its threads and its tasks share.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) registry: Arc<Registry>,
    pub(crate) events: Sender<Message>,
    pub(crate) executor: Weak<Executor<'static>>,
    pub(crate) conn: Mutex<Conn>,
    conn_cv: Condvar,
    pub(crate) stop: Signal,
    pub(crate) finished: Signal,
    closed: AtomicBool,
    /// The local lease on the current session.
    pub(crate) lease: LocalLease,
    /// Why the last attempt to open a session failed, if it did.
    pub(crate) last_open_error: Mutex<Option<Error>>,
    /// Authentication added at runtime ([`Client::add_auth`](super::Client::add_auth)): sent
    /// on every session opened later, after the builder's.
    pub(crate) added_auth: Mutex<Vec<(String, Vec<u8>)>>,
    /// Parents known to exist, for creates that make missing parents.
    pub(crate) known_parents: Arc<KnownParents>,
}

/// The current session as ops see it.
#[derive(Default)]
pub(crate) struct Conn {
    pub(crate) zk: Option<zk::Client>,
    /// Bumped for every new session.
    pub(crate) generation: u64,
    pub(crate) state: Option<ConnectionState>,
    pub(crate) connected: bool,
    /// Number of states emitted so far; listeners registered later skip the earlier ones.
    pub(crate) seq: u64,
    /// Set when the current session is over for this Client (expired, locally lost, closed).
    pub(crate) ended: Signal,
}

/// How often a cancellable wait for the connection looks at its cancel signal.
const CANCEL_POLL: Duration = Duration::from_millis(50);

enum End {
    Stop,
    SessionOver,
}

impl Shared {
    pub(crate) fn new(
        config: Config,
        registry: Arc<Registry>,
        events: Sender<Message>,
        executor: Weak<Executor<'static>>,
    ) -> Shared {
        Shared {
            config,
            registry,
            events,
            executor,
            conn: Mutex::new(Conn::default()),
            conn_cv: Condvar::new(),
            stop: Signal::default(),
            finished: Signal::default(),
            closed: AtomicBool::new(false),
            lease: LocalLease::new(),
            last_open_error: Mutex::new(None),
            added_auth: Mutex::new(Vec::new()),
            known_parents: Arc::default(),
        }
    }

    /// Whether sessions authenticate in some way (an `auth` ACL entry needs it).
    pub(crate) fn has_credentials(&self) -> bool {
        self.config.builder.has_credentials() || !self.added_auth.lock().is_empty()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn set_closed(&self) -> bool {
        let first = !self.closed.swap(true, Ordering::AcqRel);
        self.stop.set();
        let _guard = self.conn.lock();
        self.conn_cv.notify_all();
        first
    }

    pub(crate) fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Some(ex) = self.executor.upgrade() {
            ex.spawn(f).detach();
        }
    }

    /// The connected session, if there is one now.
    pub(crate) fn current(&self) -> Option<zk::Client> {
        let conn = self.conn.lock();
        conn.zk.clone().filter(|_| conn.connected)
    }

    /// Waits until a session is connected. `deadline` is the call's; a wait longer than the
    /// connection timeout counts as a connection loss for the retry policy. `cancel` ends the
    /// wait with [`Error::Cancelled`].
    pub(crate) fn session(
        &self,
        deadline: Deadline,
        cancel: Option<&Signal>,
    ) -> Result<(zk::Client, u64)> {
        let wait = deadline.min_after(self.config.builder.connection_timeout);
        let mut conn = self.conn.lock();
        loop {
            if self.is_closed() {
                return Err(Error::Closed);
            }
            if cancel.is_some_and(Signal::is_set) {
                return Err(Error::Cancelled);
            }
            if conn.connected {
                if let Some(zk) = &conn.zk {
                    return Ok((zk.clone(), conn.generation));
                }
            }
            let at = wait.instant().expect("bounded by the connection timeout");
            let until = match cancel {
                Some(_) => at.min(Instant::now() + CANCEL_POLL),
                None => at,
            };
            if self.conn_cv.wait_until(&mut conn, until).timed_out() && Instant::now() >= at {
                return Err(if deadline.expired() {
                    Error::Timeout
                } else {
                    Error::ConnectionLoss
                });
            }
        }
    }

    /// Sleeps up to `d`, cut short by close or `cancel`.
    pub(crate) fn sleep(&self, d: Duration, cancel: Option<&Signal>) {
        let at = instant_after(d);
        let mut conn = self.conn.lock();
        while !self.is_closed() && !cancel.is_some_and(Signal::is_set) {
            let until = match cancel {
                Some(_) => at.min(Instant::now() + CANCEL_POLL),
                None => at,
            };
            if self.conn_cv.wait_until(&mut conn, until).timed_out() && Instant::now() >= at {
                return;
            }
        }
    }

    pub(crate) fn wait_connected(&self, timeout: Duration) -> bool {
        let at = instant_after(timeout);
        let mut conn = self.conn.lock();
        loop {
            if conn.connected {
                return true;
            }
            if self.is_closed() || self.conn_cv.wait_until(&mut conn, at).timed_out() {
                return conn.connected;
            }
        }
    }

    fn set(&self, state: ConnectionState, update: impl FnOnce(&mut Conn)) {
        tracing::info!("connection state {state:?}");
        let mut conn = self.conn.lock();
        update(&mut conn);
        conn.state = Some(state);
        conn.connected = state.is_connected() && conn.zk.is_some();
        conn.seq += 1;
        // Sent under the lock, so a listener registered under it sees exactly the later states.
        let _ = self.events.send(Message::State(conn.seq, state));
        self.conn_cv.notify_all();
    }
}

/// The supervisor task: runs until the Client closes.
pub(crate) async fn supervise(shared: Arc<Shared>) {
    let mut had_session = false;
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    while !shared.stop.is_set() {
        let opened = future::or(async { Some(open_session(&shared).await) }, async {
            shared.stop.wait().await;
            None
        })
        .await;
        let zk = match opened {
            None => break,
            Some(Ok(zk)) => zk,
            Some(Err(err)) => {
                tracing::warn!("cannot open a ZooKeeper session: {err}");
                *shared.last_open_error.lock() = Some(err);
                future::or(sleep(backoff.next_pause()), shared.stop.wait()).await;
                continue;
            }
        };
        backoff.reset();
        let state = if had_session {
            ConnectionState::Reconnected
        } else {
            ConnectionState::Connected
        };
        had_session = true;
        let ended = Signal::default();
        shared.set(state, |c| {
            c.zk = Some(zk.clone());
            c.generation += 1;
            c.ended = ended.clone();
        });
        let end = monitor(&shared, &zk).await;
        {
            let mut conn = shared.conn.lock();
            conn.zk = None;
            conn.connected = false;
        }
        ended.set();
        if let End::Stop = end {
            close_session(zk).await;
            break;
        }
        // An abandoned session's task ends by itself: it closes the session if it reconnects.
        drop(zk);
    }
    shared.finished.set();
}

async fn open_session(shared: &Shared) -> Result<zk::Client> {
    let b = &shared.config.builder;
    // The wire client calls the connection lost when nothing was received for this long, even
    // while it keeps sending (a frozen server is noticed): a third of the session timeout.
    let mut connector = zk::Client::connector()
        .with_session_timeout(b.session_timeout)
        .with_connection_timeout(b.session_timeout / 3)
        .with_readonly(b.can_be_read_only);
    #[cfg(feature = "sasl-digest-md5")]
    if let Some((user, password)) = &b.sasl {
        connector =
            connector.with_sasl(zk::SaslOptions::digest_md5(user.clone(), password.clone()));
    }
    let added = shared.added_auth.lock().clone();
    for (scheme, auth) in b.auth.iter().chain(&added) {
        connector = connector.with_auth(scheme, auth);
    }
    // The wire client's own words (refused, unresolvable, timed out) are the cause a caller of
    // `connect()` needs; mapping them to a bare ConnectionLoss would lose them.
    let hosts = &shared.config.hosts;
    let connecting = match &shared.config.tls {
        #[cfg(feature = "tls")]
        Some(tls) => {
            connector
                .with_tls(tls.options.clone())
                .secure_connect(hosts)
                .await
        }
        #[cfg(not(feature = "tls"))]
        Some(never) => match *never {},
        None => connector.connect(hosts).await,
    };
    let zk = connecting.map_err(|e| match Error::from_zk(e.clone(), &shared.config.hosts) {
        Error::ConnectionLoss | Error::ZooKeeper(_) => Error::ZooKeeper(e.to_string()),
        mapped => mapped,
    })?;
    let Some(ns) = &shared.config.namespace else {
        return Ok(zk);
    };
    let acls = &shared.config.namespace_acls;
    let acl = |p: &str| {
        acls.iter()
            .find(|(q, _)| q == p)
            .map(|(_, a)| a.clone())
            .unwrap_or_default()
    };
    mkdirs(&zk, ns, zk::CreateMode::Persistent, &acl).await?;
    zk.chroot(ns.as_str()).map_err(|_| Error::InvalidPath {
        path: ns.clone(),
        reason: "not a valid namespace",
    })
}

/// Follows one session until it ends (expired, or locally lost) or the Client stops, and keeps
/// the local lease on it (see `core/lease.rs`).
async fn monitor(shared: &Shared, zk: &zk::Client) -> End {
    enum Ev {
        State(zk::SessionState),
        LostTimer,
        Beat,
        Vouched(bool),
        Stop,
    }
    let negotiated = zk.session_timeout();
    let idle = idle_timeout(shared.config.builder.session_timeout / 3, negotiated);
    let live = &shared.lease;
    live.open(negotiated, idle);
    let (period, late) = live.beat();
    let mut watcher = zk.state_watcher();
    let mut lost_at: Option<Instant> = None;
    let mut last_beat = Instant::now();
    // Whether a connected state seen on time renews the lease; after a stall only a round trip
    // sent since does.
    let mut trusted = true;
    let mut vouching: Option<future::Boxed<bool>> = None;
    loop {
        let timer = async {
            match lost_at {
                Some(at) => async_io::Timer::at(at).await,
                None => async_io::Timer::never().await,
            };
            Ev::LostTimer
        };
        let beat = async {
            async_io::Timer::at(last_beat + period).await;
            Ev::Beat
        };
        let vouched = async {
            match vouching.as_mut() {
                Some(round_trip) => Ev::Vouched(round_trip.await),
                None => future::pending().await,
            }
        };
        let changed = async { Ev::State(watcher.changed().await) };
        let stop = async {
            shared.stop.wait().await;
            Ev::Stop
        };
        let ev = future::or(
            stop,
            future::or(changed, future::or(timer, future::or(beat, vouched))),
        )
        .await;
        if live.timed_out() && !matches!(ev, Ev::Stop) {
            // This process stood still for longer than the session timeout.
            tracing::warn!(
                "nothing heard from ZooKeeper for a whole session timeout; giving it up"
            );
            shared.set(ConnectionState::Lost, |_| {});
            return End::SessionOver;
        }
        match ev {
            Ev::Stop => return End::Stop,
            Ev::LostTimer => {
                // Nothing received for a whole session timeout: the server may have expired us.
                // Like Curator, give the session up and start a new one.
                shared.set(ConnectionState::Lost, |_| {});
                return End::SessionOver;
            }
            Ev::Beat => {
                let now = Instant::now();
                if now - last_beat > late {
                    tracing::debug!("the Client stood still for {:?}", now - last_beat);
                    trusted = false;
                    if vouching.is_none() {
                        let zk = zk.clone();
                        vouching = Some(Box::pin(async move { zk.check_stat("/").await.is_ok() }));
                    }
                } else if trusted && lost_at.is_none() {
                    live.heard();
                }
                last_beat = now;
            }
            Ev::Vouched(ok) => {
                vouching = None;
                if ok {
                    live.heard();
                    trusted = true;
                }
            }
            Ev::State(zk::SessionState::Disconnected) => {
                if lost_at.is_none() {
                    // The last byte arrived at least `idle` ago (or later, if the socket broke).
                    let margin = idle + idle / 8;
                    lost_at = Some(Instant::now() + negotiated.saturating_sub(margin));
                    shared.set(ConnectionState::Suspended, |_| {});
                }
            }
            Ev::State(zk::SessionState::SyncConnected) => {
                lost_at = None;
                live.heard();
                trusted = true;
                shared.set(ConnectionState::Reconnected, |_| {});
            }
            Ev::State(zk::SessionState::ConnectedReadOnly) => {
                lost_at = None;
                live.heard();
                trusted = true;
                shared.set(ConnectionState::ReadOnly, |_| {});
            }
            Ev::State(state) => {
                tracing::warn!("ZooKeeper session ended: {state}");
                shared.set(ConnectionState::Lost, |_| {});
                return End::SessionOver;
            }
        }
    }
}

/// The wire client's idle timeout for a configured one (see its `Session::reset_timeout`).
fn idle_timeout(configured: Duration, negotiated: Duration) -> Duration {
    let tick = if configured.is_zero() || configured > negotiated * 3 / 5 {
        negotiated / 20
    } else {
        configured / 8
    };
    tick.max(Duration::from_millis(1)) * 8
}

/// Closes the session (the wire client sends CloseSession once its last handle drops) and waits
/// briefly for it, so ephemeral nodes go at once rather than at session expiry.
async fn close_session(zk: zk::Client) {
    let mut watcher = zk.state_watcher();
    drop(zk);
    let closed = async {
        while !watcher.state().is_terminated() {
            watcher.changed().await;
        }
    };
    future::or(closed, sleep(Duration::from_secs(2))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_timeout_follows_the_wire_client() {
        let s = Duration::from_secs(3);
        assert_eq!(
            idle_timeout(Duration::from_secs(1), s),
            Duration::from_secs(1)
        );
        // Configured above 3/5 of the negotiated timeout: the wire client uses 2/5 of it.
        assert_eq!(
            idle_timeout(Duration::from_secs(3), s),
            Duration::from_millis(1200)
        );
        assert!(idle_timeout(s / 3, s) < s * 2 / 3);
    }
}
