//! [`connect`]: one URL picks the backend at run time, and the locks are made by name.
//!
//! A service whose operators choose the backend writes its locking once, on [`AnyClient`]:
//! `file:///dir` (the processes of one host, no server), `zk://`, `redis://`, `rediss://`, `redis+sentinel://`, `redis+cluster://` (and their TLS
//! forms `rediss+sentinel://`, `rediss+cluster://`), `postgres://`, `postgresql://`,
//! `mysql://` and `mariadb://` URLs give the same recipes with the same options and defaults
//! (sqlx's `AnyPool` is the model).

use std::sync::Arc;
use std::time::Duration;

use crate::core::connection::ConnectionState;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::lock::Lock;

/// The session timeout every backend gets unless told otherwise: the server frees a silent
/// holder's locks this long after its last heartbeat.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The connect timeout every backend gets unless told otherwise; it also bounds each round
/// trip (the operation timeout) unless that is set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL schemes [`connect`] takes in this build.
const SCHEMES: &str =
    "file://, zk://, redis://, rediss://, redis+sentinel://, rediss+sentinel://, redis+cluster://, \
     rediss+cluster://, postgres://, postgresql://, mysql://, mariadb://";

/// Connects to the backend `url` names, with the default options (see [`AnyClientBuilder`]).
///
/// # Example
/// ```no_run
/// use zklock::Lock;
///
/// # fn main() -> zklock::Result<()> {
/// // zk://host:2181,host2:2181/chroot, redis://host:6379, postgres://user:pw@host/db
/// let url = std::env::var("LOCK_URL").unwrap_or_else(|_| "zk://127.0.0.1:2181".into());
/// let locks = zklock::connect(&url)?;
/// let ledger = locks.mutex("ledger")?;
/// let guard = ledger.lock()?;
/// println!("held with token {}", guard.fencing_token());
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`AnyClientBuilder::connect`].
pub fn connect(url: &str) -> Result<AnyClient> {
    AnyClient::builder(url).connect()
}

/// A Client of whichever backend its URL named: makes mutexes, read-write locks, semaphores
/// and leader latches by name, as trait objects over the backend's own types.
///
/// A name means the same on every backend: on ZooKeeper it is the path `/NAME` under the
/// URL's chroot (so `a/b` nests, as Curator's paths do); on Redis and PostgreSQL it is the
/// name the backend's own types take. Cloning is cheap and shares the connection.
///
/// A Client made with its backend's own builder, for the options only that backend has, turns
/// into an `AnyClient` with `From`:
/// `zklock::AnyClient::from(zklock::RedisClient::builder(url).tls_ca_pem(&ca).connect()?)`.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let locks = zklock::AnyClient::builder("redis://127.0.0.1:6379")
///     .session_timeout(std::time::Duration::from_secs(10))
///     .connect()?;
/// let jobs = locks.semaphore("jobs", 4)?;
/// if let Some(lease) = jobs.try_acquire()? {
///     println!("one of 4, token {}", lease.fencing_token());
///     lease.release()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AnyClient {
    inner: Arc<dyn Backend>,
}

/// How to connect an [`AnyClient`]: the URL and the options every backend shares.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let locks = zklock::AnyClient::builder("zk://127.0.0.1:2181/app")
///     .connect_timeout(std::time::Duration::from_secs(3))
///     .connect()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect`"]
pub struct AnyClientBuilder {
    url: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    operation_timeout: Option<Duration>,
}

impl AnyClient {
    /// A builder for `url`, with [`DEFAULT_SESSION_TIMEOUT`] and [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn builder(url: &str) -> AnyClientBuilder {
        AnyClientBuilder {
            url: url.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            operation_timeout: None,
        }
    }

    /// Which backend the URL named: `"file"`, `"zookeeper"`, `"redis"`, `"postgres"` or
    /// `"mysql"`.
    pub fn backend(&self) -> &'static str {
        self.inner.name()
    }

    /// A re-entrant mutex named `name` (the backend's fair mutex).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] or [`Error::InvalidPath`] for a name the backend refuses;
    /// nothing is sent.
    pub fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
        self.inner.mutex(name)
    }

    /// A read-write lock named `name`.
    ///
    /// # Errors
    /// As [`mutex`](Self::mutex).
    pub fn read_write_lock(&self, name: &str) -> Result<AnyReadWriteLock> {
        Ok(AnyReadWriteLock {
            inner: self.inner.read_write(name)?,
        })
    }

    /// A counting semaphore of `max_leases` leases named `name`.
    ///
    /// # Errors
    /// As [`mutex`](Self::mutex); [`Error::InvalidArgument`] for no lease.
    pub fn semaphore(&self, name: &str, max_leases: u32) -> Result<AnySemaphore> {
        if max_leases == 0 {
            return Err(Error::invalid("a semaphore needs at least one lease"));
        }
        Ok(AnySemaphore {
            inner: self.inner.semaphore(name, max_leases)?,
        })
    }

    /// A leader latch on the election `name`, taking part at once.
    ///
    /// # Errors
    /// As [`mutex`](Self::mutex); a connection error if it cannot join the election.
    pub fn leader_latch(&self, name: &str) -> Result<AnyLeaderLatch> {
        Ok(AnyLeaderLatch {
            inner: self.inner.latch(name)?,
        })
    }

    /// The connection's state now.
    pub fn state(&self) -> ConnectionState {
        self.inner.state()
    }

    /// Closes the Client as the backend's own `close()` does: waiters end with
    /// [`Error::Closed`], holds are freed.
    pub fn close(&self) {
        self.inner.close()
    }
}

impl std::fmt::Debug for AnyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyClient")
            .field("backend", &self.inner.name())
            .finish_non_exhaustive()
    }
}

impl AnyClientBuilder {
    /// The server-side silence limit: ZooKeeper's session timeout, the Redis keys' TTL,
    /// PostgreSQL's session timeout. Default [`DEFAULT_SESSION_TIMEOUT`].
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long connecting may take. Default [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The bound of one round trip. Default: the connect timeout.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = Some(timeout);
        self
    }

    /// Connects to the backend the URL names.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a scheme that is not one of `file://`, `zk://`, `redis://`,
    /// `rediss://`, `postgres://`, `postgresql://`, `mysql://`, `mariadb://`, or whose backend
    /// this build left out (its cargo feature), before any I/O; otherwise as the backend's own
    /// `connect`.
    pub fn connect(self) -> Result<AnyClient> {
        let Some((scheme, _)) = self.url.split_once("://") else {
            return Err(Error::invalid(format!(
                "{:?} is not a lock URL: it must start with one of {SCHEMES}",
                self.url
            )));
        };
        let op = self.operation_timeout.unwrap_or(self.connect_timeout);
        let inner: Arc<dyn Backend> = match scheme {
            "file" => file::connect(&self, op)?,
            "zk" => zookeeper::connect(&self, op)?,
            "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster"
            | "rediss+cluster" => redis::connect(&self, op)?,
            "postgres" | "postgresql" => postgres::connect(&self, op)?,
            "mysql" | "mariadb" => mysql::connect(&self, op)?,
            other => {
                return Err(Error::invalid(format!(
                    "unknown lock URL scheme {other}://: use one of {SCHEMES}"
                )))
            }
        };
        Ok(AnyClient { inner })
    }
}

/// The refusal of a URL whose backend this build left out.
#[allow(dead_code)] // unused when every backend is built
fn not_built(backend: &str) -> Error {
    Error::invalid(format!(
        "this build of zklock has no {backend} backend: enable its cargo feature `{backend}`"
    ))
}

/// A read-write lock of any backend: its halves are [`Lock`]s. Writers are preferred: a
/// waiting writer goes before readers that came after it.
///
/// # Example
/// ```no_run
/// use zklock::Lock;
///
/// # fn main() -> zklock::Result<()> {
/// let rw = zklock::connect("postgres://app@127.0.0.1/app")?.read_write_lock("catalog")?;
/// rw.read_lock().acquire()?; // shared with other readers
/// rw.read_lock().release()?;
/// # Ok(()) }
/// ```
pub struct AnyReadWriteLock {
    inner: Box<dyn ReadWrite>,
}

impl AnyReadWriteLock {
    /// The shared half.
    pub fn read_lock(&self) -> &dyn Lock {
        self.inner.read()
    }

    /// The exclusive half.
    pub fn write_lock(&self) -> &dyn Lock {
        self.inner.write()
    }
}

impl std::fmt::Debug for AnyReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyReadWriteLock").finish_non_exhaustive()
    }
}

/// A counting semaphore of any backend.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let sem = zklock::connect("zk://127.0.0.1:2181")?.semaphore("slots", 3)?;
/// let lease = sem.acquire()?;
/// lease.release()?;
/// # Ok(()) }
/// ```
pub struct AnySemaphore {
    inner: Box<dyn Semaphore>,
}

impl AnySemaphore {
    /// Blocks until a lease is ours.
    ///
    /// # Errors
    /// As the backend's semaphore's `acquire`.
    pub fn acquire(&self) -> Result<AnyLease> {
        self.inner
            .acquire(None)?
            .ok_or_else(|| Error::invalid("an unbounded acquire returned no lease"))
    }

    /// Waits up to `timeout` for a lease; `None` if none is ours by then.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<AnyLease>> {
        self.inner.acquire(Some(timeout))
    }

    /// One attempt without waiting.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Result<Option<AnyLease>> {
        self.inner.acquire(Some(Duration::ZERO))
    }

    /// Ends every acquisition waiting now with [`Error::Cancelled`].
    pub fn cancel_waiters(&self) {
        self.inner.cancel_waiters()
    }
}

impl std::fmt::Debug for AnySemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnySemaphore").finish_non_exhaustive()
    }
}

/// One lease of an [`AnySemaphore`]; dropping it releases it.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let sem = zklock::connect("zk://127.0.0.1:2181")?.semaphore("slots", 3)?;
/// let lease = sem.acquire()?;
/// if lease.health() == zklock::LockHealth::Held {
///     println!("token {}", lease.fencing_token());
/// }
/// lease.release()?;
/// # Ok(()) }
/// ```
pub struct AnyLease {
    inner: Box<dyn Lease>,
}

impl AnyLease {
    /// The lease's identity: its node's path on ZooKeeper, its id in the semaphore's set on
    /// Redis, `NAME:INDEX` on PostgreSQL, the `GET_LOCK` name on MySQL.
    pub fn id(&self) -> &str {
        self.inner.id()
    }

    /// A number that rises across successive holders of the lease's slot.
    pub fn fencing_token(&self) -> u64 {
        self.inner.fencing_token()
    }

    /// The lease's health, computed now.
    pub fn health(&self) -> LockHealth {
        self.inner.health()
    }

    /// Gives the lease back, reporting errors.
    ///
    /// # Errors
    /// As the backend's lease's `release`.
    pub fn release(self) -> Result<()> {
        self.inner.release()
    }
}

impl std::fmt::Debug for AnyLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyLease")
            .field("token", &self.inner.fencing_token())
            .finish_non_exhaustive()
    }
}

/// A leader latch of any backend: taking part from its creation until [`close`](Self::close)
/// or drop.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// let latch = zklock::connect("redis://127.0.0.1:6379")?.leader_latch("scheduler")?;
/// latch.await_leadership()?;
/// println!("leading in epoch {:?}", latch.epoch());
/// # Ok(()) }
/// ```
pub struct AnyLeaderLatch {
    inner: Box<dyn Latch>,
}

impl AnyLeaderLatch {
    /// Whether we lead now.
    pub fn has_leadership(&self) -> bool {
        self.inner.has_leadership()
    }

    /// The current term's fencing epoch, if we lead: rising across terms.
    pub fn epoch(&self) -> Option<u64> {
        self.inner.epoch()
    }

    /// The current term's health, computed now (`None` between terms): `Held` while the
    /// leader's hold is sound, `Suspended` while its connection or renewal is late, `Lost` once
    /// the term ended.
    pub fn health(&self) -> Option<LockHealth> {
        self.inner.health()
    }

    /// Blocks until we lead.
    ///
    /// # Errors
    /// As the backend's latch's `await_leadership`.
    pub fn await_leadership(&self) -> Result<()> {
        self.inner.await_leadership(None).map(|_| ())
    }

    /// Waits up to `timeout` to lead; `false` if we do not by then.
    ///
    /// # Errors
    /// As [`await_leadership`](Self::await_leadership).
    pub fn await_leadership_timeout(&self, timeout: Duration) -> Result<bool> {
        self.inner.await_leadership(Some(timeout))
    }

    /// Leaves the election (and ends a term we hold).
    pub fn close(&self) {
        self.inner.close()
    }
}

impl std::fmt::Debug for AnyLeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyLeaderLatch")
            .field("leading", &self.inner.has_leadership())
            .finish_non_exhaustive()
    }
}

/// What each backend's Client offers an [`AnyClient`].
trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>>;
    fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>>;
    fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>>;
    fn latch(&self, name: &str) -> Result<Box<dyn Latch>>;
    fn state(&self) -> ConnectionState;
    fn close(&self);
}

trait ReadWrite: Send + Sync {
    fn read(&self) -> &dyn Lock;
    fn write(&self) -> &dyn Lock;
}

trait Semaphore: Send + Sync {
    /// `None`: without limit.
    fn acquire(&self, timeout: Option<Duration>) -> Result<Option<AnyLease>>;
    fn cancel_waiters(&self);
}

trait Lease: Send + Sync {
    fn id(&self) -> &str;
    fn fencing_token(&self) -> u64;
    fn health(&self) -> LockHealth;
    fn release(self: Box<Self>) -> Result<()>;
}

trait Latch: Send + Sync {
    fn has_leadership(&self) -> bool;
    fn epoch(&self) -> Option<u64>;
    fn health(&self) -> Option<LockHealth>;
    /// `None`: without limit.
    fn await_leadership(&self, timeout: Option<Duration>) -> Result<bool>;
    fn close(&self);
}

/// `From<Client>` for an [`AnyClient`]: a Client built with its backend's own builder, for the
/// options only that backend has (TLS files, ZooKeeper's authentication and ACLs).
#[allow(unused_macros)] // unused in a build without backends
macro_rules! from_client {
    ($client:ty) => {
        impl From<$client> for AnyClient {
            fn from(client: $client) -> AnyClient {
                AnyClient {
                    inner: Arc::new(client),
                }
            }
        }
    };
}

/// The read-write, semaphore, lease and latch adapters of one backend's types.
#[allow(unused_macros)] // unused in a build without backends
macro_rules! adapters {
    ($rw:ty, $sem:ty, $lease:ty, $latch:ty) => {
        impl ReadWrite for $rw {
            fn read(&self) -> &dyn Lock {
                self.read_lock()
            }
            fn write(&self) -> &dyn Lock {
                self.write_lock()
            }
        }
        impl Semaphore for $sem {
            fn acquire(&self, timeout: Option<Duration>) -> Result<Option<AnyLease>> {
                let lease = match timeout {
                    None => Some(<$sem>::acquire(self)?),
                    Some(t) => <$sem>::acquire_timeout(self, t)?,
                };
                Ok(lease.map(|l| AnyLease { inner: Box::new(l) }))
            }
            fn cancel_waiters(&self) {
                <$sem>::cancel_waiters(self)
            }
        }
        impl Lease for $lease {
            fn id(&self) -> &str {
                <$lease>::id(self)
            }
            fn fencing_token(&self) -> u64 {
                <$lease>::fencing_token(self)
            }
            fn health(&self) -> LockHealth {
                <$lease>::health(self)
            }
            fn release(self: Box<Self>) -> Result<()> {
                (*self).release()
            }
        }
        impl Latch for $latch {
            fn has_leadership(&self) -> bool {
                <$latch>::has_leadership(self)
            }
            fn epoch(&self) -> Option<u64> {
                <$latch>::epoch(self)
            }
            fn health(&self) -> Option<LockHealth> {
                <$latch>::health(self)
            }
            fn await_leadership(&self, timeout: Option<Duration>) -> Result<bool> {
                match timeout {
                    None => <$latch>::await_leadership(self).map(|_| true),
                    Some(t) => <$latch>::await_leadership_timeout(self, t),
                }
            }
            fn close(&self) {
                let _ = <$latch>::close(self);
            }
        }
    };
}

#[path = "file/any.rs"]
mod file;

mod zookeeper {
    use super::*;

    #[cfg(not(feature = "zookeeper"))]
    pub(super) fn connect(_: &AnyClientBuilder, _: Duration) -> Result<Arc<dyn Backend>> {
        Err(not_built("zookeeper"))
    }

    #[cfg(feature = "zookeeper")]
    pub(super) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
        let rest = &b.url["zk://".len()..];
        let (hosts, chroot) = match rest.split_once('/') {
            Some((hosts, chroot)) => (hosts, chroot.trim_end_matches('/')),
            None => (rest, ""),
        };
        if hosts.is_empty() {
            return Err(Error::invalid(format!("{:?} names no host", b.url)));
        }
        let mut builder = Client::builder(hosts)
            .session_timeout(b.session_timeout)
            .connect_timeout(b.connect_timeout)
            .operation_timeout(op);
        if !chroot.is_empty() {
            builder = builder.namespace(chroot);
        }
        Ok(Arc::new(builder.connect()?))
    }

    #[cfg(feature = "zookeeper")]
    use crate::zookeeper::{
        client::Client,
        leader::LeaderLatch,
        locks::{InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2},
    };

    /// A name's path, in the layout Curator's users write.
    #[cfg(feature = "zookeeper")]
    fn path(name: &str) -> String {
        format!("/{name}")
    }

    #[cfg(feature = "zookeeper")]
    from_client!(Client);

    #[cfg(feature = "zookeeper")]
    impl Backend for Client {
        fn name(&self) -> &'static str {
            "zookeeper"
        }
        fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
            Ok(Arc::new(InterProcessMutex::new(self, &path(name))?))
        }
        fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
            Ok(Box::new(InterProcessReadWriteLock::new(self, &path(name))?))
        }
        fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
            Ok(Box::new(InterProcessSemaphoreV2::new(
                self,
                &path(name),
                max_leases,
            )?))
        }
        fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
            let latch = LeaderLatch::new(self, &path(name))?;
            latch.start()?;
            Ok(Box::new(latch))
        }
        fn state(&self) -> ConnectionState {
            // `None` only before the first connection, which `connect` waited for.
            Client::state(self).unwrap_or(ConnectionState::Suspended)
        }
        fn close(&self) {
            Client::close(self)
        }
    }

    #[cfg(feature = "zookeeper")]
    adapters!(
        InterProcessReadWriteLock,
        InterProcessSemaphoreV2,
        crate::zookeeper::locks::Lease,
        LeaderLatch
    );
}

mod redis {
    use super::*;

    #[cfg(not(feature = "redis"))]
    pub(super) fn connect(_: &AnyClientBuilder, _: Duration) -> Result<Arc<dyn Backend>> {
        Err(not_built("redis"))
    }

    #[cfg(feature = "redis")]
    pub(super) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
        let client = RedisClient::builder(&b.url)
            .ttl(b.session_timeout)
            .connect_timeout(b.connect_timeout)
            .operation_timeout(op)
            .connect()?;
        Ok(Arc::new(client))
    }

    #[cfg(feature = "redis")]
    use crate::redis::{
        RedisClient, RedisLeaderLatch, RedisLease, RedisMutex, RedisReadWriteLock, RedisSemaphore,
    };

    #[cfg(feature = "redis")]
    from_client!(RedisClient);

    #[cfg(feature = "redis")]
    impl Backend for RedisClient {
        fn name(&self) -> &'static str {
            "redis"
        }
        fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
            Ok(Arc::new(RedisMutex::new(self, name)?))
        }
        fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
            Ok(Box::new(RedisReadWriteLock::new(self, name)?))
        }
        fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
            Ok(Box::new(RedisSemaphore::new(self, name, max_leases)?))
        }
        fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
            Ok(Box::new(RedisLeaderLatch::start(self, name)?))
        }
        fn state(&self) -> ConnectionState {
            RedisClient::state(self)
        }
        fn close(&self) {
            RedisClient::close(self)
        }
    }

    #[cfg(feature = "redis")]
    adapters!(
        RedisReadWriteLock,
        RedisSemaphore,
        RedisLease,
        RedisLeaderLatch
    );
}

mod postgres {
    use super::*;

    #[cfg(not(feature = "postgres"))]
    pub(super) fn connect(_: &AnyClientBuilder, _: Duration) -> Result<Arc<dyn Backend>> {
        Err(not_built("postgres"))
    }

    #[cfg(feature = "postgres")]
    pub(super) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
        let client = PgClient::builder(&b.url)
            .session_timeout(b.session_timeout)
            .connect_timeout(b.connect_timeout)
            .operation_timeout(op)
            .connect()?;
        Ok(Arc::new(client))
    }

    #[cfg(feature = "postgres")]
    use crate::postgres::{
        PgClient, PgLeaderLatch, PgLease, PgMutex, PgReadWriteLock, PgSemaphore,
    };

    #[cfg(feature = "postgres")]
    from_client!(PgClient);

    #[cfg(feature = "postgres")]
    impl Backend for PgClient {
        fn name(&self) -> &'static str {
            "postgres"
        }
        fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
            Ok(Arc::new(PgMutex::new(self, name)?))
        }
        fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
            Ok(Box::new(PgReadWriteLock::new(self, name)?))
        }
        fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
            Ok(Box::new(PgSemaphore::new(self, name, max_leases)?))
        }
        fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
            Ok(Box::new(PgLeaderLatch::start(self, name)?))
        }
        fn state(&self) -> ConnectionState {
            PgClient::state(self)
        }
        fn close(&self) {
            PgClient::close(self)
        }
    }

    #[cfg(feature = "postgres")]
    adapters!(PgReadWriteLock, PgSemaphore, PgLease, PgLeaderLatch);
}

mod mysql {
    use super::*;

    #[cfg(not(feature = "mysql"))]
    pub(super) fn connect(_: &AnyClientBuilder, _: Duration) -> Result<Arc<dyn Backend>> {
        Err(not_built("mysql"))
    }

    #[cfg(feature = "mysql")]
    pub(super) fn connect(b: &AnyClientBuilder, op: Duration) -> Result<Arc<dyn Backend>> {
        let client = MySqlClient::builder(&b.url)
            .session_timeout(b.session_timeout)
            .connect_timeout(b.connect_timeout)
            .operation_timeout(op)
            .connect()?;
        Ok(Arc::new(client))
    }

    #[cfg(feature = "mysql")]
    use crate::mysql::{
        MySqlClient, MySqlLeaderLatch, MySqlLease, MySqlMutex, MySqlReadWriteLock, MySqlSemaphore,
    };

    #[cfg(feature = "mysql")]
    from_client!(MySqlClient);

    #[cfg(feature = "mysql")]
    impl Backend for MySqlClient {
        fn name(&self) -> &'static str {
            "mysql"
        }
        fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>> {
            Ok(Arc::new(MySqlMutex::new(self, name)?))
        }
        fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>> {
            Ok(Box::new(MySqlReadWriteLock::new(self, name)?))
        }
        fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>> {
            Ok(Box::new(MySqlSemaphore::new(self, name, max_leases)?))
        }
        fn latch(&self, name: &str) -> Result<Box<dyn Latch>> {
            Ok(Box::new(MySqlLeaderLatch::start(self, name)?))
        }
        fn state(&self) -> ConnectionState {
            MySqlClient::state(self)
        }
        fn close(&self) {
            MySqlClient::close(self)
        }
    }

    #[cfg(feature = "mysql")]
    adapters!(
        MySqlReadWriteLock,
        MySqlSemaphore,
        MySqlLease,
        MySqlLeaderLatch
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        match connect(url) {
            Err(Error::InvalidArgument(why)) => why,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn bad_urls_are_refused_before_any_io() {
        assert!(refused("127.0.0.1:2181").contains("not a lock URL"));
        assert!(refused("redis:/host").contains("not a lock URL"));
        let why = refused("etcd://127.0.0.1:2379");
        assert!(why.contains("unknown lock URL scheme etcd://"), "{why}");
        assert!(why.contains("redis://"), "{why}");
        #[cfg(feature = "zookeeper")]
        assert!(refused("zk:///chroot").contains("names no host"));
    }
}
