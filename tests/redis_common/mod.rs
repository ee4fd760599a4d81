//! What the Redis tests share: patience, a client, and a holder in another process (this test
//! binary run again as a worker).

// Each test binary uses part of this module.
#![allow(dead_code)]

// The helpers every test shares (a test binary that uses this module reaches them here, as
// it cannot load `tests/common` a second time).
#[path = "../common/mod.rs"]
mod common;
pub use common::worker::{say, wait_to_be_killed, Worker};
#[allow(unused_imports)] // each test binary uses some of them
pub use common::{held_then_handed_over, just_renewed, until_not_held, warnings_naming};

use std::thread;
use std::time::{Duration, Instant};

use zklock::redis::{RedisLeaderLatch, RedisMutex, RedisSemaphore};
use zklock::testing::{FenceClient, FencedRegister, TestingRedis};
use zklock::{LockHealth, RedisClient};

const WORKER: &str = "ZKLOCK_REDIS_WORKER";

/// How long a condition may take on a loaded machine.
pub fn patience() -> Duration {
    Duration::from_secs(60)
}

pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience();
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

pub fn client(server: &TestingRedis, ttl: Duration) -> RedisClient {
    RedisClient::builder(&server.url())
        .ttl(ttl)
        .connect()
        .expect("connect")
}

/// The lock keys left on the server.
pub fn lock_keys(server: &TestingRedis) -> String {
    server.command(&["KEYS", "zklock:*"]).unwrap()
}

/// The worker: holds the lock named in its arguments, writes to the fenced register every
/// 20 ms (checking `health()` before each write when asked to), and reports each write.
#[test]
fn holder_worker() {
    let Ok(args) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let args: Vec<&str> = args.split(' ').collect();
    let (url, fence, mode) = (args[0], args[1], args[2]);
    let client = RedisClient::builder(url)
        .ttl(Duration::from_secs(2))
        .connect()
        .unwrap();
    if mode == "latch" {
        let latch = RedisLeaderLatch::start(&client, "worker").unwrap();
        latch.await_leadership().unwrap();
        say(&format!("held {}", latch.epoch().unwrap()));
        wait_to_be_killed();
        return;
    }
    if mode == "lease" {
        let semaphore = RedisSemaphore::new(&client, "worker", 1).unwrap();
        let lease = semaphore.acquire().unwrap();
        say(&format!("held {}", lease.fencing_token()));
        wait_to_be_killed();
        return;
    }
    let checks = mode == "check";
    let mutex = RedisMutex::new(&client, "worker").unwrap();
    let mut fence = FenceClient::connect(fence).unwrap();
    let guard = mutex.lock().unwrap();
    let token = guard.fencing_token();
    fence.enter(token, "worker").unwrap();
    say(&format!("held {token}"));
    for i in 0.. {
        if checks && guard.health() != LockHealth::Held {
            say("lost");
            break;
        }
        let outcome = fence.write(token, "worker", &i.to_string()).unwrap();
        say(&format!("wrote {}", outcome.is_accepted()));
        thread::sleep(Duration::from_millis(20));
    }
    fence.exit(token, "worker").unwrap();
    wait_to_be_killed();
}

/// A worker that holds the mutex `worker` and writes to `register`, checking its health before
/// each write (`"check"`) or not (`"blind"`); that holds the one lease of the semaphore
/// `worker` (`"lease"`); or that leads the election `worker` (`"latch"`).
pub fn start_worker(server: &TestingRedis, register: &FencedRegister, mode: &str) -> Worker {
    Worker::start(
        "redis_common::holder_worker",
        WORKER,
        &format!("{} {} {mode}", server.url(), register.addr()),
    )
}
