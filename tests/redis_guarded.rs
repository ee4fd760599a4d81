//! Writes guarded by the hold on Redis (`guarded_multi`, `guarded_script`), against real
//! servers: applied while held; refused once the lock's key no longer names the hold (deleted,
//! taken by another, a lease's entry gone) with nothing applied; a user script's answers and
//! errors; a holder frozen past its TTL (SIGSTOP of a worker process, this test binary run
//! again) refused when it wakes and writes through its guard, while the same write through a
//! plain Redis client lands; a holder that still reads `Held` after a step of the server's
//! clock refused by the server's check; on a Redis Cluster, keys outside the lock's slot
//! refused before any I/O.
//!
//! `ZKLOCK_GUARDED_ROUNDS` sets how many times the frozen holder is tried (default 3).

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::worker::{say, Worker};
use common::*;
use zklock::redis::{
    RedisMutex, RedisOp, RedisOpResult, RedisReadWriteLock, RedisScript, RedisSemaphore, RedisValue,
};
use zklock::testing::{TestingRedis, TestingRedisCluster};
use zklock::{Error, LockHealth, RedisClient};

const WORKER: &str = "ZKLOCK_REDIS_GUARDED_WORKER";
const DATA: &str = "{ledger}:balance";
const TTL: Duration = Duration::from_secs(2);

fn rounds() -> usize {
    std::env::var("ZKLOCK_GUARDED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

fn connect(url: &str, ttl: Duration) -> RedisClient {
    RedisClient::builder(url).ttl(ttl).connect().unwrap()
}

/// The error a refusal by the server's check is: the hold lost, the key's state saying why.
fn refused_by_the_server(err: &Error, lock: &str, why: &str) {
    match err {
        Error::HoldLost { lock: l, source } if l == lock => {
            let Error::Redis(said) = &**source else {
                panic!("not the server's check: {}", chain(err))
            };
            assert!(said.contains(why), "{said}");
        }
        other => panic!("not refused: {}", chain(other)),
    }
}

#[test]
fn guarded_writes_land_while_held_and_are_refused_once_the_key_is_not_the_holds() {
    let server = TestingRedis::start().unwrap();
    let client = connect(&server.url(), Duration::from_secs(30));
    let other = connect(&server.url(), Duration::from_secs(30));
    let get = |key: &str| server.command(&["GET", key]).unwrap();
    server.command(&["SET", "{ledger}:pending", "1"]).unwrap();
    let mutex = RedisMutex::new(&client, "ledger").unwrap();

    // Not held: refused before any I/O.
    let err = mutex.guarded_multi(&[RedisOp::set(DATA, "x")]).unwrap_err();
    assert_eq!(err, Error::NotOwner);

    let guard = mutex.lock().unwrap();
    let results = guard
        .guarded_multi(&[
            RedisOp::set(DATA, "100"),
            RedisOp::delete("{ledger}:pending"),
            RedisOp::delete("{ledger}:none"),
        ])
        .unwrap();
    assert_eq!(
        results,
        [
            RedisOpResult::Set,
            RedisOpResult::Delete { existed: true },
            RedisOpResult::Delete { existed: false },
        ]
    );
    assert_eq!(get(DATA), "100");
    assert_eq!(
        server.command(&["EXISTS", "{ledger}:pending"]).unwrap(),
        "0"
    );
    // Re-entrant: the thread's hold guards the same way through the mutex.
    mutex.guarded_multi(&[RedisOp::set(DATA, "101")]).unwrap();
    assert!(guard.guarded_multi(&[]).unwrap().is_empty());

    // An operator deletes the holder's key: the hold is gone, while the holder still reads
    // `Held` (its renewals have not yet found out).
    server.command(&["DEL", "zklock:{ledger}"]).unwrap();
    assert_eq!(guard.health(), LockHealth::Held);
    let err = guard
        .guarded_multi(&[RedisOp::set(DATA, "stale")])
        .unwrap_err();
    refused_by_the_server(&err, "ledger", "is gone");
    assert_eq!(get(DATA), "101");

    // Another Client takes the lock: the key names another holder.
    let theirs = RedisMutex::new(&other, "ledger").unwrap();
    let next = theirs.try_lock().unwrap().expect("the key was deleted");
    let err = guard
        .guarded_multi(&[RedisOp::set(DATA, "stale")])
        .unwrap_err();
    refused_by_the_server(&err, "ledger", "names another holder");
    next.guarded_multi(&[RedisOp::set(DATA, "next")]).unwrap();
    assert_eq!(get(DATA), "next");
    drop(next);
    let _ = guard.release();

    // An owned guard guards the same way; once released through the lock it refuses before
    // any I/O.
    let shared = std::sync::Arc::new(RedisMutex::new(&client, "owned").unwrap());
    let owned = shared.lock_arc().unwrap();
    owned
        .guarded_multi(&[RedisOp::set("{owned}:x", "owned")])
        .unwrap();
    shared.release().unwrap();
    let err = owned
        .guarded_multi(&[RedisOp::set("{owned}:x", "released")])
        .unwrap_err();
    assert_eq!(err, Error::NotOwner);
    assert_eq!(get("{owned}:x"), "owned");
    drop(owned);

    // redis-py's layout: the key is the name itself.
    let py = RedisMutex::redis_py(&client, "py-ledger").unwrap();
    let held = py.lock().unwrap();
    held.guarded_multi(&[RedisOp::set("{py-ledger}:x", "py")])
        .unwrap();
    server
        .command(&["SET", "py-ledger", "someone-else"])
        .unwrap();
    let err = held
        .guarded_multi(&[RedisOp::set("{py-ledger}:x", "stale")])
        .unwrap_err();
    refused_by_the_server(&err, "py-ledger", "names another holder");
    assert_eq!(get("{py-ledger}:x"), "py");
    drop(held);

    // The read-write lock's halves: the writer's key, the reader's entry.
    let rw = RedisReadWriteLock::new(&client, "catalog").unwrap();
    let writing = rw.write_lock().lock().unwrap();
    writing
        .guarded_multi(&[RedisOp::set("{catalog}:v", "writer")])
        .unwrap();
    server
        .command(&["DEL", "zklock:rw:{catalog}:writer"])
        .unwrap();
    let err = writing
        .guarded_multi(&[RedisOp::set("{catalog}:v", "stale writer")])
        .unwrap_err();
    refused_by_the_server(&err, "catalog", "is gone");
    drop(writing);
    let reading = rw.read_lock().lock().unwrap();
    reading
        .guarded_multi(&[RedisOp::set("{catalog}:seen", "reader")])
        .unwrap();
    server.command(&["DEL", "zklock:rw:{catalog}"]).unwrap();
    let err = reading
        .guarded_multi(&[RedisOp::set("{catalog}:seen", "stale reader")])
        .unwrap_err();
    refused_by_the_server(&err, "catalog", "has no entry for this hold");
    assert_eq!(get("{catalog}:v"), "writer");
    assert_eq!(get("{catalog}:seen"), "reader");
    drop(reading);

    // A semaphore's lease: its entry in the set.
    let semaphore = RedisSemaphore::new(&client, "uploads", 2).unwrap();
    let lease = semaphore.acquire().unwrap();
    lease
        .guarded_multi(&[RedisOp::set("{uploads}:job", lease.id())])
        .unwrap();
    server
        .command(&["ZREM", "zklock:sem:{uploads}", lease.id()])
        .unwrap();
    let err = lease
        .guarded_multi(&[RedisOp::set("{uploads}:job", "stale")])
        .unwrap_err();
    refused_by_the_server(&err, "uploads", "has no entry for this hold");
    assert_eq!(get("{uploads}:job"), lease.id());
    drop(lease);
    client.close();
    other.close();
}

#[test]
fn a_guarded_script_runs_after_the_check_and_reports_its_errors() {
    let server = TestingRedis::start().unwrap();
    let client = connect(&server.url(), Duration::from_secs(30));
    let get = |key: &str| server.command(&["GET", key]).unwrap();
    let mutex = RedisMutex::new(&client, "ledger").unwrap();
    let add = RedisScript::new("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        .key(DATA)
        .arg("25");
    assert_eq!(mutex.guarded_script(&add).unwrap_err(), Error::NotOwner);

    let guard = mutex.lock().unwrap();
    assert_eq!(guard.guarded_script(&add).unwrap(), RedisValue::Int(25));
    assert_eq!(guard.guarded_script(&add).unwrap(), RedisValue::Int(50));
    // Its own KEYS and ARGV, numbered from 1; every kind of Lua answer.
    let echo = RedisScript::new("return {KEYS[1], KEYS[2], ARGV[1], #KEYS, #ARGV}")
        .key("{ledger}:a")
        .key("{ledger}:b")
        .arg([0u8, 255]);
    assert_eq!(
        guard.guarded_script(&echo).unwrap(),
        RedisValue::Array(vec![
            RedisValue::Data(b"{ledger}:a".to_vec()),
            RedisValue::Data(b"{ledger}:b".to_vec()),
            RedisValue::Data(vec![0, 255]),
            RedisValue::Int(2),
            RedisValue::Int(1),
        ])
    );
    let nothing = RedisScript::new("redis.call('SET', KEYS[1], 'set')").key("{ledger}:c");
    assert_eq!(guard.guarded_script(&nothing).unwrap(), RedisValue::Nil);
    assert_eq!(get("{ledger}:c"), "set");
    let status = RedisScript::new("return redis.status_reply('FINE')");
    assert_eq!(
        guard.guarded_script(&status).unwrap(),
        RedisValue::Status("FINE".into())
    );

    // Errors: raised, returned, from a command, and a script that does not compile.
    for (body, says) in [
        ("error('boom')", "boom"),
        (
            "return redis.error_reply('REFUSED by the script')",
            "REFUSED by the script",
        ),
        ("return redis.call('INCR', KEYS[1])", "not an integer"),
    ] {
        let failing = RedisScript::new(body).key("{ledger}:text");
        server.command(&["SET", "{ledger}:text", "abc"]).unwrap();
        match guard.guarded_script(&failing) {
            Err(Error::Redis(message)) => assert!(message.contains(says), "{message}"),
            other => panic!("{body}: {other:?}"),
        }
    }
    let broken = RedisScript::new("redis.call('SET', KEYS[1], 'x') this is not lua").key(DATA);
    assert!(matches!(
        guard.guarded_script(&broken),
        Err(Error::Redis(_))
    ));
    assert_eq!(
        get(DATA),
        "50",
        "a script that does not compile runs nothing"
    );
    // Redis rolls nothing back: what a script wrote before its error stays written.
    let partial = RedisScript::new("redis.call('SET', KEYS[1], 'half'); error('then failed')")
        .key("{ledger}:half");
    assert!(matches!(
        guard.guarded_script(&partial),
        Err(Error::Redis(_))
    ));
    assert_eq!(get("{ledger}:half"), "half");

    // The hold gone: the script does not run.
    server.command(&["DEL", "zklock:{ledger}"]).unwrap();
    let err = guard.guarded_script(&add).unwrap_err();
    refused_by_the_server(&err, "ledger", "is gone");
    assert_eq!(get(DATA), "50");
    drop(guard);

    // A lease and a read lock run scripts the same way.
    let semaphore = RedisSemaphore::new(&client, "uploads", 1).unwrap();
    let lease = semaphore.acquire().unwrap();
    let count = RedisScript::new("return redis.call('INCR', KEYS[1])").key("{uploads}:n");
    assert_eq!(lease.guarded_script(&count).unwrap(), RedisValue::Int(1));
    drop(lease);
    let rw = RedisReadWriteLock::new(&client, "catalog").unwrap();
    let reading = rw.read_lock().lock().unwrap();
    let read = RedisScript::new("return redis.call('GET', KEYS[1])").key("{catalog}:none");
    assert_eq!(reading.guarded_script(&read).unwrap(), RedisValue::Nil);
    drop(reading);
    client.close();
}

/// The server's check where the holder cannot know yet: the server's clock steps an hour
/// forward, the holder's key expires at once and another Client takes the lock while the
/// holder still reads `Held` (its next renewal is a third of the TTL away). Its guarded write
/// is refused by the server, not by its own health.
#[test]
fn a_holder_that_still_reads_held_is_refused_by_the_servers_check() {
    let server = TestingRedis::start_with_stepped_clock().unwrap();
    let ttl = Duration::from_secs(6);
    let (client, other) = (connect(&server.url(), ttl), connect(&server.url(), ttl));
    let mutex = RedisMutex::new(&client, "ledger").unwrap();
    let guard = mutex.lock().unwrap();
    guard.guarded_multi(&[RedisOp::set(DATA, "held")]).unwrap();
    just_renewed(&server, "zklock:{ledger}");
    server.set_clock_ahead(Duration::from_secs(3600)).unwrap();
    let theirs = RedisMutex::new(&other, "ledger").unwrap();
    let next = theirs
        .try_lock()
        .unwrap()
        .expect("the key expired with the step");
    next.guarded_multi(&[RedisOp::set(DATA, "next")]).unwrap();
    assert_eq!(guard.health(), LockHealth::Held);
    let err = guard
        .guarded_multi(&[RedisOp::set(DATA, "stale")])
        .unwrap_err();
    refused_by_the_server(&err, "ledger", "names another holder");
    assert_eq!(server.command(&["GET", DATA]).unwrap(), "next");
    drop(next);
    drop(guard);
    client.close();
    other.close();
}

/// With replicated grants, a guarded write is confirmed as a grant is: with the replica
/// stopped, it says that it was applied on the primary only.
#[test]
fn with_replicated_grants_an_unconfirmed_guarded_write_says_so() {
    let primary = TestingRedis::start().unwrap();
    let replica = TestingRedis::replica_of(&primary).unwrap();
    let client = RedisClient::builder(&primary.url())
        .ttl(Duration::from_secs(30))
        .wait_for_replicas(1, Duration::from_millis(200))
        .connect()
        .unwrap();
    let mutex = RedisMutex::new(&client, "ledger").unwrap();
    let guard = mutex.lock().unwrap();
    guard
        .guarded_multi(&[RedisOp::set(DATA, "confirmed")])
        .unwrap();
    assert_eq!(replica.command(&["GET", DATA]).unwrap(), "confirmed");
    replica.pause().unwrap();
    let unconfirmed = guard.guarded_multi(&[RedisOp::set(DATA, "primary only")]);
    replica.resume().unwrap();
    match unconfirmed {
        Err(Error::Redis(why)) => assert!(why.contains("applied on the primary"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(primary.command(&["GET", DATA]).unwrap(), "primary only");
    drop(guard);
    client.close();
}

/// The worker: holds the lock, then answers `guarded` with a write through its guard and
/// `plain` with the same write through a plain Redis client (the `redis` crate's).
#[test]
fn stale_holder_worker() {
    let Ok(url) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let client = connect(&url, TTL);
    let mutex = RedisMutex::new(&client, "ledger").unwrap();
    let guard = mutex.lock().unwrap();
    let mut plain = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    say(&format!("held {:?}", guard.health()));
    for line in std::io::stdin().lines() {
        match line.unwrap().as_str() {
            "guarded" => match guard.guarded_multi(&[RedisOp::set(DATA, "stale")]) {
                Ok(_) => say("guarded applied"),
                Err(Error::HoldLost { source, .. }) => say(&format!("guarded refused {source:?}")),
                Err(e) => say(&format!("guarded failed {e:?}")),
            },
            "plain" => match redis::cmd("SET")
                .arg(DATA)
                .arg("stale")
                .query::<()>(&mut plain)
            {
                Ok(()) => say("plain applied"),
                Err(e) => say(&format!("plain failed {e:?}")),
            },
            _ => break,
        }
    }
    drop(guard);
    client.close();
}

#[test]
fn a_holder_frozen_past_its_ttl_is_refused_by_its_guard() {
    let server = TestingRedis::start().unwrap();
    let client = connect(&server.url(), Duration::from_secs(30));
    let mutex = RedisMutex::new(&client, "ledger").unwrap();
    let rounds = rounds();
    let mut refusals = Vec::new();
    for round in 0..rounds {
        let mut worker = Worker::start("stale_holder_worker", WORKER, &server.url());
        assert_eq!(worker.expect("held"), "Held");
        worker.signal("-STOP");
        let stopped = Instant::now();
        // The server expires the frozen holder's key; the next holder writes.
        let next = mutex
            .try_lock_for(TTL * 10 * timing())
            .unwrap()
            .expect("the frozen holder's key expired");
        let fresh = format!("round {round}");
        next.guarded_multi(&[RedisOp::set(DATA, &fresh)]).unwrap();
        while stopped.elapsed() < TTL * 5 / 4 {
            thread::sleep(Duration::from_millis(50));
        }
        // The order waits in the pipe: the holder writes the moment it wakes, before its
        // keeper thread has renewed anything.
        worker.tell("guarded");
        worker.signal("-CONT");
        let answer = worker.expect("guarded");
        assert!(
            answer.starts_with("refused"),
            "round {round}: the woken holder's guarded write was not refused: {answer}"
        );
        assert_eq!(
            server.command(&["GET", DATA]).unwrap(),
            fresh,
            "round {round}: a stale write landed"
        );
        refusals.push(answer);
        // What the guard prevents: the same write through a plain client overwrites the next
        // holder's data.
        worker.tell("plain");
        assert_eq!(worker.expect("plain"), "applied", "round {round}");
        assert_eq!(server.command(&["GET", DATA]).unwrap(), "stale");
        assert_eq!(next.health(), LockHealth::Held);
        drop(next);
        worker.tell("exit");
        let status = worker.child.wait().unwrap();
        assert!(
            status.success(),
            "round {round}: the worker failed: {status}"
        );
    }
    eprintln!(
        "guarded writes of a holder frozen past its TTL: {} of {rounds} refused ({refusals:?})",
        refusals.len()
    );
    assert_eq!(refusals.len(), rounds);
    client.close();
}

/// On a cluster a guarded write runs on the primary of the lock's slot: keys of another slot
/// are refused before any I/O, keys with the lock's hash tag are written there.
#[test]
fn on_a_cluster_keys_outside_the_locks_slot_are_refused_before_any_io() {
    let cluster = TestingRedisCluster::start().unwrap();
    let client = connect(&cluster.url(), Duration::from_secs(30));
    let mutex = RedisMutex::new(&client, "ledger").unwrap();
    assert_ne!(
        cluster.slot_of("balance").unwrap(),
        cluster.slot_of("zklock:{ledger}").unwrap()
    );
    // Bad input comes first: refused even without a hold.
    let outside = [
        RedisOp::set("{ledger}:ok", "1"),
        RedisOp::set("balance", "1"),
    ];
    assert!(matches!(
        mutex.guarded_multi(&outside),
        Err(Error::InvalidArgument(_))
    ));
    let guard = mutex.lock().unwrap();
    match guard.guarded_multi(&outside) {
        Err(Error::InvalidArgument(why)) => {
            println!("refused: {why}");
            assert!(
                why.contains("\"balance\"") && why.contains("hash tag"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
    let script = RedisScript::new("return redis.call('SET', KEYS[1], 'x')").key("elsewhere");
    assert!(matches!(
        guard.guarded_script(&script),
        Err(Error::InvalidArgument(_))
    ));
    let get = |key: &str| {
        cluster
            .primary_of(key)
            .unwrap()
            .command(&["GET", key])
            .unwrap()
    };
    assert_eq!(get("{ledger}:ok"), "", "nothing of a refused call was sent");
    assert_eq!(get("balance"), "");

    guard
        .guarded_multi(&[RedisOp::set("{ledger}:balance", "100")])
        .unwrap();
    assert_eq!(get("{ledger}:balance"), "100");
    let add = RedisScript::new("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        .key("{ledger}:balance")
        .arg("5");
    assert_eq!(guard.guarded_script(&add).unwrap(), RedisValue::Int(105));
    // The server's check runs on the lock's primary there too.
    cluster
        .primary_of("zklock:{ledger}")
        .unwrap()
        .command(&["DEL", "zklock:{ledger}"])
        .unwrap();
    let err = guard
        .guarded_multi(&[RedisOp::set("{ledger}:balance", "stale")])
        .unwrap_err();
    refused_by_the_server(&err, "ledger", "is gone");
    assert_eq!(get("{ledger}:balance"), "105");
    drop(guard);

    // A lease and a write lock, with their names' tags.
    let semaphore = RedisSemaphore::new(&client, "uploads", 2).unwrap();
    let lease = semaphore.acquire().unwrap();
    lease
        .guarded_multi(&[RedisOp::set("{uploads}:job", "1")])
        .unwrap();
    assert!(matches!(
        lease.guarded_multi(&[RedisOp::set("{ledger}:job", "1")]),
        Err(Error::InvalidArgument(_))
    ));
    drop(lease);
    let rw = RedisReadWriteLock::new(&client, "catalog").unwrap();
    let writing = rw.write_lock().lock().unwrap();
    writing
        .guarded_multi(&[RedisOp::set("{catalog}:v", "2")])
        .unwrap();
    assert_eq!(get("{catalog}:v"), "2");
    drop(writing);
    client.close();
}
