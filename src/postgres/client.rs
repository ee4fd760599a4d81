//! [`PgClient`]: the options, runtime, sessions and threads every PostgreSQL lock of one Client
//! shares.
//!
//! A lock holds, and a waiter waits, on a server session of its own (a session-level advisory
//! lock belongs to the session that took it). Sessions are opened with the server-side limits
//! that make the server end a silent one within the session timeout (`connect::limits`), and
//! kept in a small pool between holds.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;

use super::connect::{self, Limit, Watch};
use super::connect::{HostOrder, Live, Ties};
use super::error::sqlstate;
use super::keeper::Keeper;
use super::libpq::{self, hide_password};
use super::session::Session;
use super::sql::{self, Statements};
use super::tls::{self, Tls};
use super::tokens::Table;
use crate::core::connection::{forward_connection_api, ConnectionState, States};
use crate::core::deadline::Deadline;
use crate::core::defaults::DEFAULT_CONNECT_TIMEOUT;
use crate::core::error::{Error, Result};
use crate::core::lease::boot_clock;
use crate::core::listeners::{start_events_thread, Dispatch};
use crate::core::options::Options;
use crate::core::retry::RetryPolicy;

/// A connection to one PostgreSQL server (or the primary of a replicated set), shared by every
/// PostgreSQL lock made from it. Cheap to clone; its sessions and threads end with the last
/// clone or [`close`](PgClient::close).
///
/// # Sessions
/// A PostgreSQL advisory lock belongs to the server session that took it, so each held lock
/// and each waiting thread uses a session (a connection) of its own; a released lock's session
/// is kept for the next acquisition (for up to half the session timeout). Size the server's
/// `max_connections` for the locks you hold and the threads that wait at once. A pooler in
/// transaction mode (PgBouncer's `pool_mode = transaction`) hands a session's statements to
/// different server sessions and breaks session locks: each session adds a marker of its
/// own, and a grant or heartbeat on a server session that is not its own alone fails with
/// [`Error::Postgres`] (or turns the hold `Lost`). Connect to the server or to a session-mode
/// pool.
///
/// Every session sets server-side limits from the session timeout (default 30 s):
/// `idle_session_timeout` and `idle_in_transaction_session_timeout` (the server ends a session
/// silent for that long: a frozen holder), `tcp_keepalives_*` and `tcp_user_timeout` (a
/// holder whose machine or network is gone), `client_connection_check_interval` (a waiter that
/// went away), so that the server frees a dead or frozen holder's locks within the session
/// timeout (the server's defaults would keep them for about two hours after a machine is gone,
/// and for ever while a process is frozen). A holding session sends a heartbeat at a third of
/// the session timeout. Limits a server does not have (before PostgreSQL 14:
/// `idle_session_timeout` and `client_connection_check_interval`; before 12:
/// `tcp_user_timeout`) are not set: on such a server a frozen holder keeps its lock.
///
/// # Threads
/// Each Client runs `zklock-pg-io` (its sessions' sockets between statements, heartbeats and
/// timers, on a small tokio runtime of its own that never reaches the caller) and
/// `zklock-pg-events` (health, leadership and connection-state callbacks). On Linux, for a URL
/// with one host, a thread in a blocking call drives its own session's socket while it waits
/// for an answer, so that no other thread is woken on the way; elsewhere, or when the
/// environment has `ZKLOCK_PG_CALLER_DRIVES=0` as the Client connects, `zklock-pg-io` reads
/// every answer and hands it to the caller (the same statements, at some more client CPU).
///
/// # Connection states
/// [`state`](Self::state) and its listeners report the core's
/// [`ConnectionState`](crate::ConnectionState), judged by the holds' heartbeats and, when none
/// was answered for a third of the session timeout, the Client's own on a pooled session (so a
/// Client keeps one session open).
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use zklock::PgClient;
/// use zklock::postgres::PgMutex;
///
/// # fn main() -> zklock::Result<()> {
/// let client = PgClient::builder("postgres://app:secret@127.0.0.1:5432/app")
///     .session_timeout(Duration::from_secs(10))
///     .connect()?;
/// let mutex = PgMutex::new(&client, "ledger")?;
/// let guard = mutex.lock()?;
/// println!("token {}", guard.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgClient {
    pub(super) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The options of every session.
    config: tokio_postgres::Config,
    /// TLS for every session (none unless the connection string's `sslmode` asks for it).
    tls: Tls,
    /// The server-side limits every session sets.
    limits: Vec<Limit>,
    /// The server and database, without a password, for messages.
    shown: String,
    version: u32,
    /// The server's `synchronous_standby_names` at connect.
    synchronous_standbys: String,
    /// The table of tokens (`tokens.rs`), when it was found at connect and the role may read
    /// it; its statements are used when the role may write it too.
    tokens: Option<Table>,
    /// Set when a statement that uses the table of tokens failed with the server's answer
    /// (the table dropped, changed or no longer granted): the Client uses the plain statements
    /// from then on.
    tokens_failed: AtomicBool,
    pub(crate) session_timeout: Duration,
    connect_timeout: Duration,
    pub(crate) operation_timeout: Duration,
    pub(crate) retry: Arc<dyn RetryPolicy>,
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    /// Sessions not in use, with when they were last used.
    pool: Mutex<Vec<(Arc<Session>, Instant)>>,
    closed: Arc<AtomicBool>,
    /// Set at close: every session's connection ends.
    close: watch::Sender<bool>,
    /// Runs callbacks on the Client's events thread.
    dispatch: Dispatch,
    events_thread: Mutex<Option<JoinHandle<()>>>,
    /// The connection state, judged by the holds' heartbeats and the Client's own.
    pub(crate) states: Arc<States>,
    /// Keeps the holds' sessions alive.
    pub(crate) keeper: Arc<Keeper>,
    /// The sessions' sockets while no caller drives them; `None` when callers do not drive
    /// their sessions (every statement goes through `zklock-pg-io`).
    sockets: Option<Arc<Watch>>,
    /// The sessions whose connection has not ended.
    live: Arc<Live>,
    /// The order a new session tries the URL's hosts in.
    hosts: Arc<HostOrder>,
}

/// Options of a [`PgClient`], from [`PgClient::builder`].
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::PgClient::builder("postgres://app:secret@db.internal/app")
///     .connect_timeout(std::time::Duration::from_secs(2))
///     .connect()?;
/// # Ok(()) }
/// ```
pub struct PgClientBuilder {
    url: String,
    /// The shared options; an unset connection timeout is the string's (or
    /// PGCONNECT_TIMEOUT's), else the default.
    options: Options,
    tls: tls::Options,
}

impl PgClient {
    /// Connects with the default options (session timeout 30 s, connection timeout 10 s: see
    /// [`DEFAULT_SESSION_TIMEOUT`](crate::DEFAULT_SESSION_TIMEOUT)).
    ///
    /// # Errors
    /// As [`PgClientBuilder::connect`].
    pub fn connect(url: &str) -> Result<PgClient> {
        PgClient::builder(url).connect()
    }

    /// Options for a Client of the server a libpq connection string names, read as `psql`
    /// reads it: a URL,
    /// `postgres://[user[:password]@][host[:port][,host[:port]…]][/database][?param=value&…]`
    /// (or `postgresql://`), or a key-value string,
    /// `host=db port=5432 user=app password='it\'s' dbname=app` (a value in single quotes, `\`
    /// escaping the next character). A keyword the string does not give is taken from its
    /// `PG*` environment variable (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`,
    /// `PGSSLMODE`, `PGPASSFILE`, `PGCONNECT_TIMEOUT`, `PGAPPNAME`, `PGOPTIONS`, `PGHOSTADDR`,
    /// `PGTARGETSESSIONATTRS`, …), else from libpq's default (a Unix socket in
    /// `/var/run/postgresql` or `/tmp` if the server's is there, else `localhost`; port 5432;
    /// the operating system's user; a database of the user's name; application name
    /// `zklock`). When neither gives a password, the password file's first line that matches
    /// is used (`passfile`, else `PGPASSFILE`, else `~/.pgpass`; ignored with a warning when
    /// the group or others may open it). So `postgres://` alone connects where `psql` would.
    ///
    /// `service` (or `PGSERVICE`) names a section of libpq's service file (`PGSERVICEFILE`,
    /// else `~/.pg_service.conf`, else the system's `pg_service.conf`) whose keywords come
    /// after the string's and before the environment's.
    ///
    /// The other keywords are tokio-postgres's (`options`, `hostaddr`, `target_session_attrs`,
    /// …); one it does not know (`gssencmode`, …) is refused. `connect_timeout`
    /// (whole seconds) applies unless the builder sets one; the keepalives set from the session
    /// timeout replace any the string gives. `sslmode=require` or `verify-full` asks for TLS
    /// with the server's certificate and host name checked, `verify-ca` for the certificate
    /// only (feature `tls`; against the file `sslrootcert` or `PGSSLROOTCERT` names, else
    /// `~/.postgresql/root.crt` if it exists, else the system's CAs, or
    /// `PgClientBuilder::tls_ca_pem`, which goes first; `sslcert` and `sslkey`, else
    /// `~/.postgresql/postgresql.crt` and `.key`, the client's certificate and key); `disable`, `allow`, `prefer` or
    /// none connect in the clear, and the files are not read.
    pub fn builder(url: &str) -> PgClientBuilder {
        PgClientBuilder {
            url: url.to_owned(),
            options: Options::default(),
            tls: tls::Options::default(),
        }
    }

    /// The session timeout: the server ends a holder's session silent for this long, and its
    /// locks with it.
    pub fn session_timeout(&self) -> Duration {
        self.inner.session_timeout
    }

    /// The server's version, as `server_version_num` (e.g. 150004 for 15.4).
    pub fn server_version(&self) -> u32 {
        self.inner.version
    }

    /// The server's `synchronous_standby_names` when the Client connected: empty when no
    /// standby is synchronous. It says how strong the fencing tokens are across a failover:
    /// a grant's commit is on every standby it names (on as many as it asks for, for `ANY n`
    /// and `FIRST n`) before the holder is answered, so after a failover to such a standby
    /// every token is above every earlier one; after a failover to an asynchronous standby
    /// (none named here, or one not named), a token may be handed out again (see
    /// `docs/postgres.md`, "Failover to a standby"). Read once, at connect.
    pub fn synchronous_standby_names(&self) -> &str {
        &self.inner.synchronous_standbys
    }

    /// Ends every session of this Client: when it returns, each hold reads `Lost` and its
    /// session's connection has ended (the server frees its lock as it reads the end, without
    /// waiting for any timeout); each waiter ends with [`Error::Closed`] at once, its wait
    /// cancelled on the server. Later calls fail with [`Error::Closed`].
    ///
    /// # Blocking
    /// Until every session's connection has ended (a few milliseconds: a socket zklock
    /// connected is shut down on the calling thread, one tokio-postgres connected, for a URL
    /// with several hosts, on the Client's I/O thread), at most the operation timeout; then
    /// at most about a quarter second more (the events thread's poll).
    pub fn close(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::Release);
        inner.close.send_replace(true);
        inner.keeper.close();
        inner.pool.lock().clear();
        if !inner.live.wait_none(inner.operation_timeout) {
            tracing::debug!(
                "zklock: a PostgreSQL session's connection had not ended within {:?} of close",
                inner.operation_timeout
            );
        }
        // The events thread ends on the next callback once closed: this one.
        (inner.dispatch)(Box::new(|| {}));
        if let Some(t) = inner.events_thread.lock().take() {
            let _ = t.join();
        }
    }

    /// The connection state now: `Connected` from the start, `Suspended` once the server
    /// stops answering the heartbeats (a hold's, or the Client's own, sent at a third of the
    /// session timeout on a pooled session when no hold's was answered since: one failed, or
    /// none answered for half the session timeout), `Lost` once a whole session timeout has
    /// passed since it last answered (the server has ended, or will end, every session of the
    /// Client, and freed their locks), `Reconnected` when it answers again.
    pub fn state(&self) -> ConnectionState {
        self.inner.states.state()
    }

    /// The Client's state, held weakly (by what must not keep the Client open).
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

forward_connection_api!(PgClient, inner.states);

/// The Client's own heartbeat, on a task of its runtime until the Client closes or is dropped:
/// judges the connection state as time passes, and sends a heartbeat on a pooled session when
/// no hold is kept and the server was not heard for a third of the session timeout.
async fn watch_connection(inner: std::sync::Weak<Inner>) {
    let Some(timeout) = inner.upgrade().map(|i| i.session_timeout) else {
        return;
    };
    let tick = (timeout / 20).clamp(Duration::from_millis(5), Duration::from_millis(500));
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if inner.closed() {
            return;
        }
        inner.states.judge();
        // While a hold is kept, its heartbeats (a third of the session timeout apart) are the
        // Client's; its own would only add a session to the pool.
        if inner.keeper.keeps_any() || inner.states.since_heard().is_some_and(|d| d < timeout / 3) {
            continue;
        }
        // A heartbeat waits at most a sixth of the session timeout (or the operation timeout),
        // as a hold's does, so that a silent server is reported on time.
        let limit = inner
            .operation_timeout
            .min(timeout / 6)
            .max(Duration::from_millis(10));
        let beat = tokio::time::timeout(limit, async {
            let (session, _) = inner.session().await?;
            let sent = session.beat(limit).await?;
            inner.give_back(session);
            Ok::<_, Error>(sent)
        })
        .await;
        match beat {
            Ok(Ok(sent)) => inner.states.heard(sent),
            Ok(Err(e)) => {
                tracing::debug!("zklock: a PostgreSQL Client heartbeat failed: {e}");
                inner.states.failed();
            }
            // A slow answer is not a failed one: the time since the server last answered
            // moves the state down (`judge`), as for a silent server.
            Err(_) => tracing::debug!("zklock: a PostgreSQL Client heartbeat took over {limit:?}"),
        }
    }
}

// The shared options: the session timeout from 1 s to a day (a holding session sends a
// heartbeat at a third of it); the connect timeout bounds opening a session on one host, the
// startup included (unset: the connection string's `connect_timeout`, or `PGCONNECT_TIMEOUT`,
// else the default; with several hosts each gets this long, as in libpq); the operation timeout
// bounds each statement that does not wait for a lock.
crate::core::options::connection_options!(PgClientBuilder);

impl PgClientBuilder {
    /// The CA (PEM) that signs the server's certificate, instead of the system's CAs, for a URL
    /// with `sslmode=require`, `verify-ca` or `verify-full`.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_pem(mut self, pem: &str) -> Self {
        self.tls.ca = Some(pem.to_owned());
        self
    }

    /// A client certificate and its private key (PEM), for a server that asks for one
    /// (`hostssl … cert` in `pg_hba.conf`, or `clientcert=verify-ca`).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_identity_pem(mut self, certificate: &str, key: &str) -> Self {
        self.tls.identity = Some((certificate.to_owned(), key.to_owned()));
        self
    }

    /// Checks the options, opens a session, checks the server and starts the Client's threads.
    ///
    /// # Blocking
    /// At most the connection timeout plus twice the operation timeout.
    ///
    /// # Errors
    /// Before any I/O, [`Error::InvalidArgument`] for a connection string that does not parse
    /// (or names a keyword zklock does not read), an `sslmode` that asks for TLS in a build
    /// without the `tls` feature, a CA or
    /// client certificate that is not PEM (or given without an `sslmode` that asks for TLS) or
    /// a timeout out of range. Then [`Error::ConnectFailed`] with the cause: [`Error::Io`] for
    /// a refused, unreachable or silent server, [`Error::Tls`] for a refused handshake (the
    /// server's certificate not trusted or not for the host, a server without TLS),
    /// [`Error::AuthFailed`] naming the user for a refused password or user, or a password
    /// the server asks for that nothing gave (and naming the password file a refused password
    /// came from),
    /// [`Error::Postgres`] for an unknown database or a server older than PostgreSQL 11.
    pub fn connect(self) -> Result<PgClient> {
        let Checked {
            mut config,
            tls,
            shown,
            passfile,
            connect_timeout,
            operation_timeout,
        } = self.check(&libpq::Process)?;
        let failed = |cause: Error| Error::ConnectFailed {
            hosts: shown.clone(),
            cause: Box::new(match (cause, &passfile) {
                (Error::AuthFailed(why), Some(file)) => Error::AuthFailed(format!(
                    "{why} (the password is from the password file {})",
                    file.display()
                )),
                (cause, _) => cause,
            }),
        };
        // Checked before the runtime exists: a runtime dropped on another's thread panics.
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(in_runtime());
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("zklock-pg-io")
            .enable_all()
            .build()
            .map_err(|e| Error::thread_start("zklock-pg-io", &e))?;
        let handle = runtime.handle().clone();
        let sockets = if caller_drives() {
            let watch = Watch::start(&handle)
                .map_err(|e| Error::io("starting the PostgreSQL sockets' watch", &e))?;
            Some(watch)
        } else {
            None
        };
        let (close, _) = watch::channel(false);
        let ended = Arc::new(tokio::sync::Notify::new());
        let live = Arc::new(Live::default());
        let hosts = Arc::new(HostOrder::default());
        let sent = boot_clock();
        let probe = handle.block_on(Session::open(
            &config,
            &tls,
            None,
            connect_timeout,
            operation_timeout,
            Ties {
                close: close.subscribe(),
                on_end: ended.clone(),
                sockets: sockets.clone(),
                live: live.clone(),
                hosts: hosts.clone(),
            },
        ));
        let (probe, version) = probe.map_err(failed)?;
        sql::check_version(version)
            .map_err(Error::Postgres)
            .map_err(failed)?;
        let limits = connect::limits(version, self.options.session_timeout());
        let (synchronous_standbys, tokens) = handle
            .block_on(probe.apply(&limits, operation_timeout))
            .map_err(failed)?;
        if synchronous_standbys.is_empty() {
            tracing::debug!(
                "zklock: {shown} has no synchronous standby: after a failover to a standby, \
                 fencing tokens may be handed out again"
            );
        }
        connect::set_keepalives(&mut config, self.options.session_timeout());
        let closed = Arc::new(AtomicBool::new(false));
        let (events, events_thread) = start_events_thread("zklock-pg-events", closed.clone())?;
        let dispatch: Dispatch = {
            let events = events.clone();
            Arc::new(move |f| {
                let _ = events.send(f);
            })
        };
        let states = Arc::new(States::new(
            "PostgreSQL",
            self.options.session_timeout(),
            sent,
            dispatch.clone(),
        ));
        let keeper = Arc::new(Keeper::new(
            states.clone(),
            ended,
            self.options.session_timeout(),
            operation_timeout,
        ));
        let inner = Arc::new(Inner {
            config,
            tls,
            limits,
            shown,
            version,
            synchronous_standbys,
            tokens,
            tokens_failed: AtomicBool::new(false),
            session_timeout: self.options.session_timeout(),
            connect_timeout,
            operation_timeout,
            retry: self.options.retry(),
            runtime: Some(runtime),
            handle,
            pool: Mutex::new(vec![(Arc::new(probe), Instant::now())]),
            closed,
            close,
            dispatch,
            events_thread: Mutex::new(Some(events_thread)),
            states,
            keeper,
            sockets,
            live,
            hosts,
        });
        inner.spawn(watch_connection(Arc::downgrade(&inner)));
        inner.spawn(Keeper::run(
            Arc::downgrade(&inner.keeper),
            inner.close.subscribe(),
        ));
        Ok(PgClient { inner })
    }

    /// Everything that can be known without I/O, with `env`'s variables and files.
    fn check(&self, env: &dyn libpq::Env) -> Result<Checked> {
        let input = self.url.as_str();
        let settings = libpq::resolve(input, env).map_err(|why| {
            Error::invalid(format!(
                "{:?} is not a PostgreSQL connection string: {}",
                hide_password(input),
                libpq::hide_quoted(&why, input)
            ))
        })?;
        let mut config = settings.config;
        let mode = tls::mode(&settings.sslmode)?;
        let options = if mode == tls::Mode::Clear {
            // As libpq: the files are for TLS, which is not asked for.
            self.tls.clone()
        } else {
            tls::with_files(&self.tls, &settings.ssl_files)?
        };
        let connector = tls::connector(mode, &options)?;
        config.ssl_mode(if mode == tls::Mode::Clear {
            tokio_postgres::config::SslMode::Disable
        } else {
            tokio_postgres::config::SslMode::Require
        });
        let connect_timeout = self
            .options
            .connect_timeout
            .or(settings.connect_timeout)
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let operation_timeout = self.options.operation_timeout.unwrap_or(connect_timeout);
        for (what, d, min) in [
            (
                "session timeout",
                self.options.session_timeout(),
                Duration::from_secs(1),
            ),
            (
                "connection timeout",
                connect_timeout,
                Duration::from_millis(1),
            ),
            (
                "operation timeout",
                operation_timeout,
                Duration::from_millis(1),
            ),
        ] {
            if d < min || d > Duration::from_secs(86_400) {
                return Err(Error::invalid(format!(
                    "the {what} must be between {min:?} and a day, not {d:?}"
                )));
            }
        }
        config.connect_timeout(connect_timeout);
        let shown = shown(&config);
        Ok(Checked {
            config,
            tls: connector,
            shown,
            passfile: settings.passfile,
            connect_timeout,
            operation_timeout,
        })
    }
}

/// What [`PgClientBuilder::check`] finds.
struct Checked {
    config: tokio_postgres::Config,
    tls: Tls,
    /// The server and user, for messages.
    shown: String,
    /// The password file the password came from.
    passfile: Option<std::path::PathBuf>,
    connect_timeout: Duration,
    operation_timeout: Duration,
}

/// `postgres://user@host:port/database`, without the password.
fn shown(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => config
            .get_hostaddrs()
            .first()
            .map(ToString::to_string)
            .unwrap_or_default(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or_default(),
        config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or_default()
    )
}

/// The variable that, set to `0` when a Client connects, has its callers hand every statement
/// to `zklock-pg-io` instead of driving their sessions' sockets themselves.
const CALLER_DRIVES: &str = "ZKLOCK_PG_CALLER_DRIVES";

/// Whether a Client connecting now has its callers drive their own sessions: on Linux, unless
/// [`CALLER_DRIVES`] is `0`.
fn caller_drives() -> bool {
    cfg!(target_os = "linux") && drives(std::env::var_os(CALLER_DRIVES).as_deref())
}

/// Whether [`CALLER_DRIVES`] set to `value` lets callers drive their sessions.
fn drives(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_none_or(|v| v != "0")
}

fn in_runtime() -> Error {
    Error::invalid(
        "a blocking zklock call was made on an async runtime's thread: call it from \
         tokio::task::spawn_blocking (or a thread of your own)",
    )
}

impl Inner {
    pub(crate) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Ready once the Client is closed.
    pub(crate) async fn closing(&self) {
        let mut close = self.close.subscribe();
        let _ = close.wait_for(|c| *c).await;
    }

    /// Runs `f` to completion on the Client's runtime, blocking the calling thread.
    pub(crate) fn block_on<T>(&self, f: impl Future<Output = Result<T>>) -> Result<T> {
        if self.closed() {
            return Err(Error::Closed);
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(in_runtime());
        }
        // Boxed: a statement's future is a few kilobytes, which would be copied on every
        // move below.
        match &self.sockets {
            Some(watch) => watch.block_on(&self.handle, Box::pin(f)),
            None => self.handle.block_on(Box::pin(f)),
        }
    }

    /// Starts `f` on the Client's runtime.
    pub(crate) fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(f);
    }

    /// Runs callbacks on the Client's events thread.
    pub(crate) fn dispatch(&self) -> Dispatch {
        self.dispatch.clone()
    }

    /// A session from the pool, or a new one, and whether it came from the pool. A pooled
    /// session is used if it is open and was used within half the session timeout (an older
    /// one may have been ended by the server's idle limit). A pooled session may still turn
    /// out to be ended (its backend terminated a moment ago): a statement on it fails with
    /// [`Error::ConnectionLoss`], and the caller tries again on another.
    pub(crate) async fn session(&self) -> Result<(Arc<Session>, bool)> {
        loop {
            let pooled = self.pool.lock().pop();
            match pooled {
                Some((s, used)) if !s.ended() && used.elapsed() < self.session_timeout / 2 => {
                    return Ok((s, true))
                }
                Some(_) => continue,
                None => break,
            }
        }
        if self.closed() {
            return Err(Error::Closed);
        }
        // Boxed: opening is rare, and its future is large, which would make every caller's
        // future as large (and copied as often).
        let (s, _) = Box::pin(Session::open(
            &self.config,
            &self.tls,
            Some(&self.limits),
            self.connect_timeout,
            self.operation_timeout,
            Ties {
                close: self.close.subscribe(),
                on_end: self.keeper.ended.clone(),
                sockets: self.sockets.clone(),
                live: self.live.clone(),
                hosts: self.hosts.clone(),
            },
        ))
        .await?;
        Ok((Arc::new(s), false))
    }

    /// Keeps a session that holds nothing for the next acquisition.
    pub(crate) fn give_back(&self, s: Arc<Session>) {
        if !self.closed() && !s.ended() {
            let mut pool = self.pool.lock();
            // Sessions idle longer than the pool keeps them are dropped (closed) here.
            pool.retain(|(_, used)| used.elapsed() < self.session_timeout / 2);
            pool.push((s, Instant::now()));
        }
    }

    /// The table of tokens, unless a statement that used it failed.
    pub(crate) fn tokens(&self) -> Option<&Table> {
        let failed = self.tokens_failed.load(Ordering::Relaxed);
        self.tokens.as_ref().filter(|_| !failed)
    }

    /// Whether `e`, the answer to `sql`, is the server refusing a statement that uses the
    /// table of tokens: the table dropped, changed or no longer granted (an error of class 42,
    /// or an integrity error of class 23 from a constraint or policy the table was given). If
    /// it is, the Client uses the plain statements from then on, and the caller runs the plain
    /// statement instead (a lock's on another session: the refused statement may have taken
    /// the lock before it failed).
    pub(crate) fn tokens_refused(&self, sql: &str, e: &Error) -> bool {
        // The table as found, failed or not: two statements refused at once are both told.
        let uses_table = (self.tokens.as_ref()).is_some_and(|t| sql.contains(t.name.as_str()));
        let refused = sqlstate(e).is_some_and(|c| c.starts_with("42") || c.starts_with("23"));
        if !uses_table || !refused {
            return false;
        }
        if !self.tokens_failed.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "zklock: a statement using the table of tokens failed ({e}); {} records and \
                 shows no more tokens",
                self.shown
            );
        }
        true
    }

    /// The statement that waits for `key`: the plain one, or the one that records the token
    /// too when the Client writes the table of tokens.
    pub(crate) fn lock_sql(&self, key: &'static Statements) -> &str {
        (self.tokens())
            .and_then(|t| t.lock(key))
            .unwrap_or(key.lock)
    }

    /// The statement that tries `key` once (as [`lock_sql`](Self::lock_sql)).
    pub(crate) fn try_lock_sql(&self, key: &'static Statements) -> &str {
        (self.tokens())
            .and_then(|t| t.try_lock(key))
            .unwrap_or(key.try_lock)
    }

    /// The statement that lets go of `key` (deleting the hold's row of the table of tokens
    /// when the Client writes it).
    pub(crate) fn unlock_sql(&self, key: &'static Statements) -> &str {
        (self.tokens())
            .and_then(|t| t.unlock(key))
            .unwrap_or(key.unlock)
    }

    /// The statements that read a token later, and that try every key of a semaphore (each
    /// recording its token when the Client writes the table of tokens).
    pub(crate) fn token_sql(&self) -> (&str, &str) {
        match self.tokens().and_then(|t| t.writes.as_ref()) {
            Some(w) => (&w.token, &w.try_any),
            None => (sql::TOKEN, sql::TRY_ANY),
        }
    }

    /// The later of `deadline` and the operation timeout from now: how long one statement
    /// of a call with that deadline may take.
    pub(crate) fn statement_deadline(&self, deadline: Deadline) -> Deadline {
        deadline.or_later(Deadline::after(self.operation_timeout))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        self.close.send_replace(true);
        self.pool.get_mut().clear();
        // The sessions' tasks end with the runtime; it is not waited for (a drop never blocks,
        // and this may run on the runtime's own thread).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl fmt::Debug for PgClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgClient")
            .field("server", &self.inner.shown)
            .field("version", &self.inner.version)
            .field(
                "synchronous_standby_names",
                &self.inner.synchronous_standbys,
            )
            .field("session_timeout", &self.inner.session_timeout)
            .field("caller_drives", &self.inner.sockets.is_some())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for PgClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgClientBuilder")
            .field("url", &hide_password(&self.url))
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn refused(b: PgClientBuilder) -> String {
        match b.connect() {
            Err(Error::InvalidArgument(why)) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn only_zero_stops_callers_from_driving_their_sessions() {
        use std::ffi::OsStr;
        assert!(drives(None));
        assert!(drives(Some(OsStr::new("1"))));
        assert!(drives(Some(OsStr::new(""))));
        assert!(!drives(Some(OsStr::new("0"))));
    }

    #[test]
    fn bad_urls_and_durations_are_refused_before_any_io() {
        #[cfg(not(feature = "tls"))]
        {
            let tls = refused(PgClient::builder(
                "postgres://u:secret@127.0.0.1:1/db?sslmode=require",
            ));
            assert!(tls.contains("TLS") && !tls.contains("secret"), "{tls}");
        }
        let mode = refused(PgClient::builder(
            "postgres://u:secret@127.0.0.1:1/db?sslmode=sometimes",
        ));
        assert!(
            mode.contains("sslmode") && !mode.contains("secret"),
            "{mode}"
        );
        assert!(refused(PgClient::builder("redis://127.0.0.1:1")).contains("postgres://"));
        assert!(refused(PgClient::builder("postgres://u:secret@127.0.0.1:x/db")).contains("***"));
        let kv = refused(PgClient::builder("host=h port=x password='secret'"));
        assert!(kv.contains("port") && !kv.contains("secret"), "{kv}");
        let b = || PgClient::builder("postgres://127.0.0.1:1/db");
        assert!(refused(b().session_timeout(Duration::ZERO)).contains("session timeout"));
        assert!(refused(b().session_timeout(Duration::MAX)).contains("session timeout"));
        assert!(refused(b().connect_timeout(Duration::MAX)).contains("connection timeout"));
        assert!(refused(b().operation_timeout(Duration::ZERO)).contains("operation timeout"));
    }

    /// No variables, no home, no sockets, no files.
    struct Empty;

    impl libpq::Env for Empty {
        fn var(&self, _: &str) -> Option<String> {
            None
        }
        fn home(&self) -> Option<std::path::PathBuf> {
            None
        }
        fn os_user(&self) -> Option<String> {
            Some("os".to_owned())
        }
        fn exists(&self, _: &std::path::Path) -> bool {
            false
        }
        fn passfile(&self, _: &std::path::Path) -> Option<String> {
            None
        }
        fn service_file(&self, _: &std::path::Path) -> std::io::Result<Option<String>> {
            Ok(None)
        }
    }

    #[test]
    fn the_builder_s_connection_timeout_goes_before_the_string_s() {
        for s in [
            "postgres://u@127.0.0.1/db?connect_timeout=60&application_name=app",
            "host=127.0.0.1 user=u connect_timeout=60 application_name=app",
        ] {
            let c = PgClient::builder(s)
                .connect_timeout(Duration::from_secs(2))
                .check(&Empty)
                .unwrap();
            assert_eq!(
                c.config.get_connect_timeout(),
                Some(&Duration::from_secs(2))
            );
            assert_eq!(c.config.get_application_name(), Some("app"));
            let c = PgClient::builder(s).check(&Empty).unwrap();
            assert_eq!(c.connect_timeout, Duration::from_secs(60));
            assert_eq!(c.operation_timeout, Duration::from_secs(60));
        }
        let c = PgClient::builder("postgres://").check(&Empty).unwrap();
        assert_eq!(c.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(c.shown, "postgres://os@localhost:5432/os");
        // A keyword tokio-postgres does not know is refused with its name.
        assert!(refused(PgClient::builder("postgres://u@h/db?service=x")).contains("service"));
    }

    #[test]
    fn a_call_on_an_async_runtime_is_refused_not_a_panic() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let refused = runtime.block_on(async { PgClient::connect("postgres://127.0.0.1:1/db") });
        assert!(
            matches!(&refused, Err(Error::InvalidArgument(why)) if why.contains("spawn_blocking")),
            "{refused:?}"
        );
    }

    #[test]
    fn passwords_are_hidden() {
        let config = tokio_postgres::Config::from_str("postgres://u:pw@h:7/d").unwrap();
        assert_eq!(shown(&config), "postgres://u@h:7/d");
    }
}
