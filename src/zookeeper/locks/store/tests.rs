//! The port against a real server: watches that wake their waiter (and only it), rereading
//! watches, and the unfair claim.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::testing::TestingServer;
use crate::zookeeper::client::CreateMode;

#[test]
fn a_watch_wakes_only_its_waiter_and_state_changes_wake_all() {
    let mut server = TestingServer::start().unwrap();
    let client = Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(20))
        .connect()
        .unwrap();
    client
        .create("/w/a")
        .parents_as_containers()
        .call()
        .unwrap();
    let (watched, bystander) = (Arc::new(Waiter::default()), Arc::new(Waiter::default()));
    let _r1 = client.register(&watched);
    let _r2 = client.register(&bystander);
    let mut call = client.new_call(Deadline::after(Duration::from_secs(60)));
    let (seen_w, seen_b) = (watched.epoch(), bystander.epoch());
    let guard = client
        .watch("/w/a", &watched, OnChange::Wake, &mut call)
        .unwrap()
        .expect("node exists");
    client.delete("/w/a").unwrap();
    assert!(
        watched.wait(seen_w, Deadline::after(Duration::from_secs(60))),
        "watch never woke"
    );
    assert_eq!(
        watched.watched_since(seen_w, "/w/a"),
        Some(crate::zookeeper::WatchEventKind::NodeDeleted)
    );
    assert_eq!(
        bystander.epoch(),
        seen_b,
        "a waiter without the watch was woken"
    );
    drop(guard);

    let (seen_w, seen_b) = (watched.epoch(), bystander.epoch());
    server.restart().unwrap();
    assert!(watched.wait(seen_w, Deadline::after(Duration::from_secs(60))));
    assert!(bystander.wait(seen_b, Deadline::after(Duration::from_secs(60))));
    client.close();
}

#[test]
fn a_dropped_watch_guard_leaves_no_watch_on_the_server() {
    let server = TestingServer::start().unwrap();
    let client = Client::connect(&server.connect_string()).unwrap();
    client.create("/g").call().unwrap();
    let waiter = Arc::new(Waiter::default());
    let mut call = client.new_call(Deadline::after(Duration::from_secs(60)));
    let guard = client
        .watch("/g", &waiter, OnChange::Wake, &mut call)
        .unwrap()
        .expect("node exists");
    assert!(client
        .watch("/none", &waiter, OnChange::Wake, &mut call)
        .unwrap()
        .is_none());
    assert!(watches(&server).contains("/g"), "watch not set");
    drop(guard);
    await_no_watch(&server, "/g");
    client.close();
}

/// The server's watches by session (`wchc`).
fn watches(server: &TestingServer) -> String {
    server.four_letter("wchc").unwrap()
}

/// Waits (a minute at most) until no session watches `path`.
fn await_no_watch(server: &TestingServer, path: &str) {
    let deadline = Deadline::after(Duration::from_secs(60));
    while watches(server).contains(path) {
        assert!(
            !deadline.expired(),
            "watch left on the server: {}",
            watches(server)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A rereading watch: a data change is delivered with the node as read right after it (and its
/// parent's stat when asked for), and the watch that read set fires again; dropping the guard
/// then removes it from the server.
#[test]
fn a_rereading_watch_delivers_the_new_data_and_watches_on() {
    let server = TestingServer::start().unwrap();
    let client = Client::connect(&server.connect_string()).unwrap();
    client
        .create("/p/r")
        .data(b"a")
        .parents_as_containers()
        .call()
        .unwrap();
    client.create("/p/s").call().unwrap();
    let waiter = Arc::new(Waiter::default());
    let mut call = client.new_call(Deadline::after(Duration::from_secs(60)));
    let seen = waiter.epoch();
    let guard = client
        .watch("/p/r", &waiter, OnChange::RereadAndCount, &mut call)
        .unwrap()
        .expect("node exists");
    client.set_data("/p/r", b"b").unwrap();
    assert!(waiter.wait(seen, Deadline::after(Duration::from_secs(60))));
    let (then, reread) = waiter.reread_since(seen, "/p/r").expect("read again");
    let (stat, data) = reread.node.unwrap().expect("node still there");
    assert_eq!((stat.version, data.as_slice()), (1, &b"b"[..]));
    assert_eq!(reread.parent.map(|p| p.num_children), Some(2));
    assert!(
        waiter.reread_since(seen, "/p/r").is_none(),
        "delivered twice"
    );

    client.set_data("/p/r", b"c").unwrap();
    assert!(waiter.wait(then, Deadline::after(Duration::from_secs(60))));
    let (_, reread) = waiter.reread_since(then, "/p/r").expect("read again");
    assert_eq!(reread.node.unwrap().unwrap().0.version, 2);
    assert!(
        watches(&server).contains("/p/r"),
        "no watch after the reread"
    );
    drop(guard);
    await_no_watch(&server, "/p/r");
    client.close();
}

/// An unfair claim made against a listing that predates a newcomer: the newcomer, not in our
/// listing, claims first; ours must then fail, or both would hold (the parent's version is what
/// tells).
#[test]
fn a_claim_fails_once_a_contender_missing_from_our_listing_has_claimed() {
    let server = TestingServer::start().unwrap();
    let client = Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(20))
        .connect()
        .unwrap();
    let mut call = client.new_call(Deadline::after(Duration::from_secs(60)));
    let node = |name: &str| {
        client
            .create(&format!("/claims/{name}"))
            .mode(CreateMode::Ephemeral)
            .parents_as_containers()
            .call()
            .unwrap()
    };
    let ours = node("x");
    let parent_version = client.exists("/claims").unwrap().unwrap().version;
    // Our listing: only ourselves. Then a newcomer appears and claims, seeing us unclaimed.
    let newcomer = node("n");
    let theirs = client
        .claim(
            &ClaimOps {
                ours: (&newcomer, b"n", 0),
                others: &[(ours.clone(), 0)],
                parent: ("/claims", parent_version),
            },
            &mut call,
        )
        .unwrap();
    assert!(matches!(theirs, ClaimReply::Won(_)));
    assert_eq!(
        client.data("/claims").unwrap().0,
        b"n",
        "the parent names the claimant"
    );
    let ours_claim = client
        .claim(
            &ClaimOps {
                ours: (&ours, b"x", 0),
                others: &[],
                parent: ("/claims", parent_version),
            },
            &mut call,
        )
        .unwrap();
    assert_eq!(ours_claim, ClaimReply::Parent, "two holders");
    assert_eq!(client.exists(&ours).unwrap().unwrap().version, 0);
}
