//! [`MySqlClient`]: the options, sessions and threads every MySQL lock of one Client shares.
//!
//! A `GET_LOCK` lock belongs to the server session (connection) that took it, so a lock holds,
//! and a waiter waits, on a session of its own, opened with the server-side limits that make
//! the server end a silent one within the session timeout.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mysql::prelude::Queryable;
use parking_lot::Mutex;

use super::keeper::Keeper;
use super::mode::MySqlMode;
use super::session::{connect_error, Session};
use super::sql::TOKENS;
use crate::core::connection::{forward_connection_api, ConnectionState, States};
use crate::core::error::{Error, Result};
use crate::core::lease::boot_clock;
use crate::core::listeners::{start_events_thread, Dispatch};
use crate::core::options::Options;
use crate::core::retry::RetryPolicy;

/// A connection to one MySQL or MariaDB server (the primary of a replicated set), shared by
/// every MySQL lock made from it. Cheap to clone; its sessions and threads end with the last
/// clone or [`close`](MySqlClient::close).
///
/// # Sessions
/// A `GET_LOCK` lock belongs to the server session that took it, so each held lock and each
/// waiting thread uses a connection of its own: size the server's `max_connections` for the
/// locks you hold and the threads that wait at once. Every session sets `wait_timeout`,
/// `net_read_timeout` and `net_write_timeout` to the session timeout (in whole seconds,
/// rounded up): the server ends a session silent for that long — a holder that crashed, froze
/// or was cut off — and frees its locks. A holding session sends a heartbeat (`COM_PING`) at
/// a third of the session timeout. Every connection has TCP keepalives (from a third of the
/// session timeout) and a TCP user timeout of the session timeout, so that a wait on a server
/// whose machine or network is gone ends too.
///
/// # The server
/// `GET_LOCK` is a lock in one server's memory: it is not replicated. The Client refuses, at
/// connect, a server where it cannot exclude: MariaDB Galera (`@@wsrep_on`), MySQL Group
/// Replication in multi-primary mode, TiDB. Behind a proxy that may send two connections to
/// two servers (ProxySQL with several writers, a Vitess tablet pool), it cannot exclude
/// either, and the Client cannot tell: connect to one primary.
///
/// The fencing tokens are counters in the table `zklock_tokens` of the URL's database, created
/// at connect if missing (and given the columns of the bumping connection's mark, if made
/// before them); a user without `CREATE` uses one an administrator created (with `SELECT`,
/// `INSERT` and `UPDATE` on it), and the connect error names a missing privilege, or gives the
/// `ALTER TABLE` that adds the missing columns.
///
/// # The table mode
/// With [`MySqlMode::Table`] (or `?lock_mode=table` in the URL) a mutex is instead a lease row
/// of the table `zklock_lock_record` (created at connect if missing): an owner, an expiry by the
/// database's clock and a version that is the fencing token. The keeper thread renews every held
/// row at a third of the session timeout on the Client's own session, waiters poll every
/// [`poll_interval`](MySqlClientBuilder::poll_interval) and queue in `zklock_lock_queue` (the
/// one that has waited longest takes a free row), and the setups refused above are not
/// refused. Leader latches poll for the same records; semaphores and read-write locks are
/// refused in this mode. See
/// `docs/mysql.md` for what a failover does to it.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use zklock::{mysql::MySqlMutex, MySqlClient};
///
/// # fn main() -> zklock::Result<()> {
/// let client = MySqlClient::builder("mysql://app:secret@127.0.0.1:3306/app")
///     .session_timeout(Duration::from_secs(10))
///     .connect()?;
/// let mutex = MySqlMutex::new(&client, "ledger")?;
/// let guard = mutex.lock()?;
/// println!("token {}", guard.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MySqlClient {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The options of every session (its settings among them).
    opts: mysql::Opts,
    /// The server and database, without a password, for messages.
    shown: String,
    version: String,
    pub(crate) session_timeout: Duration,
    pub(crate) operation_timeout: Duration,
    pub(crate) retry: Arc<dyn RetryPolicy>,
    closed: Arc<AtomicBool>,
    dispatch: Dispatch,
    events_thread: Mutex<Option<JoinHandle<()>>>,
    pub(crate) states: Arc<States>,
    /// The sessions waiting for a lock now.
    waiters: Mutex<Vec<Waiter>>,
    /// The holds' and leases' keeper, with the Client's own session.
    pub(crate) keeper: Arc<Keeper>,
    /// How the locks of this Client lock: `GET_LOCK`, or rows of the lease table.
    pub(crate) mode: MySqlMode,
    /// How often a table-mode waiter reads the record it waits for.
    pub(crate) poll_interval: Duration,
    /// Idle sessions (at most [`IDLE_SESSIONS`]), holding no lock: the table mode's
    /// statements, and the `GET_LOCK` mode's next waits after a confirmed release.
    idle: Mutex<Vec<Session>>,
}

/// The longest connection and operation timeouts: a longer one is taken as this.
const LONGEST_TIMEOUT: Duration = Duration::from_secs(86_400);

/// The most idle sessions a Client keeps for its next acquisitions.
const IDLE_SESSIONS: usize = 8;

/// A thread waiting for a lock on `session`, for `cancel_waiters` (of the lock `owner`) and
/// `close`. `done` is set by the waiter when its answer is in: from then on the session is
/// not killed (it may hold).
pub(crate) struct Waiter {
    pub(crate) owner: usize,
    pub(crate) session: Arc<Session>,
    pub(crate) done: Arc<AtomicBool>,
}

/// Options of a [`MySqlClient`], from [`MySqlClient::builder`].
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::MySqlClient::builder("mariadb://app:secret@db.internal/app")
///     .connect_timeout(std::time::Duration::from_secs(2))
///     .connect()?;
/// # Ok(()) }
/// ```
pub struct MySqlClientBuilder {
    url: String,
    options: Options,
    mode: Option<MySqlMode>,
    poll_interval: Duration,
}

impl MySqlClient {
    /// Connects with the default options (session timeout 30 s, connection timeout 10 s).
    ///
    /// # Errors
    /// As [`MySqlClientBuilder::connect`].
    pub fn connect(url: &str) -> Result<MySqlClient> {
        MySqlClient::builder(url).connect()
    }

    /// Options for a Client of the server at `url`:
    /// `mysql://[user[:password]@]host[:port]/database[?param=value&…]` (or `mariadb://`),
    /// with the `mysql` crate's URL parameters (TLS is not built for this backend yet). The
    /// database is where the fencing
    /// tokens' table lives: it must be given.
    pub fn builder(url: &str) -> MySqlClientBuilder {
        MySqlClientBuilder {
            url: url.to_owned(),
            options: Options::default(),
            mode: None,
            poll_interval: Duration::from_millis(100),
        }
    }

    /// How this Client's locks lock: `GET_LOCK` or the lease table.
    pub fn mode(&self) -> MySqlMode {
        self.inner.mode
    }

    /// The session timeout: the server ends a holder's session silent for this long, and its
    /// locks with it.
    pub fn session_timeout(&self) -> Duration {
        self.inner.session_timeout
    }

    /// The server's version (`@@version`, e.g. `10.11.19-MariaDB-0+deb12u1`).
    pub fn server_version(&self) -> &str {
        &self.inner.version
    }

    /// Ends every session of this Client: when it returns, each hold reads `Lost` and its
    /// connection has been shut down (the server frees its lock as it reads the end); each
    /// waiter ends with [`Error::Closed`] at once, its wait ended on the server by
    /// `KILL CONNECTION` from the Client's own session. Later calls fail with
    /// [`Error::Closed`].
    ///
    /// # Blocking
    /// With waiters, until the server has answered the `KILL`s (at most the connection
    /// timeout plus the operation timeout); then at most about a quarter second more (the
    /// events thread's poll).
    pub fn close(&self) {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        inner.keeper.lose_holds();
        let waiting: Vec<Arc<Session>> = inner
            .waiters
            .lock()
            .iter()
            .map(|w| w.session.clone())
            .collect();
        for session in &waiting {
            session.end();
        }
        for session in &waiting {
            inner.keeper.kill(session.id);
        }
        // The table mode's leases: lost when this returns, and let go of on the server at once.
        inner.keeper.lose_leases();
        for session in inner.idle.lock().drain(..) {
            session.close();
        }
        inner.keeper.stop();
        // The events thread ends on the next callback once closed: this one.
        (inner.dispatch)(Box::new(|| {}));
        if let Some(t) = inner.events_thread.lock().take() {
            let _ = t.join();
        }
    }

    /// The connection state now: `Connected` from the start, `Suspended` once the server
    /// stops answering the heartbeats (a hold's, or the Client's own when nothing is held),
    /// `Lost` once a whole session timeout has passed since it last answered (the server has
    /// ended, or will end, every session of the Client, and freed their locks),
    /// `Reconnected` when it answers again.
    pub fn state(&self) -> ConnectionState {
        self.inner.states.state()
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

forward_connection_api!(MySqlClient, inner.states);

// The shared options: the session timeout from 1 s to a day (the server's timers count whole
// seconds: it is rounded up), the connect and operation timeouts more than zero (longer than a
// day is a day); the operation timeout bounds each statement that does not wait for a lock.
crate::core::options::connection_options!(MySqlClientBuilder);

impl MySqlClientBuilder {
    /// How the locks lock (default [`MySqlMode::GetLock`], or what the URL's `lock_mode`
    /// parameter says); this call overrides the URL.
    pub fn mode(mut self, mode: MySqlMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// How often a waiter of the table mode reads the record it waits for (default 100 ms,
    /// from 1 ms to a minute): one primary-key `SELECT` per waiting thread per interval.
    /// Unused by the `GET_LOCK` mode, whose waiters the server wakes.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Checks the options, opens a session, checks the server, creates the tokens' table if
    /// missing and starts the Client's threads.
    ///
    /// # Blocking
    /// At most the connection timeout plus a few operation timeouts.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL (no database among them) or duration, before
    /// any I/O; [`Error::ConnectFailed`] with the cause when the server cannot be reached
    /// ([`Error::Io`]), refuses the user or password ([`Error::AuthFailed`]), has no such
    /// database ([`Error::MySql`]), or is a setup where `GET_LOCK` cannot exclude
    /// ([`Error::MySql`]: Galera, multi-primary Group Replication, TiDB; not in the table
    /// mode).
    pub fn connect(self) -> Result<MySqlClient> {
        let (opts, shown, mode, tls) = self.check()?;
        // Longer than a day is a day: every sum of a deadline and these stays in range.
        let connect_timeout = self.options.connect_timeout().min(LONGEST_TIMEOUT);
        let operation_timeout = (self.options.operation_timeout)
            .unwrap_or(connect_timeout)
            .min(LONGEST_TIMEOUT);
        let secs = whole_seconds(self.options.session_timeout());
        let builder = mysql::OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(connect_timeout))
            .read_timeout(Some(operation_timeout))
            .write_timeout(Some(operation_timeout))
            .prefer_socket(false)
            .ssl_opts(super::tls::ssl_opts(&tls))
            // A server whose machine or network is gone: the kernel ends the connection
            // within about the session timeout, so a wait without limit ends too.
            // In whole seconds, as the kernel counts them (0 would be refused).
            .tcp_keepalive_time_ms(Some(
                1000 * whole_seconds(self.options.session_timeout() / 3) as u32,
            ))
            .tcp_keepalive_probe_interval_secs(Some(whole_seconds(
                self.options.session_timeout() / 9,
            ) as u32))
            .tcp_keepalive_probe_count(Some(3));
        // Linux: unacknowledged data also ends the connection within the session timeout.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let builder = builder.tcp_user_timeout_ms(Some(millis(self.options.session_timeout())));
        let opts: mysql::Opts = builder
            .init(vec![format!(
                "SET SESSION wait_timeout = {secs}, net_read_timeout = {secs}, \
                 net_write_timeout = {secs}, autocommit = 1{zone}",
                // The table mode's expiries are DATETIMEs of NOW(6): in UTC for every session.
                zone = match mode {
                    MySqlMode::Table => ", time_zone = '+00:00'",
                    MySqlMode::GetLock => "",
                }
            )])
            // The table mode reads an UPDATE's matched rows, not only its changed ones.
            .additional_capabilities(match mode {
                MySqlMode::Table => mysql::consts::CapabilityFlags::CLIENT_FOUND_ROWS,
                MySqlMode::GetLock => mysql::consts::CapabilityFlags::empty(),
            })
            .into();
        let failed = |cause: Error| Error::ConnectFailed {
            hosts: shown.clone(),
            cause: Box::new(cause),
        };
        let sent = boot_clock();
        let probe = Session::open(&opts).map_err(|e| {
            failed(match connect_error(&e) {
                // MariaDB refuses a connection in the clear to a server that requires TLS
                // (or to a user created REQUIRE SSL) as it refuses a wrong password.
                Error::AuthFailed(why) if tls.mode == super::tls::Mode::Clear => {
                    Error::AuthFailed(format!(
                        "{why}; if the user and password are right, the server may require \
                         TLS (require_secure_transport = ON, or a user REQUIRE SSL): connect \
                         with ssl-mode=VERIFY_IDENTITY (feature `tls`)"
                    ))
                }
                other => other,
            })
        })?;
        let version = probe
            .with(Some(operation_timeout), operation_timeout, |c| {
                let version: Option<String> = c.query_first("SELECT @@version")?;
                let vars: Vec<(String, String)> = c.query(
                    "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', \
                     'group_replication_single_primary_mode', 'group_replication_group_name')",
                )?;
                Ok((version.unwrap_or_default(), vars))
            })
            .map_err(failed)?;
        // The table mode is for the setups GET_LOCK cannot serve: they are not refused.
        if let Some(why) = refusal(&version.0, &version.1).filter(|_| mode == MySqlMode::GetLock) {
            return Err(failed(Error::MySql(why)));
        }
        super::tables::prepare(&probe, mode, operation_timeout).map_err(failed)?;
        let closed = Arc::new(AtomicBool::new(false));
        let (events, events_thread) = start_events_thread("zklock-mysql-events", closed.clone())?;
        let dispatch: Dispatch = {
            let events = events.clone();
            Arc::new(move |f| {
                let _ = events.send(f);
            })
        };
        let states = Arc::new(States::new(
            "MySQL",
            self.options.session_timeout(),
            sent,
            dispatch.clone(),
        ));
        let keeper = Arc::new(Keeper::new(
            opts.clone(),
            self.options.session_timeout(),
            operation_timeout,
            closed.clone(),
            states.clone(),
            probe,
        ));
        let inner = Arc::new(Inner {
            opts,
            shown,
            version: version.0,
            session_timeout: self.options.session_timeout(),
            operation_timeout,
            mode,
            poll_interval: self.poll_interval,
            idle: Mutex::default(),
            retry: self.options.retry(),
            closed,
            dispatch,
            events_thread: Mutex::new(Some(events_thread)),
            states,
            waiters: Mutex::default(),
            keeper,
        });
        inner.keeper.start()?;
        Ok(MySqlClient { inner })
    }

    /// Everything that can be known without I/O: the options from the URL, and the URL
    /// without its password.
    fn check(&self) -> Result<(mysql::Opts, String, MySqlMode, super::tls::Tls)> {
        let url = self.url.trim();
        let (url, tls) = super::tls::split(url)?;
        let (url, from_url) = lock_mode(&url)?;
        let url = url.as_str();
        let rest = url
            .strip_prefix("mysql://")
            .or_else(|| url.strip_prefix("mariadb://"))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{:?}: a MySQL URL starts with mysql:// or mariadb:// \
                     (mysql://[user[:password]@]host[:port]/database[?param=value])",
                    hide_password(url)
                ))
            })?;
        let opts = mysql::Opts::from_url(&format!("mysql://{rest}")).map_err(|e| {
            Error::invalid(format!("{:?} is not a MySQL URL: {e}", hide_password(url)))
        })?;
        if opts.get_db_name().is_none_or(str::is_empty) {
            return Err(Error::invalid(format!(
                "{:?} names no database: give one (mysql://user:pw@host/DATABASE), where the \
                 fencing tokens' table {TOKENS} is kept",
                hide_password(url)
            )));
        }
        if self.options.session_timeout() < Duration::from_secs(1)
            || self.options.session_timeout() > Duration::from_secs(86_400)
        {
            return Err(Error::invalid(format!(
                "the session timeout must be from 1 s to a day, not {:?}",
                self.options.session_timeout()
            )));
        }
        if self.options.connect_timeout().is_zero()
            || self.options.operation_timeout.is_some_and(|t| t.is_zero())
        {
            return Err(Error::invalid(
                "the connection and operation timeouts must not be zero",
            ));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(60)).contains(&self.poll_interval) {
            return Err(Error::invalid(format!(
                "the poll interval must be from 1 ms to a minute, not {:?}",
                self.poll_interval
            )));
        }
        let shown = format!(
            "{}:{}/{}",
            opts.get_ip_or_hostname(),
            opts.get_tcp_port(),
            opts.get_db_name().unwrap_or_default()
        );
        Ok((opts, shown, self.mode.or(from_url).unwrap_or_default(), tls))
    }
}

/// `url` without its `lock_mode` parameter (which the `mysql` crate does not know), and the
/// mode it names.
fn lock_mode(url: &str) -> Result<(String, Option<MySqlMode>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut mode = None;
    let mut kept = Vec::new();
    for param in query.split('&') {
        match param.split_once('=') {
            Some(("lock_mode", value)) => {
                mode = Some(match value {
                    "get_lock" => MySqlMode::GetLock,
                    "table" => MySqlMode::Table,
                    other => {
                        return Err(Error::invalid(format!(
                            "lock_mode={other}: the MySQL lock modes are get_lock (the \
                             default) and table"
                        )))
                    }
                })
            }
            _ => kept.push(param),
        }
    }
    Ok(match kept.is_empty() {
        true => (base.to_owned(), mode),
        false => (format!("{base}?{}", kept.join("&")), mode),
    })
}

/// Why `GET_LOCK` cannot exclude on a server of `version` with `vars` (`SHOW VARIABLES` of
/// `wsrep_on` and Group Replication's), if it cannot.
pub(crate) fn refusal(version: &str, vars: &[(String, String)]) -> Option<String> {
    const TABLE_MODE: &str = "use the table mode, whose locks are rows every server sees \
        (lock_mode=table in the URL, or MySqlClientBuilder::mode(MySqlMode::Table))";
    let var = |name: &str| {
        vars.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if version.contains("TiDB") {
        return Some(format!(
            "the server is TiDB ({version}): its GET_LOCK is not one lock across the cluster's \
             servers, so zklock's GET_LOCK mode cannot exclude there; {TABLE_MODE}"
        ));
    }
    if var("wsrep_on").is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1") {
        return Some(format!(
            "the server is a Galera cluster node (@@wsrep_on = ON): GET_LOCK is this node's \
             alone and not replicated (MariaDB 10.11 grants one name on two nodes at once; \
             some releases refuse GET_LOCK under wsrep), so zklock's GET_LOCK mode cannot \
             exclude there; {TABLE_MODE}"
        ));
    }
    if var("group_replication_group_name").is_some_and(|v| !v.is_empty())
        && var("group_replication_single_primary_mode")
            .is_some_and(|v| v.eq_ignore_ascii_case("OFF"))
    {
        return Some(format!(
            "the server is in a multi-primary Group Replication group: GET_LOCK is one \
             server's and certification ignores it, so zklock's GET_LOCK mode cannot exclude \
             there; {TABLE_MODE}"
        ));
    }
    None
}

/// `d` in milliseconds, at least 1.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX).max(1)
}

/// `d` in whole seconds, rounded up, at least 1.
pub(crate) fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

/// `url` with its password replaced by `***`.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some(parts) => parts,
        None => return url.to_owned(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

impl Inner {
    pub(crate) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Runs callbacks on the Client's events thread.
    pub(crate) fn dispatch(&self) -> Dispatch {
        self.dispatch.clone()
    }

    /// A new session.
    pub(crate) fn session(&self) -> Result<Session> {
        if self.closed() {
            return Err(Error::Closed);
        }
        Session::open(&self.opts).map_err(|e| super::session::error(&e))
    }

    /// An idle session (one that holds no lock), or a new one.
    pub(crate) fn pooled(&self) -> Result<Session> {
        loop {
            let Some(session) = self.idle.lock().pop() else {
                return self.session();
            };
            if !session.ended() && !session.ended_by_server() {
                return Ok(session);
            }
            session.close();
        }
    }

    /// An idle session, or a new one opened by `until` (its connection, handshake and set-up
    /// each bounded by the time left); the new one is `true`, for the caller to close.
    pub(crate) fn pooled_by(&self, until: std::time::Instant) -> Result<(Session, bool)> {
        if let Some(session) = self.idle.lock().pop() {
            if session.usable() {
                return Ok((session, false));
            }
            session.close();
        }
        if self.closed() {
            return Err(Error::Closed);
        }
        let left = until
            .saturating_duration_since(std::time::Instant::now())
            .max(Duration::from_millis(1));
        let opts = mysql::OptsBuilder::from_opts(self.opts.clone())
            .tcp_connect_timeout(Some(
                left.min(self.opts.get_tcp_connect_timeout().unwrap_or(left)),
            ))
            .read_timeout(Some(left))
            .write_timeout(Some(left));
        let session = Session::open(&opts.into()).map_err(|e| super::session::error(&e))?;
        Ok((session, true))
    }

    /// Gives `session` back to the idle ones (or closes it).
    pub(crate) fn put_back(&self, session: Session) {
        if session.ended() || self.closed() {
            return session.close();
        }
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_SESSIONS {
            idle.push(session);
        } else {
            drop(idle);
            session.close();
        }
    }

    /// Registers a waiter; it is taken out by [`forget_waiter`](Self::forget_waiter).
    pub(crate) fn add_waiter(&self, waiter: Waiter) {
        self.keeper.watch_wait(&waiter.session, waiter.done.clone());
        self.waiters.lock().push(waiter);
    }

    pub(crate) fn forget_waiter(&self, session: &Arc<Session>) {
        self.waiters
            .lock()
            .retain(|w| !Arc::ptr_eq(&w.session, session));
    }

    /// Ends the waits of lock `owner` whose answer is not in: their sessions are shut down
    /// here and killed on the server.
    pub(crate) fn cancel_waiters(&self, owner: usize) {
        let waiting: Vec<Arc<Session>> = self
            .waiters
            .lock()
            .iter()
            .filter(|w| w.owner == owner && !w.done.load(Ordering::SeqCst))
            .map(|w| w.session.clone())
            .collect();
        for session in &waiting {
            session.end();
        }
        for session in &waiting {
            self.keeper.kill(session.id);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        self.keeper.end_holds();
    }
}

impl fmt::Debug for MySqlClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlClient")
            .field("server", &self.inner.shown)
            .field("version", &self.inner.version)
            .field("mode", &self.inner.mode)
            .field("session_timeout", &self.inner.session_timeout)
            .field("closed", &self.inner.closed())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for MySqlClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlClientBuilder")
            .field("url", &hide_password(&self.url))
            .field("options", &self.options)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(b: MySqlClientBuilder) -> String {
        match b.connect() {
            Err(Error::InvalidArgument(why)) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_urls_and_durations_are_refused_before_any_io() {
        // Port 9 (discard): nothing is sent there, so these fail before any connection.
        let why = refused(MySqlClient::builder("postgres://u:secret@127.0.0.1:9/db"));
        assert!(why.contains("mysql://") && !why.contains("secret"), "{why}");
        let why = refused(MySqlClient::builder("mysql://u:secret@127.0.0.1:9"));
        assert!(
            why.contains("names no database") && !why.contains("secret"),
            "{why}"
        );
        let url = "mariadb://u:secret@127.0.0.1:9/db";
        let why = refused(MySqlClient::builder(url).session_timeout(Duration::ZERO));
        assert!(why.contains("session timeout"), "{why}");
        let why = refused(MySqlClient::builder(url).session_timeout(Duration::MAX));
        assert!(why.contains("session timeout"), "{why}");
        let why = refused(MySqlClient::builder(url).connect_timeout(Duration::ZERO));
        assert!(why.contains("must not be zero"), "{why}");
    }

    #[test]
    fn setups_without_one_lock_are_refused() {
        let vars = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect()
        };
        let maria = "10.11.19-MariaDB-0+deb12u1";
        assert_eq!(refusal(maria, &vars(&[("wsrep_on", "OFF")])), None);
        let why = refusal(maria, &vars(&[("wsrep_on", "ON")])).unwrap();
        assert!(
            why.contains("Galera") && why.contains("lock_mode=table"),
            "{why}"
        );
        let why = refusal("8.0.11-TiDB-v7.5.0", &[]).unwrap();
        assert!(why.contains("TiDB"), "{why}");
        let gr = vars(&[
            (
                "group_replication_group_name",
                "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            ),
            ("group_replication_single_primary_mode", "OFF"),
        ]);
        assert!(refusal("8.0.36", &gr).unwrap().contains("multi-primary"));
        let single = vars(&[
            (
                "group_replication_group_name",
                "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            ),
            ("group_replication_single_primary_mode", "ON"),
        ]);
        assert_eq!(refusal("8.0.36", &single), None);
    }

    #[test]
    fn the_lock_mode_comes_out_of_the_url() {
        let (url, mode) = lock_mode("mysql://u:p@h/db?lock_mode=table").unwrap();
        assert_eq!(
            (url.as_str(), mode),
            ("mysql://u:p@h/db", Some(MySqlMode::Table))
        );
        let (url, mode) =
            lock_mode("mysql://u:p@h/db?prefer_socket=false&lock_mode=get_lock").unwrap();
        assert_eq!(
            (url.as_str(), mode),
            (
                "mysql://u:p@h/db?prefer_socket=false",
                Some(MySqlMode::GetLock)
            )
        );
        assert_eq!(lock_mode("mysql://h/db").unwrap().1, None);
        let why = refused(MySqlClient::builder(
            "mysql://u:p@127.0.0.1:9/db?lock_mode=rows",
        ));
        assert!(why.contains("lock_mode=rows"), "{why}");
        let why = refused(
            MySqlClient::builder("mysql://u:p@127.0.0.1:9/db").poll_interval(Duration::ZERO),
        );
        assert!(why.contains("poll interval"), "{why}");
    }

    #[test]
    fn session_timeouts_round_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(4)), 4);
        assert_eq!(whole_seconds(Duration::from_millis(4001)), 5);
    }
}
