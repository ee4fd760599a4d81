//! Cross-language interop: Apache Curator's own `InterProcessMutex`, run in separate JVMs by
//! `tests/java/CuratorMutex.java`, and zklock's `InterProcessMutex` contend on the same lock path
//! of one real ZooKeeper.
//!
//! Every contender, in either language, appends `ENTER <name>` and `EXIT <name>` to one shared
//! log file (append mode, one write a line) while it holds the lock, so the log is the order in
//! which the lock was held; an `ENTER` before the previous holder's `EXIT` is an overlap.
//!
//! Needs a JDK and Debian's Curator 5 jars:
//! `apt-get install libcurator-recipes-java default-jdk-headless` (plus `zookeeper` for the
//! server). Without them these tests fail, saying so. `ZKLOCK_CURATOR_CLASSPATH` replaces the
//! Debian jars; `JAVA_HOME` (or `JAVA` and `JAVAC`) picks the JDK.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::java::{
    append, eventually, is_java, read_log, wait_finished, wait_unwatched, watched, Java, JavaProc,
    JavaProgram,
};
use common::*;
use zklock::testing::TestingServer;
use zklock::{Client, Error, InterProcessMutex};

/// `tests/java/CuratorMutex.java`.
const CURATOR_MUTEX: JavaProgram = JavaProgram {
    class: "CuratorMutex",
    recipes: "InterProcessMutex",
    scratch_prefix: "zklock-interop-",
    stdout_tail: None,
};

const SESSION: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// The Java side
// ---------------------------------------------------------------------------

impl Java {
    /// `CuratorMutex <connect> <lock> <iterations> <holdMillis> <name> <sharedLog>`.
    fn contender(
        &self,
        connect: &str,
        lock: &str,
        iterations: u32,
        hold_ms: u64,
        name: &str,
    ) -> JavaProc {
        self.spawn(
            name,
            &[
                connect,
                lock,
                &iterations.to_string(),
                &hold_ms.to_string(),
                name,
                &self.log_arg(),
            ],
        )
    }

    /// `CuratorMutex --hold <connect> <lock> <name> <sharedLog>`: acquires once, then obeys stdin.
    fn holder(&self, connect: &str, lock: &str, name: &str) -> JavaProc {
        self.spawn(name, &["--hold", connect, lock, name, &self.log_arg()])
    }
}

impl JavaProc {
    /// `(node, ...)` of each `ENTER <name> <nanos> <node>` line printed.
    fn entered_nodes(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter_map(|l| l.strip_prefix("ENTER "))
            .map(|l| {
                l.split(' ')
                    .nth(2)
                    .expect("ENTER <name> <nanos> <node>")
                    .to_owned()
            })
            .collect()
    }
}

/// Nodes from a `PARTICIPANTS <node> ...` line.
fn participants_line(line: &str) -> Vec<String> {
    line.strip_prefix("PARTICIPANTS")
        .expect("a PARTICIPANTS line")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------
// The Rust side
// ---------------------------------------------------------------------------

/// A finished zklock contender, kept open so that leftover watches can be looked for.
struct RustContender {
    client: Client,
    _mutex: InterProcessMutex,
    /// Its lock node in each iteration.
    nodes: Vec<String>,
}

/// A thread with its own Client and mutex: `iterations` times lock, log ENTER, hold, log EXIT,
/// release.
fn rust_contender(
    connect: &str,
    lock: &'static str,
    iterations: u32,
    hold: Duration,
    name: &str,
    log: PathBuf,
) -> JoinHandle<RustContender> {
    let (connect, name) = (connect.to_owned(), name.to_owned());
    thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let client = client(&connect, SESSION);
            let mutex = InterProcessMutex::new(&client, lock).expect("mutex");
            let mut nodes = Vec::new();
            for i in 0..iterations {
                let guard = mutex
                    .lock()
                    .unwrap_or_else(|e| panic!("{name} acquire #{i}: {e}"));
                append(&log, &format!("ENTER {name}"));
                nodes.push(mutex.lock_node().expect("held"));
                thread::sleep(hold);
                append(&log, &format!("EXIT {name}"));
                guard
                    .release()
                    .unwrap_or_else(|e| panic!("{name} release #{i}: {e}"));
            }
            RustContender {
                client,
                _mutex: mutex,
                nodes,
            }
        })
        .unwrap()
}

/// Joins a contender thread, failing (not hanging) if it does not end within `patience()`.
fn join(handle: JoinHandle<RustContender>) -> RustContender {
    wait_finished(&handle);
    handle.join().expect("zklock contender panicked")
}

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

/// Waits until the lock has exactly `n` participants (calling `healthy` in between, which
/// panics if a contender died) and returns them, holder first.
fn wait_participants(
    mutex: &InterProcessMutex,
    n: usize,
    mut healthy: impl FnMut(),
) -> Vec<String> {
    eventually(&format!("{n} participants on {}", mutex.path()), || {
        healthy();
        let nodes = mutex.participant_nodes().map_err(|e| e.to_string())?;
        match nodes.len() {
            len if len == n => Ok(nodes),
            len if len > n => panic!("more than {n} participants: {nodes:?}"),
            _ => Err(format!("{nodes:?}")),
        }
    })
}

/// After a scenario: no node left under the lock, and no watch left on it or under it.
fn assert_clean(server: &TestingServer, client: &Client, lock: &str) {
    eventually(&format!("{lock} to have no children"), || {
        match client.children(lock) {
            Ok(c) if c.is_empty() => Ok(()),
            Err(Error::NoNode(_)) => Ok(()), // the container was reaped already
            Ok(c) => Err(format!("children {c:?}")),
            Err(e) => Err(e.to_string()),
        }
    });
    wait_unwatched(server, &format!("no watch left on {lock}"), lock);
}

/// Checks Curator's lock node layout, `<lock>/_c_<uuid>-lock-<10 digits>`; returns the sequence
/// number.
fn lock_node_sequence(lock: &str, node: &str) -> u64 {
    let name = node
        .strip_prefix(lock)
        .and_then(|n| n.strip_prefix('/'))
        .unwrap_or_else(|| panic!("{node} is not a child of {lock}"));
    let bad = |why: &str| -> ! { panic!("{node}: not Curator's lock node name ({why})") };
    let Some(rest) = name.strip_prefix("_c_") else {
        bad("no _c_ prefix")
    };
    if rest.len() != 36 + "-lock-".len() + 10 {
        bad("wrong length");
    }
    let (uuid, rest) = rest.split_at(36);
    match uuid::Uuid::parse_str(uuid) {
        Ok(u) if u.hyphenated().to_string() == uuid => {}
        _ => bad("not a lowercase hyphenated UUID"),
    }
    let Some(seq) = rest.strip_prefix("-lock-") else {
        bad("no -lock- after the UUID")
    };
    if !seq.bytes().all(|b| b.is_ascii_digit()) {
        bad("sequence is not 10 digits");
    }
    seq.parse().unwrap()
}

/// One line of the shared log.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Enter(String),
    Exit(String),
}

/// A line of the shared log, or `None` (a bad line).
fn event(tag: &str, name: &str) -> Option<Event> {
    match tag {
        "ENTER" => Some(Event::Enter(name.to_owned())),
        "EXIT" => Some(Event::Exit(name.to_owned())),
        _ => None,
    }
}

/// Asserts that no two holds overlap (every ENTER is followed by its own EXIT before the next
/// ENTER) and returns the names in the order they entered.
fn entries_without_overlap(log: &Path) -> Vec<String> {
    let (text, events) = read_log(log, event);
    let mut holder: Option<&str> = None;
    let mut order = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let line = i + 1;
        match event {
            Event::Enter(name) => {
                if let Some(h) = holder {
                    panic!(
                        "OVERLAP at line {line}: {name} entered while {h} held the lock:\n{text}"
                    );
                }
                holder = Some(name);
                order.push(name.clone());
            }
            Event::Exit(name) => {
                if holder != Some(name.as_str()) {
                    panic!("line {line}: {name} exited while {holder:?} held the lock:\n{text}");
                }
                holder = None;
            }
        }
    }
    assert!(
        holder.is_none(),
        "the log ends inside {holder:?}'s hold:\n{text}"
    );
    order
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

/// 2 Curator JVMs and 2 zklock contenders (own Client each), 30 short holds each, on one path:
/// never two holders at once.
#[test]
fn curator_and_zklock_contenders_exclude_each_other() {
    const LOCK: &str = "/interop/mutual-exclusion";
    const ITERATIONS: usize = 30;
    const HOLD_MS: u64 = 5;
    init_logging();
    let java = Java::compile(&CURATOR_MUTEX);
    let server = TestingServer::start().expect("ZooKeeper starts");
    let connect = server.connect_string();
    let started = Instant::now();

    // A gate holds the lock until all four contenders are queued, so that they really contend.
    let observer = client(&connect, SESSION);
    let gate = InterProcessMutex::new(&observer, LOCK).unwrap();
    gate.acquire().unwrap();

    let mut javas: Vec<JavaProc> = ["J1", "J2"]
        .iter()
        .map(|name| java.contender(&connect, LOCK, ITERATIONS as u32, HOLD_MS, name))
        .collect();
    let rusts: Vec<JoinHandle<RustContender>> = ["R1", "R2"]
        .iter()
        .map(|name| {
            rust_contender(
                &connect,
                LOCK,
                ITERATIONS as u32,
                Duration::from_millis(HOLD_MS),
                name,
                java.log(),
            )
        })
        .collect();
    let queued = wait_participants(&gate, 5, || {
        javas.iter_mut().for_each(JavaProc::assert_running);
        for r in &rusts {
            assert!(!r.is_finished(), "{:?} ended early", r.thread().name());
        }
    });
    gate.release().unwrap();

    let java_nodes: Vec<Vec<String>> = javas
        .iter_mut()
        .map(|j| {
            j.finish();
            j.entered_nodes()
        })
        .collect();
    let rusts: Vec<RustContender> = rusts.into_iter().map(join).collect();

    let order = entries_without_overlap(&java.log());
    assert_eq!(order.len(), 4 * ITERATIONS, "{order:?}");
    for name in ["J1", "J2", "R1", "R2"] {
        let holds = order.iter().filter(|n| *n == name).count();
        assert_eq!(holds, ITERATIONS, "{name} held the lock {holds} times");
    }
    let switches = order
        .windows(2)
        .filter(|w| is_java(&w[0]) != is_java(&w[1]))
        .count();
    assert!(
        switches >= 2,
        "the lock passed between Java and Rust fewer than twice: {order:?}"
    );
    // Every node either side created has Curator's layout.
    for node in queued
        .iter()
        .chain(java_nodes.iter().flatten())
        .chain(rusts.iter().flat_map(|r| &r.nodes))
    {
        lock_node_sequence(LOCK, node);
    }
    for (j, nodes) in java_nodes.iter().enumerate() {
        assert_eq!(nodes.len(), ITERATIONS, "J{} printed {nodes:?}", j + 1);
    }

    assert_clean(&server, &observer, LOCK);
    eprintln!(
        "mutual exclusion: {} holds, {switches} hand-overs between Java and Rust, in {:?}",
        order.len(),
        started.elapsed()
    );
    for r in &rusts {
        r.client.close();
    }
    observer.close();
}

/// Contenders queued one at a time behind a zklock holder, alternating languages, enter in
/// queue order.
#[test]
fn curator_and_zklock_waiters_are_served_in_queue_order() {
    const LOCK: &str = "/interop/fifo";
    // Covers every hand-over: Java→Rust, Rust→Rust, Rust→Java, Java→Java.
    const ORDER: [&str; 6] = ["J1", "R1", "R2", "J2", "J3", "R3"];
    init_logging();
    let java = Java::compile(&CURATOR_MUTEX);
    let server = TestingServer::start().expect("ZooKeeper starts");
    let connect = server.connect_string();
    let started = Instant::now();

    let holder_client = client(&connect, SESSION);
    let holder = InterProcessMutex::new(&holder_client, LOCK).unwrap();
    holder.acquire().unwrap();
    let mut queue = vec![holder.lock_node().unwrap()];

    let mut javas: Vec<(usize, JavaProc)> = Vec::new();
    let mut rusts: Vec<(usize, JoinHandle<RustContender>)> = Vec::new();
    for (i, name) in ORDER.iter().enumerate() {
        if is_java(name) {
            javas.push((i, java.contender(&connect, LOCK, 1, 0, name)));
        } else {
            let log = java.log();
            rusts.push((
                i,
                rust_contender(&connect, LOCK, 1, Duration::ZERO, name, log),
            ));
        }
        let nodes = wait_participants(&holder, queue.len() + 1, || {
            javas.iter_mut().for_each(|(_, j)| j.assert_running());
            for (_, r) in &rusts {
                assert!(!r.is_finished(), "{:?} ended early", r.thread().name());
            }
        });
        assert_eq!(nodes[..queue.len()], queue[..], "the queue changed");
        queue.push(nodes.last().unwrap().clone());
    }
    // Each waiter watches just its predecessor's node, whatever the language of either.
    let predecessors: BTreeSet<String> = queue[..ORDER.len()].iter().cloned().collect();
    eventually("every waiter to watch its predecessor", || {
        let w = watched(&server, LOCK);
        if w == predecessors {
            Ok(())
        } else {
            Err(format!("watched {w:?}, expected {predecessors:?}"))
        }
    });

    holder.release().unwrap();
    let mut entered_with: Vec<(usize, String)> = Vec::new();
    for (i, j) in &mut javas {
        j.finish();
        entered_with.push((*i, j.entered_nodes().pop().expect("entered")));
    }
    let rusts: Vec<RustContender> = rusts
        .into_iter()
        .map(|(i, h)| {
            let r = join(h);
            entered_with.push((i, r.nodes[0].clone()));
            r
        })
        .collect();

    let order = entries_without_overlap(&java.log());
    assert_eq!(order, ORDER, "entered out of queue order {queue:?}");
    for (i, node) in entered_with {
        assert_eq!(
            node,
            queue[i + 1],
            "{} entered with another node than it queued with",
            ORDER[i]
        );
    }

    assert_clean(&server, &holder_client, LOCK);
    eprintln!(
        "FIFO: {} entered in queue order in {:?}",
        ORDER.join(", "),
        started.elapsed()
    );
    for r in &rusts {
        r.client.close();
    }
    holder_client.close();
}

/// Curator's and zklock's lock nodes have one layout and sort into one participant list, as
/// seen from either side.
#[test]
fn curator_and_zklock_nodes_share_one_layout() {
    const LOCK: &str = "/interop/layout";
    init_logging();
    let java = Java::compile(&CURATOR_MUTEX);
    let server = TestingServer::start().expect("ZooKeeper starts");
    let connect = server.connect_string();
    let started = Instant::now();
    let observer = client(&connect, SESSION);
    let view = InterProcessMutex::new(&observer, LOCK).unwrap(); // never acquired

    // A Curator holder, then a zklock, a Curator and a zklock waiter.
    let mut ja = java.holder(&connect, LOCK, "JA");
    let entered = ja.expect_line("ENTER JA ");
    let ja_node = entered.split(' ').nth(3).expect("node").to_owned();
    assert_eq!(
        participants_line(&ja.expect_line("PARTICIPANTS")),
        std::slice::from_ref(&ja_node)
    );
    let rb = rust_contender(&connect, LOCK, 1, Duration::ZERO, "RB", java.log());
    wait_participants(&view, 2, || {
        ja.assert_running();
        assert!(!rb.is_finished(), "RB ended early");
    });
    let mut jc = java.contender(&connect, LOCK, 1, 0, "JC");
    wait_participants(&view, 3, || {
        ja.assert_running();
        jc.assert_running();
        assert!(!rb.is_finished(), "RB ended early");
    });
    let rd = rust_contender(&connect, LOCK, 1, Duration::ZERO, "RD", java.log());
    let zklock_view = wait_participants(&view, 4, || {
        ja.assert_running();
        jc.assert_running();
        assert!(
            !rb.is_finished() && !rd.is_finished(),
            "RB or RD ended early"
        );
    });

    ja.send("participants");
    let curator_view = participants_line(&ja.expect_line("PARTICIPANTS"));
    assert_eq!(
        curator_view, zklock_view,
        "Curator's getParticipantNodes and zklock's participant_nodes differ"
    );
    assert_eq!(zklock_view[0], ja_node, "the Curator holder comes first");
    let sequences: Vec<u64> = zklock_view
        .iter()
        .map(|n| lock_node_sequence(LOCK, n))
        .collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "not in sequence order: {zklock_view:?}"
    );
    // Both sides store the host's address in their nodes (Curator's default data).
    for node in &zklock_view {
        let (data, _) = observer.data(node).unwrap();
        let text = String::from_utf8_lossy(&data);
        assert!(
            text.parse::<std::net::IpAddr>().is_ok(),
            "{node} holds {text:?}, not an address"
        );
    }

    ja.send("release");
    ja.finish();
    jc.finish();
    let (rb, rd) = (join(rb), join(rd));
    assert_eq!(rb.nodes, [zklock_view[1].clone()]);
    assert_eq!(jc.entered_nodes(), [zklock_view[2].clone()]);
    assert_eq!(rd.nodes, [zklock_view[3].clone()]);
    assert_eq!(
        entries_without_overlap(&java.log()),
        ["JA", "RB", "JC", "RD"]
    );

    assert_clean(&server, &observer, LOCK);
    eprintln!(
        "layout: one participant list {zklock_view:?} in {:?}",
        started.elapsed()
    );
    rb.client.close();
    rd.client.close();
    observer.close();
}

/// The overlap check itself: an ENTER before the holder's EXIT is caught.
#[test]
#[should_panic(expected = "OVERLAP at line 4: R1 entered while J1 held the lock")]
fn the_overlap_check_catches_an_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("shared.log");
    for line in [
        "ENTER R1", "EXIT R1", "ENTER J1", "ENTER R1", "EXIT R1", "EXIT J1",
    ] {
        append(&log, line);
    }
    entries_without_overlap(&log);
}
