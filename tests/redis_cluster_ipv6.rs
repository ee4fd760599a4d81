//! Redis Cluster on IPv6: every node of a `TestingRedisCluster` also listens on `::1`, and here
//! announces it (`cluster-announce-ip ::1`), so slot maps and `MOVED` answers name `::1` — a redirect carries
//! it raw, `MOVED 1234 ::1:7001`, without brackets. A Client on `redis+cluster://[::1]:P…` takes
//! a lock there, follows a `CLUSTER FAILOVER` through such a redirect and takes the lock on the
//! new primary. Skipped, saying so, where the loopback has no IPv6.

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use zklock::redis::RedisMutex;
use zklock::testing::TestingRedisCluster;
use zklock::{LockHealth, RedisClient};

const LOCK: &str = "ipv6";

fn patience() -> Duration {
    Duration::from_secs(60)
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience();
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a socket can listen on `::1`.
fn loopback_has_ipv6() -> bool {
    TcpListener::bind(("::1", 0)).is_ok()
}

#[test]
fn a_cluster_on_ipv6_is_followed_through_its_redirects() {
    if !loopback_has_ipv6() {
        println!("SKIPPED: the loopback has no IPv6 address (::1): no IPv6 cluster to test");
        return;
    }
    let cluster = TestingRedisCluster::start().unwrap();
    for node in cluster.nodes() {
        node.command(&["CONFIG", "SET", "bind", "127.0.0.1 ::1"])
            .unwrap();
        node.command(&["CONFIG", "SET", "cluster-announce-ip", "::1"])
            .unwrap();
    }
    // Every node's map names every node by `::1`.
    for node in cluster.nodes() {
        let mut seen = String::new();
        let deadline = Instant::now() + patience();
        while !(seen.lines().count() == 6 && seen.lines().all(|l| l.contains(" ::1:"))) {
            assert!(
                Instant::now() < deadline,
                "node {} does not name every node by ::1:\n{seen}",
                node.port()
            );
            thread::sleep(Duration::from_millis(50));
            seen = node.command(&["CLUSTER", "NODES"]).unwrap_or_default();
        }
    }
    let seeds: Vec<String> = cluster.nodes()[..3]
        .iter()
        .map(|n| format!("[::1]:{}", n.port()))
        .collect();
    let url = format!("redis+cluster://{}", seeds.join(","));
    let ttl = Duration::from_secs(3);
    let client = RedisClient::builder(&url)
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .expect("connect to the cluster over IPv6");
    let mutex = RedisMutex::new(&client, LOCK).unwrap();
    let key = format!("zklock:{{{LOCK}}}");
    let guard = mutex.lock().unwrap();
    let old = cluster.primary_of(&key).unwrap().port();
    let moved = cluster.nodes()[..3]
        .iter()
        .find(|n| n.port() != old)
        .map(|n| n.command(&["GET", &key]))
        .unwrap();
    println!("another primary answers a GET of the lock's key: {moved:?}");
    // The redirect names the IPv6 address raw.
    assert!(format!("{moved:?}").contains("::1:"), "{moved:?}");

    // A failover of the lock's primary: the Client's map is stale, its next command there is
    // answered `MOVED <slot> ::1:<port>`.
    let began = Instant::now();
    let mut failed_over = None;
    while failed_over.is_none() {
        if let Ok(old) = cluster.failover(&key) {
            failed_over = cluster
                .wait_for_new_primary_within(&key, old, Duration::from_secs(10))
                .ok();
        }
        assert!(began.elapsed() < patience(), "no failover");
    }
    let new = failed_over.unwrap();
    println!(
        "the lock's primary {old} failed over to {new} in {:?}",
        began.elapsed()
    );
    // The hold is renewed on the new primary (its key was replicated) and stays held.
    let pttl = |port: u16| -> i64 {
        cluster
            .node(port)
            .and_then(|n| n.command(&["PTTL", &key]))
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(-2)
    };
    let mut last = pttl(new);
    wait_for("a renewal on the new primary", || {
        let now = pttl(new);
        let renewed = now > last;
        last = now;
        renewed
    });
    assert_eq!(guard.health(), LockHealth::Held);
    guard.release().unwrap();
    assert_eq!(pttl(new), -2, "released on the new primary");
    // A new lock on the new primary, after the redirect.
    let again = mutex.try_lock().unwrap().expect("free");
    assert!(pttl(new) > 0, "taken on the new primary {new}");
    again.release().unwrap();
    println!(
        "renewed, released and taken again on the new primary {:?} after the failover",
        began.elapsed()
    );
}
