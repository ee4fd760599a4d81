//! TLS on Redis (feature `tls`): zklock against a `redis-server` with a TLS port, trusting the
//! server's CA or not, with and without a client certificate; through a Sentinel set over TLS
//! (`rediss+sentinel://`) across a failover, and on a Redis Cluster over TLS
//! (`rediss+cluster://`).
#![cfg(feature = "tls")]

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{chain, refused_by_tls};
use zklock::redis::{RedisClientBuilder, RedisMutex};
use zklock::testing::{TestingRedis, TestingRedisCluster, TestingSentinel};
use zklock::{Error, RedisClient};

fn tls_builder(server: &TestingRedis) -> RedisClientBuilder {
    RedisClient::builder(&server.tls_url().unwrap()).connect_timeout(Duration::from_secs(5))
}

fn lock_and_release(client: &RedisClient) {
    let mutex = RedisMutex::new(client, "tls").unwrap();
    let guard = mutex.lock().unwrap();
    assert!(guard.fencing_token() > 0);
    guard.release().unwrap();
}

#[test]
fn a_lock_over_tls_with_the_servers_ca() {
    let server = TestingRedis::start_tls(false).unwrap();
    let ca = server.tls().unwrap().ca_pem().to_owned();
    let client = tls_builder(&server).tls_ca_pem(&ca).connect().unwrap();
    lock_and_release(&client);
    client.close();
}

#[test]
fn a_server_signed_by_another_ca_is_refused_with_the_reason() {
    let server = TestingRedis::start_tls(false).unwrap();
    let other = server.tls().unwrap().untrusted_ca_pem().to_owned();
    let e = tls_builder(&server)
        .tls_ca_pem(&other)
        .connect()
        .expect_err("an untrusted server");
    let text = refused_by_tls(&e);
    assert!(text.contains("certificate"), "{text}");
}

#[test]
fn a_server_that_asks_for_a_client_certificate_gets_one() {
    let server = TestingRedis::start_tls(true).unwrap();
    let tls = server.tls().unwrap();
    let without = tls_builder(&server)
        .tls_ca_pem(tls.ca_pem())
        .connect()
        .expect_err("no client certificate");
    assert!(
        matches!(without, Error::ConnectFailed { .. }),
        "{}",
        chain(&without)
    );
    let client = tls_builder(&server)
        .tls_ca_pem(tls.ca_pem())
        .tls_identity_pem(tls.client_cert_pem(), tls.client_key_pem())
        .connect()
        .unwrap();
    lock_and_release(&client);
    client.close();
}

/// How long a condition may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// A Client of the TLS Sentinel set `set`, trusting its CA.
fn sentinel_client(set: &TestingSentinel, ttl: Duration) -> RedisClientBuilder {
    RedisClient::builder(&set.tls_url().unwrap())
        .tls_ca_pem(set.tls().unwrap().ca_pem())
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(5))
}

/// A lock through the sentinels over TLS, held across a `SENTINEL FAILOVER`: the holder's hold
/// is renewed on the new primary and its release there wakes the waiter of another Client
/// (within a few seconds, where the waiter's own re-check would come a third of the TTL
/// later), which is granted a higher token. The holder's grants wait for both replicas
/// (`WAIT` over TLS), so that the new primary has the hold.
#[test]
fn a_lock_through_sentinels_over_tls_follows_a_failover_and_the_release_wakes_the_waiter() {
    let set = TestingSentinel::start_tls(false).unwrap();
    // A re-check of the waiter a third of it later: 10 s.
    let ttl = Duration::from_secs(30);
    let holder = sentinel_client(&set, ttl)
        .wait_for_replicas(2, Duration::from_secs(2))
        .connect()
        .unwrap();
    let waiter = sentinel_client(&set, ttl).connect().unwrap();
    let mutex = RedisMutex::new(&holder, "tls-sentinel").unwrap();
    let guard = mutex.lock().unwrap();
    let first = guard.fencing_token();
    let (tx, rx) = mpsc::channel();
    let waiting = thread::spawn(move || {
        let m = RedisMutex::new(&waiter, "tls-sentinel").unwrap();
        let g = m.try_lock_for(PATIENCE).unwrap().expect("granted");
        tx.send((Instant::now(), g.fencing_token())).unwrap();
        g.release().unwrap();
        waiter.close();
    });
    let key = "zklock:{tls-sentinel}:queue";
    let primary = set.primary().unwrap();
    let deadline = Instant::now() + PATIENCE;
    while primary.command(&["LLEN", key]).unwrap() != "1" {
        assert!(Instant::now() < deadline, "the waiter never queued");
        thread::sleep(Duration::from_millis(10));
    }
    let old = set.failover().unwrap();
    let new = set.wait_for_new_primary(old).unwrap();
    println!("SENTINEL FAILOVER: primary {old} -> {new}");
    // The holder renews on the new primary; the waiter waits on.
    let owner_key = "zklock:{tls-sentinel}";
    let node = set.nodes().iter().find(|n| n.port() == new).unwrap();
    let mut last: i64 = node.command(&["PTTL", owner_key]).unwrap().parse().unwrap();
    assert!(last > 0, "the hold is on the new primary");
    loop {
        let now: i64 = node.command(&["PTTL", owner_key]).unwrap().parse().unwrap();
        if now > last {
            break;
        }
        last = now;
        assert!(Instant::now() < deadline, "no renewal on the new primary");
        thread::sleep(Duration::from_millis(20));
    }
    assert!(rx.try_recv().is_err(), "the waiter was granted while held");
    let released = Instant::now();
    guard.release().unwrap();
    let (granted, token) = rx.recv_timeout(PATIENCE).expect("the waiter is served");
    let gap = granted.duration_since(released);
    println!(
        "release on the new primary -> the waiter's grant: {gap:?} (tokens {first} -> {token})"
    );
    assert!(token > first);
    assert!(
        gap < Duration::from_secs(5),
        "the waiter was not woken by the release: {gap:?}"
    );
    waiting.join().unwrap();
    holder.close();
}

/// A Sentinel set or a cluster whose certificates another CA signed is refused at connect,
/// at once, with rustls's reason as the cause.
#[test]
fn sentinels_and_cluster_nodes_signed_by_another_ca_are_refused_with_the_reason() {
    let set = TestingSentinel::start_tls(false).unwrap();
    let started = Instant::now();
    let e = RedisClient::builder(&set.tls_url().unwrap())
        .tls_ca_pem(set.tls().unwrap().untrusted_ca_pem())
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .expect_err("untrusted sentinels");
    let text = refused_by_tls(&e);
    println!("sentinels, after {:?}: {text}", started.elapsed());
    assert!(text.contains("certificate"), "{text}");
    drop(set);
    let cluster = TestingRedisCluster::start_tls(false).unwrap();
    let started = Instant::now();
    let e = RedisClient::builder(&cluster.tls_url().unwrap())
        .tls_ca_pem(cluster.tls().unwrap().untrusted_ca_pem())
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .expect_err("untrusted cluster nodes");
    let text = refused_by_tls(&e);
    println!("cluster, after {:?}: {text}", started.elapsed());
    assert!(text.contains("certificate"), "{text}");
    assert_eq!(
        cluster.any_command(&["DBSIZE"]).unwrap(),
        "0",
        "nothing touched"
    );
}

/// The basic lock on a cluster over TLS: one lock per primary (the seeds are named
/// `localhost`, the other nodes reached at the IP addresses of the slot map), each held,
/// refused to another Client while held, granted to it after the release with a higher token,
/// and a waiter of another Client woken by the release.
#[test]
fn the_basic_lock_on_a_cluster_over_tls() {
    let cluster = TestingRedisCluster::start_tls(false).unwrap();
    let connect = || {
        RedisClient::builder(&cluster.tls_url().unwrap())
            .tls_ca_pem(cluster.tls().unwrap().ca_pem())
            .ttl(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .unwrap()
    };
    let (a, b) = (connect(), connect());
    let mut names: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let name = format!("tls-{i}");
        let port = cluster
            .primary_of(&format!("zklock:{{{name}}}"))
            .unwrap()
            .port();
        if !names.iter().any(|(_, p)| *p == port) {
            names.push((name, port));
        }
        if names.len() == 3 {
            break;
        }
    }
    for (name, port) in &names {
        let mutex = RedisMutex::new(&a, name).unwrap();
        let guard = mutex.lock().unwrap();
        let key = format!("zklock:{{{name}}}");
        let node = cluster.node(*port).unwrap();
        assert!(
            node.command(&["PTTL", &key])
                .unwrap()
                .parse::<i64>()
                .unwrap()
                > 0
        );
        let theirs = RedisMutex::new(&b, name).unwrap();
        assert!(theirs.try_lock().unwrap().is_none(), "{name} is held");
        let token = guard.fencing_token();
        guard.release().unwrap();
        let again = theirs.try_lock().unwrap().expect("free after the release");
        assert!(again.fencing_token() > token);
        // A waiter of `a`, woken by `b`'s release.
        let (tx, rx) = mpsc::channel();
        let (a2, name2) = (a.clone(), name.clone());
        let waiting = thread::spawn(move || {
            let m = RedisMutex::new(&a2, &name2).unwrap();
            let g = m.try_lock_for(PATIENCE).unwrap().expect("granted");
            tx.send(Instant::now()).unwrap();
            g.release().unwrap();
        });
        let queue = format!("zklock:{{{name}}}:queue");
        let deadline = Instant::now() + PATIENCE;
        while node.command(&["LLEN", &queue]).unwrap() != "1" {
            assert!(Instant::now() < deadline, "the waiter never queued");
            thread::sleep(Duration::from_millis(10));
        }
        let released = Instant::now();
        again.release().unwrap();
        let gap = rx.recv_timeout(PATIENCE).unwrap().duration_since(released);
        waiting.join().unwrap();
        println!("{name} on {port}: the waiter served {gap:?} after the release");
        assert!(
            gap < Duration::from_secs(5),
            "not woken by the release: {gap:?}"
        );
    }
    a.close();
    b.close();
}

/// A plain `redis://` connection to a port that requires TLS: the error says the server closed
/// the connection without an answer, as one that requires TLS does, and names `rediss://`.
#[test]
fn a_plain_connection_to_a_tls_port_says_tls_may_be_required() {
    let server = TestingRedis::start_tls(false).unwrap();
    let url = format!("redis://127.0.0.1:{}", server.tls_port().unwrap());
    let e = RedisClient::builder(&url)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .expect_err("a TLS port");
    let text = chain(&e);
    println!("{text}");
    assert!(text.contains("rediss://"), "{text}");
}
