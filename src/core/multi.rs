//! InterProcessMultiLock: all of several locks of any backend, or none.

use std::time::Instant;

use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::lock::{forward_lock_api, Lock, Release, Sealed};

/// Curator's `InterProcessMultiLock`: acquires every lock of a list, in order, or none.
///
/// Differences from Curator, on purpose: one deadline covers the whole acquisition (Curator gives
/// each lock the full timeout), and [`release`](InterProcessMultiLock::release) releases every
/// lock in reverse order, trying all of them before it reports the first failure.
///
/// # Deadlocks
/// `InterProcessMultiLock::new` (ZooKeeper paths) takes each path once (a path named twice
/// would wait for itself) and in one order, sorted, whatever order they are given in: two
/// zklock processes naming the same paths in different orders cannot deadlock each other.
/// (Curator takes them in the order given: a Curator process should name them sorted too.)
/// [`from_locks`](InterProcessMultiLock::from_locks) takes its locks in the order given, as
/// they are: give each lock once, in an order every process agrees on. It takes locks of any
/// backend (e.g. several `RedisMutex`es), each as a `Box<dyn Lock>`.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let both = zklock::InterProcessMultiLock::new(&client, &["/locks/from", "/locks/to"])?;
/// if both.acquire_timeout(Duration::from_secs(5))? {
///     // ... move money ...
///     both.release()?;
/// }
/// # Ok(()) }
/// ```
pub struct InterProcessMultiLock {
    locks: Vec<Box<dyn Lock>>,
}

impl std::fmt::Debug for InterProcessMultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessMultiLock")
            .field("locks", &self.locks.len())
            .finish()
    }
}

impl InterProcessMultiLock {
    /// Any locks of zklock, of any backend, acquired in this order.
    pub fn from_locks(locks: Vec<Box<dyn Lock>>) -> Result<InterProcessMultiLock> {
        if locks.is_empty() {
            return Err(Error::invalid("a multi-lock needs at least one lock"));
        }
        Ok(InterProcessMultiLock { locks })
    }

    /// Whether every one of the locks is held in this process through its object (Curator's
    /// answer: a multi-lock is acquired only when all its locks are).
    pub fn is_acquired_in_this_process(&self) -> bool {
        self.locks.iter().all(|l| l.acquired_here())
    }

    fn acquire_all(&self, until: Option<Instant>) -> Result<bool> {
        let mut held = 0;
        let outcome = (|| {
            for lock in &self.locks {
                let got = lock.acquire_until(until);
                if !got? {
                    return Ok(false);
                }
                held += 1;
            }
            Ok(true)
        })();
        if !matches!(outcome, Ok(true)) {
            for lock in self.locks[..held].iter().rev() {
                if let Err(e) = lock.release_as(Release::Background) {
                    tracing::warn!("rolling back a multi-lock: {e}");
                }
            }
        }
        outcome
    }

    fn release_all(&self, how: Release) -> Result<()> {
        let mut first = Ok(());
        for lock in self.locks.iter().rev() {
            if let Err(e) = lock.release_as(how) {
                first = first.and(Err(e));
            }
        }
        first
    }
}

forward_lock_api!(InterProcessMultiLock);

impl Sealed for InterProcessMultiLock {
    /// One deadline for all the locks; a failure releases those taken, in reverse order.
    fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
        self.acquire_all(until)
    }

    /// Every lock in reverse order; the first failure is reported after trying them all.
    fn release_as(&self, how: Release) -> Result<()> {
        self.release_all(how)
    }

    fn cancel(&self) {
        self.locks.iter().for_each(|l| l.cancel_waiters())
    }

    /// Every lock's: the multi-lock's holds are its locks' holds, each capped from its own
    /// grant (the first granted is let go of first; the multi-lock then reads `Lost`).
    fn cap_holds(&self, max_hold: Option<std::time::Duration>) -> Result<()> {
        self.locks.iter().try_for_each(|l| l.cap_holds(max_hold))
    }

    fn acquired_here(&self) -> bool {
        self.is_acquired_in_this_process()
    }

    /// The first lock's hold's: every lock is taken and let go of together.
    fn hold_id(&self) -> Option<u64> {
        self.locks[0].hold_id()
    }

    /// The shortest of its locks' bounds: one deadline covers every release of a drop.
    fn drop_bound(&self) -> std::time::Duration {
        let bounds = self.locks.iter().map(|l| l.drop_bound());
        bounds.min().unwrap_or(crate::core::lock::DROP_BOUND)
    }
}

impl Lock for InterProcessMultiLock {
    /// The first lock's token.
    fn fencing_token(&self) -> Option<u64> {
        self.locks[0].fencing_token()
    }

    /// The worst health among the locks.
    fn health(&self) -> Option<LockHealth> {
        let all: Option<Vec<LockHealth>> = self.locks.iter().map(|l| l.health()).collect();
        let all = all?;
        [LockHealth::Lost, LockHealth::Suspended, LockHealth::Held]
            .into_iter()
            .find(|h| all.contains(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::Arc;
    use std::time::Duration;

    /// Records the timeouts it is given; takes `delay` to acquire; may refuse or fail.
    struct Probe {
        delay: Duration,
        grant: bool,
        fail_release: bool,
        log: Arc<Mutex<Vec<String>>>,
        name: &'static str,
    }

    impl Sealed for Probe {
        fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
            let Some(until) = until else {
                self.log.lock().push(format!("{} acquire", self.name));
                return Ok(true);
            };
            let timeout = until.saturating_duration_since(Instant::now());
            self.log
                .lock()
                .push(format!("{} timeout {}", self.name, timeout.as_millis()));
            std::thread::sleep(self.delay.min(timeout));
            Ok(self.grant)
        }
        fn release_as(&self, _how: Release) -> Result<()> {
            self.log.lock().push(format!("{} release", self.name));
            if self.fail_release {
                Err(Error::LockLost)
            } else {
                Ok(())
            }
        }
        fn cancel(&self) {}
        fn cap_holds(&self, _max_hold: Option<Duration>) -> Result<()> {
            Ok(())
        }
        fn acquired_here(&self) -> bool {
            false
        }
        fn hold_id(&self) -> Option<u64> {
            None
        }
    }

    impl Lock for Probe {
        fn fencing_token(&self) -> Option<u64> {
            None
        }
        fn health(&self) -> Option<LockHealth> {
            None
        }
    }

    fn probe(name: &'static str, log: &Arc<Mutex<Vec<String>>>, delay_ms: u64) -> Probe {
        Probe {
            delay: Duration::from_millis(delay_ms),
            grant: true,
            fail_release: false,
            log: log.clone(),
            name,
        }
    }

    #[test]
    fn one_deadline_covers_every_lock_and_failure_rolls_back_in_reverse() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let refuse = Probe {
            grant: false,
            ..probe("c", &log, 0)
        };
        let multi = InterProcessMultiLock::from_locks(vec![
            Box::new(probe("a", &log, 300)),
            Box::new(probe("b", &log, 0)),
            Box::new(refuse),
        ])
        .unwrap();
        assert!(!multi.acquire_timeout(Duration::from_millis(1000)).unwrap());
        let log = log.lock().clone();
        let given = |name: &str| -> u128 {
            let line = log
                .iter()
                .find(|l| l.starts_with(&format!("{name} timeout")))
                .unwrap();
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!(given("a") <= 1000 && given("a") > 700);
        assert!(
            given("b") <= 700,
            "b was given {} ms after a took 300",
            given("b")
        );
        assert!(given("c") <= given("b"));
        assert_eq!(
            &log[log.len() - 2..],
            ["b release", "a release"],
            "rolled back in reverse"
        );
    }

    #[test]
    fn release_tries_every_lock_and_reports_the_first_failure() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let failing = Probe {
            fail_release: true,
            ..probe("b", &log, 0)
        };
        let multi = InterProcessMultiLock::from_locks(vec![
            Box::new(probe("a", &log, 0)),
            Box::new(failing),
        ])
        .unwrap();
        multi.acquire().unwrap();
        assert_eq!(multi.release(), Err(Error::LockLost));
        let log = log.lock().clone();
        assert_eq!(&log[log.len() - 2..], ["b release", "a release"]);
        assert!(InterProcessMultiLock::from_locks(vec![]).is_err());
    }
}
