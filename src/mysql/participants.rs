//! [`MySqlParticipant`]: who holds and who waits for a name's locks — in the `GET_LOCK` mode
//! from `IS_USED_LOCK` and the process list (zklock's connections and any other SQL client's
//! that runs the documented SQL), in the table mode from the lease record.

use std::time::Duration;

use mysql::prelude::Queryable;

use super::client::{Inner, MySqlClient};
use super::mode::MySqlMode;
use super::semaphore::MAX_LEASES;
use super::sql::{check_name, key_sql, marked_token_sql, RECORDS, TOKENS};
use crate::core::error::{Error, Result};

/// A connection that holds or waits for one of the locks of a name — the mutex's (and the
/// leader latch's) or a semaphore's lease — or, in the table mode, the lease record's holder.
/// From [`MySqlClient::participants`](super::MySqlClient::participants).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::MySqlClient::connect("mysql://app:secret@127.0.0.1/app")?;
/// for p in client.participants("nightly", 0)? {
///     let what = if p.holds { "holds" } else { "waits" };
///     println!("connection {:?} ({:?}) {what} the {}", p.connection, p.user, p.kind);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MySqlParticipant {
    /// `lock` (a mutex, a latch) or `lease` (a semaphore's).
    pub kind: &'static str,
    /// A lease's number, 1 to the semaphore's size (`None` for a lock).
    pub lease: Option<u32>,
    /// Whether it holds; otherwise it waits (`GET_LOCK` mode only: the table mode's waiters
    /// poll and leave no trace on the server).
    pub holds: bool,
    /// The server connection (`CONNECTION_ID()`) that holds or waits; `None` in the table
    /// mode, where no connection holds the lease.
    pub connection: Option<u64>,
    /// The connection's user; `None` when the process list does not show it to the reading
    /// user (without the `PROCESS` privilege, another user's connections are hidden).
    pub user: Option<String>,
    /// The connection's client `host:port`, when the process list shows it.
    pub client: Option<String>,
    /// How long it has waited, in whole seconds (waiters only: the server keeps no time of a
    /// grant).
    pub waiting: Option<Duration>,
    /// The table mode's record: its owner (a random id per hold).
    pub owner: Option<String>,
    /// The hold's fencing token, where the server shows whose it is: in the table mode the
    /// record's version; in the `GET_LOCK` mode a lease holder's (its lease's counter, bumped
    /// by its grant) and a mutex's or leader latch's holder's (the name's counter, when the
    /// counter's mark names the holding connection and was made since the server started: a
    /// latch's term bumps it with its grant, a mutex's holder when it first asks for its
    /// token). `None` for a waiter, for a mutex holder that has not asked for its token yet,
    /// and for a holder that took the lock with plain SQL.
    pub token: Option<u64>,
    /// The table mode's record: how long until the lease expires unless renewed.
    pub expires_in: Option<Duration>,
}

impl MySqlParticipant {
    fn at(kind: &'static str, lease: Option<u32>, holds: bool) -> MySqlParticipant {
        MySqlParticipant {
            kind,
            lease,
            holds,
            connection: None,
            user: None,
            client: None,
            waiting: None,
            owner: None,
            token: None,
            expires_in: None,
        }
    }
}

impl MySqlClient {
    /// Who holds and who waits for the locks of `name` — its mutex (and leader latch) and
    /// leases 1 to `max_leases` of its semaphore. In the `GET_LOCK` mode: the connection that
    /// holds each (`IS_USED_LOCK`), and the connections whose statement waits in `GET_LOCK` on
    /// it — zklock's and any SQL client's that runs the form of
    /// [`lock_sql`](super::MySqlMutex::lock_sql) — from the process list (the `PROCESS`
    /// privilege shows other users' connections) — with each holder's fencing token where
    /// the server shows whose it is (see [`MySqlParticipant::token`]). In the table
    /// mode: the lease record, if unexpired, with its owner, token and time left; its waiters
    /// poll and are not seen. Holders first, then waiters, longest first.
    ///
    /// # Blocking
    /// In the `GET_LOCK` mode two requests on the Client's own session (one more per hundred
    /// leases, and one more per hundred held leases for their tokens), each within the
    /// operation timeout: the server's uptime and the process list, then the holders with the
    /// lock's token. In the table mode one.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name or more leases than a semaphore has, before
    /// any I/O; [`Error::Closed`]; [`Error::Timeout`] or a connection error from the
    /// statements.
    pub fn participants(&self, name: &str, max_leases: u32) -> Result<Vec<MySqlParticipant>> {
        read(self.inner(), self.mode(), name, max_leases)
    }
}

/// Reads the participants of `name` (and of leases 1 to `max_leases` of its semaphore) on the
/// Client's own session, within the operation timeout.
pub(crate) fn read(
    inner: &Inner,
    mode: MySqlMode,
    name: &str,
    max_leases: u32,
) -> Result<Vec<MySqlParticipant>> {
    check_name(name)?;
    if max_leases > MAX_LEASES {
        return Err(Error::invalid(format!(
            "{max_leases} leases: a MySQL semaphore has at most {}",
            MAX_LEASES
        )));
    }
    if inner.closed() {
        return Err(Error::Closed);
    }
    let timeout = inner.operation_timeout;
    match mode {
        MySqlMode::Table => inner.keeper.on_side(timeout, |c| record(c, name)),
        MySqlMode::GetLock => {
            let keys: Vec<(Option<u32>, String)> = std::iter::once((None, key_sql(name)))
                .chain((1..=max_leases).map(|i| (Some(i), key_sql(&format!("{name};{i}")))))
                .collect();
            inner.keeper.on_side(timeout, |c| get_lock(c, &keys))
        }
    }
}

/// A process list row: id, user, client host, seconds in the current statement, statement.
type Process = (u64, String, String, Option<u64>, Option<String>);

/// The server's uptime in seconds (`None` if it does not say) and its process list, in one
/// request.
fn uptime_and_processes(c: &mut mysql::Conn) -> mysql::Result<(Option<u64>, Vec<Process>)> {
    let mut result = c.query_iter(
        "SHOW GLOBAL STATUS LIKE 'Uptime'; \
         SELECT ID, USER, HOST, TIME, INFO FROM information_schema.PROCESSLIST \
         WHERE COMMAND <> 'Daemon'",
    )?;
    let mut uptime = None;
    if let Some(set) = result.iter() {
        for row in set {
            uptime = mysql::from_row_opt::<(String, String)>(row?)
                .ok()
                .and_then(|(_, value)| value.parse().ok());
        }
    }
    let mut list = Vec::new();
    if let Some(set) = result.iter() {
        for row in set {
            if let Ok(process) = mysql::from_row_opt::<Process>(row?) {
                list.push(process);
            }
        }
    }
    Ok((uptime, list))
}

/// The holder of each key (`IS_USED_LOCK`) and the connections whose statement waits in
/// `GET_LOCK` on it, as the process list shows them: holders first, in key order, then the
/// waiters, longest first. The lock's holder (the first key's) gets the name's token when the
/// counter's mark names its connection and was made within the server's `uptime`, read in
/// the statement that reads the holders.
fn get_lock(
    c: &mut mysql::Conn,
    keys: &[(Option<u32>, String)],
) -> mysql::Result<Vec<MySqlParticipant>> {
    let kind = |lease: Option<u32>| if lease.is_some() { "lease" } else { "lock" };
    let (uptime, list) = uptime_and_processes(c)?;
    let shown = |id: u64, p: &mut MySqlParticipant| {
        if let Some((_, user, host, ..)) = list.iter().find(|row| row.0 == id) {
            p.user = Some(user.clone());
            p.client = Some(host.clone());
        }
    };
    let mut holders = Vec::new();
    let mut waiters = Vec::new();
    for (n, chunk) in keys.chunks(100).enumerate() {
        let sql = chunk
            .iter()
            .map(|(_, key)| format!("IS_USED_LOCK({key})"))
            .collect::<Vec<_>>()
            .join(", ");
        // The first key is the lock's: its token's mark is read with the holders.
        let marked = match (n, uptime, chunk.first()) {
            (0, Some(uptime), Some((None, key))) => Some(marked_token_sql(&sql, key, uptime)),
            _ => None,
        };
        let row: Option<mysql::Row> = match &marked {
            Some(sql) => c.query_first(sql)?,
            None => c.query_first(format!("SELECT {sql}"))?,
        };
        let column = |i: usize| {
            row.as_ref()
                .and_then(|row| row.get::<Option<u64>, _>(i))
                .flatten()
        };
        let ids: Vec<Option<u64>> = (0..chunk.len()).map(column).collect();
        // The mark's connection, the token, and whether the mark is from this server's run.
        let mark = marked.is_some().then(|| {
            (
                column(chunk.len()),
                column(chunk.len() + 1),
                column(chunk.len() + 2),
            )
        });
        for ((lease, key), id) in chunk.iter().zip(ids) {
            if let Some(id) = id {
                let mut p = MySqlParticipant::at(kind(*lease), *lease, true);
                p.connection = Some(id);
                shown(id, &mut p);
                if lease.is_none() {
                    p.token = match mark {
                        Some((Some(holder), token, Some(1))) if holder == id => token,
                        _ => None,
                    };
                }
                holders.push(p);
            }
            // The statement of a waiter names the key as the lock's SQL does:
            // `GET_LOCK(<key>, <seconds>)`. The holder's own grant can still show there for a
            // moment after its answer (or was a wait when the list was read): it holds, it
            // does not wait.
            let needle = format!("GET_LOCK({key}, ");
            for (row_id, user, host, time, info) in &list {
                if Some(*row_id) != id && info.as_deref().is_some_and(|i| i.contains(&needle)) {
                    let mut p = MySqlParticipant::at(kind(*lease), *lease, false);
                    p.connection = Some(*row_id);
                    p.user = Some(user.clone());
                    p.client = Some(host.clone());
                    p.waiting = time.map(Duration::from_secs);
                    waiters.push(p);
                }
            }
        }
    }
    lease_tokens(c, keys, &mut holders)?;
    waiters.sort_by_key(|p| std::cmp::Reverse(p.waiting));
    holders.extend(waiters);
    Ok(holders)
}

/// The fencing token of each lease holder in `holders`: its key's counter in the tokens'
/// table, which the lease's grant bumped while holding the key, so it is the holder's until
/// the key passes on. (A `lock` holder's counter is the holder's only when its mark says so:
/// read with the holders.)
fn lease_tokens(
    c: &mut mysql::Conn,
    keys: &[(Option<u32>, String)],
    holders: &mut [MySqlParticipant],
) -> mysql::Result<()> {
    let mut leases: Vec<(&mut MySqlParticipant, &str)> = holders
        .iter_mut()
        .filter_map(|p| {
            let lease = p.lease?;
            let (_, key) = keys.iter().find(|(l, _)| *l == Some(lease))?;
            Some((p, key.as_str()))
        })
        .collect();
    for chunk in leases.chunks_mut(100) {
        let sql = chunk
            .iter()
            .map(|(_, key)| format!("(SELECT token FROM {TOKENS} WHERE name = {key})"))
            .collect::<Vec<_>>()
            .join(", ");
        let row: Option<mysql::Row> = c.query_first(format!("SELECT {sql}"))?;
        let tokens: Vec<Option<u64>> = row.map_or_else(Vec::new, |row| {
            (0..row.len()).map(|i| row.get(i).flatten()).collect()
        });
        for ((p, _), token) in chunk.iter_mut().zip(tokens) {
            p.token = token;
        }
    }
    Ok(())
}

/// The table mode's lease record of `name`, if it holds (unexpired by the database's clock).
fn record(c: &mut mysql::Conn, name: &str) -> mysql::Result<Vec<MySqlParticipant>> {
    let found: Option<(String, u64, i64)> = c.query_first(format!(
        "SELECT lock_owner, version, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expire_time) \
         FROM {RECORDS} WHERE lock_name = {}",
        key_sql(name)
    ))?;
    Ok(found
        .filter(|(_, _, left)| *left > 0)
        .map(|(owner, version, left)| {
            let mut p = MySqlParticipant::at("lock", None, true);
            p.owner = Some(owner);
            p.token = Some(version);
            p.expires_in = Some(Duration::from_micros(left.unsigned_abs()));
            p
        })
        .into_iter()
        .collect())
}
