//! [`PgParticipant`]: who holds and who waits for a name's advisory locks, read from
//! `pg_locks` and `pg_stat_activity` — zklock's sessions and any other SQL client's.

use std::borrow::Cow;
use std::time::Duration;

use tokio_postgres::types::Type;

use super::client::{Inner, PgClient};
use super::tokens::join;
use crate::core::error::{Error, Result};

/// A session that holds or waits for one of the advisory locks of a name: the mutex's (and the
/// leader latch's), the read-write lock's, or a semaphore's lease. From
/// [`PgClient::participants`](super::PgClient::participants).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::PgClient::connect("postgres://app@127.0.0.1/app")?;
/// for p in client.participants("nightly", 0)? {
///     let what = if p.holds { "holds" } else { "waits" };
///     println!("backend {} ({}) {what} the {}", p.backend_pid, p.user, p.kind);
///     if let Some(token) = p.token {
///         println!("  with fencing token {token}");
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PgParticipant {
    /// `lock` (exclusive: a mutex, a latch, a writer), `read` (shared) or `lease`.
    pub kind: &'static str,
    /// A lease's number, 1 to the semaphore's size (`None` for the other kinds).
    pub lease: Option<u32>,
    /// Whether it holds; otherwise it waits, in the server's queue.
    pub holds: bool,
    /// The server process of the session (`pg_backend_pid()`).
    pub backend_pid: i32,
    /// The session's role.
    pub user: String,
    /// The session's `application_name` (`zklock` for zklock's).
    pub application: String,
    /// The client's `address:port`, `local` for a Unix socket; `None` when the reading role
    /// may not see another role's address (without `pg_read_all_stats`).
    pub client: Option<String>,
    /// How long it has waited (waiters only; the server records no time of a grant).
    pub waiting: Option<Duration>,
    /// A holder's fencing token, from the table `zklock_tokens` (see `docs/postgres.md`,
    /// Fencing tokens): `None` without the table (or when the reading role may not read it),
    /// for a waiter, for a holder that has not read its token (a mutex or a read-write lock's
    /// half reads it when first asked for), for another SQL client's hold, and for another
    /// role's session when the reading role may not see its start (without
    /// `pg_read_all_stats`).
    pub token: Option<u64>,
}

/// Every session that holds or waits for one of the advisory locks of the name `$1` in this
/// database: the key `hashtextextended($1, 0)`, exclusive or shared, and the semaphore's
/// leases `hashtextextended($1, i)` for `i` up to `$2`. Holders first (a semaphore's in lease
/// order), then waiters in the order they began to wait (the server's queue). A role without
/// `pg_read_all_stats` sees another role's session without its address (and start), told
/// apart from a Unix socket's by the start. The last column is the holder's token: null here,
/// from the table of tokens in [`view`]'s join.
macro_rules! view {
    ($token:literal, $join:literal) => {
        concat!(
            "WITH keys AS (SELECT i AS seed, hashtextextended($1, i) AS key \
             FROM generate_series(0, $2) AS i) \
             SELECT k.seed, l.mode, l.granted, l.pid, a.usename::text, a.application_name, \
             CASE WHEN a.backend_start IS NOT NULL \
             THEN coalesce(host(a.client_addr) || ':' || a.client_port, 'local') END, \
             extract(epoch FROM now() - l.waitstart)::float8, ",
            $token,
            " FROM pg_locks l \
             JOIN keys k ON ((l.classid::int8 << 32) | l.objid::int8) = k.key \
             LEFT JOIN pg_stat_activity a ON a.pid = l.pid ",
            $join,
            "WHERE l.locktype = 'advisory' AND l.objsubid = 1 \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             ORDER BY l.granted DESC, l.waitstart NULLS FIRST, k.seed, l.pid"
        )
    };
}

/// Without the table of tokens: no holder's token.
const VIEW: &str = view!("NULL::int8", "");

/// The participants' statement of a Client: [`VIEW`], or, when the Client may read the table
/// of tokens (`tokens.rs`), the same joined with it: a holder's token is its live session's
/// row for the key and mode.
fn view(inner: &Inner) -> Cow<'static, str> {
    match inner.tokens() {
        None => Cow::Borrowed(VIEW),
        Some(table) => Cow::Owned(view!("t.token", "{join}").replace("{join}", &join(&table.name))),
    }
}

impl PgClient {
    /// Who holds and who waits for the advisory locks of `name` in this database — its mutex
    /// (and leader latch), its read-write lock, and leases 1 to `max_leases` of its semaphore
    /// — zklock's sessions and any other SQL client's, from `pg_locks` and
    /// `pg_stat_activity` (PostgreSQL 14 or later, for the time a wait began), and a holder's
    /// fencing token from the table `zklock_tokens` when the database has it. Holders first,
    /// then waiters in the server's queue order.
    ///
    /// # Blocking
    /// One statement on a pooled session, within the operation timeout (a second, once, when
    /// the server refuses the table of tokens the Client found: dropped since, or no longer
    /// granted).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name, before any I/O; [`Error::Closed`];
    /// [`Error::Timeout`] or a connection error from the statement.
    pub fn participants(&self, name: &str, max_leases: u32) -> Result<Vec<PgParticipant>> {
        let inner = &self.inner;
        if name.is_empty() {
            return Err(Error::invalid("a PostgreSQL lock name must not be empty"));
        }
        let leases = i32::try_from(max_leases).map_err(|_| {
            Error::invalid(format!(
                "{max_leases} leases: a semaphore has at most {}",
                i32::MAX
            ))
        })?;
        let rows = inner.block_on(async {
            let (session, _) = inner.session().await?;
            let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
                [(&name, Type::TEXT), (&leases, Type::INT4)];
            let sql = view(inner);
            let rows = match session.rows(inner.operation_timeout, &sql, &params).await {
                Err(e) if inner.tokens_refused(&sql, &e) => {
                    session.rows(inner.operation_timeout, VIEW, &params).await
                }
                rows => rows,
            };
            inner.give_back(session);
            rows
        })?;
        rows.iter().map(participant).collect()
    }
}

fn participant(r: &tokio_postgres::Row) -> Result<PgParticipant> {
    let bad = |e: tokio_postgres::Error| Error::Postgres(format!("an unexpected answer: {e}"));
    let seed: i32 = r.try_get(0).map_err(bad)?;
    let mode: String = r.try_get(1).map_err(bad)?;
    let text = |i| -> Result<String> {
        Ok(r.try_get::<_, Option<String>>(i)
            .map_err(bad)?
            .unwrap_or_default())
    };
    let waited: Option<f64> = r.try_get(7).map_err(bad)?;
    let token: Option<i64> = r.try_get(8).map_err(bad)?;
    Ok(PgParticipant {
        kind: match (seed, mode.as_str()) {
            (0, "ShareLock") => "read",
            (0, _) => "lock",
            _ => "lease",
        },
        lease: u32::try_from(seed).ok().filter(|&i| i > 0),
        holds: r.try_get(2).map_err(bad)?,
        backend_pid: r.try_get(3).map_err(bad)?,
        user: text(4)?,
        application: text(5)?,
        client: r.try_get(6).map_err(bad)?,
        waiting: waited.and_then(|s| Duration::try_from_secs_f64(s).ok()),
        token: token.and_then(|t| u64::try_from(t).ok()),
    })
}
