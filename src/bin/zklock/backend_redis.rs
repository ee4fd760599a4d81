//! The commands on Redis (`--connect redis://…`): `run` on a `RedisMutex`, a read-write half or
//! a semaphore lease, `elect` on a `RedisLeaderLatch`, and `holders` / `watch`. The hold's TTL
//! is `--session-timeout`.

use std::sync::Arc;
use std::time::Duration;

use zklock::{
    HealthEvent, LeadershipChange, LockHealth, RedisClient, RedisLeaderLatch, RedisLease,
    RedisMutex, RedisParticipant, RedisReadWriteLock, RedisSemaphore,
};

use crate::args::{ElectArgs, Global, HoldersArgs, RunArgs};
use crate::child::catch_signals;
#[cfg(feature = "tls")]
use crate::contender::tls_pems;
use crate::contender::{refuse_zookeeper_options, Backend, Contender, Target};
use crate::elect_latch::{elect_on_latch, Latch};
use crate::run::{Contend, Held};
use crate::{code, CliResult, Context, Failure};

/// A connected Redis Client from the global options.
pub fn connect(global: &Global) -> CliResult<RedisClient> {
    refuse_zookeeper_options(global, "Redis", "redis://:PASSWORD@host")?;
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))] // TLS options are added with `tls`
    let mut builder = RedisClient::builder(&global.connect)
        .ttl(global.session_timeout)
        .connect_timeout(global.connection_timeout);
    #[cfg(feature = "tls")]
    {
        let pems = tls_pems(global)?;
        if let Some(ca) = pems.ca {
            builder = builder.tls_ca_pem(&ca);
        }
        if let Some((cert, key)) = pems.identity {
            builder = builder.tls_identity_pem(&cert, &key);
        }
    }
    builder
        .connect()
        .context(|| "cannot connect to Redis".to_owned())
}

/// The lock `run` takes, from its options.
pub fn contender(global: &Global, args: &RunArgs) -> CliResult<Box<dyn Contend>> {
    if args.revocable {
        return Err(Failure::new(
            "--revocable is for ZooKeeper locks, not Redis",
        ));
    }
    let client = connect(global)?;
    let name = &args.path;
    let lock = if let Some(n) = args.semaphore {
        Target::Lease(Arc::new(
            RedisSemaphore::new(&client, name, n).context(|| format!("cannot use {name}"))?,
        ))
    } else if args.read || args.write {
        let rw = RedisReadWriteLock::new(&client, name).context(|| format!("cannot use {name}"))?;
        Target::Half(Arc::new(rw), args.write)
    } else {
        Target::Mutex(Arc::new(
            RedisMutex::new(&client, name).context(|| format!("cannot use {name}"))?,
        ))
    };
    Ok(Box::new(Contender::<Redis> {
        client,
        target: lock,
    }))
}

/// Redis's lock types, as `run` uses them.
pub struct Redis;

impl Backend for Redis {
    type Client = RedisClient;
    type Mutex = RedisMutex;
    type ReadWrite = RedisReadWriteLock;
    type Semaphore = RedisSemaphore;
    type Lease = RedisLease;

    fn close(client: &RedisClient) {
        client.close();
    }

    fn half(rw: &RedisReadWriteLock, write: bool) -> &RedisMutex {
        if write {
            rw.write_lock()
        } else {
            rw.read_lock()
        }
    }

    fn mutex_events(mutex: &RedisMutex) -> zklock::Receiver<HealthEvent> {
        mutex.health_events()
    }

    fn node(mutex: &RedisMutex) -> String {
        mutex.key().to_owned()
    }

    fn lease_events(semaphore: &RedisSemaphore) -> zklock::Receiver<HealthEvent> {
        semaphore.health_events()
    }

    fn cancel_lease_waiters(semaphore: &RedisSemaphore) {
        semaphore.cancel_waiters();
    }

    fn acquire_lease(
        semaphore: &RedisSemaphore,
        timeout: Option<Duration>,
    ) -> zklock::Result<Option<RedisLease>> {
        match timeout {
            Some(t) => semaphore.acquire_timeout(t),
            None => semaphore.acquire().map(Some),
        }
    }
}

impl Held for RedisLease {
    fn fencing_token(&self) -> u64 {
        RedisLease::fencing_token(self)
    }

    fn node(&self) -> String {
        self.id().to_owned()
    }

    fn health(&self) -> LockHealth {
        RedisLease::health(self)
    }

    fn release(self: Box<Self>) -> zklock::Result<()> {
        RedisLease::release(*self)
    }
}

/// `elect` on Redis: a `RedisLeaderLatch` per term.
pub fn elect(global: &Global, args: ElectArgs) -> CliResult<u8> {
    let failed = |f: Failure| f.with_code(code::ZKLOCK_FAILED);
    let signals = catch_signals().map_err(failed)?;
    let client = connect(global).map_err(failed)?;
    let node = latch_key(&args.path);
    let result = elect_on_latch(&args, &signals, &node, || {
        RedisLeaderLatch::start(&client, &args.path)
    });
    client.close();
    result
}

impl Latch for RedisLeaderLatch {
    fn changes(&self) -> zklock::Receiver<LeadershipChange> {
        RedisLeaderLatch::changes(self)
    }

    fn await_leadership_timeout(&self, timeout: Duration) -> zklock::Result<bool> {
        RedisLeaderLatch::await_leadership_timeout(self, timeout)
    }

    fn epoch(&self) -> Option<u64> {
        RedisLeaderLatch::epoch(self)
    }

    fn health(&self) -> Option<LockHealth> {
        RedisLeaderLatch::health(self)
    }

    fn close(&self) {
        RedisLeaderLatch::close(self)
    }
}

/// The key a Redis election's leader holds.
fn latch_key(name: &str) -> String {
    format!("zklock:{{{name}}}")
}

/// One row of `holders` on Redis: what it holds or waits for, and who.
struct Row {
    kind: &'static str,
    who: RedisParticipant,
}

/// Every holder and waiter of the mutex (or latch), the read-write lock and the semaphore
/// named `name`: each is a set of keys of its own.
fn view(client: &RedisClient, name: &str) -> zklock::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let row = |kind, who| Row { kind, who };
    for who in RedisMutex::new(client, name)?.participants()? {
        rows.push(row("lock", who));
    }
    for who in RedisReadWriteLock::new(client, name)?
        .read_lock()
        .participants()?
    {
        let kind = if who.id.ends_with('w') {
            "write"
        } else {
            "read"
        };
        rows.push(row(kind, who));
    }
    for who in RedisSemaphore::new(client, name, 1)?.participants()? {
        rows.push(row("lease", who));
    }
    Ok(rows)
}

fn render(rows: &[Row], json: bool) -> String {
    if json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                serde_json::json!({
                    "position": i,
                    "kind": r.kind,
                    "holds": r.who.holds,
                    "id": r.who.id,
                    "expires_in_ms": r.who.expires_in.map(|d| d.as_millis() as u64),
                })
            })
            .collect();
        return format!("{}\n", serde_json::Value::Array(list));
    }
    if rows.is_empty() {
        return "no one holds or waits\n".to_owned();
    }
    let mut out = String::from("| # | kind | holds | id | expires in |\n|---|---|---|---|---|\n");
    for (i, r) in rows.iter().enumerate() {
        let left = r
            .who
            .expires_in
            .map_or("never".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()));
        let holds = if r.who.holds { "yes" } else { "waits" };
        out.push_str(&format!(
            "| {i} | {} | {holds} | {} | {left} |\n",
            r.kind, r.who.id
        ));
    }
    out
}

/// `holders` on Redis.
pub fn holders(global: &Global, args: HoldersArgs) -> CliResult<()> {
    let client = connect(global)?;
    let rows = view(&client, &args.path).context(|| format!("cannot read {}", args.path))?;
    print!("{}", render(&rows, args.json));
    client.close();
    Ok(())
}

/// `watch` on Redis: Redis tells no one of a key's change (keyspace notifications are off by
/// default), so the view is read again every 250 ms and printed when who holds or waits
/// changes.
pub fn watch(global: &Global, args: HoldersArgs) -> CliResult<()> {
    let client = connect(global)?;
    let mut last = None;
    loop {
        let rows = view(&client, &args.path).context(|| format!("cannot read {}", args.path))?;
        let key: Vec<_> = rows
            .iter()
            .map(|r| (r.kind, r.who.id.clone(), r.who.holds))
            .collect();
        if last.as_ref() != Some(&key) {
            print!("{}", render(&rows, args.json));
            use std::io::Write;
            let _ = std::io::stdout().flush();
            last = Some(key);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
