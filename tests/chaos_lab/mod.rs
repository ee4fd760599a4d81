//! What the backends' chaos runs share: the worker loop on the fenced register, worker
//! processes (this test binary run again) that say what they hold, the lab that starts them and
//! waits for progress, and the report per fault.
//!
//! A worker takes the lock again and again and writes a few values with its fencing token under
//! each hold, until `stop` comes on its stdin; two of each three check `health()` before each
//! write, the third does not (only the fence stops it). It reports on stdout in lines marked
//! `chaos: `.

// Each test binary uses part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use zklock::testing::{FenceClient, FenceEvent, FenceEventKind, FencedRegister, Overlap};
use zklock::{Lock, LockHealth};

pub fn patience() -> Duration {
    Duration::from_secs(60)
}

/// How many failovers a failover run makes: `ZKLOCK_CHAOS_FAILOVERS`, 2 by default (CI's).
pub fn failovers() -> usize {
    std::env::var("ZKLOCK_CHAOS_FAILOVERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
}

// ---------------------------------------------------------------------------
// The worker process.
// ---------------------------------------------------------------------------

/// The worker's arguments, from the environment variable `var`: `URL REGISTER NAME
/// check|blind`; `None` when this process is not a worker.
pub fn worker_args(var: &str) -> Option<(String, String, String, bool)> {
    let args = std::env::var(var).ok()?;
    let args: Vec<&str> = args.split(' ').collect();
    Some((
        args[0].to_owned(),
        args[1].to_owned(),
        args[2].to_owned(),
        args[3] == "check",
    ))
}

/// A flag that turns true when `stop` (or the end) comes on stdin.
pub fn stop_on_stdin() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    thread::spawn(move || {
        let _ = std::io::stdin().lock().lines().next();
        flag.store(true, Ordering::SeqCst);
    });
    stop
}

/// A Client from `connect`, tried again every 200 ms until the server answers (a worker may
/// start while its server is down).
pub fn connect_until_up<C>(connect: impl Fn() -> zklock::Result<C>) -> C {
    loop {
        match connect() {
            Ok(c) => return c,
            Err(e) => {
                say(&format!("error {e}"));
                thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// The worker's loop on `mutex` until `stop`.
pub fn work<L: Lock>(mutex: &L, register: &str, name: &str, checks: bool, stop: &AtomicBool) {
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
}

pub fn say(line: &str) {
    println!("chaos: {line}");
}

// ---------------------------------------------------------------------------
// The lab: workers and the register.
// ---------------------------------------------------------------------------

pub struct Worker {
    pub name: String,
    pub checks: bool,
    child: Child,
    stdin: Option<ChildStdin>,
    /// The token this worker holds now, as it last said.
    holding: Arc<Mutex<Option<u64>>>,
}

impl Worker {
    fn start(lab: &Lab, name: &str, checks: bool) -> Worker {
        let mode = if checks { "check" } else { "blind" };
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", lab.test, "--nocapture", "--test-threads", "1"])
            .env(
                lab.var,
                format!("{} {} {name} {mode}", lab.url, lab.register.addr()),
            )
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

    pub fn holds(&self) -> bool {
        self.holding.lock().unwrap().is_some()
    }

    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
    }

    /// Asks the worker to stop after its current hold, and waits for it.
    pub fn stop(mut self) {
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

pub struct Lab {
    /// The server the workers started from now on connect to.
    pub url: String,
    pub register: FencedRegister,
    pub workers: Vec<Worker>,
    started: usize,
    /// The worker test of this binary, and the variable that carries its arguments.
    test: &'static str,
    var: &'static str,
}

impl Lab {
    pub fn new(url: String, test: &'static str, var: &'static str) -> Lab {
        Lab {
            url,
            register: FencedRegister::start().unwrap(),
            workers: Vec::new(),
            started: 0,
            test,
            var,
        }
    }

    pub fn start_worker(&mut self) {
        self.started += 1;
        let name = format!("w{}", self.started);
        let checks = !self.started.is_multiple_of(3);
        let worker = Worker::start(self, &name, checks);
        self.workers.push(worker);
    }

    pub fn accepted(&self) -> usize {
        self.register
            .log()
            .iter()
            .filter(|e| e.kind == FenceEventKind::Accepted)
            .count()
    }

    /// Waits until `n` more writes were accepted.
    pub fn progress(&self, n: usize, what: &str) {
        let target = self.accepted() + n;
        let deadline = Instant::now() + patience();
        while self.accepted() < target {
            assert!(Instant::now() < deadline, "no progress {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The index of a worker that holds now (waits for one).
    pub fn holder(&self) -> usize {
        let deadline = Instant::now() + patience();
        loop {
            if let Some(i) = self.workers.iter().position(Worker::holds) {
                return i;
            }
            assert!(Instant::now() < deadline, "nobody holds");
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// The sequence number the register's next event will have.
    pub fn next_seq(&self) -> u64 {
        self.register.log().len() as u64
    }

    /// Kills the holder with SIGKILL (it is gone from the lab).
    pub fn kill_holder(&mut self) {
        let i = self.holder();
        let killed = self.workers.remove(i);
        killed.signal("-KILL");
        drop(killed);
    }

    /// Freezes the holder with SIGSTOP for `frozen` while the others go on, then lets it run
    /// again; its name and whether it checks `health()`.
    pub fn freeze_holder(&mut self, frozen: Duration) -> (String, bool) {
        let i = self.holder();
        let who = (self.workers[i].name.clone(), self.workers[i].checks);
        self.workers[i].signal("-STOP");
        self.progress(10, "while the holder was frozen");
        thread::sleep(frozen);
        self.workers[i].signal("-CONT");
        self.progress(10, "after the frozen holder ran again");
        who
    }

    /// Stops every worker, prints the register's check and the report, and checks them: a clean
    /// log (no overlap, no stale write accepted), no late write of a frozen holder that checks
    /// `health()`, and at least `min_events` events.
    pub fn finish(self, rows: &[Row], min_events: usize) {
        self.finish_with(rows, min_events, |_, _| false);
    }

    /// [`finish`](Self::finish) for faults that the lock cannot survive alone (a failover that
    /// loses a grant, a session an administrator ends on the server before its holder can
    /// know): the overlaps `allowed` says are due to them are let through, every other fails
    /// the run, and the fence must have refused every stale write either way. Returns how many
    /// overlaps there were.
    pub fn finish_with(
        mut self,
        rows: &[Row],
        min_events: usize,
        allowed: impl Fn(&Overlap, &[FenceEvent]) -> bool,
    ) -> usize {
        for w in std::mem::take(&mut self.workers) {
            w.stop();
        }
        let log = self.register.log();
        let report = self.register.check();
        println!("\n{report}");
        print_rows(rows);
        println!(
            "chaos summary: {} faults injected, {} acquisitions, {} overlaps, {} stale writes \
             accepted",
            rows.len(),
            report.workers.values().map(|w| w.acquisitions).sum::<u64>(),
            report.overlaps.len(),
            report.stale_accepted.len()
        );
        let unexpected = report.overlaps.iter().filter(|o| !allowed(o, &log)).count();
        assert!(
            report.stale_accepted.is_empty() && unexpected == 0,
            "{unexpected} overlaps no fault explains: {report}"
        );
        for r in rows {
            if let Some((name, true, late)) = &r.late_writes {
                assert_eq!(*late, 0, "{name} checks health() and wrote late");
            }
        }
        assert!(log.len() > min_events, "{} events", log.len());
        report.overlaps.len()
    }
}

/// Whether `o` is a hold that began before the event `seq` overlapping one that began after
/// it: what a fault at `seq` that ends a hold on the server before its holder can know leads to.
pub fn began_across(o: &Overlap, log: &[FenceEvent], seq: u64) -> bool {
    let entered = |token: u64| {
        log.iter()
            .find(|e| e.kind == FenceEventKind::Enter && e.token == token)
            .map(|e| e.seq)
    };
    matches!(
        (entered(o.first_token), entered(o.second_token)),
        (Some(first), Some(second)) if first < seq && seq <= second
    )
}

// ---------------------------------------------------------------------------
// The report.
// ---------------------------------------------------------------------------

/// One fault's line in the report.
pub struct Row {
    pub fault: &'static str,
    pub longest_gap: Duration,
    pub rejected: usize,
    /// The frozen holder, whether it checks `health()`, and its writes the fence refused.
    pub late_writes: Option<(String, bool, usize)>,
}

/// The row's figures from the register's log since sequence number `from`; `late` names a
/// frozen holder and whether it checks `health()`.
pub fn row(fault: &'static str, lab: &Lab, from: u64, late: Option<(&str, bool)>) -> Row {
    let log = lab.register.log();
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

fn print_rows(rows: &[Row]) {
    println!("| fault | longest gap between accepted writes | writes refused by the fence | late writes of the frozen holder |");
    println!("|---|---:|---:|---|");
    for r in rows {
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
}
