//! The receiving end of zklock's notification channels (connection states, health events,
//! leadership changes, watch events), so that no foreign channel type is part of the API.

use std::sync::mpsc::{RecvError, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use super::listeners::on_listener_thread;

/// Where zklock delivers a stream of notifications: [`Client::connection_states`], a lock's
/// `health_events()`, [`LeaderLatch::changes`], a [`Leadership`]'s `cancelled()`. Unbounded;
/// each receiver gets every value sent after it was made. Clones share one queue (a value goes
/// to one of them). The errors are `std::sync::mpsc`'s: `Disconnected` once the sender is gone
/// (the Client closed, the lock or latch dropped) and the queue is empty.
///
/// # On a listener thread
/// A listener or callback (a connection-state listener, a health or revocation callback, a
/// latch's listener) runs on the Client's watcher thread, which delivers most of these values
/// itself: a wait there could wait for itself forever. So there `recv`, `recv_timeout`,
/// `recv_deadline` and `iter` do not wait: they give what is queued, else their error at once
/// (logged). Hand the work to another thread to wait.
///
/// [`Client::connection_states`]: crate::Client::connection_states
/// [`LeaderLatch::changes`]: crate::LeaderLatch::changes
/// [`Leadership`]: crate::Leadership
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use zklock::{Client, ConnectionState};
///
/// # fn main() -> zklock::Result<()> {
/// let client = Client::connect("127.0.0.1:2181")?;
/// let states = client.connection_states();
/// match states.recv_timeout(Duration::from_secs(30)) {
///     Ok(ConnectionState::Lost) => println!("session lost; a new one is being opened"),
///     Ok(other) => println!("{other:?}"),
///     Err(_) => println!("nothing happened"),
/// }
/// for state in states.try_iter() {
///     println!("also {state:?}");
/// }
/// # Ok(()) }
/// ```
pub struct Receiver<T>(crossbeam_channel::Receiver<T>);

impl<T> Receiver<T> {
    pub(crate) fn new(rx: crossbeam_channel::Receiver<T>) -> Self {
        Receiver(rx)
    }

    /// Blocks until a value arrives; `Err` once the sender is gone and nothing is left.
    ///
    /// On a listener thread (see [the type](Receiver)) it does not wait: a value queued
    /// already, else `Err` at once.
    pub fn recv(&self) -> Result<T, RecvError> {
        if on_listener_thread() {
            return self.refuse_wait().map_err(|_| RecvError);
        }
        self.0.recv().map_err(|_| RecvError)
    }

    /// Waits up to `timeout` for a value (on a listener thread, not at all).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        if on_listener_thread() {
            return self.refuse_wait();
        }
        self.0.recv_timeout(timeout).map_err(|e| match e {
            crossbeam_channel::RecvTimeoutError::Timeout => RecvTimeoutError::Timeout,
            crossbeam_channel::RecvTimeoutError::Disconnected => RecvTimeoutError::Disconnected,
        })
    }

    /// Waits until `deadline` for a value.
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.recv_timeout(deadline.saturating_duration_since(Instant::now()))
    }

    /// A value if one is waiting; never blocks.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.0.try_recv().map_err(|e| match e {
            crossbeam_channel::TryRecvError::Empty => TryRecvError::Empty,
            crossbeam_channel::TryRecvError::Disconnected => TryRecvError::Disconnected,
        })
    }

    /// Blocks for each value in turn until the sender is gone (on a listener thread, yields
    /// what is queued and ends).
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(move || self.recv().ok())
    }

    /// What a wait on a listener thread gets: a queued value, else an error at once. The
    /// value it would wait for may only come from this very thread.
    fn refuse_wait(&self) -> Result<T, RecvTimeoutError> {
        self.0.try_recv().map_err(|e| {
            tracing::error!(
                "a blocking receive was made from a listener or callback, where it would wait \
                 for itself: it returns at once; hand the work to another thread"
            );
            match e {
                crossbeam_channel::TryRecvError::Empty => RecvTimeoutError::Timeout,
                crossbeam_channel::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            }
        })
    }

    /// The values waiting now; never blocks.
    pub fn try_iter(&self) -> impl Iterator<Item = T> + '_ {
        self.0.try_iter()
    }

    /// How many values are waiting.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no value is waiting.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        Receiver(self.0.clone())
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("waiting", &self.0.len())
            .finish()
    }
}
