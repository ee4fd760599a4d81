//! Waiting for a turn: the loop every Redis lock's acquire runs, and the waiters of one lock
//! object (for `cancel_waiters`).
//!
//! An attempt is one acquire script. Between attempts the waiter parks until its wake-up
//! message, the deadline, the moment the one ahead of it (the holder's key, the first lease,
//! or the first waiter's entry) would expire unrenewed, or the re-check interval, which covers
//! a lost wake-up and keeps its queue entry (whose lease is one TTL) alive.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::client::{Calling, Inner};
use super::keeper::ms;
use super::scripts::{invocation, Keys};
use super::slots::Slot;
use super::wake::Parker;
use crate::core::deadline::{instant_after, Deadline};
use crate::core::error::{Error, Result};

/// A granted attempt: the fencing token, and when the granting call was sent (the hold's
/// local lease counts from there).
pub(crate) type Grant = (u64, Duration);

/// The waiters of one lock object.
#[derive(Default)]
pub(crate) struct Waiters {
    cancelled: AtomicU64,
    parked: Mutex<Vec<Arc<Parker>>>,
}

impl Waiters {
    /// Ends every wait in progress with [`Error::Cancelled`].
    pub(crate) fn cancel(&self) {
        self.cancelled.fetch_add(1, Ordering::AcqRel);
        for p in self.parked.lock().iter() {
            p.wake();
        }
    }

    /// Runs `attempt` until it is granted (`Some((grant, waiter id))`), the deadline passes
    /// (`None`, after leaving the queue), or an error (after leaving the queue, and releasing in
    /// the background what the last attempt may have been granted). The waiter's id is made
    /// here (on a waiting slot of its own when one is free) and ends in `how.suffix`. `attempt` gets
    /// the connection, the id and the lease of the caller's queue entry in ms (0: do not
    /// queue), and answers `(1, token)` when granted, else `(0, ms until the one ahead would
    /// expire)` (-1: it never would). Waits at most `how.poll` between attempts.
    ///
    /// Leaving the queue: after a timeout, within what is left of one operation timeout past
    /// the deadline; after a failed connection, in the background (a second call to a server
    /// that did not answer the first would only double the wait); after a close, by the
    /// closing keeper, or by the waiter itself if an answer came in after the close began.
    pub(crate) fn wait(
        &self,
        inner: &Inner,
        keys: &Keys,
        how: How<'_>,
        deadline: Deadline,
        mut attempt: impl FnMut(&mut redis::Connection, &str, u64) -> redis::RedisResult<(i64, i64)>,
    ) -> Result<Option<(Grant, String)>> {
        let How {
            suffix,
            woken,
            poll,
        } = how;
        // A slot only for a wait that may park and is woken by a message: `try_lock` makes one
        // attempt, a waiter on redis-py's layout polls.
        let mut slot = match deadline.remaining() {
            Some(left) if left.is_zero() => None,
            _ if !woken => None,
            left => inner.slots.take(left.unwrap_or(Duration::MAX)),
        };
        let owner = format!(
            "{}{suffix}",
            inner.new_owner(slot.as_ref().map(Slot::prefix))
        );
        // Registered before the first attempt, so that no wake-up can come before it.
        let me = inner.wakes.register(&owner);
        let seen = self.cancelled.load(Ordering::Acquire);
        self.parked.lock().push(me.parker.clone());
        let mut turns = Turns::default();
        let outcome = self.turns(
            inner,
            keys,
            Parking {
                owner: &owner,
                parker: &me.parker,
                slot: &mut slot,
                seen,
            },
            deadline,
            poll,
            &mut attempt,
            &mut turns,
        );
        self.parked.lock().retain(|p| !Arc::ptr_eq(p, &me.parker));
        if let Some(slot) = slot.filter(|_| !inner.closed()) {
            inner.slots.give_back(slot);
        }
        let within = Deadline::after(inner.operation_timeout());
        if turns.late {
            // An answer came in after the Client began to close: the keeper may have taken
            // this waiter out of the queue before its attempt put it back, and knows nothing
            // of a grant.
            let (script, what) = if turns.late_grant {
                (Some(inner.scripts.release(keys.layout)), "release")
            } else {
                (inner.scripts.leave(keys.layout), "leave the queue")
            };
            if let Some(script) = script {
                let done = inner.call_by(keys, within, Calling::Closing, |c| {
                    let mut call = invocation(script, keys);
                    call.arg(&owner);
                    call.invoke::<i64>(c)
                });
                if let Err(e) = done {
                    tracing::debug!("zklock: a closed Redis Client's waiter could not {what}: {e}");
                }
            }
            inner.keeper.unqueued(&owner);
            return Err(Error::Closed);
        }
        match outcome {
            Ok(Some(grant)) => {
                if turns.queued {
                    inner.keeper.unqueued(&owner);
                }
                Ok(Some((grant, owner)))
            }
            Ok(None) => {
                if turns.queued {
                    let by = deadline
                        .instant()
                        .and_then(|at| at.checked_add(inner.operation_timeout()))
                        .map_or(within, Deadline::at);
                    leave(inner, keys, &owner, by);
                }
                Ok(None)
            }
            // The closing keeper takes the entry out: it is still registered.
            Err(Error::Closed) => Err(Error::Closed),
            Err(e) => {
                let unanswered = matches!(e, Error::ConnectionLoss | Error::Timeout);
                if unanswered && turns.asked {
                    inner.keeper.leave_later(keys, &owner);
                } else if turns.queued {
                    leave(inner, keys, &owner, within);
                }
                if e.outcome_unknown() {
                    let _ = inner.keeper.release_later(keys, &owner);
                }
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn turns(
        &self,
        inner: &Inner,
        keys: &Keys,
        parking: Parking<'_>,
        deadline: Deadline,
        poll: Duration,
        attempt: &mut impl FnMut(&mut redis::Connection, &str, u64) -> redis::RedisResult<(i64, i64)>,
        turns: &mut Turns,
    ) -> Result<Option<Grant>> {
        let Parking {
            owner,
            parker,
            slot,
            seen,
        } = parking;
        let ttl = inner.ttl();
        loop {
            if self.cancelled.load(Ordering::Acquire) != seen {
                return Err(Error::Cancelled);
            }
            if inner.closed() {
                return Err(Error::Closed);
            }
            let entry = if deadline.expired() { 0 } else { ms(ttl) };
            turns.asked |= entry != 0;
            let ((granted, value), sent) =
                inner.call(keys, deadline, |c| attempt(c, owner, entry))?;
            if granted != 1 && entry != 0 && !turns.queued {
                // Registered before the close flag is looked at below: a close that began
                // after that look finds the entry registered.
                inner.keeper.queued(keys, owner);
                turns.queued = true;
            }
            if inner.closed() {
                turns.late = true;
                turns.late_grant = granted == 1;
                return Err(Error::Closed);
            }
            if granted == 1 {
                let token = u64::try_from(value).map_err(|_| {
                    Error::Redis(format!("the server granted a negative token {value}"))
                })?;
                return Ok(Some((token, sent)));
            }
            if deadline.expired() {
                return Ok(None);
            }
            // -1: a key without a TTL, written by someone else: only the re-check helps.
            let expiry =
                u64::try_from(value).map_or(poll, |ms| Duration::from_millis(ms.saturating_add(2)));
            let wait = poll.min(expiry);
            let until: Instant = deadline
                .min_after(wait)
                .instant()
                .unwrap_or_else(|| instant_after(wait));
            match slot {
                Some(on) => {
                    let interrupted = || {
                        self.cancelled.load(Ordering::Acquire) != seen
                            || inner.closed()
                            || parker.take_wake()
                    };
                    if let Err(e) = on.park_until(owner, until, interrupted) {
                        // A wake-up may have been lost with it: subscribe again and look
                        // again at once. A slot that cannot be opened yet is tried again at
                        // the next turn (its wake-ups come on its channel only).
                        tracing::debug!("zklock: a Redis waiting slot broke: {e}");
                        if let Some(broken) = slot.take() {
                            let within = deadline.remaining().unwrap_or(Duration::MAX);
                            *slot = Some(inner.slots.reopen(broken, within));
                        }
                    }
                }
                None => {
                    parker.park_until(until);
                }
            }
        }
    }
}

/// How a lock waits: its waiter ids' suffix, whether a message wakes its waiters (not on
/// redis-py's layout, whose waiters poll), and the longest wait between attempts.
pub(crate) struct How<'a> {
    pub(crate) suffix: &'a str,
    pub(crate) woken: bool,
    pub(crate) poll: Duration,
}

/// Where a waiter parks between attempts: its slot if it has one, else its parking slot woken
/// by the Client's subscriber.
struct Parking<'a> {
    owner: &'a str,
    parker: &'a Parker,
    slot: &'a mut Option<Slot>,
    /// The cancel count when the wait began.
    seen: u64,
}

/// What the turns of one wait did.
#[derive(Default)]
struct Turns {
    /// An attempt asked to queue the waiter.
    asked: bool,
    /// An attempt put the waiter in the queue (registered with the keeper).
    queued: bool,
    /// An answer came in after the Client began to close.
    late: bool,
    /// That answer was a grant.
    late_grant: bool,
}

/// Takes `owner` out of the queue by `by`; if that fails, in the background (until its entry
/// would have expired by itself, one TTL after its last attempt).
fn leave(inner: &Inner, keys: &Keys, owner: &str, by: Deadline) {
    let Some(script) = inner.scripts.leave(keys.layout) else {
        inner.keeper.unqueued(owner);
        return;
    };
    let left = inner.call_by(keys, by, Calling::Open, |c| {
        let mut call = invocation(script, keys);
        call.arg(owner);
        call.invoke::<i64>(c)
    });
    match left {
        Ok(_) => inner.keeper.unqueued(owner),
        Err(e) => {
            tracing::debug!(
                "zklock: leaving the queue of Redis lock {:?} failed: {e}; in the background",
                keys.holder
            );
            inner.keeper.leave_later(keys, owner);
        }
    }
}
