//! The commands on MySQL and MariaDB (`--connect mysql://…` or `mariadb://…`): `run` on a
//! `MySqlMutex`, a read-write half or a semaphore lease, `elect` on a `MySqlLeaderLatch`.
//! `holders` and `watch` are not built for MySQL yet. The session timeout is
//! `--session-timeout`.

use std::sync::Arc;
use std::time::Duration;

use zklock::{
    HealthEvent, LeadershipChange, LockHealth, MySqlClient, MySqlLeaderLatch, MySqlLease,
    MySqlMutex, MySqlReadWriteLock, MySqlSemaphore,
};

use crate::args::{ElectArgs, Global, HoldersArgs, RunArgs};
use crate::child::catch_signals;
use crate::contender::{refuse_zookeeper_options, Backend, Contender, Target};
use crate::elect_latch::{elect_on_latch, Latch};
use crate::run::{Contend, Held};
use crate::{code, CliResult, Context, Failure};

/// A connected MySQL Client from the global options.
pub fn connect(global: &Global) -> CliResult<MySqlClient> {
    refuse_zookeeper_options(global, "MySQL", "mysql://user:PASSWORD@host/db")?;
    MySqlClient::builder(&global.connect)
        .session_timeout(global.session_timeout)
        .connect_timeout(global.connection_timeout)
        .connect()
        .context(|| "cannot connect to MySQL".to_owned())
}

/// The lock `run` takes, from its options.
pub fn contender(global: &Global, args: &RunArgs) -> CliResult<Box<dyn Contend>> {
    if args.revocable {
        return Err(Failure::new(
            "--revocable is for ZooKeeper locks, not MySQL",
        ));
    }
    let client = connect(global)?;
    let name = &args.path;
    let cannot = || format!("cannot use {name}");
    let lock = if let Some(n) = args.semaphore {
        Target::Lease(Arc::new(
            MySqlSemaphore::new(&client, name, n).context(cannot)?,
        ))
    } else if args.read || args.write {
        let rw = MySqlReadWriteLock::new(&client, name).context(cannot)?;
        Target::Half(Arc::new(rw), args.write)
    } else {
        Target::Mutex(Arc::new(MySqlMutex::new(&client, name).context(cannot)?))
    };
    Ok(Box::new(Contender::<MySql> {
        client,
        target: lock,
    }))
}

/// MySQL's lock types, as `run` uses them.
pub struct MySql;

impl Backend for MySql {
    type Client = MySqlClient;
    type Mutex = MySqlMutex;
    type ReadWrite = MySqlReadWriteLock;
    type Semaphore = MySqlSemaphore;
    type Lease = MySqlLease;

    fn close(client: &MySqlClient) {
        client.close();
    }

    fn half(rw: &MySqlReadWriteLock, write: bool) -> &MySqlMutex {
        if write {
            rw.write_lock()
        } else {
            rw.read_lock()
        }
    }

    fn mutex_events(mutex: &MySqlMutex) -> zklock::Receiver<HealthEvent> {
        mutex.health_events()
    }

    /// The SQL that takes the same lock, and the session that holds it.
    fn node(mutex: &MySqlMutex) -> String {
        format!(
            "{} (connection {})",
            mutex.lock_sql(),
            mutex.connection_id().unwrap_or_default()
        )
    }

    fn lease_events(semaphore: &MySqlSemaphore) -> zklock::Receiver<HealthEvent> {
        semaphore.health_events()
    }

    fn cancel_lease_waiters(semaphore: &MySqlSemaphore) {
        semaphore.cancel_waiters();
    }

    fn acquire_lease(
        semaphore: &MySqlSemaphore,
        timeout: Option<Duration>,
    ) -> zklock::Result<Option<MySqlLease>> {
        match timeout {
            Some(t) => semaphore.acquire_timeout(t),
            None => semaphore.acquire().map(Some),
        }
    }
}

impl Held for MySqlLease {
    fn fencing_token(&self) -> u64 {
        MySqlLease::fencing_token(self)
    }

    fn node(&self) -> String {
        format!(
            "lease {} (connection {})",
            self.index(),
            self.connection_id()
        )
    }

    fn health(&self) -> LockHealth {
        MySqlLease::health(self)
    }

    fn release(self: Box<Self>) -> zklock::Result<()> {
        MySqlLease::release(*self)
    }
}

/// `elect` on MySQL: a `MySqlLeaderLatch` per term.
pub fn elect(global: &Global, args: ElectArgs) -> CliResult<u8> {
    let failed = |f: Failure| f.with_code(code::ZKLOCK_FAILED);
    let signals = catch_signals().map_err(failed)?;
    let client = connect(global).map_err(failed)?;
    let node = MySqlMutex::new(&client, &args.path)
        .context(|| format!("cannot use {}", args.path))
        .map_err(failed)?
        .lock_sql();
    let result = elect_on_latch(&args, &signals, &node, || {
        MySqlLeaderLatch::start(&client, &args.path)
    });
    client.close();
    result
}

impl Latch for MySqlLeaderLatch {
    fn changes(&self) -> zklock::Receiver<LeadershipChange> {
        MySqlLeaderLatch::changes(self)
    }

    fn await_leadership_timeout(&self, timeout: Duration) -> zklock::Result<bool> {
        MySqlLeaderLatch::await_leadership_timeout(self, timeout)
    }

    fn epoch(&self) -> Option<u64> {
        MySqlLeaderLatch::epoch(self)
    }

    fn health(&self) -> Option<LockHealth> {
        MySqlLeaderLatch::health(self)
    }

    fn close(&self) {
        MySqlLeaderLatch::close(self)
    }
}

/// `holders` on MySQL: not built yet.
pub fn holders(_: &Global, _: HoldersArgs) -> CliResult<()> {
    Err(not_yet())
}

/// `watch` on MySQL: not built yet.
pub fn watch(_: &Global, _: HoldersArgs) -> CliResult<()> {
    Err(not_yet())
}

fn not_yet() -> Failure {
    Failure::new(
        "holders and watch are not yet on MySQL: run SELECT IS_USED_LOCK('NAME') for the \
         session that holds a mutex (see docs/mysql.md for the names)",
    )
}
