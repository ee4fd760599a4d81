//! The watcher thread: one per Client. It receives user watches' events and connection-state
//! changes over a crossbeam channel, hands each event to its [`Watch`](crate::Watch), wakes every
//! registered waiter on a state change, and runs state listeners in order. (A recipe's waiter is
//! woken for its watch by the I/O thread itself: that wake only bumps a counter.) Nothing here does ZooKeeper I/O, so a slow
//! listener delays only other listeners and wake-ups, never the session (CURATOR-716).
//!
//! Listener lists are snapshotted before anything is called, so a listener may add or remove
//! listeners. A zklock call made on this thread that would park until an event arrives fails at
//! once with [`Error::OnWatcherThread`](crate::Error::OnWatcherThread): only this thread could
//! deliver that event.

use std::cell::Cell;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use super::types::{ConnectionState, Stat, WatchEvent, WatchEventKind};
use crate::core::deadline::Deadline;
use crate::core::error::Result;
use crate::core::listeners::Listeners;

/// A watched node read again (with a new watch) as soon as its data changed, before its waiter
/// was woken.
pub(crate) struct Reread {
    /// Its stat and data; `None` if it was gone by then.
    pub(crate) node: Result<Option<(Stat, Vec<u8>)>>,
    /// Its parent's stat, when asked for, read together with it (`None` if that failed).
    pub(crate) parent: Option<Stat>,
}

/// A per-waiter parking slot. Wakes are counted, so a wake that lands between a waiter's check
/// and its park is never lost: the waiter parks only while the count is still what it saw.
#[derive(Default)]
pub(crate) struct Waiter {
    slot: Mutex<Slot>,
    cv: Condvar,
}

#[derive(Default)]
struct Slot {
    wakes: u64,
    state_changes: u64,
    /// The last watch event delivered to this waiter, with the wake count it made.
    last_watch: Option<(u64, WatchEvent)>,
    /// The last re-read of a watched node, with the wake count that delivered it.
    reread: Option<(u64, String, Reread)>,
}

/// What a waiter saw before parking; compare after waking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    wakes: u64,
    state_changes: u64,
}

#[allow(dead_code)] // the lock recipes park here
impl Waiter {
    pub(crate) fn epoch(&self) -> Seen {
        let slot = self.slot.lock();
        Seen {
            wakes: slot.wakes,
            state_changes: slot.state_changes,
        }
    }

    /// Wakes for a connection-state change.
    pub(crate) fn wake(&self) {
        let mut slot = self.slot.lock();
        slot.wakes += 1;
        slot.state_changes += 1;
        self.cv.notify_all();
    }

    /// Wakes for a fired watch.
    pub(crate) fn wake_watch(&self, event: WatchEvent) {
        let mut slot = self.slot.lock();
        slot.wakes += 1;
        slot.last_watch = Some((slot.wakes, event));
        self.cv.notify_all();
    }

    /// Wakes for a fired data watch whose node was read again at once (`reread`).
    pub(crate) fn wake_reread(&self, event: WatchEvent, reread: Reread) {
        let mut slot = self.slot.lock();
        slot.wakes += 1;
        slot.reread = Some((slot.wakes, event.path.clone(), reread));
        slot.last_watch = Some((slot.wakes, event));
        self.cv.notify_all();
    }

    /// Parks until woken after `seen` or until the deadline; returns whether it was woken.
    pub(crate) fn wait(&self, seen: Seen, deadline: Deadline) -> bool {
        let mut slot = self.slot.lock();
        while slot.wakes == seen.wakes {
            match deadline.instant() {
                None => self.cv.wait(&mut slot),
                Some(at) => {
                    if self.cv.wait_until(&mut slot, at).timed_out() {
                        return slot.wakes != seen.wakes;
                    }
                }
            }
        }
        true
    }

    /// The re-read of `path` delivered since `seen` (provided no connection-state change
    /// happened meanwhile), with a `Seen` as of its delivery: an event of the watch it set is
    /// after it.
    pub(crate) fn reread_since(&self, seen: Seen, path: &str) -> Option<(Seen, Reread)> {
        let mut slot = self.slot.lock();
        if slot.state_changes != seen.state_changes {
            return None;
        }
        match slot.reread.take() {
            Some((wake, p, reread)) if wake > seen.wakes && p == path => Some((
                Seen {
                    wakes: wake,
                    state_changes: seen.state_changes,
                },
                reread,
            )),
            other => {
                slot.reread = other;
                None
            }
        }
    }

    /// What a watch on `path` reported since `seen`, provided no connection-state change
    /// happened meanwhile (so the session is the same and nothing was missed).
    pub(crate) fn watched_since(&self, seen: Seen, path: &str) -> Option<WatchEventKind> {
        let slot = self.slot.lock();
        if slot.state_changes != seen.state_changes {
            return None;
        }
        match &slot.last_watch {
            Some((wake, e)) if *wake > seen.wakes && e.path == path => Some(e.kind),
            _ => None,
        }
    }
}

/// Where a fired watch goes.
pub(crate) enum WatchTarget {
    /// A user's [`Watch`](crate::Watch).
    Channel(Sender<WatchEvent>),
    /// A parked waiter of a recipe.
    Waiter(Arc<Waiter>),
    /// A parked waiter of a recipe that, on a data change, gets the node read again (with a
    /// new watch) by the I/O thread before it is woken, and with `count` its parent's stat too.
    Rereading { waiter: Arc<Waiter>, count: bool },
}

thread_local! {
    static ON_WATCHER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is a Client's watcher thread (it runs every listener and callback).
pub(crate) fn is_watcher_thread() -> bool {
    ON_WATCHER_THREAD.with(Cell::get)
}

pub(crate) enum Message {
    /// The n-th state emitted, counting from 1.
    State(u64, ConnectionState),
    /// A fired watch for a user's [`Watch`](crate::Watch) (a recipe's waiter is woken on the
    /// I/O thread directly).
    Watch(Sender<WatchEvent>, WatchEvent),
    /// A user callback that must not run on the I/O thread.
    Run(Box<dyn FnOnce() + Send>),
    Stop,
}

/// Registry of waiters and listeners, shared by the Client and its watcher thread.
#[derive(Default)]
pub(crate) struct Registry {
    waiters: Mutex<HashMap<u64, Weak<Waiter>>>,
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

    /// Registers a waiter for state-change wake-ups until the returned guard drops.
    pub(crate) fn register(self: &Arc<Self>, waiter: &Arc<Waiter>) -> Registration {
        let id = self.next_id();
        self.waiters.lock().insert(id, Arc::downgrade(waiter));
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
        let waiters: Vec<Arc<Waiter>> = self
            .waiters
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        waiters.iter().for_each(|w| w.wake());
    }

    fn deliver_state(&self, seq: u64, state: ConnectionState) {
        self.wake_all();
        self.channels
            .lock()
            .retain(|(since, tx)| seq <= *since || tx.send(state).is_ok());
        self.callbacks.call(seq, state);
    }
}

/// Removes a waiter from the registry on drop.
pub(crate) struct Registration {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.waiters.lock().remove(&self.id);
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
    ON_WATCHER_THREAD.with(|f| f.set(true));
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
    use std::time::Duration;

    #[test]
    fn a_wake_before_the_park_is_not_lost() {
        let w = Waiter::default();
        let seen = w.epoch();
        w.wake();
        assert!(w.wait(seen, Deadline::after(Duration::from_secs(30))));
        let seen = w.epoch();
        assert!(!w.wait(seen, Deadline::after(Duration::from_millis(10))));
        let deleted = |p: &str| WatchEvent {
            kind: WatchEventKind::NodeDeleted,
            path: p.into(),
        };
        w.wake_watch(deleted("/l/a"));
        assert_eq!(
            w.watched_since(seen, "/l/a"),
            Some(WatchEventKind::NodeDeleted)
        );
        assert_eq!(w.watched_since(seen, "/l/b"), None);
        assert_eq!(
            w.watched_since(w.epoch(), "/l/a"),
            None,
            "only events after `seen` count"
        );
        let changed = |p: &str| WatchEvent {
            kind: WatchEventKind::NodeDataChanged,
            path: p.into(),
        };
        let gone = || Reread {
            node: Ok(None),
            parent: None,
        };
        w.wake_reread(changed("/l/a"), gone());
        let (then, _) = w.reread_since(seen, "/l/a").expect("delivered");
        assert_eq!(then, w.epoch(), "a Seen as of the delivery");
        w.wake_reread(changed("/l/a"), gone());
        w.wake();
        assert!(
            w.reread_since(seen, "/l/a").is_none(),
            "a state change voids the reread"
        );
        assert!(
            w.watched_since(seen, "/l/a").is_none(),
            "a state change voids the shortcut"
        );
    }

    #[test]
    fn state_changes_wake_registered_waiters_only_while_registered() {
        let registry = Arc::new(Registry::default());
        let w = Arc::new(Waiter::default());
        let reg = registry.register(&w);
        let seen = w.epoch();
        registry.deliver_state(1, ConnectionState::Suspended);
        assert_ne!(w.epoch(), seen);
        drop(reg);
        let seen = w.epoch();
        registry.deliver_state(2, ConnectionState::Reconnected);
        assert_eq!(w.epoch(), seen);
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
