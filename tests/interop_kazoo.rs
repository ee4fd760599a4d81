//! Cross-language interop with kazoo: Python processes running Debian's `python3-kazoo`
//! (`tests/python/kazoo_worker.py`) and zklock's kazoo-layout recipes on the same paths of one
//! real ZooKeeper: the mutex (two Python and two Rust processes on a fenced register, FIFO,
//! and a holder that skips the lock to show the exclusion check failing), the read-write lock,
//! the semaphore and its `max_leases` agreement, `contenders()`, and the election; and the
//! health of a kazoo-layout lease.
//!
//! Needs `/usr/bin/python3` with Debian's `python3-kazoo`
//! (`scripts/ensure-zookeeper.sh --kazoo` installs it); without it these tests fail, saying so.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::java::append;
use common::worker::{say, Worker};
use common::*;
use zklock::testing::{
    FenceClient, FenceEvent, FenceEventKind, FenceReport, FencedRegister, TestingServer,
};
use zklock::zookeeper::{KazooElection, KazooSemaphore};
use zklock::{Error, InterProcessMutex, InterProcessReadWriteLock, LockHealth};

const SESSION: Duration = Duration::from_secs(20);
const WORKER_VAR: &str = "ZKLOCK_KAZOO_WORKER";

/// Debian's Python, which has Debian's kazoo.
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A kazoo worker process; ended (killed) when dropped.
struct Py {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Py {
    fn start(args: &[&str]) -> Py {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/kazoo_worker.py");
        let mut child = Command::new(python())
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run python3 (Debian's python3-kazoo is needed)");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let py = Py {
            stdin: child.stdin.take(),
            child,
            lines,
        };
        assert_eq!(py.next_line(), "ready", "kazoo worker did not start");
        py
    }

    /// `cmd` mode on `path` as `id`.
    fn commands(connect: &str, path: &str, id: &str) -> Py {
        Py::start(&["cmd", connect, path, id])
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(patience())
            .expect("the kazoo worker said nothing (is python3-kazoo installed?)")
    }

    /// A line if one comes within `d`.
    fn line_within(&self, d: Duration) -> Option<String> {
        self.lines.recv_timeout(d).ok()
    }

    fn send(&mut self, cmd: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
    }

    fn ask(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.next_line()
    }

    fn list(&mut self, cmd: &str, tag: &str) -> Vec<String> {
        let answer = self.ask(cmd);
        let json = answer
            .strip_prefix(tag)
            .unwrap_or_else(|| panic!("{cmd}: {answer:?}"));
        parse_list(json.trim())
    }

    fn finish(mut self) {
        self.stdin.take();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the kazoo worker failed: {status}");
    }
}

impl Drop for Py {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON list of strings as kazoo's worker prints it (identifiers are plain words here).
fn parse_list(json: &str) -> Vec<String> {
    let inner = json.trim_start_matches('[').trim_end_matches(']').trim();
    if inner.is_empty() {
        return Vec::new();
    }
    inner
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_owned())
        .collect()
}

/// Children of `path` whose names contain `name`.
fn nodes(client: &zklock::Client, path: &str, name: &str) -> usize {
    client
        .children(path)
        .map(|c| c.iter().filter(|n| n.contains(name)).count())
        .unwrap_or(0)
}

/// What in a fenced register's log shows two holders inside at once, in a run without faults;
/// empty when the holds never interleaved. Beside [`FenceReport::check`] (which counts an
/// overlap only when both holders' writes were accepted) it reports any rejected write (a
/// newer holder wrote first, so the older one's write was refused) and any `enter` before the
/// previous holder's `exit`, so an overlap is caught whichever holder wrote first, or if
/// neither wrote inside it. The workers do not judge their own writes: this does, from the log.
fn exclusion_faults(log: &[FenceEvent]) -> Vec<String> {
    let report = FenceReport::check(log);
    let mut faults = Vec::new();
    if !report.is_clean() {
        faults.push(format!("the fence report shows a violation:\n{report}"));
    }
    if report.rejected() > 0 {
        faults.push(format!(
            "{} writes rejected: a newer holder wrote while an older one was inside",
            report.rejected()
        ));
    }
    let mut inside: Vec<&FenceEvent> = Vec::new();
    for e in log {
        let same = |i: &&FenceEvent| (i.token, &i.worker) == (e.token, &e.worker);
        match e.kind {
            FenceEventKind::Enter => {
                for other in &inside {
                    faults.push(format!(
                        "#{}: {} (token {}) entered while {} (token {}) was inside since #{}",
                        e.seq, e.worker, e.token, other.worker, other.token, other.seq
                    ));
                }
                inside.push(e);
            }
            FenceEventKind::Exit => match inside.iter().position(same) {
                Some(i) => {
                    inside.remove(i);
                }
                None => faults.push(format!(
                    "#{}: {} (token {}) exited without entering",
                    e.seq, e.worker, e.token
                )),
            },
            FenceEventKind::Accepted | FenceEventKind::Rejected => {
                if !inside.iter().any(same) {
                    faults.push(format!(
                        "#{}: {} (token {}) wrote outside its hold",
                        e.seq, e.worker, e.token
                    ));
                }
            }
        }
    }
    faults
}

/// Panics with every fault [`exclusion_faults`] finds in `log`.
#[track_caller]
fn assert_one_holder_at_a_time(log: &[FenceEvent]) {
    let faults = exclusion_faults(log);
    assert!(
        faults.is_empty(),
        "two holders inside at once:\n{}",
        faults.join("\n")
    );
}

// ---------------------------------------------------------------------------
// The mutex: two Python and two Rust processes on a fenced register
// ---------------------------------------------------------------------------

/// A Rust contender process: this binary run again (see `Worker`).
#[test]
fn kazoo_rust_worker() {
    let Ok(args) = std::env::var(WORKER_VAR) else {
        return; // only as a worker process
    };
    let a: Vec<&str> = args.split(' ').collect();
    let (connect, path, id, rounds, fence) = (a[0], a[1], a[2], a[3].parse().unwrap(), a[4]);
    let client = client(connect, SESSION);
    let mutex = InterProcessMutex::kazoo(&client, path, id).unwrap();
    let mut register = FenceClient::connect(fence).unwrap();
    say("ready");
    for i in 0..rounds {
        let guard = mutex.try_lock_for(patience()).unwrap().expect("acquired");
        let token = guard.fencing_token();
        register.enter(token, id).unwrap();
        register.write(token, id, &format!("{id}-{i}")).unwrap();
        thread::sleep(Duration::from_millis(2));
        register.exit(token, id).unwrap();
        guard.release().unwrap();
    }
    say("done");
}

#[test]
fn two_kazoo_and_two_zklock_processes_exclude_each_other_in_fifo_order() {
    const ROUNDS: usize = 30;
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let register = FencedRegister::start().unwrap();
    let fence = register.addr().to_string();
    let path = "/kazoo/mutex";
    let rounds = ROUNDS.to_string();
    let rust: Vec<Worker> = ["rs-1", "rs-2"]
        .iter()
        .map(|id| {
            let args = format!("{connect} {path} {id} {ROUNDS} {fence}");
            Worker::start("kazoo_rust_worker", WORKER_VAR, &args)
        })
        .collect();
    let python: Vec<Py> = ["py-1", "py-2"]
        .iter()
        .map(|id| Py::start(&["loop", &connect, path, id, "lock", &rounds, &fence]))
        .collect();
    for w in &rust {
        w.expect("ready");
    }
    for w in &rust {
        w.expect("done");
    }
    for p in python {
        assert_eq!(p.next_line(), "done");
        p.finish();
    }
    for mut w in rust {
        assert!(w.child.wait().unwrap().success());
    }
    let log = register.log();
    println!("{}", FenceReport::check(&log));
    assert_one_holder_at_a_time(&log);
    let enters: Vec<(u64, String)> = log
        .iter()
        .filter(|e| e.kind == FenceEventKind::Enter)
        .map(|e| (e.token, e.worker.clone()))
        .collect();
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, w) in &enters {
        *per.entry(w.as_str()).or_default() += 1;
    }
    assert_eq!(
        per.values().copied().collect::<Vec<_>>(),
        vec![ROUNDS; 4],
        "{per:?}"
    );
    // Tokens are the holders' nodes' czxids: creation order. Granted in queue order, they rise
    // with every hold.
    let out_of_order: Vec<_> = enters.windows(2).filter(|w| w[1].0 <= w[0].0).collect();
    assert!(out_of_order.is_empty(), "not FIFO: {out_of_order:?}");
    let handovers = enters.windows(2).filter(|w| w[0].1 != w[1].1).count();
    let across = enters
        .windows(2)
        .filter(|w| w[0].1.starts_with("py") != w[1].1.starts_with("py"))
        .count();
    println!(
        "{} holds, {handovers} handovers, {across} across languages",
        enters.len()
    );
    assert!(across > 0, "the languages never handed over to each other");
    let client = client(&connect, SESSION);
    assert_eq!(
        nodes(&client, path, "__lock__"),
        0,
        "lock nodes left behind"
    );
}

/// The check above can fail: a holder that skips the lock stays inside while a kazoo worker
/// takes the lock three times. It wrote before kazoo's first hold and writes again after the
/// last one, so its second write is refused and no two accepted writes share an interval:
/// the order [`FenceReport::check`] does not count as an overlap, and the one the interop
/// tests must still catch.
#[test]
fn the_exclusion_check_reports_a_holder_that_skips_the_lock_beside_kazoo() {
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let register = FencedRegister::start().unwrap();
    let fence = register.addr().to_string();
    let mut skipper = register.client().unwrap();
    let token = 1; // no lock, so no czxid: a token of its own, below any real one
    skipper.enter(token, "rs-skip").unwrap();
    assert!(skipper.write(token, "rs-skip", "a").unwrap().is_accepted());
    let py = Py::start(&["loop", &connect, "/kazoo/skip", "py-1", "lock", "3", &fence]);
    assert_eq!(py.next_line(), "done");
    py.finish();
    assert!(!skipper.write(token, "rs-skip", "b").unwrap().is_accepted());
    skipper.exit(token, "rs-skip").unwrap();
    let log = register.log();
    let report = FenceReport::check(&log);
    assert!(
        report.is_clean(),
        "the plant was meant to be the order the fence report misses: {report}"
    );
    let faults = exclusion_faults(&log);
    println!("{}", faults.join("\n"));
    assert!(
        faults.iter().any(|f| f.contains("1 writes rejected")),
        "the refused write went unreported: {faults:?}"
    );
    let entered = faults
        .iter()
        .filter(|f| f.contains("py-1") && f.contains("entered while rs-skip"))
        .count();
    assert_eq!(entered, 3, "kazoo's holds inside the skipper's: {faults:?}");
}

// ---------------------------------------------------------------------------
// contenders()
// ---------------------------------------------------------------------------

#[test]
fn contenders_equal_kazoos_on_the_same_path() {
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let path = "/kazoo/contenders";
    let client = client(&connect, SESSION);
    let mut p1 = Py::commands(&connect, path, "py-1");
    assert_eq!(p1.ask("lock"), "held");
    let mutex = InterProcessMutex::kazoo(&client, path, "rs-1").unwrap();
    let waiter = {
        let mutex = mutex.clone();
        thread::spawn(move || mutex.lock().map(|g| g.fencing_token()))
    };
    wait_for("the Rust waiter to queue", || {
        nodes(&client, path, "__lock__") == 2
    });
    let mut p2 = Py::commands(&connect, path, "py-2");
    p2.send("lock");
    wait_for("py-2 to queue", || nodes(&client, path, "__lock__") == 3);
    let ours = mutex.contenders().unwrap();
    assert_eq!(ours, ["py-1", "rs-1", "py-2"]);
    assert_eq!(p1.list("contenders", "contenders "), ours);
    // The Curator layout reads the same way: node data in lock order.
    let curator = InterProcessMutex::new(&client, "/kazoo/curator-contenders").unwrap();
    curator.set_node_data(b"rs-curator").unwrap();
    let _g = curator.lock().unwrap();
    assert_eq!(curator.contenders().unwrap(), ["rs-curator"]);
    assert_eq!(p1.ask("release"), "released");
    assert!(waiter.join().unwrap().unwrap() > 0);
    assert_eq!(p2.next_line(), "held");
    assert_eq!(p2.ask("release"), "released");
    p1.finish();
    p2.finish();
}

// ---------------------------------------------------------------------------
// The read-write lock
// ---------------------------------------------------------------------------

#[test]
fn kazoo_and_zklock_readers_share_and_writers_exclude_each_other() {
    const ROUNDS: usize = 10;
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let path = "/kazoo/rw";
    let client = client(&connect, SESSION);

    // Writers of both languages on a fenced register.
    let register = FencedRegister::start().unwrap();
    let fence = register.addr().to_string();
    let rounds = ROUNDS.to_string();
    let python: Vec<Py> = ["pyw-1", "pyw-2"]
        .iter()
        .map(|id| Py::start(&["loop", &connect, path, id, "write", &rounds, &fence]))
        .collect();
    let writers: Vec<_> = ["rsw-1", "rsw-2"]
        .iter()
        .map(|id| {
            let (connect, fence, id) = (connect.clone(), fence.clone(), id.to_string());
            thread::spawn(move || {
                let c = common::client(&connect, SESSION);
                let rw = InterProcessReadWriteLock::kazoo(&c, path, &id).unwrap();
                let mut register = FenceClient::connect(fence).unwrap();
                for i in 0..ROUNDS {
                    let g = rw.write_lock().try_lock_for(patience()).unwrap().unwrap();
                    let token = g.fencing_token();
                    register.enter(token, &id).unwrap();
                    register.write(token, &id, &format!("{i}")).unwrap();
                    thread::sleep(Duration::from_millis(2));
                    register.exit(token, &id).unwrap();
                    g.release().unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    for p in python {
        assert_eq!(p.next_line(), "done");
        p.finish();
    }
    println!("writers: {}", register.check());
    assert_one_holder_at_a_time(&register.log());
    assert_eq!(
        register
            .log()
            .iter()
            .filter(|e| e.kind == FenceEventKind::Enter)
            .count(),
        4 * ROUNDS
    );

    // Readers of both languages share.
    let rw = InterProcessReadWriteLock::kazoo(&client, path, "rs-r").unwrap();
    let mut r1 = Py::commands(&connect, path, "py-r1");
    assert_eq!(r1.ask("rlock"), "held");
    let read = rw
        .read_lock()
        .try_lock_for(patience())
        .unwrap()
        .expect("readers share");
    let mut r2 = Py::commands(&connect, path, "py-r2");
    assert_eq!(r2.ask("rlock"), "held");
    assert_eq!(
        r1.list("contenders", "contenders "),
        rw.contenders().unwrap()
    );
    assert_eq!(rw.contenders().unwrap(), ["py-r1", "rs-r", "py-r2"]);

    // A zklock writer waits for every reader of both languages.
    let writer_rw = InterProcessReadWriteLock::kazoo(&client, path, "rs-w").unwrap();
    let (held_tx, held_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let writer = thread::spawn(move || {
        let g = writer_rw.write_lock().lock().unwrap();
        held_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        g.release().unwrap();
    });
    wait_for("the writer to queue", || {
        nodes(&client, path, "__lock__") == 1
    });
    read.release().unwrap();
    assert_eq!(r1.ask("release"), "released");
    assert!(
        held_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the writer got in beside a kazoo reader"
    );
    assert_eq!(r2.ask("release"), "released");
    held_rx.recv_timeout(patience()).expect("the writer got in");

    // A kazoo writer waits for the zklock writer; a zklock reader waits for the kazoo writer.
    let mut w1 = Py::commands(&connect, path, "py-w");
    w1.send("wlock");
    wait_for("the kazoo writer to queue", || {
        nodes(&client, path, "__lock__") == 2
    });
    assert_eq!(
        w1.line_within(Duration::from_millis(300)),
        None,
        "kazoo writer got in"
    );
    go_tx.send(()).unwrap();
    writer.join().unwrap();
    assert_eq!(w1.next_line(), "held");
    let reader = {
        let rw = InterProcessReadWriteLock::kazoo(&client, path, "rs-r2").unwrap();
        thread::spawn(move || {
            let g = rw
                .read_lock()
                .try_lock_for(patience())
                .unwrap()
                .expect("read");
            g.release().unwrap();
        })
    };
    wait_for("the zklock reader to queue", || {
        nodes(&client, path, "__rlock__") == 1
    });
    assert!(
        !reader.is_finished(),
        "a zklock reader got in beside a kazoo writer"
    );
    assert_eq!(w1.ask("release"), "released");
    reader.join().unwrap();
    // The write holder cannot take the read half in this layout.
    let own = InterProcessReadWriteLock::kazoo(&client, path, "rs-down").unwrap();
    let w = own.write_lock().lock().unwrap();
    assert!(matches!(own.read_lock().lock(), Err(Error::WouldDeadlock)));
    // A kazoo reader waits for the zklock writer, and gets in once it releases.
    r1.send("rlock");
    wait_for("the kazoo reader to queue", || {
        nodes(&client, path, "__rlock__") == 1
    });
    assert_eq!(
        r1.line_within(Duration::from_millis(300)),
        None,
        "a kazoo reader got in beside a zklock writer"
    );
    w.release().unwrap();
    assert_eq!(r1.next_line(), "held");
    assert_eq!(r1.ask("release"), "released");
    for p in [r1, r2, w1] {
        p.finish();
    }
}

// ---------------------------------------------------------------------------
// The semaphore
// ---------------------------------------------------------------------------

/// The most holders at once in an ENTER/EXIT log, and whether every hold ended.
fn most_at_once(log: &Path) -> (usize, bool) {
    let text = std::fs::read_to_string(log).unwrap();
    let (mut now, mut most) = (0usize, 0usize);
    for line in text.lines() {
        match line.split(' ').next() {
            Some("ENTER") => {
                now += 1;
                most = most.max(now);
            }
            Some("EXIT") => now = now.checked_sub(1).expect("EXIT without ENTER"),
            _ => panic!("bad line {line:?}"),
        }
    }
    (most, now == 0)
}

#[test]
fn kazoo_and_zklock_semaphores_never_exceed_max_leases_and_agree_on_it() {
    const ROUNDS: usize = 10;
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let path = "/kazoo/sem";
    let client = client(&connect, SESSION);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("holders");
    std::fs::write(&log, "").unwrap();
    let logs = log.to_str().unwrap().to_owned();
    let rounds = ROUNDS.to_string();
    let python: Vec<Py> = ["py-1", "py-2"]
        .iter()
        .map(|id| Py::start(&["loop", &connect, path, id, "sem:3", &rounds, &logs]))
        .collect();
    let rust: Vec<_> = ["rs-1", "rs-2", "rs-3"]
        .iter()
        .map(|id| {
            let (client, log, id) = (client.clone(), log.clone(), id.to_string());
            thread::spawn(move || {
                let sem = KazooSemaphore::new(&client, path, &id, 3).unwrap();
                for i in 0..ROUNDS {
                    let lease = sem.acquire_timeout(patience()).unwrap().expect("lease");
                    append(&log, &format!("ENTER {id}"));
                    if i == 0 {
                        // Keep the first lease until three holders were in at once: with five
                        // contenders for three leases that comes at once, unless the semaphore
                        // lets fewer in than it should.
                        wait_for("3 holders at once", || most_at_once(&log).0 == 3);
                    }
                    thread::sleep(Duration::from_millis(5));
                    append(&log, &format!("EXIT {id}"));
                    lease.return_lease().unwrap();
                }
            })
        })
        .collect();
    for r in rust {
        r.join().unwrap();
    }
    for p in python {
        assert_eq!(p.next_line(), "done");
        p.finish();
    }
    let (most, ended) = most_at_once(&log);
    println!("at most {most} holders at once over {} holds", 5 * ROUNDS);
    assert!(most <= 3, "{most} holders at once");
    // The run filled the three leases, so "never above 3" was tested under contention.
    assert_eq!(most, 3, "never 3 holders at once: no contention");
    assert!(ended);

    // lease_holders() agree, and both languages refuse a different max_leases.
    let mut p = Py::commands(&connect, path, "py-h");
    assert_eq!(p.ask("sem 3"), "held");
    let sem = KazooSemaphore::new(&client, path, "rs-h", 3).unwrap();
    let lease = sem.acquire_timeout(patience()).unwrap().expect("lease");
    let mut ours = sem.lease_holders().unwrap();
    let mut theirs = p.list("holders 3", "holders ");
    ours.sort();
    theirs.sort();
    assert_eq!(ours, ["py-h", "rs-h"]);
    assert_eq!(ours, theirs);
    let wrong = KazooSemaphore::new(&client, path, "rs-wrong", 4).unwrap();
    match wrong.acquire_timeout(patience()) {
        Err(
            e @ Error::LeaseCountMismatch {
                ours: 4,
                recorded: 3,
                ..
            },
        ) => {
            println!("mismatch: {e}")
        }
        other => panic!("expected LeaseCountMismatch, got {other:?}"),
    }
    assert_eq!(
        sem.lease_holders().unwrap().len(),
        2,
        "the refused one took a lease"
    );
    let mut q = Py::commands(&connect, path, "py-wrong");
    let answer = q.ask("sem 5");
    assert!(
        answer.starts_with("error Inconsistent max leases"),
        "{answer}"
    );
    lease.return_lease().unwrap();
    assert_eq!(p.ask("release"), "released");
    p.finish();
    q.finish();
}

// ---------------------------------------------------------------------------
// The election
// ---------------------------------------------------------------------------

#[test]
fn a_kazoo_election_and_a_zklock_one_elect_one_leader_and_hand_over() {
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let path = "/kazoo/election";
    let client = client(&connect, SESSION);
    let mut p1 = Py::commands(&connect, path, "py-1");
    p1.send("elect");
    assert_eq!(p1.next_line(), "leader");
    let election = KazooElection::new(&client, path, "rs-1").unwrap();
    let (leading_tx, leading_rx) = mpsc::channel();
    let (resign_tx, resign_rx) = mpsc::channel::<()>();
    let rust = {
        let election = election.clone();
        thread::spawn(move || {
            election.run(|epoch| {
                leading_tx.send(epoch).unwrap();
                resign_rx.recv().unwrap();
            })
        })
    };
    wait_for("the Rust contender to queue", || {
        nodes(&client, path, "__lock__") == 2
    });
    assert!(leading_rx.try_recv().is_err(), "two leaders");
    let mut p2 = Py::commands(&connect, path, "py-2");
    p2.send("elect");
    wait_for("py-2 to queue", || nodes(&client, path, "__lock__") == 3);
    assert_eq!(election.contenders().unwrap(), ["py-1", "rs-1", "py-2"]);
    // Python steps down: Rust leads, and Python waits.
    p1.send("resign");
    assert_eq!(p1.next_line(), "resigned");
    let epoch = leading_rx.recv_timeout(patience()).expect("Rust elected");
    assert!(epoch > 0);
    assert_eq!(
        p2.line_within(Duration::from_millis(300)),
        None,
        "two leaders"
    );
    // Rust steps down: Python leads.
    resign_tx.send(()).unwrap();
    rust.join().unwrap().unwrap();
    assert_eq!(p2.next_line(), "leader");
    p2.send("resign");
    assert_eq!(p2.next_line(), "resigned");
    p1.finish();
    p2.finish();
    // A waiting run ends when cancelled.
    let blocker = InterProcessMutex::kazoo(&client, path, "rs-holder").unwrap();
    let _held = blocker.lock().unwrap();
    let waiting = {
        let election = election.clone();
        thread::spawn(move || election.run(|_| ()))
    };
    wait_for("the run to queue", || nodes(&client, path, "__lock__") == 2);
    election.cancel();
    assert!(matches!(waiting.join().unwrap(), Err(Error::Cancelled)));
}

// ---------------------------------------------------------------------------
// A kazoo-layout lease's health
// ---------------------------------------------------------------------------

#[test]
fn a_kazoo_lease_is_held_then_lost_when_its_node_is_deleted() {
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let client = client(&connect, SESSION);
    let sem = KazooSemaphore::new(&client, "/kazoo/lease-health", "rs-1", 2).unwrap();
    let events = sem.health_events();
    let lease = sem.acquire().unwrap();
    assert_eq!(lease.health(), LockHealth::Held);
    // Someone else deletes the lease node (an operator, a kazoo process cleaning up).
    let other = common::client(&connect, SESSION);
    other.delete(lease.path()).unwrap();
    wait_for("the lease to read Lost", || {
        lease.health() == LockHealth::Lost
    });
    let event = events
        .recv_timeout(patience())
        .expect("a health event for the lease");
    assert_eq!(event, LockHealth::Lost);
    assert_eq!(event.fencing_token, lease.fencing_token());
    assert_eq!(event.node, lease.path());
    let first = lease.fencing_token();
    assert!(
        matches!(lease.return_lease(), Err(Error::LockLost)),
        "returning a lost lease says so"
    );
    // The next lease is a new hold: Held, with a higher token.
    let again = sem.acquire().unwrap();
    assert_eq!(again.health(), LockHealth::Held);
    assert!(again.fencing_token() > first);
    again.return_lease().unwrap();
    assert_eq!(sem.lease_holders().unwrap(), Vec::<String>::new());
}
