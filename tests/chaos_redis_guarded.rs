//! The Redis chaos run with writes guarded by the lock and nothing else: worker processes
//! contend for one fair `RedisMutex` (2 s TTL) and append to a Redis list, `{chaos}:log`, only
//! through `guarded_script` — the list checks no token — while faults hit the holders and the
//! server: kill -9 of the holder, SIGSTOP of the holder past its TTL (again and again, so that
//! holders that check `health()` and the one that does not are both frozen), SIGSTOP of the
//! server past the TTL, and a restart (with `appendfsync always`, so that the list survives
//! it).
//!
//! Each entry is `TOKEN WORKER N`: the hold's fencing token is written for the check only. At
//! the end the whole list is read in the server's order: an entry whose token is below one
//! written before it is a stale write the guard let through, and the run fails on any. The
//! writes the guard refused are counted (the worker appends them, with the reason, to
//! `{chaos}:refused` through a plain client) and the report printed.
//!
//! Workers are this test binary run again (`guarded_chaos_worker`); two of each three check
//! `health()` before each write, the third does not (only the guard stops it).
//! `ZKLOCK_CHAOS_FREEZES` sets how many holders are frozen (default 4), every other one a worker
//! that does not check `health()`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::patience;
use common::worker::{say, Worker};
use zklock::redis::{RedisMutex, RedisScript};
use zklock::testing::TestingRedis;
use zklock::{Error, LockHealth, RedisClient};

const WORKER: &str = "ZKLOCK_REDIS_GUARDED_CHAOS_WORKER";
const TTL: Duration = Duration::from_secs(2);
const LOCK: &str = "chaos";
const LOG: &str = "{chaos}:log";
const REFUSED: &str = "{chaos}:refused";

fn freezes() -> usize {
    std::env::var("ZKLOCK_CHAOS_FREEZES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4)
}

/// The worker: `URL NAME check|blind`. Takes the lock again and again and appends five
/// entries under each hold through its guard, until its standard input closes.
#[test]
fn guarded_chaos_worker() {
    let Ok(args) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let args: Vec<&str> = args.split(' ').collect();
    let (url, name, checks) = (args[0], args[1], args[2] == "check");
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        thread::spawn(move || {
            let _ = std::io::stdin().lines().next();
            stop.store(true, Ordering::SeqCst);
        });
    }
    let client = loop {
        match RedisClient::builder(url)
            .ttl(TTL)
            .connect_timeout(Duration::from_secs(1))
            .operation_timeout(Duration::from_millis(500))
            .connect()
        {
            Ok(c) => break c,
            Err(_) => thread::sleep(Duration::from_millis(200)),
        }
    };
    let mutex = RedisMutex::new(&client, LOCK).unwrap();
    let append = RedisScript::new("return redis.call('RPUSH', KEYS[1], ARGV[1])").key(LOG);
    let mut plain = None;
    say("started");
    while !stop.load(Ordering::SeqCst) {
        let guard = match mutex.try_lock_for(Duration::from_secs(1)) {
            Ok(Some(guard)) => guard,
            Ok(None) => continue,
            Err(_) => {
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let token = guard.fencing_token();
        for i in 0..5 {
            if checks && guard.health() != LockHealth::Held {
                break;
            }
            let entry = format!("{token} {name} {i}");
            match guard.guarded_script(&append.clone().arg(&entry)) {
                Ok(_) => {}
                Err(Error::HoldLost { source, .. }) => {
                    // Telemetry, not the resource: a plain append of what was refused.
                    let why = match *source {
                        Error::LockLost => "before sending".to_owned(),
                        other => format!("by the server: {other}"),
                    };
                    note_refusal(&mut plain, url, &format!("{entry} {why}"));
                }
                Err(_) => {}
            }
            thread::sleep(Duration::from_millis(20));
        }
        drop(guard);
    }
    client.close();
}

fn note_refusal(plain: &mut Option<redis::Connection>, url: &str, what: &str) {
    if plain.is_none() {
        *plain = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
            .ok();
    }
    if let Some(c) = plain {
        if redis::cmd("RPUSH")
            .arg(REFUSED)
            .arg(what)
            .query::<i64>(c)
            .is_err()
        {
            *plain = None;
        }
    }
}

/// The workers and what the test reads of the server.
struct Lab<'a> {
    server: &'a TestingRedis,
    workers: Vec<Running>,
    started: usize,
}

/// A worker process: its pid, name, whether it checks `health()`.
struct Running {
    pid: u32,
    name: String,
    checks: bool,
    worker: Worker,
}

impl Lab<'_> {
    fn start_worker(&mut self) {
        self.started += 1;
        let checks = !self.started.is_multiple_of(3);
        let mode = if checks { "check" } else { "blind" };
        let name = format!("w{}", self.started);
        let args = format!("{} {name} {mode}", self.server.url());
        let worker = Worker::start("guarded_chaos_worker", WORKER, &args);
        worker.expect("started");
        self.workers.push(Running {
            pid: worker.child.id(),
            name,
            checks,
            worker,
        });
    }

    fn entries(&self) -> usize {
        self.server
            .command(&["LLEN", LOG])
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Waits until `n` more entries were appended.
    fn progress(&self, n: usize, what: &str) {
        let target = self.entries() + n;
        let deadline = Instant::now() + patience();
        while self.entries() < target {
            assert!(Instant::now() < deadline, "no progress {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The index of the worker whose id the lock's key holds (waits for one).
    fn holder(&self) -> usize {
        self.holder_that(|_| true)
    }

    /// As [`holder`](Self::holder), waiting for a holder that `fits`.
    fn holder_that(&self, fits: impl Fn(&Running) -> bool) -> usize {
        let deadline = Instant::now() + patience();
        loop {
            let owner = self.server.command(&["GET", "zklock:{chaos}"]).unwrap();
            // `RANDOM.PID@HOST:SEQ`
            let pid = owner
                .split_once('.')
                .and_then(|(_, rest)| rest.split_once('@'))
                .and_then(|(pid, _)| pid.parse::<u32>().ok());
            if let Some(i) =
                pid.and_then(|p| self.workers.iter().position(|w| w.pid == p && fits(w)))
            {
                return i;
            }
            assert!(Instant::now() < deadline, "nobody holds");
            thread::sleep(Duration::from_millis(5));
        }
    }
}

#[test]
fn guarded_writes_alone_let_no_stale_write_in() {
    let mut server = TestingRedis::start_persistent().unwrap();
    let mut lab = Lab {
        server: &server,
        workers: Vec::new(),
        started: 0,
    };
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(20, "before the first fault");
    let mut faults = Vec::new();

    // kill -9 of the holder.
    let i = lab.holder();
    let killed = lab.workers.remove(i);
    killed.worker.signal("-KILL");
    drop(killed);
    lab.progress(10, "after the holder was killed");
    lab.start_worker();
    faults.push("kill -9 of the holder".to_owned());

    // SIGSTOP of the holder past its TTL, again and again: every other time one that does not
    // check `health()`.
    for n in 0..freezes() {
        let i = lab.holder_that(|w| n % 2 == 0 || !w.checks);
        let w = &lab.workers[i];
        let how = if w.checks {
            "checks health()"
        } else {
            "does not check"
        };
        faults.push(format!(
            "SIGSTOP of the holder {} ({how}) for > TTL",
            w.name
        ));
        w.worker.signal("-STOP");
        lab.progress(10, "while the holder was frozen");
        thread::sleep(TTL);
        lab.workers[i].worker.signal("-CONT");
        lab.progress(10, "after the frozen holder ran again");
    }

    // SIGSTOP of the server past the TTL.
    server.pause().unwrap();
    thread::sleep(TTL + TTL / 2);
    server.resume().unwrap();
    lab.progress(10, "after the server ran again");
    faults.push("SIGSTOP of the server for > TTL".to_owned());

    let workers = std::mem::take(&mut lab.workers);
    drop(lab);
    // A restart that keeps every key (append-only file, fsync always).
    server.restart().unwrap();
    let mut lab = Lab {
        server: &server,
        workers,
        started: 5,
    };
    lab.progress(10, "after the server restarted");
    faults.push("restart with appendfsync always".to_owned());

    for Running { mut worker, .. } in std::mem::take(&mut lab.workers) {
        worker.tell("stop");
        let deadline = Instant::now() + patience();
        while worker.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
    }

    // The check: in the server's order, no entry of a hold after a later hold's.
    let log = server.command(&["LRANGE", LOG, "0", "-1"]).unwrap();
    let entries: Vec<&str> = log.lines().filter(|l| !l.is_empty()).collect();
    let stale = stale_entries(&entries);
    let accepted = entries.len();
    let holds: std::collections::BTreeSet<&str> =
        entries.iter().filter_map(|e| e.split(' ').next()).collect();
    // The check catches one: the first hold's entry planted at the end.
    let mut planted = entries.clone();
    planted.push(entries[0]);
    assert_eq!(
        stale_entries(&planted),
        [entries[0]],
        "the check missed a planted one"
    );
    let refused = server.command(&["LRANGE", REFUSED, "0", "-1"]).unwrap();
    let refused: Vec<&str> = refused.lines().filter(|l| !l.is_empty()).collect();
    let before_sending = refused
        .iter()
        .filter(|r| r.contains("before sending"))
        .count();
    println!("faults: {faults:?}");
    println!(
        "{} holds, {accepted} guarded writes accepted, {} stale writes accepted, {} refused by \
         the guard ({before_sending} before sending, {} by the server's check): {refused:?}",
        holds.len(),
        stale.len(),
        refused.len(),
        refused.len() - before_sending
    );
    assert!(stale.is_empty(), "stale writes accepted: {stale:?}");
    assert!(accepted > 100, "{accepted} writes");
}

/// The entries (`TOKEN WORKER N`, in the server's order) written after an entry of a later
/// hold: what a guard must never let through.
fn stale_entries<'a>(entries: &[&'a str]) -> Vec<&'a str> {
    let mut highest = 0u64;
    let mut stale = Vec::new();
    for entry in entries {
        let token: u64 = entry.split(' ').next().unwrap().parse().unwrap();
        if token < highest {
            stale.push(*entry);
        }
        highest = highest.max(token);
    }
    stale
}
