//! Redis Cluster (`redis+cluster://`) against a real cluster (`TestingRedisCluster`: three
//! primaries, three replicas): locks routed to the primary of their slot, a killed primary
//! whose replica missed the grant (the fence refuses the old holder), a `CLUSTER FAILOVER`
//! the holder follows through `MOVED`, and bad input.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use zklock::redis::RedisMutex;
use zklock::testing::{FencedRegister, TestingRedis, TestingRedisCluster};
use zklock::{Error, LockHealth, RedisClient};

mod redis_common;
use redis_common::{held_then_handed_over, patience, wait_for};

fn client(cluster: &TestingRedisCluster, ttl: Duration) -> RedisClient {
    RedisClient::builder(&cluster.url())
        .ttl(ttl)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .expect("connect to the cluster")
}

fn holder_key(name: &str) -> String {
    format!("zklock:{{{name}}}")
}

/// The length of `name`'s queue on the node on `port`.
fn queued(cluster: &TestingRedisCluster, port: u16, name: &str) -> usize {
    let key = format!("{}:queue", holder_key(name));
    cluster
        .node(port)
        .and_then(|n| n.command(&["LLEN", &key]))
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn pttl(cluster: &TestingRedisCluster, port: u16, key: &str) -> i64 {
    cluster
        .node(port)
        .and_then(|n| n.command(&["PTTL", key]))
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(-2)
}

/// Locks whose slots are on each of the three primaries: each is granted there, its keys are
/// there and nowhere else, and a second Client is refused while it is held.
#[test]
fn each_lock_goes_to_the_primary_of_its_slot() {
    let cluster = TestingRedisCluster::start().unwrap();
    let ttl = Duration::from_secs(10);
    let (a, b) = (client(&cluster, ttl), client(&cluster, ttl));
    // One name per primary.
    let mut names: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let name = format!("routed-{i}");
        let port = cluster.primary_of(&holder_key(&name)).unwrap().port();
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
        let key = holder_key(name);
        assert!(
            pttl(&cluster, *port, &key) > 0,
            "{key} on its primary {port}"
        );
        for other in cluster.nodes()[..3].iter().filter(|n| n.port() != *port) {
            // The others redirect: the key is not theirs.
            let answer = other.command(&["GET", &key]);
            assert!(
                answer
                    .as_ref()
                    .is_err_and(|e| e.to_string().contains("MOVED")),
                "{answer:?}"
            );
        }
        let theirs = RedisMutex::new(&b, name).unwrap();
        assert!(theirs.try_lock().unwrap().is_none(), "{name} is held");
        guard.release().unwrap();
        let again = theirs.try_lock().unwrap().expect("free after the release");
        assert!(again.fencing_token() > 0);
        again.release().unwrap();
        println!("{name}: slot {} on {port}", cluster.slot_of(&key).unwrap());
    }
    // A name that begins with '}' gives its keys an empty hash tag: they would be in several
    // slots, and every script over them refused with CROSSSLOT. Refused when made, instead.
    match RedisMutex::new(&a, "}odd") {
        Err(Error::InvalidArgument(why)) => {
            println!("}}odd: {why}");
            assert!(why.contains("hash slot"), "{why}");
        }
        other => panic!("{:?}", other.map(|m| m.try_lock().map(|g| g.is_some()))),
    }
}

/// The primary of a lock's slot is killed while the lock is held and two waiters of other
/// Clients wait, and its replica never got the grant (its replication link was cut before the
/// grant and kept down, as a replica the primary had not yet reached). The replica takes over: the waiters
/// are served there one after the other with higher tokens; the old holder, writing to the
/// fenced register without looking at its health, reads not-`Held` and then `Lost` (its
/// renewal finds the key gone, or its TTL runs out), and every write it made after a waiter's
/// first write is refused by the fence. Until its renewal finds the key gone it may still read
/// `Held` beside a waiter: that window is what the fence is for.
#[test]
fn a_killed_primary_that_missed_the_grant_is_replaced_and_the_fence_refuses_the_old_holder() {
    let ttl = Duration::from_secs(6);
    let cluster = TestingRedisCluster::start().unwrap();
    let name = "failover";
    let key = holder_key(name);
    let primary = cluster.primary_of(&key).unwrap().port();
    let replica = cluster.replicas_of(primary).unwrap()[0];
    let register = FencedRegister::start().unwrap();
    let a = client(&cluster, ttl);
    let waiting_clients = [client(&cluster, ttl), client(&cluster, ttl)];
    let (served_tx, served) = mpsc::channel::<(Instant, u64)>();
    // The replica's link to its primary is cut, and the primary refuses it a new sync (an ACL
    // without SYNC and PSYNC), so that it misses all that follows.
    cluster
        .node(primary)
        .unwrap()
        .command(&["ACL", "SETUSER", "default", "-sync", "-psync"])
        .unwrap();
    cluster
        .node(replica)
        .unwrap()
        .command(&["CLIENT", "KILL", "TYPE", "master"])
        .unwrap();
    wait_for("the replica's link to go down", || {
        cluster
            .node(replica)
            .unwrap()
            .command(&["INFO", "replication"])
            .is_ok_and(|i| i.contains("master_link_status:down"))
    });
    thread::scope(|s| {
        let mutex = RedisMutex::new(&a, name).unwrap();
        let guard = mutex.lock().unwrap();
        let old_token = guard.fencing_token();
        let mut waiters = Vec::new();
        for (i, c) in waiting_clients.iter().enumerate() {
            let (tx, register) = (served_tx.clone(), &register);
            waiters.push(s.spawn(move || {
                let worker = format!("waiter{i}");
                let m = RedisMutex::new(c, name).unwrap();
                let g = m.try_lock_for(patience()).unwrap().expect("granted");
                let token = g.fencing_token();
                tx.send((Instant::now(), token)).unwrap();
                let mut fence = register.client().unwrap();
                fence.enter(token, &worker).unwrap();
                for w in 0..3 {
                    let outcome = fence
                        .write(token, &worker, &format!("{worker}-{w}"))
                        .unwrap();
                    assert!(outcome.is_accepted(), "{worker}: {outcome:?}");
                    thread::sleep(Duration::from_millis(20));
                }
                fence.exit(token, &worker).unwrap();
                g.release().unwrap();
            }));
        }
        wait_for("two waiters queued", || {
            queued(&cluster, primary, name) == 2
        });
        // The replica has none of it: not the holder, not the queue.
        let seen = cluster
            .node(replica)
            .unwrap()
            .commands(&[&["READONLY"], &["EXISTS", &key]])
            .unwrap();
        assert_eq!(seen[1], "0", "the replica must have missed the grant");
        let pid = cluster.node(primary).unwrap().pid().unwrap();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        let killed = Instant::now();
        // The old holder writes without looking at its health until it reads Lost.
        let mut fence = register.client().unwrap();
        fence.enter(old_token, "old").unwrap();
        let (mut not_held, mut refused, mut written) = (None, 0, 0);
        let lost = loop {
            let health = guard.health();
            if health != LockHealth::Held && not_held.is_none() {
                not_held = Some(killed.elapsed());
            }
            if health == LockHealth::Lost {
                break killed.elapsed();
            }
            assert!(
                killed.elapsed() < patience(),
                "the old holder never read Lost"
            );
            let outcome = fence.write(old_token, "old", "stale").unwrap();
            written += 1;
            refused += usize::from(!outcome.is_accepted());
            thread::sleep(Duration::from_millis(20));
        };
        fence.exit(old_token, "old").unwrap();
        let new = cluster.wait_for_new_primary(&key, primary).unwrap();
        assert_eq!(new, replica);
        let (first, t1) = served.recv_timeout(patience()).expect("a waiter served");
        let (second, t2) = served.recv_timeout(patience()).expect("both served");
        for w in waiters {
            w.join().unwrap();
        }
        println!(
            "new primary {new}; waiters served {:?} and {:?} after the kill (tokens {t1}, {t2} \
             over the old {old_token}); old holder not Held after {:?}, Lost after {lost:?} \
             (TTL {ttl:?}); it wrote {written} times after the kill, {refused} refused",
            first - killed,
            second - killed,
            not_held.unwrap_or(lost)
        );
        assert!(t1 > old_token && t2 > t1, "{old_token} {t1} {t2}");
        // Lost by the renewal that finds the key gone, or at the latest when the TTL since the
        // last renewal before the kill has run out.
        assert!(lost < ttl + Duration::from_secs(5), "Lost after {lost:?}");
        // Replication is asynchronous, so the old holder may read `Held` for a moment after a
        // waiter was granted on the new primary (docs/redis.md, "What it cannot promise"): an
        // overlap with `old` is that window. What must hold is the fence — no write of the old
        // token accepted after a waiter's — and that the waiters never overlap each other.
        let report = register.check();
        println!("{report}");
        assert!(report.stale_accepted.is_empty(), "{report}");
        assert!(
            report
                .overlaps
                .iter()
                .all(|o| o.first_worker == "old" || o.second_worker == "old"),
            "{report}"
        );
        assert!(matches!(guard.release(), Err(Error::LockLost)));
    });
}

/// The primary of a held lock's slot is paused (SIGSTOP: it accepts connections and answers
/// nothing, as a node cut off by a partition) while two waiters of other Clients wait. Its
/// replica takes over after the node timeout; every connection of the Clients to the silent
/// node — the keeper's, the pool's, the subscriber's and the waiting slots' — is left for the
/// new map, the holder (whose key was replicated) renews on the new primary, and when it
/// releases the waiters are woken there by their messages, not by their re-check.
#[test]
fn a_paused_primary_is_replaced_and_the_waiters_hear_the_new_one() {
    let ttl = Duration::from_secs(6);
    let cluster = TestingRedisCluster::start().unwrap();
    let name = "paused";
    let key = holder_key(name);
    let a = client(&cluster, ttl);
    let waiting_clients = [client(&cluster, ttl), client(&cluster, ttl)];
    let mutex = RedisMutex::new(&a, name).unwrap();
    let guard = mutex.lock().unwrap();
    let primary = cluster.primary_of(&key).unwrap().port();
    let replica = cluster.replicas_of(primary).unwrap()[0];
    thread::scope(|s| {
        let (tx, served) = mpsc::channel::<(Instant, u64)>();
        for c in &waiting_clients {
            let tx = tx.clone();
            s.spawn(move || {
                let m = RedisMutex::new(c, name).unwrap();
                let g = m.try_lock_for(patience()).unwrap().expect("granted");
                tx.send((Instant::now(), g.fencing_token())).unwrap();
                thread::sleep(Duration::from_millis(50));
                g.release().unwrap();
            });
        }
        wait_for("two waiters queued", || {
            queued(&cluster, primary, name) == 2
        });
        wait_for("the queue replicated", || {
            cluster
                .node(replica)
                .unwrap()
                .commands(&[&["READONLY"], &["LLEN", &format!("{key}:queue")]])
                .is_ok_and(|a| a[1] == "2")
        });
        cluster.pause_primary_of(&key).unwrap();
        let paused = Instant::now();
        let new = cluster.wait_for_new_primary(&key, primary).unwrap();
        println!("new primary {new} {:?} after the pause", paused.elapsed());
        let mut last = pttl(&cluster, new, &key);
        wait_for("a renewal on the new primary", || {
            let now = pttl(&cluster, new, &key);
            let renewed = now > last;
            last = now;
            renewed
        });
        println!(
            "renewed on the new primary {:?} after the pause",
            paused.elapsed()
        );
        assert_eq!(guard.health(), LockHealth::Held);
        let token = guard.fencing_token();
        let released = Instant::now();
        guard.release().unwrap();
        let (first, t1) = served
            .recv_timeout(patience())
            .expect("the first waiter served");
        let (second, t2) = served
            .recv_timeout(patience())
            .expect("the second waiter served");
        let (w1, w2) = (first - released, second - first);
        println!("waiters served {w1:?} after the release and {w2:?} after the first");
        assert!(t1 > token && t2 > t1, "{token} {t1} {t2}");
        assert!(w1 < ttl / 3 && w2 < ttl / 3, "{w1:?} {w2:?}");
    });
    cluster.resume_node(primary).unwrap();
}

/// `CLUSTER FAILOVER` on the replica of a held lock's primary: the replica takes over with
/// everything (a manual failover waits until it has caught up), the old primary redirects with
/// `MOVED`, the holder's renewals follow to the new primary and it keeps reading `Held`, and a
/// waiter is served there after the release.
#[test]
fn a_cluster_failover_is_followed_by_the_holder_and_the_waiter() {
    let ttl = Duration::from_secs(6);
    let cluster = TestingRedisCluster::start().unwrap();
    let name = "manual";
    let key = holder_key(name);
    let a = client(&cluster, ttl);
    let b = client(&cluster, ttl);
    let mutex = RedisMutex::new(&a, name).unwrap();
    let guard = mutex.lock().unwrap();
    let old = cluster.failover(&key).unwrap();
    let started = Instant::now();
    let new = cluster.wait_for_new_primary(&key, old).unwrap();
    println!("slot moved from {old} to {new} in {:?}", started.elapsed());
    // A renewal on the new primary: its TTL set again there.
    let mut last = pttl(&cluster, new, &key);
    wait_for("a renewal on the new primary", || {
        let now = pttl(&cluster, new, &key);
        let renewed = now > last;
        last = now;
        renewed
    });
    println!(
        "renewed on the new primary {:?} after the failover",
        started.elapsed()
    );
    assert_eq!(guard.health(), LockHealth::Held);
    let token = guard.fencing_token();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let theirs = RedisMutex::new(&b, name).unwrap();
            let g = theirs.try_lock_for(patience()).unwrap().expect("granted");
            (Instant::now(), g.fencing_token())
        });
        wait_for("the waiter queued on the new primary", || {
            queued(&cluster, new, name) == 1
        });
        let released = Instant::now();
        guard.release().unwrap();
        let (at, theirs) = waiter.join().unwrap();
        println!("waiter served {:?} after the release", at - released);
        assert!(theirs > token);
        // Woken by its message, not by its re-check (a third of the TTL).
        assert!(at - released < ttl / 3, "{:?}", at - released);
    });
}

/// The primary of one lock's slot is frozen (SIGSTOP), the other primaries answer: calls on
/// that lock return within the operation timeout T as on a single frozen server, and calls on
/// a lock of another primary are not held up.
#[test]
fn calls_on_a_frozen_primary_keep_their_bounds_and_others_go_on() {
    let op = Duration::from_secs(1);
    let cluster = TestingRedisCluster::start().unwrap();
    let connect = || {
        RedisClient::builder(&cluster.url())
            .ttl(Duration::from_secs(30))
            .connect_timeout(op)
            .connect()
            .unwrap()
    };
    let (a, b) = (connect(), connect());
    let frozen_name = "frozen";
    let frozen_key = holder_key(frozen_name);
    let frozen = cluster.primary_of(&frozen_key).unwrap().port();
    let other_name = (0..)
        .map(|i| format!("elsewhere-{i}"))
        .find(|n| cluster.primary_of(&holder_key(n)).unwrap().port() != frozen)
        .unwrap();
    let held = RedisMutex::new(&a, frozen_name).unwrap();
    let guard = held.lock().unwrap();
    let theirs = RedisMutex::new(&b, frozen_name).unwrap();
    let other = RedisMutex::new(&b, &other_name).unwrap();
    cluster.pause_primary_of(&frozen_key).unwrap();
    let timed = |what: &str, f: &mut dyn FnMut()| {
        let started = Instant::now();
        f();
        let took = started.elapsed();
        println!("{what}: {took:?} (T = {op:?})");
        took
    };
    let try_lock = timed("try_lock on the frozen primary", &mut || {
        assert!(theirs.try_lock().is_err());
    });
    let elsewhere = timed("try_lock and release on another primary", &mut || {
        other.try_lock().unwrap().expect("free").release().unwrap();
    });
    let mut guard = Some(guard);
    let release = timed("release on the frozen primary", &mut || {
        assert!(guard.take().unwrap().release().is_err());
    });
    let close = timed("close() of the holder's Client", &mut || a.close());
    cluster.resume_node(frozen).unwrap();
    // Generous against a loaded machine; the docs' bounds are T, T, and T + 0.25 s.
    for (what, took, bound) in [
        ("try_lock", try_lock, op * 3),
        ("release", release, op * 3),
        ("close", close, op * 3 + Duration::from_millis(250)),
    ] {
        assert!(took < bound, "{what} took {took:?}");
    }
    assert!(elsewhere < op, "another primary's lock took {elsewhere:?}");
}

/// Bad input, each refused before any lock is touched: a malformed cluster URL before any
/// I/O; a seed that is a plain Redis (cluster support disabled) and seeds nobody listens on at
/// connect, with their cause.
#[test]
fn bad_cluster_urls_are_refused_with_their_cause() {
    for (url, why) in [
        ("redis+cluster://", "at least one node"),
        ("redis+cluster://127.0.0.1:notaport", "host[:port]"),
        ("redis+cluster://127.0.0.1:7000/2", "database 0"),
    ] {
        match RedisClient::connect(url) {
            Err(Error::InvalidArgument(e)) => {
                println!("{url}: {e}");
                assert!(e.contains(why), "{url}: {e}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    let plain = TestingRedis::start().unwrap();
    let url = format!("redis+cluster://127.0.0.1:{}", plain.port());
    match RedisClient::builder(&url)
        .connect_timeout(Duration::from_secs(2))
        .connect()
    {
        Err(Error::ConnectFailed { cause, .. }) => {
            let why = cause.to_string();
            println!("{url}: {why}");
            assert!(why.contains("not a Redis Cluster node"), "{why}");
            assert!(why.contains("cluster support disabled"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        plain.command(&["KEYS", "*"]).unwrap(),
        "",
        "nothing touched"
    );
    // Nobody listens on a port just freed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("redis+cluster://127.0.0.1:{port}");
    let started = Instant::now();
    match RedisClient::builder(&url)
        .connect_timeout(Duration::from_secs(2))
        .connect()
    {
        Err(Error::ConnectFailed { cause, .. }) => {
            let why = cause.to_string();
            println!("{url}: {why} (after {:?})", started.elapsed());
            assert!(why.contains("no Redis Cluster node answered"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

/// `zklock::connect` takes the cluster URL too.
#[test]
fn any_client_connects_to_the_cluster() {
    let cluster = TestingRedisCluster::start().unwrap();
    let any = zklock::connect(&cluster.url()).unwrap();
    assert_eq!(any.backend(), "redis");
    let m = any.mutex("any").unwrap();
    m.acquire().unwrap();
    assert_ne!(
        cluster
            .command_for(&holder_key("any"), &["GET", &holder_key("any")])
            .unwrap(),
        ""
    );
    m.release().unwrap();
}

/// `RedisClient::cluster_builder`: a Client from the URLs of some of the cluster's nodes (here
/// a replica and a primary) locks as the `redis+cluster://` URL's does; bad seed lists are
/// refused before any I/O, and seeds that are no cluster node at connect, with what each
/// answered, before any lock is touched.
#[test]
fn a_client_from_seed_node_urls() {
    let cluster = TestingRedisCluster::start().unwrap();
    let seeds = [cluster.nodes()[4].url(), cluster.nodes()[0].url()];
    let a = RedisClient::cluster_builder(&seeds)
        .ttl(Duration::from_secs(10))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .unwrap();
    let b = client(&cluster, Duration::from_secs(10));
    held_then_handed_over(&a, &b, "seeded", || {
        assert!(
            pttl(
                &cluster,
                cluster.primary_of(&holder_key("seeded")).unwrap().port(),
                &holder_key("seeded")
            ) > 0
        );
    });
    a.close();

    let empty: Vec<String> = Vec::new();
    for (seeds, why) in [
        (empty, "at least one seed"),
        (vec!["127.0.0.1:7000".to_owned()], "no scheme"),
        (
            vec![
                "redis://:a@127.0.0.1:7000".into(),
                "redis://:b@127.0.0.1:7001".into(),
            ],
            "same user and password",
        ),
        (vec!["redis://127.0.0.1:7000/3".into()], "database 0"),
    ] {
        match RedisClient::cluster_builder(&seeds).connect() {
            Err(Error::InvalidArgument(e)) => {
                println!("{seeds:?}: {e}");
                assert!(e.contains(why), "{e}");
            }
            other => panic!("{seeds:?}: {other:?}"),
        }
    }
    let plain = TestingRedis::start().unwrap();
    let started = Instant::now();
    match RedisClient::cluster_builder([plain.url()])
        .connect_timeout(Duration::from_secs(2))
        .connect()
    {
        Err(Error::ConnectFailed { cause, .. }) => {
            let why = cause.to_string();
            println!("{}: {why} (after {:?})", plain.url(), started.elapsed());
            assert!(why.contains("not a Redis Cluster node"), "{why}");
            assert!(why.contains("cluster support disabled"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        plain.command(&["KEYS", "*"]).unwrap(),
        "",
        "nothing touched"
    );
}

/// A node's id (`CLUSTER MYID`).
fn id(cluster: &TestingRedisCluster, port: u16) -> String {
    cluster
        .node(port)
        .and_then(|n| n.command(&["CLUSTER", "MYID"]))
        .unwrap()
}

/// A primary other than the one on `port`.
fn other_primary(cluster: &TestingRedisCluster, port: u16) -> u16 {
    let nodes = cluster.any_command(&["CLUSTER", "NODES"]).unwrap();
    nodes
        .lines()
        .filter(|l| l.contains("master") && !l.contains("fail"))
        .filter_map(|l| l.split(' ').nth(1)?.split(['@', ':']).nth(1)?.parse().ok())
        .find(|p| *p != port)
        .expect("another primary")
}

/// Starts moving `slot` from the primary on `from` to the one on `to` as `redis-cli
/// --cluster reshard` does, its keys moved with `MIGRATE`: from here on `from` answers `ASK`
/// for them. With `finish`, the slot is then given to `to` on every primary: `from` answers
/// `MOVED`.
fn migrate(cluster: &TestingRedisCluster, slot: u32, from: u16, to: u16, finish: bool) {
    let slot = slot.to_string();
    let (from_id, to_id) = (id(cluster, from), id(cluster, to));
    let (source, target) = (cluster.node(from).unwrap(), cluster.node(to).unwrap());
    target
        .command(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id])
        .unwrap();
    source
        .command(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id])
        .unwrap();
    let keys = source
        .command(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"])
        .unwrap();
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    if !keys.is_empty() {
        let port = to.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend(&keys);
        source.command(&args).unwrap();
    }
    if finish {
        for port in [to, from] {
            cluster
                .node(port)
                .unwrap()
                .command(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id])
                .unwrap();
        }
        let s: u32 = slot.parse().unwrap();
        let serves = |line: &str| {
            line.starts_with(&to_id)
                && line.split(' ').skip(8).any(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    a.parse::<u32>().is_ok_and(|a| a <= s) && b.parse::<u32>().is_ok_and(|b| s <= b)
                })
        };
        wait_for("every node to see the slot moved", || {
            cluster.nodes().iter().all(|n| {
                n.command(&["CLUSTER", "NODES"])
                    .is_ok_and(|nodes| nodes.lines().any(serves))
            })
        });
    }
}

/// The nodes name no endpoint a client can use: no host name announced under
/// `cluster-preferred-endpoint-type hostname` (`?` in maps and redirects), then `unknown-endpoint`
/// (a nil in maps, an empty host in redirects): each stands for the node that answered. A
/// slot moved under each is followed through its `MOVED` answer to the lock's new primary.
#[test]
fn redirects_without_an_endpoint_reach_the_node_that_answered() {
    let cluster = TestingRedisCluster::start().unwrap();
    let a = client(&cluster, Duration::from_secs(10));
    for (kind, name) in [
        ("hostname", "no-host-name"),
        ("unknown-endpoint", "no-endpoint"),
    ] {
        for n in cluster.nodes() {
            n.command(&["CONFIG", "SET", "cluster-preferred-endpoint-type", kind])
                .unwrap();
        }
        let key = holder_key(name);
        let from = cluster.primary_of(&key).unwrap().port();
        let mutex = RedisMutex::new(&a, name).unwrap();
        // The map read, a connection to the primary pooled.
        mutex.lock().unwrap().release().unwrap();
        let to = other_primary(&cluster, from);
        migrate(&cluster, cluster.slot_of(&key).unwrap(), from, to, true);
        let guard = mutex
            .try_lock_for(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{kind}: {e}"))
            .unwrap_or_else(|| panic!("{kind}: not granted"));
        assert!(
            pttl(&cluster, to, &key) > 0,
            "{kind}: granted on the new primary"
        );
        guard.release().unwrap();
    }
}

/// A slot in migration (`MIGRATING` on its primary, `IMPORTING` on the other, the lock's key
/// moved): the primary answers `ASK`. A redis-py layout lock (one key: the scripts of the
/// other layouts take several keys, which Redis answers with `TRYAGAIN` until the migration
/// ends) is followed there: the holder's renewals go there after `ASKING`, so the hold reads
/// `Held` through three TTLs and another Client is refused; that Client's calls go there once
/// each, and 100 acquisitions open no more connections than the pool keeps to that node.
#[test]
fn a_slot_in_migration_is_followed_through_ask_and_the_pool_stays_small() {
    let ttl = Duration::from_secs(2);
    let cluster = TestingRedisCluster::start().unwrap();
    let (a, b) = (client(&cluster, ttl), client(&cluster, ttl));
    let key = "migrating";
    let from = cluster.primary_of(key).unwrap().port();
    let to = other_primary(&cluster, from);
    let mutex = RedisMutex::redis_py(&a, key).unwrap();
    let theirs = RedisMutex::redis_py(&b, key).unwrap();
    // b's map read, and a connection to the primary pooled.
    theirs.try_lock().unwrap().expect("free").release().unwrap();
    let guard = mutex.lock().unwrap();
    migrate(&cluster, cluster.slot_of(key).unwrap(), from, to, false);
    // The node importing the slot answers for it after ASKING only.
    let pttl_there = || -> i64 {
        let node = cluster.node(to).unwrap();
        let answers = node.commands(&[&["ASKING"], &["PTTL", key]]).unwrap();
        answers[1].parse().unwrap()
    };
    assert!(pttl_there() > 0, "the key moved");
    let until = Instant::now() + ttl * 3;
    while Instant::now() < until {
        assert_eq!(guard.health(), LockHealth::Held, "renewed through ASK");
        assert!(theirs.try_lock().unwrap().is_none(), "refused while held");
        thread::sleep(Duration::from_millis(100));
    }
    assert!(pttl_there() > 0, "renewed where the key is");
    guard.release().unwrap();
    assert_eq!(pttl_there(), -2, "released where the key is");
    let clients = |port: u16| -> usize {
        let info = cluster
            .node(port)
            .unwrap()
            .command(&["INFO", "clients"])
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    };
    let before = clients(to);
    for _ in 0..100 {
        theirs.lock().unwrap().release().unwrap();
    }
    let after = clients(to);
    println!("connections to the node importing the slot: {before} before, {after} after");
    assert!(after <= before + 17, "{before} before, {after} after");
}

/// One primary frozen (SIGSTOP) while a Client holds a lock on each of the three: `close()`
/// returns within its bound (the operation timeout T and a quarter second), and the holds on
/// the two others are gone when it returns, not left to their TTL — six times, so that the
/// frozen primary's pipeline comes first in some (the keeper's order is a hash map's).
#[test]
fn close_with_a_frozen_primary_releases_the_holds_on_the_others() {
    let op = Duration::from_secs(1);
    let cluster = TestingRedisCluster::start().unwrap();
    let mut slowest = Duration::ZERO;
    for trial in 0..6 {
        wait_for("the cluster to be whole", || {
            cluster.nodes().iter().all(|n| {
                n.command(&["CLUSTER", "INFO"])
                    .is_ok_and(|i| i.contains("cluster_state:ok"))
            })
        });
        let a = RedisClient::builder(&cluster.url())
            .ttl(Duration::from_secs(30))
            .connect_timeout(op)
            .operation_timeout(op)
            .connect()
            .unwrap();
        // One name per primary.
        let mut names: Vec<(String, u16)> = Vec::new();
        for i in 0.. {
            let name = format!("close-{trial}-{i}");
            let port = cluster.primary_of(&holder_key(&name)).unwrap().port();
            if !names.iter().any(|(_, p)| *p == port) {
                names.push((name, port));
            }
            if names.len() == 3 {
                break;
            }
        }
        let mutexes: Vec<RedisMutex> = names
            .iter()
            .map(|(n, _)| RedisMutex::new(&a, n).unwrap())
            .collect();
        let guards: Vec<_> = mutexes.iter().map(|m| m.lock().unwrap()).collect();
        let frozen = names[trial % 3].1;
        cluster.node(frozen).unwrap().pause().unwrap();
        let started = Instant::now();
        a.close();
        let took = started.elapsed();
        cluster.resume_node(frozen).unwrap();
        slowest = slowest.max(took);
        for (name, port) in names.iter().filter(|(_, p)| *p != frozen) {
            assert_eq!(
                pttl(&cluster, *port, &holder_key(name)),
                -2,
                "trial {trial}: {name} on a primary that answers, released by close() in {took:?}"
            );
        }
        drop(guards);
        assert!(took < op * 3, "close() took {took:?}");
    }
    println!("close() with one primary of three frozen, T = {op:?}: at most {slowest:?}");
}
