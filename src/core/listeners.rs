//! Listeners called in registration order, for connection states and lock health alike.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

thread_local! {
    static ON_LISTENER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread, for the rest of its life, as one that runs listeners and
/// callbacks (a backend's dispatch thread, e.g. a ZooKeeper Client's watcher thread).
pub(crate) fn become_listener_thread() {
    ON_LISTENER_THREAD.with(|f| f.set(true));
}

/// Whether the calling thread runs listeners: a wait there for something only that thread
/// delivers would never end, so blocking calls are refused or bounded on it.
pub(crate) fn on_listener_thread() -> bool {
    ON_LISTENER_THREAD.with(Cell::get)
}

/// Runs a listener call where the backend runs user code (never on its I/O thread).
pub(crate) type Dispatch = Arc<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>;

/// A callback for a backend's events thread.
pub(crate) type Event = Box<dyn FnOnce() + Send>;

/// Starts a backend's events thread, `name`: it runs the callbacks sent to it in order, until
/// `closed` is set and nothing is left to run, or every sender is gone. A Client that closes
/// sends it one empty callback after setting `closed`, so that it ends at once rather than at
/// its next poll.
pub(crate) fn start_events_thread(
    name: &str,
    closed: Arc<AtomicBool>,
) -> crate::core::error::Result<(crossbeam_channel::Sender<Event>, JoinHandle<()>)> {
    let (tx, rx) = crossbeam_channel::unbounded::<Event>();
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || loop {
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(f) => {
                    f();
                    if closed.load(Ordering::Acquire) && rx.is_empty() {
                        return;
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if closed.load(Ordering::Acquire) && rx.is_empty() {
                        return;
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
        })
        .map_err(|e| crate::core::error::Error::thread_start(name, &e))?;
    Ok((tx, thread))
}

type Listener<T> = Arc<Mutex<Box<dyn FnMut(T) + Send>>>;

/// Listeners called in registration order. Calls go to a snapshot of the list, taken without
/// holding its lock, so a listener may add or remove listeners (itself included).
pub(crate) struct Listeners<T> {
    /// (id, how many values had been emitted when it was added, listener)
    list: Mutex<Vec<(u64, u64, Listener<T>)>>,
    next_id: Mutex<u64>,
}

impl<T> Default for Listeners<T> {
    fn default() -> Self {
        Listeners {
            list: Mutex::new(Vec::new()),
            next_id: Mutex::new(0),
        }
    }
}

impl<T: Clone + std::fmt::Debug> Listeners<T> {
    /// Adds a listener for the values after the `since`-th; returns its id.
    pub(crate) fn add(&self, since: u64, f: Box<dyn FnMut(T) + Send>) -> u64 {
        let id = {
            let mut next = self.next_id.lock();
            *next += 1;
            *next
        };
        self.list.lock().push((id, since, Arc::new(Mutex::new(f))));
        id
    }

    pub(crate) fn remove(&self, id: u64) -> bool {
        let mut list = self.list.lock();
        let before = list.len();
        list.retain(|(i, _, _)| *i != id);
        list.len() != before
    }

    /// Calls every listener added before the `seq`-th value (one removed meanwhile is skipped).
    pub(crate) fn call(&self, seq: u64, value: T) {
        let snapshot: Vec<(u64, Listener<T>)> = self
            .list
            .lock()
            .iter()
            .filter(|(_, since, _)| seq > *since)
            .map(|(id, _, f)| (*id, f.clone()))
            .collect();
        for (id, f) in snapshot {
            if !self.list.lock().iter().any(|(i, _, _)| *i == id) {
                continue;
            }
            // A backend calls a list's listeners from one thread at a time: this lock is free.
            let mut f = f.lock();
            let v = value.clone();
            if catch_unwind(AssertUnwindSafe(|| (*f)(v))).is_err() {
                tracing::error!("a listener panicked on {value:?}");
            }
        }
    }
}
