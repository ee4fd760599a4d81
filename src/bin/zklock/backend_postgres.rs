//! The commands on PostgreSQL (`--connect postgres://…`): `run` on a `PgMutex`, a read-write
//! half or a semaphore lease, `elect` on a `PgLeaderLatch`, and `holders` / `watch` from
//! `pg_locks` joined with `pg_stat_activity`. The session timeout is `--session-timeout`.

use std::sync::Arc;
use std::time::Duration;

use zklock::{
    HealthEvent, LeadershipChange, LockHealth, PgClient, PgLeaderLatch, PgLease, PgMutex,
    PgReadWriteLock, PgSemaphore,
};

use crate::args::{ElectArgs, Global, HoldersArgs, RunArgs};
use crate::child::catch_signals;
#[cfg(feature = "tls")]
use crate::contender::tls_pems;
use crate::contender::{refuse_zookeeper_options, Backend, Contender, Target};
use crate::elect_latch::{elect_on_latch, Latch};
use crate::run::{Contend, Held};
use crate::{code, CliResult, Context, Failure};

/// A connected PostgreSQL Client from the global options.
pub fn connect(global: &Global) -> CliResult<PgClient> {
    refuse_zookeeper_options(global, "PostgreSQL", "postgres://user:PASSWORD@host/db")?;
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))] // TLS options are added with `tls`
    let mut builder = PgClient::builder(&global.connect)
        .session_timeout(global.session_timeout)
        .connect_timeout(global.connection_timeout);
    // With sslmode=require, verify-ca or verify-full in the URL.
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
        .context(|| "cannot connect to PostgreSQL".to_owned())
}

/// The lock `run` takes, from its options.
pub fn contender(global: &Global, args: &RunArgs) -> CliResult<Box<dyn Contend>> {
    if args.revocable {
        return Err(Failure::new(
            "--revocable is for ZooKeeper locks, not PostgreSQL",
        ));
    }
    let client = connect(global)?;
    let name = &args.path;
    let cannot = || format!("cannot use {name}");
    let lock = if let Some(n) = args.semaphore {
        Target::Lease(Arc::new(
            PgSemaphore::new(&client, name, n).context(cannot)?,
        ))
    } else if args.read || args.write {
        let rw = PgReadWriteLock::new(&client, name).context(cannot)?;
        Target::Half(Arc::new(rw), args.write)
    } else {
        Target::Mutex(Arc::new(PgMutex::new(&client, name).context(cannot)?))
    };
    Ok(Box::new(Contender::<Postgres> {
        client,
        target: lock,
    }))
}

/// PostgreSQL's lock types, as `run` uses them.
pub struct Postgres;

impl Backend for Postgres {
    type Client = PgClient;
    type Mutex = PgMutex;
    type ReadWrite = PgReadWriteLock;
    type Semaphore = PgSemaphore;
    type Lease = PgLease;

    fn close(client: &PgClient) {
        client.close();
    }

    fn half(rw: &PgReadWriteLock, write: bool) -> &PgMutex {
        if write {
            rw.write_lock()
        } else {
            rw.read_lock()
        }
    }

    fn mutex_events(mutex: &PgMutex) -> zklock::Receiver<HealthEvent> {
        mutex.health_events()
    }

    /// The SQL that takes the same lock, and the backend that holds it.
    fn node(mutex: &PgMutex) -> String {
        format!(
            "{} (backend {})",
            mutex.lock_sql(),
            mutex.backend_pid().unwrap_or_default()
        )
    }

    fn lease_events(semaphore: &PgSemaphore) -> zklock::Receiver<HealthEvent> {
        semaphore.health_events()
    }

    fn cancel_lease_waiters(semaphore: &PgSemaphore) {
        semaphore.cancel_waiters();
    }

    fn acquire_lease(
        semaphore: &PgSemaphore,
        timeout: Option<Duration>,
    ) -> zklock::Result<Option<PgLease>> {
        match timeout {
            Some(t) => semaphore.acquire_timeout(t),
            None => semaphore.acquire().map(Some),
        }
    }
}

impl Held for PgLease {
    fn fencing_token(&self) -> u64 {
        PgLease::fencing_token(self)
    }

    fn node(&self) -> String {
        format!("lease {} (backend {})", self.index(), self.backend_pid())
    }

    fn health(&self) -> LockHealth {
        PgLease::health(self)
    }

    fn release(self: Box<Self>) -> zklock::Result<()> {
        PgLease::release(*self)
    }
}

/// `elect` on PostgreSQL: a `PgLeaderLatch` per term.
pub fn elect(global: &Global, args: ElectArgs) -> CliResult<u8> {
    let failed = |f: Failure| f.with_code(code::ZKLOCK_FAILED);
    let signals = catch_signals().map_err(failed)?;
    let client = connect(global).map_err(failed)?;
    let node = PgMutex::new(&client, &args.path)
        .context(|| format!("cannot use {}", args.path))
        .map_err(failed)?
        .lock_sql();
    let result = elect_on_latch(&args, &signals, &node, || {
        PgLeaderLatch::start(&client, &args.path)
    });
    client.close();
    result
}

impl Latch for PgLeaderLatch {
    fn changes(&self) -> zklock::Receiver<LeadershipChange> {
        PgLeaderLatch::changes(self)
    }

    fn await_leadership_timeout(&self, timeout: Duration) -> zklock::Result<bool> {
        PgLeaderLatch::await_leadership_timeout(self, timeout)
    }

    fn epoch(&self) -> Option<u64> {
        PgLeaderLatch::epoch(self)
    }

    fn health(&self) -> Option<LockHealth> {
        PgLeaderLatch::health(self)
    }

    fn close(&self) {
        PgLeaderLatch::close(self)
    }
}

// ---------------------------------------------------------------------------
// holders and watch
// ---------------------------------------------------------------------------

/// Every session that holds or waits for one of the advisory locks of the name `$1` in this
/// database: the mutex's (and leader latch's) and the read-write lock's key
/// `hashtextextended($1, 0)`, taken exclusive or shared, and the semaphore's leases
/// `hashtextextended($1, i)` for `i` up to `$2`. Holders first, then waiters in the order they
/// began to wait (the server's queue).
///
/// `pg_stat_activity` shows a role without `pg_read_all_stats` the client address and the
/// backend's start of its own roles' sessions only: for another role's session both are null
/// (the address is null for a Unix-socket session too, shown as `local`), and both are left
/// empty, rather than calling a hidden address `local`.
const VIEW: &str = "\
WITH keys AS (SELECT i AS seed, hashtextextended($1, i) AS key FROM generate_series(0, $2) AS i) \
SELECT k.seed, l.mode, l.granted, l.pid, a.usename::text, a.application_name, \
       CASE WHEN a.backend_start IS NOT NULL \
            THEN coalesce(host(a.client_addr) || ':' || a.client_port, 'local') END, \
       to_char(a.backend_start, 'YYYY-MM-DD HH24:MI:SS'), \
       to_char(l.waitstart, 'YYYY-MM-DD HH24:MI:SS'), \
       extract(epoch FROM now() - l.waitstart)::float8 \
FROM pg_locks l \
JOIN keys k ON ((l.classid::int8 << 32) | l.objid::int8) = k.key \
LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
WHERE l.locktype = 'advisory' AND l.objsubid = 1 \
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
ORDER BY l.granted DESC, l.waitstart NULLS FIRST, l.pid";

/// The most leases `holders` looks at when `--max-leases` is not given (a semaphore's most).
const ALL_LEASES: u32 = 10_000;

/// One row of `holders`: what a session holds or waits for, and who it is.
#[derive(PartialEq)]
struct Row {
    kind: String,
    holds: bool,
    pid: i32,
    user: String,
    application: String,
    from: String,
    connected: String,
    /// When it began to wait, and for how long (waiters only).
    waiting: Option<(String, f64)>,
}

/// What `holders` reads through: a plain connection of its own (a reader holds no lock).
struct Reader {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    timeout: Duration,
}

impl Reader {
    fn connect(global: &Global) -> CliResult<Reader> {
        // PgClient checks the URL, the credentials and the server, and says why it cannot.
        connect(global)?.close();
        let asks_tls = global.connect.split(['?', '&']).any(|p| {
            matches!(
                p,
                "sslmode=require" | "sslmode=verify-ca" | "sslmode=verify-full"
            )
        });
        if asks_tls {
            return Err(Failure::new(
                "holders and watch read pg_locks on a connection of their own, which cannot use \
                 TLS yet: run them with sslmode=disable where the network allows, or query \
                 pg_locks with psql",
            ));
        }
        let config: tokio_postgres::Config = global
            .connect
            .trim()
            .parse()
            .context(|| "not a PostgreSQL URL".to_owned())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context(|| "cannot start a runtime".to_owned())?;
        let timeout = global.connection_timeout;
        let client = runtime.block_on(async {
            let (client, connection) =
                tokio::time::timeout(timeout, config.connect(tokio_postgres::NoTls))
                    .await
                    .map_err(|_| Failure::new("cannot connect to PostgreSQL: timed out"))?
                    .context(|| "cannot connect to PostgreSQL".to_owned())?;
            tokio::spawn(connection);
            Ok::<_, Failure>(client)
        })?;
        Ok(Reader {
            runtime,
            client,
            timeout,
        })
    }

    fn view(&self, name: &str, max_leases: Option<u32>) -> CliResult<Vec<Row>> {
        if name.is_empty() {
            return Err(Failure::new("a PostgreSQL lock name must not be empty"));
        }
        let leases = i32::try_from(max_leases.unwrap_or(ALL_LEASES)).unwrap_or(i32::MAX);
        let rows = self.runtime.block_on(async {
            tokio::time::timeout(self.timeout, self.client.query(VIEW, &[&name, &leases]))
                .await
                .map_err(|_| Failure::new(format!("cannot read {name}: no answer in time")))?
                .context(|| format!("cannot read {name}"))
        })?;
        rows.iter().map(row).collect()
    }
}

fn row(r: &tokio_postgres::Row) -> CliResult<Row> {
    let bad = |e: tokio_postgres::Error| Failure::from_error("an unexpected answer", &e);
    let seed: i32 = r.try_get(0).map_err(bad)?;
    let mode: String = r.try_get(1).map_err(bad)?;
    let kind = match (seed, mode.as_str()) {
        (0, "ShareLock") => "read".to_owned(),
        (0, _) => "lock".to_owned(),
        (i, _) => format!("lease {i}"),
    };
    let text = |i| -> CliResult<String> {
        Ok(r.try_get::<_, Option<String>>(i)
            .map_err(bad)?
            .unwrap_or_default())
    };
    let waiting = match (
        r.try_get::<_, Option<String>>(8).map_err(bad)?,
        r.try_get::<_, Option<f64>>(9).map_err(bad)?,
    ) {
        (Some(at), Some(secs)) => Some((at, secs)),
        _ => None,
    };
    Ok(Row {
        kind,
        holds: r.try_get(2).map_err(bad)?,
        pid: r.try_get(3).map_err(bad)?,
        user: text(4)?,
        application: text(5)?,
        from: text(6)?,
        connected: text(7)?,
        waiting,
    })
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
                    "holds": r.holds,
                    "backend_pid": r.pid,
                    "user": r.user,
                    "application": r.application,
                    "client": r.from,
                    "connected_at": r.connected,
                    "waiting_since": r.waiting.as_ref().map(|(at, _)| at),
                    "waiting_ms": r.waiting.as_ref().map(|(_, s)| (s * 1e3) as u64),
                })
            })
            .collect();
        return format!("{}\n", serde_json::Value::Array(list));
    }
    if rows.is_empty() {
        return "no one holds or waits\n".to_owned();
    }
    let mut out = String::from(
        "| # | kind | holds | backend | user | application | from | connected | waiting since |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for (i, r) in rows.iter().enumerate() {
        let holds = if r.holds { "yes" } else { "waits" };
        let waiting = r
            .waiting
            .as_ref()
            .map_or("—".to_owned(), |(at, s)| format!("{at} ({s:.1} s)"));
        out.push_str(&format!(
            "| {i} | {} | {holds} | {} | {} | {} | {} | {} | {waiting} |\n",
            r.kind, r.pid, r.user, r.application, r.from, r.connected
        ));
    }
    out
}

/// `holders` on PostgreSQL.
pub fn holders(global: &Global, args: HoldersArgs) -> CliResult<()> {
    let reader = Reader::connect(global)?;
    let rows = reader.view(&args.path, args.max_leases)?;
    print!("{}", render(&rows, args.json));
    Ok(())
}

/// `watch` on PostgreSQL: the server tells no one of a lock's grant, so the view is read again
/// every 250 ms and printed when who holds or waits changes.
pub fn watch(global: &Global, args: HoldersArgs) -> CliResult<()> {
    let reader = Reader::connect(global)?;
    let mut last = None;
    loop {
        let rows = reader.view(&args.path, args.max_leases)?;
        let key: Vec<_> = rows
            .iter()
            .map(|r| (r.kind.clone(), r.pid, r.holds))
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
