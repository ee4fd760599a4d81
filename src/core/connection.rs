//! The connection state every backend's Client reports, with Curator's meaning, and how the
//! Redis and PostgreSQL Clients judge it from their heartbeats.

use std::time::Duration;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::channel::Receiver;
use super::health::LockHealth;
use super::lease::LocalLease;
use super::listeners::{Dispatch, Listeners};

/// The connection state of a Client, with Curator's meaning, on every backend.
///
/// | state | meaning |
/// |---|---|
/// | `Connected` | the first connection is established |
/// | `Suspended` | the connection is gone (or the server stopped answering); the server may still keep our session or holds — a held lock's validity is unknown |
/// | `Reconnected` | connected again: to the same session, or (after `Lost`) to a new one |
/// | `Lost` | the session expired, or the server has been silent so long that it may have expired (what the server keeps for us has expired) |
/// | `ReadOnly` | ZooKeeper: connected to a server that is partitioned from its quorum (read-only mode) |
///
/// `Lost` is raised locally no later than one session timeout (on Redis: one hold TTL) after
/// the server last answered, even while it is still unreachable.
///
/// # Example
/// ```
/// use zklock::ConnectionState;
/// assert!(ConnectionState::Reconnected.is_connected());
/// assert!(!ConnectionState::Suspended.is_connected());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// The first successful connection.
    Connected,
    /// The connection was lost; the session may still be alive.
    Suspended,
    /// Connected again after `Suspended` or `Lost`.
    Reconnected,
    /// The session is (or must be taken as) expired.
    Lost,
    /// Connected to a read-only server (ZooKeeper).
    ReadOnly,
}

impl ConnectionState {
    /// Whether requests can be served in this state.
    pub fn is_connected(self) -> bool {
        matches!(self, Self::Connected | Self::Reconnected | Self::ReadOnly)
    }
}

/// A Client's connection state, judged by its backend's heartbeats as on ZooKeeper:
/// `Connected`, `Suspended` when the server stops answering (a failed heartbeat, or none
/// answered for half the session timeout), `Lost` once a whole session timeout has passed
/// since it last answered (every hold it kept for us may have been freed), `Reconnected` when
/// it answers again. Here are the state, its followers, and the lease on the server's last
/// answer it is judged by.
pub(crate) struct States {
    /// The backend, for the log.
    backend: &'static str,
    state: Mutex<ConnectionState>,
    /// How many states have been told (for listeners added since).
    told: Mutex<u64>,
    lease: LocalLease,
    channels: Mutex<Vec<Sender<ConnectionState>>>,
    listeners: std::sync::Arc<Listeners<ConnectionState>>,
    dispatch: Dispatch,
}

impl States {
    /// Connected, with the server's answer to a request sent at `sent` (the lease clock).
    pub(crate) fn new(
        backend: &'static str,
        ttl: Duration,
        sent: Duration,
        dispatch: Dispatch,
    ) -> States {
        let lease = LocalLease::new();
        lease.open_at(ttl, ttl / 2, sent);
        States {
            backend,
            state: Mutex::new(ConnectionState::Connected),
            told: Mutex::new(0),
            lease,
            channels: Mutex::default(),
            listeners: std::sync::Arc::default(),
            dispatch,
        }
    }

    pub(crate) fn state(&self) -> ConnectionState {
        *self.state.lock()
    }

    /// How long ago the request last answered was sent.
    pub(crate) fn since_heard(&self) -> Option<Duration> {
        self.lease.since_heard()
    }

    /// The server answered a request sent at `sent`.
    pub(crate) fn heard(&self, sent: Duration) {
        self.lease.heard_at(sent);
        if !self.state().is_connected() {
            self.change(ConnectionState::Reconnected);
        }
    }

    /// A heartbeat failed: the connection is gone or the server is silent.
    pub(crate) fn failed(&self) {
        if self.state().is_connected() {
            self.change(ConnectionState::Suspended);
        }
        self.judge();
    }

    /// Moves the state down by the time since the server last answered: `Suspended` past half
    /// a TTL, `Lost` past a whole one. (Only an answer moves it up.)
    pub(crate) fn judge(&self) {
        let health = self.lease.health();
        if self.state().is_connected() && health != LockHealth::Held {
            self.change(ConnectionState::Suspended);
        }
        if self.state() == ConnectionState::Suspended && health == LockHealth::Lost {
            self.change(ConnectionState::Lost);
        }
    }

    pub(crate) fn change(&self, next: ConnectionState) {
        let seq = {
            let mut state = self.state.lock();
            if *state == next {
                return;
            }
            *state = next;
            let mut told = self.told.lock();
            *told += 1;
            *told
        };
        tracing::debug!("zklock: {} connection {next:?}", self.backend);
        self.channels.lock().retain(|tx| tx.send(next).is_ok());
        let listeners = self.listeners.clone();
        (self.dispatch)(Box::new(move || listeners.call(seq, next)));
    }

    pub(crate) fn channel(&self) -> Receiver<ConnectionState> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.channels.lock().push(tx);
        Receiver::new(rx)
    }

    pub(crate) fn on_change(&self, f: impl FnMut(ConnectionState) + Send + 'static) -> u64 {
        let since = *self.told.lock();
        self.listeners.add(since, Box::new(f))
    }

    pub(crate) fn remove(&self, id: u64) -> bool {
        self.listeners.remove(id)
    }
}

/// `is_connected`, `connection_states`, `on_connection_state` and
/// `remove_connection_state_listener` for a Client type whose [`States`] are at
/// `self.$states`.
macro_rules! forward_connection_api {
    ($ty:ty, $($states:ident).+) => {
        impl $ty {
            /// Whether the server answers now (`Connected` or `Reconnected`).
            pub fn is_connected(&self) -> bool {
                self.$($states).+.state().is_connected()
            }

            /// A channel that receives every later connection state, in order.
            pub fn connection_states(&self) -> $crate::Receiver<$crate::ConnectionState> {
                self.$($states).+.channel()
            }

            /// Calls `f` with every later connection state, in order, on the Client's events
            /// thread (it must not block). Returns an id for
            /// [`remove_connection_state_listener`](Self::remove_connection_state_listener).
            pub fn on_connection_state(
                &self,
                f: impl FnMut($crate::ConnectionState) + Send + 'static,
            ) -> u64 {
                self.$($states).+.on_change(f)
            }

            /// Removes a listener; returns whether it was registered.
            pub fn remove_connection_state_listener(&self, id: u64) -> bool {
                self.$($states).+.remove(id)
            }
        }
    };
}
pub(crate) use forward_connection_api;
