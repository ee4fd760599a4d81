//! The shell every backend's semaphore lease runs in, as [`Reentrant`](super::hold::Reentrant)
//! is for mutexes: the backend provides what one held lease is behind [`RawLease`] — its
//! health refined by what it knows locally, how it lets go within a deadline, how a drop lets
//! go — and [`Leased`] owns the sequence around it: the identity, the fencing token and the
//! health reported by the keeper, `release` and `release_timeout`, metrics, the answer for a
//! lost lease, its cap (`max_hold`), and `Drop`.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::error::{Error, Result};
use super::health::{HealthCell, LockHealth};
use super::hold::Report;
use super::lock::Release;
use super::max_hold::{self, Job, Key};

/// A backend's held lease, without the shell.
pub(crate) trait RawLease: Send + 'static {
    /// The lease's health now: `reported` (its keeper's last report) made worse by what the
    /// backend knows locally (its local lease, its connection, its Client).
    fn health(&self, reported: LockHealth) -> LockHealth;

    /// Lets go of the lease as `how` says (`Within(None)`: within the Client's operation
    /// timeout); `lost` says it had been lost (the shell then answers [`Error::LockLost`]
    /// whatever this returns). Called once: by the holder, or with `Release::Background` by
    /// the cap timer's thread when the lease's `max_hold` passes (that must not block).
    fn release(&mut self, how: Release, lost: bool) -> Result<()>;

    /// How a drop lets go: within a short bound in the caller (so that, the server reachable,
    /// another process can take the lease once the drop returns), or in the background where
    /// that is as quick (closing the lease's own session).
    fn drop_release(&self) -> Release;
}

/// One lease of a semaphore: a [`RawLease`] and what the core tracks of it.
///
/// A capped lease (`max_hold`) is let go of by the process's cap timer when its time passes:
/// it reads `Lost` and its subscribers hear it, the backend lets go of it in the background,
/// and the holder's `release` answers [`Error::LockLost`].
pub(crate) struct Leased<R: RawLease> {
    /// The backend's lease, shared with the cap timer's job (which holds it weakly); locked
    /// only for a look or a release.
    raw: Arc<Mutex<Raw<R>>>,
    /// The semaphore's name, in metrics and logs.
    name: String,
    /// The lease's identity, as its `id()` answers.
    id: String,
    token: u64,
    health: HealthCell,
    since: Instant,
    returned: bool,
    /// The cap timer's job for this lease, cancelled by its release.
    cap: Option<Key>,
}

/// The backend's lease, and who let go of it: its cap, or its holder.
struct Raw<R> {
    lease: R,
    capped: bool,
    released: bool,
}

impl<R: RawLease> Leased<R> {
    /// A lease of semaphore `name` granted now, its health reported to `health`.
    pub(crate) fn new(raw: R, name: &str, id: String, token: u64, health: HealthCell) -> Self {
        Leased {
            raw: Arc::new(Mutex::new(Raw {
                lease: raw,
                capped: false,
                released: false,
            })),
            name: name.to_owned(),
            id,
            token,
            health,
            since: Instant::now(),
            returned: false,
            cap: None,
        }
    }

    /// The lease capped at `max_hold` after its grant (`None`, or a length past what the clock
    /// can count: no cap); `report` is its health's report function, which tells its
    /// subscribers.
    pub(crate) fn capped(mut self, max_hold: Option<Duration>, report: Report) -> Self {
        if let Some(at) = max_hold.and_then(|cap| self.since.checked_add(cap)) {
            let (name, since) = (self.name.clone(), self.since);
            let job = cap_job(Arc::downgrade(&self.raw), name, since, report);
            self.cap = max_hold::schedule(at, job);
        }
        self
    }

    /// `f` of the backend's lease.
    pub(crate) fn with_raw<T>(&self, f: impl FnOnce(&R) -> T) -> T {
        f(&self.raw.lock().lease)
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    pub(crate) fn health(&self) -> LockHealth {
        if self.returned {
            return LockHealth::Lost;
        }
        // Read apart: the backend may read the same cell.
        let reported = *self.health.lock();
        let raw = self.raw.lock();
        if raw.capped {
            return LockHealth::Lost;
        }
        raw.lease.health(reported)
    }

    /// Lets go of the lease by `timeout` from now (past what an `Instant` can hold: within the
    /// Client's operation timeout).
    pub(crate) fn release_timeout(&mut self, timeout: Duration) -> Result<()> {
        self.release_as(Release::Within(Instant::now().checked_add(timeout)))
    }

    /// Lets go of the lease as `how` says; [`Error::LockLost`] if it had been lost. A second
    /// call does nothing.
    pub(crate) fn release_as(&mut self, how: Release) -> Result<()> {
        if self.returned {
            return Ok(());
        }
        if let Some(key) = self.cap.take() {
            max_hold::cancel(key);
        }
        let reported = *self.health.lock();
        let mut raw = self.raw.lock();
        self.returned = true;
        if raw.capped {
            return Err(Error::LockLost);
        }
        // A cap's job tried again later finds it released.
        raw.released = true;
        let lost = raw.lease.health(reported) == LockHealth::Lost;
        super::metrics::released(&self.name, self.since.elapsed());
        let released = raw.lease.release(how, lost);
        if lost {
            return Err(Error::LockLost);
        }
        released
    }
}

/// What the cap timer does when a lease's cap passes: marks it capped (nothing if it was
/// released meanwhile), reports it `Lost`, and has the backend let go of it in the background.
/// A lease being looked at or released right then is tried again shortly, so that the timer
/// never waits on a release in progress.
fn cap_job<R: RawLease>(
    raw: Weak<Mutex<Raw<R>>>,
    name: String,
    since: Instant,
    report: Report,
) -> Job {
    Box::new(move || {
        let Some(shared) = raw.upgrade() else {
            return;
        };
        let Some(mut held) = shared.try_lock() else {
            let again = Instant::now() + Duration::from_millis(10);
            max_hold::schedule(again, cap_job(raw, name, since, report));
            return;
        };
        if held.capped || held.released {
            return;
        }
        held.capped = true;
        let lost = held.lease.health(LockHealth::Held) == LockHealth::Lost;
        report(LockHealth::Lost);
        super::metrics::released(&name, since.elapsed());
        tracing::info!("zklock: a lease of {name:?} reached its max_hold and was let go of");
        if let Err(e) = held.lease.release(Release::Background, lost) {
            tracing::debug!("zklock: letting go of a capped lease of {name:?}: {e}");
        }
    })
}

impl<R: RawLease> Drop for Leased<R> {
    fn drop(&mut self) {
        if self.returned {
            return;
        }
        let how = self.raw.lock().lease.drop_release();
        match self.release_as(how) {
            Ok(()) | Err(Error::LockLost) => {}
            Err(e) => tracing::warn!(
                "zklock: returning lease {} of {:?} on drop: {e}",
                self.id,
                self.name
            ),
        }
    }
}

/// A drop's release in the caller within `bound`, the rest in the background.
pub(crate) fn within(bound: Duration) -> Release {
    Release::Within(Some(super::deadline::instant_after(bound)))
}

/// The API every backend's lease type shares, for a type whose [`Leased`] is the field
/// `lease`: `id`, `fencing_token`, `health`, `release`, `release_timeout` and `Debug`.
/// `Drop` comes from the field.
macro_rules! leased {
    ($ty:ident) => {
        impl $ty {
            /// The lease's identity in its semaphore (see the type's docs for what it is on
            /// this backend).
            pub fn id(&self) -> &str {
                self.lease.id()
            }

            /// The fencing token of this grant: above every token granted before it on the
            /// semaphore's lease (see the type's docs for its source on this backend).
            pub fn fencing_token(&self) -> u64 {
                self.lease.token()
            }

            /// Held, Suspended or Lost, computed now: a process that stood still past the
            /// server's timer reads `Lost` before its threads notice.
            pub fn health(&self) -> $crate::LockHealth {
                self.lease.health()
            }

            /// Returns the lease, reporting errors, waiting at most the Client's operation
            /// timeout; what is not done by then goes on in the background (a lease with a
            /// session of its own closes it, which frees the lease on the server).
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost) if the lease had been lost; a
            /// connection error if the return could not be confirmed in time.
            pub fn release(mut self) -> $crate::Result<()> {
                self.lease
                    .release_as($crate::core::lock::Release::Within(None))
            }

            /// As [`release`](Self::release), waiting at most `timeout` (a `timeout` past what
            /// the clock can count: the Client's operation timeout).
            ///
            /// # Errors
            /// As [`release`](Self::release).
            pub fn release_timeout(mut self, timeout: std::time::Duration) -> $crate::Result<()> {
                self.lease.release_timeout(timeout)
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("semaphore", &self.lease.name())
                    .field("id", &self.lease.id())
                    .field("fencing_token", &self.lease.token())
                    .field("health", &self.lease.health())
                    .finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use leased;

/// `set_max_hold` for a semaphore whose [`HealthFeed`](super::health::HealthFeed) is the field
/// `$feed`: the cap of the leases it grants from now on.
macro_rules! capped_semaphore {
    ($ty:ty, $feed:ident) => {
        impl $ty {
            /// Caps every lease granted through this object from now on at `max_hold` after
            /// its grant, even while the Client keeps renewing it; `None` removes the cap.
            /// Past the cap the lease reads `Lost`, its subscribers hear it, it is let go of
            /// on the server in the background, and its `release` answers
            /// [`LockLost`](crate::Error::LockLost) (see
            /// [`Lock::set_max_hold`](crate::Lock::set_max_hold)).
            ///
            /// # Errors
            /// [`InvalidArgument`](crate::Error::InvalidArgument) for zero (a length past what
            /// the clock can count is no cap); [`ThreadStart`](crate::Error::ThreadStart) if
            /// the timer thread cannot start.
            pub fn set_max_hold(
                &self,
                max_hold: Option<std::time::Duration>,
            ) -> $crate::Result<()> {
                self.$feed.set_max_hold(max_hold)
            }
        }
    };
}
pub(crate) use capped_semaphore;
