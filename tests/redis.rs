//! The Redis mutex against real `redis-server` processes: what the conformance suite does not
//! cover (the fenced register and the keys left, tokens across a restart that lost every key,
//! a frozen holder's late writes, barging, redis-py's layout, the bounds against a frozen
//! server, Redis's own bad input).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use zklock::redis::RedisMutex;
use zklock::testing::{FenceClient, FencedRegister, TestingRedis};
use zklock::{Error, LockHealth, RedisClient};

mod redis_common;
use redis_common::{client, lock_keys, patience, start_worker, wait_for};

#[test]
fn holders_exclude_each_other_on_the_fenced_register() {
    let server = TestingRedis::start().unwrap();
    let register = FencedRegister::start().unwrap();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let url = server.url();
            let addr = register.addr();
            thread::spawn(move || {
                let client = RedisClient::connect(&url).unwrap();
                let mutex = RedisMutex::new(&client, "exclusion").unwrap();
                let mut fence = FenceClient::connect(addr).unwrap();
                let me = format!("w{w}");
                for i in 0..20 {
                    let guard = mutex.lock().unwrap();
                    let token = guard.fencing_token();
                    fence.enter(token, &me).unwrap();
                    assert!(fence
                        .write(token, &me, &i.to_string())
                        .unwrap()
                        .is_accepted());
                    thread::sleep(Duration::from_millis(1));
                    assert!(fence
                        .write(token, &me, &i.to_string())
                        .unwrap()
                        .is_accepted());
                    fence.exit(token, &me).unwrap();
                }
                client.close();
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let report = register.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(
        report.workers.values().map(|s| s.acquisitions).sum::<u64>(),
        80
    );
    assert_eq!(
        report.stale_rejected, 0,
        "every holder's token was the newest"
    );
    assert_eq!(
        lock_keys(&server)
            .lines()
            .filter(|k| !k.ends_with(":token"))
            .count(),
        0
    );
}

#[test]
fn a_barging_mutex_takes_a_free_lock_ahead_of_the_queue() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let fair = RedisMutex::new(&c, "barge").unwrap();
    let barging = RedisMutex::barging(&c, "barge").unwrap();
    // A queue entry of a waiter that is not coming (it lives for a minute).
    server
        .command(&["RPUSH", "zklock:{barge}:queue", "ghost:1"])
        .unwrap();
    server
        .command(&[
            "ZADD",
            "zklock:{barge}:timeouts",
            "99999999999999",
            "ghost:1",
        ])
        .unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            assert!(
                fair.try_lock().unwrap().is_none(),
                "a fair newcomer waits its turn"
            )
        });
    });
    let guard = barging.try_lock().unwrap();
    assert!(guard.is_some(), "a barging newcomer does not");
}

#[test]
fn tokens_rise_across_a_restart_that_lost_every_key() {
    let mut server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let mutex = RedisMutex::new(&c, "tokens").unwrap();
    let mut last = 0;
    for _ in 0..5 {
        let t = mutex.lock().unwrap().fencing_token();
        assert!(t > last, "{t} after {last}");
        last = t;
    }
    server.restart().unwrap();
    assert_eq!(lock_keys(&server), "", "the restart lost every key");
    let t = mutex.lock().unwrap().fencing_token();
    assert!(
        t > last,
        "first token after the restart {t} is not above {last}"
    );
}

/// After a restart that lost every key, the holder reads `Lost` at the keeper's next renewal
/// (a third of the TTL), not a period later: the renewal that finds its connection closed by the
/// restart is sent again at once on a new one. The restart comes just after a renewal, so the
/// next one is a whole period away.
#[test]
fn a_restart_that_lost_the_key_reads_lost_at_the_next_renewal() {
    let ttl = Duration::from_secs(3);
    let period = ttl / 3;
    let mut server = TestingRedis::start().unwrap();
    let c = client(&server, ttl);
    let mutex = RedisMutex::new(&c, "restarted").unwrap();
    let events = mutex.health_events();
    let guard = mutex.lock().unwrap();
    let pttl = || {
        server
            .command(&["PTTL", "zklock:{restarted}"])
            .unwrap()
            .parse::<i64>()
            .unwrap()
    };
    // A renewal sets the key's TTL back to the whole TTL.
    let mut last = pttl();
    loop {
        let now = pttl();
        if now > last {
            break;
        }
        last = now;
        thread::sleep(Duration::from_millis(5));
    }
    server.restart().unwrap();
    let restarted = Instant::now();
    loop {
        let e = events.recv_timeout(patience()).expect("a health event");
        if e.health == LockHealth::Lost {
            break;
        }
    }
    let took = restarted.elapsed();
    println!("Lost {took:?} after the restart (renewal period {period:?})");
    assert!(took < period + Duration::from_millis(500), "{took:?}");
    assert!(matches!(guard.release(), Err(Error::LockLost)));
}

#[test]
fn health_follows_the_server_and_events_are_told() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(2));
    let mutex = RedisMutex::new(&c, "health").unwrap();
    let events = mutex.health_events();
    let guard = mutex.lock().unwrap();
    assert_eq!(guard.health(), LockHealth::Held);
    server.pause().unwrap();
    wait_for("Suspended", || guard.health() == LockHealth::Suspended);
    wait_for("Lost", || guard.health() == LockHealth::Lost);
    server.resume().unwrap();
    let told: Vec<_> = std::iter::from_fn(|| events.recv_timeout(patience()).ok())
        .take(2)
        .map(|e| e.health)
        .collect();
    assert_eq!(told, vec![LockHealth::Suspended, LockHealth::Lost]);
    assert!(matches!(guard.release(), Err(Error::LockLost)));
}

#[test]
fn a_renewal_that_finds_the_key_gone_reads_lost_at_once() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_millis(900));
    let mutex = RedisMutex::new(&c, "stolen").unwrap();
    let guard = mutex.lock().unwrap();
    server.command(&["DEL", "zklock:{stolen}"]).unwrap();
    // The next renewal (a third of the TTL later) finds it gone; the lease alone would take a
    // whole TTL. Both end in Lost: what matters is that it is heard, as an event.
    let events = mutex.health_events();
    let e = events.recv_timeout(patience()).unwrap();
    assert_eq!(e.health, LockHealth::Lost);
    assert_eq!(guard.health(), LockHealth::Lost);
}

#[test]
fn cancel_waiters_ends_a_wait_and_leaves_the_queue() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let mutex = Arc::new(RedisMutex::new(&c, "cancel").unwrap());
    let other = client(&server, Duration::from_secs(30));
    let holder = RedisMutex::new(&other, "cancel").unwrap();
    let _held = holder.lock().unwrap();
    let waiter = {
        let mutex = mutex.clone();
        thread::spawn(move || mutex.acquire())
    };
    wait_for("the waiter to queue", || {
        server.command(&["LLEN", "zklock:{cancel}:queue"]).unwrap() == "1"
    });
    mutex.cancel_waiters();
    assert!(matches!(waiter.join().unwrap(), Err(Error::Cancelled)));
    assert_eq!(
        server.command(&["LLEN", "zklock:{cancel}:queue"]).unwrap(),
        "0"
    );
}

#[test]
fn a_timed_out_waiter_leaves_nothing_and_passes_the_turn_on() {
    let server = TestingRedis::start().unwrap();
    let a = client(&server, Duration::from_secs(30));
    let b = client(&server, Duration::from_secs(30));
    let held = RedisMutex::new(&a, "timeout").unwrap();
    let guard = held.lock().unwrap();
    let waiting = RedisMutex::new(&b, "timeout").unwrap();
    assert!(!waiting.acquire_timeout(Duration::from_millis(200)).unwrap());
    assert_eq!(
        server.command(&["LLEN", "zklock:{timeout}:queue"]).unwrap(),
        "0"
    );
    drop(guard);
    assert!(waiting.try_lock_for(patience()).unwrap().is_some());
}

/// `close()` takes the Client's waiters out of every queue they are in: a waiter of another
/// Client queued behind one of them is served as soon as the holder releases, not once the
/// closed Client's entry has expired.
#[test]
fn close_takes_its_waiters_out_of_every_queue() {
    let server = TestingRedis::start().unwrap();
    let holder = RedisClient::connect(&server.url()).unwrap();
    let closing = RedisClient::connect(&server.url()).unwrap();
    let behind = RedisClient::connect(&server.url()).unwrap();
    let queue_len = |name: &str| {
        server
            .command(&["LLEN", &format!("zklock:{{{name}}}:queue")])
            .unwrap()
    };
    let x = RedisMutex::new(&holder, "close-x").unwrap();
    let y = RedisMutex::new(&holder, "close-y").unwrap();
    let held_x = x.lock().unwrap();
    let _held_y = y.lock().unwrap();
    let gap = thread::scope(|s| {
        let waiters: Vec<_> = ["close-x", "close-y"]
            .into_iter()
            .map(|name| {
                let mutex = RedisMutex::new(&closing, name).unwrap();
                s.spawn(move || mutex.lock().map(|_| ()))
            })
            .collect();
        wait_for("the closing Client's waiters to queue", || {
            queue_len("close-x") == "1" && queue_len("close-y") == "1"
        });
        let next = s.spawn(|| {
            let mutex = RedisMutex::new(&behind, "close-x").unwrap();
            let guard = mutex.try_lock_for(patience()).unwrap().expect("granted");
            let at = Instant::now();
            drop(guard);
            at
        });
        wait_for("the other waiter to queue", || queue_len("close-x") == "2");
        closing.close();
        assert_eq!(queue_len("close-x"), "1", "only the other Client's waiter");
        assert_eq!(queue_len("close-y"), "0");
        for w in waiters {
            assert!(matches!(w.join().unwrap(), Err(Error::Closed)));
        }
        let released = Instant::now();
        held_x.release().unwrap();
        next.join().unwrap().duration_since(released)
    });
    println!("the waiter behind a closed Client's waiter was served {gap:?} after the release");
    assert!(gap < Duration::from_secs(2), "served after {gap:?}");
}

/// A close while the Client's waiters come and go — attempts in flight, grants coming in,
/// guards dropped — leaves nothing of the Client on the server: no hold, no queue entry.
/// Each round closes a new Client after a different time.
#[test]
fn a_close_amid_attempts_leaves_no_hold_and_no_queue_entry() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let server = TestingRedis::start().unwrap();
    let other = client(&server, Duration::from_secs(30));
    let theirs = RedisMutex::barging(&other, "churn").unwrap();
    let stop = AtomicBool::new(false);
    for round in 0..15 {
        let closing = client(&server, Duration::from_secs(30));
        let id = closing.id().to_owned();
        thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(Some(guard)) = theirs.try_lock_for(Duration::from_millis(50)) {
                        thread::sleep(Duration::from_micros(200));
                        drop(guard);
                    }
                }
            });
            let waiters: Vec<_> = (0..6)
                .map(|_| {
                    let mutex = RedisMutex::new(&closing, "churn").unwrap();
                    s.spawn(move || loop {
                        match mutex.try_lock_for(Duration::from_millis(30)) {
                            Ok(guard) => drop(guard),
                            Err(e) => return e,
                        }
                    })
                })
                .collect();
            thread::sleep(Duration::from_millis(100 + round * 7));
            closing.close();
            for w in waiters {
                assert!(matches!(w.join().unwrap(), Error::Closed));
            }
            stop.store(true, Ordering::Relaxed);
        });
        stop.store(false, Ordering::Relaxed);
        let queue = server
            .command(&["LRANGE", "zklock:{churn}:queue", "0", "-1"])
            .unwrap();
        let holder = server.command(&["GET", "zklock:{churn}"]).unwrap();
        let left: Vec<_> = queue.lines().filter(|w| w.starts_with(&id)).collect();
        assert!(
            left.is_empty() && !holder.starts_with(&id),
            "round {round}: queue entries {left:?}, holder {holder:?}"
        );
    }
}

/// A lock object dropped while it still holds (acquired without a guard) releases in the
/// caller: once the drop returns, another Client takes the lock at once, every time.
#[test]
fn a_lock_object_dropped_while_holding_is_free_for_another_client_at_once() {
    let server = TestingRedis::start().unwrap();
    let a = client(&server, Duration::from_secs(30));
    let b = client(&server, Duration::from_secs(30));
    let theirs = RedisMutex::new(&b, "dropped").unwrap();
    let mut granted = 0;
    for _ in 0..20 {
        let mine = RedisMutex::new(&a, "dropped").unwrap();
        assert!(mine.acquire().is_ok());
        drop(mine);
        if let Some(guard) = theirs.try_lock().unwrap() {
            granted += 1;
            guard.release().unwrap();
        } else {
            wait_for("the lock to be free", || {
                server.command(&["EXISTS", "zklock:{dropped}"]).unwrap() == "0"
            });
        }
    }
    println!("granted {granted} of 20 at once after the drop");
    assert_eq!(granted, 20);
}

#[test]
fn an_idle_waiter_sends_nothing_between_wake_ups() {
    let server = TestingRedis::start().unwrap();
    let a = client(&server, Duration::from_secs(30));
    let b = client(&server, Duration::from_secs(30));
    let held = RedisMutex::new(&a, "idle").unwrap();
    let guard = held.lock().unwrap();
    let waiting = Arc::new(RedisMutex::new(&b, "idle").unwrap());
    let waiter = {
        let waiting = waiting.clone();
        thread::spawn(move || waiting.lock().map(|g| g.fencing_token()))
    };
    wait_for("the waiter to queue", || {
        server.command(&["LLEN", "zklock:{idle}:queue"]).unwrap() == "1"
    });
    let calls = || -> u64 {
        let stats = server.command(&["INFO", "commandstats"]).unwrap();
        stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    let before = calls();
    // Less than the waiter's re-check interval (10 s) and the holder's renewal (10 s).
    thread::sleep(Duration::from_secs(3));
    assert_eq!(
        calls(),
        before,
        "scripts were called while the waiter waited"
    );
    drop(guard);
    assert!(waiter.join().unwrap().unwrap() > 0);
}

#[test]
fn bad_input_is_refused_with_its_cause() {
    // Nothing listens on a port we just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = RedisClient::builder(&format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .unwrap_err();
    assert!(matches!(&e, Error::ConnectFailed { .. }), "{e:?}");
    let cause = std::error::Error::source(&e).expect("a cause").to_string();
    assert!(cause.to_lowercase().contains("refused"), "{cause}");

    let server = TestingRedis::start().unwrap();
    server
        .command(&["CONFIG", "SET", "requirepass", "right"])
        .unwrap();
    let e =
        RedisClient::connect(&format!("redis://:wrong@127.0.0.1:{}", server.port())).unwrap_err();
    assert!(
        matches!(&e, Error::ConnectFailed { cause, .. } if matches!(**cause, Error::AuthFailed(_))),
        "{e:?}"
    );
    assert!(
        !format!("{e:?}{e}").contains("wrong"),
        "the password is not shown: {e:?}"
    );
    let ok = RedisClient::connect(&format!("redis://:right@127.0.0.1:{}", server.port())).unwrap();
    assert!(matches!(
        RedisMutex::new(&ok, ""),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        RedisMutex::new(&ok, &"n".repeat(5000)),
        Err(Error::InvalidArgument(_))
    ));
    let e = RedisClient::connect(&format!("redis://:right@127.0.0.1:{}/99999", server.port()))
        .unwrap_err();
    assert!(matches!(&e, Error::ConnectFailed { .. }), "{e:?}");
}

// ---------------------------------------------------------------------------
// A holder in another process: killed, or frozen past its TTL.
// ---------------------------------------------------------------------------

/// Takes the lock after the worker stopped holding it; how long that took.
fn take_over(server: &TestingRedis, register: &FencedRegister) -> (Duration, u64) {
    let c = client(server, Duration::from_secs(2));
    let mutex = RedisMutex::new(&c, "worker").unwrap();
    let started = Instant::now();
    let guard = mutex.try_lock_for(patience()).unwrap().expect("taken over");
    let took = started.elapsed();
    let token = guard.fencing_token();
    let mut fence = register.client().unwrap();
    fence.enter(token, "taker").unwrap();
    assert!(fence.write(token, "taker", "x").unwrap().is_accepted());
    fence.exit(token, "taker").unwrap();
    (took, token)
}

#[test]
fn a_frozen_holder_that_checks_health_makes_no_late_write() {
    frozen_holder(true);
}

#[test]
fn a_frozen_holder_that_does_not_check_is_stopped_by_the_fence() {
    frozen_holder(false);
}

fn frozen_holder(checks: bool) {
    let server = TestingRedis::start().unwrap();
    let register = FencedRegister::start().unwrap();
    let worker = start_worker(&server, &register, if checks { "check" } else { "blind" });
    worker.expect("held");
    worker.expect("wrote true");
    worker.signal("-STOP");
    let (took, _) = take_over(&server, &register);
    println!("taken over {took:?} after SIGSTOP (TTL 2 s)");
    worker.signal("-CONT");
    if checks {
        worker.expect("lost");
    } else {
        assert_eq!(
            worker.expect("wrote"),
            "false",
            "the fence refused the late write"
        );
    }
    let report = register.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    let late = report.workers.get("worker").map_or(0, |s| s.rejected);
    if checks {
        assert_eq!(late, 0, "a holder that checks health() writes nothing late");
    } else {
        assert!(late > 0);
    }
}

#[test]
fn a_restart_that_lost_the_key_lets_two_hold_and_the_fence_refuses_the_stale_one() {
    let mut server = TestingRedis::start().unwrap();
    let register = FencedRegister::start().unwrap();
    let a = client(&server, Duration::from_secs(30));
    let mutex = RedisMutex::new(&a, "restart").unwrap();
    let guard = mutex.lock().unwrap();
    let old = guard.fencing_token();
    let mut fence = register.client().unwrap();
    fence.enter(old, "a").unwrap();
    assert!(fence.write(old, "a", "1").unwrap().is_accepted());
    server.restart().unwrap();
    // The key is gone: another holder is granted while `a` still believes it holds.
    let b = client(&server, Duration::from_secs(30));
    let other = RedisMutex::new(&b, "restart").unwrap();
    let second = other
        .try_lock_for(patience())
        .unwrap()
        .expect("granted again");
    let new = second.fencing_token();
    assert!(new > old);
    let mut fence_b = register.client().unwrap();
    fence_b.enter(new, "b").unwrap();
    assert!(fence_b.write(new, "b", "2").unwrap().is_accepted());
    assert!(
        !fence.write(old, "a", "3").unwrap().is_accepted(),
        "the fence refuses the stale holder"
    );
    fence.exit(old, "a").unwrap();
    fence_b.exit(new, "b").unwrap();
    // And the old holder hears it at its next renewal.
    wait_for("a's hold to read Lost", || {
        guard.health() == LockHealth::Lost
    });
    let report = register.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.stale_rejected, 1);
}

// ---------------------------------------------------------------------------
// redis-py's Lock and zklock on one name.
// ---------------------------------------------------------------------------

/// Debian's Python, which has Debian's redis-py (`python3-redis`).
fn python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn append(log: &std::path::Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// Checks an ENTER/EXIT log: nobody enters while another holds. Returns who entered, in order.
fn holders_without_overlap(log: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut holder: Option<&str> = None;
    let mut order = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match line.split_once(' ') {
            Some(("ENTER", who)) => {
                if let Some(h) = holder {
                    panic!(
                        "OVERLAP at line {}: {who} entered while {h} held the lock",
                        i + 1
                    );
                }
                holder = Some(who);
                order.push(who.to_owned());
            }
            Some(("EXIT", who)) => {
                assert_eq!(
                    holder,
                    Some(who),
                    "line {}: {who} exited without holding",
                    i + 1
                );
                holder = None;
            }
            _ => panic!("line {}: {line:?}", i + 1),
        }
    }
    assert!(holder.is_none(), "the log ends inside {holder:?}'s hold");
    order
}

#[test]
#[should_panic(expected = "OVERLAP at line 4: rs entered while py held the lock")]
fn the_overlap_check_catches_an_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    for line in [
        "ENTER rs", "EXIT rs", "ENTER py", "ENTER rs", "EXIT rs", "EXIT py",
    ] {
        append(&log, line);
    }
    holders_without_overlap(&log);
}

#[test]
fn redis_py_and_zklock_exclude_each_other_on_one_name() {
    const ROUNDS: usize = 30;
    let server = TestingRedis::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let c = client(&server, Duration::from_secs(30));
    let mutex = RedisMutex::redis_py(&c, "shared-report").unwrap();
    // The Rust side holds first, so that the Python side must wait for it: the two contend
    // however late a loaded machine starts Python.
    let mut first = Some(mutex.lock().unwrap());
    append(&log, "ENTER rs");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/redis_py_lock.py");
    let mut py = Command::new(python())
        .args([
            script,
            &server.url(),
            "shared-report",
            log.to_str().unwrap(),
        ])
        .arg(ROUNDS.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python3 (Debian's python3-redis is needed)");
    let mut said = BufReader::new(py.stdout.take().unwrap()).lines();
    assert_eq!(said.next().unwrap().unwrap(), "ready");
    for _ in 0..ROUNDS {
        let guard = match first.take() {
            Some(guard) => {
                // Python is trying now; let it wait a little.
                thread::sleep(Duration::from_millis(50));
                guard
            }
            None => {
                let guard = mutex.try_lock_for(patience()).unwrap().expect("acquired");
                append(&log, "ENTER rs");
                guard
            }
        };
        assert!(!server
            .command(&["GET", "shared-report"])
            .unwrap()
            .is_empty());
        thread::sleep(Duration::from_millis(3));
        append(&log, "EXIT rs");
        drop(guard);
        thread::sleep(Duration::from_millis(10));
    }
    let status = py.wait().unwrap();
    assert!(status.success(), "the Python side failed: {status}");
    let order = holders_without_overlap(&log);
    let count = |who: &str| order.iter().filter(|h| *h == who).count();
    assert_eq!((count("rs"), count("py")), (ROUNDS, ROUNDS));
    assert_eq!(order[0], "rs");
    let handovers = order.windows(2).filter(|w| w[0] != w[1]).count();
    println!(
        "{} holds, {handovers} handovers between Rust and Python",
        order.len()
    );
    assert!(handovers >= 1, "the Python side never waited: {order:?}");
    wait_for("the last release", || {
        server.command(&["EXISTS", "shared-report"]).unwrap() == "0"
    });
}

#[test]
fn a_multi_lock_takes_redis_locks_all_or_none() {
    let server = TestingRedis::start().unwrap();
    let a = client(&server, Duration::from_secs(30));
    let b = client(&server, Duration::from_secs(30));
    let both = zklock::InterProcessMultiLock::from_locks(vec![
        Box::new(RedisMutex::new(&a, "from").unwrap()),
        Box::new(RedisMutex::new(&a, "to").unwrap()),
    ])
    .unwrap();
    let to = RedisMutex::new(&b, "to").unwrap();
    let held = to.lock().unwrap();
    assert!(!both.acquire_timeout(Duration::from_millis(300)).unwrap());
    // None: "from" is given back (in the background).
    wait_for("from to be given back", || {
        server.command(&["EXISTS", "zklock:{from}"]).unwrap() == "0"
    });
    drop(held);
    let guard = both.try_lock_for(patience()).unwrap().expect("both");
    assert!(guard.health() == LockHealth::Held);
    assert!(to.try_lock().unwrap().is_none());
}

// ---------------------------------------------------------------------------
// Failover and a frozen server.
// ---------------------------------------------------------------------------

/// A replica that missed the grant (paused, its link cut, while its primary granted and died)
/// is promoted: it grants the lock again while the first holder still believes it holds. The
/// fence refuses the first holder's late writes, the first holder reads `Lost` once its lease
/// runs out, and the window in which both believed they held is printed.
#[test]
fn a_promoted_replica_that_missed_the_key_lets_two_hold_and_the_fence_refuses_the_stale_one() {
    let mut primary = TestingRedis::start().unwrap();
    let mut replica = TestingRedis::replica_of(&primary).unwrap();
    let register = FencedRegister::start().unwrap();
    let a = client(&primary, Duration::from_secs(2));
    let mutex = RedisMutex::new(&a, "failover").unwrap();
    // An earlier grant and release the replica did see, so that it has the token key and no
    // holder key.
    mutex.lock().unwrap().release().unwrap();
    wait_for("the replica to have the token and no holder", || {
        replica
            .command(&["EXISTS", "zklock:{failover}:token", "zklock:{failover}"])
            .unwrap()
            == "1"
            && replica.command(&["EXISTS", "zklock:{failover}"]).unwrap() == "0"
    });
    // The replica stands still and its link is cut: what the primary writes now, it never gets.
    replica.pause().unwrap();
    primary
        .command(&["CLIENT", "KILL", "TYPE", "replica"])
        .unwrap();
    let guard = mutex.lock().unwrap();
    let old = guard.fencing_token();
    let mut fence = register.client().unwrap();
    fence.enter(old, "a").unwrap();
    assert!(fence.write(old, "a", "1").unwrap().is_accepted());
    primary.kill().unwrap();
    replica.resume().unwrap();
    replica.promote().unwrap();
    assert_eq!(
        replica.command(&["EXISTS", "zklock:{failover}"]).unwrap(),
        "0",
        "the promoted replica missed the grant"
    );
    let b = client(&replica, Duration::from_secs(2));
    let other = RedisMutex::new(&b, "failover").unwrap();
    let second = other
        .try_lock_for(patience())
        .unwrap()
        .expect("granted again");
    let granted_again = Instant::now();
    let new = second.fencing_token();
    assert!(new > old, "token {new} after {old}");
    let mut fence_b = register.client().unwrap();
    fence_b.enter(new, "b").unwrap();
    assert!(fence_b.write(new, "b", "2").unwrap().is_accepted());
    assert!(
        !fence.write(old, "a", "3").unwrap().is_accepted(),
        "the fence refuses the stale holder"
    );
    wait_for("a's hold to read Lost", || {
        guard.health() == LockHealth::Lost
    });
    println!(
        "both believed they held for {:?} (TTL 2 s): the fence refused the stale write",
        granted_again.elapsed()
    );
    fence.exit(old, "a").unwrap();
    fence_b.exit(new, "b").unwrap();
    let report = register.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.stale_rejected, 1);
}

/// A server frozen with SIGSTOP answers nothing: the holder reads `Suspended`, then `Lost`
/// once a TTL has passed since its last acknowledged renewal; a waiter's bounded acquire
/// returns within its bound plus the operation timeout; nothing hangs, and after the server
/// runs again a new holder gets a higher token.
#[test]
fn a_frozen_server_makes_a_holder_lost_and_nothing_hangs() {
    let server = TestingRedis::start().unwrap();
    let a = RedisClient::builder(&server.url())
        .ttl(Duration::from_secs(1))
        .operation_timeout(Duration::from_millis(500))
        .connect()
        .unwrap();
    let mutex = RedisMutex::new(&a, "frozen").unwrap();
    let guard = mutex.lock().unwrap();
    let old = guard.fencing_token();
    let events = mutex.health_events();
    server.pause().unwrap();
    let mut told = Vec::new();
    while told.last() != Some(&LockHealth::Lost) {
        told.push(
            events
                .recv_timeout(patience())
                .expect("health events")
                .health,
        );
    }
    assert_eq!(told, [LockHealth::Suspended, LockHealth::Lost]);
    let waiting = RedisMutex::new(&a, "frozen-too").unwrap();
    let waited = thread::spawn(move || {
        waiting
            .try_lock_for(Duration::from_millis(300))
            .map(|g| g.is_some())
    });
    wait_for("the bounded acquire to return", || waited.is_finished());
    assert!(
        waited.join().unwrap().is_err(),
        "no answer from a frozen server"
    );
    server.resume().unwrap();
    assert!(matches!(guard.release(), Err(Error::LockLost)));
    let b = client(&server, Duration::from_secs(1));
    let later = RedisMutex::new(&b, "frozen").unwrap();
    let taken = later
        .try_lock_for(patience())
        .unwrap()
        .expect("taken again");
    assert!(taken.fencing_token() > old);
}

/// Against a frozen server (SIGSTOP: connections are accepted by the kernel, nothing is
/// answered) every call returns within the bound that `docs/redis.md` states, with an
/// operation timeout T of 1 s: `RedisClient::connect` (connection timeout T) 2T, `try_lock` T,
/// `acquire_timeout(d)` d + T, `release` T, `close()` with holds T + 0.25 s. The test prints
/// what it measured and allows a quarter of the bound plus half a second more.
#[test]
fn calls_against_a_frozen_server_return_within_their_bounds() {
    const T: Duration = Duration::from_secs(1);
    let server = TestingRedis::start().unwrap();
    let connect = || {
        RedisClient::builder(&server.url())
            .operation_timeout(T)
            .connect()
            .unwrap()
    };
    let a = connect();
    let b = connect();
    let held: Vec<_> = (0..5)
        .map(|i| RedisMutex::new(&a, &format!("frozen-{i}")).unwrap())
        .collect();
    let mut guards: Vec<_> = held.iter().map(|m| m.lock().unwrap()).collect();
    let wanted = RedisMutex::new(&b, "frozen-0").unwrap();
    let also_wanted = RedisMutex::new(&b, "frozen-1").unwrap();
    server.pause().unwrap();
    let timed = |what: &str, bound: Duration, f: &mut dyn FnMut()| {
        let started = Instant::now();
        f();
        let took = started.elapsed();
        println!("{what}: {took:?} (bound {bound:?})");
        assert!(
            took <= bound + bound / 4 + Duration::from_millis(500),
            "{what} took {took:?}, bound {bound:?}"
        );
    };
    timed("RedisClient::connect", T + T, &mut || {
        let connected = RedisClient::builder(&server.url())
            .connect_timeout(T)
            .connect();
        assert!(connected.is_err(), "no answer from a frozen server");
    });
    timed("try_lock", T, &mut || {
        assert!(wanted.try_lock().is_err(), "no answer from a frozen server");
    });
    let d = Duration::from_millis(300);
    timed("acquire_timeout(300 ms)", d + T, &mut || {
        assert!(also_wanted.acquire_timeout(d).is_err());
    });
    // The first release finds the pooled connection silent, the second opens a new one.
    for _ in 0..2 {
        let mut guard = guards.pop();
        timed("release", T, &mut || {
            assert!(guard.take().unwrap().release().is_err());
        });
    }
    timed(
        "close() with 3 holds",
        T + Duration::from_millis(250),
        &mut || {
            a.close();
        },
    );
    server.resume().unwrap();
    drop(guards);
}

/// `close()` keeps its bound (T + 0.25 s) while the Client's subscriber is reconnecting to a
/// server that does not answer: the subscriber's connection is killed and every client paused
/// (`CLIENT PAUSE ALL`) in one transaction, so the subscriber reconnects into the pause.
#[test]
fn close_keeps_its_bound_while_the_subscriber_reconnects() {
    const T: Duration = Duration::from_millis(500);
    let server = TestingRedis::start().unwrap();
    let c = RedisClient::builder(&server.url())
        .connect_timeout(Duration::from_secs(2))
        .operation_timeout(T)
        .connect()
        .unwrap();
    server
        .commands(&[
            &["MULTI"],
            &["CLIENT", "KILL", "TYPE", "pubsub"],
            &["CLIENT", "PAUSE", "4000", "ALL"],
            &["EXEC"],
        ])
        .unwrap();
    // The subscriber sees its connection closed and reconnects into the pause.
    thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    c.close();
    let took = started.elapsed();
    let bound = T + Duration::from_millis(250);
    println!("close() while the subscriber reconnects: {took:?} (bound {bound:?})");
    assert!(
        took <= bound + bound / 4 + Duration::from_millis(500),
        "{took:?}"
    );
}

/// A release with a deadline (`release_timeout`, or the deadline a guard's drop gives) returns
/// by it against a frozen server, shorter than the operation timeout, and the release goes on
/// in the background: once the server runs again the lock is free without waiting for its TTL.
#[test]
fn a_release_with_a_deadline_keeps_to_it_and_finishes_in_the_background() {
    let server = TestingRedis::start().unwrap();
    let c = RedisClient::builder(&server.url())
        .operation_timeout(Duration::from_secs(2))
        .connect()
        .unwrap();
    let mutex = RedisMutex::new(&c, "deadline").unwrap();
    let guard = mutex.lock().unwrap();
    server.pause().unwrap();
    let started = Instant::now();
    assert!(guard.release_timeout(Duration::from_millis(200)).is_err());
    let took = started.elapsed();
    println!("release_timeout(200 ms) against a frozen server: {took:?} (operation timeout 2 s)");
    assert!(took < Duration::from_millis(900), "{took:?}");
    server.resume().unwrap();
    wait_for("the background release", || {
        server.command(&["EXISTS", "zklock:{deadline}"]).unwrap() == "0"
    });
}

/// The Client's connection state follows the server: `Suspended` and then `Lost` while it is
/// frozen past the TTL, `Reconnected` when it answers again, told to channels and listeners in
/// order.
#[test]
fn connection_states_follow_the_server() {
    let mut server = TestingRedis::start().unwrap();
    let c = RedisClient::builder(&server.url())
        .ttl(Duration::from_secs(1))
        .operation_timeout(Duration::from_millis(300))
        .connect()
        .unwrap();
    assert_eq!(c.state(), zklock::ConnectionState::Connected);
    let states = c.connection_states();
    let heard = Arc::new(Mutex::new(Vec::new()));
    {
        let heard = heard.clone();
        c.on_connection_state(move |s| heard.lock().unwrap().push(s));
    }
    let next = || states.recv_timeout(patience()).expect("a state");
    server.pause().unwrap();
    assert_eq!(next(), zklock::ConnectionState::Suspended);
    assert_eq!(next(), zklock::ConnectionState::Lost);
    assert!(!c.is_connected());
    server.resume().unwrap();
    assert_eq!(next(), zklock::ConnectionState::Reconnected);
    server.kill().unwrap();
    assert_eq!(next(), zklock::ConnectionState::Suspended);
    server.restart().unwrap();
    let mut after = next();
    if after == zklock::ConnectionState::Lost {
        after = next();
    }
    assert_eq!(after, zklock::ConnectionState::Reconnected);
    wait_for("the listener to hear every state", || {
        heard.lock().unwrap().len() >= 4
    });
    assert_eq!(
        heard.lock().unwrap()[..4],
        [
            zklock::ConnectionState::Suspended,
            zklock::ConnectionState::Lost,
            zklock::ConnectionState::Reconnected,
            zklock::ConnectionState::Suspended,
        ]
    );
}

/// A failed connect says what happened: a host name that does not resolve; a port that
/// accepts and never answers (a frozen process, a black-holed host), after the connect bound.
#[test]
fn connect_errors_name_what_happened() {
    let e = RedisClient::builder("redis://nosuchhost.invalid:6379")
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .expect_err("no such host");
    let chain = |e: &Error| {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    };
    let text = chain(&e);
    println!("{text}");
    assert!(
        text.contains("nosuchhost.invalid") && text.contains("did not resolve"),
        "{text}"
    );

    let silent = zklock::testing::SilentListener::start().unwrap();
    let bound = Duration::from_secs(1);
    let started = Instant::now();
    let e = RedisClient::builder(&format!("redis://127.0.0.1:{}", silent.port()))
        .connect_timeout(bound)
        .connect()
        .expect_err("a port that never answers");
    let took = started.elapsed();
    let text = chain(&e);
    println!("{text} ({took:?})");
    assert!(text.contains("answered nothing within 1s"), "{text}");
    assert!(took < patience(), "{took:?}");
}
