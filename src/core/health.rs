//! Lock health as the holder sees it: [`LockHealth`], one hold's health cell, kept current by
//! its backend, and the subscribers of a lock object that hear each change as a [`HealthEvent`].

use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::channel::Receiver;
use super::listeners::{Dispatch, Listeners};

/// The health of a lock this process holds, on any backend.
///
/// `health()` is computed when it is called, not only when the backend last heard something:
/// besides what it has heard (a disconnection, an expired session or lease, a deleted node), it
/// counts the time since the server last acknowledged the client (the local lease). A process
/// that stood still (SIGSTOP, a stalled VM) reads `Suspended` once that time passes the suspend
/// threshold and `Lost` past the server-side timeout that frees a silent holder (ZooKeeper's
/// session timeout), at once on waking, before any of its threads has noticed anything — a
/// whole machine suspended and resumed too (on Linux the lease runs on `CLOCK_BOOTTIME`, which
/// counts the time asleep). Check it right before each write to the resource, and pass the
/// fencing token along for what a check cannot catch.
///
/// On ZooKeeper the grant itself sees the node in our session; the node is then watched from at
/// most 5 ms later (a waiter's grant watches it already), so that a short hold costs no extra
/// request. A deletion of the node by someone else in those first milliseconds reads `Lost`
/// once that watch is set.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let mutex = zklock::InterProcessMutex::new(&client, "/locks/ledger")?;
/// let guard = mutex.lock()?;
/// if guard.health() == zklock::LockHealth::Held {
///     // write, with guard.fencing_token()
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockHealth {
    /// Held, known to be ours on the server (the lock node in our live session), heard from
    /// lately.
    Held,
    /// The connection is gone or has been silent (or this process stood still) for longer
    /// than the suspend threshold; whether we still hold it is unknown until it comes back.
    Suspended,
    /// Gone: the session expired, was given up, or has been silent for longer than the
    /// server-side timeout; or the lock node was deleted.
    Lost,
}

impl LockHealth {
    /// The lower-case name metrics label a change with.
    pub(crate) fn label(self) -> &'static str {
        match self {
            LockHealth::Held => "held",
            LockHealth::Suspended => "suspended",
            LockHealth::Lost => "lost",
        }
    }
}

/// The worse of two healths.
pub(crate) fn worst(a: LockHealth, b: LockHealth) -> LockHealth {
    let rank = |h| match h {
        LockHealth::Held => 0,
        LockHealth::Suspended => 1,
        LockHealth::Lost => 2,
    };
    if rank(a) >= rank(b) {
        a
    } else {
        b
    }
}

/// A change of one hold's health, with the node and fencing token of that hold, so that the
/// events of several holds through one lock object (one per thread) can be told apart.
///
/// Compares equal to a bare [`LockHealth`] of the same value.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let mutex = zklock::InterProcessMutex::new(&client, "/locks/ledger")?;
/// let events = mutex.health_events();
/// let guard = mutex.lock()?;
/// for event in events.try_iter() {
///     if event.fencing_token == guard.fencing_token() && event == zklock::LockHealth::Lost {
///         println!("{} is lost", event.node);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct HealthEvent {
    /// The hold's new health.
    pub health: LockHealth,
    /// The hold's lock node.
    pub node: String,
    /// The hold's fencing token; 0 for a PostgreSQL or MySQL (`GET_LOCK` mode) mutex hold
    /// whose token was never asked for (it is read from the server when first asked, and an
    /// event never waits for the server).
    pub fencing_token: u64,
}

impl PartialEq<LockHealth> for HealthEvent {
    fn eq(&self, other: &LockHealth) -> bool {
        self.health == *other
    }
}

/// The subscribers of one lock object: channels and removable callbacks; and, for a semaphore,
/// the cap (`max_hold`) of the leases it grants from now on, which their health ends.
#[derive(Default)]
pub(crate) struct HealthFeed {
    channels: Mutex<Vec<Sender<HealthEvent>>>,
    callbacks: Arc<Listeners<HealthEvent>>,
    max_hold: Mutex<Option<std::time::Duration>>,
}

/// One hold's last reported health; once Lost it stays Lost.
pub(crate) type HealthCell = Arc<Mutex<LockHealth>>;

impl HealthFeed {
    pub(crate) fn channel(&self) -> Receiver<HealthEvent> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.channels.lock().push(tx);
        Receiver::new(rx)
    }

    pub(crate) fn on_health(&self, f: impl FnMut(HealthEvent) + Send + 'static) -> u64 {
        self.callbacks.add(0, Box::new(f))
    }

    pub(crate) fn remove(&self, id: u64) -> bool {
        self.callbacks.remove(id)
    }

    /// Caps the holds granted from now on (checked: zero refused, past the clock none).
    pub(crate) fn set_max_hold(
        &self,
        max_hold: Option<std::time::Duration>,
    ) -> super::error::Result<()> {
        *self.max_hold.lock() = super::max_hold::check(max_hold)?;
        Ok(())
    }

    /// The cap of the holds granted now.
    pub(crate) fn max_hold(&self) -> Option<std::time::Duration> {
        *self.max_hold.lock()
    }

    /// A new hold's health cell (Held) and the report function its backend calls: it updates
    /// the cell and tells every subscriber of a change, callbacks through `dispatch`. `lock`
    /// names the lock in metrics.
    ///
    /// The hold's record owns the cell; the report function only refers to it. Once the record
    /// is dropped — the hold released, before its release is sent — reports are not news: a
    /// renewal that was in flight when the hold was released may find the lock already free,
    /// and that is no loss.
    pub(crate) fn hold(
        self: &Arc<Self>,
        dispatch: Dispatch,
        lock: &str,
        node: &str,
        token: impl Into<crate::core::token::Token>,
    ) -> (HealthCell, Arc<dyn Fn(LockHealth) + Send + Sync>) {
        let token = token.into();
        let cell = Arc::new(Mutex::new(LockHealth::Held));
        let (health, feed, lock, node) = (
            Arc::downgrade(&cell),
            self.clone(),
            lock.to_owned(),
            node.to_owned(),
        );
        let report = move |new: LockHealth| {
            {
                let Some(health) = health.upgrade() else {
                    return;
                };
                let mut h = health.lock();
                if *h == new || *h == LockHealth::Lost {
                    return;
                }
                *h = new;
            }
            crate::core::metrics::health(&lock, new.label());
            let event = HealthEvent {
                health: new,
                node: node.clone(),
                fencing_token: token.known(),
            };
            feed.channels
                .lock()
                .retain(|tx| tx.send(event.clone()).is_ok());
            let callbacks = feed.callbacks.clone();
            dispatch(Box::new(move || callbacks.call(u64::MAX, event)));
        };
        (cell, Arc::new(report))
    }
}

/// `health_events`, `on_health` and `remove_health_listener` for a lock type whose
/// [`HealthFeed`] is at `self.$feed` (a field, or a path of fields); `$thread` says where
/// callbacks run.
macro_rules! forward_health_api {
    ($ty:ty, $($feed:ident).+, $thread:literal) => {
        impl $ty {
            /// A channel of every later health change of the holds through this object, each
            /// naming its hold and fencing token (see [`HealthEvent`](crate::HealthEvent)).
            pub fn health_events(&self) -> $crate::Receiver<$crate::HealthEvent> {
                self.$($feed).+.channel()
            }

            #[doc = concat!(
                "Calls `f` on ", $thread, " at every later health change of a hold through ",
                "this object; it must not block. Returns an id for ",
                "[`remove_health_listener`](Self::remove_health_listener)."
            )]
            pub fn on_health(
                &self,
                f: impl FnMut($crate::HealthEvent) + Send + 'static,
            ) -> u64 {
                self.$($feed).+.on_health(f)
            }

            /// Removes a callback of [`on_health`](Self::on_health); `false` if it was not
            /// there.
            pub fn remove_health_listener(&self, id: u64) -> bool {
                self.$($feed).+.remove(id)
            }
        }
    };
}
pub(crate) use forward_health_api;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_is_the_worse() {
        use LockHealth::*;
        assert_eq!(worst(Held, Suspended), Suspended);
        assert_eq!(worst(Lost, Suspended), Lost);
        assert_eq!(worst(Held, Held), Held);
    }
}
