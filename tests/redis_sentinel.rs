//! Redis Sentinel (`redis+sentinel://`) against a real set (`TestingSentinel`: a primary, two
//! replicas, three sentinels): a failover under a holder and its waiters, a failover to a
//! replica that missed the holder's key, a demotion by `SENTINEL FAILOVER`, and bad input.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use zklock::redis::RedisMutex;
use zklock::testing::{TestingRedis, TestingSentinel};
use zklock::{ConnectionState, Error, LockHealth, RedisClient};

mod redis_common;
use redis_common::{patience, wait_for};

fn client(set: &TestingSentinel, ttl: Duration) -> RedisClient {
    RedisClient::builder(&set.url())
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .expect("connect through the sentinels")
}

/// The length of `name`'s queue on the node `set` names primary now.
fn queued(set: &TestingSentinel, name: &str) -> usize {
    let key = format!("zklock:{{{name}}}:queue");
    set.primary()
        .and_then(|p| p.command(&["LLEN", &key]))
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Waits until every node but `except` has `key` as `value` (replicated).
fn replicated(set: &TestingSentinel, key: &str, value: &str) {
    for node in set.nodes() {
        wait_for("the key to reach every replica", || {
            node.command(&["GET", key]).unwrap_or_default() == value
        });
    }
}

fn pttl(set: &TestingSentinel, port: u16, key: &str) -> i64 {
    set.nodes()
        .iter()
        .find(|n| n.port() == port)
        .unwrap()
        .command(&["PTTL", key])
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits for a renewal of `key` on the node on `port` (its TTL set again there).
fn renewed_on(set: &TestingSentinel, port: u16, key: &str) {
    let mut last = pttl(set, port, key);
    wait_for("a renewal on the new primary", || {
        let now = pttl(set, port, key);
        let renewed = now > last;
        last = now;
        renewed
    });
}

/// Two waiters of other Clients, each taking the lock in a thread of its own and reporting
/// when it was granted (and its token) before releasing it 50 ms later.
type Served = (mpsc::Receiver<(Instant, u64)>, Vec<thread::JoinHandle<()>>);

fn waiters(set: &TestingSentinel, name: &str, ttl: Duration) -> Served {
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for _ in 0..2 {
        let (c, tx, name) = (client(set, ttl), tx.clone(), name.to_owned());
        threads.push(thread::spawn(move || {
            let m = RedisMutex::new(&c, &name).unwrap();
            let g = m.try_lock_for(patience()).unwrap().expect("granted");
            tx.send((Instant::now(), g.fencing_token())).unwrap();
            thread::sleep(Duration::from_millis(50));
            g.release().unwrap();
        }));
    }
    (rx, threads)
}

/// The primary is killed while a lock is held and two waiters wait. The Client follows the
/// sentinels to the new primary: the holder's renewals go on there (its key was replicated,
/// so it still holds: `Suspended` during the failover, `Held` after), the connection state
/// goes `Suspended` → `Reconnected`, and when the holder releases, the waiters — subscribed
/// again on the new primary — are served there one after the other, each woken by its
/// message (well within the re-check interval of a third of the TTL).
#[test]
fn a_killed_primary_is_followed_and_the_waiters_are_served_by_the_new_one() {
    let ttl = Duration::from_secs(10);
    let mut set = TestingSentinel::start().unwrap();
    let a = client(&set, ttl);
    let states = a.connection_states();
    let mutex = RedisMutex::new(&a, "followed").unwrap();
    let guard = mutex.lock().unwrap();
    let (rx, threads) = waiters(&set, "followed", ttl);
    wait_for("two waiters queued", || queued(&set, "followed") == 2);
    let owner = set
        .primary()
        .unwrap()
        .command(&["GET", "zklock:{followed}"])
        .unwrap();
    replicated(&set, "zklock:{followed}", &owner);
    let old = set.kill_primary().unwrap();
    let killed = Instant::now();
    let new = set.wait_for_new_primary(old).unwrap();
    println!("new primary {new} {:?} after the kill", killed.elapsed());
    renewed_on(&set, new, "zklock:{followed}");
    assert_eq!(guard.health(), LockHealth::Held);
    let seen: Vec<ConnectionState> = states.try_iter().collect();
    println!(
        "renewed on the new primary {:?} after the kill; connection states {seen:?}",
        killed.elapsed()
    );
    // The keeper's renewals that met the outage said so (none may have: the outage can fall
    // between two of them).
    if seen.contains(&ConnectionState::Suspended) {
        assert_eq!(seen.last(), Some(&ConnectionState::Reconnected));
    }
    assert_eq!(
        set.primary()
            .unwrap()
            .command(&["GET", "zklock:{followed}"])
            .unwrap(),
        owner,
        "the new primary has the holder's key"
    );
    let token = guard.fencing_token();
    let released = Instant::now();
    guard.release().unwrap();
    let (first, t1) = rx
        .recv_timeout(patience())
        .expect("the first waiter served");
    let (second, t2) = rx
        .recv_timeout(patience())
        .expect("the second waiter served");
    let (w1, w2) = (first - released, second - first);
    println!("waiters served {w1:?} after the release and {w2:?} after the first");
    assert!(t1 > token && t2 > t1, "tokens {token} {t1} {t2}");
    // Each was woken by its message, not by its re-check (a third of the TTL, 3.3 s).
    assert!(w1 < ttl / 3 && w2 < ttl / 3, "{w1:?} {w2:?}");
    for t in threads {
        t.join().unwrap();
    }
}

/// The primary is paused (SIGSTOP: it accepts connections and answers nothing, as a node cut
/// off by a partition) under a holder with two waiters queued. The sentinels promote a
/// replica; the Client's connections to the silent old primary — the keeper's, the pool's,
/// the subscriber's and the waiting slots' — are opened again on the new one as soon as any
/// of them finds the primary moved, so that when the holder releases, the waiters are woken
/// there by their messages, not by their re-check a third of the TTL later.
#[test]
fn a_paused_primary_is_replaced_and_the_waiters_hear_the_new_one() {
    let ttl = Duration::from_secs(10);
    let set = TestingSentinel::start().unwrap();
    let a = client(&set, ttl);
    let mutex = RedisMutex::new(&a, "paused").unwrap();
    let guard = mutex.lock().unwrap();
    let (rx, threads) = waiters(&set, "paused", ttl);
    wait_for("two waiters queued", || queued(&set, "paused") == 2);
    let owner = set
        .primary()
        .unwrap()
        .command(&["GET", "zklock:{paused}"])
        .unwrap();
    replicated(&set, "zklock:{paused}", &owner);
    let old = set.pause_primary().unwrap();
    let paused = Instant::now();
    let new = set.wait_for_new_primary(old).unwrap();
    println!("new primary {new} {:?} after the pause", paused.elapsed());
    renewed_on(&set, new, "zklock:{paused}");
    println!(
        "renewed on the new primary {:?} after the pause",
        paused.elapsed()
    );
    assert_eq!(guard.health(), LockHealth::Held);
    let released = Instant::now();
    guard.release().unwrap();
    let (first, _) = rx
        .recv_timeout(patience())
        .expect("the first waiter served");
    let (second, _) = rx
        .recv_timeout(patience())
        .expect("the second waiter served");
    let (w1, w2) = (first - released, second - first);
    println!("waiters served {w1:?} after the release and {w2:?} after the first");
    assert!(w1 < ttl / 3 && w2 < ttl / 3, "{w1:?} {w2:?}");
    for t in threads {
        t.join().unwrap();
    }
    set.resume(old).unwrap();
}

/// The new primary never got the holder's key (both replicas missed it): the holder's first
/// renewal there finds it gone and reads `Lost`, and a waiter is granted there with a higher
/// token.
#[test]
fn a_failover_to_a_replica_that_missed_the_key_reads_lost_and_serves_the_waiter() {
    let ttl = Duration::from_secs(10);
    let mut set = TestingSentinel::start().unwrap();
    let a = client(&set, ttl);
    let mutex = RedisMutex::new(&a, "missed").unwrap();
    let guard = mutex.lock().unwrap();
    let owner = set
        .primary()
        .unwrap()
        .command(&["GET", "zklock:{missed}"])
        .unwrap();
    replicated(&set, "zklock:{missed}", &owner);
    // The replicas lose the grant, as replicas the primary had not yet reached would.
    let primary = set.primary().unwrap().port();
    for node in set.nodes().iter().filter(|n| n.port() != primary) {
        node.command(&["CONFIG", "SET", "replica-read-only", "no"])
            .unwrap();
        node.command(&["DEL", "zklock:{missed}"]).unwrap();
    }
    let b = client(&set, ttl);
    let theirs = RedisMutex::new(&b, "missed").unwrap();
    let old = set.kill_primary().unwrap();
    let killed = Instant::now();
    set.wait_for_new_primary(old).unwrap();
    let taken = theirs.try_lock_for(patience()).unwrap().expect("granted");
    println!(
        "granted on the new primary {:?} after the kill",
        killed.elapsed()
    );
    assert!(taken.fencing_token() > guard.fencing_token());
    wait_for("the old holder to read Lost", || {
        guard.health() == LockHealth::Lost
    });
    println!("old holder Lost {:?} after the kill", killed.elapsed());
    assert!(matches!(guard.release(), Err(Error::LockLost)));
    taken.release().unwrap();
}

/// `SENTINEL FAILOVER` demotes the running primary: its connections are closed, and the
/// Client's next calls and renewals go to the new primary.
#[test]
fn a_demoted_primary_is_left_for_the_new_one() {
    // Longer than the failover: renewals the old primary took after the promotion are lost.
    let ttl = Duration::from_secs(10);
    let set = TestingSentinel::start().unwrap();
    let a = client(&set, ttl);
    let mutex = RedisMutex::new(&a, "demoted").unwrap();
    let guard = mutex.lock().unwrap();
    let owner = set
        .primary()
        .unwrap()
        .command(&["GET", "zklock:{demoted}"])
        .unwrap();
    replicated(&set, "zklock:{demoted}", &owner);
    let old = set.failover().unwrap();
    let new = set.wait_for_new_primary(old).unwrap();
    renewed_on(&set, new, "zklock:{demoted}");
    assert_eq!(guard.health(), LockHealth::Held);
    guard.release().unwrap();
    // Calls go to the new primary.
    let again = mutex.try_lock().unwrap().expect("free");
    assert!(pttl(&set, new, "zklock:{demoted}") > 0);
    again.release().unwrap();
}

/// Bad input: a sentinel URL without the primary's name is refused before any I/O; a primary
/// name no sentinel knows, and a "sentinel" that is a plain Redis server, are refused at
/// connect with their cause, before any lock is touched.
#[test]
fn bad_sentinel_urls_are_refused_with_their_cause() {
    for url in [
        "redis+sentinel://127.0.0.1:1",
        "redis+sentinel://127.0.0.1:1/",
    ] {
        match RedisClient::connect(url) {
            Err(Error::InvalidArgument(why)) => {
                println!("{url}: {why}");
                assert!(why.contains("names the primary"), "{why}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    let set = TestingSentinel::start().unwrap();
    let unknown = set.url().replace("/zklock", "/nosuch");
    match RedisClient::builder(&unknown)
        .connect_timeout(Duration::from_secs(2))
        .connect()
    {
        Err(Error::ConnectFailed { cause, .. }) => {
            let why = cause.to_string();
            println!("{unknown}: {why}");
            assert!(why.contains("knows no primary named \"nosuch\""), "{why}");
        }
        other => panic!("{other:?}"),
    }
    let plain = TestingRedis::start().unwrap();
    let url = format!("redis+sentinel://127.0.0.1:{}/zklock", plain.port());
    match RedisClient::builder(&url)
        .connect_timeout(Duration::from_secs(2))
        .connect()
    {
        Err(Error::ConnectFailed { cause, .. }) => {
            let why = cause.to_string();
            println!("{url}: {why}");
            assert!(why.contains("sentinel 127.0.0.1:"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        plain.command(&["KEYS", "zklock:*"]).unwrap(),
        "",
        "no lock touched"
    );
}

/// `zklock::connect` takes the sentinel URL too.
#[test]
fn any_client_connects_through_the_sentinels() {
    let set = TestingSentinel::start().unwrap();
    let any = zklock::connect(&set.url()).unwrap();
    assert_eq!(any.backend(), "redis");
    let m = any.mutex("any").unwrap();
    m.acquire().unwrap();
    assert_ne!(
        set.primary()
            .unwrap()
            .command(&["GET", "zklock:{any}"])
            .unwrap(),
        ""
    );
    m.release().unwrap();
}
