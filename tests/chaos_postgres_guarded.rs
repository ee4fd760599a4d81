//! The PostgreSQL chaos run with writes guarded by the lock and nothing else: worker processes
//! contend for one `PgMutex` (session timeout 2 s) and append to a table, `chaos_log`, only
//! through `guarded_transaction` — the table checks no token — while faults hit the holders and
//! the server: kill -9 of the holder, SIGSTOP of the holder past its session timeout (again and
//! again, so that holders that check `health()` and one that does not are both frozen), SIGSTOP
//! of the server past the session timeout, and a restart of the server.
//!
//! Each entry is `TOKEN WORKER N`: the hold's fencing token is written for the check only. Its
//! position is taken from a one-row counter updated in the same statement, so the entries'
//! order is the order their transactions committed in (the counter's row lock is held until
//! the commit). At the end the whole log is read in that order: an entry whose token is below
//! one written before it is a stale write the guard let through, and the run fails on any. The
//! writes the guard refused, and those that failed otherwise, are counted (the worker inserts
//! them, with the reason, into `chaos_refused` through a plain connection) and the report
//! printed.
//!
//! Workers are this test binary run again (`guarded_chaos_worker`); two of each three check
//! `health()` before each write, the third does not (only the guard stops it). Each hold first
//! records, through its guard, which backend holds for which process, so the test can find the
//! holder. `ZKLOCK_CHAOS_FREEZES` sets how many holders are frozen (default 3), every other one
//! a worker that does not check `health()`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::patience;
use common::worker::{say, Worker};
use zklock::postgres::{PgMutex, PgStatement};
use zklock::testing::TestingPostgres;
use zklock::{Error, LockHealth, PgClient};

const WORKER: &str = "ZKLOCK_PG_GUARDED_CHAOS_WORKER";
const SESSION: Duration = Duration::from_secs(2);
const LOCK: &str = "chaos";

fn freezes() -> usize {
    std::env::var("ZKLOCK_CHAOS_FREEZES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
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
        match PgClient::builder(url)
            .session_timeout(SESSION)
            .connect_timeout(Duration::from_secs(1))
            .operation_timeout(Duration::from_millis(500))
            .connect()
        {
            Ok(c) => break c,
            Err(_) => thread::sleep(Duration::from_millis(200)),
        }
    };
    let mutex = PgMutex::new(&client, LOCK).unwrap();
    let me = PgStatement::new(
        "INSERT INTO chaos_holder (backend, process) VALUES (pg_backend_pid(), $1) \
         ON CONFLICT (backend) DO UPDATE SET process = EXCLUDED.process",
    )
    .bind(i64::from(std::process::id()));
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
        if let Err(e) = guard.guarded_transaction(std::slice::from_ref(&me)) {
            let what = format!("{token} {name} - failed: the record of the holder: {e:?}");
            note_refusal(&mut plain, url, &what);
            continue;
        }
        for i in 0..5 {
            if checks && guard.health() != LockHealth::Held {
                break;
            }
            let entry = format!("{token} {name} {i}");
            let append = PgStatement::new(
                "WITH s AS (UPDATE chaos_seq SET n = n + 1 RETURNING n) \
                 INSERT INTO chaos_log (n, entry) SELECT n, $1 FROM s",
            )
            .bind(entry.as_str());
            match guard.guarded_transaction(&[append]) {
                Ok(_) => {}
                Err(Error::HoldLost { source, .. }) => {
                    // Telemetry, not the resource: a plain insert of what was refused.
                    let why = match *source {
                        Error::LockLost => "before sending".to_owned(),
                        other => format!("by the server: {other}"),
                    };
                    note_refusal(&mut plain, url, &format!("{entry} {why}"));
                }
                Err(e) => note_refusal(&mut plain, url, &format!("{entry} failed: {e}")),
            }
            thread::sleep(Duration::from_millis(20));
        }
        drop(guard);
    }
    client.close();
}

fn note_refusal(plain: &mut Option<postgres_sync::Client>, url: &str, what: &str) {
    if plain.is_none() {
        *plain = url.parse::<postgres_sync::Config>().ok().and_then(|mut c| {
            c.connect_timeout(Duration::from_secs(1))
                .connect(postgres_sync::NoTls)
                .ok()
        });
    }
    if let Some(c) = plain {
        if c.execute("INSERT INTO chaos_refused VALUES ($1)", &[&what])
            .is_err()
        {
            *plain = None;
        }
    }
}

/// The workers and what the test reads of the server.
struct Lab<'a> {
    server: &'a TestingPostgres,
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
            .sql("SELECT count(*) FROM chaos_log")
            .ok()
            .and_then(|rows| rows.first()?.first()?.as_ref()?.parse().ok())
            .unwrap_or(0)
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

    /// The index of a worker that `fits` and holds the lock now (waits for one): the process
    /// its holding backend recorded.
    fn holder_that(&self, fits: impl Fn(&Running) -> bool) -> usize {
        let deadline = Instant::now() + patience();
        loop {
            let process = self.server.advisory_lock(LOCK).ok().and_then(|(held, _)| {
                let backend = *held.first()?;
                let rows = self
                    .server
                    .sql(&format!(
                        "SELECT process FROM chaos_holder WHERE backend = {backend}"
                    ))
                    .ok()?;
                rows.first()?.first()?.as_ref()?.parse::<u32>().ok()
            });
            if let Some(i) =
                process.and_then(|p| self.workers.iter().position(|w| w.pid == p && fits(w)))
            {
                return i;
            }
            assert!(
                Instant::now() < deadline,
                "no worker that fits holds; the lock (holders, waiters): {:?}; the holders' \
                 record: {:?}; the workers: {:?}; the last writers: {:?}; refused or failed: {:?}",
                self.server.advisory_lock(LOCK).ok(),
                self.server.sql("SELECT * FROM chaos_holder").ok(),
                self.workers
                    .iter()
                    .map(|w| (&w.name, w.pid, w.checks))
                    .collect::<Vec<_>>(),
                self.server
                    .sql("SELECT entry FROM chaos_log ORDER BY n DESC LIMIT 12")
                    .ok(),
                self.server.sql("SELECT what FROM chaos_refused").ok()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }
}

#[test]
fn guarded_writes_alone_let_no_stale_write_in() {
    let started = Instant::now();
    let mut server = TestingPostgres::start().unwrap();
    server
        .sql(
            "CREATE TABLE chaos_log (n bigint PRIMARY KEY, entry text NOT NULL); \
             CREATE TABLE chaos_seq (n bigint NOT NULL); INSERT INTO chaos_seq VALUES (0); \
             CREATE TABLE chaos_holder (backend int PRIMARY KEY, process bigint NOT NULL); \
             CREATE TABLE chaos_refused (what text NOT NULL)",
        )
        .unwrap();
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

    // kill -9 of the holder: one that checks `health()`, so that one that does not is left to
    // be frozen.
    let i = lab.holder_that(|w| w.checks);
    let killed = lab.workers.remove(i);
    killed.worker.signal("-KILL");
    drop(killed);
    lab.progress(10, "after the holder was killed");
    lab.start_worker();
    faults.push("kill -9 of the holder".to_owned());

    // SIGSTOP of the holder past its session timeout, again and again: every other time one
    // that does not check `health()`.
    for n in 0..freezes() {
        let i = lab.holder_that(|w| n % 2 == 0 || !w.checks);
        let w = &lab.workers[i];
        let how = if w.checks {
            "checks health()"
        } else {
            "does not check"
        };
        faults.push(format!(
            "SIGSTOP of the holder {} ({how}) for > session timeout",
            w.name
        ));
        w.worker.signal("-STOP");
        lab.progress(10, "while the holder was frozen");
        thread::sleep(SESSION);
        lab.workers[i].worker.signal("-CONT");
        lab.progress(10, "after the frozen holder ran again");
    }

    // SIGSTOP of the server past the session timeout.
    lab.holder_that(|_| true);
    server.pause().unwrap();
    thread::sleep(SESSION + SESSION / 2);
    server.resume().unwrap();
    lab.progress(10, "after the server ran again");
    faults.push("SIGSTOP of the server for > session timeout".to_owned());

    // A restart: every session ends, the workers open new ones.
    let workers = std::mem::take(&mut lab.workers);
    drop(lab);
    server.restart().unwrap();
    let mut lab = Lab {
        server: &server,
        workers,
        started: 6,
    };
    lab.progress(10, "after the server restarted");
    faults.push("restart of the server".to_owned());

    for Running { mut worker, .. } in std::mem::take(&mut lab.workers) {
        worker.tell("stop");
        let deadline = Instant::now() + patience();
        while worker.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
    }

    // The check: in commit order, no entry of a hold after a later hold's.
    let log = server
        .sql("SELECT entry FROM chaos_log ORDER BY n")
        .unwrap();
    let entries: Vec<&str> = log
        .iter()
        .filter_map(|row| row.first()?.as_deref())
        .collect();
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
    let refused = server.sql("SELECT what FROM chaos_refused").unwrap();
    let refused: Vec<&str> = refused
        .iter()
        .filter_map(|row| row.first()?.as_deref())
        .collect();
    let (failed, refused): (Vec<&str>, Vec<&str>) =
        refused.into_iter().partition(|r| r.contains(" failed: "));
    let before_sending = refused
        .iter()
        .filter(|r| r.contains("before sending"))
        .count();
    println!("faults: {faults:?}");
    println!(
        "{} holds, {accepted} guarded writes accepted, {} stale writes accepted, {} refused by \
         the guard ({before_sending} before sending, {} by the server): {refused:?}; {} failed \
         otherwise: {failed:?}; {:?} in all",
        holds.len(),
        stale.len(),
        refused.len(),
        refused.len() - before_sending,
        failed.len(),
        started.elapsed()
    );
    assert!(stale.is_empty(), "stale writes accepted: {stale:?}");
    assert!(accepted > 100, "{accepted} writes");
}

/// The entries (`TOKEN WORKER N`, in commit order) written after an entry of a later hold:
/// what a guard must never let through.
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
