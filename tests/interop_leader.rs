//! Leader election across languages: Curator 5.4's `LeaderLatch` and `LeaderSelector` in JVMs
//! and zklock's on the same path elect one leader at a time and hand over on close, and both
//! sides read the same participants.

mod common;

use std::time::Duration;

use common::java::{Java, JavaProc, JavaProgram};
use common::*;
use zklock::testing::TestingServer;
use zklock::{Client, LeaderLatch, LeaderSelector};

const CURATOR_LEADER: JavaProgram = JavaProgram {
    class: "CuratorLeader",
    recipes: "LeaderLatch and LeaderSelector",
    scratch_prefix: "zklock-interop-leader-",
    stdout_tail: None,
};

fn java(jvm: &Java, kind: &str, connect: &str, path: &str, id: &str) -> JavaProc {
    let mut p = jvm.spawn(id, &[kind, connect, path, id]);
    p.expect_line("READY");
    p
}

/// The Java side's participants: (id, leads).
fn java_participants(p: &mut JavaProc) -> Vec<(String, bool)> {
    p.send("participants");
    let line = p.expect_line("PARTICIPANTS");
    line.split_whitespace()
        .skip(1)
        .map(|e| {
            let (id, role) = e.rsplit_once(':').unwrap();
            (id.to_owned(), role == "L")
        })
        .collect()
}

fn rust_participants(latch: &LeaderLatch) -> Vec<(String, bool)> {
    latch
        .participants()
        .unwrap()
        .into_iter()
        .map(|p| (p.id, p.is_leader))
        .collect()
}

/// Whether a JVM participant printed a LEADER line it has not taken back since.
fn java_leads(p: &mut JavaProc) -> bool {
    p.fresh_lines();
    p.seen
        .iter()
        .rev()
        .find(|l| l.starts_with("LEADER") || l.starts_with("FOLLOWER"))
        .is_some_and(|l| l.starts_with("LEADER"))
}

#[test]
fn java_and_rust_latches_elect_one_leader_and_hand_over_both_ways() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let path = "/election/interop-latch";
    let jvm = Java::compile(&CURATOR_LEADER);
    let c = client(&connect, Duration::from_secs(30));
    let latch = |id: &str| {
        let l = LeaderLatch::builder(&c, path).id(id).build().unwrap();
        l.start().unwrap();
        l
    };
    let queued = |n: usize| {
        wait_for(&format!("{n} participants"), || {
            c.children(path).map(|ch| ch.len() == n).unwrap_or(false)
        })
    };
    // Queue order: java-1, rust-1, java-2, rust-2.
    let mut j1 = java(&jvm, "latch", &connect, path, "java-1");
    queued(1);
    let r1 = latch("rust-1");
    queued(2);
    let mut j2 = java(&jvm, "latch", &connect, path, "java-2");
    queued(3);
    let r2 = latch("rust-2");
    queued(4);

    j1.expect_line("LEADER java-1");
    assert!(!r1.has_leadership() && !r2.has_leadership() && !java_leads(&mut j2));
    let expected = vec![
        ("java-1".to_owned(), true),
        ("rust-1".to_owned(), false),
        ("java-2".to_owned(), false),
        ("rust-2".to_owned(), false),
    ];
    assert_eq!(rust_participants(&r1), expected);
    assert_eq!(java_participants(&mut j2), expected);

    // Java → Rust.
    j1.send("close");
    j1.expect_line("CLOSED");
    assert!(r1.await_leadership_timeout(patience()).unwrap());
    assert!(!r2.has_leadership() && !java_leads(&mut j2));
    assert_eq!(java_participants(&mut j2)[0], ("rust-1".to_owned(), true));

    // Rust → Java.
    r1.close().unwrap();
    j2.expect_line("LEADER java-2");
    assert!(!r2.has_leadership());
    assert_eq!(rust_participants(&r2)[0], ("java-2".to_owned(), true));

    // Java → Rust again.
    j2.send("close");
    j2.expect_line("CLOSED");
    assert!(r2.await_leadership_timeout(patience()).unwrap());
    r2.close().unwrap();
    assert_clean(|| server.four_letter("wchc").unwrap(), &c, path);
}

#[test]
fn java_and_rust_selectors_take_turns() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let connect = server.connect_string();
    let path = "/election/interop-selector";
    let jvm = Java::compile(&CURATOR_LEADER);
    let c: Client = client(&connect, Duration::from_secs(30));
    let mut j = java(&jvm, "selector", &connect, path, "java");
    j.expect_line("LEADER java");

    let (lead_tx, leads) = crossbeam_channel::unbounded();
    let (step_down_tx, step_down) = crossbeam_channel::unbounded::<()>();
    let selector = LeaderSelector::builder(&c, path)
        .id("rust")
        .auto_requeue(true)
        .build(move |leadership| {
            lead_tx.send(leadership.fencing_token()).unwrap();
            step_down.recv_timeout(Duration::from_secs(600)).ok();
            Ok(())
        })
        .unwrap();
    selector.start().unwrap();
    wait_for("the Rust selector to queue", || {
        c.children(path).map(|ch| ch.len() == 2).unwrap_or(false)
    });
    let expected = vec![("java".to_owned(), true), ("rust".to_owned(), false)];
    let ours: Vec<(String, bool)> = selector
        .participants()
        .unwrap()
        .into_iter()
        .map(|p| (p.id, p.is_leader))
        .collect();
    assert_eq!(ours, expected);
    assert_eq!(java_participants(&mut j), expected);
    assert!(
        leads.try_recv().is_err(),
        "the Rust selector led beside Java"
    );

    let mut epochs = Vec::new();
    for _ in 0..3 {
        // Java steps down: Rust leads while Java waits behind (auto-requeue).
        j.send("release");
        j.expect_line("FOLLOWER java");
        epochs.push(leads.recv_timeout(patience()).unwrap());
        assert!(!java_leads(&mut j));
        wait_for("Java to queue again", || {
            c.children(path).map(|ch| ch.len() == 2).unwrap_or(false)
        });
        assert!(!java_leads(&mut j), "Java led beside Rust");
        // Rust steps down: Java leads again.
        step_down_tx.send(()).unwrap();
        j.expect_line("LEADER java");
    }
    assert!(epochs.windows(2).all(|w| w[0] < w[1]));
    selector.close();
    j.send("release");
    j.send("close");
    j.expect_line("CLOSED");
    assert!(selector.close_timeout(patience()));
    assert_clean(|| server.four_letter("wchc").unwrap(), &c, path);
}
