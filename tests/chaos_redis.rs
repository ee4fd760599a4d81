//! The Redis chaos run: worker processes contend for one fair `RedisMutex` (2 s TTL) and
//! write with their fencing tokens to a [`FencedRegister`], while faults hit the holders and
//! the server: kill -9 of the holder, SIGSTOP of the holder past its TTL, SIGSTOP of the
//! server past the TTL, a restart that loses every key, and a failover to a replica that
//! missed the holder's key. After each fault the run waits for a new holder's accepted write,
//! and at the end it checks the register's whole log (no overlap, no stale write accepted) and
//! prints a report per fault: the longest gap between accepted writes, the writes the fence
//! refused, and the late writes of a frozen holder.
//!
//! Workers are this test binary run again (`redis_chaos_worker`): one Client, one thread,
//! reporting on stdout lines marked `chaos: `; two of each three check `health()` before each
//! write, the third does not (only the fence stops it).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use zklock::testing::{FenceClient, FenceEvent, FenceEventKind, FencedRegister, TestingRedis};
use zklock::{LockHealth, RedisClient, RedisMutex};

const WORKER: &str = "ZKLOCK_REDIS_CHAOS_WORKER";
const TTL: Duration = Duration::from_secs(2);
const LOCK: &str = "chaos";

fn patience() -> Duration {
    Duration::from_secs(60)
}

// ---------------------------------------------------------------------------
// The worker process.
// ---------------------------------------------------------------------------

/// The worker: `URL REGISTER NAME check|blind`. Takes the lock again and again, writes a few
/// values under each hold, until `stop` comes on stdin.
#[test]
fn redis_chaos_worker() {
    let Ok(args) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let args: Vec<&str> = args.split(' ').collect();
    let (url, register, name, checks) = (args[0], args[1], args[2], args[3] == "check");
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        thread::spawn(move || {
            let _ = std::io::stdin().lock().lines().next();
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
            Err(e) => {
                say(&format!("error {e}"));
                thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let mutex = RedisMutex::new(&client, LOCK).unwrap();
    let mut fence = FenceClient::connect(register).unwrap();
    while !stop.load(Ordering::SeqCst) {
        let guard = match mutex.try_lock_for(Duration::from_secs(1)) {
            Ok(Some(guard)) => guard,
            Ok(None) => continue,
            Err(e) => {
                say(&format!("error {e}"));
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let token = guard.fencing_token();
        fence.enter(token, name).unwrap();
        say(&format!("held {token}"));
        for i in 0..5 {
            if checks && guard.health() != LockHealth::Held {
                say(&format!("lost {token}"));
                break;
            }
            let accepted = fence
                .write(token, name, &i.to_string())
                .unwrap()
                .is_accepted();
            say(&format!("wrote {token} {accepted}"));
            thread::sleep(Duration::from_millis(20));
        }
        fence.exit(token, name).unwrap();
        drop(guard);
        say(&format!("released {token}"));
    }
    client.close();
}

fn say(line: &str) {
    println!("chaos: {line}");
}

// ---------------------------------------------------------------------------
// The lab: workers, the servers, the register.
// ---------------------------------------------------------------------------

struct Worker {
    name: String,
    checks: bool,
    child: Child,
    stdin: Option<ChildStdin>,
    /// The token this worker holds now, as it last said.
    holding: Arc<Mutex<Option<u64>>>,
}

impl Worker {
    fn start(url: &str, register: &FencedRegister, name: &str, checks: bool) -> Worker {
        let mode = if checks { "check" } else { "blind" };
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "redis_chaos_worker",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(WORKER, format!("{url} {} {name} {mode}", register.addr()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a worker");
        let stdout = child.stdout.take().unwrap();
        let holding = Arc::new(Mutex::new(None));
        {
            let holding = holding.clone();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let Some(at) = line.find("chaos: ") else {
                        continue;
                    };
                    let words: Vec<&str> = line[at + 7..].split(' ').collect();
                    match words.as_slice() {
                        ["held", token] => *holding.lock().unwrap() = token.parse().ok(),
                        ["released", _] => *holding.lock().unwrap() = None,
                        _ => {}
                    }
                }
            });
        }
        Worker {
            name: name.to_owned(),
            checks,
            stdin: child.stdin.take(),
            child,
            holding,
        }
    }

    fn holds(&self) -> bool {
        self.holding.lock().unwrap().is_some()
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
    }

    /// Asks the worker to stop after its current hold, and waits for it.
    fn stop(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "stop");
        }
        let deadline = Instant::now() + patience();
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.signal("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Lab {
    primary: TestingRedis,
    url: String,
    register: FencedRegister,
    workers: Vec<Worker>,
    started: usize,
}

impl Lab {
    fn start_worker(&mut self) {
        self.started += 1;
        let name = format!("w{}", self.started);
        let checks = !self.started.is_multiple_of(3);
        self.workers
            .push(Worker::start(&self.url, &self.register, &name, checks));
    }

    fn accepted(&self) -> usize {
        self.register
            .log()
            .iter()
            .filter(|e| e.kind == FenceEventKind::Accepted)
            .count()
    }

    /// Waits until `n` more writes were accepted.
    fn progress(&self, n: usize, what: &str) {
        let target = self.accepted() + n;
        let deadline = Instant::now() + patience();
        while self.accepted() < target {
            assert!(Instant::now() < deadline, "no progress {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The index of a worker that holds now (waits for one).
    fn holder(&self) -> usize {
        let deadline = Instant::now() + patience();
        loop {
            if let Some(i) = self.workers.iter().position(Worker::holds) {
                return i;
            }
            assert!(Instant::now() < deadline, "nobody holds");
            thread::sleep(Duration::from_millis(5));
        }
    }
}

// ---------------------------------------------------------------------------
// Faults and the report.
// ---------------------------------------------------------------------------

/// One fault's line in the report.
struct Row {
    fault: &'static str,
    longest_gap: Duration,
    rejected: usize,
    /// The frozen holder, whether it checks `health()`, and its writes the fence refused.
    late_writes: Option<(String, bool, usize)>,
}

/// The rows' figures from the register's log between two sequence numbers.
fn row(fault: &'static str, log: &[FenceEvent], from: u64, late: Option<(&str, bool)>) -> Row {
    // From the last event before the fault: a gap that the fault opened counts from there.
    let slice: Vec<&FenceEvent> = log.iter().filter(|e| e.seq + 1 >= from).collect();
    let accepted: Vec<Duration> = slice
        .iter()
        .filter(|e| e.kind == FenceEventKind::Accepted)
        .map(|e| e.at)
        .collect();
    let start = slice.first().map_or(Duration::ZERO, |e| e.at);
    let longest_gap = std::iter::once(start)
        .chain(accepted.iter().copied())
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or_default();
    let rejected = slice
        .iter()
        .filter(|e| e.seq >= from && e.kind == FenceEventKind::Rejected)
        .count();
    let late_writes = late.map(|(name, checks)| {
        let n = slice
            .iter()
            .filter(|e| e.worker == name && e.kind == FenceEventKind::Rejected)
            .count();
        (name.to_owned(), checks, n)
    });
    Row {
        fault,
        longest_gap,
        rejected,
        late_writes,
    }
}

#[test]
fn redis_chaos_schedule() {
    let primary = TestingRedis::start().unwrap();
    let replica = TestingRedis::replica_of(&primary).unwrap();
    let url = primary.url();
    let mut lab = Lab {
        primary,
        url,
        register: FencedRegister::start().unwrap(),
        workers: Vec::new(),
        started: 0,
    };
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(20, "before the first fault");
    let mut rows = Vec::new();
    let next_seq = |lab: &Lab| lab.register.log().len() as u64;

    // kill -9 of the holder: another holds within the TTL.
    let from = next_seq(&lab);
    let i = lab.holder();
    let killed = lab.workers.remove(i);
    killed.signal("-KILL");
    drop(killed);
    lab.progress(10, "after the holder was killed");
    rows.push(row(
        "kill -9 of the holder",
        &lab.register.log(),
        from,
        None,
    ));
    lab.start_worker();

    // SIGSTOP of the holder past its TTL: the others go on; once it runs again a holder that
    // checks health() writes nothing, one that does not is refused by the fence.
    let from = next_seq(&lab);
    let i = lab.holder();
    let frozen = (lab.workers[i].name.clone(), lab.workers[i].checks);
    lab.workers[i].signal("-STOP");
    lab.progress(10, "while the holder was frozen");
    thread::sleep(TTL);
    lab.workers[i].signal("-CONT");
    lab.progress(10, "after the frozen holder ran again");
    rows.push(row(
        "SIGSTOP of the holder for > TTL",
        &lab.register.log(),
        from,
        Some((&frozen.0, frozen.1)),
    ));

    // SIGSTOP of the server past the TTL.
    let from = next_seq(&lab);
    lab.primary.pause().unwrap();
    thread::sleep(TTL + TTL / 2);
    lab.primary.resume().unwrap();
    lab.progress(10, "after the server ran again");
    rows.push(row(
        "SIGSTOP of the server for > TTL",
        &lab.register.log(),
        from,
        None,
    ));

    // A restart that loses every key.
    let from = next_seq(&lab);
    lab.holder();
    lab.primary.restart().unwrap();
    lab.progress(10, "after the server restarted without its keys");
    rows.push(row(
        "restart without persistence",
        &lab.register.log(),
        from,
        None,
    ));

    // A failover to a replica that missed the holder's key: the replica is paused and its link
    // cut, the primary grants and dies, the replica is promoted; workers pointed at it carry on.
    let from = next_seq(&lab);
    let mut replica = replica;
    replica.pause().unwrap();
    lab.primary
        .command(&["CLIENT", "KILL", "TYPE", "replica"])
        .unwrap();
    lab.progress(5, "after the replica's link was cut");
    lab.holder();
    lab.primary.kill().unwrap();
    replica.resume().unwrap();
    replica.promote().unwrap();
    lab.url = replica.url();
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(10, "after the failover");
    rows.push(row(
        "failover to a replica that missed the key",
        &lab.register.log(),
        from,
        None,
    ));

    for w in std::mem::take(&mut lab.workers) {
        w.stop();
    }
    let log = lab.register.log();
    let report = lab.register.check();
    println!("\n{report}");
    println!("| fault | longest gap between accepted writes | writes refused by the fence | late writes of the frozen holder |");
    println!("|---|---:|---:|---|");
    for r in &rows {
        let late = r
            .late_writes
            .as_ref()
            .map_or("—".to_owned(), |(w, checks, n)| {
                let how = if *checks {
                    "checks health()"
                } else {
                    "does not check"
                };
                format!("{w} ({how}): {n}")
            });
        println!(
            "| {} | {:.2} s | {} | {late} |",
            r.fault,
            r.longest_gap.as_secs_f64(),
            r.rejected
        );
    }
    assert!(report.is_clean(), "{report}");
    if let Some((name, true, late)) = &rows[1].late_writes {
        assert_eq!(*late, 0, "{name} checks health() and wrote late");
    }
    assert!(log.len() > 100);
    drop(replica);
}
