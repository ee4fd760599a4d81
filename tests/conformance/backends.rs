//! The backends the scenarios run on, each behind the same few traits: a throwaway server, a
//! Client made with one set of options, and the recipes by name. A new backend is one more
//! implementation here and one more line in `main.rs`.

use std::sync::Arc;
use std::time::Duration;

use zklock::{Lock, LockHealth, Result};

/// The options every scenario's Client takes; they mean the same on every backend.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// The server-side silence limit: ZooKeeper's session timeout, Redis's TTL, PostgreSQL's
    /// session timeout.
    pub session: Duration,
    /// The bound of one round trip (and of a connect).
    pub op: Duration,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            session: Duration::from_secs(30),
            op: Duration::from_secs(5),
        }
    }
}

/// One kind of server.
pub trait Backend: Sync {
    /// Starts a throwaway server on a free loopback port.
    fn start(&self) -> Box<dyn Server>;
    /// Whether waiters are granted in arrival order.
    fn fifo(&self) -> bool;
    /// The environment variable under which a worker process finds the server's address.
    fn name(&self) -> &'static str;
    /// A Client of the server at `address` (what [`Server::address`] gave).
    fn connect(&self, address: &str, opts: Opts) -> Box<dyn Conn>;
}

/// A running server.
pub trait Server: Send + Sync {
    /// What [`Backend::connect`] takes.
    fn address(&self) -> String;
    /// SIGSTOP: the server keeps its sockets open and answers nothing.
    fn pause(&self);
    /// SIGCONT.
    fn resume(&self);
}

/// A Client.
pub trait Conn: Send + Sync {
    fn mutex(&self, name: &str) -> Result<Arc<dyn Lock>>;
    fn read_write(&self, name: &str) -> Result<Box<dyn ReadWrite>>;
    fn semaphore(&self, name: &str, max_leases: u32) -> Result<Box<dyn Semaphore>>;
    fn latch(&self, name: &str) -> Result<Box<dyn Latch>>;
    fn close(&self);
}

pub trait ReadWrite: Send + Sync {
    fn read(&self) -> &dyn Lock;
    fn write(&self) -> &dyn Lock;
}

pub trait Semaphore: Send + Sync {
    fn acquire_timeout(&self, timeout: Duration) -> Result<Option<Box<dyn Lease>>>;
}

pub trait Lease: Send {
    fn health(&self) -> LockHealth;
    fn release(self: Box<Self>) -> Result<()>;
}

pub trait Latch: Send + Sync {
    fn has_leadership(&self) -> bool;
    fn epoch(&self) -> Option<u64>;
    fn await_leadership_timeout(&self, timeout: Duration) -> Result<bool>;
    fn close(&self);
}

/// The lease, read-write and latch adapters of one backend's types.
macro_rules! adapters {
    ($rw:ty, $sem:ty, $lease:ty, $release:ident, $latch:ty) => {
        impl ReadWrite for $rw {
            fn read(&self) -> &dyn Lock {
                self.read_lock()
            }
            fn write(&self) -> &dyn Lock {
                self.write_lock()
            }
        }
        impl Semaphore for $sem {
            fn acquire_timeout(&self, timeout: Duration) -> Result<Option<Box<dyn Lease>>> {
                Ok(<$sem>::acquire_timeout(self, timeout)?.map(|l| Box::new(l) as Box<dyn Lease>))
            }
        }
        impl Lease for $lease {
            fn health(&self) -> LockHealth {
                <$lease>::health(self)
            }
            fn release(self: Box<Self>) -> Result<()> {
                (*self).$release()
            }
        }
        impl Latch for $latch {
            fn has_leadership(&self) -> bool {
                <$latch>::has_leadership(self)
            }
            fn epoch(&self) -> Option<u64> {
                <$latch>::epoch(self)
            }
            fn await_leadership_timeout(&self, timeout: Duration) -> Result<bool> {
                <$latch>::await_leadership_timeout(self, timeout)
            }
            fn close(&self) {
                let _ = <$latch>::close(self);
            }
        }
    };
}

pub mod zookeeper {
    use super::*;
    use zklock::testing::TestingServer;
    use zklock::{
        Client, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2, LeaderLatch,
    };

    pub struct ZooKeeper;

    /// Every name lives under one parent, in Curator's layout.
    fn path(name: &str) -> String {
        format!("/conformance/{name}")
    }

    impl Backend for ZooKeeper {
        fn start(&self) -> Box<dyn Server> {
            Box::new(TestingServer::start().expect("start ZooKeeper"))
        }
        fn fifo(&self) -> bool {
            true
        }
        fn name(&self) -> &'static str {
            "zookeeper"
        }
        fn connect(&self, address: &str, opts: Opts) -> Box<dyn Conn> {
            let client = Client::builder(address)
                .session_timeout(opts.session)
                .connection_timeout(opts.op)
                .operation_timeout(opts.op)
                .connect()
                .expect("connect to ZooKeeper");
            Box::new(client)
        }
    }

    impl Server for TestingServer {
        fn address(&self) -> String {
            self.connect_string()
        }
        fn pause(&self) {
            TestingServer::pause(self).unwrap()
        }
        fn resume(&self) {
            TestingServer::resume(self).unwrap()
        }
    }

    impl Conn for Client {
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
            let latch = LeaderLatch::builder(self, &path(name)).build()?;
            latch.start()?;
            Ok(Box::new(latch))
        }
        fn close(&self) {
            Client::close(self)
        }
    }

    adapters!(
        InterProcessReadWriteLock,
        InterProcessSemaphoreV2,
        zklock::Lease,
        return_lease,
        LeaderLatch
    );
}

#[cfg(feature = "redis")]
pub mod redis {
    use super::*;
    use zklock::testing::TestingRedis;
    use zklock::{
        RedisClient, RedisLeaderLatch, RedisLease, RedisMutex, RedisReadWriteLock, RedisSemaphore,
    };

    pub struct Redis;

    impl Backend for Redis {
        fn start(&self) -> Box<dyn Server> {
            Box::new(TestingRedis::start().expect("start Redis"))
        }
        fn fifo(&self) -> bool {
            true
        }
        fn name(&self) -> &'static str {
            "redis"
        }
        fn connect(&self, address: &str, opts: Opts) -> Box<dyn Conn> {
            let client = RedisClient::builder(address)
                .ttl(opts.session)
                .connect_timeout(opts.op)
                .operation_timeout(opts.op)
                .connect()
                .expect("connect to Redis");
            Box::new(client)
        }
    }

    impl Server for TestingRedis {
        fn address(&self) -> String {
            self.url()
        }
        fn pause(&self) {
            TestingRedis::pause(self).unwrap()
        }
        fn resume(&self) {
            TestingRedis::resume(self).unwrap()
        }
    }

    impl Conn for RedisClient {
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
        fn close(&self) {
            RedisClient::close(self)
        }
    }

    adapters!(
        RedisReadWriteLock,
        RedisSemaphore,
        RedisLease,
        release,
        RedisLeaderLatch
    );
}

#[cfg(feature = "postgres")]
pub mod postgres {
    use super::*;
    use zklock::testing::TestingPostgres;
    use zklock::{PgClient, PgLeaderLatch, PgLease, PgMutex, PgReadWriteLock, PgSemaphore};

    pub struct Postgres;

    impl Backend for Postgres {
        fn start(&self) -> Box<dyn Server> {
            Box::new(TestingPostgres::start().expect("start PostgreSQL"))
        }
        fn fifo(&self) -> bool {
            true
        }
        fn name(&self) -> &'static str {
            "postgres"
        }
        fn connect(&self, address: &str, opts: Opts) -> Box<dyn Conn> {
            let client = PgClient::builder(address)
                .session_timeout(opts.session)
                .connect_timeout(opts.op)
                .operation_timeout(opts.op)
                .connect()
                .expect("connect to PostgreSQL");
            Box::new(client)
        }
    }

    impl Server for TestingPostgres {
        fn address(&self) -> String {
            self.url()
        }
        fn pause(&self) {
            TestingPostgres::pause(self).unwrap()
        }
        fn resume(&self) {
            TestingPostgres::resume(self).unwrap()
        }
    }

    impl Conn for PgClient {
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
        fn close(&self) {
            PgClient::close(self)
        }
    }

    adapters!(
        PgReadWriteLock,
        PgSemaphore,
        PgLease,
        release,
        PgLeaderLatch
    );
}
