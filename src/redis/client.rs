//! [`RedisClient`]: the connections, threads and calls every Redis lock of one Client shares.
//!
//! Calls run on command connections taken from a small pool (one per thread calling at once),
//! each bounded by the operation timeout and retried through the retry policy when the
//! connection fails. Every script of the lock protocol can be sent again safely: a grant whose
//! answer was lost is found again by the next attempt, a release or a leave twice is a release
//! or a leave.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::cluster::Redirect;
use super::error::error;
use super::keeper::{join_by, Keeper, Replicas};
use super::node::Tls;
use super::scripts::{invocation, Keys, Scripts};
use super::server::{route, Route, Server};
use super::slots::Slots;
use super::wake::{start_subscriber, Wakes};
use crate::core::connection::ConnectionState;
use crate::core::connection::States;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::lease::boot_clock;
use crate::core::listeners::{start_events_thread, Dispatch};
use crate::core::lock::DROP_BOUND;
use crate::core::options::Options;
use crate::core::retry::{RetryBudget, RetryPolicy};

/// The oldest Redis that runs the lock scripts as written (`TIME` before writes in a script).
const MIN_VERSION: (u32, u32) = (5, 0);

/// A connection to one Redis server (or the primary of a replicated set), shared by every Redis
/// lock made from it. Cheap to clone; the connections and threads end with
/// [`close`](RedisClient::close) or with the last handle (the last clone, and every lock, lease
/// and latch made from it): dropping that releases the Client's holds and takes its waiters
/// out of their queues before it returns, within the operation timeout, as `close` does.
///
/// Each Client runs three threads: `zklock-redis-sub` (reads the Client's wake-up channel),
/// `zklock-redis-keeper` (renews every hold at a third of the TTL, reports lock health, finishes
/// background releases, leader latches' turns) and `zklock-redis-events` (runs callbacks).
/// Calls use command connections from a pool: one per thread calling at the same time, kept for
/// reuse (at most 16 to one node); up to four waiting threads read their wake-ups on subscriber connections of their own.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use zklock::RedisClient;
/// use zklock::redis::RedisMutex;
///
/// # fn main() -> zklock::Result<()> {
/// let client = RedisClient::builder("redis://127.0.0.1:6379/0")
///     .ttl(Duration::from_secs(10))
///     .connect()?;
/// let mutex = RedisMutex::new(&client, "ledger")?;
/// let guard = mutex.lock()?;
/// println!("token {}", guard.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisClient {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    server: Server,
    /// The URL without its password, for messages.
    shown: String,
    id: String,
    ttl: Duration,
    operation_timeout: Duration,
    /// Replicated grants: how many replicas must confirm a grant or a renewal, within what.
    replicas: Option<Replicas>,
    retry: Arc<dyn RetryPolicy>,
    /// Command connections kept for reuse, each with the node it goes to (`""` for one server
    /// or the sentinels' primary; on a cluster, a primary's `host:port`).
    pool: Mutex<Vec<(String, redis::Connection)>>,
    pub(crate) scripts: Arc<Scripts>,
    pub(crate) wakes: Arc<Wakes>,
    pub(crate) keeper: Keeper,
    pub(crate) slots: Slots,
    states: Arc<States>,
    closed: Arc<AtomicBool>,
    next_waiter: AtomicU64,
    /// The server's primary moves when the pooled connections were opened.
    pool_moves: AtomicU64,
    events: Sender<Box<dyn FnOnce() + Send>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Options of a [`RedisClient`], from [`RedisClient::builder`].
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::RedisClient::builder("redis://:secret@127.0.0.1:6379/2")
///     .connect_timeout(std::time::Duration::from_secs(2))
///     .connect()?;
/// # Ok(()) }
/// ```
pub struct RedisClientBuilder {
    url: String,
    /// The seed nodes' URLs of [`RedisClient::cluster_builder`], instead of `url`.
    seeds: Option<Vec<String>>,
    options: Options,
    replicas: Option<Replicas>,
    /// The CA to trust instead of the system's, and a client certificate and key (PEM).
    tls: Tls,
}

impl RedisClient {
    /// Connects with the default options (TTL 30 s, connection timeout 10 s: see
    /// [`DEFAULT_SESSION_TIMEOUT`](crate::DEFAULT_SESSION_TIMEOUT)).
    ///
    /// # Errors
    /// As [`RedisClientBuilder::connect`].
    pub fn connect(url: &str) -> Result<RedisClient> {
        RedisClient::builder(url).connect()
    }

    /// Options for a Client of the server at `url`: `redis://[[user]:password@]host[:port][/db]`,
    /// or `rediss://…` for TLS (feature `tls`; the server's certificate is checked against
    /// the system's CAs, or `RedisClientBuilder::tls_ca_pem`, and against the host the URL
    /// names), or the primary of a Sentinel set:
    /// `redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/primary_name[/db]`
    /// (sentinels on port 26379 unless given; `?sentinel_password=…&sentinel_username=…` for
    /// sentinels that ask for a password of their own), asked for the primary at each new
    /// connection, so that the Client follows a failover; or a Redis Cluster:
    /// `redis+cluster://[[user]:password@]host[:port][,host[:port]…]` (seed nodes, port 6379
    /// unless given), each lock's calls sent to the primary of its slot.
    ///
    /// `rediss+sentinel://…` and `rediss+cluster://…` (feature `tls`) use TLS to every
    /// sentinel and data node, or to every cluster node, with the same TLS options: each
    /// sentinel's or seed's certificate is checked against the host the URL names, each data
    /// node's against the address the sentinels or the cluster's slot map give for it (an IP
    /// address unless the servers announce host names), so the nodes' certificates must name
    /// those addresses.
    pub fn builder(url: &str) -> RedisClientBuilder {
        RedisClientBuilder {
            url: url.to_owned(),
            seeds: None,
            options: Options::default(),
            replicas: None,
            tls: Tls::default(),
        }
    }

    /// Options for a Client of the Redis Cluster that `seeds` belong to: the URLs of some of
    /// its nodes, each `redis://[[user]:password@]host[:port]` (port 6379 unless given) or
    /// `rediss://…` for TLS (feature `tls`), all with the same scheme and credentials; the
    /// same Client as [`builder`](Self::builder) with
    /// `redis+cluster://[[user]:password@]host[:port][,host[:port]…]` gives. The slot map is
    /// read from the first seed that answers, and each lock's calls go to the primary of its
    /// slot.
    ///
    /// An empty list, a seed that is not such a URL, seeds with different schemes or
    /// credentials, or a database other than 0 are refused by
    /// [`connect`](RedisClientBuilder::connect) before any I/O; seeds of which none is a
    /// cluster node, when it connects.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::RedisClient;
    /// use zklock::redis::RedisMutex;
    ///
    /// # fn main() -> zklock::Result<()> {
    /// let client = RedisClient::cluster_builder([
    ///     "redis://:secret@10.0.0.1:7000",
    ///     "redis://:secret@10.0.0.2:7000",
    ///     "redis://:secret@10.0.0.3:7000",
    /// ])
    /// .connect()?;
    /// let mutex = RedisMutex::new(&client, "ledger")?;
    /// let guard = mutex.lock()?;
    /// # drop(guard);
    /// # Ok(()) }
    /// ```
    pub fn cluster_builder<I, S>(seeds: I) -> RedisClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut builder = RedisClient::builder("");
        builder.seeds = Some(
            seeds
                .into_iter()
                .map(|s| s.as_ref().trim().to_owned())
                .collect(),
        );
        builder
    }

    /// The hold TTL: the server frees a hold whose holder has not renewed it for this long.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// [`ttl`](Self::ttl) under the name every backend's Client uses.
    pub fn session_timeout(&self) -> Duration {
        self.inner.ttl
    }

    /// This Client's id, the first part of every hold and waiter id it writes.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Releases every hold of this Client (their health turns `Lost`), takes its waiters out
    /// of the queues they are in and ends their waits with [`Error::Closed`], and ends its
    /// threads; later calls fail with [`Error::Closed`].
    ///
    /// # Blocking
    /// At most the operation timeout (the releases and the queue exits, in one round trip)
    /// plus a quarter second (the other threads' poll), whatever the server does.
    pub fn close(&self) {
        self.inner.shut_down(true);
    }

    /// The connection state now: `Connected` from the start, `Suspended` once the server has
    /// stopped answering the Client's keeper (a failed renewal or `TIME`, or none answered for
    /// half a TTL), `Lost` once a whole TTL has passed since it last answered (every hold of
    /// the Client may have expired), `Reconnected` when it answers again.
    pub fn state(&self) -> ConnectionState {
        self.inner.states.state()
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

crate::core::connection::forward_connection_api!(RedisClient, inner.states);

// The shared options: the session timeout is the holds' TTL (see `ttl`), the operation
// timeout bounds each command.
crate::core::options::connection_options!(RedisClientBuilder);

impl RedisClientBuilder {
    /// The hold TTL, the Redis name of the [`session_timeout`](Self::session_timeout) (default
    /// 30 s, at least 100 ms): how long the server keeps a hold whose holder has stopped
    /// renewing it (crashed, frozen, cut off), and so how long the others wait for a dead
    /// holder. The Client renews every hold at a third of it; a hold reads `Suspended` once
    /// half of it has passed since its last acknowledged renewal was sent, `Lost` once all of
    /// it has.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.session_timeout(ttl)
    }

    /// Replicated grants (off by default): after each grant, and with each renewal batch,
    /// `WAIT` until `replicas` replicas have the write, for at most `timeout`. A grant that
    /// fewer replicas confirmed is released at once and the acquire fails with
    /// [`Error::Redis`] saying how many did (it is not retried: a replica that is down stays
    /// down for the next attempt too); a renewal batch that fewer confirmed does not count,
    /// so the holds' health turns `Suspended` and then `Lost` as if the renewal had failed.
    /// This narrows the window in which a failover can grant a lock twice to the grants the
    /// old primary had not yet replicated when the replicas confirmed — see `docs/redis.md`
    /// for what stays open.
    ///
    /// `timeout` must be shorter than the operation timeout and than a sixth of the TTL (the
    /// keeper's bound for a renewal round): [`connect`](Self::connect) refuses it otherwise.
    /// Servers that forbid `WAIT` (some managed services) refuse each grant with their error.
    /// Every Redis lock: mutexes, read-write locks, semaphores and leader latches (a latch
    /// whose grant was not confirmed gives its turn up and queues again at its re-check).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some(Replicas {
            count: replicas,
            timeout,
        });
        self
    }

    /// TLS (`rediss://`, `rediss+sentinel://` and `rediss+cluster://` URLs): trust the CA
    /// certificates in `pem` instead of the system's, for every server the Client connects to.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_ca_pem(mut self, pem: &str) -> Self {
        self.tls.ca = Some(pem.to_owned());
        self
    }

    /// TLS (`rediss://`, `rediss+sentinel://` and `rediss+cluster://` URLs): present this
    /// client certificate and key (PEM) to every server that asks for one
    /// (`tls-auth-clients yes`).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_identity_pem(mut self, certificate: &str, key: &str) -> Self {
        self.tls.identity = Some((certificate.to_owned(), key.to_owned()));
        self
    }

    /// Checks the options, opens a connection, checks the server, subscribes to the Client's
    /// wake-up channel and starts the Client's threads.
    ///
    /// # Blocking
    /// At most the connection timeout plus the operation timeout for the command connection
    /// and the server check, and as much again for the subscriber's connection.
    ///
    /// # Errors
    /// Before any I/O, [`Error::InvalidArgument`] for a URL that does not parse (a sentinel URL
    /// without the primary's name, a cluster URL with a database), a `rediss://`,
    /// `rediss+sentinel://` or `rediss+cluster://` URL in a build without the `tls` feature or a timeout or TTL out of range. Then
    /// [`Error::ConnectFailed`] with the cause: [`Error::Io`] for a refused or unreachable
    /// server, a host name that does not resolve, a server that accepts the connection and
    /// answers nothing within the connection timeout, or one that closes it without an answer
    /// (as a port that requires TLS does to a `redis://` URL), each saying which, [`Error::AuthFailed`] for a refused password or user, [`Error::Redis`] for a
    /// server older than Redis 5.0 or one that refuses the database index, or a primary name
    /// no sentinel knows (the cause says what each sentinel answered), or a cluster seed that
    /// is not a cluster node or a cluster without slots (the cause says what each seed
    /// answered).
    pub fn connect(self) -> Result<RedisClient> {
        let (server, shown) = self.check()?;
        let operation_timeout = self.options.operation_timeout();
        let failed = |cause: Error| Error::ConnectFailed {
            hosts: shown.clone(),
            cause: Box::new(cause),
        };
        if let Some(cluster) = server.as_cluster() {
            // A seed that is not a cluster node, or a cluster without slots, is told here.
            cluster
                .read_map(self.options.connect_timeout(), operation_timeout)
                .map_err(|e| failed(error(e)))?;
        }
        // One server's host, to tell a name that does not resolve.
        let info = redis::IntoConnectionInfo::into_connection_info(shown.as_str()).ok();
        let host = info.as_ref().and_then(|i| match i.addr() {
            redis::ConnectionAddr::Tcp(host, port)
            | redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.as_str(), *port)),
            _ => None,
        });
        let bound = self.options.connect_timeout().max(operation_timeout);
        let lost = |e| failed(super::error::connect_error(e, host, bound));
        let (node, mut conn) = server
            .connect_route(None, self.options.connect_timeout(), operation_timeout)
            .map_err(lost)?;
        let sent = boot_clock();
        check_version(&mut conn, lost)?;
        let id = client_id(fastrand::u64(..));
        let closed = Arc::new(AtomicBool::new(false));
        let wakes = Arc::new(Wakes::default());
        let scripts = Arc::new(Scripts::new());
        let subscriber = start_subscriber(
            server.clone(),
            &id,
            self.options.connect_timeout(),
            wakes.clone(),
            closed.clone(),
        )
        .map_err(failed)?;
        let (events, events_thread) = start_events_thread("zklock-redis-events", closed.clone())?;
        let states = Arc::new(States::new(
            "Redis",
            self.options.session_timeout(),
            sent,
            dispatch(&events),
        ));
        let slots = Slots::new(server.clone(), &id, self.options.connect_timeout());
        let keeper = Keeper::start(
            server.clone(),
            scripts.clone(),
            self.options.session_timeout(),
            operation_timeout,
            closed.clone(),
            (wakes.clone(), id.clone(), states.clone(), shown.clone()),
            self.replicas,
        )?;
        Ok(RedisClient {
            inner: Arc::new(Inner {
                server,
                shown,
                id,
                ttl: self.options.session_timeout(),
                operation_timeout,
                replicas: self.replicas,
                retry: self.options.retry(),
                pool: Mutex::new(vec![(node, conn)]),
                scripts,
                wakes,
                keeper,
                slots,
                states,
                closed,
                next_waiter: AtomicU64::new(1),
                pool_moves: AtomicU64::new(0),
                events,
                threads: Mutex::new(vec![subscriber, events_thread]),
            }),
        })
    }

    /// Everything that can be known without I/O.
    fn check(&self) -> Result<(Server, String)> {
        let composed;
        let url = match &self.seeds {
            Some(seeds) => {
                composed = cluster_url(seeds)?;
                composed.as_str()
            }
            None => self.url.trim(),
        };
        check_scheme(url, cfg!(feature = "tls"))?;
        let not_redis = |e: &dyn std::fmt::Display| {
            Error::invalid(format!("{:?} is not a Redis URL: {e}", shown_url(url)))
        };
        let tls = self.tls.clone();
        let redis = if url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://") {
            let parsed = super::cluster::parse(url).map_err(|why| not_redis(&why))?;
            Server::cluster(super::cluster::Cluster::new(parsed, tls))
        } else if url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://") {
            let parsed = super::sentinel::parse(url).map_err(|why| not_redis(&why))?;
            let sentinels =
                super::sentinel::Sentinels::new(parsed, tls).map_err(|e| not_redis(&e))?;
            Server::sentinel(sentinels)
        } else {
            Server::direct(tls.open(url).map_err(|e| not_redis(&e))?)
        };
        for (what, d, min) in [
            (
                "TTL",
                self.options.session_timeout(),
                Duration::from_millis(100),
            ),
            (
                "connection timeout",
                self.options.connect_timeout(),
                Duration::from_millis(1),
            ),
            (
                "operation timeout",
                self.options.operation_timeout(),
                Duration::from_millis(1),
            ),
        ] {
            if d < min || d > Duration::from_secs(86_400) {
                return Err(Error::invalid(format!(
                    "the {what} must be between {min:?} and a day, not {d:?}"
                )));
            }
        }
        if let Some(r) = self.replicas {
            let op = self.options.operation_timeout();
            let bound = op.min(self.options.session_timeout() / 6);
            if r.count == 0 || r.timeout.is_zero() || r.timeout >= bound {
                return Err(Error::invalid(format!(
                    "wait_for_replicas needs at least one replica and a timeout above zero and \
                     below {bound:?} (the operation timeout and a sixth of the TTL), not {} \
                     within {:?}",
                    r.count, r.timeout
                )));
            }
        }
        Ok((redis, shown_url(url)))
    }
}

/// A Redis URL's scheme: `redis://`, `redis+sentinel://`, `redis+cluster://`, or their TLS
/// forms `rediss…://` in a build with TLS.
fn check_scheme(url: &str, tls_built: bool) -> Result<()> {
    match url.split("://").next().unwrap_or_default() {
        "redis" | "redis+sentinel" | "redis+cluster" => Ok(()),
        "rediss" | "rediss+sentinel" | "rediss+cluster" if tls_built => Ok(()),
        scheme @ ("rediss" | "rediss+sentinel" | "rediss+cluster") => Err(Error::invalid(format!(
            "{:?}: TLS connections ({scheme}://) need zklock's `tls` feature",
            shown_url(url)
        ))),
        _ => Err(Error::invalid(format!(
            "{:?}: a Redis URL starts with redis:// (redis://[[user]:password@]host[:port][/db]) \
             , redis+sentinel:// (redis+sentinel://[[user]:password@]host[:port][,…]/primary_name[/db]) \
             or redis+cluster:// (redis+cluster://[[user]:password@]host[:port][,host[:port]…])",
            shown_url(url)
        ))),
    }
}

/// The `redis+cluster://` (`rediss+cluster://`) URL of the cluster whose nodes' URLs are
/// `seeds`; refused if there is none, if one is not a node's URL, or if they differ in scheme
/// or credentials.
fn cluster_url(seeds: &[String]) -> Result<String> {
    let form = "redis://[[user]:password@]host[:port] or rediss://…";
    let mut first: Option<(&str, &str)> = None;
    let mut hosts = Vec::new();
    for seed in seeds {
        let refused = |why: &str| {
            Error::invalid(format!(
                "{:?} is not a cluster seed node's URL: {why} ({form})",
                shown_url(seed)
            ))
        };
        let Some((scheme, rest)) = seed.split_once("://") else {
            return Err(refused("no scheme"));
        };
        if !matches!(scheme, "redis" | "rediss") {
            return Err(refused("the scheme is not redis:// or rediss://"));
        }
        if rest.contains('?') {
            return Err(refused("a seed takes no options"));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if !matches!(path, "" | "0") {
            return Err(refused("a cluster has database 0 only"));
        }
        let (auth, host) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        if host.is_empty() || host.contains(',') {
            return Err(refused("one host[:port] per seed"));
        }
        match first {
            None => first = Some((scheme, auth)),
            Some((s, _)) if s != scheme => {
                return Err(Error::invalid(format!(
                    "the seeds of one cluster take one scheme: {:?} and {:?}",
                    shown_url(&seeds[0]),
                    shown_url(seed)
                )))
            }
            Some((_, a)) if a != auth => {
                return Err(Error::invalid(format!(
                    "the seeds of one cluster take the same user and password: {:?} and {:?}",
                    shown_url(&seeds[0]),
                    shown_url(seed)
                )))
            }
            Some(_) => {}
        }
        hosts.push(host);
    }
    let Some((scheme, auth)) = first else {
        return Err(Error::invalid(
            "a cluster Client needs at least one seed node's URL",
        ));
    };
    Ok(format!("{scheme}+cluster://{auth}{}", hosts.join(",")))
}

/// `url` with its password hidden.
pub(crate) fn shown_url(url: &str) -> String {
    if (url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://"))
        && url.contains('?')
    {
        return shown_sentinel_url(url);
    }
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            let user = creds.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// A Sentinel `url` with the passwords hidden (the data nodes' and the sentinels').
fn shown_sentinel_url(url: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let base = shown_url(base);
    if query.is_empty() {
        return base;
    }
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("sentinel_password", _)) => "sentinel_password=***".to_owned(),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

/// Checks the server's version; an error of the `INFO` asked for it as `lost` gives it.
fn check_version(
    conn: &mut redis::Connection,
    lost: impl FnOnce(redis::RedisError) -> Error,
) -> Result<()> {
    let info: String = redis::cmd("INFO").arg("server").query(conn).map_err(lost)?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("0")
        .trim()
        .to_owned();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if found < MIN_VERSION {
        return Err(Error::Redis(format!(
            "Redis {version} is too old: zklock needs Redis {}.{} or later",
            MIN_VERSION.0, MIN_VERSION.1
        )));
    }
    Ok(())
}

/// Runs callbacks on the events thread that `events` feeds.
fn dispatch(events: &Sender<Box<dyn FnOnce() + Send>>) -> Dispatch {
    let events = events.clone();
    Arc::new(move |f| {
        let _ = events.send(f);
    })
}

/// A Client's id: `RANDOM.PID@HOST`, unique, and telling who reads the queue which process
/// holds or waits (`RedisParticipant::host` and `pid`). The host name keeps at most 64 of
/// `[A-Za-z0-9.-]` (others become `-`), so that the id never holds the `:` and `/` that the
/// owner ids `CLIENT:SEQ` and `CLIENT/N:SEQ` are cut at.
fn client_id(random: u64) -> String {
    let host: String = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{random:016x}.{}@{host}", std::process::id())
}

impl Inner {
    /// The next waiter or holder id of this Client: `CLIENT:SEQ`, or `CLIENT/N:SEQ` on the
    /// waiting slot whose prefix is given (its wake-up goes to that slot's channel).
    pub(crate) fn new_owner(&self, slot: Option<&str>) -> String {
        format!(
            "{}:{}",
            slot.unwrap_or(&self.id),
            self.next_waiter.fetch_add(1, Ordering::Relaxed)
        )
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// On a cluster, that every key of the lock with `keys` is in one hash slot (a script
    /// over keys of several slots is refused with `CROSSSLOT`): not so for a name that begins
    /// with `}`, whose keys' hash tag `{}` is empty, so that each key is hashed whole.
    pub(crate) fn check_keys(&self, keys: &Keys) -> Result<()> {
        if self.server.as_cluster().is_none() {
            return Ok(());
        }
        let all = keys.all();
        let first = super::cluster::slot(all[0]);
        if all.iter().any(|k| super::cluster::slot(k) != first) {
            return Err(Error::invalid(format!(
                "the keys of the lock {:?} would not share a Redis Cluster hash slot (a name \
                 that begins with '}}' makes their hash tag empty): choose another name",
                keys.holder
            )));
        }
        Ok(())
    }

    /// On a cluster, that every key of `keys` hashes to the slot of `lock_key` (a script over
    /// keys of several slots is refused with `CROSSSLOT`, and it must run where the lock is).
    pub(crate) fn check_slot_of(&self, lock_key: &str, keys: &[&str]) -> Result<()> {
        if self.server.as_cluster().is_none() {
            return Ok(());
        }
        let slot = super::cluster::slot(lock_key);
        match keys.iter().find(|k| super::cluster::slot(k) != slot) {
            None => Ok(()),
            Some(other) => Err(Error::invalid(format!(
                "the key {other:?} is in Redis Cluster hash slot {}, not in the lock's ({slot}, \
                 of {lock_key:?}): a guarded write runs where the lock is, so give its keys the \
                 lock's hash tag (the lock's name in braces)",
                super::cluster::slot(other)
            ))),
        }
    }

    pub(crate) fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// Replicated grants, if asked for.
    pub(crate) fn replicas(&self) -> Option<Replicas> {
        self.replicas
    }

    pub(crate) fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Releases `owner`'s hold of the lock with `keys` by `until` (within the operation
    /// timeout if `None`); what is not done by then goes on in the background.
    /// [`Error::LockLost`] if the hold had been lost (`lost`) or was no longer `owner`'s.
    pub(crate) fn release_within(
        &self,
        keys: &Keys,
        owner: &str,
        until: Option<Instant>,
        lost: bool,
    ) -> Result<()> {
        let by = until.map_or(Deadline::after(self.operation_timeout), Deadline::at);
        // A release only frees what the server holds for this Client: it is sent after a
        // close too (the closing keeper may have missed a hold given up at that moment).
        let released = self.call_by(keys, by, Calling::Closing, |c| {
            let mut call = invocation(self.scripts.release(keys.layout), keys);
            call.arg(owner);
            call.invoke::<i64>(c)
        });
        match released {
            Ok((1, _)) if !lost => Ok(()),
            Ok(_) => Err(Error::LockLost),
            Err(e) => {
                self.keeper.release_later(keys, owner);
                Err(e)
            }
        }
    }

    /// Releases `owner`'s hold in the background; once the Client is closing (its keeper may be
    /// done), here, within the operation timeout.
    pub(crate) fn release_later(&self, keys: &Keys, owner: &str) {
        if !self.keeper.release_later(keys, owner) {
            let _ = self.release_within(keys, owner, None, false);
        }
    }

    /// A grant just handed to the keeper as `kept`: if the Client began to close meanwhile, the
    /// closing keeper may have released its holds before this one was added, so it is
    /// released here (within the operation timeout) and the acquire fails with
    /// [`Error::Closed`]. The keeper adds a hold before this looks at the close flag, and
    /// looks at its holds only after the flag is set: one of the two releases it.
    pub(crate) fn keep_unless_closed(&self, keys: &Keys, owner: &str, kept: u64) -> Result<()> {
        if !self.closed() {
            return Ok(());
        }
        self.keeper.forget(kept);
        let within = Deadline::after(self.operation_timeout);
        let released = self.call_by(keys, within, Calling::Closing, |c| {
            let mut call = invocation(self.scripts.release(keys.layout), keys);
            call.arg(owner);
            call.invoke::<i64>(c)
        });
        if let Err(e) = released {
            tracing::debug!("zklock: a Redis grant that came in at close was not released: {e}");
        }
        Err(Error::Closed)
    }

    /// When a drop that releases gives what is left to the background: [`DROP_BOUND`] from
    /// now, or the operation timeout if that is shorter.
    pub(crate) fn drop_deadline(&self) -> Instant {
        Instant::now() + self.drop_bound()
    }

    /// How long a drop waits for a release in the caller: [`DROP_BOUND`], or the operation
    /// timeout if that is shorter.
    pub(crate) fn drop_bound(&self) -> Duration {
        DROP_BOUND.min(self.operation_timeout)
    }

    /// Runs callbacks on the Client's events thread.
    pub(crate) fn dispatch(&self) -> Dispatch {
        dispatch(&self.events)
    }

    /// Runs `f` on a command connection for the lock with `keys` until `deadline`, or one
    /// operation timeout from now if that is later: see [`call_by`](Self::call_by).
    pub(crate) fn call<T>(
        &self,
        keys: &Keys,
        deadline: Deadline,
        f: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<(T, Duration)> {
        let by = deadline.or_later(Deadline::after(self.operation_timeout));
        self.call_by(keys, by, Calling::Open, f)
    }

    /// Runs `f` on a command connection for the lock with `keys` (on a cluster, to the
    /// primary of its slot), retrying failed connections through the retry policy, and
    /// returns by `by` whatever the server does: each attempt's connect and answer are waited
    /// for at most the operation timeout and what is left until `by`. On a cluster a `MOVED`
    /// answer sends `f` again to the node it names (at once, up to [`MAX_REDIRECTS`] times), an
    /// `ASK` answer sends it there once after `ASKING`, `TRYAGAIN` and `CLUSTERDOWN` are
    /// retried as a lost connection. Returns the answer and the lease clock's reading taken
    /// when the successful attempt was sent; [`Error::Timeout`] if no time was left for an
    /// attempt.
    pub(crate) fn call_by<T>(
        &self,
        keys: &Keys,
        by: Deadline,
        calling: Calling,
        mut f: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<(T, Duration)> {
        let route = route(keys);
        let mut budget = RetryBudget::new(self.retry.clone());
        let mut asking: Option<String> = None;
        let mut redirects = 0;
        loop {
            if calling == Calling::Open && self.closed() {
                return Err(Error::Closed);
            }
            let io = match by.remaining() {
                Some(left) if left.is_zero() => return Err(Error::Timeout),
                Some(left) => left.min(self.operation_timeout),
                None => self.operation_timeout,
            };
            let ask = asking.take();
            let taken = match &ask {
                Some(node) => self.take_node(node, io),
                None => self.take(route, io),
            };
            let attempt = taken.and_then(|(node, mut conn)| {
                // What is left once connected (a new connection took some of it).
                let io = match by.remaining() {
                    Some(left) if left.is_zero() => {
                        self.pool_back(node, conn);
                        return Err(Error::Timeout);
                    }
                    Some(left) => left.min(self.operation_timeout),
                    None => self.operation_timeout,
                };
                // A bound of one operation timeout from a moment ago (a release's) keeps the
                // connection's own timeouts: setting and restoring them costs four system
                // calls, for a bound shorter by microseconds.
                let shortened = io + TIMEOUT_SLACK < self.operation_timeout;
                if shortened {
                    set_timeouts(&conn, io).map_err(error)?;
                }
                let sent = boot_clock();
                let answer = match ask {
                    Some(_) => redis::cmd("ASKING")
                        .query::<()>(&mut conn)
                        .and_then(|()| f(&mut conn)),
                    None => f(&mut conn),
                };
                match answer {
                    Ok(v) => {
                        if !shortened || set_timeouts(&conn, self.operation_timeout).is_ok() {
                            self.pool_back(node, conn);
                        }
                        Ok(Ok((v, sent)))
                    }
                    Err(e) => {
                        if super::error::broken(&e) {
                            // The others were opened to the same server: likely broken too.
                            self.pool.lock().retain(|(n, _)| *n != node);
                        } else if !shortened || set_timeouts(&conn, self.operation_timeout).is_ok()
                        {
                            self.pool_back(node.clone(), conn);
                        }
                        Ok(Err((node, e)))
                    }
                }
            });
            let failed = match attempt {
                Ok(Ok(done)) => return Ok(done),
                Ok(Err((node, e))) => match self.server.as_cluster() {
                    Some(cluster) if super::cluster::redirect(&e, &node).is_some() => {
                        match cluster.redirected(&e, &node) {
                            _ if redirects >= MAX_REDIRECTS => error(e),
                            Some(Redirect::Moved { .. }) => {
                                redirects += 1;
                                continue;
                            }
                            Some(Redirect::Ask { node, .. }) => {
                                redirects += 1;
                                asking = Some(node);
                                continue;
                            }
                            None => error(e),
                        }
                    }
                    Some(cluster)
                        if matches!(
                            e.kind(),
                            redis::ErrorKind::Server(
                                redis::ServerErrorKind::TryAgain
                                    | redis::ServerErrorKind::ClusterDown,
                            )
                        ) =>
                    {
                        cluster.suspect();
                        Error::ConnectionLoss
                    }
                    _ => error(e),
                },
                Err(e) => e,
            };
            match failed {
                Error::ConnectionLoss => {
                    if let Some(cluster) = self.server.as_cluster() {
                        cluster.suspect();
                    }
                    let Some(sleep) = budget.next_sleep() else {
                        return Err(Error::ConnectionLoss);
                    };
                    if by.remaining().is_some_and(|left| left <= sleep) {
                        return Err(Error::ConnectionLoss);
                    }
                    tracing::debug!("zklock: Redis connection lost, retrying in {sleep:?}");
                    std::thread::sleep(sleep);
                }
                other => return Err(other),
            }
        }
    }

    /// A pooled command connection to the cluster node `node` (an `ASK` answer's), or a new
    /// one opened within `within`.
    fn take_node(&self, node: &str, within: Duration) -> Result<(String, redis::Connection)> {
        {
            let mut pool = self.pool.lock();
            if let Some(i) = pool.iter().rposition(|(n, _)| n == node) {
                return Ok(pool.swap_remove(i));
            }
        }
        self.server
            .connect_node(node, within, self.operation_timeout)
            .map(|c| (node.to_owned(), c))
            .map_err(error)
    }

    /// Gives a command connection back to the pool, or closes it if the pool already keeps
    /// [`POOL_PER_NODE`] connections to its node.
    fn pool_back(&self, node: String, conn: redis::Connection) {
        let mut pool = self.pool.lock();
        if pool.iter().filter(|(n, _)| *n == node).count() < POOL_PER_NODE {
            pool.push((node, conn));
        }
    }

    /// A pooled command connection for `route`, or a new one opened within `within`; with the
    /// node it goes to.
    fn take(&self, route: Route, within: Duration) -> Result<(String, redis::Connection)> {
        {
            let mut pool = self.pool.lock();
            // Connections opened before the primary moved go to a node that is no longer it.
            let moves = self.server.moves();
            if self.pool_moves.swap(moves, Ordering::AcqRel) != moves {
                pool.clear();
            }
            if let Some(node) = self.server.known_node(route) {
                if let Some(i) = pool.iter().rposition(|(n, _)| *n == node) {
                    return Ok(pool.swap_remove(i));
                }
            }
        }
        self.server
            .connect_route(route, within, self.operation_timeout)
            .map_err(error)
    }

    /// Closes the Client: its holds released and its waiters taken out of their queues by
    /// the keeper, giving up one operation timeout from now; then the other threads are
    /// waited for until a quarter second after that (`all`), or not at all. A thread that is
    /// not done by then (a callback that blocks, a subscriber in a reconnect) ends by itself.
    fn shut_down(&self, all: bool) {
        let give_up = Instant::now() + self.operation_timeout;
        // The threads that read a wake-up channel (the subscriber, waiters on slots) see the
        // close at once when a message comes; only close() waits for them.
        let wake = if all {
            let mut wake = self.slots.prefixes();
            wake.push(self.id.clone());
            wake
        } else {
            Vec::new()
        };
        self.keeper.closing(give_up, wake);
        self.closed.store(true, Ordering::Release);
        // The events thread ends on the next callback once closed: this one.
        let _ = self.events.send(Box::new(|| {}));
        self.wakes.wake_all();
        self.keeper.stop(give_up);
        if all {
            let until = give_up + THREADS_GRACE;
            for t in self.threads.lock().drain(..) {
                join_by(t, until);
            }
        }
        self.slots.close();
    }
}

/// Whether a call may still be made once the Client has begun to close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Calling {
    /// No: [`Error::Closed`].
    Open,
    /// Yes: a closing Client's waiter cleans up after an answer that came in after the close.
    Closing,
}

/// How much shorter than the operation timeout a call's bound must be for the call to set its
/// connection's timeouts to it: a call may end this much after its bound.
const TIMEOUT_SLACK: Duration = Duration::from_millis(1);

/// How many command connections to one node the pool keeps: more threads calling at once
/// open connections of their own, closed after their call.
const POOL_PER_NODE: usize = 16;

/// How many `MOVED` or `ASK` answers one call follows before it fails with the last.
const MAX_REDIRECTS: u32 = 5;

/// How long `close()` waits for its other threads after the keeper: the subscriber's and the
/// events thread's poll.
const THREADS_GRACE: Duration = Duration::from_millis(250);

fn set_timeouts(conn: &redis::Connection, d: Duration) -> redis::RedisResult<()> {
    conn.set_read_timeout(Some(d))?;
    conn.set_write_timeout(Some(d))
}

impl Drop for Inner {
    fn drop(&mut self) {
        // As close(), except that only the keeper is waited for: what this Client holds, or
        // has queued for, is deleted before this returns (within the operation timeout), so
        // that a program that ends with the drop leaves nothing behind. The other threads end
        // by themselves.
        self.shut_down(false);
    }
}

impl fmt::Debug for RedisClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisClient")
            .field("url", &self.inner.shown)
            .field("id", &self.inner.id)
            .field("ttl", &self.inner.ttl)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for RedisClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seeds = self
            .seeds
            .as_ref()
            .map(|s| s.iter().map(|s| shown_url(s)).collect::<Vec<_>>());
        f.debug_struct("RedisClientBuilder")
            .field("url", &shown_url(&self.url))
            .field("seeds", &seeds)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_passwords_are_hidden() {
        assert_eq!(
            shown_sentinel_url("redis+sentinel://u:pw@h/m?sentinel_password=x&sentinel_username=s"),
            "redis+sentinel://u:***@h/m?sentinel_password=***&sentinel_username=s"
        );
        assert_eq!(
            shown_sentinel_url("rediss+sentinel://:pw@h/m?sentinel_password=x"),
            "rediss+sentinel://:***@h/m?sentinel_password=***"
        );
    }

    #[test]
    fn a_password_is_not_shown() {
        assert_eq!(shown_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(shown_url("redis://:pw@h"), "redis://:***@h");
        assert_eq!(shown_url("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn bad_urls_and_durations_are_refused_before_any_io() {
        let refused = |b: RedisClientBuilder| match b.connect() {
            Err(Error::InvalidArgument(why)) => why,
            other => panic!("not refused: {other:?}"),
        };
        let tls = |url| match check_scheme(url, false) {
            Err(Error::InvalidArgument(why)) => why,
            other => panic!("not refused: {other:?}"),
        };
        for url in [
            "rediss://127.0.0.1:1",
            "rediss+sentinel://127.0.0.1:1/m",
            "rediss+cluster://127.0.0.1:1",
        ] {
            let why = tls(url);
            assert!(why.contains("`tls` feature"), "{why}");
            assert!(why.contains(url.split("://").next().unwrap()), "{why}");
            assert!(check_scheme(url, true).is_ok(), "{url}");
        }
        assert!(refused(RedisClient::builder("http://127.0.0.1:1")).contains("redis://"));
        assert!(
            refused(RedisClient::builder("redis://127.0.0.1:1").ttl(Duration::ZERO))
                .contains("TTL")
        );
        assert!(
            refused(RedisClient::builder("redis://127.0.0.1:1").ttl(Duration::MAX)).contains("TTL")
        );
        let why = refused(RedisClient::builder("redis://:secret@127.0.0.1:notaport"));
        assert!(!why.contains("secret"), "{why}");
    }

    #[test]
    fn cluster_seeds_make_a_cluster_url_or_are_refused_before_any_io() {
        let url = |seeds: &[&str]| {
            cluster_url(&seeds.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
        };
        assert_eq!(
            url(&["redis://:pw@10.0.0.1:7000", "redis://:pw@10.0.0.2:7000/0"]).unwrap(),
            "redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7000"
        );
        assert_eq!(
            url(&["rediss://node-a", "rediss://node-b:7001/"]).unwrap(),
            "rediss+cluster://node-a,node-b:7001"
        );
        for (seeds, why) in [
            (&[][..], "at least one seed"),
            (&["10.0.0.1:7000"][..], "no scheme"),
            (&["http://10.0.0.1:7000"][..], "scheme"),
            (&["redis://h:1", "rediss://h:2"][..], "one scheme"),
            (
                &["redis://:a@h:1", "redis://:b@h:2"][..],
                "same user and password",
            ),
            (&["redis://h:1/2"][..], "database 0"),
            (&["redis://h:1,h:2"][..], "one host"),
            (&["redis://h:1?protocol=resp3"][..], "no options"),
        ] {
            match url(seeds) {
                Err(Error::InvalidArgument(e)) => {
                    assert!(e.contains(why), "{seeds:?}: {e}");
                    assert!(!e.contains(":a@") && !e.contains(":b@"), "{e}");
                }
                other => panic!("{seeds:?}: {other:?}"),
            }
        }
        let empty: [&str; 0] = [];
        match RedisClient::cluster_builder(empty).connect() {
            Err(Error::InvalidArgument(e)) => assert!(e.contains("at least one seed"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_urls_are_refused_before_any_io_in_a_build_without_tls() {
        for url in [
            "rediss://127.0.0.1:1",
            "rediss+sentinel://127.0.0.1:1/m",
            "rediss+cluster://127.0.0.1:1",
        ] {
            match RedisClient::builder(url).connect() {
                Err(Error::InvalidArgument(why)) => assert!(why.contains("`tls` feature"), "{why}"),
                other => panic!("{url} not refused: {other:?}"),
            }
        }
    }
}
