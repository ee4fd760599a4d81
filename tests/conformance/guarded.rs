//! Writes guarded by the lock, on every backend that offers them: a holder process pauses
//! (SIGSTOP) past its session or TTL, the server frees its lock, the next holder takes it and
//! writes; the paused holder is woken with a write through its guard waiting for it, and the
//! write is refused ([`Error::HoldLost`]) — the next holder's value stays.
//!
//! A guarded write is each backend's own call (ZooKeeper's `guarded_multi` of `Op`s, Redis's
//! of `RedisOp`s, PostgreSQL's and MySQL's `guarded_transaction` of statements), so each
//! backend is one small [`Guarded`] hook here: hold a lock, write one value through the hold,
//! read it back. To add one: implement [`Guarded`] for it — `start` starts its server with what
//! the write needs (a table), if the backend's own start is not enough; `hold` connects with
//! the session given, takes the lock `name` and keeps it; `write` runs the backend's guarded
//! form of "set the protected value"; `read` reads the value on the same Client — and add one
//! `guarded!` line at the end of this file. The scenario then runs on it unchanged.
//!
//! `ZKLOCK_GUARDED_ROUNDS` sets how many times each backend's paused holder is tried
//! (default 3).

use std::thread;
use std::time::{Duration, Instant};

use crate::backends::{self, Backend, Opts, Server};
use crate::common::worker::{say, Worker};
use zklock::{Error, Result};

/// The session (or TTL) of the paused holder: it is paused for longer.
const SESSION: Duration = Duration::from_secs(2);

/// The environment variable that makes this test binary a guarded holder: `URL NAME`.
const WORKER: &str = "ZKLOCK_CONFORMANCE_GUARDED_WORKER";

/// A backend's guarded writes, for the scenario.
pub trait Guarded: Sync {
    /// The backend, whose throwaway server the scenario starts.
    fn backend(&self) -> &dyn Backend;
    /// Starts a throwaway server, ready for [`GuardedHold::write`].
    fn start(&self) -> Box<dyn Server> {
        self.backend().start()
    }
    /// How long the holder stays paused: past its session, and past the moment the server has
    /// freed its lock (where the server notices a silent session only after its timeout).
    fn paused_for(&self) -> Duration {
        SESSION * 5 / 4
    }
    /// Connects to `url` with `session` as the session timeout (the TTL), takes the lock
    /// `name` (waiting at most `within`) and keeps it until dropped.
    fn hold(
        &self,
        url: &str,
        name: &str,
        session: Duration,
        within: Duration,
    ) -> Box<dyn GuardedHold>;
}

/// A hold of the lock that writes through its guard.
pub trait GuardedHold {
    /// Sets the value the lock protects, through the guard: `Ok`, or why it was refused.
    fn write(&self, value: &str) -> Result<()>;
    /// The value the lock protects, as the server has it now.
    fn read(&self) -> Vec<u8>;
}

fn rounds() -> usize {
    std::env::var("ZKLOCK_GUARDED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// The holder process (this binary run again as `guarded::BACKEND::guarded_worker`): holds
/// the lock, writes through its guard, says `held`, then answers each `write VALUE` on its
/// standard input with `applied` or `refused ERROR`.
pub fn guarded_worker(g: &dyn Guarded) {
    let Ok(args) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let (url, name) = args.split_once(' ').unwrap();
    let hold = g.hold(url, name, SESSION, crate::common::patience());
    hold.write("first holder").unwrap();
    say("held");
    for line in std::io::stdin().lines() {
        let line = line.unwrap();
        let Some(value) = line.strip_prefix("write ") else {
            break;
        };
        match hold.write(value) {
            Ok(()) => say("wrote applied"),
            Err(e @ Error::HoldLost { .. }) => say(&format!("wrote refused {e:?}")),
            Err(e) => say(&format!("wrote failed {e:?}")),
        }
    }
}

/// A holder paused past its session writes through its guard when it wakes: refused, every
/// round, and the next holder's value stays.
pub fn paused_holder_is_refused(g: &dyn Guarded) {
    let b = g.backend();
    let server = g.start();
    let url = server.url();
    let rounds = rounds();
    let mut refused = 0;
    for round in 0..rounds {
        let name = format!("guarded{round}");
        let test = format!("guarded::{}::guarded_worker", b.name());
        let mut worker = Worker::start(&test, WORKER, &format!("{url} {name}"));
        worker.expect("held");
        worker.signal("-STOP");
        let paused = Instant::now();
        let next = g.hold(
            &url,
            &name,
            Opts::default().session,
            crate::common::patience(),
        );
        let fresh = format!("next holder, round {round}");
        next.write(&fresh).unwrap();
        while paused.elapsed() < g.paused_for() {
            thread::sleep(Duration::from_millis(50));
        }
        // The write waits in the pipe: the holder sends it the moment it wakes.
        worker.tell("write stale");
        worker.signal("-CONT");
        let answer = worker.expect("wrote ");
        assert!(
            answer.starts_with("refused"),
            "{} round {round}: the woken holder's guarded write was not refused: {answer}",
            b.name()
        );
        assert_eq!(
            next.read(),
            fresh.as_bytes(),
            "{} round {round}: a stale write landed",
            b.name()
        );
        refused += 1;
        worker.tell("exit");
        let status = worker.child.wait().unwrap();
        assert!(
            status.success(),
            "round {round}: the worker failed: {status}"
        );
    }
    println!(
        "{}: guarded writes of a holder paused past its session: {refused} of {rounds} refused",
        b.name()
    );
    assert_eq!(refused, rounds);
}

/// ZooKeeper: `InterProcessMutex::guarded_multi` of a `set_data` on a node beside the lock.
pub struct ZooKeeper;

struct ZkHold {
    mutex: zklock::InterProcessMutex,
    client: zklock::Client,
    data: String,
}

impl Guarded for ZooKeeper {
    fn backend(&self) -> &dyn Backend {
        &backends::ZooKeeper
    }
    fn hold(
        &self,
        url: &str,
        name: &str,
        session: Duration,
        within: Duration,
    ) -> Box<dyn GuardedHold> {
        let rest = url.strip_prefix("zk://").expect("a zk:// URL");
        let (hosts, chroot) = rest.split_once('/').unwrap_or((rest, ""));
        let mut builder = zklock::Client::builder(hosts).session_timeout(session);
        if !chroot.is_empty() {
            builder = builder.namespace(chroot);
        }
        let client = builder.connect().unwrap();
        let data = format!("/{name}-data");
        match client.create(&data).parents_as_containers().call() {
            Ok(_) | Err(Error::NodeExists(_)) => {}
            Err(e) => panic!("create {data}: {e}"),
        }
        let mutex = zklock::InterProcessMutex::new(&client, &format!("/{name}")).unwrap();
        assert!(mutex.acquire_timeout(within).unwrap(), "not granted");
        Box::new(ZkHold {
            mutex,
            client,
            data,
        })
    }
}

impl GuardedHold for ZkHold {
    fn write(&self, value: &str) -> Result<()> {
        let op = zklock::zookeeper::Op::set_data(&self.data, value.as_bytes());
        self.mutex.guarded_multi(&[op]).map(drop)
    }
    fn read(&self) -> Vec<u8> {
        self.client.data(&self.data).unwrap().0
    }
}

/// Redis (one server, or a Cluster): `RedisMutex::guarded_multi` of a `SET` of a key with the
/// lock's hash tag.
#[cfg(feature = "redis")]
pub struct Redis(pub &'static dyn Backend);

#[cfg(feature = "redis")]
struct RedisHold {
    mutex: zklock::redis::RedisMutex,
    data: String,
}

#[cfg(feature = "redis")]
impl Guarded for Redis {
    fn backend(&self) -> &dyn Backend {
        self.0
    }
    fn hold(
        &self,
        url: &str,
        name: &str,
        session: Duration,
        within: Duration,
    ) -> Box<dyn GuardedHold> {
        let client = zklock::RedisClient::builder(url)
            .session_timeout(session)
            .connect()
            .unwrap();
        let mutex = zklock::redis::RedisMutex::new(&client, name).unwrap();
        assert!(mutex.acquire_timeout(within).unwrap(), "not granted");
        Box::new(RedisHold {
            mutex,
            data: format!("{{{name}}}:data"),
        })
    }
}

#[cfg(feature = "redis")]
impl GuardedHold for RedisHold {
    fn write(&self, value: &str) -> Result<()> {
        let op = zklock::redis::RedisOp::set(&self.data, value);
        self.mutex.guarded_multi(&[op]).map(drop)
    }
    fn read(&self) -> Vec<u8> {
        let get =
            zklock::redis::RedisScript::new("return redis.call('GET', KEYS[1])").key(&self.data);
        match self.mutex.guarded_script(&get).unwrap() {
            zklock::redis::RedisValue::Data(value) => value,
            other => panic!("{other:?}"),
        }
    }
}

/// PostgreSQL: `PgMutex::guarded_transaction` of an upsert into a table.
#[cfg(feature = "postgres")]
pub struct Postgres;

#[cfg(feature = "postgres")]
struct PgHold {
    mutex: zklock::postgres::PgMutex,
    key: String,
}

#[cfg(feature = "postgres")]
impl Guarded for Postgres {
    fn backend(&self) -> &dyn Backend {
        &backends::Postgres
    }
    fn start(&self) -> Box<dyn Server> {
        let server = zklock::testing::TestingPostgres::start().expect("start PostgreSQL");
        server
            .sql("CREATE TABLE IF NOT EXISTS zklock_guarded (k text PRIMARY KEY, v text)")
            .unwrap();
        Box::new(server)
    }
    /// The server ends a silent session (`idle_session_timeout`) some time after its timeout.
    fn paused_for(&self) -> Duration {
        SESSION * 5 / 2
    }
    fn hold(
        &self,
        url: &str,
        name: &str,
        session: Duration,
        within: Duration,
    ) -> Box<dyn GuardedHold> {
        let client = zklock::PgClient::builder(url)
            .session_timeout(session)
            .connect()
            .unwrap();
        let mutex = zklock::postgres::PgMutex::new(&client, name).unwrap();
        assert!(mutex.acquire_timeout(within).unwrap(), "not granted");
        Box::new(PgHold {
            mutex,
            key: name.to_owned(),
        })
    }
}

#[cfg(feature = "postgres")]
impl GuardedHold for PgHold {
    fn write(&self, value: &str) -> Result<()> {
        let upsert = zklock::postgres::PgStatement::new(
            "INSERT INTO zklock_guarded (k, v) VALUES ($1, $2) \
             ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
        )
        .bind(self.key.as_str())
        .bind(value);
        self.mutex.guarded_transaction(&[upsert]).map(drop)
    }
    fn read(&self) -> Vec<u8> {
        let select =
            zklock::postgres::PgStatement::new("SELECT v FROM zklock_guarded WHERE k = $1")
                .bind(self.key.as_str());
        let rows = self.mutex.guarded_transaction(&[select]).unwrap();
        match rows[0].rows() {
            [row] => match &row[..] {
                [zklock::postgres::PgValue::Text(v)] => v.clone().into_bytes(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
}

/// MySQL on MariaDB, in the `GET_LOCK` mode or the table mode: `MySqlMutex::guarded_transaction`
/// of an upsert into a table.
#[cfg(feature = "mysql")]
pub struct MySql(pub &'static dyn Backend, pub zklock::mysql::MySqlMode);

#[cfg(feature = "mysql")]
struct MySqlHold {
    mutex: zklock::mysql::MySqlMutex,
    key: String,
}

/// The server's URL in the mode of the hook (the table mode's, `?lock_mode=table`).
#[cfg(feature = "mysql")]
struct MySqlServer(zklock::testing::TestingMariaDb, zklock::mysql::MySqlMode);

#[cfg(feature = "mysql")]
impl Server for MySqlServer {
    fn url(&self) -> String {
        match self.1 {
            zklock::mysql::MySqlMode::Table => format!("{}?lock_mode=table", self.0.url()),
            _ => self.0.url(),
        }
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
}

#[cfg(feature = "mysql")]
impl Guarded for MySql {
    fn backend(&self) -> &dyn Backend {
        self.0
    }
    fn start(&self) -> Box<dyn Server> {
        let server = zklock::testing::TestingMariaDb::start().expect("start MariaDB");
        let out = std::process::Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", server.socket().display()))
            .args(["-uroot", "zklock", "-e"])
            .arg(
                "CREATE TABLE IF NOT EXISTS zklock_guarded (k VARCHAR(255) PRIMARY KEY, v TEXT) \
                 ENGINE=InnoDB",
            )
            .output()
            .expect("the mariadb client runs");
        assert!(
            out.status.success(),
            "create the table: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Box::new(MySqlServer(server, self.1))
    }
    /// The server ends a silent session (`wait_timeout`) some time after its timeout.
    fn paused_for(&self) -> Duration {
        SESSION * 5 / 2
    }
    fn hold(
        &self,
        url: &str,
        name: &str,
        session: Duration,
        within: Duration,
    ) -> Box<dyn GuardedHold> {
        let client = zklock::MySqlClient::builder(url)
            .session_timeout(session)
            .connect()
            .unwrap();
        assert_eq!(client.mode(), self.1);
        let mutex = zklock::mysql::MySqlMutex::new(&client, name).unwrap();
        assert!(mutex.acquire_timeout(within).unwrap(), "not granted");
        Box::new(MySqlHold {
            mutex,
            key: name.to_owned(),
        })
    }
}

#[cfg(feature = "mysql")]
impl GuardedHold for MySqlHold {
    fn write(&self, value: &str) -> Result<()> {
        let upsert = zklock::mysql::MySqlStatement::new(
            "INSERT INTO zklock_guarded (k, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)",
        )
        .bind(self.key.as_str())
        .bind(value);
        self.mutex.guarded_transaction(&[upsert]).map(drop)
    }
    fn read(&self) -> Vec<u8> {
        let select = zklock::mysql::MySqlStatement::new("SELECT v FROM zklock_guarded WHERE k = ?")
            .bind(self.key.as_str());
        let rows = self.mutex.guarded_transaction(&[select]).unwrap();
        match rows[0].rows() {
            [row] => match &row[..] {
                [zklock::mysql::MySqlValue::Text(v)] => v.clone().into_bytes(),
                [zklock::mysql::MySqlValue::Bytes(v)] => v.clone(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
}

/// The scenario and its worker for one backend, in a module named after it.
macro_rules! guarded {
    ($name:ident => $hook:expr) => {
        mod $name {
            const G: &dyn super::Guarded = &$hook;

            #[test]
            fn paused_holder_is_refused_by_its_guard() {
                super::paused_holder_is_refused(G)
            }
            /// Not a scenario: the holder process of the one above.
            #[test]
            fn guarded_worker() {
                super::guarded_worker(G)
            }
        }
    };
}

// The backends that offer guarded writes: one line each.
guarded!(zookeeper => super::ZooKeeper);
#[cfg(feature = "redis")]
guarded!(redis => super::Redis(&crate::backends::Redis));
#[cfg(feature = "redis")]
guarded!(redis_cluster => super::Redis(&crate::backends::RedisCluster));
#[cfg(feature = "postgres")]
guarded!(postgres => super::Postgres);
#[cfg(feature = "mysql")]
guarded!(mariadb => super::MySql(&crate::backends::Mariadb, zklock::mysql::MySqlMode::GetLock));
#[cfg(feature = "mysql")]
guarded!(
    mariadb_table => super::MySql(&crate::backends::MariadbTable, zklock::mysql::MySqlMode::Table)
);
