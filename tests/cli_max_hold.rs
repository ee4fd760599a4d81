//! `zklock run --max-hold`: the hold ends when its cap passes although its renewals succeed —
//! the lock is let go of on the server at once, so a waiting `run` gets it, and the command is
//! stopped as on a lost lock (SIGTERM, then SIGKILL after `--kill-after`), exit code 123. On
//! ZooKeeper and on `file://`, for a mutex, a write lock and a semaphore's lease.
//!
//! No assertion is about durations: every wait is on a condition with `patience()`.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{patience, wait_for};

const ZKLOCK: &str = env!("CARGO_BIN_EXE_zklock");

fn zklock(connect: &str, args: &[&str]) -> Command {
    let mut c = Command::new(ZKLOCK);
    c.args(["--connect", connect])
        .args(args)
        .stdin(Stdio::null());
    c
}

/// A child ended on drop if the test did not end it.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn log_has(log: &Path, what: &str) -> bool {
    std::fs::read_to_string(log).is_ok_and(|text| text.contains(what))
}

/// A holds with `--max-hold 2s` and a command that ignores SIGTERM until told to stop by a
/// file; B waits for the same lock. B runs while A's command still lingers in its grace (the
/// cap let go of the lock on the server, not the command's end); then A's command stops and A
/// exits 123, saying why.
fn max_hold_stops_the_command(connect: &str, dir: &Path, kind: &[&str]) {
    let (log, go) = (dir.join("log"), dir.join("go"));
    let holder = format!(
        "trap 'echo term a >> {log}' TERM; echo enter a >> {log}; \
         while [ ! -e {go} ]; do sleep 0.05; done; echo exit a >> {log}",
        log = log.display(),
        go = go.display()
    );
    let mut a = Proc(
        zklock(connect, &["run", "max-hold", "--max-hold", "2s"])
            .args(kind)
            .args(["--kill-after", "600s", "--", "sh", "-c", &holder])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for("a to enter", || log_has(&log, "enter a"));
    let waiter = format!("echo enter b >> {}", log.display());
    let mut b = Proc(
        zklock(connect, &["run", "max-hold"])
            .args(kind)
            .args(["--", "sh", "-c", &waiter])
            .spawn()
            .unwrap(),
    );
    wait_for("b to run once a's cap passed", || log_has(&log, "enter b"));
    // The cap frees the lock on the server and stops the command at the same time: which of
    // the two b and a's command see first is a race.
    wait_for("a's command to get SIGTERM", || log_has(&log, "term a"));
    assert!(
        a.0.try_wait().unwrap().is_none(),
        "zklock a waits for its command (--kill-after 600s) while b already holds"
    );
    assert!(b.0.wait().unwrap().success());
    std::fs::write(&go, "").unwrap();
    let out = a.0.stderr.take().unwrap();
    let status = a.0.wait().unwrap();
    let stderr = std::io::read_to_string(out).unwrap();
    assert_eq!(status.code(), Some(123), "the 'lock lost' code: {stderr}");
    assert!(stderr.contains("--max-hold of 2s"), "{stderr}");
    assert!(log_has(&log, "exit a"));
}

#[test]
fn max_hold_stops_the_command_on_zookeeper() {
    let server = zklock::testing::TestingServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    max_hold_stops_the_command(&server.connect_string(), dir.path(), &[]);
}

#[test]
fn max_hold_stops_the_command_of_a_lease_on_zookeeper() {
    let server = zklock::testing::TestingServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lease = ["--semaphore", "1"];
    max_hold_stops_the_command(&server.connect_string(), dir.path(), &lease);
}

#[test]
fn max_hold_stops_the_command_on_file() {
    let dir = tempfile::tempdir().unwrap();
    let locks = dir.path().join("locks");
    let url = format!("file://{}", locks.display());
    max_hold_stops_the_command(&url, dir.path(), &[]);
}

#[test]
fn max_hold_stops_the_command_of_a_write_lock_on_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("locks").display());
    max_hold_stops_the_command(&url, dir.path(), &["--write"]);
}

/// A command that ignores SIGTERM for good is killed after `--kill-after`.
#[test]
fn max_hold_kills_a_command_that_ignores_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("locks").display());
    let stubborn = "trap '' TERM; while :; do sleep 0.05; done";
    let mut a = Proc(
        zklock(&url, &["run", "stubborn", "--max-hold", "1s"])
            .args(["--kill-after", "1s", "--", "sh", "-c", stubborn])
            .spawn()
            .unwrap(),
    );
    let end = std::time::Instant::now() + patience();
    let status = loop {
        if let Some(status) = a.0.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < end, "zklock a did not exit");
        std::thread::sleep(Duration::from_millis(25));
    };
    assert_eq!(status.code(), Some(123));
}

/// Zero and text that is no duration are refused as bad usage.
#[test]
fn max_hold_bad_usage() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    for args in [
        &["run", "x", "--max-hold", "0s", "--", "true"][..],
        &["run", "x", "--max-hold", "soon", "--", "true"],
    ] {
        let out = zklock(&url, args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}
