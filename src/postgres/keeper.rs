//! The hold keeper of a [`PgClient`](super::PgClient): one task for every hold of the Client,
//! beating on each hold's session and reporting each hold's health.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{watch, Notify};

use super::session::Session;
use crate::core::connection::States;
use crate::core::error::Error;
use crate::core::health::LockHealth;
use crate::core::lease::LocalLease;

/// What a session that holds a lock reports through.
pub(crate) type Report = Arc<dyn Fn(LockHealth) + Send + Sync>;

/// Stops keeping a hold when dropped.
pub(crate) struct Keeping(Arc<AtomicBool>);

impl Drop for Keeping {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The holds of one Client, kept alive by one task for all of them ([`Keeper::run`]): a
/// heartbeat on each hold's session every third of the session timeout (each acknowledged one
/// renews the hold's lease from its send time), `Lost` at once when a session's connection ends
/// or a session turns out not to be its own, and each lease's reading reported as time passes.
/// Each heartbeat's outcome also goes to the Client's connection states. A heartbeat due while
/// a guarded transaction runs on the session is skipped: the transaction's answers renew the
/// hold. Taking a hold into the keeper wakes no thread: it is looked at from the next tick on.
pub(crate) struct Keeper {
    holds: Mutex<Holds>,
    /// Notified when a session's connection ends, so that its hold reads `Lost` at once.
    pub(crate) ended: Arc<Notify>,
    states: Arc<States>,
    /// How often every hold is looked at.
    tick: Duration,
    period: Duration,
    /// A heartbeat waits at most a sixth of the session timeout, so that a silent server delays
    /// the health reported by no more than that.
    beat_timeout: Duration,
}

#[derive(Default)]
struct Holds {
    kept: Vec<Kept>,
    /// The Client closed: every hold was reported lost, and a hold taken now is at once.
    closed: bool,
}

struct Kept {
    /// Not kept alive by the keeper: a hold let go of ends its session at once.
    session: std::sync::Weak<Session>,
    lease: Arc<LocalLease>,
    report: Report,
    next_beat: Instant,
    /// Released (its `Keeping` dropped) or lost: no longer kept.
    done: Arc<AtomicBool>,
    /// A heartbeat is on its way.
    beating: Arc<AtomicBool>,
}

impl Keeper {
    /// A keeper for a Client whose sessions notify `ended` when they end.
    pub(crate) fn new(
        states: Arc<States>,
        ended: Arc<Notify>,
        timeout: Duration,
        operation_timeout: Duration,
    ) -> Keeper {
        Keeper {
            holds: Mutex::default(),
            ended,
            states,
            tick: (timeout / 20).clamp(Duration::from_millis(5), Duration::from_millis(500)),
            period: timeout / 3,
            beat_timeout: operation_timeout
                .min(timeout / 6)
                .max(Duration::from_millis(10)),
        }
    }

    /// Keeps `session`'s hold, renewing `lease` and reporting through `report`, until the
    /// returned [`Keeping`] is dropped.
    pub(crate) fn keep(
        &self,
        session: Arc<Session>,
        lease: Arc<LocalLease>,
        report: Report,
    ) -> Keeping {
        let done = Arc::new(AtomicBool::new(false));
        let mut holds = self.holds.lock();
        if holds.closed {
            drop(holds);
            done.store(true, Ordering::SeqCst);
            session.end();
            report(LockHealth::Lost);
            return Keeping(done);
        }
        let kept = &mut holds.kept;
        // Released holds leave at the next look; short holds in quick succession are pruned
        // here too, at a cost that stays constant per hold.
        if kept.len() >= 64 && kept.len().is_power_of_two() {
            kept.retain(|kept| !kept.done.load(Ordering::SeqCst));
        }
        kept.push(Kept {
            session: Arc::downgrade(&session),
            lease,
            report,
            next_beat: Instant::now() + self.period,
            done: done.clone(),
            beating: Arc::default(),
        });
        Keeping(done)
    }

    /// Whether a hold is kept now: its heartbeats tell the Client's connection state.
    pub(crate) fn keeps_any(&self) -> bool {
        self.holds
            .lock()
            .kept
            .iter()
            .any(|kept| !kept.done.load(Ordering::SeqCst))
    }

    /// The Client closes: every hold's session ends now and the hold reads `Lost` when this
    /// returns; a hold taken later reads `Lost` at once.
    pub(crate) fn close(&self) {
        let kept = {
            let mut holds = self.holds.lock();
            holds.closed = true;
            std::mem::take(&mut holds.kept)
        };
        for kept in kept {
            if kept.done.swap(true, Ordering::SeqCst) {
                continue;
            }
            if let Some(session) = kept.session.upgrade() {
                session.end();
            }
            (kept.report)(LockHealth::Lost);
        }
    }

    /// The keeper's task, until `closed` turns true or the keeper is dropped.
    pub(crate) async fn run(keeper: std::sync::Weak<Keeper>, mut closed: watch::Receiver<bool>) {
        loop {
            let Some(k) = keeper.upgrade() else {
                return;
            };
            let (tick, ended) = (k.tick, k.ended.clone());
            drop(k);
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                () = ended.notified() => {}
                _ = closed.wait_for(|c| *c) => {
                    // `PgClient::close` has done this already; a Client dropped has no hold.
                    if let Some(k) = keeper.upgrade() {
                        k.close();
                    }
                    return;
                }
            }
            match keeper.upgrade() {
                Some(k) => k.look(),
                None => return,
            }
        }
    }

    /// One look at every hold: its end, its heartbeat, its lease.
    fn look(&self) {
        let now = Instant::now();
        let mut reports = Vec::new();
        self.holds.lock().kept.retain_mut(|kept| {
            // A hold released at the moment its session closes is not reported lost.
            if kept.done.load(Ordering::SeqCst) {
                return false;
            }
            let Some(session) = kept.session.upgrade() else {
                // Let go of (its session dropped before its `Keeping`).
                return false;
            };
            if session.ended() {
                kept.done.store(true, Ordering::SeqCst);
                reports.push((kept.report.clone(), LockHealth::Lost));
                return false;
            }
            if now >= kept.next_beat && !kept.beating.swap(true, Ordering::SeqCst) {
                kept.next_beat = now + self.period;
                tokio::spawn(beat(
                    session,
                    kept.lease.clone(),
                    kept.report.clone(),
                    self.states.clone(),
                    (kept.done.clone(), kept.beating.clone()),
                    self.beat_timeout,
                ));
            }
            reports.push((kept.report.clone(), kept.lease.health()));
            true
        });
        for (report, health) in reports {
            report(health);
        }
    }
}

/// One heartbeat of a kept hold (`done` and `beating` are the hold's flags).
async fn beat(
    session: Arc<Session>,
    lease: Arc<LocalLease>,
    report: Report,
    states: Arc<States>,
    (done, beating): (Arc<AtomicBool>, Arc<AtomicBool>),
    timeout: Duration,
) {
    // A guarded transaction runs on the session: its statements renew the hold instead.
    let Ok(turn) = session.turn.try_lock() else {
        beating.store(false, Ordering::SeqCst);
        return;
    };
    let beat = session.beat(timeout).await;
    drop(turn);
    beating.store(false, Ordering::SeqCst);
    // An answer says the server is there, whatever became of the hold meanwhile (a release
    // in flight): the Client's connection state hears it.
    if let Ok(sent) = beat {
        states.heard(sent);
    }
    if done.load(Ordering::SeqCst) {
        return;
    }
    match beat {
        Ok(sent) => lease.heard_at(sent),
        Err(Error::Postgres(why)) => {
            tracing::warn!("zklock: a PostgreSQL lock was lost: {why}");
            done.store(true, Ordering::SeqCst);
            report(LockHealth::Lost);
        }
        Err(e) => {
            tracing::debug!("zklock: a PostgreSQL heartbeat failed: {e}");
            states.failed();
        }
    }
}
