//! SharedCount against a real server: versioned reads, compare-and-set that loses a race
//! cleanly, and a listener that sees every accepted change.

mod common;

use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::SharedCount;

#[test]
fn try_set_count_loses_a_race_cleanly() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let a = client(&server.connect_string(), Duration::from_secs(30));
    let b = client(&server.connect_string(), Duration::from_secs(30));
    let ours = SharedCount::new(&a, "/counts/race", 10).unwrap();
    let theirs = SharedCount::new(&b, "/counts/race", 99).unwrap();
    assert_eq!(
        theirs.count().unwrap(),
        10,
        "the seed of an existing count is ignored"
    );
    let seen = ours.versioned().unwrap();
    assert_eq!(seen.count, 10);
    // They win the race.
    let their_seen = theirs.versioned().unwrap();
    assert!(theirs.try_set_count(their_seen, 11).unwrap());
    // Ours was read before their write: refused, nothing changed.
    assert!(!ours.try_set_count(seen, 20).unwrap());
    assert_eq!(ours.count().unwrap(), 11);
    let now = ours.versioned().unwrap();
    assert_eq!(now.version, seen.version + 1);
    assert!(ours.try_set_count(now, 20).unwrap());
    assert_eq!(theirs.count().unwrap(), 20);
}

#[test]
fn a_listener_sees_every_accepted_change_and_a_removed_one_nothing() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let a = client(&server.connect_string(), Duration::from_secs(30));
    let b = client(&server.connect_string(), Duration::from_secs(30));
    let watched = SharedCount::new(&a, "/counts/listened", 0).unwrap();
    let (tx, changes) = crossbeam_channel::unbounded();
    watched
        .on_change(move |v| {
            let _ = tx.send(v);
        })
        .unwrap();
    let (removed_tx, removed) = crossbeam_channel::unbounded();
    let id = watched
        .on_change(move |v| {
            let _ = removed_tx.send(v);
        })
        .unwrap();
    assert!(watched.remove_listener(id));
    // The count's first read (and watch) is made before the writes.
    wait_for("the count's node watched", || {
        server
            .four_letter("wchp")
            .unwrap()
            .contains("/counts/listened")
    });
    let writer = SharedCount::new(&b, "/counts/listened", 0).unwrap();
    let mut versions = Vec::new();
    for n in 1..=5 {
        // Accepted and refused writes from another session; the listener hears the accepted.
        let seen = writer.versioned().unwrap();
        assert!(writer.try_set_count(seen, n).unwrap());
        assert!(!writer.try_set_count(seen, -n).unwrap());
        let heard = changes.recv_timeout(patience()).expect("the change");
        assert_eq!(heard.count, n);
        versions.push(heard.version);
    }
    assert!(
        versions.windows(2).all(|w| w[1] == w[0] + 1),
        "{versions:?}"
    );
    assert!(removed.try_recv().is_err(), "a removed listener was called");
}

#[test]
fn listeners_take_no_thread_and_leave_no_watch_once_dropped() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let a = client(&server.connect_string(), Duration::from_secs(30));
    let b = client(&server.connect_string(), Duration::from_secs(30));
    let (tx, changes) = crossbeam_channel::unbounded();
    let counts: Vec<SharedCount> = (0..50)
        .map(|i| {
            let count = SharedCount::new(&a, &format!("/counts/many/{i}"), 0).unwrap();
            let tx = tx.clone();
            count
                .on_change(move |v| {
                    let _ = tx.send((i, v.count));
                })
                .unwrap();
            count
        })
        .collect();
    // Every count's node is followed: a watch on each.
    wait_for("a watch on every count's node", || {
        let watched = server.four_letter("wchp").unwrap();
        (0..50).all(|i| watched.contains(&format!("/counts/many/{i}\n")))
    });
    assert_eq!(
        threads_named("zklock-shared"),
        0,
        "a listened count has no thread of its own"
    );
    let writer = SharedCount::new(&b, "/counts/many/7", 0).unwrap();
    writer.set_count(70).unwrap();
    assert_eq!(changes.recv_timeout(patience()).unwrap(), (7, 70));
    drop(counts);
    writer.set_count(71).unwrap();
    // Dropped: no listener is called, and the nodes' watches go (the followers clear them).
    wait_for("no watch left on the counts' nodes", || {
        !server
            .four_letter("wchp")
            .unwrap()
            .contains("/counts/many/")
    });
    assert!(
        changes.try_recv().is_err(),
        "a dropped count's listener was called"
    );
}

#[test]
fn a_listener_hears_a_count_whose_node_was_deleted_and_made_again() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let a = client(&server.connect_string(), Duration::from_secs(30));
    let b = client(&server.connect_string(), Duration::from_secs(30));
    let count = SharedCount::new(&a, "/counts/reborn", 1).unwrap();
    let (tx, changes) = crossbeam_channel::unbounded();
    count
        .on_change(move |v| {
            let _ = tx.send(v);
        })
        .unwrap();
    wait_for("the count's node watched", || {
        server
            .four_letter("wchp")
            .unwrap()
            .contains("/counts/reborn")
    });
    let writer = SharedCount::new(&b, "/counts/reborn", 0).unwrap();
    writer.set_count(2).unwrap();
    assert_eq!(changes.recv_timeout(patience()).unwrap().count, 2);
    b.delete("/counts/reborn").unwrap();
    // Made again with its own first version (0): a change of version, told as one.
    let again = SharedCount::new(&b, "/counts/reborn", 3).unwrap();
    let heard = changes
        .recv_timeout(patience())
        .expect("the count made again");
    assert_eq!((heard.count, heard.version), (3, 0));
    again.set_count(4).unwrap();
    assert_eq!(changes.recv_timeout(patience()).unwrap().count, 4);
}
