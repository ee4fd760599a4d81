//! [`connect`]: one URL picks the backend at run time, and the locks are made by name.
//!
//! A service whose operators choose the backend writes its locking once, on [`AnyClient`]:
//! `mem://` (in this process only: unit tests), `file:///dir` (the processes of one host, no
//! server), `zk://`, `redis://`, `rediss://`, `redis+sentinel://`, `redis+cluster://` (and their TLS
//! forms `rediss+sentinel://`, `rediss+cluster://`), `postgres://`, `postgresql://`,
//! `mysql://` and `mariadb://` URLs give the same recipes with the same options and defaults
//! (sqlx's `AnyPool` is the model). This file holds the neutral types and the dispatch by
//! scheme; each backend's adapter is in its own folder (`redis/any.rs`), and the crate root
//! lists every backend's schemes (`DRIVERS`).

use std::sync::Arc;
use std::time::Duration;

use crate::core::connection::ConnectionState;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::lock::Lock;
use crate::core::options::Options;

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
    pub(crate) inner: Arc<dyn Backend>,
    /// The cap set on every mutex, read-write lock and semaphore it makes.
    pub(crate) max_hold: Option<Duration>,
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
    pub(crate) url: String,
    pub(crate) options: Options,
    /// `None`: not set (the URL's `max_hold`, if any, applies).
    max_hold: Option<MaxHold>,
}

/// A `max_hold` as the builder was given it, checked at `connect`.
#[derive(Debug, Clone, Copy)]
enum MaxHold {
    Cap(Duration),
    None,
}

impl AnyClient {
    /// A builder for `url`, with the default options (the crate docs' "Connection options").
    pub fn builder(url: &str) -> AnyClientBuilder {
        AnyClientBuilder {
            url: url.to_owned(),
            options: Options::default(),
            max_hold: None,
        }
    }

    /// Every URL scheme [`connect`] takes, each with the backend it opens (as
    /// [`backend`](Self::backend) names it), whether or not this build has that backend.
    ///
    /// # Example
    /// ```
    /// let redis: Vec<&str> = zklock::AnyClient::schemes()
    ///     .filter(|(_, backend)| *backend == "redis")
    ///     .map(|(scheme, _)| scheme)
    ///     .collect();
    /// assert!(redis.contains(&"redis+sentinel"));
    /// ```
    pub fn schemes() -> impl Iterator<Item = (&'static str, &'static str)> {
        (crate::DRIVERS.iter()).flat_map(|d| d.schemes.iter().map(move |s| (*s, d.backend)))
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
        let mutex = self.inner.mutex(name)?;
        mutex.set_max_hold(self.max_hold)?;
        Ok(mutex)
    }

    /// A read-write lock named `name`, both halves capped at the Client's `max_hold`.
    ///
    /// # Errors
    /// As [`mutex`](Self::mutex).
    pub fn read_write_lock(&self, name: &str) -> Result<AnyReadWriteLock> {
        let inner = self.inner.read_write(name)?;
        inner.read().set_max_hold(self.max_hold)?;
        inner.write().set_max_hold(self.max_hold)?;
        Ok(AnyReadWriteLock { inner })
    }

    /// The cap this Client sets on every mutex, read-write lock and semaphore it makes (see
    /// [`AnyClientBuilder::max_hold`]); `None`: none.
    pub fn max_hold(&self) -> Option<Duration> {
        self.max_hold
    }

    /// A counting semaphore of `max_leases` leases named `name`.
    ///
    /// # Errors
    /// As [`mutex`](Self::mutex); [`Error::InvalidArgument`] for no lease. Its leases are
    /// capped at the Client's `max_hold`.
    pub fn semaphore(&self, name: &str, max_leases: u32) -> Result<AnySemaphore> {
        if max_leases == 0 {
            return Err(Error::invalid("a semaphore needs at least one lease"));
        }
        let inner = self.inner.semaphore(name, max_leases)?;
        inner.set_max_hold(self.max_hold)?;
        Ok(AnySemaphore { inner })
    }

    /// A leader latch on the election `name`, taking part at once. A leadership term is not
    /// capped by the Client's `max_hold`: a leader gives up its term by closing the latch.
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

crate::core::options::connection_options!(AnyClientBuilder);

impl AnyClientBuilder {
    /// Caps every hold of the mutexes, read-write locks and semaphores the Client makes at
    /// `max_hold` after its grant, even while its renewals succeed (see
    /// [`Lock::set_max_hold`](crate::Lock::set_max_hold)); `None`: no cap. The URL can say it
    /// too, `?max_hold=2s` (`500ms`, `2s`, `1.5s`, `2m`, `1h`, a bare number of seconds, or
    /// `none`); this setting wins over the URL's. Default: no cap. `connect` refuses zero
    /// before any I/O; a length past what the clock can count is no cap. Leader latch terms are
    /// not capped.
    ///
    /// # Example
    /// ```
    /// # fn main() -> zklock::Result<()> {
    /// let dir = std::env::temp_dir().join("zklock-max-hold-doc");
    /// let url = format!("file://{}?max_hold=10m", dir.display());
    /// let locks = zklock::connect(&url)?;
    /// assert_eq!(locks.max_hold(), Some(std::time::Duration::from_secs(600)));
    /// let locks = zklock::AnyClient::builder(&url).max_hold(None).connect()?;
    /// assert_eq!(locks.max_hold(), None);
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Option<Duration>) -> Self {
        self.max_hold = Some(max_hold.map_or(MaxHold::None, MaxHold::Cap));
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
                "{:?} is not a lock URL: it must start with one of {}",
                self.url,
                schemes()
            )));
        };
        let Some(driver) = crate::DRIVERS.iter().find(|d| d.schemes.contains(&scheme)) else {
            return Err(Error::invalid(format!(
                "unknown lock URL scheme {scheme}://: use one of {}",
                schemes()
            )));
        };
        let connect = driver.connect.ok_or_else(|| not_built(driver.backend))?;
        let (url, in_url) = take_max_hold(&self.url)?;
        let max_hold = match self.max_hold {
            Some(MaxHold::Cap(cap)) => crate::core::max_hold::check(Some(cap))?,
            Some(MaxHold::None) => None,
            None => in_url,
        };
        let op = self.options.operation_timeout();
        let builder = AnyClientBuilder { url, ..self };
        Ok(AnyClient {
            inner: connect(&builder, op)?,
            max_hold,
        })
    }
}

/// `url` without its `max_hold` query parameter, and that parameter's cap (`None`: none).
fn take_max_hold(url: &str) -> Result<(String, Option<Duration>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let (mut rest, mut cap) = (Vec::new(), None);
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("max_hold", value)) => cap = crate::core::max_hold::parse(value)?,
            _ if pair == "max_hold" => {
                return Err(Error::invalid("max_hold needs a value: ?max_hold=2s"))
            }
            _ => rest.push(pair),
        }
    }
    let url = match rest.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", rest.join("&")),
    };
    Ok((url, cap))
}

/// The refusal of a URL whose backend this build left out.
fn not_built(backend: &str) -> Error {
    Error::invalid(format!(
        "this build of zklock has no {backend} backend: enable its cargo feature `{backend}`"
    ))
}

/// A read-write lock of any backend: its halves are [`Lock`]s, `&dyn Lock`, whose guards
/// [`LockGuard::acquire`](crate::LockGuard::acquire) and its siblings give. Writers are
/// preferred: a waiting writer goes before readers that came after it.
///
/// # Example
/// ```no_run
/// use zklock::{Lock, LockGuard};
///
/// # fn main() -> zklock::Result<()> {
/// let rw = zklock::connect("postgres://app@127.0.0.1/app")?.read_write_lock("catalog")?;
/// rw.read_lock().acquire()?; // shared with other readers
/// rw.read_lock().release()?;
/// let writing = LockGuard::acquire(rw.write_lock())?; // released when dropped
/// # drop(writing);
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

    /// Caps every lease granted from now on at `max_hold` after its grant (see
    /// [`Lock::set_max_hold`]); `None` removes the cap.
    ///
    /// # Errors
    /// As [`Lock::set_max_hold`].
    pub fn set_max_hold(&self, max_hold: Option<Duration>) -> Result<()> {
        self.inner.set_max_hold(max_hold)
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
    pub(crate) inner: Box<dyn Lease>,
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
pub(crate) trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>>;
    fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>>;
    fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>>;
    fn latch(&self, name: &str) -> Result<Box<dyn Latch>>;
    fn state(&self) -> ConnectionState;
    fn close(&self);
}

pub(crate) trait ReadWrite: Send + Sync {
    fn read(&self) -> &dyn Lock;
    fn write(&self) -> &dyn Lock;
}

pub(crate) trait Semaphore: Send + Sync {
    /// `None`: without limit.
    fn acquire(&self, timeout: Option<Duration>) -> Result<Option<AnyLease>>;
    fn cancel_waiters(&self);
    fn set_max_hold(&self, max_hold: Option<Duration>) -> Result<()>;
}

pub(crate) trait Lease: Send + Sync {
    fn id(&self) -> &str;
    fn fencing_token(&self) -> u64;
    fn health(&self) -> LockHealth;
    fn release(self: Box<Self>) -> Result<()>;
}

pub(crate) trait Latch: Send + Sync {
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
        impl From<$client> for $crate::AnyClient {
            fn from(client: $client) -> $crate::AnyClient {
                $crate::AnyClient {
                    inner: std::sync::Arc::new(client),
                    max_hold: None,
                }
            }
        }
    };
}

/// The read-write, semaphore, lease and latch adapters of one backend's types.
#[allow(unused_macros)] // unused in a build without backends
macro_rules! adapters {
    ($rw:ty, $sem:ty, $lease:ty, $latch:ty) => {
        impl $crate::any::ReadWrite for $rw {
            fn read(&self) -> &dyn $crate::Lock {
                self.read_lock()
            }
            fn write(&self) -> &dyn $crate::Lock {
                self.write_lock()
            }
        }
        impl $crate::any::Semaphore for $sem {
            fn acquire(
                &self,
                timeout: Option<std::time::Duration>,
            ) -> $crate::Result<Option<$crate::AnyLease>> {
                let lease = match timeout {
                    None => Some(<$sem>::acquire(self)?),
                    Some(t) => <$sem>::acquire_timeout(self, t)?,
                };
                Ok(lease.map(|l| $crate::AnyLease { inner: Box::new(l) }))
            }
            fn cancel_waiters(&self) {
                <$sem>::cancel_waiters(self)
            }
            fn set_max_hold(&self, max_hold: Option<std::time::Duration>) -> $crate::Result<()> {
                <$sem>::set_max_hold(self, max_hold)
            }
        }
        impl $crate::any::Lease for $lease {
            fn id(&self) -> &str {
                <$lease>::id(self)
            }
            fn fencing_token(&self) -> u64 {
                <$lease>::fencing_token(self)
            }
            fn health(&self) -> $crate::LockHealth {
                <$lease>::health(self)
            }
            fn release(self: Box<Self>) -> $crate::Result<()> {
                (*self).release()
            }
        }
        impl $crate::any::Latch for $latch {
            fn has_leadership(&self) -> bool {
                <$latch>::has_leadership(self)
            }
            fn epoch(&self) -> Option<u64> {
                <$latch>::epoch(self)
            }
            fn health(&self) -> Option<$crate::LockHealth> {
                <$latch>::health(self)
            }
            fn await_leadership(
                &self,
                timeout: Option<std::time::Duration>,
            ) -> $crate::Result<bool> {
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
/// What an [`AnyClient`] needs of a backend whose recipes take a name as it is: its
/// [`Connect`] (its Client's builder given the shared options), `From` its Client, [`Backend`]
/// for the Client, and the adapters of its types (`$name` as [`AnyClient::backend`] says it).
#[allow(unused_macros)] // unused in a build without backends
macro_rules! named_backend {
    ($name:literal, $client:ty, $mutex:ty, $rw:ty, $sem:ty, $lease:ty, $latch:ty) => {
        pub(crate) fn connect(
            b: &$crate::any::AnyClientBuilder,
            op: std::time::Duration,
        ) -> $crate::Result<std::sync::Arc<dyn $crate::any::Backend>> {
            let client = <$client>::builder(&b.url)
                .with_options(&b.options.resolved(op))
                .connect()?;
            Ok(std::sync::Arc::new(client))
        }

        $crate::any::from_client!($client);

        impl $crate::any::Backend for $client {
            fn name(&self) -> &'static str {
                $name
            }
            fn mutex(&self, name: &str) -> $crate::Result<std::sync::Arc<dyn $crate::Lock>> {
                Ok(std::sync::Arc::new(<$mutex>::new(self, name)?))
            }
            fn read_write(&self, name: &str) -> $crate::Result<Box<dyn $crate::any::ReadWrite>> {
                Ok(Box::new(<$rw>::new(self, name)?))
            }
            fn semaphore(
                &self,
                name: &str,
                max_leases: u32,
            ) -> $crate::Result<Box<dyn $crate::any::Semaphore>> {
                Ok(Box::new(<$sem>::new(self, name, max_leases)?))
            }
            fn latch(&self, name: &str) -> $crate::Result<Box<dyn $crate::any::Latch>> {
                Ok(Box::new(<$latch>::start(self, name)?))
            }
            fn state(&self) -> $crate::ConnectionState {
                <$client>::state(self)
            }
            fn close(&self) {
                <$client>::close(self)
            }
        }

        $crate::any::adapters!($rw, $sem, $lease, $latch);
    };
}

#[allow(unused_imports)] // unused in a build without backends
pub(crate) use {adapters, from_client, named_backend};

/// How a backend's adapter (its `any.rs`) opens its Client for an [`AnyClientBuilder`], given
/// the operation timeout.
pub(crate) type Connect = fn(&AnyClientBuilder, Duration) -> Result<Arc<dyn Backend>>;

/// A backend as [`connect`] knows it: its cargo feature, its URL schemes, and its adapter's
/// [`Connect`] when the feature is built. The crate root lists every backend's (`DRIVERS`).
pub(crate) struct Driver {
    pub(crate) backend: &'static str,
    pub(crate) schemes: &'static [&'static str],
    pub(crate) connect: Option<Connect>,
}

/// The [`Driver`] of the backend of feature `$feature`: `$connect` is left out of a build
/// without it. An `always` backend is built in every build.
macro_rules! driver {
    (always $backend:literal, [$($scheme:literal),+ $(,)?], $connect:path) => {
        $crate::any::Driver {
            backend: $backend,
            schemes: &[$($scheme),+],
            connect: Some($connect),
        }
    };
    ($feature:literal, [$($scheme:literal),+ $(,)?], $connect:path) => {{
        #[cfg(feature = $feature)]
        const CONNECT: Option<$crate::any::Connect> = Some($connect);
        #[cfg(not(feature = $feature))]
        const CONNECT: Option<$crate::any::Connect> = None;
        $crate::any::Driver {
            backend: $feature,
            schemes: &[$($scheme),+],
            connect: CONNECT,
        }
    }};
}
pub(crate) use driver;

/// The URL schemes [`connect`] takes: every backend's, built or not.
fn schemes() -> String {
    let all: Vec<String> = AnyClient::schemes()
        .map(|(s, _)| format!("{s}://"))
        .collect();
    all.join(", ")
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

    #[test]
    fn max_hold_is_taken_out_of_the_url() {
        let two = Some(Duration::from_secs(2));
        let took = |url| take_max_hold(url).unwrap();
        assert_eq!(took("redis://h:1"), ("redis://h:1".into(), None));
        assert_eq!(took("redis://h:1?max_hold=2s"), ("redis://h:1".into(), two));
        let url = "postgres://h/db?sslmode=disable&max_hold=2&application_name=x";
        let want = "postgres://h/db?sslmode=disable&application_name=x";
        assert_eq!(took(url), (want.into(), two));
        assert_eq!(took("mem://a?max_hold=none").1, None);
        for bad in ["0", "0ms", "-2s", "2 parsecs", "", "1e999"] {
            let why = refused(&format!("mem://max-hold?max_hold={bad}"));
            assert!(why.contains("max_hold"), "{bad}: {why}");
        }
        assert!(refused("mem://max-hold?max_hold").contains("max_hold needs a value"));
        let zero = AnyClient::builder("mem://max-hold").max_hold(Some(Duration::ZERO));
        assert!(matches!(zero.connect(), Err(Error::InvalidArgument(_))));
        let forever =
            AnyClient::builder("mem://max-hold?max_hold=1h").max_hold(Some(Duration::MAX));
        assert_eq!(forever.connect().unwrap().max_hold(), None);
    }
}
