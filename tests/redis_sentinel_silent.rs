//! Redis Sentinel with one silent sentinel (a host that accepts and never answers, as one
//! powered off or partitioned away, or a frozen process): a new Client connects through the
//! others, and a running Client still follows a failover.

use std::time::{Duration, Instant};

use zklock::redis::RedisMutex;
use zklock::testing::{FaultProxy, SilentListener, TestingSentinel};
use zklock::{LockHealth, RedisClient};

mod redis_common;
use redis_common::wait_for;

/// The URL of `set` with its first sentinel replaced by `first` (`host:port`).
fn url_with_first(set: &TestingSentinel, first: &str) -> String {
    let ports = set.sentinel_ports();
    let rest: Vec<String> = ports[1..]
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    format!(
        "redis+sentinel://{first},{}/{}",
        rest.join(","),
        set.master_name()
    )
}

fn pttl(set: &TestingSentinel, port: u16, key: &str) -> i64 {
    set.nodes()
        .iter()
        .find(|n| n.port() == port)
        .and_then(|n| n.command(&["PTTL", key]).ok())
        .and_then(|t| t.parse().ok())
        .unwrap_or(-2)
}

/// The first sentinel of the URL accepts connections and never answers: a Client still
/// connects, through the next sentinel, and takes a lock on the primary. Every connection it
/// opens after the first asks the answering sentinels first.
#[test]
fn a_client_connects_past_a_silent_first_sentinel() {
    let set = TestingSentinel::start().unwrap();
    let silent = SilentListener::start().unwrap();
    let url = url_with_first(&set, &silent.addr().to_string());
    let timeout = Duration::from_secs(3);
    let began = Instant::now();
    let client = RedisClient::builder(&url)
        .connect_timeout(timeout)
        .connect();
    let took = began.elapsed();
    println!(
        "connect with a silent first sentinel (connection timeout {timeout:?}, 3 sentinels): \
         {} after {took:?}, the silent one tried {} times",
        if client.is_ok() {
            "connected"
        } else {
            "failed"
        },
        silent.accepted()
    );
    let client = client.expect("connected through the answering sentinels");
    let mutex = RedisMutex::new(&client, "past-silent").unwrap();
    let began = Instant::now();
    let guard = mutex.lock().unwrap();
    println!("first lock {:?}", began.elapsed());
    let primary = set.primary().unwrap();
    assert_ne!(
        primary.command(&["GET", "zklock:{past-silent}"]).unwrap(),
        "",
        "the grant is on the primary"
    );
    guard.release().unwrap();
    let tried = silent.accepted();
    // More connections (the pool's, a waiter's): the silent sentinel is asked last, when the
    // others do not answer, so not at all here.
    let other = RedisClient::builder(&set.url()).connect().unwrap();
    let theirs = RedisMutex::new(&other, "past-silent").unwrap();
    let held = theirs.lock().unwrap();
    let waiter = std::thread::spawn(move || {
        let g = mutex.lock().unwrap();
        g.release().unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    held.release().unwrap();
    waiter.join().unwrap();
    println!(
        "the silent sentinel tried {} times at connect, {} times after",
        tried,
        silent.accepted() - tried
    );
    assert_eq!(silent.accepted(), tried, "a silent sentinel is asked last");
}

/// A running Client holds a lock; its first sentinel goes silent (a proxy in front of it
/// stops forwarding), then the sentinels fail the primary over (`SENTINEL FAILOVER`, which
/// leaves the old primary answering as one until they reconfigure it). The keeper's primary
/// check still hears the other sentinels: the hold is renewed on the new primary and stays
/// `Held`, and a new lock is taken there.
#[test]
fn a_running_client_follows_a_failover_past_a_silent_sentinel() {
    let ttl = Duration::from_secs(6);
    let set = TestingSentinel::start().unwrap();
    let proxy = FaultProxy::start_raw(("127.0.0.1", set.sentinel_ports()[0])).unwrap();
    let url = url_with_first(&set, &proxy.connect_string());
    let client = RedisClient::builder(&url)
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .expect("connect through the sentinels");
    let mutex = RedisMutex::new(&client, "silent-failover").unwrap();
    let guard = mutex.lock().unwrap();
    let key = "zklock:{silent-failover}";
    let owner = set.primary().unwrap().command(&["GET", key]).unwrap();
    for node in set.nodes() {
        wait_for("the key on every replica", || {
            node.command(&["GET", key]).unwrap_or_default() == owner
        });
    }
    proxy.blackhole(true);
    let old = set.failover().unwrap();
    let failed_over = Instant::now();
    let new = set.wait_for_new_primary(old).unwrap();
    println!(
        "new primary {new} {:?} after the failover",
        failed_over.elapsed()
    );
    let mut last = pttl(&set, new, key);
    wait_for("a renewal on the new primary", || {
        let now = pttl(&set, new, key);
        let renewed = now > last;
        last = now;
        renewed
    });
    println!(
        "renewed on the new primary {:?} after the failover, past the silent sentinel",
        failed_over.elapsed()
    );
    assert_eq!(guard.health(), LockHealth::Held);
    guard.release().unwrap();
    let again = mutex.try_lock().unwrap().expect("free");
    assert!(pttl(&set, new, key) > 0, "taken on the new primary");
    again.release().unwrap();
    proxy.heal();
}

/// The primary is frozen (SIGSTOP) just after its connections were cut, so that a guard's drop
/// opens a new connection through the sentinels, which still name it: the drop's `ROLE` check
/// waits for the drop's bound (one second), not the operation timeout (5 s here), then the
/// release goes to the background.
#[test]
fn a_drop_through_sentinel_keeps_its_bound_against_a_frozen_primary() {
    let op = Duration::from_secs(5);
    let set = TestingSentinel::start().unwrap();
    let client = RedisClient::builder(&set.url())
        .ttl(Duration::from_secs(30))
        .operation_timeout(op)
        .connect()
        .unwrap();
    let mutex = RedisMutex::new(&client, "frozen-drop").unwrap();
    let guard = mutex.lock().unwrap();
    let primary = set.primary().unwrap();
    primary
        .command(&["CLIENT", "KILL", "TYPE", "normal"])
        .unwrap();
    let port = set.pause_primary().unwrap();
    let started = Instant::now();
    drop(guard);
    let took = started.elapsed();
    set.resume(port).unwrap();
    println!("a guard's drop with a new connection to a frozen primary: {took:?} (T = {op:?})");
    // Generous against a loaded machine: the bound is one second.
    assert!(took < Duration::from_secs(3), "the drop took {took:?}");
}
