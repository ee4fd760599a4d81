//! Redis Sentinel with one stale sentinel: it goes on naming an old primary that still answers
//! as one, as a sentinel cut off with that primary by a partition does, while the other
//! sentinels name the real primary. One sentinel's word decides nothing: a Client whose URL
//! asks the stale sentinel first still goes to the primary the majority names, so it never
//! holds a lock that a Client of the majority's primary holds too.

use std::thread;
use std::time::{Duration, Instant};

use zklock::redis::RedisMutex;
use zklock::testing::{FaultProxy, TestingRedis, TestingSentinel};
use zklock::RedisClient;

#[path = "redis_common/stale_sentinel.rs"]
mod stale_sentinel;
use stale_sentinel::StaleSentinel;

const TRIALS: usize = 20;

/// Twenty trials: a Client whose URL asks the stale sentinel first and a Client of the real
/// sentinels each try the same lock. At most one may hold it; and the stale sentinel's
/// primary never gets a lock.
#[test]
fn a_single_stale_sentinel_cannot_send_a_client_to_its_old_primary() {
    let set = TestingSentinel::start().unwrap();
    let old = TestingRedis::start().unwrap();
    let stale = StaleSentinel::start(old.port());
    let ports = set.sentinel_ports();
    let stale_first = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}/{}",
        stale.port,
        ports[1],
        ports[2],
        set.master_name()
    );
    let mut both = 0;
    for trial in 0..TRIALS {
        let a = RedisClient::builder(&stale_first)
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .expect("connect with a stale first sentinel");
        let b = RedisClient::builder(&set.url()).connect().unwrap();
        let name = format!("stale-{trial}");
        let ours = RedisMutex::new(&a, &name).unwrap();
        let theirs = RedisMutex::new(&b, &name).unwrap();
        let g1 = ours.try_lock().unwrap();
        let g2 = theirs.try_lock().unwrap();
        if g1.is_some() && g2.is_some() {
            both += 1;
        }
        drop(g1);
        drop(g2);
    }
    let on_old = old.command(&["KEYS", "zklock:*"]).unwrap();
    println!(
        "{TRIALS} trials with a stale first sentinel: both Clients held the lock in {both}; \
         locks on the stale sentinel's primary: {:?}",
        on_old
    );
    assert_eq!(both, 0, "two holders of one lock");
    assert_eq!(on_old, "", "no lock on the stale sentinel's primary");
}

/// What deciding by a majority costs a holder: its keeper asks a majority of the sentinels
/// (two of three) at every renewal round, where one answer used to do. Each sentinel is
/// reached through a proxy that counts the connections.
#[test]
fn the_keeper_asks_a_majority_of_the_sentinels_each_round() {
    let ttl = Duration::from_secs(3);
    let set = TestingSentinel::start().unwrap();
    let proxies: Vec<FaultProxy> = set
        .sentinel_ports()
        .iter()
        .map(|p| FaultProxy::start_raw(("127.0.0.1", *p)).unwrap())
        .collect();
    let hosts: Vec<String> = proxies.iter().map(FaultProxy::connect_string).collect();
    let url = format!("redis+sentinel://{}/{}", hosts.join(","), set.master_name());
    let client = RedisClient::builder(&url).ttl(ttl).connect().unwrap();
    let mutex = RedisMutex::new(&client, "majority-cost").unwrap();
    let guard = mutex.lock().unwrap();
    let count = || -> Vec<u64> {
        proxies
            .iter()
            .map(|p| p.stats().connections_accepted)
            .collect()
    };
    let before = count();
    let began = Instant::now();
    // Four renewal periods (a third of the TTL each).
    thread::sleep(ttl / 3 * 4);
    let after = count();
    let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let rounds = began.elapsed().as_secs_f64() / (ttl / 3).as_secs_f64();
    println!(
        "sentinel connections over {rounds:.1} renewal periods: {delta:?}, {:.2} per round",
        delta.iter().sum::<u64>() as f64 / rounds
    );
    assert!(
        delta.iter().filter(|d| **d > 0).count() >= 2,
        "the keeper asked fewer than a majority: {delta:?}"
    );
    guard.release().unwrap();
}
