//! A Redis Client's connection state, as on ZooKeeper: `Connected`, `Suspended` when the server
//! stops answering (a failed call of the keeper's, or no answer for half a TTL), `Lost` once a
//! whole TTL has passed since the server last answered (every hold it kept for us may have
//! expired), `Reconnected` when it answers again. The keeper thread judges it: it renews the
//! holds or, without holds, sends a `PING` at the same interval.

use std::time::Duration;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::core::channel::Receiver;
use crate::core::connection::ConnectionState;
use crate::core::health::LockHealth;
use crate::core::lease::LocalLease;
use crate::core::listeners::{Dispatch, Listeners};

/// The state, its followers, and the lease on the server's last answer it is judged by.
pub(crate) struct States {
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
    pub(crate) fn new(ttl: Duration, sent: Duration, dispatch: Dispatch) -> States {
        let lease = LocalLease::new();
        lease.open_at(ttl, ttl / 2, sent);
        States {
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

    /// The server answered a request sent at `sent`.
    pub(crate) fn heard(&self, sent: Duration) {
        self.lease.heard_at(sent);
        if !self.state().is_connected() {
            self.change(ConnectionState::Reconnected);
        }
    }

    /// A request of the keeper's failed: the connection is gone or the server is silent.
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

    fn change(&self, next: ConnectionState) {
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
        tracing::debug!("zklock: Redis connection {next:?}");
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
