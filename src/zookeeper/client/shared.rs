//! What a ZooKeeper Client, its threads and its tasks share: the configuration, the current
//! session as operations see it, the connection state and the waits for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_executor::Executor;
use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};
use zookeeper_client as zk;

use super::config::Config;
use super::parents::KnownParents;
use super::runtime::Signal;
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
    /// The members every later (re)connection uses: the connect string at first, then what the
    /// ensemble's configuration or [`Client::update_connect_string`](super::Client::update_connect_string)
    /// says.
    pub(crate) hosts: Mutex<String>,
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
    /// Set when the current wire client is let go because its session moved to another wire
    /// client, on members it did not know (the session goes on: the supervisor's `End::Moved`).
    pub(crate) moved: Signal,
}

/// How often a cancellable wait for the connection looks at its cancel signal.
const CANCEL_POLL: Duration = Duration::from_millis(50);

impl Shared {
    pub(crate) fn new(
        config: Config,
        registry: Arc<Registry>,
        events: Sender<Message>,
        executor: Weak<Executor<'static>>,
    ) -> Shared {
        Shared {
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
            hosts: Mutex::new(config.hosts.clone()),
            config,
        }
    }

    /// Whether the Client follows `/zookeeper/config`: asked for, and not over TLS (the
    /// configuration names plain client ports only).
    pub(crate) fn tracks_ensemble(&self) -> bool {
        self.config.ensemble_tracker && self.config.tls.is_none()
    }

    /// Makes `hosts` (checked) the member list of every later (re)connection.
    pub(crate) fn set_hosts(&self, hosts: String, source: &str) {
        let mut current = self.hosts.lock();
        if *current != hosts {
            tracing::info!("ZooKeeper members from {source}: {hosts} (were {current})");
            *current = hosts;
        }
    }

    /// Whether sessions authenticate in some way (an `auth` ACL entry needs it).
    pub(crate) fn has_credentials(&self) -> bool {
        self.config.has_credentials || !self.added_auth.lock().is_empty()
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

    /// Waits until a session is connected: its wire client, its generation, and the signal set
    /// when the session moves off that wire client. `deadline` is the call's; a wait longer
    /// than the connection timeout counts as a connection loss for the retry policy. `cancel`
    /// ends the wait with [`Error::Cancelled`].
    pub(crate) fn session(
        &self,
        deadline: Deadline,
        cancel: Option<&Signal>,
    ) -> Result<(zk::Client, u64, Signal)> {
        let wait = deadline.min_after(self.config.connection_timeout);
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
                    return Ok((zk.clone(), conn.generation, conn.moved.clone()));
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

    pub(super) fn set(&self, state: ConnectionState, update: impl FnOnce(&mut Conn)) {
        tracing::info!("connection state {state:?}");
        let mut conn = self.conn.lock();
        update(&mut conn);
        conn.state = Some(state);
        conn.connected = state.is_connected() && conn.zk.is_some();
        conn.seq += 1;
        // Sent under the lock, so a listener registered under it sees exactly the later states.
        let _ = self.events.send(Message::State(conn.seq, state));
        self.conn_cv.notify_all();
        drop(conn);
        // Here, not on the watcher thread, so that a listener that blocks holds up nothing parked.
        self.registry.wake_all();
    }
}
