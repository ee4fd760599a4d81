//! A lock waiter's parking slot: where an acquiring thread parks until its watch fires, the
//! connection state changes, or its deadline passes. The I/O thread wakes it for its watch
//! (a wake only bumps a counter and notifies a condvar); the watcher thread wakes it for every
//! state change. A waiter with no thread parked on it (a leader latch's) has a hook instead,
//! which every wake calls after the count is bumped.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::core::deadline::Deadline;
use crate::zookeeper::client::{Parked, Reread, WatchEvent, WatchEventKind};

/// A per-waiter parking slot. Wakes are counted, so a wake that lands between a waiter's check
/// and its park is never lost: the waiter parks only while the count is still what it saw.
#[derive(Default)]
pub(crate) struct Waiter {
    slot: Mutex<Slot>,
    cv: Condvar,
    /// Called on every wake, outside the slot's lock; it must not block.
    hook: Option<Hook>,
}

/// What a wake calls on a waiter that has no thread parked on it.
pub(crate) type Hook = Arc<dyn Fn() + Send + Sync>;

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

impl Waiter {
    /// A waiter whose wakes call `hook` (on the thread that wakes it).
    pub(crate) fn with_hook(hook: Hook) -> Waiter {
        Waiter {
            hook: Some(hook),
            ..Waiter::default()
        }
    }

    pub(crate) fn epoch(&self) -> Seen {
        let slot = self.slot.lock();
        Seen {
            wakes: slot.wakes,
            state_changes: slot.state_changes,
        }
    }

    /// Wakes for a connection-state change, or a cancel: the waiter looks again.
    pub(crate) fn wake(&self) {
        let mut slot = self.slot.lock();
        slot.wakes += 1;
        slot.state_changes += 1;
        self.cv.notify_all();
        drop(slot);
        self.call_hook();
    }

    /// Wakes for a fired watch.
    pub(crate) fn wake_watch(&self, event: WatchEvent) {
        let mut slot = self.slot.lock();
        slot.wakes += 1;
        slot.last_watch = Some((slot.wakes, event));
        self.cv.notify_all();
        drop(slot);
        self.call_hook();
    }

    /// Wakes for a fired data watch whose node was read again at once (`reread`).
    pub(crate) fn wake_reread(&self, event: WatchEvent, reread: Reread) {
        let mut slot = self.slot.lock();
        slot.wakes += 1;
        slot.reread = Some((slot.wakes, event.path.clone(), reread));
        slot.last_watch = Some((slot.wakes, event));
        self.cv.notify_all();
        drop(slot);
        self.call_hook();
    }

    fn call_hook(&self) {
        if let Some(hook) = &self.hook {
            hook();
        }
    }

    /// Whether it was woken after `seen`; does not park.
    pub(crate) fn woken_since(&self, seen: Seen) -> bool {
        self.slot.lock().wakes != seen.wakes
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

impl Parked for Waiter {
    fn state_changed(&self) {
        self.wake();
    }
}

/// What a fired watch tells a waiter, on the I/O thread.
pub(crate) fn tell(waiter: &Arc<Waiter>) -> Box<dyn FnOnce(WatchEvent) + Send> {
    let waiter = waiter.clone();
    Box::new(move |event| waiter.wake_watch(event))
}

/// What a fired rereading watch tells a waiter, on the I/O thread: the event, and on a data
/// change the node as read again right after it.
pub(crate) fn tell_reread(
    waiter: &Arc<Waiter>,
) -> Box<dyn FnMut(WatchEvent, Option<Reread>) + Send> {
    let waiter = waiter.clone();
    Box::new(move |event, reread| match reread {
        Some(reread) => waiter.wake_reread(event, reread),
        None => waiter.wake_watch(event),
    })
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
}
