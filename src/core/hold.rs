//! The re-entrant shell every backend's mutex runs in (as parking_lot's `lock_api` writes
//! re-entrancy once over any raw mutex): the backend provides one algorithm behind [`RawLock`]
//! — acquire with a deadline, keep a grant, release it, cancel waiters — and [`Reentrant`]
//! owns the sequence around it: closed → lost hold → re-entry → `WouldDeadlock` → metrics →
//! acquire → the hold record and its health → its cap (`max_hold`) → release → `Drop`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::deadline::Deadline;
use super::error::{Error, Result};
use super::health::{HealthCell, HealthFeed, LockHealth};
use super::listeners::Dispatch;
use super::lock::Release;
use super::max_hold::{self, Job, Key};
use super::thread_holds::{Detached, ThreadHolds};
use super::token::Token;

/// The function a hold's keeper reports the server's view of the hold to.
pub(crate) type Report = Arc<dyn Fn(LockHealth) + Send + Sync>;

/// Which lock a [`Reentrant`] is, for the rules between a read-write lock's halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Half {
    /// A lock alone.
    Whole,
    /// A read-write lock's read half: its thread may also hold the write half (a downgrade).
    Read,
    /// A read-write lock's write half: a thread that holds the read half cannot wait for it.
    Write,
}

/// A backend's lock, without re-entrancy.
pub(crate) trait RawLock: Send + Sync + 'static {
    /// What the backend keeps of one hold: what releasing and renewing it need (an owner id,
    /// a session, a node), its keeper handle among them.
    type Grant: Send + 'static;

    /// What the other half of a read-write lock needs of the same thread's hold (its owner id,
    /// its session): cheap to clone, taken out without holding any lock while it is used.
    type Shared;

    /// The [`Shared`](Self::Shared) part of `grant`.
    fn share(grant: &Self::Grant) -> Self::Shared;

    /// The lock's name, in metrics and health events.
    fn name(&self) -> &str;

    /// Whether the Client is closed: every call then fails with [`Error::Closed`].
    fn closed(&self) -> bool;

    /// Where health callbacks run.
    fn dispatch(&self) -> Dispatch;

    /// Waits until `deadline` (one attempt once it has passed) for the lock; `None` when out
    /// of time. `partner` is the calling thread's hold of the read-write lock's other half.
    /// Ends with [`Error::Cancelled`] once [`cancel_waiters`](Self::cancel_waiters) is called
    /// and with [`Error::Closed`] once the Client closes, leaving nothing behind.
    fn acquire(
        &self,
        deadline: Deadline,
        partner: Option<Self::Shared>,
    ) -> Result<Option<Granted<Self::Grant>>>;

    /// Starts keeping a fresh grant alive (renewal), its health going to `report`. An error
    /// (the Client closed as the grant came in) means the backend let go of the grant: the
    /// acquire fails with it.
    fn keep(&self, grant: &mut Self::Grant, report: Report) -> Result<()>;

    /// The hold's health now: `reported` (the keeper's last report) made worse by what the
    /// backend knows locally (its lease, its connection).
    fn health(&self, grant: &Self::Grant, reported: LockHealth) -> LockHealth;

    /// Lets go of a released hold as `how` says; `lost` says the hold had been lost (the
    /// shell then answers [`Error::LockLost`] whatever this returns). `partner` is the same
    /// thread's hold of the other half, if any. A hold whose `max_hold` passed is let go of
    /// here too, with `Release::Background`, from the cap timer's thread: that must not block.
    fn release(
        &self,
        grant: Self::Grant,
        how: Release,
        lost: bool,
        partner: Option<Self::Shared>,
    ) -> Result<()>;

    /// Ends every acquisition waiting now with [`Error::Cancelled`].
    fn cancel_waiters(&self);

    /// How long a drop waits for a release in the caller before the rest goes to the
    /// background (see [`Sealed::drop_bound`](super::lock::Sealed::drop_bound)).
    fn drop_bound(&self) -> Duration {
        super::lock::DROP_BOUND
    }
}

/// Every hold's id, unique in the process: what tells a guard's hold from a later one.
static HOLD_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// What [`RawLock::acquire`] grants.
pub(crate) struct Granted<G> {
    pub(crate) grant: G,
    pub(crate) token: Token,
    /// What health events name as the hold (a node's path, a key, a session).
    pub(crate) node: String,
}

/// One thread's hold: the backend's grant and what the core tracks of it.
pub(crate) struct Hold<G> {
    pub(crate) grant: G,
    pub(crate) token: Token,
    id: u64,
    health: HealthCell,
    since: Instant,
    /// The cap timer's job for this hold, cancelled by its release.
    cap: Option<Key>,
}

/// Re-entrancy per thread over a [`RawLock`], with health, fencing and a cap on each hold.
///
/// A capped hold (`max_hold`) is taken out of its thread's place by the process's cap timer
/// when its time passes: its health reads `Lost` and its subscribers hear it, the backend lets
/// go of it in the background (as a guard's drop does when the server is slow), and a mark
/// stays in the thread's place so that the thread's last release answers
/// [`Error::LockLost`]. The cap counts from the grant; a re-entry does not extend it.
pub(crate) struct Reentrant<R: RawLock> {
    /// Shared with the cap timer's jobs, which hold it weakly.
    pub(crate) raw: Arc<R>,
    half: Half,
    holders: Arc<ThreadHolds<Hold<R::Grant>>>,
    /// A read-write lock's other half's holds.
    partner: Option<Arc<ThreadHolds<Hold<R::Grant>>>>,
    pub(crate) feed: Arc<HealthFeed>,
    /// The cap of holds granted from now on; `None`: none.
    max_hold: parking_lot::Mutex<Option<Duration>>,
}

impl<R: RawLock> Reentrant<R> {
    pub(crate) fn new(raw: R) -> Reentrant<R> {
        Reentrant {
            raw: Arc::new(raw),
            half: Half::Whole,
            holders: Arc::default(),
            partner: None,
            feed: Arc::default(),
            max_hold: parking_lot::Mutex::new(None),
        }
    }

    /// Caps every hold granted from now on at `max_hold` after its grant (see
    /// [`Lock::set_max_hold`](super::lock::Lock::set_max_hold)).
    pub(crate) fn set_max_hold(&self, max_hold: Option<Duration>) -> Result<()> {
        *self.max_hold.lock() = max_hold::check(max_hold)?;
        Ok(())
    }

    /// The two halves of a read-write lock over `read` and `write`.
    pub(crate) fn pair(read: R, write: R) -> [Reentrant<R>; 2] {
        let mut read = Reentrant::new(read);
        let mut write = Reentrant::new(write);
        read.half = Half::Read;
        write.half = Half::Write;
        read.partner = Some(write.holders.clone());
        write.partner = Some(read.holders.clone());
        [read, write]
    }

    pub(crate) fn acquire(&self, deadline: Deadline) -> Result<bool> {
        if self.raw.closed() {
            return Err(Error::Closed);
        }
        // A lost hold is not entered again: what it protected may have been touched by
        // another holder, and the caller must hear it (release it, then acquire anew).
        if self.health() == Some(LockHealth::Lost) {
            return Err(Error::LockLost);
        }
        if self.holders.reenter() {
            return Ok(true);
        }
        let partner = self.partner_shared();
        if self.half == Half::Write && partner.is_some() {
            // The readers ahead would include ourselves: we would wait for ever.
            return Err(Error::WouldDeadlock);
        }
        let name = self.raw.name();
        let started = Instant::now();
        let _waiting = super::metrics::Waiting::new(name);
        let granted = self.raw.acquire(deadline, partner)?;
        let Some(Granted {
            mut grant,
            token,
            node,
        }) = granted
        else {
            super::metrics::timed_out(name);
            return Ok(false);
        };
        super::metrics::acquired(name, started.elapsed());
        let (health, report) = self
            .feed
            .hold(self.raw.dispatch(), name, &node, token.clone());
        self.raw.keep(&mut grant, report.clone())?;
        let since = Instant::now();
        let id = HOLD_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.holders.insert(Hold {
            grant,
            token,
            id,
            health,
            since,
            cap: None,
        });
        // Scheduled once the hold is in place, so that a cap shorter than this step still
        // finds it; a cap past what the clock can count is none.
        let cap = *self.max_hold.lock();
        if let Some(at) = cap.and_then(|cap| since.checked_add(cap)) {
            if let Some(key) = max_hold::schedule(at, self.cap_job(id, report)) {
                if self.holders.mine_mut(|h| h.cap = Some(key)).is_none() {
                    max_hold::cancel(key);
                }
            }
        }
        Ok(true)
    }

    /// What the cap timer does when hold `id`'s cap passes: takes the hold out of its thread's
    /// place (nothing if it was released meanwhile), reports it `Lost` — its subscribers hear
    /// it before anyone else can take the lock — and has the backend let go of it in the
    /// background. Holds the lock object only weakly, and no lock of it while calling out.
    fn cap_job(&self, id: u64, report: Report) -> Job {
        let raw = Arc::downgrade(&self.raw);
        let holders = Arc::downgrade(&self.holders);
        let partner = self.partner.as_ref().map(Arc::downgrade);
        Box::new(move || {
            let (Some(raw), Some(holders)) = (raw.upgrade(), holders.upgrade()) else {
                return;
            };
            let Some((thread, hold)) = holders.cap(id, |h| h.id == id) else {
                return;
            };
            let lost = raw.health(&hold.grant, *hold.health.lock()) == LockHealth::Lost;
            report(LockHealth::Lost);
            super::metrics::released(raw.name(), hold.since.elapsed());
            tracing::info!(
                "zklock: a hold of {:?} reached its max_hold and was let go of",
                raw.name()
            );
            drop(hold.health);
            let partner = (partner.and_then(|p| p.upgrade()))
                .and_then(|p| p.of(thread, |h| R::share(&h.grant)));
            if let Err(e) = raw.release(hold.grant, Release::Background, lost, partner) {
                if !matches!(e, Error::LockLost) {
                    tracing::debug!("zklock: letting go of a capped hold: {e}");
                }
            }
        })
    }

    pub(crate) fn release(&self, how: Release) -> Result<()> {
        match self.holders.detach()? {
            Detached::StillHeld => Ok(()),
            Detached::Released(hold) => self.finish(hold, how),
            Detached::Capped => Err(Error::LockLost),
        }
    }

    fn finish(&self, hold: Hold<R::Grant>, how: Release) -> Result<()> {
        if let Some(key) = hold.cap {
            max_hold::cancel(key);
        }
        super::metrics::released(self.raw.name(), hold.since.elapsed());
        let lost = self.raw.health(&hold.grant, *hold.health.lock()) == LockHealth::Lost;
        // The hold's record ends before its release is sent: what its keeper reports from here
        // on (a renewal in flight that finds the lock released) is no event.
        drop(hold.health);
        let released = self
            .raw
            .release(hold.grant, how, lost, self.partner_shared());
        if lost {
            return Err(Error::LockLost);
        }
        released
    }

    /// The calling thread's hold of the other half, if any.
    fn partner_shared(&self) -> Option<R::Shared> {
        self.partner
            .as_deref()
            .and_then(|p| p.mine(|h| R::share(&h.grant)))
    }

    pub(crate) fn cancel_waiters(&self) {
        self.raw.cancel_waiters()
    }

    pub(crate) fn drop_bound(&self) -> Duration {
        self.raw.drop_bound()
    }

    pub(crate) fn is_acquired_in_this_process(&self) -> bool {
        self.holders.any()
    }

    pub(crate) fn is_owned_by_current_thread(&self) -> bool {
        self.holders.mine_exists()
    }

    /// `f` of the calling thread's hold, if it holds.
    pub(crate) fn mine<T>(&self, f: impl FnOnce(&Hold<R::Grant>) -> T) -> Option<T> {
        self.holders.mine(f)
    }

    /// The calling thread's hold's token, read from the server now if the backend defers it
    /// (outside the lock of the holds: only this thread's hold waits for it).
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.mine(|h| h.token.clone())?.get()
    }

    /// The calling thread's hold's id (see [`Sealed::hold_id`](super::lock::Sealed::hold_id)).
    pub(crate) fn hold_id(&self) -> Option<u64> {
        self.mine(|h| h.id).or_else(|| self.holders.capped())
    }

    /// The calling thread's hold's health, computed now: `Lost` once its cap took it away.
    pub(crate) fn health(&self) -> Option<LockHealth> {
        if self.holders.capped().is_some() {
            return Some(LockHealth::Lost);
        }
        self.mine(|h| self.raw.health(&h.grant, *h.health.lock()))
    }
}

impl<R: RawLock> Drop for Reentrant<R> {
    /// Holds never released (a guard forgotten, `acquire()` without `release()`) go as a
    /// guard's do: within one drop bound for all of them, the rest in the background.
    fn drop(&mut self) {
        let by = super::deadline::instant_after(self.raw.drop_bound());
        for hold in self.holders.drain() {
            let _ = self.finish(hold, Release::Within(Some(by)));
        }
    }
}

impl<R: RawLock> std::fmt::Debug for Reentrant<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reentrant")
            .field("name", &self.raw.name())
            .field("half", &self.half)
            .field("held_here", &self.holders.any())
            .finish_non_exhaustive()
    }
}

/// `Lock` (and its sealed half, the guards' API, the health listeners and the hold queries:
/// `is_acquired_in_this_process`, `is_owned_by_current_thread`, `fencing_token`, `health`) for
/// a lock type whose `Reentrant` is the field `lock`; `$thread` says where health callbacks
/// run.
macro_rules! reentrant_lock {
    ($ty:ty, $thread:literal) => {
        impl $ty {
            /// Whether any thread of this process holds the lock through this object.
            pub fn is_acquired_in_this_process(&self) -> bool {
                self.lock.is_acquired_in_this_process()
            }

            /// Whether the calling thread holds the lock through this object.
            pub fn is_owned_by_current_thread(&self) -> bool {
                self.lock.is_owned_by_current_thread()
            }

            /// The calling thread's fencing token, if it holds the lock.
            pub fn fencing_token(&self) -> Option<u64> {
                self.lock.fencing_token()
            }

            /// The health of the calling thread's hold, if it holds the lock, computed now.
            pub fn health(&self) -> Option<$crate::LockHealth> {
                self.lock.health()
            }
        }

        impl $crate::core::lock::Sealed for $ty {
            fn acquire_until(&self, until: Option<std::time::Instant>) -> $crate::Result<bool> {
                self.lock
                    .acquire($crate::core::deadline::Deadline::until(until))
            }

            fn release_as(&self, how: $crate::core::lock::Release) -> $crate::Result<()> {
                self.lock.release(how)
            }

            fn cancel(&self) {
                self.lock.cancel_waiters();
            }

            fn cap_holds(&self, max_hold: Option<std::time::Duration>) -> $crate::Result<()> {
                self.lock.set_max_hold(max_hold)
            }

            fn acquired_here(&self) -> bool {
                self.lock.is_acquired_in_this_process()
            }

            fn hold_id(&self) -> Option<u64> {
                self.lock.hold_id()
            }

            fn drop_bound(&self) -> std::time::Duration {
                self.lock.drop_bound()
            }
        }

        impl $crate::Lock for $ty {
            fn fencing_token(&self) -> Option<u64> {
                <$ty>::fencing_token(self)
            }

            fn health(&self) -> Option<$crate::LockHealth> {
                <$ty>::health(self)
            }
        }

        $crate::core::lock::forward_lock_api!($ty);
        $crate::core::health::forward_health_api!($ty, lock.feed, $thread);
    };
}
pub(crate) use reentrant_lock;
