//! The keeper of a [`MySqlClient`](super::MySqlClient): one thread that keeps every hold of
//! the Client alive — a heartbeat on each `GET_LOCK` hold's session, a renewal of each table
//! lease on the Client's own session — reports each hold's health, lets go of the table leases
//! released in the background, and judges the connection state. It owns the Client's own
//! session (`KILL`s, renewals, the heartbeat when nothing is held) and the bell that wakes the
//! table mode's polling waiters.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use parking_lot::{Condvar, Mutex};

use super::session::{code, error, Session};
use super::sql::NOW_SQL;
use super::sql::{dequeue_sql, expire_sql, renew_sql, Record};
use crate::core::connection::{ConnectionState, States};
use crate::core::error::{Error, Result};
use crate::core::health::{worst, LockHealth};
use crate::core::hold::Report;
use crate::core::lease::{boot_clock, LocalLease};
use crate::core::server_clock::{ServerClock, Step};

/// The holds and leases of one Client, the Client's own session, and the keeper thread.
pub(crate) struct Keeper {
    /// The options of a new own session.
    opts: mysql::Opts,
    session_timeout: Duration,
    operation_timeout: Duration,
    /// The Client's: set at close or when the Client is dropped.
    closed: Arc<AtomicBool>,
    states: Arc<States>,
    /// The sessions holding a lock now, which the keeper keeps alive.
    holds: Mutex<Vec<Kept>>,
    next_hold: AtomicU64,
    /// The Client's own session: `KILL`s, renewals, and its heartbeat when nothing is held.
    side: Mutex<Option<Session>>,
    /// Wakes the keeper at close and when a table lease is let go of in the background.
    wake: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The table mode's leases held now, which the keeper renews.
    leases: Mutex<Vec<Leased>>,
    /// Table leases let go of in the background, which the keeper expires.
    releases: Mutex<Vec<Record>>,
    /// The `GET_LOCK` waits out now (their session, and whether their answer is in), ended
    /// when the Client reads `Lost`.
    waits: Mutex<Vec<(Weak<Session>, Arc<AtomicBool>)>>,
    /// The table mode's queue rows (key, waiter) of waits that ended, which the keeper deletes.
    dequeues: Mutex<Vec<(String, String)>>,
    /// The queue rows of waits going on, which a close deletes.
    queue_rows: Mutex<Vec<(String, String)>>,
    /// Wakes the table mode's waiters between polls (a cancel, a close, a lease let go of
    /// here); the count says how often.
    pub(crate) nap: Mutex<u64>,
    pub(crate) naps: Condvar,
    /// The database's clock as the keeper reads it while table leases are held, when it was
    /// last read, and until when (the lease clock) a step it found keeps leases `Suspended`.
    clock: Mutex<ServerClock>,
    clock_read: Mutex<Duration>,
    doubt_until: Mutex<Option<Duration>>,
}

/// A table lease the keeper renews.
struct Leased {
    id: u64,
    record: Record,
    lease: Arc<LocalLease>,
    report: Report,
}

/// A hold the keeper keeps alive.
struct Kept {
    id: u64,
    session: Arc<Session>,
    lease: Arc<LocalLease>,
    report: Report,
}

impl Keeper {
    /// A keeper of sessions opened with `opts`, the Client's own session `side` already open;
    /// its thread starts with [`start`](Self::start).
    pub(crate) fn new(
        opts: mysql::Opts,
        session_timeout: Duration,
        operation_timeout: Duration,
        closed: Arc<AtomicBool>,
        states: Arc<States>,
        side: Session,
    ) -> Keeper {
        Keeper {
            opts,
            session_timeout,
            operation_timeout,
            closed,
            states,
            holds: Mutex::default(),
            next_hold: AtomicU64::new(0),
            side: Mutex::new(Some(side)),
            wake: Condvar::new(),
            thread: Mutex::new(None),
            leases: Mutex::default(),
            releases: Mutex::default(),
            dequeues: Mutex::default(),
            queue_rows: Mutex::default(),
            waits: Mutex::default(),
            nap: Mutex::new(0),
            naps: Condvar::new(),
            clock: Mutex::new(ServerClock::new(session_timeout)),
            clock_read: Mutex::new(Duration::ZERO),
            doubt_until: Mutex::new(None),
        }
    }

    /// Starts the keeper thread, which ends when the Client closes or the keeper is dropped.
    pub(crate) fn start(self: &Arc<Keeper>) -> Result<()> {
        let weak = Arc::downgrade(self);
        let thread = std::thread::Builder::new()
            .name("zklock-mysql-keeper".into())
            .spawn(move || keep_alive(weak))
            .map_err(|e| Error::thread_start("zklock-mysql-keeper", &e))?;
        *self.thread.lock() = Some(thread);
        Ok(())
    }

    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// At close: every hold's session ended, and the hold reported `Lost`.
    pub(crate) fn lose_holds(&self) {
        let holds: Vec<Kept> = self.holds.lock().drain(..).collect();
        for kept in holds {
            kept.session.end();
            (kept.report)(LockHealth::Lost);
        }
    }

    /// At close: every table lease reported `Lost`, and let go of on the server at once, with
    /// the queue rows of the Client's waits.
    pub(crate) fn lose_leases(&self) {
        let leases: Vec<Leased> = self.leases.lock().drain(..).collect();
        let mut records: Vec<Record> = leases.iter().map(|l| l.record.clone()).collect();
        for leased in leases {
            (leased.report)(LockHealth::Lost);
        }
        records.extend(self.releases.lock().drain(..));
        let mut rows: Vec<(String, String)> = self.dequeues.lock().drain(..).collect();
        rows.extend(self.queue_rows.lock().drain(..));
        if let Err(e) = self.expire_within(&records, &rows, self.operation_timeout) {
            tracing::debug!("zklock: could not let go of MySQL table leases at close: {e}");
        }
        self.wake_waiters();
    }

    /// At close: lets go of `records` and deletes the queue `rows` within `bound` in all, waiting for the keeper's request
    /// on the Client's own session included; not at all if that session cannot be had by then
    /// or the server has closed it (the records expire by themselves within the lease).
    fn expire_within(
        &self,
        records: &[Record],
        rows: &[(String, String)],
        bound: Duration,
    ) -> Result<()> {
        if records.is_empty() && rows.is_empty() {
            return Ok(());
        }
        let until = crate::core::deadline::instant_after(bound);
        let Some(mut side) = self.side.try_lock_until(until) else {
            return Err(Error::Timeout);
        };
        let Some(session) = side.take().filter(|s| s.usable()) else {
            return Err(Error::ConnectionLoss);
        };
        let left = until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let sql = [expire_sql(records), dequeue_sql(rows)]
            .into_iter()
            .filter(|sql| !sql.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let answer = session.with(Some(left), self.operation_timeout, |c| {
            let mut result = c.query_iter(&sql)?;
            while result.iter().is_some() {}
            Ok(())
        });
        *side = Some(session);
        answer
    }

    /// When the Client is dropped: every hold's session ended (the server frees its lock).
    pub(crate) fn end_holds(&self) {
        for kept in self.holds.lock().drain(..) {
            kept.session.end();
        }
    }

    /// At close, last: the Client's own session closed and the keeper thread woken to end.
    pub(crate) fn stop(&self) {
        if let Some(side) = self.side.lock().take() {
            side.close();
        }
        self.wake.notify_all();
    }

    /// Wakes the table mode's waiters that sleep between polls.
    pub(crate) fn wake_waiters(&self) {
        *self.nap.lock() += 1;
        self.naps.notify_all();
    }

    /// Starts renewing the table lease `record`, its local lease `lease`; its health goes to
    /// `report`. Returns the lease's number for [`forget_lease`](Self::forget_lease).
    pub(crate) fn lease(&self, record: Record, lease: Arc<LocalLease>, report: Report) -> u64 {
        let id = self.next_hold.fetch_add(1, Ordering::Relaxed);
        let mut leases = self.leases.lock();
        if self.closed() {
            drop(leases);
            report(LockHealth::Lost);
            return id;
        }
        leases.push(Leased {
            id,
            record,
            lease,
            report,
        });
        id
    }

    /// Stops renewing table lease `id`; whether it was renewed.
    pub(crate) fn forget_lease(&self, id: u64) -> bool {
        let mut leases = self.leases.lock();
        let before = leases.len();
        leases.retain(|l| l.id != id);
        leases.len() != before
    }

    /// Has the keeper let go of `record` (a guard dropped, a release whose answer was lost).
    pub(crate) fn release_later(&self, record: Record) {
        self.releases.lock().push(record);
        self.wake.notify_all();
    }

    /// Has the keeper end the wait on `session` if the Client reads `Lost` before `done` is
    /// set (the wait's answer is in).
    pub(crate) fn watch_wait(&self, session: &Arc<Session>, done: Arc<AtomicBool>) {
        self.waits.lock().push((Arc::downgrade(session), done));
    }

    /// Judges the connection state; once it reads `Lost` (the server silent for the session
    /// timeout), every wait still out is ended: a frozen server would never answer it.
    fn judge(&self) {
        self.states.judge();
        let mut waits = self.waits.lock();
        waits.retain(|(session, done)| session.strong_count() > 0 && !done.load(Ordering::SeqCst));
        if self.states.state() != ConnectionState::Lost {
            return;
        }
        for (session, _) in waits.drain(..) {
            if let Some(session) = session.upgrade() {
                tracing::debug!(
                    "zklock: the MySQL server is lost: wait {} ended",
                    session.id
                );
                session.end();
            }
        }
    }

    /// Has the keeper delete the queue row of `waiter` for the record `key` (its wait ended).
    pub(crate) fn dequeue_later(&self, key: String, waiter: String) {
        self.unqueued(&key, &waiter);
        self.dequeues.lock().push((key, waiter));
        self.wake.notify_all();
    }

    /// `waiter` has a queue row for `key`, which a close deletes.
    pub(crate) fn queued(&self, key: &str, waiter: &str) {
        self.queue_rows
            .lock()
            .push((key.to_owned(), waiter.to_owned()));
    }

    /// `waiter`'s queue row for `key` is deleted, or left to the keeper.
    pub(crate) fn unqueued(&self, key: &str, waiter: &str) {
        self.queue_rows
            .lock()
            .retain(|(k, w)| k != key || w != waiter);
    }

    /// Lets go of the table leases `records` on the Client's own session (also once closed),
    /// waiting at most `timeout` for the answer.
    pub(crate) fn expire(&self, records: &[Record], timeout: Duration) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let sql = expire_sql(records);
        self.on_side(timeout, |c| {
            let mut result = c.query_iter(&sql)?;
            while result.iter().is_some() {}
            Ok(())
        })?;
        self.wake_waiters();
        Ok(())
    }

    /// `f` on the Client's own session, opened again if it has ended or the server has ended it
    /// (a restart: the request goes through a new connection at once, not a failed one), its answer awaited
    /// for at most `timeout`.
    pub(crate) fn on_side<T>(
        &self,
        timeout: Duration,
        f: impl Fn(&mut mysql::Conn) -> mysql::Result<T>,
    ) -> Result<T> {
        let mut side = self.side.lock();
        let session = match side.take().filter(|s| s.usable()) {
            Some(s) => s,
            None => Session::open(&self.opts).map_err(|e| error(&e))?,
        };
        let answer = session.with(Some(timeout), self.operation_timeout, f);
        *side = Some(session);
        answer
    }

    /// `KILL CONNECTION id` on the Client's own session (opened again if it has ended).
    pub(crate) fn kill(&self, id: u32) {
        let op = self.operation_timeout;
        let mut side = self.side.lock();
        for _ in 0..2 {
            let session = match side.take().filter(|s| s.usable()) {
                Some(s) => s,
                None => match Session::open(&self.opts) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!("zklock: cannot open a MySQL session to KILL {id}: {e}");
                        return;
                    }
                },
            };
            let killed = session.with(Some(op), op, |c| {
                c.query_drop(format!("KILL CONNECTION {id}"))
            });
            *side = Some(session);
            match killed {
                Ok(()) => return,
                Err(Error::MySql(why))
                    if why.contains(&format!("error {}", code::NO_SUCH_THREAD)) =>
                {
                    return
                }
                Err(Error::ConnectionLoss) => continue,
                Err(e) => {
                    tracing::debug!("zklock: KILL CONNECTION {id} failed: {e}");
                    return;
                }
            }
        }
    }

    /// Starts keeping `session` alive (its heartbeat), renewing `lease`; its health goes to
    /// `report`. Returns the hold's number for [`forget`](Self::forget).
    pub(crate) fn keep(
        &self,
        session: Arc<Session>,
        lease: Arc<LocalLease>,
        report: Report,
    ) -> u64 {
        let id = self.next_hold.fetch_add(1, Ordering::Relaxed);
        if self.closed() {
            session.end();
            report(LockHealth::Lost);
            return id;
        }
        self.holds.lock().push(Kept {
            id,
            session,
            lease,
            report,
        });
        id
    }

    /// Stops keeping hold `id` alive; whether it was kept (not released meanwhile).
    pub(crate) fn forget(&self, id: u64) -> bool {
        let mut holds = self.holds.lock();
        let before = holds.len();
        holds.retain(|k| k.id != id);
        holds.len() != before
    }

    /// Looks at every idle held session's socket: one the server has ended (`KILL`, a
    /// shutdown, a restart) makes its hold `Lost` now rather than at its next heartbeat.
    fn watch(&self) {
        let ended: Vec<(u64, Arc<Session>, Report)> = self
            .holds
            .lock()
            .iter()
            .filter(|k| k.session.ended_by_server())
            .map(|k| (k.id, k.session.clone(), k.report.clone()))
            .collect();
        for (id, session, report) in ended {
            // Released meanwhile: its release ended the session, nothing was lost.
            if !self.forget(id) {
                continue;
            }
            tracing::debug!(
                "zklock: the server ended MySQL session {} of a hold",
                session.id
            );
            session.end();
            report(LockHealth::Lost);
        }
    }

    /// Renews every table lease on the Client's own session, each answer awaited for at most
    /// `op`; whether the server answered.
    fn renew(&self, op: Duration) -> bool {
        let leases: Vec<(u64, Record, Arc<LocalLease>, Report)> = self
            .leases
            .lock()
            .iter()
            .map(|l| (l.id, l.record.clone(), l.lease.clone(), l.report.clone()))
            .collect();
        let mut heard = false;
        for (id, record, lease, report) in leases {
            let sql = renew_sql(&record, self.session_timeout);
            let sent = boot_clock();
            let renewed = self.on_side(op, |c| {
                c.query_drop(&sql)?;
                Ok(c.affected_rows())
            });
            match renewed {
                Ok(1) => {
                    lease.heard_at(sent);
                    self.states.heard(sent);
                    heard = true;
                }
                Ok(_) => {
                    self.states.heard(sent);
                    heard = true;
                    // Expired by the database's clock, or taken: lost (unless let go of since).
                    if self.forget_lease(id) {
                        tracing::warn!(
                            "zklock: a MySQL table lease was lost: {} version {} has expired \
                             or was taken",
                            record.key,
                            record.version
                        );
                        report(LockHealth::Lost);
                    }
                }
                Err(e) => {
                    tracing::debug!("zklock: a MySQL table lease's renewal failed: {e}");
                    self.states.failed();
                    // The server is not answering: the others would wait as long. They are
                    // renewed at the next round, their leases reading Suspended meanwhile.
                    if matches!(e, Error::ConnectionLoss | Error::Io { .. }) {
                        break;
                    }
                }
            }
        }
        heard
    }

    /// While table leases are held, reads the database's clock (every twelfth of the lease,
    /// from 100 to 500 ms apart); whether it stepped since the last reading. A step is logged,
    /// and keeps every lease `Suspended` for a renewal period.
    fn watch_clock(&self) -> bool {
        if self.leases.lock().is_empty() {
            self.clock.lock().forget();
            return false;
        }
        let every = (self.session_timeout / 12)
            .clamp(Duration::from_millis(100), Duration::from_millis(500));
        let sent = boot_clock();
        {
            let mut read = self.clock_read.lock();
            if sent.saturating_sub(*read) < every {
                return false;
            }
            *read = sent;
        }
        let op = self
            .operation_timeout
            .min(self.session_timeout / 6)
            .max(Duration::from_millis(10));
        let Ok(Some(db_us)) = self.on_side(op, |c| c.query_first::<i64, _>(NOW_SQL)) else {
            // Unanswered: the renewals judge the server.
            return false;
        };
        let answered = boot_clock();
        self.states.heard(sent);
        let Some(step) = self.clock.lock().observe(i128::from(db_us), sent, answered) else {
            return false;
        };
        let effect = match step {
            Step::Forward(_) => "table leases expire early by up to as much (renewing now)",
            Step::Back(_) => "table leases outlive their lease by up to as much",
        };
        tracing::warn!(
            "zklock: the MySQL server's clock stepped {step} against this host's: {effect}; \
             held leases read Suspended for a renewal period"
        );
        *self.doubt_until.lock() = Some(answered + self.session_timeout / 3);
        true
    }

    /// Reports each table lease's local reading (`Suspended` when renewals fail or the
    /// database's clock stepped lately, `Lost` once a whole lease has passed since the last
    /// renewal that was answered).
    fn report_leases(&self) {
        let leases: Vec<(u64, Arc<LocalLease>, Report)> = self
            .leases
            .lock()
            .iter()
            .map(|l| (l.id, l.lease.clone(), l.report.clone()))
            .collect();
        let doubt = {
            let mut until = self.doubt_until.lock();
            *until = until.filter(|&u| boot_clock() < u);
            until.is_some()
        };
        for (id, lease, report) in leases {
            let mut health = lease.health();
            if doubt {
                health = worst(health, LockHealth::Suspended);
            }
            if health == LockHealth::Lost {
                self.forget_lease(id);
            }
            report(health);
        }
    }

    /// Lets go of the table leases released in the background, and deletes the queue rows of
    /// waits that ended.
    fn let_go(&self) {
        let records: Vec<Record> = std::mem::take(&mut *self.releases.lock());
        if let Err(e) = self.expire(&records, self.operation_timeout) {
            // They expire by themselves within the session timeout.
            tracing::debug!("zklock: could not let go of MySQL table leases: {e}");
        }
        let rows: Vec<(String, String)> = std::mem::take(&mut *self.dequeues.lock());
        if rows.is_empty() {
            return;
        }
        let sql = dequeue_sql(&rows);
        let deleted = self.on_side(self.operation_timeout, |c| {
            let mut result = c.query_iter(&sql)?;
            while result.iter().is_some() {}
            Ok(())
        });
        if let Err(e) = deleted {
            // Dead rows do not count, and go with a later wait's.
            tracing::debug!("zklock: could not delete MySQL queue rows: {e}");
        }
    }

    /// One round of heartbeats: each hold's, or the Client's own when nothing is held.
    fn beat(&self) {
        let op = self
            .operation_timeout
            .min(self.session_timeout / 6)
            .max(Duration::from_millis(10));
        let holds: Vec<(u64, Arc<Session>, Arc<LocalLease>, Report)> = self
            .holds
            .lock()
            .iter()
            .map(|k| (k.id, k.session.clone(), k.lease.clone(), k.report.clone()))
            .collect();
        let mut heard = self.renew(op);
        // A hold's session busy past `op` (a guarded transaction, a release) is no sign of a
        // silent server: its own answer will tell; no heartbeat of the Client's stands in.
        let mut busy = false;
        for (id, session, lease, report) in holds {
            let sent = boot_clock();
            // A guarded transaction on the session (a statement's time at most) renews the
            // hold by its own answers: past `op` the heartbeat is skipped, not waited for.
            let Some(pinged) = session.try_with(Instant::now() + op, Some(op), op, |c| c.ping())
            else {
                busy = true;
                continue;
            };
            match pinged {
                Ok(()) => {
                    lease.heard_at(sent);
                    self.states.heard(sent);
                    heard = true;
                }
                // Released while its heartbeat was out (the release ended the session): not
                // a loss, and says nothing of the server.
                Err(_) if !self.forget(id) => {}
                Err(e) => {
                    // Its session is gone or its state unknown: the server has freed the lock
                    // or will, so the hold is lost, and its session is ended now.
                    tracing::debug!("zklock: a MySQL hold's heartbeat failed: {e}");
                    session.end();
                    report(LockHealth::Lost);
                    self.states.failed();
                }
            }
        }
        if !heard && !busy && !self.closed() {
            let sent = boot_clock();
            let mut side = self.side.lock();
            let beat = match side.take().filter(|s| s.usable()) {
                Some(s) => Ok(s),
                None => Session::open(&self.opts).map_err(|e| error(&e)),
            }
            .and_then(|s| {
                s.ping(op)?;
                Ok(s)
            });
            match beat {
                Ok(s) => {
                    *side = Some(s);
                    self.states.heard(sent);
                }
                Err(e) => {
                    tracing::debug!("zklock: a MySQL Client heartbeat failed: {e}");
                    self.states.failed();
                }
            }
        }
        self.judge();
    }
}

/// The keeper thread: a round of heartbeats every third of the session timeout, and the
/// connection state judged in between, until the Client closes or is dropped.
fn keep_alive(keeper: Weak<Keeper>) {
    let Some(timeout) = keeper.upgrade().map(|i| i.session_timeout) else {
        return;
    };
    let tick = (timeout / 20).clamp(Duration::from_millis(5), Duration::from_millis(500));
    let mut last = boot_clock();
    loop {
        let Some(inner) = keeper.upgrade() else {
            return;
        };
        if inner.closed() {
            return;
        }
        inner.let_go();
        // A step of the database's clock: the leases are renewed now, so that one the step
        // expired reads Lost at once.
        let stepped = inner.watch_clock();
        if stepped || boot_clock().saturating_sub(last) >= timeout / 3 {
            last = boot_clock();
            inner.beat();
            inner.report_leases();
        } else {
            inner.watch();
            inner.report_leases();
            inner.judge();
        }
        let mut thread = inner.thread.lock();
        if !inner.closed() && inner.releases.lock().is_empty() && inner.dequeues.lock().is_empty() {
            inner.wake.wait_for(&mut thread, tick);
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.end_holds();
    }
}
