//! The `Lock` trait over the lock family, and the guard every lock hands out.

use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;

/// How long a guard's drop waits for its release at most (a backend may make it shorter, see
/// [`Sealed::drop_bound`]): far above a release's round trip to a reachable server (a few
/// milliseconds; tens on a loaded ensemble or a reconnection to another member), far below the
/// server's timer (a ZooKeeper session timeout, a Redis TTL) that would free the lock
/// otherwise, and short enough that a program ending in an outage is held up for a second at
/// most.
pub(crate) const DROP_BOUND: Duration = Duration::from_secs(1);

pub(crate) mod sealed {
    use std::time::{Duration, Instant};

    use crate::core::error::Result;

    /// How a release deletes the lock's node.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Release {
        /// Now, reporting errors, by this instant (`None`: the Client's operation timeout, else
        /// its connection timeout); what cannot be done in time goes on in the background.
        Within(Option<Instant>),
        /// In the background; returns at once (a guard's `Drop`).
        Background,
    }

    /// What each lock implements; [`Lock`](super::Lock) builds the rest on it.
    pub trait Sealed {
        /// Waits for the lock until `until` (`None`: no limit); an instant already passed makes
        /// one attempt without waiting.
        fn acquire_until(&self, until: Option<Instant>) -> Result<bool>;
        /// Releases one hold of the calling thread.
        fn release_as(&self, how: Release) -> Result<()>;
        /// Ends every acquisition in progress with `Error::Cancelled`.
        fn cancel(&self);
        /// Caps every later hold at `max_hold` (checked: see `Lock::set_max_hold`).
        fn cap_holds(&self, max_hold: Option<Duration>) -> Result<()>;
        /// Whether any thread of this process holds the lock through this object.
        fn acquired_here(&self) -> bool;
        /// An id of the calling thread's hold that no later hold through this object has (a
        /// guard made for one hold releases nothing once another has replaced it).
        fn hold_id(&self) -> Option<u64>;
        /// How long a guard's drop waits for the release in the caller before what is left
        /// goes to the background: [`DROP_BOUND`](super::DROP_BOUND), or less if the backend
        /// bounds every round trip more tightly.
        fn drop_bound(&self) -> Duration {
            super::DROP_BOUND
        }
    }
}
pub(crate) use sealed::{Release, Sealed};

/// `timeout` from now; `None` if that is past the end of time.
fn until(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// What every lock of zklock can do; lets [`LockGuard`] (and code generic over locks) take any
/// of them. Sealed: implemented by zklock's locks only.
///
/// # Blocking
/// [`acquire`](Lock::acquire) and [`lock`](Lock::lock) wait without limit (until the lock is
/// ours, the retry policy gives up during an outage, or [`cancel_waiters`](Lock::cancel_waiters)
/// is called). The timed forms wait at most their timeout; each ZooKeeper round trip of the
/// attempt may run past it by up to the Client's operation timeout (default: its connection
/// timeout), so that a short timeout never misses a free lock for want of a round trip. A zero
/// timeout, [`try_lock`](Lock::try_lock), makes exactly one attempt: create, list, then hold or
/// delete and return.
///
/// An acquire that may wait fails at once with
/// [`Error::OnWatcherThread`](crate::Error::OnWatcherThread) when called from a listener or
/// callback (the Client's watcher thread, which would have to deliver the event it waits for);
/// `try_lock` is allowed there.
///
/// # Example
/// ```no_run
/// use zklock::{InterProcessMutex, Lock};
///
/// fn with_lock<L: Lock>(lock: &L, work: impl FnOnce()) -> zklock::Result<()> {
///     let _guard = lock.lock()?;
///     work();
///     Ok(())
/// }
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// with_lock(&InterProcessMutex::new(&client, "/locks/a")?, || println!("held"))?;
/// # Ok(()) }
/// ```
pub trait Lock: Sealed + Send + Sync {
    /// Blocks until the calling thread holds the lock.
    ///
    /// # Blocking
    /// Without limit while the lock is held by others; through an outage until the Client's
    /// retry policy gives up (its budget starts afresh after every answered round trip).
    ///
    /// # Errors
    /// [`OnWatcherThread`](crate::Error::OnWatcherThread) from a listener or callback;
    /// [`Cancelled`](crate::Error::Cancelled) after [`cancel_waiters`](Lock::cancel_waiters);
    /// [`ConnectionLoss`](crate::Error::ConnectionLoss) when the retry policy gives up;
    /// [`NoAuth`](crate::Error::NoAuth) when the ACL forbids creating the lock node;
    /// [`WouldDeadlock`](crate::Error::WouldDeadlock) for a write lock asked by a reader;
    /// [`LockLost`](crate::Error::LockLost) when the calling thread already holds the lock
    /// through this object and that hold is lost (release it, then acquire anew);
    /// [`Closed`](crate::Error::Closed) once the Client is closed. A session that expires
    /// while waiting is not an error: the attempt starts over in the new session.
    fn acquire(&self) -> Result<()> {
        self.acquire_until(None).map(|_| ())
    }

    /// Waits up to `timeout`: `false` if the lock is not ours by then, with nothing left
    /// behind. A zero timeout makes one attempt without waiting.
    ///
    /// # Blocking
    /// At most `timeout` waiting for the lock; each round trip of the attempt may run past it
    /// by the Client's operation timeout (default: its connection timeout).
    ///
    /// # Errors
    /// As [`acquire`](Lock::acquire); running out of time is `Ok(false)`, not an error.
    ///
    /// Test the answer: `if !lock.acquire_timeout(d)? { return … }`. The compiler cannot warn
    /// about `lock.acquire_timeout(d)?;` (the `?` uses the `Result`, and a `bool` carries no
    /// `#[must_use]`), which goes on without the lock; prefer
    /// [`try_lock_for`](Lock::try_lock_for), whose guard is the proof of holding.
    #[must_use = "`false` means the lock was NOT acquired"]
    fn acquire_timeout(&self, timeout: Duration) -> Result<bool> {
        self.acquire_until(until(timeout))
    }

    /// Releases one hold of the calling thread, reporting errors.
    ///
    /// # Blocking
    /// At most the Client's operation timeout (default: its connection timeout); a delete that
    /// cannot be done in time goes on in the background and the error is returned. An inner
    /// re-entrant hold returns at once.
    ///
    /// # Errors
    /// [`NotOwner`](crate::Error::NotOwner) if the calling thread does not hold it
    /// ([`NotAcquired`](crate::Error::NotAcquired) for a semaphore mutex);
    /// [`LockLost`](crate::Error::LockLost) if the hold had been lost before (whatever it
    /// protected may have been touched by another holder); a connection error if the delete
    /// could not be confirmed in time (it goes on in the background).
    fn release(&self) -> Result<()> {
        self.release_as(Release::Within(None))
    }

    /// [`release`](Lock::release) bounded by `timeout`.
    ///
    /// # Blocking
    /// At most `timeout`; what is not done by then goes on in the background.
    ///
    /// # Errors
    /// As [`release`](Lock::release).
    fn release_timeout(&self, timeout: Duration) -> Result<()> {
        self.release_as(Release::Within(Some(
            until(timeout).unwrap_or_else(|| crate::core::deadline::instant_after(timeout)),
        )))
    }

    /// Ends every acquisition of this lock object that is waiting now, on any thread: each
    /// returns [`Error::Cancelled`](crate::Error::Cancelled) promptly, its node deleted.
    /// Acquisitions that start later are not affected (kazoo's `Lock.cancel()`).
    fn cancel_waiters(&self) {
        self.cancel()
    }

    /// The calling thread's fencing token, if it holds the lock.
    fn fencing_token(&self) -> Option<u64>;

    /// Caps every hold granted through this object from now on at `max_hold` after its grant,
    /// even while the Client keeps renewing it (Redisson's `leaseTime`, ShedLock's
    /// `lockAtMostFor`); `None` removes the cap. Holds granted before the call keep theirs.
    ///
    /// When the cap passes, the hold reads [`Lost`](LockHealth::Lost), its health subscribers
    /// hear it, and the hold is let go of on the server in the background (the lock node
    /// deleted, the key deleted, the session's lock released, the file entry freed), so that
    /// another Client can take the lock; the holder's last [`release`](Lock::release) then
    /// answers [`LockLost`](crate::Error::LockLost), and dropping its guard stays quiet. A
    /// re-entry neither extends the cap nor is allowed after it (`LockLost`). One timer thread
    /// of the process runs every cap; no thread per hold. An
    /// [`AnyClient`](crate::AnyClient) sets its `max_hold` option (`?max_hold=2s` in its URL)
    /// on every lock it makes.
    ///
    /// # Errors
    /// [`InvalidArgument`](crate::Error::InvalidArgument) for a zero cap (a length past what
    /// the clock can count, such as `Duration::MAX`, is no cap);
    /// [`ThreadStart`](crate::Error::ThreadStart) if the timer thread cannot start.
    ///
    /// # Example
    /// ```no_run
    /// use std::time::Duration;
    /// use zklock::Lock;
    ///
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let mutex = zklock::InterProcessMutex::new(&client, "/locks/nightly-job")?;
    /// mutex.set_max_hold(Some(Duration::from_secs(600)))?; // a stuck job frees it in 10 min
    /// assert!(mutex.set_max_hold(Some(Duration::ZERO)).is_err());
    /// # Ok(()) }
    /// ```
    fn set_max_hold(&self, max_hold: Option<Duration>) -> Result<()> {
        self.cap_holds(max_hold)
    }

    /// The health of the calling thread's hold, if it holds the lock.
    fn health(&self) -> Option<LockHealth>;

    /// [`acquire`](Lock::acquire), returning a guard that releases on drop. On a `&dyn Lock`,
    /// which this cannot be called on, [`LockGuard::acquire`] does the same.
    ///
    /// # Blocking and errors
    /// As [`acquire`](Lock::acquire). Dropping the guard releases within a short bound (see
    /// [`LockGuard`]).
    fn lock(&self) -> Result<LockGuard<'_, Self>>
    where
        Self: Sized,
    {
        self.acquire()?;
        Ok(LockGuard::new(self))
    }

    /// One attempt, no wait (parking_lot's `try_lock`, Curator's `acquire(0, unit)`): a guard if
    /// the lock was free, `None` (with our node deleted) if not.
    ///
    /// # Blocking and errors
    /// One create and one listing, each bounded by the operation timeout; never waits for the
    /// lock. Allowed on the watcher thread. Errors as [`acquire`](Lock::acquire).
    #[must_use = "`None` means the lock was NOT acquired"]
    fn try_lock(&self) -> Result<Option<LockGuard<'_, Self>>>
    where
        Self: Sized,
    {
        self.try_lock_for(Duration::ZERO)
    }

    /// [`acquire_timeout`](Lock::acquire_timeout), returning a guard, or `None` on timeout.
    ///
    /// # Blocking and errors
    /// As [`acquire_timeout`](Lock::acquire_timeout).
    #[must_use = "`None` means the lock was NOT acquired"]
    fn try_lock_for(&self, timeout: Duration) -> Result<Option<LockGuard<'_, Self>>>
    where
        Self: Sized,
    {
        Ok(self
            .acquire_until(until(timeout))?
            .then(|| LockGuard::new(self)))
    }

    /// Waits until `deadline` at the latest; a guard, or `None` if the lock is not ours by then.
    ///
    /// # Blocking and errors
    /// As [`acquire_timeout`](Lock::acquire_timeout) with the time left until `deadline`.
    #[must_use = "`None` means the lock was NOT acquired"]
    fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard<'_, Self>>>
    where
        Self: Sized,
    {
        Ok(self
            .acquire_until(Some(deadline))?
            .then(|| LockGuard::new(self)))
    }

    /// [`lock`](Lock::lock) through an `Arc`, returning a guard that owns a clone of it
    /// (parking_lot's `lock_arc`): the guard can live in a struct beside the lock, or anywhere
    /// a borrow could not.
    ///
    /// # Blocking and errors
    /// As [`acquire`](Lock::acquire).
    fn lock_arc(self: &Arc<Self>) -> Result<ArcLockGuard<Self>>
    where
        Self: Sized,
    {
        self.acquire()?;
        Ok(ArcLockGuard::new(self.clone()))
    }

    /// [`try_lock_for`](Lock::try_lock_for) through an `Arc`: an owned guard, or `None`.
    ///
    /// # Blocking and errors
    /// As [`acquire_timeout`](Lock::acquire_timeout).
    #[must_use = "`None` means the lock was NOT acquired"]
    fn try_lock_arc_for(self: &Arc<Self>, timeout: Duration) -> Result<Option<ArcLockGuard<Self>>>
    where
        Self: Sized,
    {
        Ok(self
            .acquire_until(until(timeout))?
            .then(|| ArcLockGuard::new(self.clone())))
    }
}

/// A lock shared through an `Arc` is a lock: e.g. one mutex both locked directly and made part
/// of an [`InterProcessMultiLock`](crate::InterProcessMultiLock).
impl<L: Lock + ?Sized> Sealed for Arc<L> {
    fn acquire_until(&self, until: Option<Instant>) -> Result<bool> {
        (**self).acquire_until(until)
    }

    fn release_as(&self, how: Release) -> Result<()> {
        (**self).release_as(how)
    }

    fn cancel(&self) {
        (**self).cancel()
    }

    fn cap_holds(&self, max_hold: Option<Duration>) -> Result<()> {
        (**self).cap_holds(max_hold)
    }

    fn acquired_here(&self) -> bool {
        (**self).acquired_here()
    }

    fn hold_id(&self) -> Option<u64> {
        (**self).hold_id()
    }

    fn drop_bound(&self) -> Duration {
        (**self).drop_bound()
    }
}

impl<L: Lock + ?Sized> Lock for Arc<L> {
    fn fencing_token(&self) -> Option<u64> {
        (**self).fencing_token()
    }

    fn health(&self) -> Option<LockHealth> {
        (**self).health()
    }
}

/// Inherent methods that forward to [`Lock`], so that a lock's whole API is usable without
/// importing the trait.
macro_rules! forward_lock_api {
    ($lock:ty) => {
        impl $lock {
            /// Blocks until the calling thread holds the lock (see [`Lock`](crate::Lock) for
            /// the bounds of every acquire).
            ///
            /// # Blocking and errors
            /// As [`Lock::acquire`](crate::Lock::acquire).
            pub fn acquire(&self) -> $crate::Result<()> {
                $crate::Lock::acquire(self)
            }

            /// Waits up to `timeout`: `false` if the lock is not ours by then, with this
            /// attempt's node deleted. A zero timeout makes one attempt without waiting.
            /// Test the answer: `lock.acquire_timeout(d)?;` compiles without a warning and
            /// goes on without the lock (see [`Lock::acquire_timeout`](crate::Lock::acquire_timeout)).
            ///
            /// # Blocking and errors
            /// As [`Lock::acquire_timeout`](crate::Lock::acquire_timeout).
            #[must_use = "`false` means the lock was NOT acquired"]
            pub fn acquire_timeout(&self, timeout: std::time::Duration) -> $crate::Result<bool> {
                $crate::Lock::acquire_timeout(self, timeout)
            }

            /// Releases one hold of the calling thread, reporting errors; bounded by the
            /// Client's operation timeout (default: its connection timeout).
            ///
            /// # Blocking and errors
            /// As [`Lock::release`](crate::Lock::release).
            pub fn release(&self) -> $crate::Result<()> {
                $crate::Lock::release(self)
            }

            /// [`release`](Self::release) bounded by `timeout`; a delete that cannot be done
            /// in time goes on in the background and the error is returned.
            ///
            /// # Blocking and errors
            /// As [`Lock::release_timeout`](crate::Lock::release_timeout).
            pub fn release_timeout(&self, timeout: std::time::Duration) -> $crate::Result<()> {
                $crate::Lock::release_timeout(self, timeout)
            }

            /// Ends every acquisition of this object waiting now, on any thread, with
            /// [`Error::Cancelled`](crate::Error::Cancelled); their nodes are deleted.
            pub fn cancel_waiters(&self) {
                $crate::Lock::cancel_waiters(self)
            }

            /// Caps every later hold through this object at `max_hold` after its grant (see
            /// [`Lock::set_max_hold`](crate::Lock::set_max_hold)).
            ///
            /// # Errors
            /// As [`Lock::set_max_hold`](crate::Lock::set_max_hold).
            pub fn set_max_hold(
                &self,
                max_hold: Option<std::time::Duration>,
            ) -> $crate::Result<()> {
                $crate::Lock::set_max_hold(self, max_hold)
            }

            /// [`acquire`](Self::acquire), returning a guard that releases on drop.
            ///
            /// # Blocking and errors
            /// As [`Lock::lock`](crate::Lock::lock).
            pub fn lock(&self) -> $crate::Result<$crate::LockGuard<'_, $lock>> {
                $crate::Lock::lock(self)
            }

            /// One attempt, no wait: a guard if the lock was free, else `None`.
            ///
            /// # Blocking and errors
            /// As [`Lock::try_lock`](crate::Lock::try_lock).
            #[must_use = "`None` means the lock was NOT acquired"]
            pub fn try_lock(&self) -> $crate::Result<Option<$crate::LockGuard<'_, $lock>>> {
                $crate::Lock::try_lock(self)
            }

            /// [`acquire_timeout`](Self::acquire_timeout), returning a guard, or `None`.
            ///
            /// # Blocking and errors
            /// As [`Lock::try_lock_for`](crate::Lock::try_lock_for).
            #[must_use = "`None` means the lock was NOT acquired"]
            pub fn try_lock_for(
                &self,
                timeout: std::time::Duration,
            ) -> $crate::Result<Option<$crate::LockGuard<'_, $lock>>> {
                $crate::Lock::try_lock_for(self, timeout)
            }

            /// [`lock`](Self::lock) through an `Arc`: a guard that owns a clone of it.
            ///
            /// # Blocking and errors
            /// As [`Lock::lock_arc`](crate::Lock::lock_arc).
            pub fn lock_arc(
                self: &std::sync::Arc<Self>,
            ) -> $crate::Result<$crate::ArcLockGuard<$lock>> {
                $crate::Lock::lock_arc(self)
            }

            /// [`try_lock_for`](Self::try_lock_for) through an `Arc`: an owned guard, or
            /// `None`.
            ///
            /// # Blocking and errors
            /// As [`Lock::try_lock_arc_for`](crate::Lock::try_lock_arc_for).
            #[must_use = "`None` means the lock was NOT acquired"]
            pub fn try_lock_arc_for(
                self: &std::sync::Arc<Self>,
                timeout: std::time::Duration,
            ) -> $crate::Result<Option<$crate::ArcLockGuard<$lock>>> {
                $crate::Lock::try_lock_arc_for(self, timeout)
            }

            /// Waits until `deadline` at the latest: a guard, or `None`.
            ///
            /// # Blocking and errors
            /// As [`Lock::try_lock_until`](crate::Lock::try_lock_until).
            #[must_use = "`None` means the lock was NOT acquired"]
            pub fn try_lock_until(
                &self,
                deadline: std::time::Instant,
            ) -> $crate::Result<Option<$crate::LockGuard<'_, $lock>>> {
                $crate::Lock::try_lock_until(self, deadline)
            }
        }
    };
}
pub(crate) use forward_lock_api;

/// Holds a lock for the calling thread; releases it when dropped.
///
/// # Drop
/// Dropping the guard releases in the calling thread, waiting at most 1 s (less if the
/// Client's operation timeout is shorter, on ZooKeeper): once the drop returns with the server
/// reachable, another process can take the lock at once — also when the drop is the last thing
/// `main` does. What cannot be done in that time (the server is out of reach or frozen) goes
/// on in the background, which retries until the hold is gone, and the drop returns. Errors
/// are only logged: use [`release`](LockGuard::release) to see them.
///
/// A process that ends without running its destructors (`std::process::exit`, `panic =
/// "abort"`, a signal) releases nothing: the server frees the lock when its timer runs out
/// (the session timeout on ZooKeeper). See the crate documentation, "Exiting".
///
/// Not `Send`: zklock's locks are re-entrant per thread, so a hold must be released on the
/// thread that took it — except the guard of an
/// [`InterProcessSemaphoreMutex`](crate::InterProcessSemaphoreMutex), whose hold is not a
/// thread's.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let mutex = zklock::InterProcessMutex::new(&client, "/locks/a")?;
/// let guard = mutex.lock()?;
/// let token = guard.fencing_token();
/// guard.release()?; // or just drop it; this way errors are seen
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard<'a, L: Lock + ?Sized> {
    held: Held<&'a L>,
}

impl<'a, L: Lock + ?Sized> LockGuard<'a, L> {
    pub(crate) fn new(lock: &'a L) -> Self {
        LockGuard {
            held: Held::new(lock),
        }
    }

    /// [`Lock::acquire`] on `lock`, returning its guard: what [`Lock::lock`] does, for a lock
    /// known only as a trait object (`&dyn Lock`, such as an
    /// [`AnyReadWriteLock`](crate::AnyReadWriteLock)'s halves) or a `?Sized` type parameter,
    /// on which the trait's guard methods cannot be called.
    ///
    /// # Blocking and errors
    /// As [`Lock::acquire`].
    ///
    /// # Example
    /// ```
    /// use zklock::{Lock, LockGuard};
    ///
    /// fn with_lock(lock: &dyn Lock, work: impl FnOnce(u64)) -> zklock::Result<()> {
    ///     let guard = LockGuard::acquire(lock)?;
    ///     work(guard.fencing_token());
    ///     guard.release()
    /// }
    ///
    /// # fn main() -> zklock::Result<()> {
    /// let locks = zklock::connect("mem://guard-of-dyn-lock")?;
    /// let rw = locks.read_write_lock("catalog")?;
    /// with_lock(rw.write_lock(), |token| assert!(token > 0))?;
    /// let reading = LockGuard::try_acquire(rw.read_lock())?.expect("no writer holds it");
    /// let writer = || LockGuard::try_acquire(rw.write_lock()).map(|g| g.is_some());
    /// std::thread::scope(|s| assert!(!s.spawn(writer).join().unwrap().unwrap()));
    /// drop(reading);
    /// std::thread::scope(|s| assert!(s.spawn(writer).join().unwrap().unwrap()));
    /// # Ok(()) }
    /// ```
    pub fn acquire(lock: &'a L) -> Result<Self> {
        lock.acquire()?;
        Ok(LockGuard::new(lock))
    }

    /// One attempt on `lock`, no wait: its guard if it was free (what [`Lock::try_lock`] does,
    /// for a `&dyn Lock`; see [`acquire`](Self::acquire)).
    ///
    /// # Blocking and errors
    /// As [`Lock::try_lock`].
    #[must_use = "`None` means the lock was NOT acquired"]
    pub fn try_acquire(lock: &'a L) -> Result<Option<Self>> {
        Self::try_acquire_for(lock, Duration::ZERO)
    }

    /// Waits up to `timeout` for `lock`: its guard, or `None` (what [`Lock::try_lock_for`]
    /// does, for a `&dyn Lock`; see [`acquire`](Self::acquire)).
    ///
    /// # Blocking and errors
    /// As [`Lock::acquire_timeout`].
    #[must_use = "`None` means the lock was NOT acquired"]
    pub fn try_acquire_for(lock: &'a L, timeout: Duration) -> Result<Option<Self>> {
        Ok(lock
            .acquire_until(until(timeout))?
            .then(|| LockGuard::new(lock)))
    }

    /// Releases now, reporting errors (dropping the guard only logs them). Bounded as
    /// [`Lock::release`].
    pub fn release(self) -> Result<()> {
        self.held.release(None)
    }

    /// [`release`](Self::release) bounded by `timeout`.
    pub fn release_timeout(self, timeout: Duration) -> Result<()> {
        self.held.release(Some(timeout))
    }

    /// This hold's fencing token (read from the server the first time on PostgreSQL), kept by
    /// the guard once read; 0 when it was never read and cannot be now: the hold is gone (its
    /// session ended, or it was released through the lock) or the server did not answer (a
    /// fence refuses 0).
    pub fn fencing_token(&self) -> u64 {
        self.held.fencing_token()
    }

    /// This hold's health, computed now (see [`LockHealth`]); `Lost` once the hold is gone
    /// (released through the lock meanwhile).
    pub fn health(&self) -> LockHealth {
        self.held.health()
    }

    /// The lock, while this guard's hold is still the lock's current hold (not released
    /// through the lock meanwhile).
    pub(crate) fn current_lock(&self) -> Option<&'a L> {
        self.held.current().then_some(self.held.lock)
    }
}

impl<L: Lock + ?Sized> std::fmt::Debug for LockGuard<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("released", &self.held.released)
            .finish()
    }
}

/// A guard that owns an `Arc` of its lock ([`Lock::lock_arc`]): it can be stored in a struct
/// beside the lock, returned from a function, or kept in a collection. Releases on drop, within
/// the same bound as a [`LockGuard`] (see its "Drop" section).
///
/// Not `Send`, like [`LockGuard`]: a re-entrant hold belongs to the thread that took it (the
/// guard of an [`InterProcessSemaphoreMutex`](crate::InterProcessSemaphoreMutex) is `Send`).
///
/// # Example
/// ```no_run
/// use std::sync::Arc;
/// use zklock::{ArcLockGuard, InterProcessMutex, Lock};
///
/// struct Job {
///     _lock: ArcLockGuard<InterProcessMutex>, // held as long as the job lives
///     token: u64,
/// }
///
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let mutex = Arc::new(InterProcessMutex::new(&client, "/locks/job")?);
/// let guard = mutex.lock_arc()?;
/// let job = Job { token: guard.fencing_token(), _lock: guard };
/// drop(job); // released here
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped"]
pub struct ArcLockGuard<L: Lock> {
    held: Held<Arc<L>>,
}

impl<L: Lock> ArcLockGuard<L> {
    fn new(lock: Arc<L>) -> Self {
        ArcLockGuard {
            held: Held::new(lock),
        }
    }

    /// The lock this guard holds.
    pub fn lock(&self) -> &Arc<L> {
        &self.held.lock
    }

    /// The lock, while this guard's hold is still the lock's current hold (not released
    /// through the lock meanwhile).
    pub(crate) fn current_lock(&self) -> Option<&L> {
        self.held.current().then_some(&*self.held.lock)
    }

    /// Releases now, reporting errors. Bounded as [`Lock::release`].
    pub fn release(self) -> Result<()> {
        self.held.release(None)
    }

    /// [`release`](Self::release) bounded by `timeout`.
    pub fn release_timeout(self, timeout: Duration) -> Result<()> {
        self.held.release(Some(timeout))
    }

    /// This hold's fencing token (read from the server the first time on PostgreSQL), kept by
    /// the guard once read; 0 when it was never read and cannot be now: the hold is gone (its
    /// session ended, or it was released through the lock) or the server did not answer (a
    /// fence refuses 0).
    pub fn fencing_token(&self) -> u64 {
        self.held.fencing_token()
    }

    /// This hold's health, computed now (see [`LockHealth`]); `Lost` once the hold is gone
    /// (released through the lock meanwhile).
    pub fn health(&self) -> LockHealth {
        self.held.health()
    }
}

impl<L: Lock> std::fmt::Debug for ArcLockGuard<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArcLockGuard")
            .field("released", &self.held.released)
            .finish()
    }
}

/// What both guards hold: the lock (borrowed or owned), released once — on drop within the
/// lock's [`drop_bound`](Sealed::drop_bound), the rest in the background — but only while the
/// hold the guard was made for is the lock's: a guard whose hold was released through the lock
/// meanwhile (and perhaps taken again) releases nothing.
struct Held<P: Deref>
where
    P::Target: Lock,
{
    lock: P,
    /// The id of the hold the guard was made for: what tells it from a later hold.
    hold: Option<u64>,
    /// The hold's token, once read through this guard: what a stale guard still reports.
    token: std::cell::Cell<Option<u64>>,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl<P: Deref> Held<P>
where
    P::Target: Lock,
{
    fn new(lock: P) -> Self {
        Held {
            hold: lock.hold_id(),
            token: std::cell::Cell::new(None),
            lock,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// Whether the lock's hold is still the one this guard was made for.
    fn current(&self) -> bool {
        self.hold.is_none() || self.lock.hold_id() == self.hold
    }

    fn fencing_token(&self) -> u64 {
        if self.token.get().is_none() && self.current() {
            self.token.set(self.lock.fencing_token());
        }
        self.token.get().unwrap_or_default()
    }

    fn health(&self) -> LockHealth {
        if !self.current() {
            return LockHealth::Lost;
        }
        self.lock.health().unwrap_or(LockHealth::Lost)
    }

    fn release(mut self, timeout: Option<Duration>) -> Result<()> {
        self.released = true;
        if !self.current() {
            return Err(Error::NotAcquired);
        }
        match timeout {
            None => self.lock.release(),
            Some(t) => self.lock.release_timeout(t),
        }
    }
}

impl<P: Deref> Drop for Held<P>
where
    P::Target: Lock,
{
    fn drop(&mut self) {
        if !self.released && !self.current() {
            tracing::warn!(
                "a guard was dropped after its hold had been released through the lock: it \
                 releases nothing"
            );
        } else if !self.released {
            let by = crate::core::deadline::instant_after(self.lock.drop_bound());
            match self.lock.release_as(Release::Within(Some(by))) {
                // Told already, as a health event (a cap that passed, a session that expired).
                Ok(()) | Err(Error::LockLost) => {}
                Err(e) => tracing::warn!("releasing a lock on guard drop: {e}"),
            }
        }
    }
}
