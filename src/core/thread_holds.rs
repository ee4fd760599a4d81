//! Per-thread re-entrancy: which threads hold a lock through one lock object, and how many
//! times each. A backend's recipe keeps its hold (node, token, health) as `H`; the count is
//! the same for every backend. Curator's `InterProcessMutex` counts per thread the same way.
//! A hold taken away by its `max_hold` leaves a mark in its thread's place, counted as the
//! hold was, so that the thread's releases (the last one answering that the hold was lost)
//! still find it.

use std::collections::HashMap;
use std::thread::{self, ThreadId};

use parking_lot::Mutex;

use super::error::{Error, Result};

/// The holds of one lock object, one per holding thread.
pub(crate) struct ThreadHolds<H> {
    map: Mutex<HashMap<ThreadId, (u32, Slot<H>)>>,
}

/// A thread's place: its hold, or the mark of a hold its cap took away (with the hold's id).
enum Slot<H> {
    Held(H),
    Capped(u64),
}

impl<H> Slot<H> {
    fn held(&self) -> Option<&H> {
        match self {
            Slot::Held(h) => Some(h),
            Slot::Capped(_) => None,
        }
    }
}

impl<H> Default for ThreadHolds<H> {
    fn default() -> Self {
        ThreadHolds {
            map: Mutex::new(HashMap::new()),
        }
    }
}

/// What one release by the calling thread did.
pub(crate) enum Detached<H> {
    /// An inner hold ended; the thread still holds.
    StillHeld,
    /// The outermost hold ended: here it is, for the backend to let go of.
    Released(H),
    /// The outermost hold ended, and its cap had taken it away already.
    Capped,
}

impl<H> ThreadHolds<H> {
    /// Counts one more hold if the calling thread holds already.
    pub(crate) fn reenter(&self) -> bool {
        match self.map.lock().get_mut(&thread::current().id()) {
            Some((count, Slot::Held(_))) => {
                *count = count.saturating_add(1);
                true
            }
            _ => false,
        }
    }

    /// The calling thread's first hold.
    pub(crate) fn insert(&self, hold: H) {
        (self.map.lock()).insert(thread::current().id(), (1, Slot::Held(hold)));
    }

    /// Takes out the hold `is` picks, leaving the mark of hold `id` in its thread's place:
    /// what its cap does. `None` if no thread has that hold (released meanwhile).
    pub(crate) fn cap(&self, id: u64, is: impl Fn(&H) -> bool) -> Option<(ThreadId, H)> {
        let mut map = self.map.lock();
        let (thread, _) = map
            .iter()
            .find(|(_, (_, slot))| slot.held().is_some_and(&is))?;
        let thread = *thread;
        let (count, slot) = map.remove(&thread)?;
        map.insert(thread, (count, Slot::Capped(id)));
        match slot {
            Slot::Held(hold) => Some((thread, hold)),
            Slot::Capped(_) => None,
        }
    }

    /// The id of the calling thread's hold that its cap took away, if that is what it has.
    pub(crate) fn capped(&self) -> Option<u64> {
        match self.map.lock().get(&thread::current().id()) {
            Some((_, Slot::Capped(id))) => Some(*id),
            _ => None,
        }
    }

    /// `f` of thread `thread`'s hold, if it holds.
    pub(crate) fn of<T>(&self, thread: ThreadId, f: impl FnOnce(&H) -> T) -> Option<T> {
        let map = self.map.lock();
        map.get(&thread).and_then(|(_, slot)| slot.held()).map(f)
    }

    /// Ends one hold of the calling thread; [`Error::NotOwner`] if it holds none.
    pub(crate) fn detach(&self) -> Result<Detached<H>> {
        let me = thread::current().id();
        let mut map = self.map.lock();
        let (count, _) = map.get_mut(&me).ok_or(Error::NotOwner)?;
        *count -= 1;
        if *count > 0 {
            return Ok(Detached::StillHeld);
        }
        Ok(match map.remove(&me) {
            Some((_, Slot::Held(hold))) => Detached::Released(hold),
            Some((_, Slot::Capped(_))) => Detached::Capped,
            None => Detached::StillHeld,
        })
    }

    /// `f` of the calling thread's hold, if it holds.
    pub(crate) fn mine<T>(&self, f: impl FnOnce(&H) -> T) -> Option<T> {
        self.of(thread::current().id(), f)
    }

    /// `f` of the calling thread's hold, changing it, if it holds.
    pub(crate) fn mine_mut<T>(&self, f: impl FnOnce(&mut H) -> T) -> Option<T> {
        match self.map.lock().get_mut(&thread::current().id()) {
            Some((_, Slot::Held(hold))) => Some(f(hold)),
            _ => None,
        }
    }

    /// Whether any thread holds.
    pub(crate) fn any(&self) -> bool {
        (self.map.lock().values()).any(|(_, slot)| slot.held().is_some())
    }

    /// Whether the calling thread holds.
    pub(crate) fn mine_exists(&self) -> bool {
        self.mine(|_| ()).is_some()
    }

    /// Every thread's hold, taken out (the lock object is going away).
    pub(crate) fn drain(&self) -> Vec<H> {
        let mut map = self.map.lock();
        let held = map.drain().filter_map(|(_, (_, slot))| match slot {
            Slot::Held(hold) => Some(hold),
            Slot::Capped(_) => None,
        });
        held.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_count_per_thread_and_release_in_turn() {
        let holds = ThreadHolds::default();
        assert!(!holds.reenter());
        assert!(matches!(holds.detach(), Err(Error::NotOwner)));
        holds.insert("node");
        assert!(holds.reenter());
        assert!(holds.any() && holds.mine_exists());
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!holds.mine_exists(), "another thread holds nothing");
                assert!(matches!(holds.detach(), Err(Error::NotOwner)));
            });
        });
        assert!(matches!(holds.detach(), Ok(Detached::StillHeld)));
        assert_eq!(holds.mine(|h| *h), Some("node"));
        assert!(matches!(holds.detach(), Ok(Detached::Released("node"))));
        assert!(!holds.any());
    }

    #[test]
    fn a_capped_hold_leaves_its_mark_until_its_last_release() {
        let holds = ThreadHolds::default();
        holds.insert("node");
        assert!(holds.reenter());
        assert!(holds.cap(7, |h| *h == "other").is_none());
        let (thread, hold) = holds.cap(7, |h| *h == "node").unwrap();
        assert_eq!((thread, hold), (std::thread::current().id(), "node"));
        assert!(holds.cap(7, |h| *h == "node").is_none(), "taken once");
        assert_eq!(holds.capped(), Some(7));
        assert!(!holds.reenter() && !holds.any() && !holds.mine_exists());
        assert!(matches!(holds.detach(), Ok(Detached::StillHeld)));
        assert!(matches!(holds.detach(), Ok(Detached::Capped)));
        assert_eq!(holds.capped(), None);
        assert!(matches!(holds.detach(), Err(Error::NotOwner)));
    }
}
