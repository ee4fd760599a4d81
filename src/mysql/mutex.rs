//! [`MySqlMutex`]: a re-entrant mutex on MySQL's and MariaDB's `GET_LOCK`, with health and
//! fencing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use super::client::{Inner, MySqlClient, MySqlMode, Waiter, TOKENS};
use super::session::Session;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{worst, LockHealth};
use crate::core::hold::{Granted, RawLock, Reentrant, Report};
use crate::core::lease::{boot_clock, LocalLease};
use crate::core::listeners::Dispatch;
use crate::core::lock::Release;
use crate::core::retry::RetryBudget;

/// The longest lock name, in bytes.
const MAX_NAME: usize = 1024;

/// The longest `GET_LOCK` name, in characters: longer names are hashed.
const MAX_KEY: usize = 64;

/// The `GET_LOCK` timeout of a wait without limit, in seconds (a year; the wait is asked for
/// again if it ends).
pub(crate) const FOREVER: u64 = 365 * 86_400;

/// A mutex on MySQL or MariaDB: one holder at a time among every session that takes the same
/// `GET_LOCK` name, re-entrant per thread (through this object), with [`LockHealth`] and
/// fencing tokens.
///
/// # The name
/// A name of up to 64 characters is the `GET_LOCK` name itself; a longer one (MySQL refuses
/// those, MariaDB takes them) is `SHA2(NAME, 256)` on both, its 64 hex digits, computed by the
/// server. Any SQL client
/// takes the same lock with the SQL [`lock_sql`](Self::lock_sql) gives (`SELECT
/// GET_LOCK('NAME', TIMEOUT)`, then `SELECT RELEASE_LOCK('NAME')`), so a `mysql` script or a
/// Python or Java service excludes zklock and is excluded by it.
///
/// # Fairness
/// Waiters queue in the server's metadata lock manager: measured on MariaDB 10.11, granted in
/// the order they asked. (Not measured on MySQL 8.) [`try_lock`](Self::try_lock) takes a free
/// lock without queueing.
///
/// # Sessions
/// Each holding thread holds on a connection of its own, and each waiting thread waits on one:
/// see [`MySqlClient`]. Ending that connection frees the lock, which is how a guard's drop and
/// every failure let go; a `release()` the server confirmed keeps the connection, which then
/// holds nothing, for the Client's next acquisition; [`cancel_waiters`](crate::Lock::cancel_waiters) and the Client's close end a
/// wait by `KILL CONNECTION` of the waiting session from the Client's own.
///
/// # Health
/// The holding session sends a heartbeat (`COM_PING`) at a third of the Client's session
/// timeout. `health()` reads `Suspended` once half the session timeout has passed since the
/// last acknowledged heartbeat was sent, `Lost` once all of it has (the server has ended the
/// session by its `wait_timeout`, or will when it next looks), and `Lost` once the server ends
/// the session (`KILL`, a restart: the Client looks at idle holds' sockets every twentieth of
/// the session timeout, at most every 500 ms) or a heartbeat fails.
///
/// # Fencing
/// The token is a counter in the table `zklock_tokens`, one row per `GET_LOCK` name, bumped by
/// the grant's own round trip (`GET_LOCK`, then `INSERT … ON DUPLICATE KEY UPDATE token =
/// token + 1` only if granted, in one multi-statement request) and committed (autocommit,
/// InnoDB) before the answer comes back: it rises across successive holders that go through
/// zklock, also across a restart or a kill -9 of the server with InnoDB's default
/// `innodb_flush_log_at_trx_commit = 1` (with 2, across a kill of the server but not a crash
/// of its machine). A holder that took the lock with plain SQL bumps nothing.
///
/// # The table mode
/// A mutex of a Client in [`MySqlMode::Table`] is a lease row of `zklock_lock_record` instead:
/// the same API, the token is the row's version, waiters poll (so not FIFO), the Client's keeper
/// renews the row, `health()` reads `Lost` once a renewal matches nothing (the row expired by
/// the database's clock or was taken) or a whole session timeout has passed without one. See
/// [`MySqlClient`].
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::MySqlClient::connect("mysql://app:secret@127.0.0.1/app")?;
/// let mutex = zklock::MySqlMutex::new(&client, "ledger")?;
/// if let Some(guard) = mutex.try_lock_for(std::time::Duration::from_secs(5))? {
///     if guard.health() == zklock::LockHealth::Held {
///         println!("write with token {}", guard.fencing_token());
///     }
/// }
/// # Ok(()) }
/// ```
pub struct MySqlMutex {
    lock: Reentrant<Either>,
}

/// The lock of a mutex: `GET_LOCK` or a table lease, as its Client's mode says.
enum Either {
    GetLock(Raw),
    Table(super::table::Raw),
}

/// A hold of an [`Either`].
enum EitherKept {
    GetLock(Kept),
    Table(super::table::Kept),
}

/// How many readers a read-write lock lets in at once: its reader names.
pub(crate) const READERS: usize = 64;

/// Which lock a [`Raw`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Mutex,
    /// A read-write lock's read half: the gate for a moment, then one reader name.
    Read,
    /// A read-write lock's write half: the gate, then every reader name.
    Write,
}

/// The mutex without re-entrancy: one name's `GET_LOCK`, asked for on a session (or, as a
/// read-write lock's half, its gate and reader names).
struct Raw {
    client: MySqlClient,
    name: String,
    mode: Mode,
    /// The `GET_LOCK` name as an SQL expression (a read-write lock's: its gate).
    key: String,
    /// A read-write lock's reader names, as SQL.
    readers: Vec<String>,
    /// What `cancel_waiters` calls name this lock by.
    id: usize,
    /// Counts `cancel_waiters` calls; a waiter that sees it change ends.
    cancelled: AtomicU64,
}

/// One thread's hold: its session, the name it releases, the local lease its heartbeats
/// extend, and its place in the keeper's list (`None` until kept).
struct Kept {
    session: Arc<Session>,
    key: String,
    lease: Arc<LocalLease>,
    kept: Option<u64>,
}

impl MySqlMutex {
    /// A mutex named `name` (any text of 1 to 1024 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name; nothing is sent.
    pub fn new(client: &MySqlClient, name: &str) -> Result<MySqlMutex> {
        let raw = match client.inner().mode {
            MySqlMode::GetLock => Either::GetLock(Raw::new(client, name, Mode::Mutex)?),
            MySqlMode::Table => Either::Table(super::table::Raw::new(client, name)?),
        };
        Ok(MySqlMutex {
            lock: Reentrant::new(raw),
        })
    }

    /// The read and the write half of the read-write lock `name`.
    pub(crate) fn read_write(client: &MySqlClient, name: &str) -> Result<[MySqlMutex; 2]> {
        refuse_in_table_mode(client, "read-write lock")?;
        let [read, write] = Reentrant::pair(
            Either::GetLock(Raw::new(client, name, Mode::Read)?),
            Either::GetLock(Raw::new(client, name, Mode::Write)?),
        );
        Ok([MySqlMutex { lock: read }, MySqlMutex { lock: write }])
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        match &self.lock.raw {
            Either::GetLock(raw) => &raw.name,
            Either::Table(raw) => &raw.name,
        }
    }

    /// The SQL that takes the same lock from any client.
    ///
    /// In the `GET_LOCK` mode, waiting up to a year: `SELECT GET_LOCK('NAME', 31536000)` for a
    /// name of up to 64 characters, `SELECT GET_LOCK(SHA2('NAME', 256), 31536000)` for a
    /// longer one. The name is quoted so that it reads the same under every `sql_mode`: `'…'`
    /// with `'` doubled, or, for a name with a quote or a backslash, `CONVERT(X'…' USING
    /// utf8mb4)`. Release it with `SELECT RELEASE_LOCK(…)` of the same expression, or by
    /// closing the connection.
    ///
    /// In the table mode ([`MySqlMode::Table`]), one try at the lease record with the owner
    /// `@owner` and a lease of `@ms` milliseconds (set both first): the last row says whether
    /// it was taken and its token; the statement that lets it go follows as a comment.
    pub fn lock_sql(&self) -> String {
        let raw = match &self.lock.raw {
            Either::GetLock(raw) => raw,
            Either::Table(raw) => return raw.lock_sql(),
        };
        match raw.mode {
            Mode::Mutex => format!("SELECT GET_LOCK({}, {FOREVER})", raw.key),
            Mode::Read => raw.read_sql(&FOREVER.to_string()),
            Mode::Write => raw.write_sql(&FOREVER.to_string()),
        }
    }

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
    pub fn health(&self) -> Option<LockHealth> {
        self.lock.health()
    }

    /// The server session (`CONNECTION_ID()`) of the calling thread's hold, if it holds the
    /// lock: what `IS_USED_LOCK` and `SHOW PROCESSLIST` show for it. `None` in the table mode,
    /// whose holds have no session of their own.
    pub fn connection_id(&self) -> Option<u32> {
        self.lock
            .mine(|h| match &h.grant {
                EitherKept::GetLock(kept) => Some(kept.session.id),
                EitherKept::Table(_) => None,
            })
            .flatten()
    }
}

impl Raw {
    fn new(client: &MySqlClient, name: &str, mode: Mode) -> Result<Raw> {
        check_name(name)?;
        static IDS: AtomicU64 = AtomicU64::new(0);
        let (key, readers) = match mode {
            Mode::Mutex => (key_sql(name), Vec::new()),
            Mode::Read | Mode::Write => (
                key_sql(&format!("{name};w")),
                (1..=READERS)
                    .map(|i| key_sql(&format!("{name};r{i}")))
                    .collect(),
            ),
        };
        Ok(Raw {
            client: client.clone(),
            name: name.to_owned(),
            mode,
            key,
            readers,
            id: IDS.fetch_add(1, Ordering::Relaxed) as usize,
            cancelled: AtomicU64::new(0),
        })
    }

    /// A reader's statements for a wait of `wait` seconds: the gate (behind a writer that
    /// holds or waits for it), the first free reader name, the token of the gate's name, the
    /// gate let go; the last row is (the reader name's number or 0, token).
    fn read_sql(&self, wait: &str) -> String {
        let tries: String = self
            .readers
            .iter()
            .enumerate()
            .map(|(i, k)| format!("WHEN GET_LOCK({k}, 0) = 1 THEN {} ", i + 1))
            .collect();
        format!(
            "SET @zklock_key = {gate}; SET @zklock_got = GET_LOCK(@zklock_key, {wait}); \
             SET @zklock_got = IF(@zklock_got = 1, CASE {tries}ELSE 0 END, @zklock_got); \
             {BUMP} DO RELEASE_LOCK(@zklock_key); \
             SELECT @zklock_got, IF(@zklock_got >= 1, LAST_INSERT_ID(), NULL)",
            gate = self.key
        )
    }

    /// A writer's statements for a wait of `wait` seconds: the gate, then every reader name
    /// (each waiting for what is left of `wait`), then the token of the gate's name.
    fn write_sql(&self, wait: &str) -> String {
        let readers: String = self
            .readers
            .iter()
            .map(|k| {
                format!(
                    "SET @zklock_got = IF(@zklock_got = 1, GET_LOCK({k}, GREATEST({wait} - \
                     (UNIX_TIMESTAMP(SYSDATE(6)) - @zklock_t0), 0)), @zklock_got); "
                )
            })
            .collect();
        format!(
            "SET @zklock_key = {gate}; SET @zklock_t0 = UNIX_TIMESTAMP(SYSDATE(6)); \
             SET @zklock_got = GET_LOCK(@zklock_key, {wait}); {readers}{BUMP} \
             SELECT @zklock_got, IF(@zklock_got >= 1, LAST_INSERT_ID(), NULL)",
            gate = self.key
        )
    }

    fn attempt(
        &self,
        inner: &Inner,
        deadline: Deadline,
        gen: u64,
    ) -> Result<Option<Granted<Kept>>> {
        let waits = Waits {
            owner: self.id,
            cancelled: &self.cancelled,
            gen,
        };
        let granted = match self.mode {
            Mode::Mutex => attempt(inner, &self.key, deadline, &waits)?.map(|g| (1, g)),
            Mode::Read => attempt_sql(inner, &|wait| self.read_sql(wait), deadline, &waits)?,
            Mode::Write => attempt_sql(inner, &|wait| self.write_sql(wait), deadline, &waits)?,
        };
        Ok(granted.map(|(got, grant)| {
            let key = match self.mode {
                Mode::Read => usize::try_from(got - 1)
                    .ok()
                    .and_then(|i| self.readers.get(i))
                    .cloned()
                    .unwrap_or_else(|| self.key.clone()),
                Mode::Mutex | Mode::Write => self.key.clone(),
            };
            Granted {
                node: format!("GET_LOCK {key} (connection {})", grant.session.id),
                token: grant.token.into(),
                grant: Kept {
                    session: grant.session,
                    key,
                    lease: grant.lease,
                    kept: None,
                },
            }
        }))
    }
}

/// Who waits, for `cancel_waiters`: the lock's id, its cancel counter, and the count when the
/// wait began.
pub(crate) struct Waits<'a> {
    pub(crate) owner: usize,
    pub(crate) cancelled: &'a AtomicU64,
    pub(crate) gen: u64,
}

impl Waits<'_> {
    pub(crate) fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst) != self.gen
    }
}

/// A grant: the session that holds, the token, the lease from the lock statement's send time.
pub(crate) struct Grant {
    pub(crate) session: Arc<Session>,
    pub(crate) token: u64,
    pub(crate) lease: Arc<LocalLease>,
}

/// One attempt on an idle or new session for the `GET_LOCK` name `key` (an SQL expression):
/// granted (with the token), not granted by the deadline, or an error; the session is closed
/// unless granted. The waiting statement names the key itself (`GET_LOCK(<key>, …)`), so the
/// process list shows what it waits for ([`MySqlClient::participants`]).
pub(crate) fn attempt(
    inner: &Inner,
    key: &str,
    deadline: Deadline,
    waits: &Waits<'_>,
) -> Result<Option<Grant>> {
    let sql = |wait: &str| {
        format!(
            "SET @zklock_key = {key}; SET @zklock_got = GET_LOCK({key}, {wait}); \
             {BUMP} SELECT @zklock_got, IF(@zklock_got >= 1, LAST_INSERT_ID(), NULL)"
        )
    };
    Ok(attempt_sql(inner, &sql, deadline, waits)?.map(|(_, grant)| grant))
}

/// Bumps the token of the name in `@zklock_key` when `@zklock_got` is 1 or more (granted),
/// leaving it in `LAST_INSERT_ID()`.
const BUMP: &str = "INSERT INTO zklock_tokens (name, token) SELECT @zklock_key, LAST_INSERT_ID(1) \
    FROM DUAL WHERE @zklock_got >= 1 ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1);";

/// One attempt on an idle or new session with the statements `sql` gives for a wait of so many
/// seconds (text): their last row is (granted: 1 or more / 0 / NULL, token). The grant and its
/// first column, not granted by the deadline, or an error; the session is closed unless
/// granted.
pub(crate) fn attempt_sql(
    inner: &Inner,
    sql: &dyn Fn(&str) -> String,
    deadline: Deadline,
    waits: &Waits<'_>,
) -> Result<Option<(i64, Grant)>> {
    let session = Arc::new(inner.pooled()?);
    let done = Arc::new(AtomicBool::new(false));
    inner.add_waiter(Waiter {
        owner: waits.owner,
        session: session.clone(),
        done: done.clone(),
    });
    let op = inner.operation_timeout;
    // The server ends the wait at the deadline (GET_LOCK's timeout, in seconds with
    // fractions on MariaDB); the client gives up an operation timeout later.
    let (wait, read) = match deadline.remaining() {
        None => (FOREVER as f64, None),
        Some(left) => (left.as_secs_f64(), Some(left + op)),
    };
    let sql = sql(&format!("{wait:.3}"));
    // The lease starts no later than the lock statement is sent.
    let sent = boot_clock();
    let answer = if waits.cancelled() || inner.closed() {
        Err(Error::Cancelled)
    } else {
        session.with(read, op, |c| last_row(c, &sql))
    };
    // From here the session is not killed by a cancel (it may hold): a cancel that came
    // first is seen below.
    done.store(true, Ordering::SeqCst);
    let cancelled = waits.cancelled();
    inner.forget_waiter(&session);
    if inner.closed() {
        session.close();
        return Err(Error::Closed);
    }
    if cancelled {
        session.close();
        return Err(Error::Cancelled);
    }
    let (got, token) = match answer {
        Ok(Some(row)) => row,
        Ok(None) => {
            session.close();
            return Err(Error::MySql("the lock statement returned no row".into()));
        }
        Err(e) => {
            session.close();
            return Err(e);
        }
    };
    match (got, token) {
        (Some(got @ 1..), Some(token)) => {
            granted(inner, session, token, sent).map(|grant| Some((got, grant)))
        }
        (Some(1..), None) => {
            session.close();
            Err(Error::MySql(format!(
                "granted, but no fencing token came from {TOKENS}"
            )))
        }
        (Some(_), _) => {
            session.close();
            Ok(None)
        }
        (None, _) => {
            session.close();
            Err(Error::MySql(
                "GET_LOCK answered NULL (the wait was killed or failed)".into(),
            ))
        }
    }
}

/// The last row of the results of `sql` (several statements), as two integers.
pub(crate) fn last_row(
    c: &mut mysql::Conn,
    sql: &str,
) -> mysql::Result<Option<(Option<i64>, Option<u64>)>> {
    let mut last = None;
    let mut result = c.query_iter(sql)?;
    while let Some(set) = result.iter() {
        for row in set {
            last = Some(row?);
        }
    }
    Ok(last.map(mysql::from_row::<(Option<i64>, Option<u64>)>))
}

/// The grant of `token` on `session`, its lease from `sent` (the lock statement's send time).
pub(crate) fn granted(
    inner: &Inner,
    session: Arc<Session>,
    token: u64,
    sent: Duration,
) -> Result<Grant> {
    let lease = LocalLease::new();
    lease.open_at(inner.session_timeout, inner.session_timeout / 2, sent);
    // After a long wait, the send time says little about when the server's idle timer
    // restarted: a heartbeat gives the lease a recent start.
    if boot_clock().saturating_sub(sent) > inner.session_timeout / 4 {
        let sent = boot_clock();
        if let Err(e) = session.ping(inner.operation_timeout) {
            session.close();
            return Err(e);
        }
        lease.heard_at(sent);
    }
    Ok(Grant {
        session,
        token,
        lease: Arc::new(lease),
    })
}

/// Lets go of `session`'s hold of `key` as `how` says (its heartbeat stopped);
/// [`Error::LockLost`] if it had been `lost` or the server did not have it as ours. With
/// `reuse` (the session held `key` alone), a session whose `RELEASE_LOCK` the server confirmed
/// holds nothing and goes to the Client's idle sessions for the next acquisition; otherwise it
/// is closed.
pub(crate) fn let_go(
    inner: &Inner,
    key: &str,
    session: Arc<Session>,
    how: Release,
    lost: bool,
    reuse: bool,
) -> Result<()> {
    let until = match how {
        // Closing the connection frees the lock as the server reads the end.
        Release::Background => {
            session.close();
            return if lost { Err(Error::LockLost) } else { Ok(()) };
        }
        Release::Within(until) => until,
    };
    if lost {
        session.close();
        return Err(Error::LockLost);
    }
    let op = inner.operation_timeout;
    let timeout = until
        .map(|u| u.saturating_duration_since(Instant::now()))
        .map_or(op, |left| left.min(op))
        .max(Duration::from_millis(1));
    let released = session.with(Some(timeout), op, |c| {
        c.query_first::<Option<i64>, _>(format!("SELECT RELEASE_LOCK({key})"))
    });
    match (&released, reuse) {
        (Ok(Some(Some(1))), true) => match Arc::try_unwrap(session) {
            Ok(session) => inner.put_back(session),
            // The keeper is beating on it this moment.
            Err(session) => session.close(),
        },
        _ => session.close(),
    }
    match released {
        Ok(Some(Some(1))) => Ok(()),
        // The server did not have it as ours: the session was not the one that took it.
        Ok(_) => Err(Error::LockLost),
        Err(e) => Err(e),
    }
}

impl RawLock for Either {
    type Grant = EitherKept;
    type Shared = ();

    fn share(_: &EitherKept) {}

    fn name(&self) -> &str {
        match self {
            Either::GetLock(raw) => &raw.name,
            Either::Table(raw) => &raw.name,
        }
    }

    fn closed(&self) -> bool {
        match self {
            Either::GetLock(raw) => raw.client.inner().closed(),
            Either::Table(raw) => raw.closed(),
        }
    }

    fn dispatch(&self) -> Dispatch {
        match self {
            Either::GetLock(raw) => raw.client.inner().dispatch(),
            Either::Table(raw) => raw.dispatch(),
        }
    }

    fn acquire(
        &self,
        deadline: Deadline,
        partner: Option<()>,
    ) -> Result<Option<Granted<EitherKept>>> {
        fn wrap<G>(g: Granted<G>, kept: fn(G) -> EitherKept) -> Granted<EitherKept> {
            Granted {
                grant: kept(g.grant),
                token: g.token,
                node: g.node,
            }
        }
        Ok(match self {
            Either::GetLock(raw) => raw
                .acquire(deadline, partner)?
                .map(|g| wrap(g, EitherKept::GetLock)),
            Either::Table(raw) => raw.acquire(deadline)?.map(|g| wrap(g, EitherKept::Table)),
        })
    }

    fn keep(&self, grant: &mut EitherKept, report: Report) -> Result<()> {
        match (self, grant) {
            (Either::GetLock(raw), EitherKept::GetLock(grant)) => raw.keep(grant, report),
            (Either::Table(raw), EitherKept::Table(grant)) => raw.keep(grant, report),
            _ => unreachable!("a grant of the other mode"),
        }
    }

    fn health(&self, grant: &EitherKept, reported: LockHealth) -> LockHealth {
        match grant {
            EitherKept::GetLock(grant) => Raw::health(grant, reported),
            EitherKept::Table(grant) => super::table::Raw::health(grant, reported),
        }
    }

    fn release(&self, grant: EitherKept, how: Release, lost: bool, _: Option<()>) -> Result<()> {
        match (self, grant) {
            (Either::GetLock(raw), EitherKept::GetLock(grant)) => raw.release(grant, how, lost),
            (Either::Table(raw), EitherKept::Table(grant)) => raw.release(grant, how, lost),
            _ => unreachable!("a grant of the other mode"),
        }
    }

    fn cancel_waiters(&self) {
        match self {
            Either::GetLock(raw) => raw.cancel_waiters(),
            Either::Table(raw) => raw.cancel_waiters(),
        }
    }
}

/// [`Error::InvalidArgument`] if `client` is in the table mode, which has no `recipe`.
pub(crate) fn refuse_in_table_mode(client: &MySqlClient, recipe: &str) -> Result<()> {
    match client.inner().mode {
        MySqlMode::GetLock => Ok(()),
        MySqlMode::Table => Err(Error::invalid(format!(
            "the MySQL table mode (lock_mode=table) has mutexes and leader latches, no \
             {recipe}: use a MySqlMutex, or a Client in the GET_LOCK mode on a server where \
             GET_LOCK excludes"
        ))),
    }
}

impl Raw {
    fn acquire(&self, deadline: Deadline, partner: Option<()>) -> Result<Option<Granted<Kept>>> {
        if self.mode == Mode::Read && partner.is_some() {
            return Err(Error::invalid(
                "a thread that holds a MySQL write lock cannot take its read lock (no \
                 downgrade on MySQL): release the write lock first",
            ));
        }
        let inner = self.client.inner();
        let gen = self.cancelled.load(Ordering::SeqCst);
        let mut budget = RetryBudget::new(inner.retry.clone());
        loop {
            match self.attempt(inner, deadline, gen) {
                Err(e) if e.is_retryable() && !inner.closed() => {
                    // A try without time left reports the error rather than "not granted".
                    let Some(sleep) = budget.next_sleep().filter(|_| !deadline.expired()) else {
                        return Err(e);
                    };
                    if deadline.remaining().is_some_and(|left| left <= sleep) {
                        return Ok(None);
                    }
                    tracing::debug!("zklock: MySQL session lost ({e}), retrying in {sleep:?}");
                    let until = Instant::now() + sleep;
                    while Instant::now() < until {
                        if inner.closed() {
                            return Err(Error::Closed);
                        }
                        if self.cancelled.load(Ordering::SeqCst) != gen {
                            return Err(Error::Cancelled);
                        }
                        std::thread::sleep(Duration::from_millis(10).min(sleep));
                    }
                }
                // Not granted with time left: a wait without limit that the server ended
                // (after a year), every reader name taken, or a server that counts the
                // timeout in whole seconds. Asked again.
                Ok(None) if !deadline.expired() => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => return other,
            }
        }
    }

    fn keep(&self, grant: &mut Kept, report: Report) -> Result<()> {
        let inner = self.client.inner();
        if inner.closed() {
            // Granted as the Client closed: closing the connection frees the lock.
            grant.session.close();
            return Err(Error::Closed);
        }
        grant.kept = Some(inner.keep(grant.session.clone(), grant.lease.clone(), report));
        Ok(())
    }

    fn health(grant: &Kept, reported: LockHealth) -> LockHealth {
        let ended = if grant.session.ended() {
            LockHealth::Lost
        } else {
            LockHealth::Held
        };
        worst(worst(reported, grant.lease.health()), ended)
    }

    fn release(&self, grant: Kept, how: Release, lost: bool) -> Result<()> {
        let inner = self.client.inner();
        if let Some(kept) = grant.kept {
            inner.forget(kept);
        }
        // A writer's session holds the reader names too: it is closed, not reused.
        let reuse = self.mode != Mode::Write;
        let_go(inner, &grant.key, grant.session, how, lost, reuse)
    }

    fn cancel_waiters(&self) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
        self.client.inner().cancel_waiters(self.id);
    }
}

/// The `GET_LOCK` name of `name` as an SQL expression: the quoted name up to 64 characters,
/// `SHA2(…, 256)` of it beyond.
pub(crate) fn key_sql(name: &str) -> String {
    let literal = literal(name);
    if name.chars().count() <= MAX_KEY {
        literal
    } else {
        format!("SHA2({literal}, 256)")
    }
}

/// `s` as an SQL string that reads the same under every `sql_mode`: `'…'` with `'` doubled,
/// or `CONVERT(X'…' USING utf8mb4)` for text with a quote or backslash (whose escaping
/// depends on `NO_BACKSLASH_ESCAPES`).
fn literal(s: &str) -> String {
    if s.contains(['\'', '\\']) || s.chars().any(char::is_control) {
        let hex: String = s.bytes().map(|b| format!("{b:02X}")).collect();
        format!("CONVERT(X'{hex}' USING utf8mb4)")
    } else {
        format!("'{s}'")
    }
}

/// A name is any text of 1 to [`MAX_NAME`] bytes.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("a MySQL lock name must not be empty"));
    }
    if name.len() > MAX_NAME {
        return Err(Error::invalid(format!(
            "a MySQL lock name is at most {MAX_NAME} bytes, not {}",
            name.len()
        )));
    }
    Ok(())
}

crate::core::hold::reentrant_lock!(MySqlMutex, "the Client's events thread");

impl std::fmt::Debug for MySqlMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlMutex")
            .field("name", &self.name())
            .field("held_here", &self.lock.is_acquired_in_this_process())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(MAX_NAME + 1)).is_err());
        assert!(check_name(&"x".repeat(MAX_NAME)).is_ok());
        assert!(check_name("it's ✓").is_ok());
    }

    #[test]
    fn keys_are_the_name_or_its_sha2() {
        assert_eq!(key_sql("ledger"), "'ledger'");
        assert_eq!(key_sql(&"é".repeat(64)), format!("'{}'", "é".repeat(64)));
        assert_eq!(
            key_sql(&"x".repeat(65)),
            format!("SHA2('{}', 256)", "x".repeat(65))
        );
        assert_eq!(key_sql("it's"), "CONVERT(X'69742773' USING utf8mb4)");
        assert_eq!(key_sql("a\\b"), "CONVERT(X'615C62' USING utf8mb4)");
    }
}
