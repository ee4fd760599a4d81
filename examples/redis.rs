//! The same locks on Redis: a fair mutex handed over in arrival order, a semaphore whose lease
//! a crashed holder cannot keep, and a leader latch — each with health and fencing tokens.
//!
//! Uses `REDIS_URL` if set, else starts a throwaway `redis-server` (Debian's `redis-server`
//! package).
//!
//! ```sh
//! cargo run --features testing,redis --example redis
//! ```

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use zklock::redis::{RedisLeaderLatch, RedisMutex, RedisSemaphore};
use zklock::testing::TestingRedis;
use zklock::RedisClient;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server;
    let url = match std::env::var("REDIS_URL") {
        Ok(url) => url,
        Err(_) => {
            server = TestingRedis::start()?;
            server.url()
        }
    };
    println!("Redis at {url}");

    // A fair mutex: four Clients queue while the first holds; they get it in arrival order.
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = RedisClient::connect(&url)?;
    let mutex = RedisMutex::new(&first, "demo:report")?;
    let held = mutex.lock()?;
    let waiters: Vec<_> = (1..=4)
        .map(|i| {
            let (url, order) = (url.clone(), order.clone());
            let worker = thread::spawn(move || -> zklock::Result<()> {
                let client = RedisClient::connect(&url)?;
                let mutex = RedisMutex::new(&client, "demo:report")?;
                let guard = mutex.lock()?;
                order.lock().unwrap().push((i, guard.fencing_token()));
                Ok(())
            });
            // Each one queued before the next starts.
            while mutex.participants().map_or(0, |p| p.len()) < i + 1 {
                thread::sleep(Duration::from_millis(5));
            }
            worker
        })
        .collect();
    println!(
        "holding with token {}; 4 waiters queued",
        held.fencing_token()
    );
    held.release()?;
    for w in waiters {
        w.join().expect("a waiter")?;
    }
    for (i, token) in order.lock().unwrap().iter() {
        println!("  waiter {i} held it with token {token}");
    }

    // A semaphore of 2: a third acquire waits until a lease is returned.
    let pool = RedisSemaphore::new(&first, "demo:uploads", 2)?;
    let (a, b) = (pool.acquire()?, pool.acquire()?);
    let third = pool.acquire_timeout(Duration::from_millis(200))?;
    println!(
        "2 leases out ({} and {}); a third: {:?}",
        a.id(),
        b.id(),
        third.map(|l| l.id().to_owned())
    );
    drop(a);
    let c = pool
        .acquire_timeout(Duration::from_secs(5))?
        .expect("a lease came back");
    println!("a lease came back: {} (health {:?})", c.id(), c.health());
    drop((b, c));

    // A leader latch: no thread of its own; the Client's keeper keeps its place.
    let latch = RedisLeaderLatch::start(&first, "demo:leader")?;
    if latch.await_leadership_timeout(Duration::from_secs(5))? {
        println!("leading in epoch {:?}", latch.epoch());
    }
    latch.close();
    assert_eq!(
        mutex.health(),
        None,
        "nothing held through the first mutex any more"
    );
    first.close();
    Ok(())
}
