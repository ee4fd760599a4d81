//! A holder frozen past its session (SIGSTOP, a stalled VM) reads its lock as not held the
//! moment it wakes, before its I/O thread has noticed anything: `health()`
//! is computed from the time since the Client could last vouch for its session.
//!
//! The holder is this test binary run again as a worker process (`holder_worker`), driven over
//! its stdin and stdout.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use zklock::testing::TestingServer;
use zklock::{Client, InterProcessMutex, LockHealth};

const WORKER: &str = "ZKLOCK_PAUSED_HOLDER";
const LOCK: &str = "/locks/paused";
const SESSION: Duration = Duration::from_secs(2);

/// The worker: holds the lock and answers `check` with its health at that instant.
#[test]
fn holder_worker() {
    let Ok(connect) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let client = Client::builder(&connect)
        .session_timeout(SESSION)
        .connect()
        .expect("connect");
    let mutex = InterProcessMutex::new(&client, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    say(&format!("held {}", guard.fencing_token()));
    for line in std::io::stdin().lock().lines() {
        match line.unwrap().as_str() {
            "check" => say(&format!("health {:?}", guard.health())),
            _ => break,
        }
    }
    drop(guard);
    client.close();
}

fn say(line: &str) {
    println!("worker: {line}");
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Worker {
    fn start(connect: &str) -> Worker {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "holder_worker",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(WORKER, connect)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the worker");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                // libtest may have begun the line with "test holder_worker ... ".
                if let Some(at) = line.find("worker: ") {
                    let _ = tx.send(line[at + "worker: ".len()..].to_owned());
                }
            }
        });
        Worker {
            child,
            stdin,
            lines,
        }
    }

    fn expect(&self, prefix: &str) -> String {
        let line = self
            .lines
            .recv_timeout(patience())
            .unwrap_or_else(|_| panic!("the worker never said {prefix:?}"));
        assert!(
            line.starts_with(prefix),
            "expected {prefix:?}, got {line:?}"
        );
        line[prefix.len()..].trim().to_owned()
    }

    fn health(&mut self) -> String {
        writeln!(self.stdin, "check").unwrap();
        self.expect("health")
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_holder_woken_after_its_session_does_not_read_held() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let mut worker = Worker::start(&server.connect_string());
    worker.expect("held");
    // The check does say Held while nothing is wrong.
    assert_eq!(worker.health(), "Held");

    worker.signal("-STOP");
    let stopped = Instant::now();
    // The server expires the session meanwhile; another Client takes the lock.
    let other = client(&server.connect_string(), Duration::from_secs(30));
    let mutex = InterProcessMutex::new(&other, LOCK).unwrap();
    let taken = mutex
        .try_lock_for(SESSION * 10 * timing())
        .unwrap()
        .expect("the frozen holder's session expired and its node went");
    while stopped.elapsed() < SESSION * 5 / 2 {
        thread::sleep(Duration::from_millis(50));
    }
    // The question is waiting in the pipe when the worker wakes: it answers before its I/O
    // thread can have caught up, unless the answer is computed from the clock.
    writeln!(worker.stdin, "check").unwrap();
    worker.signal("-CONT");
    let woken = worker.expect("health");
    eprintln!(
        "frozen {:.1?}; first health on waking: {woken}",
        stopped.elapsed()
    );
    assert_ne!(woken, "Held", "a holder frozen past its session read Held");
    // And it stays not held: Lost once the Client has caught up.
    wait_for("the woken holder to read Lost", || {
        worker.health() == format!("{:?}", LockHealth::Lost)
    });
    drop(taken);
    writeln!(worker.stdin, "exit").unwrap();
    let status = worker.child.wait().unwrap();
    assert!(status.success(), "the worker failed: {status}");
}
