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
    // Let the watching thread set its first watch.
    std::thread::sleep(Duration::from_millis(300));
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
