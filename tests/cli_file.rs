//! `zklock run` and `holders` on `file://`: a flock(1) with tokens, `-n`, and the command
//! stopped when the lock is lost. No server.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{patience, wait_for};

const ZKLOCK: &str = env!("CARGO_BIN_EXE_zklock");

fn zklock(url: &str, args: &[&str]) -> Command {
    let mut c = Command::new(ZKLOCK);
    c.args(["--connect", url]).args(args);
    c
}

/// A holder's command runs with its token; `-n` against it exits 124 without running its
/// command; once the holder is done, `-n` runs with a higher token; `holders` lists the holder
/// with its pid.
#[test]
fn run_n_fails_on_a_busy_lock_and_tokens_rise() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let flag = dir.path().join("go");
    let script = format!(
        "echo $ZKLOCK_FENCING_TOKEN; while [ ! -e {} ]; do sleep 0.02; done",
        flag.display()
    );
    let mut holder = zklock(&url, &["run", "job", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        use std::io::BufRead;
        let mut out = std::io::BufReader::new(holder.stdout.take().unwrap());
        out.read_line(&mut first).unwrap();
    }
    let first: u64 = first.trim().parse().unwrap();
    let busy = zklock(&url, &["run", "-n", "job", "--", "sh", "-c", "echo RAN"])
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(124), "{busy:?}");
    assert!(!String::from_utf8_lossy(&busy.stdout).contains("RAN"));
    let listed = zklock(&url, &["holders", "job", "--json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(doc["backend"], "file");
    assert_eq!(doc["entries"][0]["holds"], true);
    assert_eq!(doc["entries"][0]["fencing_token"], first);
    std::fs::write(&flag, "").unwrap();
    assert!(holder.wait().unwrap().success());
    let next = zklock(
        &url,
        &[
            "run",
            "-n",
            "job",
            "--",
            "sh",
            "-c",
            "echo $ZKLOCK_FENCING_TOKEN",
        ],
    )
    .output()
    .unwrap();
    assert!(next.status.success(), "{next:?}");
    let second: u64 = String::from_utf8_lossy(&next.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(second > first, "{second} after {first}");
}

/// The lock's directory removed under a holder: its command is stopped and `run` exits 123.
#[test]
fn a_removed_lock_directory_stops_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let running = dir.path().join("running");
    let script = format!("touch {}; sleep 60", running.display());
    let mut holder = zklock(&url, &["run", "lost", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lock_dir = dir.path().join("lock.lost");
    wait_for("the holder's command", || running.exists());
    let removed = Instant::now();
    std::fs::remove_dir_all(&lock_dir).unwrap();
    let end = Instant::now() + patience();
    let status = loop {
        if let Some(status) = holder.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < end, "the command was not stopped");
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("stopped {:?} after the removal", removed.elapsed());
    assert_eq!(status.code(), Some(123));
}

/// What a user of `file://` (or any backend but ZooKeeper) reads in the help: no ZooKeeper
/// variable, and every ZooKeeper-only option says so.
#[test]
fn the_help_marks_what_is_zookeepers_only() {
    for args in [&["--help"][..], &["run", "--help"], &["elect", "--help"]] {
        let out = Command::new(ZKLOCK).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!help.contains("ZK_CONNECT"), "{args:?}: {help}");
        assert!(help.contains("$ZKLOCK_CONNECT"), "{args:?}: {help}");
        for option in ["--namespace", "--digest", "--digest-file", "--revocable"] {
            let text = option_text(&help, option);
            if option == "--revocable" && args[0] != "run" {
                assert!(text.is_empty(), "{args:?}: {text}");
                continue;
            }
            assert!(text.contains("ZooKeeper"), "{args:?} {option}: {text:?}");
        }
    }
}

/// The lines of `help` that describe `option`: its own, and those after it up to the next
/// option's; empty when `help` has no such option.
fn option_text(help: &str, option: &str) -> String {
    let named = |l: &&str| is_option(l) && l.split_whitespace().next() == Some(option);
    let mut lines = help.lines().skip_while(|l| !named(l));
    let Some(first) = lines.next() else {
        return String::new();
    };
    let rest = lines.take_while(|l| !is_option(l));
    std::iter::once(first)
        .chain(rest)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `line` starts an option's entry (clap indents it by 2 or 6 spaces; the text of an
/// entry, which may begin a line with an option's name, by more).
fn is_option(line: &str) -> bool {
    let text = line.trim_start();
    text.starts_with('-') && line.len() - text.len() <= 6
}
