//! A read-write lock's downgrade across languages: a writer takes the read lock and releases
//! the write lock while Curator 5.4 readers and zklock readers wait. Run once with a zklock
//! downgrader and once with a Curator one: in both, both kinds of reader get in while the
//! downgraded read is held. A writer queued behind them waits for the zklock downgrader's read
//! (CURATOR-621, fixed as Curator 5.5 does); Curator 5.4's downgrader lets it in, which the test
//! reports without asserting.

mod common;

use std::thread;
use std::time::Duration;

use common::java::{Java, JavaProc, JavaProgram};
use common::*;
use crossbeam_channel::{Receiver, Sender};
use zklock::testing::TestingServer;
use zklock::{Client, InterProcessReadWriteLock};

const CURATOR_RW: JavaProgram = JavaProgram {
    class: "CuratorRwCommands",
    recipes: "InterProcessReadWriteLock",
    scratch_prefix: "zklock-interop-downgrade-",
    stdout_tail: None,
};

/// A zklock participant on its own thread and session, driven by commands like the Java one.
struct Rust {
    commands: Sender<&'static str>,
    events: Receiver<String>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Rust {
    fn start(connect: &str, path: &'static str, name: &'static str) -> Rust {
        let (commands, rx) = crossbeam_channel::unbounded::<&'static str>();
        let (tx, events) = crossbeam_channel::unbounded();
        let client = client(connect, Duration::from_secs(20));
        let thread = thread::spawn(move || {
            let rw = InterProcessReadWriteLock::new(&client, path).unwrap();
            for command in rx {
                let event = match command {
                    "read" => rw.read_lock().acquire().map(|_| "RENTER"),
                    "write" => rw.write_lock().acquire().map(|_| "WENTER"),
                    "release-read" => rw.read_lock().release().map(|_| "REXIT"),
                    "release-write" => rw.write_lock().release().map(|_| "WEXIT"),
                    other => panic!("unknown command {other}"),
                };
                tx.send(format!("{} {name}", event.unwrap())).unwrap();
            }
            client.close();
        });
        Rust {
            commands,
            events,
            thread: Some(thread),
        }
    }

    fn send(&self, command: &'static str) {
        self.commands.send(command).unwrap();
    }

    fn expect(&self, prefix: &str) {
        let line = self
            .events
            .recv_timeout(patience())
            .unwrap_or_else(|_| panic!("no {prefix:?} from the zklock participant"));
        assert!(
            line.starts_with(prefix),
            "expected {prefix:?}, got {line:?}"
        );
    }
}

impl Drop for Rust {
    fn drop(&mut self) {
        let (tx, _) = crossbeam_channel::unbounded();
        drop(std::mem::replace(&mut self.commands, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Who downgrades.
enum Downgrader {
    Rust(Rust),
    Java(JavaProc),
}

impl Downgrader {
    fn run(&mut self, command: &'static str, expect: &str) {
        match self {
            Downgrader::Rust(r) => {
                r.send(command);
                r.expect(expect);
            }
            Downgrader::Java(j) => {
                j.send(command);
                j.expect_line(expect);
            }
        }
    }
}

fn nodes(client: &Client, path: &str) -> usize {
    client.children(path).map(|c| c.len()).unwrap_or(0)
}

/// Returns whether the queued writer got in while the downgraded read was held.
fn downgrade(java_downgrades: bool) -> bool {
    init_logging();
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let path: &'static str = if java_downgrades {
        "/locks/downgrade-java"
    } else {
        "/locks/downgrade-rust"
    };
    let jvm = Java::compile(&CURATOR_RW);
    let observer = client(&connect, Duration::from_secs(20));
    let java = |name: &str| {
        let mut p = jvm.spawn(name, &[&connect, path, name]);
        p.expect_line("READY");
        p
    };
    let mut downgrader = if java_downgrades {
        Downgrader::Java(java("java-downgrader"))
    } else {
        Downgrader::Rust(Rust::start(&connect, path, "rust-downgrader"))
    };
    downgrader.run("write", "WENTER");

    // Readers of both languages queue, then a writer.
    let mut java_reader = java("java-reader");
    java_reader.send("read");
    wait_for("the Java reader to queue", || nodes(&observer, path) == 2);
    let rust_reader = Rust::start(&connect, path, "rust-reader");
    rust_reader.send("read");
    wait_for("the zklock reader to queue", || nodes(&observer, path) == 3);
    let mut java_writer = java("java-writer");
    java_writer.send("write");
    wait_for("the Java writer to queue", || nodes(&observer, path) == 4);
    assert!(
        java_reader.fresh_lines().is_empty(),
        "a reader got in beside a writer"
    );

    // Downgrade: read, then let go of the write lock.
    downgrader.run("read", "RENTER");
    downgrader.run("release-write", "WEXIT");
    java_reader.expect_line("RENTER");
    rust_reader.expect("RENTER");
    thread::sleep(Duration::from_millis(300));
    assert!(
        java_writer.fresh_lines().is_empty(),
        "the writer got in beside readers"
    );
    java_reader.send("release-read");
    java_reader.expect_line("REXIT");
    rust_reader.send("release-read");
    rust_reader.expect("REXIT");
    // Only the downgraded read is held now.
    let writer_got_in = {
        thread::sleep(Duration::from_millis(500));
        java_writer
            .fresh_lines()
            .iter()
            .any(|l| l.starts_with("WENTER"))
    };
    downgrader.run("release-read", "REXIT");
    if !writer_got_in {
        java_writer.expect_line("WENTER");
    }
    java_writer.send("release-write");
    java_writer.expect_line("WEXIT");
    for mut p in [java_reader, java_writer] {
        p.send("close");
        p.expect_line("CLOSED");
    }
    if let Downgrader::Java(mut j) = downgrader {
        j.send("close");
        j.expect_line("CLOSED");
    }
    drop(rust_reader);
    wait_for("the lock path to empty", || nodes(&observer, path) == 0);
    writer_got_in
}

#[test]
fn a_zklock_downgrade_lets_both_languages_readers_in_and_keeps_the_writer_out() {
    let writer_got_in = downgrade(false);
    assert!(
        !writer_got_in,
        "a queued writer got in while the downgraded read was held (CURATOR-621)"
    );
}

#[test]
fn a_curator_downgrade_lets_both_languages_readers_in_too() {
    let writer_got_in = downgrade(true);
    eprintln!(
        "Curator's downgrade let the queued writer in while its read was held: {writer_got_in} \
         (true on Curator 5.4, CURATOR-621)"
    );
}
