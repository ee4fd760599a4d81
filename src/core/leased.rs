//! The shell every backend's semaphore lease runs in, as [`Reentrant`](super::hold::Reentrant)
//! is for mutexes: the backend provides what one held lease is behind [`RawLease`] — its
//! health refined by what it knows locally, how it lets go within a deadline, how a drop lets
//! go — and [`Leased`] owns the sequence around it: the identity, the fencing token and the
//! health reported by the keeper, `release` and `release_timeout`, metrics, the answer for a
//! lost lease, and `Drop`.

use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::health::{HealthCell, LockHealth};
use super::lock::Release;

/// A backend's held lease, without the shell.
pub(crate) trait RawLease: Send {
    /// The lease's health now: `reported` (its keeper's last report) made worse by what the
    /// backend knows locally (its local lease, its connection, its Client).
    fn health(&self, reported: LockHealth) -> LockHealth;

    /// Lets go of the lease as `how` says (`Within(None)`: within the Client's operation
    /// timeout); `lost` says it had been lost (the shell then answers [`Error::LockLost`]
    /// whatever this returns). Called once.
    fn release(&mut self, how: Release, lost: bool) -> Result<()>;

    /// How a drop lets go: within a short bound in the caller (so that, the server reachable,
    /// another process can take the lease once the drop returns), or in the background where
    /// that is as quick (closing the lease's own session).
    fn drop_release(&self) -> Release;
}

/// One lease of a semaphore: a [`RawLease`] and what the core tracks of it.
pub(crate) struct Leased<R: RawLease> {
    pub(crate) raw: R,
    /// The semaphore's name, in metrics and logs.
    name: String,
    /// The lease's identity, as its `id()` answers.
    id: String,
    token: u64,
    health: HealthCell,
    since: Instant,
    returned: bool,
}

impl<R: RawLease> Leased<R> {
    /// A lease of semaphore `name` granted now, its health reported to `health`.
    pub(crate) fn new(raw: R, name: &str, id: String, token: u64, health: HealthCell) -> Self {
        Leased {
            raw,
            name: name.to_owned(),
            id,
            token,
            health,
            since: Instant::now(),
            returned: false,
        }
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
        self.raw.health(reported)
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
        let lost = self.health() == LockHealth::Lost;
        self.returned = true;
        super::metrics::released(&self.name, self.since.elapsed());
        let released = self.raw.release(how, lost);
        if lost {
            return Err(Error::LockLost);
        }
        released
    }
}

impl<R: RawLease> Drop for Leased<R> {
    fn drop(&mut self) {
        if self.returned {
            return;
        }
        let how = self.raw.drop_release();
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
