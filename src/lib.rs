//! zklock — Apache Curator's distributed-lock recipes for Rust on ZooKeeper, and the same
//! blocking API on Redis, PostgreSQL, MySQL/MariaDB, one host's files and in process.
//!
//! zklock gives plain threaded Rust programs what Java programs get from Apache Curator, with
//! the same node layouts so that Rust and Java services can share one lock. Everything is
//! blocking: no future, runtime or `async` reaches the user.
//!
//! # Start here
//!
//! [`connect`] reads a URL and gives an [`AnyClient`], whose mutexes, read-write locks,
//! semaphores and leader latches are the same on every backend. `file://` needs no server, so
//! this runs as it is:
//!
//! ```
//! use zklock::Lock;
//!
//! # fn main() -> zklock::Result<()> {
//! let locks = zklock::connect("file:///tmp/zklock-doc")?;
//! let ledger = locks.mutex("ledger")?;
//! let guard = ledger.lock()?;
//! println!("{} lock held, token {}", locks.backend(), guard.fencing_token());
//! # Ok(()) }
//! ```
//!
//! Moving to another backend is a change of URL: `zk://host:2181/chroot`, `redis://host:6379`,
//! `postgres://user:pw@host/db`, `mysql://user:pw@host/db`, `mem://NAME` (this process only,
//! for unit tests). Each backend also has types of its own, for what only it has: the
//! ZooKeeper [`Client`] and Curator's recipes at the crate root; [`RedisClient`] and the
//! [`zklock::redis`](crate::redis) module (feature `redis`); [`PgClient`] and the
//! [`zklock::postgres`](crate::postgres) module (feature `postgres`); [`MySqlClient`] and the
//! [`zklock::mysql`](crate::mysql) module (feature `mysql`); [`FileClient`] and [`file`](mod@file);
//! [`MemClient`] and [`mem`].
//!
//! # Which backend?
//!
//! | backend | needs | a holder's crash | the server's restart or failover | per acquisition |
//! |---|---|---|---|---|
//! | ZooKeeper | a server; an ensemble of 3 or 5 to survive losing one | freed when its session times out | survived: the Client keeps its session and locks | 3 requests in 2 round trips |
//! | Redis | a server; Sentinel or Cluster to fail over | freed one TTL after its last renewal | a restart without persistence or a failover can grant a lock twice: the fencing token catches it | 2 scripts (round trips) |
//! | PostgreSQL | PostgreSQL 11 or later | killed: freed at once; frozen: within the session timeout (PostgreSQL 14 or later) | holds read `Lost`, locks granted afresh; tokens rise across a failover only with a synchronous standby | 2 statements |
//! | MySQL / MariaDB | one server | killed: freed at once; frozen: within the session timeout | holds read `Lost`, locks granted afresh; multi-primary clusters only in the table mode | 2 statements |
//! | `file://` | a local directory | killed: freed at once; frozen: kept while it is frozen | no server; tokens rise across reboots | no round trip, about 67 µs |
//! | `mem://` | nothing: one process | one process | no server | about 0.6 µs |
//!
//! The repository's README has the longer table and one example per backend; each backend's
//! page in `docs/` (`redis.md`, `postgres.md`, `mysql.md`, `file.md`, `mem.md`) says what it
//! guarantees and what it cannot.
//!
//! # Which lock?
//!
//! | you need | use |
//! |---|---|
//! | one holder at a time, re-entrant per thread, fair | [`InterProcessMutex`] |
//! | a lock, read-write lock, semaphore or leader among one host's processes, no server | [`FileClient`] and [`file`](mod@file)'s locks, or `zklock::connect("file:///dir")` |
//! | the same, granted in random order | [`InterProcessMutex::with_driver`] with [`UnfairDriver`](zookeeper::UnfairDriver) |
//! | your own ordering rule | a [`LockDriver`] of your own |
//! | many readers or one writer | [`InterProcessReadWriteLock`] |
//! | at most N holders | [`InterProcessSemaphoreV2`] (N fixed, or a [`SharedCount`]) |
//! | a mutex any thread may release, not re-entrant | [`InterProcessSemaphoreMutex`] |
//! | several locks, all or none (any backend) | [`InterProcessMultiLock`] |
//! | any of these in unit tests, or among one process's threads, with no server | [`mem`]: [`MemClient`], [`mem::MemMutex`] and the others, or `connect("mem://NAME")` |
//! | a mutex on Redis | [`redis::RedisMutex`] (feature `redis`) |
//! | many readers or one writer on Redis | [`redis::RedisReadWriteLock`] (feature `redis`) |
//! | at most N holders on Redis | [`redis::RedisSemaphore`] (feature `redis`) |
//! | one leader among many on Redis | [`redis::RedisLeaderLatch`] (feature `redis`) |
//! | a mutex on PostgreSQL, shared with any SQL client | [`postgres::PgMutex`] (feature `postgres`) |
//! | many readers or one writer on PostgreSQL | [`postgres::PgReadWriteLock`] (feature `postgres`) |
//! | at most N holders on PostgreSQL | [`postgres::PgSemaphore`] (feature `postgres`) |
//! | one leader among many on PostgreSQL | [`postgres::PgLeaderLatch`] (feature `postgres`) |
//! | a lock inside your own PostgreSQL transaction, freed by its end | [`postgres::PgXactLock`] (features `postgres-sync`, `postgres-async`) |
//! | a mutex on MySQL or MariaDB, shared with any SQL client | [`mysql::MySqlMutex`] (feature `mysql`) |
//! | many readers or one writer on MySQL or MariaDB | [`mysql::MySqlReadWriteLock`] (feature `mysql`) |
//! | at most N holders on MySQL or MariaDB | [`mysql::MySqlSemaphore`] (feature `mysql`) |
//! | one leader among many on MySQL or MariaDB | [`mysql::MySqlLeaderLatch`] (feature `mysql`) |
//! | a mutex or a leader on Galera, Group Replication or TiDB | [`mysql::MySqlMutex`], [`mysql::MySqlLeaderLatch`] of a [`MySqlClient`] in [`mysql::MySqlMode::Table`] (feature `mysql`) |
//! | one leader among many, elected in the background | [`LeaderLatch`] |
//! | a leader that runs a closure while it leads, then lets the next | [`LeaderSelector`], [`elect`](zookeeper::elect) |
//! | any of these shared with Python services using kazoo | [`InterProcessMutex::kazoo`], [`InterProcessReadWriteLock::kazoo`], [`KazooSemaphore`](zookeeper::KazooSemaphore), [`KazooElection`](zookeeper::KazooElection) (kazoo's layout; see below) |
//!
//! ```no_run
//! use std::time::Duration;
//! use zklock::{Client, InterProcessMutex, LockHealth};
//!
//! # fn main() -> zklock::Result<()> {
//! let client = Client::connect("127.0.0.1:2181")?;
//! let mutex = InterProcessMutex::new(&client, "/locks/ledger")?;
//! if let Some(guard) = mutex.try_lock_for(Duration::from_secs(10))? {
//!     // Hand the token to the resource so it can refuse a stale holder.
//!     let token = guard.fencing_token();
//!     if guard.health() == LockHealth::Held {
//!         println!("writing with token {token}");
//!     }
//! } // released here
//! # Ok(()) }
//! ```
//!
//! # Names
//!
//! The crate root holds what every backend shares — the [`Lock`] trait and its guards,
//! [`LockHealth`] and [`HealthEvent`], [`Error`], the retry policies, the URL factory
//! [`connect`] and the `Any*` types it returns — and the ZooKeeper backend's [`Client`] and
//! recipes under Curator's names. Every other backend keeps its types in its module
//! (`zklock::redis::RedisMutex`, `zklock::postgres::PgSemaphore`, as `sqlx::postgres::PgPool`)
//! and only its Client at the root (`RedisClient`, `PgClient`, `MySqlClient`); ZooKeeper's
//! other types (kazoo's recipes, node operations, the parts of a custom driver) are in
//! [`zookeeper`].
//!
//! # The Client
//!
//! A [`Client`] (Curator's `CuratorFramework`) keeps one ZooKeeper session through server
//! restarts and leader failover, reports [`ConnectionState`]s with Curator's meaning, opens a new
//! session by itself after expiry, and retries connection losses with a [`RetryPolicy`].
//!
//! ```no_run
//! use std::time::Duration;
//! use zklock::{Client, ConnectionState, CreateMode};
//!
//! # fn main() -> zklock::Result<()> {
//! let client = Client::builder("127.0.0.1:2181")
//!     .session_timeout(Duration::from_secs(10))
//!     .namespace("myapp")
//!     .connect()?;
//! let states = client.connection_states();
//! let node = client.create("/members/m-").mode(CreateMode::EphemeralSequential)
//!     .parents_as_containers().protected().call()?;
//! if let Ok(ConnectionState::Lost) = states.try_recv() {
//!     // the session and `node` are gone; the Client is already opening a new session
//! }
//! # Ok(()) }
//! ```
//!
//! # Connection options
//!
//! Every backend's Client builder ([`ClientBuilder`], `RedisClientBuilder`, `PgClientBuilder`,
//! `MySqlClientBuilder`, `MemClientBuilder`) and [`AnyClientBuilder`] take the same four
//! options, with one default each:
//!
//! | option | what it bounds | default |
//! |---|---|---|
//! | `session_timeout` | how long after the Client's last heartbeat the server frees its holds: ZooKeeper's session timeout, the Redis keys' TTL, the PostgreSQL and MySQL sessions' limits | [`DEFAULT_SESSION_TIMEOUT`], 30 s |
//! | `connect_timeout` | opening a connection | [`DEFAULT_CONNECT_TIMEOUT`], 10 s |
//! | `operation_timeout` | one round trip to the server | the connect timeout |
//! | `retry_policy` | how calls retry when a connection fails | [`ExponentialBackoffRetry`] from 100 ms, 3 retries |
//!
//! What differs is stated here, once. ZooKeeper's own builder keeps Curator's defaults where
//! Curator users expect them: no operation timeout for the Client's own calls (the retry
//! policy bounds them; recipes pass their own deadlines) and the retry policy of Curator's
//! recipes, exponential backoff from 1 s, 3 retries (through a URL its operation timeout is the
//! connect timeout, as on every backend). On PostgreSQL an unset connect timeout is the
//! connection string's `connect_timeout`, or `PGCONNECT_TIMEOUT`, before the default. The
//! `mem://` store has nothing to connect to: its connect timeout only stands in for an unset
//! operation timeout (which bounds a call on a frozen Client), and it never retries.
//! `connect` refuses, before any I/O, a value the backend cannot keep. On Redis and
//! PostgreSQL every timeout lies between a millisecond and a day (the session timeout from
//! 100 ms on Redis, from 1 s on PostgreSQL). MySQL takes a session timeout from 1 s to a day
//! (rounded up to whole seconds) and any connect and operation timeout but zero, a longer one
//! than a day as a day. ZooKeeper refuses zero anywhere and a connect timeout over a day, asks
//! the server for its maximum for a longer session timeout, and takes an operation timeout over
//! a day as none. `mem://` takes any value.
//!
//! # Capping a hold (`max_hold`)
//!
//! A stuck holder (a thread in a loop, a deadlocked worker) keeps a lock for ever, because its
//! Client renews the hold while the process lives. [`Lock::set_max_hold`] caps every hold
//! granted through a lock object at a length counted from its grant (Redisson's `leaseTime`,
//! ShedLock's `lockAtMostFor`), on every mutex, both halves of every read-write lock and
//! [`InterProcessMultiLock`]; each semaphore's `set_max_hold` caps its leases (and
//! [`InterProcessSemaphoreMutex`]'s hold); [`AnyClientBuilder::max_hold`] or `?max_hold=2s` in a
//! URL sets it on every mutex, read-write lock and semaphore an [`AnyClient`] makes. When the cap passes, even while
//! renewals succeed, the hold reads [`LockHealth::Lost`], its health subscribers hear it (a
//! callback may call into the lock), the hold is let go of on the server in the background, and
//! the holder's last `release()` answers [`Error::LockLost`]; a drop stays bounded as always.
//! One process-wide thread, `zklock-max-hold`, runs every cap. Zero is refused with
//! [`Error::InvalidArgument`] before any I/O; `Duration::MAX` (any length past what the clock
//! counts) is no cap. Leader latch terms are not capped (a leader ends its term by closing the
//! latch: a term is no hold its leader could forget to release). `zklock run --max-hold D`
//! stops its command at the cap.
//!
//! | backend | what frees the server's hold at the cap |
//! |---|---|
//! | ZooKeeper | the lock node is deleted by the Client's guaranteed-delete queue |
//! | Redis | the hold is removed from the key by the lock's owner-checked script, sent by the keeper |
//! | PostgreSQL | the hold's session is ended (a downgraded read-write lock's shared session: the lock is unlocked on it) |
//! | MySQL/MariaDB | the hold's connection is closed, which frees the `GET_LOCK` name; in the table mode the keeper deletes the lease's row |
//! | `mem://` | the entry leaves the queue (on a frozen Client: at the thaw) |
//! | `file://` | the entry file is removed and its lock closed |
//!
//! # Blocking and Drop
//!
//! Every call that can block has a bound its docs state, `Drop` included:
//!
//! * [`acquire`](Lock::acquire) waits until the lock is ours, the retry policy gives up during an
//!   outage (its budget starts afresh after every answered round trip), or another thread calls
//!   [`cancel_waiters`](Lock::cancel_waiters) ([`Error::Cancelled`]).
//! * [`acquire_timeout(d)`](Lock::acquire_timeout) and the `try_lock_*` forms wait at most `d`; a
//!   round trip of the attempt may run past it by the Client's operation timeout (default: its
//!   connection timeout). [`try_lock`](Lock::try_lock) / a zero timeout makes one attempt.
//! * [`release`](Lock::release) reports errors within the operation (else connection) timeout;
//!   [`release_timeout`](Lock::release_timeout) takes a bound of its own.
//! * Dropping a guard, a [`Lease`] or a lock still held releases in the calling thread, waiting
//!   at most 1 s (or the Client's operation timeout, if shorter): once the drop returns with the
//!   server reachable, another process can take the lock at once. What the server does not
//!   answer in that time goes to a background queue that retries, through whatever session is
//!   current, until the node is gone; the drop returns.
//! * Dropping the last handle of a [`Client`] closes its session (closeSession: the server
//!   deletes every ephemeral node of the session at once), waiting for the answer within the
//!   same bound. Lock objects and guards hold a handle each: the last to go closes the session.
//!   See "Exiting" below.
//! * Listeners and callbacks run on the Client's watcher thread and must not block. An acquire
//!   that may wait, called there, fails at once with [`Error::OnWatcherThread`].
//!
//! # Threads
//!
//! Each [`Client`] runs a `zklock-watch-N` thread (watch events, connection states, listeners
//! and callbacks), and its wire client (sockets, pings, reconnects, on an executor of its own)
//! on the process's one `zklock-io` thread, which every Client of the process shares: it starts
//! with the first Client and ends with the last. [`Client::close`] joins the watcher thread (and
//! the I/O thread when it was the last Client); dropping the last clone closes the session and
//! lets them end by themselves shortly after. Host names are resolved on the process-wide thread pool of the
//! `blocking` crate (`blocking-N` threads, which end after a second idle), and `async-io` may
//! start one process-wide `async-io` reactor thread. [`LeaderLatch`]es, and
//! [`LeaderSelector`]s while they wait, have no thread each: their steps run on up to four
//! process-wide `zklock-elect` threads and one `zklock-elect-timer`, which end when idle. A
//! selector's closure runs on a `zklock-selector` thread for the length of its term. The first
//! `max_hold` set starts the process's one `zklock-max-hold` thread, on every backend. Nothing
//! else is spawned for ZooKeeper, and no thread runs user code except the watcher thread
//! (listeners), a selector's term thread (its closure), and the thread that creates a node
//! (ACL providers). The Redis and PostgreSQL Clients run
//! threads of their own, listed on `RedisClient` and `PgClient`; their events threads run those
//! backends' health callbacks.
//!
//! # Exiting
//!
//! The program a first user writes frees its lock as it returns from `main`:
//!
//! ```no_run
//! fn main() -> zklock::Result<()> {
//!     let client = zklock::Client::connect("127.0.0.1:2181")?;
//!     let mutex = zklock::InterProcessMutex::new(&client, "/locks/nightly")?;
//!     let _guard = mutex.lock()?;
//!     // ... the job ...
//!     Ok(())
//! } // `_guard`, `mutex`, `client` dropped: the node is deleted, then the session closed
//! ```
//!
//! The guard's drop deletes the lock node and the last Client handle's drop closes the session,
//! each waiting for the server at most 1 s (or the operation timeout, if shorter), so the next
//! run of the program gets the lock at once. If the server cannot be reached in that time
//! (an outage), the process ends without having freed the lock, and the server frees it when
//! the session times out.
//!
//! A process that ends without running destructors frees nothing itself: the server frees its
//! locks when the session times out ([`ClientBuilder::session_timeout`]: up to 30 s by default,
//! as for a crashed holder below). That is the case of
//!
//! * [`std::process::exit`] (and `std::process::abort`), called anywhere, `main` included: no
//!   `Drop` runs, on this thread or any other;
//! * a panic with `panic = "abort"` in the Cargo profile (with the default `unwind`, a panic
//!   runs the drops of the panicking thread's stack, `main`'s included when it panics there);
//! * a lock or Client kept alive past `main`'s end: in a `static`, leaked (`mem::forget`,
//!   `Box::leak`), held by a thread still running, or captured by a listener of the Client's
//!   own (a reference cycle: the Client keeps its listeners);
//! * a signal that kills the process (`SIGTERM`, `SIGINT` without a handler, `SIGKILL`).
//!
//! To cover them, release before you exit: `guard.release()?` (which also reports errors) and
//! [`client.close()`](Client::close) (which closes the session, freeing every lock, lease and
//! leadership of the Client at once) before `std::process::exit`; for signals, a handler that
//! lets `main` return (or calls `close()`). Under `panic = "abort"` nothing of the process runs
//! after the panic hook: keep `unwind` in programs that hold locks, or size the session timeout
//! for the wait. (A hook that owns a `Client` clone to close it keeps that Client alive past
//! `main`, so its session then closes only if `close()` is called.)
//!
//! # A crashed holder
//!
//! A holder that crashes, is killed (`kill -9`) or is cut off keeps its lock node until
//! ZooKeeper expires its session: the others wait up to the session timeout
//! ([`ClientBuilder::session_timeout`], default [`DEFAULT_SESSION_TIMEOUT`], 30 s as on every backend; the server bounds it to 2–20
//! of its `tickTime`s). Size it as the longest stall you want to survive without losing locks
//! (a GC pause, a network blip) against how long the others may wait for a dead holder; 5–15 s
//! is common. A holder that stands still past its session reads [`LockHealth::Lost`] from
//! `health()` as soon as it runs again, before it can do harm, provided it checks; a fencing
//! token checked by the resource covers the rest (`examples/fenced_resource.rs`).
//!
//! # fork
//!
//! A Client's threads do not survive `fork`: create Clients (and locks) in the process that
//! uses them, after forking. A child must not use a Client or lock inherited from its parent.
//!
//! # From async code
//!
//! Every call blocks, so call zklock from `tokio::task::spawn_blocking` (or your runtime's
//! equivalent), not on an async worker thread. A re-entrant lock's guard is `!Send` — its hold
//! belongs to the thread that took it — so it cannot be held across an `.await` in a `Send`
//! future: take and release it inside one blocking task. A [`Lease`] and an
//! [`InterProcessSemaphoreMutex`]'s guard are `Send` and may move between tasks.
//!
//! # Logging
//!
//! zklock logs through [`tracing`](https://docs.rs/tracing), as the wire client does, so one
//! subscriber sees both (e.g. `tracing_subscriber::fmt().with_env_filter("zklock=info").init()`).
//! A program that logs through the `log` crate (env_logger and the like) and installs no tracing
//! subscriber gets both as `log` records too: zklock turns on `tracing`'s `log` feature. Lost
//! locks, sessions given up and background deletes that keep failing are warnings; connection
//! states are info; retries and other details are debug.
//!
//! # Feature flags
//!
//! * `zookeeper` (default) — the ZooKeeper backend: [`Client`], the lock recipes and leader
//!   election. Without it (and with no other backend) only the backend-neutral core is built:
//!   [`Lock`], [`LockHealth`], [`Error`], the retry policies, and the in-process backend
//!   [`mem`] (always built, no feature); no ZooKeeper client is compiled.
//! * `redis` — the Redis backend: `RedisClient`, `redis::RedisMutex` (fair or barging, and
//!   redis-py's `Lock` layout), `redis::RedisReadWriteLock`, `redis::RedisSemaphore` and
//!   `redis::RedisLeaderLatch`, on the `redis` crate's blocking API. What Redis can and cannot
//!   promise is in the repository's `docs/redis.md`.
//! * `postgres` — the PostgreSQL backend: `PgClient` (with connection states),
//!   `postgres::PgMutex`, `postgres::PgReadWriteLock` (its halves on shared and exclusive
//!   locks), `postgres::PgSemaphore` (N keys, a lease holds one) and `postgres::PgLeaderLatch`
//!   (an epoch per term), on session-level advisory locks whose keys (`hashtextextended(name, 0)` for a mutex) any SQL client can take too, with
//!   server-side limits that free a dead or frozen holder within the session timeout, health
//!   and fencing tokens. Runs tokio-postgres on a small runtime of its own per Client (thread
//!   `zklock-pg-io`, plus `zklock-pg-events` for callbacks), and on the calling thread while it
//!   waits for a statement's answer; no async reaches the caller. What
//!   PostgreSQL can and cannot promise is in the repository's `docs/postgres.md`.
//! * `postgres-sync`, `postgres-async` — `postgres::PgXactLock::acquire` and `acquire_async`:
//!   the same lock inside a transaction of the caller's own `postgres` or `tokio-postgres`
//!   connection, released by its commit or rollback (so it works through PgBouncer in
//!   transaction mode). `postgres-sync` pulls in the `postgres` crate.
//! * `mysql` — the MySQL / MariaDB backend: `MySqlClient`, `mysql::MySqlMutex` on `GET_LOCK`,
//!   `mysql::MySqlReadWriteLock`, `mysql::MySqlSemaphore` and `mysql::MySqlLeaderLatch`, a
//!   connection per hold and per waiting thread, with `wait_timeout` set from the session
//!   timeout so the server frees a silent holder, health and fencing tokens from a counter
//!   table; or, in the table mode (`?lock_mode=table`, for Galera, Group Replication, TiDB),
//!   `mysql::MySqlMutex` as a lease row renewed by the Client and polled for by waiters. On the
//!   `mysql` crate's blocking API. See the repository's `docs/mysql.md`.
//! * `testing` — [`testing`]: real ZooKeeper servers and 3-node ensembles started from Debian's
//!   packages, session expiry, a TCP fault proxy and a fenced register, for your own tests
//!   (with `postgres`, a real PostgreSQL server too: `TestingPostgres`, and PgBouncer in front
//!   of it: `TestingPgBouncer`; with `mysql`, a
//!   MariaDB server: `TestingMariaDb`). Pulls in `tempfile`
//!   and `rustix`.
//! * `metrics` — counters, histograms and gauges through the
//!   [`metrics`](https://docs.rs/metrics) facade (acquisitions, timeouts, health changes, wait
//!   and hold times, waiters, pending background deletes; the names are listed in the
//!   repository's `docs/observability.md`); install any `metrics` exporter.
//! * `tls` — TLS connections for every backend built: ZooKeeper (`ClientBuilder::tls_ca_pem`
//!   and the like) and Redis (`rediss://`, `rediss+sentinel://` and `rediss+cluster://` URLs,
//!   `RedisClientBuilder::tls_ca_pem`), through the clients' rustls support.
//! * `sasl-digest-md5` — SASL DIGEST-MD5 authentication (`ClientBuilder::sasl_digest_md5`).
//! * `cli` — the `zklock` command-line tool (`cargo install --path . --features cli` in a clone; add
//!   `redis`, `postgres`, `mysql` for their URLs): run a
//!   command under a lock and stop it if the lock is lost, see who holds what.
//!
//! Only `zookeeper` is on by default.
//!
//! # Curator → zklock
//!
//! | Curator | zklock |
//! |---|---|
//! | `CuratorFrameworkFactory.builder()` | [`Client::builder`] → [`ClientBuilder`] |
//! | `create().creatingParentContainersIfNeeded().withProtection().withMode(m).forPath(p)` | `client.create(p).parents_as_containers().protected().mode(m).call()` ([`Create`](zookeeper::Create)) |
//! | `delete().guaranteed()` | [`Client::delete_guaranteed`] |
//! | `transaction().forOperations(…)`, `transactionOp().check()/create()/setData()/delete()` | [`Client::multi`] with [`zookeeper::Op`]s → [`zookeeper::OpResult`]s; `guarded_multi` on a held lock for writes that commit only while the hold lives (docs/zookeeper.md) |
//! | `authorization(scheme, auth)`, `aclProvider(p)`, `ACLProvider` | [`ClientBuilder::auth`] / [`ClientBuilder::digest_auth`], [`ClientBuilder::acl_provider`], [`AclProvider`] |
//! | `ZooDefs.Ids.CREATOR_ALL_ACL`, `READ_ACL_UNSAFE`, `OPEN_ACL_UNSAFE`, `DigestAuthenticationProvider.generateDigest` | [`Acl::creator_all`], [`Acl::read_unsafe`], [`Acl::open_unsafe`], [`Acl::digest`] |
//! | `getZooKeeper().addAuthInfo(s, a)`, `getACL()`, `setACL()` | [`Client::add_auth`], [`Client::acl`], [`Client::set_acl`] |
//! | `getData().usingWatcher(w)` | [`Client::data_watch`] → [`Watch`](zookeeper::Watch) |
//! | `getChildren().usingWatcher(w)` | [`Client::children_watch`] → [`Watch`](zookeeper::Watch) |
//! | `ConnectionStateListener` | [`Client::on_connection_state`], [`Client::connection_states`] |
//! | `InterProcessMutex(client, path)` | [`InterProcessMutex::new`] |
//! | `InterProcessMutex(client, path, driver)`, `LockInternalsDriver`, `StandardLockInternalsDriver` | [`InterProcessMutex::with_driver`], [`LockDriver`], [`StandardDriver`] |
//! | `acquire()`, `acquire(time, unit)`, `release()` | [`acquire`](InterProcessMutex::acquire), [`acquire_timeout`](InterProcessMutex::acquire_timeout) (`Result<bool>`), [`release`](InterProcessMutex::release) |
//! | `acquire(0, unit)` | [`try_lock`](InterProcessMutex::try_lock) or `acquire_timeout(Duration::ZERO)` |
//! | — | [`lock`](InterProcessMutex::lock) / [`try_lock_for`](InterProcessMutex::try_lock_for) / [`try_lock_until`](InterProcessMutex::try_lock_until) → [`MutexGuard`] |
//! | `isAcquiredInThisProcess()`, `isOwnedByCurrentThread()`, `getParticipantNodes()` | [`is_acquired_in_this_process`](InterProcessMutex::is_acquired_in_this_process), [`is_owned_by_current_thread`](InterProcessMutex::is_owned_by_current_thread), [`participant_nodes`](InterProcessMutex::participant_nodes) |
//! | client-wide `ConnectionStateListener` only | per-lock [`LockHealth`]: [`health`](InterProcessMutex::health), [`health_events`](InterProcessMutex::health_events), [`on_health`](InterProcessMutex::on_health) |
//! | — | [`fencing_token`](InterProcessMutex::fencing_token) |
//! | `InterProcessReadWriteLock`, `InterProcessSemaphoreV2`, `Lease`, `SharedCount`, `InterProcessSemaphoreMutex`, `InterProcessMultiLock`, `Revoker`, `InterProcessLock` | [`InterProcessReadWriteLock`], [`InterProcessSemaphoreV2`], [`Lease`], [`SharedCount`], [`InterProcessSemaphoreMutex`], [`InterProcessMultiLock`], [`Revoker`], [`Lock`] |
//! | `LeaderLatch`, `LeaderLatchListener`, `LeaderLatch.CloseMode` | [`LeaderLatch`], [`LeaderLatch::on_change`] / [`LeaderLatch::changes`] → [`LeadershipChange`], [`CloseMode`] |
//! | `LeaderSelector`, `LeaderSelectorListener.takeLeadership` | [`LeaderSelector`], a closure taking [`Leadership`] (cooperative cancellation) |
//! | `Participant`, `getParticipants()`, `getLeader()` | [`Participant`], `participants()`, `leader()` |
//! | `ConnectionStateErrorPolicy` (`Standard…`, `Session…`) | [`ErrorPolicy`] (`Standard`, `SessionOnly`) |
//! | `org.apache.curator.retry.*` | [`ExponentialBackoffRetry`], [`BoundedExponentialBackoffRetry`], [`RetryNTimes`], [`RetryOneTime`], [`RetryUntilElapsed`], [`RetryForever`] |
//! | `TestingServer`, `TestingCluster`, `KillSession` | `testing::TestingServer`, `testing::TestingCluster`, `testing::expire_session` (feature `testing`) |
//!
//! # kazoo → zklock
//!
//! kazoo, Python's peer of Curator, has a node layout of its own; these recipes queue on it
//! byte for byte, so Rust and Python processes share one lock. Each keeps what zklock adds
//! everywhere: re-entrancy, [`LockHealth`], fencing tokens (the node's czxid), bounded calls.
//!
//! | kazoo | zklock | nodes |
//! |---|---|---|
//! | `zk.Lock(path, identifier)` | [`InterProcessMutex::kazoo`] | `<path>/<uuid hex>__lock__<seq10>`, data = identifier |
//! | `Lock(..., extra_lock_patterns=[..])` | [`InterProcessMutex::with_driver`] with [`KazooDriver::extra_lock_patterns`](zookeeper::KazooDriver::extra_lock_patterns) | also queues with `<anything><pattern><seq10>` |
//! | `zk.ReadLock` / `zk.WriteLock(path, identifier)` | [`InterProcessReadWriteLock::kazoo`] | `__rlock__` / `__lock__` |
//! | `zk.Semaphore(path, identifier, max_leases)`, `lease_holders()` | [`KazooSemaphore`](zookeeper::KazooSemaphore) → [`KazooLease`](zookeeper::KazooLease) (with [`health`](zookeeper::KazooLease::health) and a fencing token), [`KazooSemaphore::lease_holders`](zookeeper::KazooSemaphore::lease_holders) | `<path>` records `max_leases`; leases `<path>/<uuid hex>`; queue `<path>-__lock__` |
//! | `ValueError("Inconsistent max leases")` | [`Error::LeaseCountMismatch`], before taking anything | |
//! | `zk.Election(path, identifier).run(f)` | [`KazooElection::run`](zookeeper::KazooElection::run) | a kazoo lock at `<path>` |
//! | `contenders()` | [`InterProcessMutex::contenders`] (on Curator's layouts too) | |
//! | `Lock.cancel()` | [`cancel_waiters`](InterProcessMutex::cancel_waiters), [`KazooElection::cancel`](zookeeper::KazooElection::cancel) | |
//!
//! On Curator's layout, [`elect`](zookeeper::elect) is the closure-style election (`Election.run`'s shape) among
//! [`LeaderSelector`]s.
//!
//! # Errors
//!
//! Every fallible call returns [`Result`] with the one [`Error`] enum. Bad input (paths, connect
//! strings, zero timeouts, a request over the server's 1 MiB − 1 packet limit) is refused
//! before any I/O; a `Duration` too long to add to the clock means no limit.
#![warn(missing_docs, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod any;
mod core;
pub mod file;
pub mod mem;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

/// The backends [`connect`] reaches, by URL scheme: each one's feature, schemes and adapter.
/// A new backend adds its line.
const DRIVERS: &[any::Driver] = &[
    any::driver!(always "mem", ["mem"], crate::mem::any::connect),
    any::driver!(always "file", ["file"], crate::file::any::connect),
    any::driver!("zookeeper", ["zk"], crate::zookeeper::any::connect),
    any::driver!(
        "redis",
        [
            "redis",
            "rediss",
            "redis+sentinel",
            "rediss+sentinel",
            "redis+cluster",
            "rediss+cluster",
        ],
        crate::redis::any::connect
    ),
    any::driver!(
        "postgres",
        ["postgres", "postgresql"],
        crate::postgres::any::connect
    ),
    any::driver!("mysql", ["mysql", "mariadb"], crate::mysql::any::connect),
];

pub use crate::any::{
    connect, AnyClient, AnyClientBuilder, AnyLeaderLatch, AnyLease, AnyReadWriteLock, AnySemaphore,
};
pub use crate::core::channel::Receiver;
pub use crate::core::connection::ConnectionState;
pub use crate::core::defaults::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_SESSION_TIMEOUT};
pub use crate::core::error::{Error, Result};
pub use crate::core::health::{HealthEvent, LockHealth};
pub use crate::core::leadership::LeadershipChange;
pub use crate::core::lock::{ArcLockGuard, Lock, LockGuard};
pub use crate::core::multi::InterProcessMultiLock;
pub use crate::core::retry::{
    BoundedExponentialBackoffRetry, ExponentialBackoffRetry, RetryForever, RetryNTimes,
    RetryOneTime, RetryPolicy, RetryUntilElapsed,
};
pub use crate::file::FileClient;
pub use crate::mem::MemClient;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use crate::mysql::MySqlClient;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use crate::postgres::PgClient;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use crate::redis::RedisClient;
#[cfg(feature = "zookeeper")]
pub use crate::zookeeper::{
    Acl, AclProvider, Client, ClientBuilder, CloseMode, CreateMode, ErrorPolicy, InterProcessMutex,
    InterProcessReadWriteLock, InterProcessSemaphoreMutex, InterProcessSemaphoreV2, LeaderLatch,
    LeaderSelector, Leadership, Lease, LockDriver, MutexGuard, Participant, ReadLock, Revoker,
    SharedCount, StandardDriver, WriteLock,
};
