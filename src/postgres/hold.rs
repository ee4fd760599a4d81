//! A hold of an advisory lock on a session, kept alive by the session's heartbeat: how it is
//! kept and let go of, for the mutex, the semaphore's leases and the leader latch.

use std::sync::Arc;
use std::time::Instant;

use tokio_postgres::types::{ToSql, Type};

use super::advisory::{Grant, Key};
use super::client::Inner;
use super::keeper::{Keeping, Report};
use super::session::Session;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, HealthCell, LockHealth};
use crate::core::lease::LocalLease;
use crate::core::lock::Release;

/// One hold of an advisory lock on a session, kept alive by the session's heartbeat.
pub(crate) struct Holding {
    pub(crate) session: Arc<Session>,
    pub(crate) token: u64,
    health: HealthCell,
    lease: Arc<LocalLease>,
    keeping: Keeping,
    since: Instant,
}

impl Holding {
    /// The local lease of `grant`'s hold, from the send time of the statement that took it.
    pub(crate) fn lease(inner: &Inner, grant: &Grant) -> Arc<LocalLease> {
        lease(inner, grant)
    }

    /// Starts keeping `grant`'s session alive, renewing `lease` (from [`Holding::lease`]); its
    /// health goes to `health` and `report`.
    pub(crate) fn start(
        inner: &Inner,
        grant: Grant,
        lease: Arc<LocalLease>,
        health: HealthCell,
        report: Report,
    ) -> Holding {
        let keeping = inner
            .keeper
            .keep(grant.session.clone(), lease.clone(), report);
        Holding {
            session: grant.session,
            // The semaphore's statements read the token with the grant.
            token: grant.token.unwrap_or_default(),
            health,
            lease,
            keeping,
            since: Instant::now(),
        }
    }

    pub(crate) fn health(&self) -> LockHealth {
        worst(*self.health.lock(), self.lease.health())
    }

    /// Stops the heartbeat: the session, still holding the lock, for [`let_go`].
    pub(crate) fn stop(self) -> Arc<Session> {
        self.session
    }

    /// Lets go of the hold of `key` on `name` as `how` says; [`Error::LockLost`] if it had been
    /// lost. `shared` says that another hold uses the same session (a downgraded read-write
    /// lock): the session is then neither closed nor pooled, and a background release unlocks.
    pub(crate) fn let_go(
        self,
        inner: &Inner,
        name: &str,
        key: Key,
        how: Release,
        shared: bool,
    ) -> Result<()> {
        crate::core::metrics::released(name, self.since.elapsed());
        let lost = self.health() == LockHealth::Lost;
        let Holding {
            session, keeping, ..
        } = self;
        // The heartbeat stops.
        drop(keeping);
        let_go(inner, name, key, session, how, lost, shared)
    }
}

/// Lets go of `session`'s hold of `key` on `name` as `how` says (its heartbeat stopped);
/// [`Error::LockLost`] if it had been `lost`. `shared` says that another hold uses the same
/// session (a downgraded read-write lock): the session is then neither closed nor pooled, and a
/// background release unlocks.
pub(crate) fn let_go(
    inner: &Inner,
    name: &str,
    key: Key,
    session: Arc<Session>,
    how: Release,
    lost: bool,
    shared: bool,
) -> Result<()> {
    let until = match how {
        Release::Background if shared && !lost => {
            let (name, timeout) = (name.to_owned(), inner.operation_timeout);
            let unlock = inner.unlock_sql(key.sql).to_owned();
            inner.spawn(async move {
                let seed: &(dyn ToSql + Sync) = &key.seed;
                let name: &(dyn ToSql + Sync) = &name;
                let params = [(name, Type::TEXT), (seed, Type::INT8)];
                if let Err(e) = session.row(timeout, &unlock, &params).await {
                    tracing::debug!("zklock: a background PostgreSQL unlock failed: {e}");
                }
            });
            return Ok(());
        }
        // The session is ended here, on the calling thread, whoever else holds it (a
        // heartbeat on its way): the server frees the lock as it reads the end.
        Release::Background => {
            if !shared {
                session.end();
            }
            return if lost { Err(Error::LockLost) } else { Ok(()) };
        }
        Release::Within(until) => until,
    };
    if lost {
        return Err(Error::LockLost);
    }
    let deadline = until.map_or(Deadline::after(inner.operation_timeout), Deadline::at);
    let timeout = deadline.remaining().unwrap_or(inner.operation_timeout);
    let name: &(dyn ToSql + Sync) = &name;
    let seed: &(dyn ToSql + Sync) = &key.seed;
    let sql = inner.unlock_sql(key.sql);
    let unlocked = inner.block_on(async {
        let params = [(name, Type::TEXT), (seed, Type::INT8)];
        let row = match session.row(timeout, sql, &params).await {
            // The table of tokens refused (dropped, changed, no longer granted: an error
            // of its parse, plan or permission check, before the statement ran): the plain
            // unlock.
            Err(e) if inner.tokens_refused(sql, &e) => {
                session.row(timeout, key.sql.unlock, &params).await
            }
            row => row,
        };
        row.and_then(|r| {
            r.try_get::<_, bool>(0)
                .map_err(|e| Error::Postgres(format!("unexpected answer to unlock: {e}")))
        })
    });
    match unlocked {
        Ok(true) => {
            if !shared {
                inner.give_back(session);
            }
            Ok(())
        }
        // The server did not have it: the session was not the one that took it.
        Ok(false) => Err(Error::LockLost),
        // Not confirmed in time: the session is ended now (unless the other half of a
        // downgraded lock holds on it), so the server frees the lock as it reads the end,
        // with nothing left for the background.
        Err(e) => {
            if !shared {
                session.end();
            }
            Err(e)
        }
    }
}

/// The local lease of `grant`'s hold, from the send time of the statement that took it. The
/// grant is an answer of the server's, so the Client's connection state hears it too: while
/// holds are kept their heartbeats are the Client's, and a hold taken just before the last one
/// was released would otherwise leave up to a whole heartbeat period unheard.
pub(crate) fn lease(inner: &Inner, grant: &Grant) -> Arc<LocalLease> {
    inner.states.heard(grant.sent);
    let lease = LocalLease::new();
    lease.open_at(inner.session_timeout, inner.session_timeout / 2, grant.sent);
    Arc::new(lease)
}
