//! InterProcessMultiLock: all of several locks, or none.

use std::time::Duration;

use super::guard::{Lock, LockGuard, Sealed};
use super::mutex::{deadline_for, InterProcessMutex};
use crate::client::{Client, LockHealth};
use crate::deadline::Deadline;
use crate::error::{Error, Result};

/// Curator's `InterProcessMultiLock`: acquires every lock of a list, in order, or none.
///
/// Differences from Curator, on purpose: one deadline covers the whole acquisition (Curator gives
/// each lock the full timeout), and [`release`](InterProcessMultiLock::release) releases every
/// lock in reverse order, trying all of them before it reports the first failure.
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
    /// One [`InterProcessMutex`] per path.
    pub fn new(client: &Client, paths: &[&str]) -> Result<InterProcessMultiLock> {
        let locks = paths
            .iter()
            .map(|p| InterProcessMutex::new(client, p).map(|m| Box::new(m) as Box<dyn Lock>))
            .collect::<Result<Vec<_>>>()?;
        Self::from_locks(locks)
    }

    /// Any locks of zklock, acquired in this order.
    pub fn from_locks(locks: Vec<Box<dyn Lock>>) -> Result<InterProcessMultiLock> {
        if locks.is_empty() {
            return Err(Error::invalid("a multi-lock needs at least one lock"));
        }
        Ok(InterProcessMultiLock { locks })
    }

    fn acquire_until(&self, deadline: Deadline) -> Result<bool> {
        let mut held = 0;
        let outcome = (|| {
            for lock in &self.locks {
                let got = match deadline.remaining() {
                    None => lock.acquire().map(|_| true),
                    Some(left) if left.is_zero() => Ok(false),
                    Some(left) => lock.acquire_timeout(left),
                };
                if !got? {
                    return Ok(false);
                }
                held += 1;
            }
            Ok(true)
        })();
        if !matches!(outcome, Ok(true)) {
            for lock in self.locks[..held].iter().rev() {
                if let Err(e) = lock.release() {
                    log::warn!("rolling back a multi-lock: {e}");
                }
            }
        }
        outcome
    }

    /// Blocks until every lock is held.
    pub fn acquire(&self) -> Result<()> {
        self.acquire_until(Deadline::NEVER).map(|_| ())
    }

    /// Waits up to `timeout` (for all locks together): `false` on timeout, with the locks taken
    /// so far released in reverse order. An error also releases them, then is returned.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        self.acquire_until(deadline_for(timeout)?)
    }

    /// Releases every lock in reverse order; reports the first failure after trying them all.
    pub fn release(&self) -> Result<()> {
        let mut first = Ok(());
        for lock in self.locks.iter().rev() {
            if let Err(e) = lock.release() {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// [`acquire`](Self::acquire), returning a guard.
    pub fn lock(&self) -> Result<LockGuard<'_, InterProcessMultiLock>> {
        Lock::lock(self)
    }
}

impl Sealed for InterProcessMultiLock {}

impl Lock for InterProcessMultiLock {
    fn acquire(&self) -> Result<()> {
        InterProcessMultiLock::acquire(self)
    }

    fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        InterProcessMultiLock::acquire_timeout(self, timeout)
    }

    fn release(&self) -> Result<()> {
        InterProcessMultiLock::release(self)
    }

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

    /// Records the timeouts it is given; takes `delay` to acquire; may refuse or fail.
    struct Probe {
        delay: Duration,
        grant: bool,
        fail_release: bool,
        log: Arc<Mutex<Vec<String>>>,
        name: &'static str,
    }

    impl Sealed for Probe {}

    impl Lock for Probe {
        fn acquire(&self) -> Result<()> {
            self.log.lock().push(format!("{} acquire", self.name));
            Ok(())
        }
        fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
            self.log
                .lock()
                .push(format!("{} timeout {}", self.name, timeout.as_millis()));
            std::thread::sleep(self.delay.min(timeout));
            Ok(self.grant)
        }
        fn release(&self) -> Result<()> {
            self.log.lock().push(format!("{} release", self.name));
            if self.fail_release {
                Err(Error::LockLost)
            } else {
                Ok(())
            }
        }
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
