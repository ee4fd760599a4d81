//! The watcher thread: one per Client. It receives user watches' events and connection-state
//! changes over a crossbeam channel, hands each event to its [`Watch`](crate::zookeeper::Watch), and runs
//! state listeners in order. (The crate's own watches are told on the I/O thread itself, and
//! everything parked on the Client is woken there on a state change.) Nothing here does
//! ZooKeeper I/O, so a slow listener delays only other listeners and `Watch` deliveries, never
//! the session (CURATOR-716) nor anything parked on the Client.
//!
//! Listener lists are snapshotted before anything is called, so a listener may add or remove
//! listeners. A zklock call made on this thread that would park until an event arrives fails at
//! once with [`Error::OnWatcherThread`](crate::Error::OnWatcherThread): only this thread could
//! deliver that event.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::types::{ConnectionState, Stat, WatchEvent};
use crate::core::error::Result;
use crate::core::listeners::Listeners;

/// A watched node read again (with a new watch) as soon as its data changed, on the I/O
/// thread, before the watch's target was told.
pub(crate) struct Reread {
    /// Its stat and data; `None` if it was gone by then.
    pub(crate) node: Result<Option<(Stat, Vec<u8>)>>,
    /// Its parent's stat, when asked for, read together with it (`None` if that failed).
    pub(crate) parent: Option<Stat>,
}

/// Something parked on the Client that every connection-state change wakes, so that it looks
/// again (the lock recipes' parked callers).
pub(crate) trait Parked: Send + Sync {
    /// Called on the I/O thread, right after the Client records a connection-state change;
    /// must not block.
    fn state_changed(&self);
}

/// Where a fired watch goes.
pub(crate) enum WatchTarget {
    /// A user's [`Watch`](crate::zookeeper::Watch), through the watcher thread.
    Channel(Sender<WatchEvent>),
    /// Code of the crate's own, called on the I/O thread with the event; it must not block.
    Call(Box<dyn FnOnce(WatchEvent) + Send>),
    /// Code of the crate's own, called on the I/O thread: on a data change with the node read
    /// again (with a new watch, which goes on to the same code) and, with `parent`, its
    /// parent's stat read right behind it in the same round trip; on any other event with the
    /// event alone, which ends the watch. It must not block.
    Reading {
        parent: bool,
        deliver: Box<dyn FnMut(WatchEvent, Option<Reread>) + Send>,
    },
}

/// Whether the calling thread is a Client's watcher thread (it runs every listener and callback).
pub(crate) fn is_watcher_thread() -> bool {
    crate::core::listeners::on_listener_thread()
}

pub(crate) enum Message {
    /// The n-th state emitted, counting from 1.
    State(u64, ConnectionState),
    /// A fired watch for a user's [`Watch`](crate::zookeeper::Watch) (the crate's own watches are told
    /// on the I/O thread directly).
    Watch(Sender<WatchEvent>, WatchEvent),
    /// A user callback that must not run on the I/O thread.
    Run(Box<dyn FnOnce() + Send>),
    Stop,
}

/// Registry of parked callers and listeners, shared by the Client and its watcher thread.
#[derive(Default)]
pub(crate) struct Registry {
    parked: Mutex<HashMap<u64, Weak<dyn Parked>>>,
    next_id: Mutex<u64>,
    callbacks: Listeners<ConnectionState>,
    channels: Mutex<Vec<(u64, Sender<ConnectionState>)>>,
}

impl Registry {
    fn next_id(&self) -> u64 {
        let mut id = self.next_id.lock();
        *id += 1;
        *id
    }

    /// Registers `parked` for state-change wake-ups until the returned guard drops.
    pub(crate) fn register(self: &Arc<Self>, parked: Arc<dyn Parked>) -> Registration {
        let id = self.next_id();
        self.parked.lock().insert(id, Arc::downgrade(&parked));
        Registration {
            registry: self.clone(),
            id,
        }
    }

    /// Adds a listener for the states after the `since`-th.
    pub(crate) fn add_callback(
        &self,
        since: u64,
        f: Box<dyn FnMut(ConnectionState) + Send>,
    ) -> u64 {
        self.callbacks.add(since, f)
    }

    pub(crate) fn remove_callback(&self, id: u64) -> bool {
        self.callbacks.remove(id)
    }

    pub(crate) fn add_channel(&self, since: u64, tx: Sender<ConnectionState>) {
        self.channels.lock().push((since, tx));
    }

    pub(crate) fn wake_all(&self) {
        let parked: Vec<Arc<dyn Parked>> = self
            .parked
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        parked.iter().for_each(|p| p.state_changed());
    }

    fn deliver_state(&self, seq: u64, state: ConnectionState) {
        self.channels
            .lock()
            .retain(|(since, tx)| seq <= *since || tx.send(state).is_ok());
        self.callbacks.call(seq, state);
    }
}

/// Removes a parked caller from the registry on drop.
pub(crate) struct Registration {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.parked.lock().remove(&self.id);
    }
}

pub(crate) struct WatcherThread {
    pub(crate) tx: Sender<Message>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl WatcherThread {
    pub(crate) fn start(name: String, registry: Arc<Registry>) -> std::io::Result<WatcherThread> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = thread::Builder::new()
            .name(name)
            .spawn(move || run(rx, registry))?;
        Ok(WatcherThread {
            tx,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Lets the thread deliver what was queued before, then end by itself; returns at once.
    pub(crate) fn detach(&self) {
        let _ = self.tx.send(Message::Stop);
        drop(self.thread.lock().take());
    }

    /// Delivers what was queued before, then ends the thread and joins it (unless called from it).
    pub(crate) fn shutdown(&self) {
        let _ = self.tx.send(Message::Stop);
        let handle = self.thread.lock().take();
        if let Some(handle) = handle {
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

fn run(rx: Receiver<Message>, registry: Arc<Registry>) {
    crate::core::listeners::become_listener_thread();
    for message in rx {
        match message {
            Message::State(seq, state) => registry.deliver_state(seq, state),
            Message::Watch(tx, event) => {
                let _ = tx.send(event);
            }
            Message::Run(f) => {
                if catch_unwind(AssertUnwindSafe(f)).is_err() {
                    tracing::error!("a lock-health or revocation listener panicked");
                }
            }
            Message::Stop => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Parked for Count {
        fn state_changed(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn state_changes_wake_the_parked_only_while_registered() {
        let registry = Arc::new(Registry::default());
        let parked = Arc::new(Count::default());
        let reg = registry.register(parked.clone());
        registry.wake_all();
        assert_eq!(parked.0.load(Ordering::SeqCst), 1);
        drop(reg);
        registry.wake_all();
        assert_eq!(parked.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn listeners_get_states_in_order_and_a_panicking_one_does_not_stop_others() {
        let registry = Arc::new(Registry::default());
        let (tx, rx) = crossbeam_channel::unbounded();
        registry.add_channel(0, tx);
        let id = registry.add_callback(0, Box::new(|_| panic!("listener bug")));
        let watcher = WatcherThread::start("zklock-test-watcher".into(), registry.clone()).unwrap();
        // A channel added after the first state gets only the later ones.
        let (late_tx, late_rx) = crossbeam_channel::unbounded();
        registry.add_channel(1, late_tx);
        let states = [
            ConnectionState::Connected,
            ConnectionState::Suspended,
            ConnectionState::Lost,
        ];
        for (i, s) in states.into_iter().enumerate() {
            watcher.tx.send(Message::State(i as u64 + 1, s)).unwrap();
        }
        let got: Vec<_> = (0..3)
            .map(|_| rx.recv_timeout(Duration::from_secs(30)).unwrap())
            .collect();
        assert_eq!(
            got,
            [
                ConnectionState::Connected,
                ConnectionState::Suspended,
                ConnectionState::Lost
            ]
        );
        assert!(registry.remove_callback(id));
        watcher.shutdown();
        let late: Vec<_> = late_rx.try_iter().collect();
        assert_eq!(late, [ConnectionState::Suspended, ConnectionState::Lost]);
        assert!(watcher.thread.lock().is_none());
    }
}
