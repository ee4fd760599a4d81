//! Lock health as the holder sees it: one hold's health cell, kept current by its keeper, and
//! the subscribers of a lock object that hear each change as a [`HealthEvent`].

use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::client::{Client, Listeners, LockHealth, Receiver};

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
    /// The hold's fencing token.
    pub fencing_token: u64,
}

impl PartialEq<LockHealth> for HealthEvent {
    fn eq(&self, other: &LockHealth) -> bool {
        self.health == *other
    }
}

/// The subscribers of one lock object: channels and removable callbacks.
#[derive(Default)]
pub(crate) struct HealthFeed {
    channels: Mutex<Vec<Sender<HealthEvent>>>,
    callbacks: Arc<Listeners<HealthEvent>>,
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

    /// A new hold's health cell (Held) and the report function its keeper calls: it updates
    /// the cell and tells every subscriber of a change, callbacks on the watcher thread. The
    /// keeper task owning the function ends with the hold, and the Client clone with it.
    pub(crate) fn hold(
        self: &Arc<Self>,
        client: &Client,
        node: &str,
        token: u64,
    ) -> (HealthCell, Arc<dyn Fn(LockHealth) + Send + Sync>) {
        let cell = Arc::new(Mutex::new(LockHealth::Held));
        let (health, feed, client, node) =
            (cell.clone(), self.clone(), client.clone(), node.to_owned());
        let report = move |new: LockHealth| {
            {
                let mut h = health.lock();
                if *h == new || *h == LockHealth::Lost {
                    return;
                }
                *h = new;
            }
            crate::metrics::health(crate::path::parent(&node), new);
            let event = HealthEvent {
                health: new,
                node: node.clone(),
                fencing_token: token,
            };
            feed.channels
                .lock()
                .retain(|tx| tx.send(event.clone()).is_ok());
            let callbacks = feed.callbacks.clone();
            client.on_watcher_thread(move || callbacks.call(u64::MAX, event));
        };
        (cell, Arc::new(report))
    }
}
