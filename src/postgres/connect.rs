//! How a session's connection is made — by tokio-postgres, whose connection a task on the
//! Client's runtime drives, or, on Linux for a URL with one host, on a socket zklock connects
//! itself, so that a caller in a blocking call drives it ([`Own`], `drive.rs`) — and the
//! server-side limits it opens with.
//!
//! The connection timeout bounds each host of a URL, as libpq's `connect_timeout` does: the
//! TCP connection, the startup (TLS, authentication, parameters) and the check of
//! `target_session_attrs`, all within it. The hosts are tried in [`HostOrder`]: the one that
//! gave the last session first, one that did not answer within its timeout after every other,
//! so that a silent host (powered off, cut off, frozen) costs one timeout, then nothing while
//! another answers.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use tokio::sync::{watch, Notify};

use super::error::error;
use super::tls::Tls;
use crate::core::error::{Error, Result};

#[cfg(target_os = "linux")]
mod own;

#[cfg(target_os = "linux")]
pub(crate) use super::drive::Watch;
#[cfg(not(target_os = "linux"))]
pub(crate) use elsewhere::{Own, Watch};
#[cfg(target_os = "linux")]
pub(crate) use own::Own;

/// A session's connection, made within `connect_timeout`: its client, the socket zklock
/// connected itself when the Client's callers drive their sessions (`ties.sockets`) and the URL
/// allows it, and what turns true when the connection ends — closed by either side, broken,
/// `stop` notified or the Client closed.
pub(crate) async fn connect(
    config: &tokio_postgres::Config,
    tls: &Tls,
    connect_timeout: Duration,
    ties: Ties,
    stop: Arc<Notify>,
) -> Result<(tokio_postgres::Client, Option<Own>, watch::Receiver<bool>)> {
    let Ties {
        close,
        on_end,
        sockets,
        live,
        hosts,
    } = ties;
    let (ended_tx, ended) = watch::channel(false);
    let end = End {
        close,
        stop,
        ended: ended_tx,
        on_end,
        live,
    };
    let (client, own) = match sockets {
        Some(watch) if Own::fits(config) => {
            let (client, own) = Own::connect(&watch, config, tls, connect_timeout, end).await?;
            (client, Some(own))
        }
        _ => (
            by_tokio_postgres(config, tls, connect_timeout, end, &hosts).await?,
            None,
        ),
    };
    Ok((client, own, ended))
}

/// A connection tokio-postgres makes, driven by a task on the Client's runtime: every answer
/// is read there and handed to the caller. With several hosts, each is tried on its own in
/// `hosts`' order, within `connect_timeout`; the error is the last host's, unless it did not
/// answer and another said why it refused.
async fn by_tokio_postgres(
    config: &tokio_postgres::Config,
    tls: &Tls,
    connect_timeout: Duration,
    end: End,
    hosts: &HostOrder,
) -> Result<tokio_postgres::Client> {
    let n = host_count(config);
    let (client, connection) = if n <= 1 {
        let shown = (n == 1).then(|| shown_host(config));
        one_host(config, tls, connect_timeout, shown.as_deref()).await?
    } else {
        let random =
            config.get_load_balance_hosts() == tokio_postgres::config::LoadBalanceHosts::Random;
        let (mut silent, mut refused) = (None, None);
        let mut found = None;
        for i in hosts.order(n, random) {
            let host = only_host(config, i);
            match one_host(&host, tls, connect_timeout, Some(&shown_host(&host))).await {
                Ok(c) => {
                    hosts.answered(i, true);
                    hosts.gave(i);
                    found = Some(c);
                    break;
                }
                Err(e) => {
                    let quiet = matches!(
                        e,
                        Error::Timeout
                            | Error::Io {
                                kind: std::io::ErrorKind::TimedOut,
                                ..
                            }
                    );
                    hosts.answered(i, !quiet);
                    match quiet {
                        true => silent = Some(e),
                        false => refused = Some(e),
                    }
                }
            }
        }
        match (found, refused, silent) {
            (Some(c), _, _) => c,
            (None, Some(e), _) | (None, None, Some(e)) => return Err(e),
            (None, None, None) => return Err(Error::invalid("a URL without a host")),
        }
    };
    // The way out drops the connection, which closes its socket.
    end.spawn(
        async {
            if let Err(e) = connection.await {
                tracing::debug!("zklock: a PostgreSQL session ended: {e}");
            }
        },
        || {},
    );
    Ok(client)
}

/// What a session's connection task tells when the connection ends.
struct End {
    /// Turns true when the Client closes.
    close: watch::Receiver<bool>,
    /// Notified when the session is ended.
    stop: Arc<Notify>,
    /// Turned true when the connection has ended.
    ended: watch::Sender<bool>,
    /// Notified when the connection has ended.
    on_end: Arc<Notify>,
    live: Arc<Live>,
}

impl End {
    /// Starts the connection's task, counted live until it ends: `connection` until it
    /// returns, the Client closes or the session is stopped; then `finish`, and the end is told.
    fn spawn(
        self,
        connection: impl Future<Output = ()> + Send + 'static,
        finish: impl FnOnce() + Send + 'static,
    ) {
        let End {
            mut close,
            stop,
            ended,
            on_end,
            live,
        } = self;
        let one = live.one();
        tokio::spawn(async move {
            tokio::select! {
                () = connection => {}
                _ = close.wait_for(|c| *c) => {}
                () = stop.notified() => {}
            }
            finish();
            let _ = ended.send(true);
            drop(one);
            on_end.notify_one();
        });
    }
}

/// A connection to the one host of `config` (several only where tokio-postgres tries them),
/// made within `connect_timeout`: the TCP connection, the startup and the check of
/// `target_session_attrs`. `host` names it in a timeout's message.
async fn one_host(
    config: &tokio_postgres::Config,
    tls: &Tls,
    connect_timeout: Duration,
    host: Option<&str>,
) -> Result<(
    tokio_postgres::Client,
    tokio_postgres::Connection<tokio_postgres::Socket, TlsStream>,
)> {
    tokio::time::timeout(connect_timeout, config.connect(tls.clone()))
        .await
        .map_err(|_| match host {
            Some(host) => Error::Io {
                context: format!("connecting to PostgreSQL at {host}"),
                kind: std::io::ErrorKind::TimedOut,
                message: format!(
                    "no session within {connect_timeout:?} (the connection timeout, per host): \
                     no connection, or the connection was accepted and the server did not \
                     answer"
                ),
            },
            None => timed_out(connect_timeout),
        })?
        .map_err(|e| match open_error(&e, config) {
            // tokio-postgres's words for a name that does not resolve.
            Error::Io {
                context,
                kind,
                message,
            } if message.contains("failed to lookup address") => Error::Io {
                context,
                kind,
                message: format!(
                    "the host name of {} does not resolve: {message}",
                    host.unwrap_or("the connection string")
                ),
            },
            other => other,
        })
}

/// The stream of a connection tokio-postgres makes with the Client's TLS options.
type TlsStream = <Tls as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream;

/// How many hosts `config` names (`host` or `hostaddr` entries).
fn host_count(config: &tokio_postgres::Config) -> usize {
    config.get_hosts().len().max(config.get_hostaddrs().len())
}

/// `config` with only its `i`th host (its `host`, `hostaddr` and port), every other setting
/// kept.
fn only_host(config: &tokio_postgres::Config, i: usize) -> tokio_postgres::Config {
    use tokio_postgres::config::Host;
    let mut one = tokio_postgres::Config::new();
    if let Some(user) = config.get_user() {
        one.user(user);
    }
    if let Some(password) = config.get_password() {
        one.password(password);
    }
    if let Some(dbname) = config.get_dbname() {
        one.dbname(dbname);
    }
    if let Some(options) = config.get_options() {
        one.options(options);
    }
    if let Some(name) = config.get_application_name() {
        one.application_name(name);
    }
    match config.get_hosts().get(i) {
        Some(Host::Tcp(host)) => {
            one.host(host);
        }
        #[cfg(unix)]
        Some(Host::Unix(path)) => {
            one.host_path(path);
        }
        None => {}
    }
    if let Some(addr) = config.get_hostaddrs().get(i) {
        one.hostaddr(*addr);
    }
    let ports = config.get_ports();
    if let Some(port) = ports.get(i).or(ports.first()) {
        one.port(*port);
    }
    if let Some(timeout) = config.get_connect_timeout() {
        one.connect_timeout(*timeout);
    }
    if let Some(timeout) = config.get_tcp_user_timeout() {
        one.tcp_user_timeout(*timeout);
    }
    one.keepalives(config.get_keepalives())
        .keepalives_idle(config.get_keepalives_idle());
    if let Some(interval) = config.get_keepalives_interval() {
        one.keepalives_interval(interval);
    }
    if let Some(retries) = config.get_keepalives_retries() {
        one.keepalives_retries(retries);
    }
    one.ssl_mode(config.get_ssl_mode())
        .ssl_negotiation(config.get_ssl_negotiation())
        .target_session_attrs(config.get_target_session_attrs())
        .channel_binding(config.get_channel_binding())
        .load_balance_hosts(config.get_load_balance_hosts());
    one
}

/// `host:port` of a one-host `config`, for messages.
fn shown_host(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match (config.get_hosts().first(), config.get_hostaddrs().first()) {
        (Some(Host::Tcp(host)), _) => host.clone(),
        #[cfg(unix)]
        (Some(Host::Unix(path)), _) => path.display().to_string(),
        (None, Some(addr)) => addr.to_string(),
        (None, None) => String::new(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// The order a Client tries its URL's hosts in: the one that gave the last session first,
/// then the others in the URL's order (shuffled with `load_balance_hosts=random`, and then
/// without a first), those that did not answer within their timeout the last time after every
/// other, until one answers again.
#[derive(Default)]
pub(crate) struct HostOrder {
    /// The host that gave the last session, plus one (0: none yet).
    last: AtomicUsize,
    /// Per host: whether it did not answer within its timeout the last time it was tried.
    silent: Mutex<Vec<bool>>,
}

impl HostOrder {
    /// The order to try `n` hosts in.
    fn order(&self, n: usize, random: bool) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        if random {
            fastrand::shuffle(&mut order);
        } else if let Some(last) = self.last.load(Ordering::Relaxed).checked_sub(1) {
            if last < n {
                order.retain(|&i| i != last);
                order.insert(0, last);
            }
        }
        let silent = self.silent.lock();
        order.sort_by_key(|&i| silent.get(i).copied().unwrap_or(false));
        order
    }

    /// Host `i` gave a session (`true`: it is tried first from now on), refused one, or did
    /// not answer within its timeout (`false`: it is tried last until it answers again).
    fn answered(&self, i: usize, answered: bool) {
        let mut silent = self.silent.lock();
        if silent.len() <= i {
            silent.resize(i + 1, false);
        }
        if silent[i] == answered {
            silent[i] = !answered;
            match answered {
                true => tracing::debug!("zklock: PostgreSQL host {} answers again", i + 1),
                false => tracing::debug!(
                    "zklock: PostgreSQL host {} did not answer: tried last until it does",
                    i + 1
                ),
            }
        }
    }

    /// Host `i` gave a session: tried first from now on.
    fn gave(&self, i: usize) {
        self.last.store(i + 1, Ordering::Relaxed);
    }
}

fn timed_out(connect_timeout: Duration) -> Error {
    Error::Io {
        context: "connecting to PostgreSQL".into(),
        kind: std::io::ErrorKind::TimedOut,
        message: format!("no session within {connect_timeout:?}"),
    }
}

/// A failure to open a session, as [`error`] says; and a password the server asks for that
/// nothing gave is [`Error::AuthFailed`] naming the user (tokio-postgres reports it as a
/// configuration error, "password missing").
fn open_error(e: &tokio_postgres::Error, config: &tokio_postgres::Config) -> Error {
    let missing = e.as_db_error().is_none()
        && std::error::Error::source(e).is_some_and(|s| s.to_string() == "password missing");
    if missing {
        return Error::AuthFailed(format!(
            "password missing: the server asks for user {:?}'s password and neither the \
             connection string, PGPASSWORD nor a password file gives one",
            config.get_user().unwrap_or_default()
        ));
    }
    match error(e, true) {
        // PostgreSQL's words for a pg_hba.conf that has only `hostssl` lines for this client.
        Error::AuthFailed(why) if why.contains("no encryption") => Error::AuthFailed(format!(
            "the server accepts this client only over TLS (sslmode=require or verify-full, \
             feature `tls`): {why}"
        )),
        other => other,
    }
}

/// A server-side setting a session is opened with.
pub(crate) type Limit = (&'static str, String);

/// The settings that make the server end a silent session within `timeout`, for a server of
/// `version` (those it does not have are left out), and those the lock statements rely on:
///
/// * `idle_session_timeout` (14+), `idle_in_transaction_session_timeout`: a session that sends
///   nothing for `timeout` is ended (a frozen holder; the heartbeat keeps a live one busy);
/// * `tcp_keepalives_idle/interval/count`, `tcp_user_timeout` (12+): a peer gone with its
///   machine or network is found within `timeout`;
/// * `client_connection_check_interval` (14+): a waiter whose client went away leaves the
///   lock's queue;
/// * `statement_timeout = 0` (a lock wait is bounded by `lock_timeout`, set per wait) and
///   `synchronous_commit = on` (the fencing token's transaction is on disk before it is
///   handed out).
pub(crate) fn limits(version: u32, timeout: Duration) -> Vec<Limit> {
    let ms = |d: Duration| d.as_millis().clamp(1, i32::MAX as u128).to_string();
    let s = |d: Duration| d.as_secs().clamp(1, i32::MAX as u64).to_string();
    let mut limits = vec![
        ("idle_in_transaction_session_timeout", ms(timeout)),
        ("tcp_keepalives_idle", s(timeout / 3)),
        ("tcp_keepalives_interval", s(timeout / 9)),
        ("tcp_keepalives_count", "3".to_owned()),
        ("statement_timeout", "0".to_owned()),
        ("synchronous_commit", "on".to_owned()),
    ];
    if version >= 120_000 {
        limits.push(("tcp_user_timeout", ms(timeout)));
    }
    if version >= 140_000 {
        limits.push(("idle_session_timeout", ms(timeout)));
        limits.push((
            "client_connection_check_interval",
            ms((timeout / 3).min(Duration::from_secs(1))),
        ));
    }
    limits
}

/// `limits` as one batch of `SET` statements.
pub(crate) fn set_sql(limits: &[Limit]) -> String {
    limits
        .iter()
        .map(|(name, value)| format!("SET {name} = {value};"))
        .collect()
}

/// The client's side of each connection finds a vanished server within `timeout` too.
pub(crate) fn set_keepalives(config: &mut tokio_postgres::Config, timeout: Duration) {
    config
        .keepalives(true)
        .keepalives_idle((timeout / 3).max(Duration::from_secs(1)))
        .keepalives_interval((timeout / 9).max(Duration::from_secs(1)))
        .keepalives_retries(3)
        .tcp_user_timeout(timeout);
}

/// Where a caller cannot drive its session (there is no eventfd and epoll to do it with): the
/// types that stand for it, never made.
/// What ties a session to its Client.
pub(crate) struct Ties {
    /// Turns true when the Client closes: the session's connection ends.
    pub(crate) close: watch::Receiver<bool>,
    /// Notified when the session's connection ends.
    pub(crate) on_end: Arc<Notify>,
    /// Where the session's socket waits while no caller drives it; `None` when callers do not
    /// drive their sessions.
    pub(crate) sockets: Option<Arc<Watch>>,
    /// Counts the Client's sessions whose connection has not ended.
    pub(crate) live: Arc<Live>,
    /// The order the URL's hosts are tried in.
    pub(crate) hosts: Arc<HostOrder>,
}

/// The number of a Client's sessions whose connection has not ended, so that closing the
/// Client can wait until every one has.
#[derive(Default)]
pub(crate) struct Live {
    count: Mutex<usize>,
    none: parking_lot::Condvar,
}

impl Live {
    /// Counts one more session until the returned guard is dropped.
    pub(crate) fn one(self: &Arc<Live>) -> LiveOne {
        *self.count.lock() += 1;
        LiveOne(self.clone())
    }

    /// Waits until no session's connection is left, for at most `timeout`; whether none is.
    pub(crate) fn wait_none(&self, timeout: Duration) -> bool {
        let mut count = self.count.lock();
        let end = Instant::now() + timeout;
        while *count > 0 {
            if self.none.wait_until(&mut count, end).timed_out() {
                return *count == 0;
            }
        }
        true
    }
}

/// One session counted in [`Live`].
pub(crate) struct LiveOne(Arc<Live>);

impl Drop for LiveOne {
    fn drop(&mut self) {
        let mut count = self.0.count.lock();
        *count -= 1;
        if *count == 0 {
            self.0.none.notify_all();
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod elsewhere {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::time::Duration;

    use super::End;
    use crate::core::error::Result;
    use crate::postgres::tls::Tls;

    /// Never made: a Client's callers do not drive their sessions here.
    pub(crate) enum Watch {}

    impl Watch {
        pub(crate) fn start(_: &tokio::runtime::Handle) -> std::io::Result<Arc<Watch>> {
            Err(std::io::ErrorKind::Unsupported.into())
        }

        pub(crate) fn block_on<F: Future>(&self, _: &tokio::runtime::Handle, _: F) -> F::Output {
            match *self {}
        }
    }

    /// Never made: every session is connected by tokio-postgres here.
    pub(crate) enum Own {}

    impl Own {
        pub(crate) fn fits(_: &tokio_postgres::Config) -> bool {
            false
        }

        pub(super) async fn connect(
            watch: &Watch,
            _: &tokio_postgres::Config,
            _: &Tls,
            _: Duration,
            _: End,
        ) -> Result<(tokio_postgres::Client, Own)> {
            match *watch {}
        }

        pub(crate) fn close(&self) {
            match *self {}
        }

        pub(crate) async fn drive<F: Future>(&self, _: Pin<&mut F>) -> F::Output {
            match *self {}
        }

        pub(crate) async fn cancel(&self, _: &tokio_postgres::CancelToken, _: &Tls) -> Result<()> {
            match *self {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn one_host_of_a_url_keeps_every_other_setting() {
        let options = "user=u password=pw dbname=d options=-cx=1 application_name=app \
                       connect_timeout=7 keepalives=0 keepalives_idle=9 \
                       target_session_attrs=read-write channel_binding=disable \
                       sslmode=disable tcp_user_timeout=3000";
        let several = tokio_postgres::Config::from_str(&format!(
            "host=a,b,c hostaddr=10.0.0.1,10.0.0.2,10.0.0.3 port=1,2,3 {options}"
        ))
        .unwrap();
        assert_eq!(host_count(&several), 3);
        let second =
            tokio_postgres::Config::from_str(&format!("host=b hostaddr=10.0.0.2 port=2 {options}"))
                .unwrap();
        assert_eq!(only_host(&several, 1), second);
        assert_eq!(shown_host(&second), "b:2");
        // One port for every host.
        let one_port = tokio_postgres::Config::from_str("host=a,b port=7 user=u").unwrap();
        let b = tokio_postgres::Config::from_str("host=b port=7 user=u").unwrap();
        assert_eq!(only_host(&one_port, 1), b);
    }

    #[test]
    fn the_host_that_gave_the_last_session_goes_first_and_a_silent_one_last() {
        let order = HostOrder::default();
        assert_eq!(order.order(3, false), [0, 1, 2]);
        order.answered(0, false);
        assert_eq!(order.order(3, false), [1, 2, 0]);
        order.answered(1, true);
        order.gave(1);
        assert_eq!(order.order(3, false), [1, 2, 0]);
        order.answered(0, true);
        assert_eq!(order.order(3, false), [1, 0, 2]);
        order.answered(1, false);
        assert_eq!(order.order(3, false), [0, 2, 1]);
        let mut shuffled = order.order(3, true);
        assert_eq!(
            shuffled.pop(),
            Some(1),
            "a silent host last, shuffled or not"
        );
    }

    #[test]
    fn limits_follow_the_timeout_and_the_server_version() {
        let l = limits(150_000, Duration::from_secs(30));
        let get = |l: &[Limit], n: &str| l.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get(&l, "idle_session_timeout").unwrap(), "30000");
        assert_eq!(get(&l, "tcp_keepalives_idle").unwrap(), "10");
        assert_eq!(get(&l, "tcp_keepalives_interval").unwrap(), "3");
        assert_eq!(get(&l, "tcp_user_timeout").unwrap(), "30000");
        assert_eq!(get(&l, "client_connection_check_interval").unwrap(), "1000");
        let old = limits(110_000, Duration::from_secs(1));
        assert!(get(&old, "idle_session_timeout").is_none());
        assert!(get(&old, "tcp_user_timeout").is_none());
        assert_eq!(get(&old, "tcp_keepalives_interval").unwrap(), "1");
        assert!(set_sql(&l).starts_with("SET idle_in_transaction_session_timeout = 30000;"));
    }
}
