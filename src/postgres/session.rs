//! One server session (a connection) of a [`PgClient`](super::PgClient): opened with the
//! server-side limits that end it when it goes silent (`connect.rs`), its statements, its end
//! known at once, and the heartbeat that checks it while it holds a lock.

use std::pin::{pin, Pin};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::connect::{self, set_sql, Limit, Own, Ties};
use super::error::{error, not_own_session};
use super::sql;
use super::tls::Tls;
use super::tokens::{self, Table};
use crate::core::error::{Error, Result};
use crate::core::lease::boot_clock;

/// One server session.
pub(crate) struct Session {
    pub(crate) client: tokio_postgres::Client,
    /// The connection, when zklock connected the socket itself: a caller's statement drives
    /// it on the caller's thread.
    own: Option<Own>,
    cancel: tokio_postgres::CancelToken,
    /// How to reach the server again, to cancel.
    tls: Tls,
    /// The server process serving it (`pg_backend_pid()`).
    pub(crate) pid: i32,
    /// This session's marker, added to the server session's `zklock.marker` when it opened:
    /// what tells its own server session from one a pooler hands it.
    pub(crate) marker: i64,
    /// Becomes true when the connection ends (closed by either side, broken, ended, or the
    /// Client closed).
    ended: watch::Receiver<bool>,
    /// Notified by [`Session::end`]: the connection's task drops the connection.
    stop: Arc<Notify>,
    /// The statements prepared on this session, by their text: each is parsed and planned
    /// once per session, where an unnamed statement is at every use (for the short statements
    /// of a lock, most of the server's work).
    prepared: Mutex<Vec<(Box<str>, tokio_postgres::Statement)>>,
    /// Held by a guarded transaction for its whole run, and by a hold's heartbeat for its
    /// statement: a heartbeat that finds a transaction running is skipped (the transaction's
    /// own statements renew the hold), so no heartbeat lands inside a caller's transaction.
    pub(crate) turn: tokio::sync::Mutex<()>,
}

impl Session {
    /// Opens a session, sets `limits` on it (sent with its first statement: no round trip
    /// more), adds its marker and learns its backend pid and the server's version, within
    /// `connect_timeout` and `operation_timeout`. The connection ends when `ties.close` turns
    /// true.
    pub(crate) async fn open(
        config: &tokio_postgres::Config,
        tls: &Tls,
        limits: Option<&[Limit]>,
        connect_timeout: Duration,
        operation_timeout: Duration,
        ties: Ties,
    ) -> Result<(Session, u32)> {
        let stop = Arc::new(Notify::new());
        let (client, own, ended) =
            connect::connect(config, tls, connect_timeout, ties, stop.clone()).await?;
        let cancel = client.cancel_token();
        let marker = fastrand::i32(1..);
        let marker_param: &(dyn ToSql + Sync) = &marker;
        let params = [(marker_param, Type::INT4)];
        let first = client.query_typed(sql::OPEN, &params);
        let rows = match limits {
            None => tokio::time::timeout(operation_timeout, first)
                .await
                .map_err(|_| Error::Timeout)?,
            Some(limits) => {
                let sets = set_sql(limits);
                let (set, rows) = tokio::time::timeout(operation_timeout, async {
                    tokio::join!(client.batch_execute(&sets), first)
                })
                .await
                .map_err(|_| Error::Timeout)?;
                set.map_err(|e| error(&e, false))?;
                rows
            }
        };
        if rows.as_ref().err().and_then(|e| e.code()) == Some(&SqlState::UNDEFINED_FUNCTION) {
            // PostgreSQL 9.5 and older have no `current_setting(name, missing_ok)`: such a
            // server is refused for its version, as a newer one older than 11 is.
            refuse_if_too_old(&client, operation_timeout).await?;
        }
        let row = within(operation_timeout, std::future::ready(rows)).await?;
        let (pid, version) = (int(&row, 0)?, int(&row, 1)?);
        let pid = i32::try_from(pid)
            .map_err(|_| Error::Postgres(format!("a backend pid out of range: {pid}")))?;
        if !row.try_get::<_, bool>(2).unwrap_or(false) {
            return Err(Error::Postgres(
                "another session added this session's marker to its server session: is a \
                 pooler between zklock and the server?"
                    .into(),
            ));
        }
        let session = Session {
            client,
            own,
            cancel,
            tls: tls.clone(),
            pid,
            marker: i64::from(marker),
            ended,
            stop,
            prepared: Mutex::new(Vec::new()),
            turn: tokio::sync::Mutex::new(()),
        };
        Ok((session, u32::try_from(version).unwrap_or(0)))
    }

    /// Sets `limits` on this session (one opened without them) and, in the same round trip,
    /// reads the server's `synchronous_standby_names` and looks for the table of tokens
    /// (`tokens.rs`): the table, if the role may read it.
    pub(crate) async fn apply(
        &self,
        limits: &[Limit],
        operation_timeout: Duration,
    ) -> Result<(String, Option<Table>)> {
        let sql = format!(
            "{}SELECT current_setting('synchronous_standby_names'), {}",
            set_sql(limits),
            tokens::FIND
        );
        let answer = tokio::time::timeout(operation_timeout, self.client.simple_query(&sql))
            .await
            .map_err(|_| Error::Timeout)?
            .map_err(|e| error(&e, false))?;
        let row = answer
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
            .ok_or_else(|| Error::Postgres("no answer to the connect statement".into()))?;
        let standbys = row.get(0).map(str::to_owned).ok_or_else(|| {
            Error::Postgres("no value of synchronous_standby_names in the answer".into())
        })?;
        let yes = |i| row.get(i) == Some("t");
        let table = match row.get(1) {
            Some(name) if yes(2) => Some(Table::new(name.to_owned(), yes(3))),
            _ => None,
        };
        Ok((standbys, table))
    }

    pub(crate) fn ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// Ends the session's connection without waiting for anything, so that the server frees
    /// whatever it holds: a socket zklock connected is shut down here, on the calling thread
    /// (the server reads its end at once); one tokio-postgres connected is closed by the
    /// connection's task on the Client's I/O thread, which this wakes. Dropping the session
    /// does the same.
    pub(crate) fn end(&self) {
        if let Some(own) = &self.own {
            own.close();
        }
        self.stop.notify_one();
    }

    /// One statement's rows, within `timeout`.
    pub(crate) async fn rows(
        &self,
        timeout: Duration,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<tokio_postgres::Row>> {
        let rows = pin!(self.query(sql, params));
        all_within(timeout, self.drive(rows)).await
    }

    /// One statement's first row, within `timeout`.
    pub(crate) async fn row(
        &self,
        timeout: Duration,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<tokio_postgres::Row> {
        let rows = pin!(self.query(sql, params));
        within(timeout, self.drive(rows)).await
    }

    /// One statement's rows, the statement prepared on this session at its first use (one
    /// round trip more, once). Unbounded: the caller bounds it and drives the session.
    pub(crate) async fn query(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let known = self
            .prepared
            .lock()
            .iter()
            .find(|(q, _)| **q == *sql)
            .map(|(_, s)| s.clone());
        let statement = match known {
            Some(statement) => statement,
            None => {
                let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
                let statement = self.client.prepare_typed(sql, &types).await?;
                self.prepared.lock().push((sql.into(), statement.clone()));
                statement
            }
        };
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
        self.client.query(&statement, &values).await
    }

    /// Runs `f`, statements of this session: a caller in a blocking call drives the session's
    /// socket itself meanwhile (`drive.rs`).
    pub(crate) async fn drive<F: std::future::Future>(&self, f: Pin<&mut F>) -> F::Output {
        match &self.own {
            Some(own) => own.drive(f).await,
            None => f.await,
        }
    }

    /// Asks the server to cancel the statement this session runs (from a connection of its
    /// own), within `timeout`.
    pub(crate) async fn cancel(&self, timeout: Duration) {
        let cancelled = async {
            match &self.own {
                Some(own) => own.cancel(&self.cancel, &self.tls).await,
                None => self
                    .cancel
                    .cancel_query(self.tls.clone())
                    .await
                    .map_err(|e| error(&e, false)),
            }
        };
        // Boxed: a cancel is rare, and its future (a connection of its own) is large, which
        // would make every statement's future that can cancel as large.
        match tokio::time::timeout(timeout, Box::pin(cancelled)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!("zklock: cancelling a PostgreSQL statement failed: {e}"),
            Err(_) => tracing::debug!("zklock: cancelling a PostgreSQL statement timed out"),
        }
    }

    /// Checks that the session is alive and still its own server session (shared with no other
    /// zklock session), for the lease: the lease clock's reading when the check was sent.
    pub(crate) async fn beat(&self, timeout: Duration) -> Result<Duration> {
        let sent = boot_clock();
        let row = self
            .row(timeout, sql::BEAT, &[(&self.marker, Type::INT8)])
            .await?;
        self.check_own(&row, 0, 1)?;
        Ok(sent)
    }

    /// [`Error::Postgres`] unless columns `pid` and `own` of `row` show this session's own
    /// server session.
    pub(crate) fn check_own(
        &self,
        row: &tokio_postgres::Row,
        pid: usize,
        own: usize,
    ) -> Result<()> {
        let own = row.try_get::<_, bool>(own).unwrap_or(false);
        if !own || int(row, pid)? != i64::from(self.pid) {
            return Err(Error::Postgres(not_own_session()));
        }
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.end();
    }
}

/// After the first statement failed with `undefined_function`: the server's version, read with
/// `SHOW server_version_num` on the same connection, refused when it is older than PostgreSQL
/// 11. `Ok` when the version cannot be read or is not too old (the statement's own error then
/// stands).
async fn refuse_if_too_old(client: &tokio_postgres::Client, timeout: Duration) -> Result<()> {
    let shown =
        match tokio::time::timeout(timeout, client.simple_query("SHOW server_version_num")).await {
            Ok(Ok(messages)) => messages.into_iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            }),
            _ => None,
        };
    version_check(shown.as_deref())
}

/// `server_version_num` as the server shows it (`"90524"` for 9.5.24), checked: an error for a
/// server older than PostgreSQL 11; `Ok` for a newer one or a value that is not a version.
fn version_check(shown: Option<&str>) -> Result<()> {
    match shown.and_then(|v| v.trim().parse::<u32>().ok()) {
        Some(version) => sql::check_version(version).map_err(Error::Postgres),
        None => Ok(()),
    }
}

/// The first row of a statement, within `timeout`.
async fn within(
    timeout: Duration,
    rows: impl std::future::Future<
        Output = std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>,
    >,
) -> Result<tokio_postgres::Row> {
    all_within(timeout, rows)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Postgres("a statement returned no row".into()))
}

/// A statement's rows, within `timeout`.
async fn all_within(
    timeout: Duration,
    rows: impl std::future::Future<
        Output = std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>,
    >,
) -> Result<Vec<tokio_postgres::Row>> {
    tokio::time::timeout(timeout, rows)
        .await
        .map_err(|_| Error::Timeout)?
        .map_err(|e| error(&e, false))
}

/// Column `i` of `row` as an integer of any width.
pub(crate) fn int(row: &tokio_postgres::Row, i: usize) -> Result<i64> {
    let bad = |e: tokio_postgres::Error| {
        Error::Postgres(format!("unexpected value in column {i} of an answer: {e}"))
    };
    match row.columns().get(i).map(|c| c.type_().clone()) {
        Some(Type::INT4) => row.try_get::<_, i32>(i).map(i64::from).map_err(bad),
        Some(Type::INT8) => row.try_get::<_, i64>(i).map_err(bad),
        other => Err(Error::Postgres(format!(
            "unexpected type {other:?} in column {i} of an answer"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_without_current_setting_missing_ok_is_refused_for_its_version() {
        let old = version_check(Some("90524")).unwrap_err().to_string();
        assert!(
            old.contains("PostgreSQL 9.5.24 is too old") && old.contains("11 or later"),
            "{old}"
        );
        assert!(version_check(Some("150004")).is_ok());
        // Not a version: the first statement's own error is reported instead.
        assert!(version_check(Some("")).is_ok());
        assert!(version_check(None).is_ok());
    }
}
