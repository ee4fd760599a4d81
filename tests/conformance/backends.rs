//! The backends the scenarios run on: how to start a throwaway server of each and the URL
//! that reaches it. Clients are the library's own [`AnyClient`], made from that URL with one
//! set of options, so a new backend is one implementation here and one line in `main.rs`.
//!
//! The scenarios that neither pause nor restart the server share one per backend
//! ([`Backend::shared`]), each on lock names no other scenario uses; the others start their own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use zklock::AnyClient;

/// The options every scenario's Client takes; they mean the same on every backend.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// The server-side silence limit.
    pub session: Duration,
    /// The bound of one round trip (and of a connect).
    pub op: Duration,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            session: zklock::DEFAULT_SESSION_TIMEOUT,
            op: Duration::from_secs(5),
        }
    }
}

/// One kind of server.
pub trait Backend: Sync {
    /// The module the scenarios run in for this backend (a worker process finds itself by it).
    fn name(&self) -> &'static str;
    /// What [`AnyClient::backend`] says for it (the module's name unless told).
    fn client_backend(&self) -> &'static str {
        self.name()
    }
    /// Starts a throwaway server on a free loopback port.
    fn start(&self) -> Box<dyn Server>;
    /// Whether starting a server costs enough to share one between scenarios (not for a
    /// `mem://` store or a `file://` directory).
    fn worth_sharing(&self) -> bool {
        true
    }
    /// The server the scenarios of this backend share: started by the first that asks, stopped
    /// once every test of the backend's module has ended ([`Ended`]). Where the run leaves some
    /// of the module's tests out (a name filter that not all of them match, `--skip`,
    /// `--exact`), the module's tests could never all end, so each scenario starts its own.
    fn shared(&self) -> Arc<dyn Server> {
        if !self.worth_sharing() || !runs_whole_module(self.name()) {
            return Arc::from(self.start());
        }
        let mut servers = shared_servers()
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = servers.entry(self.name()).or_default();
        if let Some(server) = &entry.server {
            return server.clone();
        }
        let server: Arc<dyn Server> = Arc::from(self.start());
        entry.server = Some(server.clone());
        server
    }
    /// Starts a server that keeps its locks on disk across a restart, as the backend's docs ask
    /// of a setup that must exclude across one (the throwaway server where it always does).
    fn start_durable(&self) -> Box<dyn Server> {
        self.start()
    }
    /// Whether waiters are granted in arrival order.
    fn fifo(&self) -> bool;
    /// Whether the backend has a read-write lock (its scenarios are skipped, and say so, if
    /// not).
    fn has_read_write(&self) -> bool {
        true
    }
    /// Whether the backend has a semaphore.
    fn has_semaphore(&self) -> bool {
        true
    }
    /// Whether the backend has a leader latch.
    fn has_latch(&self) -> bool {
        true
    }
    /// Whether its locks are shared within this process only (`mem://`): the scenarios whose
    /// holder is another process are skipped, and say so.
    fn in_process(&self) -> bool {
        false
    }
    /// Why the backend has no server to freeze or restart, if it has none (its scenarios are
    /// then skipped, saying so).
    fn no_server(&self) -> Option<&'static str> {
        None
    }
    /// Whether a frozen (SIGSTOP) holder keeps the lock until it wakes, as promised where no
    /// server-side timer frees it.
    fn frozen_holder_keeps_the_lock(&self) -> bool {
        false
    }
    /// Why a proxy cannot be put between a Client and the server, if it cannot (the scenarios
    /// that slow the way to the server are then skipped, saying so); otherwise the server's
    /// [`Server::port`] is where a proxy forwards to.
    fn no_proxy(&self) -> Option<&'static str> {
        self.no_server()
    }

    /// A Client of the server at `url`.
    fn connect(&self, url: &str, opts: Opts) -> AnyClient {
        let client = AnyClient::builder(url)
            .session_timeout(opts.session)
            .connect_timeout(opts.op)
            .operation_timeout(opts.op)
            .connect()
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        assert_eq!(client.backend(), self.client_backend());
        client
    }
}

/// One backend's shared server, and how far its module's tests have got.
#[derive(Default)]
struct SharedServer {
    server: Option<Arc<dyn Server>>,
    /// How many of the backend's tests have ended.
    ended: usize,
}

/// The shared servers, by backend name.
fn shared_servers() -> &'static Mutex<HashMap<&'static str, SharedServer>> {
    static SERVERS: OnceLock<Mutex<HashMap<&'static str, SharedServer>>> = OnceLock::new();
    SERVERS.get_or_init(Default::default)
}

/// Whether this run of the test binary runs every test of `module` (whose tests are named
/// `module::...`): no `--skip` nor `--exact`, and no name filter or one that every name in the
/// module contains.
fn runs_whole_module(module: &str) -> bool {
    let prefix = format!("{module}::");
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--exact" => return false,
            _ if arg.starts_with("--skip") => return false,
            // The options that take a value as the next argument.
            "--test-threads" | "--color" | "--format" | "--logfile" | "--shuffle-seed" | "-Z" => {
                args.next();
            }
            _ if arg.starts_with('-') => {}
            _ => filters.push(arg),
        }
    }
    filters.is_empty() || filters.iter().any(|f| prefix.contains(f.as_str()))
}

/// Counts a test of a backend's module as ended when dropped; the last of the module's
/// `tests` to end stops the server they shared.
pub struct Ended {
    backend: &'static str,
    tests: usize,
}

impl Ended {
    /// For a test of `b`'s module, which has `tests` tests.
    pub fn on_drop(b: &dyn Backend, tests: usize) -> Ended {
        Ended {
            backend: b.name(),
            tests,
        }
    }
}

impl Drop for Ended {
    fn drop(&mut self) {
        let stopped = {
            let mut servers = shared_servers()
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let entry = servers.entry(self.backend).or_default();
            entry.ended += 1;
            if entry.ended == self.tests {
                entry.server.take()
            } else {
                None
            }
        };
        // Stopped outside the lock: the other backends' tests go on meanwhile.
        drop(stopped);
    }
}

/// A running server.
pub trait Server: Send + Sync {
    /// The URL [`zklock::connect`] takes.
    fn url(&self) -> String;
    /// SIGSTOP: the server keeps its sockets open and answers nothing.
    fn pause(&self);
    /// SIGCONT.
    fn resume(&self);
    /// Stops the server (SIGTERM, as an operator's restart) and starts it again on the same
    /// port with what it keeps on disk (ZooKeeper, PostgreSQL and MariaDB their data; the
    /// throwaway Redis nothing).
    fn restart(&mut self);
    /// The loopback port its URL names as `127.0.0.1:PORT`, for a proxy in front of it.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn port(&self) -> Option<u16> {
        None
    }
}

/// The [`Server`] of one `zklock::testing` type; with a port, that of a server a proxy can
/// stand in front of.
macro_rules! server {
    ($ty:ty, |$s:ident| $url:expr $(, port $port:ident)?) => {
        impl Server for $ty {
            fn url(&self) -> String {
                let $s = self;
                $url
            }
            $(
                fn port(&self) -> Option<u16> {
                    Some(<$ty>::$port(self))
                }
            )?
            fn pause(&self) {
                <$ty>::pause(self).unwrap()
            }
            fn resume(&self) {
                <$ty>::resume(self).unwrap()
            }
            fn restart(&mut self) {
                <$ty>::restart(self).unwrap()
            }
        }
    };
}

/// The in-process store (`mem://`), a store of its own per test. Its "server" is the store:
/// pausing it freezes every Client of it (calls wait for the thaw up to their bound, as against
/// a frozen server), a restart loses every hold in it (a server that kept no session). Clients
/// of other processes never share it.
pub struct Mem;

impl Backend for Mem {
    fn name(&self) -> &'static str {
        "mem"
    }
    fn start(&self) -> Box<dyn Server> {
        Box::new(MemStore(zklock::mem::MemClient::isolated()))
    }
    fn worth_sharing(&self) -> bool {
        false
    }
    fn fifo(&self) -> bool {
        true
    }
    fn in_process(&self) -> bool {
        true
    }
    fn no_proxy(&self) -> Option<&'static str> {
        Some("mem:// has no connection to a server to slow down")
    }
}

/// A `mem://` store, reached through a Client of its own.
struct MemStore(zklock::mem::MemClient);

impl Server for MemStore {
    fn url(&self) -> String {
        format!("mem://{}", self.0.store_name())
    }
    fn pause(&self) {
        self.0.freeze_store()
    }
    fn resume(&self) {
        self.0.unfreeze_store()
    }
    fn restart(&mut self) {
        self.0.restart_store();
    }
}

pub struct ZooKeeper;

impl Backend for ZooKeeper {
    fn name(&self) -> &'static str {
        "zookeeper"
    }
    fn start(&self) -> Box<dyn Server> {
        Box::new(zklock::testing::TestingServer::start().expect("start ZooKeeper"))
    }
    fn fifo(&self) -> bool {
        true
    }
}

// Under a chroot, as a service would use it.
server!(zklock::testing::TestingServer, |s| format!(
    "zk://{}/conformance",
    s.connect_string()
), port port);

#[cfg(feature = "redis")]
pub struct Redis;

#[cfg(feature = "redis")]
impl Backend for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }
    fn start(&self) -> Box<dyn Server> {
        Box::new(zklock::testing::TestingRedis::start().expect("start Redis"))
    }
    /// `appendonly yes` with `appendfsync always`: without it a restart forgets every hold and
    /// grants again while the old holder reads `Held` until its next renewal (`docs/redis.md`,
    /// "What it cannot promise").
    fn start_durable(&self) -> Box<dyn Server> {
        Box::new(zklock::testing::TestingRedis::start_persistent().expect("start Redis"))
    }
    fn fifo(&self) -> bool {
        true
    }
}

#[cfg(feature = "redis")]
server!(zklock::testing::TestingRedis, |s| s.url(), port port);

/// A Redis Cluster of three primaries and three replicas (`redis+cluster://`): every script of
/// a lock goes to the primary of its slot, wake-ups cross the cluster. Pause, resume and
/// restart act on all six nodes at once.
#[cfg(feature = "redis")]
pub struct RedisCluster;

#[cfg(feature = "redis")]
impl Backend for RedisCluster {
    fn name(&self) -> &'static str {
        "redis_cluster"
    }
    fn client_backend(&self) -> &'static str {
        "redis"
    }
    fn start(&self) -> Box<dyn Server> {
        Box::new(zklock::testing::TestingRedisCluster::start().expect("start a Redis Cluster"))
    }
    /// As the single server's: every node with `appendonly yes`, `appendfsync always`.
    fn start_durable(&self) -> Box<dyn Server> {
        Box::new(
            zklock::testing::TestingRedisCluster::start_persistent()
                .expect("start a Redis Cluster"),
        )
    }
    fn fifo(&self) -> bool {
        true
    }
    fn no_proxy(&self) -> Option<&'static str> {
        Some(
            "a cluster's slot map names its nodes' own addresses: a proxy in front of the seeds \
             would carry the first connection only",
        )
    }
}

#[cfg(feature = "redis")]
server!(zklock::testing::TestingRedisCluster, |s| s.url());

#[cfg(feature = "postgres")]
pub struct Postgres;

#[cfg(feature = "postgres")]
impl Backend for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }
    fn start(&self) -> Box<dyn Server> {
        Box::new(zklock::testing::TestingPostgres::start().expect("start PostgreSQL"))
    }
    fn fifo(&self) -> bool {
        true
    }
}

#[cfg(feature = "postgres")]
server!(zklock::testing::TestingPostgres, |s| s.url(), port port);

#[cfg(feature = "mysql")]
pub struct Mariadb;

#[cfg(feature = "mysql")]
impl Backend for Mariadb {
    fn name(&self) -> &'static str {
        "mariadb"
    }
    fn client_backend(&self) -> &'static str {
        "mysql"
    }
    fn start(&self) -> Box<dyn Server> {
        Box::new(zklock::testing::TestingMariaDb::start().expect("start MariaDB"))
    }
    /// Measured on MariaDB 10.11: `GET_LOCK` waiters are granted in the order they asked.
    fn fifo(&self) -> bool {
        true
    }
}

#[cfg(feature = "mysql")]
server!(zklock::testing::TestingMariaDb, |s| s.url(), port port);

/// The MySQL backend's table mode (`lock_mode=table`) on MariaDB: leases as rows, waiters that
/// poll. It has mutexes and leader latches only, and its waiters are not served in arrival order
/// (each polls on its own), so the FIFO, semaphore and read-write scenarios are skipped
/// (docs/mysql.md).
#[cfg(feature = "mysql")]
pub struct MariadbTable;

#[cfg(feature = "mysql")]
impl Backend for MariadbTable {
    fn name(&self) -> &'static str {
        "mariadb_table"
    }
    fn client_backend(&self) -> &'static str {
        "mysql"
    }
    fn start(&self) -> Box<dyn Server> {
        Box::new(TableMode(
            zklock::testing::TestingMariaDb::start().expect("start MariaDB"),
        ))
    }
    /// Waiters poll: whoever looks first after a release takes the lock.
    fn fifo(&self) -> bool {
        false
    }
    fn has_read_write(&self) -> bool {
        false
    }
    fn has_semaphore(&self) -> bool {
        false
    }
}

/// A MariaDB server reached in the table mode.
#[cfg(feature = "mysql")]
struct TableMode(zklock::testing::TestingMariaDb);

#[cfg(feature = "mysql")]
impl Server for TableMode {
    fn url(&self) -> String {
        format!("{}?lock_mode=table", self.0.url())
    }
    fn pause(&self) {
        self.0.pause().unwrap()
    }
    fn resume(&self) {
        self.0.resume().unwrap()
    }
    fn restart(&mut self) {
        self.0.restart().unwrap()
    }
    fn port(&self) -> Option<u16> {
        Some(self.0.port())
    }
}

/// The file backend: a fresh temporary directory plays the server.
pub struct File;

impl Backend for File {
    fn name(&self) -> &'static str {
        "file"
    }
    fn start(&self) -> Box<dyn Server> {
        Box::new(TempDir(tempfile::tempdir().expect("a temporary directory")))
    }
    fn worth_sharing(&self) -> bool {
        false
    }
    fn fifo(&self) -> bool {
        true
    }
    fn no_server(&self) -> Option<&'static str> {
        Some(
            "file:// has no server: its locks are the kernel's, freed when a process dies; a \
             frozen process that holds a lock is `holder_frozen_is_replaced_and_reads_lost`",
        )
    }
    fn frozen_holder_keeps_the_lock(&self) -> bool {
        true
    }
}

/// A directory of locks, removed at the end of the test.
struct TempDir(tempfile::TempDir);

impl Server for TempDir {
    fn url(&self) -> String {
        format!("file://{}", self.0.path().display())
    }
    fn pause(&self) {
        unreachable!("file:// has no server to pause")
    }
    fn resume(&self) {
        unreachable!("file:// has no server to resume")
    }
    fn restart(&mut self) {
        unreachable!("file:// has no server to restart")
    }
}
