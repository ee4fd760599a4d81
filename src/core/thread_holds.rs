//! Per-thread re-entrancy: which threads hold a lock through one lock object, and how many
//! times each. A backend's recipe keeps its hold (node, token, health) as `H`; the count is
//! the same for every backend. Curator's `InterProcessMutex` counts per thread the same way.

use std::collections::HashMap;
use std::thread::{self, ThreadId};

use parking_lot::Mutex;

use super::error::{Error, Result};

/// The holds of one lock object, one per holding thread.
pub(crate) struct ThreadHolds<H> {
    map: Mutex<HashMap<ThreadId, (u32, H)>>,
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
}

impl<H> ThreadHolds<H> {
    /// Counts one more hold if the calling thread holds already.
    pub(crate) fn reenter(&self) -> bool {
        match self.map.lock().get_mut(&thread::current().id()) {
            Some((count, _)) => {
                *count = count.saturating_add(1);
                true
            }
            None => false,
        }
    }

    /// The calling thread's first hold.
    pub(crate) fn insert(&self, hold: H) {
        self.map.lock().insert(thread::current().id(), (1, hold));
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
        Ok(map
            .remove(&me)
            .map_or(Detached::StillHeld, |(_, hold)| Detached::Released(hold)))
    }

    /// `f` of the calling thread's hold, if it holds.
    pub(crate) fn mine<T>(&self, f: impl FnOnce(&H) -> T) -> Option<T> {
        self.map
            .lock()
            .get(&thread::current().id())
            .map(|(_, h)| f(h))
    }

    /// Whether any thread holds.
    pub(crate) fn any(&self) -> bool {
        !self.map.lock().is_empty()
    }

    /// Whether the calling thread holds.
    pub(crate) fn mine_exists(&self) -> bool {
        self.map.lock().contains_key(&thread::current().id())
    }

    /// Every thread's hold, taken out (the lock object is going away).
    pub(crate) fn drain(&self) -> Vec<H> {
        self.map.lock().drain().map(|(_, (_, h))| h).collect()
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
}
