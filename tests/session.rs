//! The Client keeps its session through server faults and says so on time.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use zklock::testing::{expire_session, TestingCluster, TestingServer};
use zklock::zookeeper::WatchEventKind;
use zklock::{ConnectionState::*, CreateMode};

#[test]
fn restart_within_session_timeout_keeps_session_ephemerals_and_watches() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    let states = client.connection_states();
    let session = client.session_id().unwrap();
    client
        .create("/eph")
        .mode(CreateMode::Ephemeral)
        .call()
        .unwrap();
    client.create("/watched").data(b"1").call().unwrap();
    let (_, _, watch) = client.data_watch("/watched").unwrap();

    server.restart().unwrap();
    expect_next(&states, Suspended);
    expect_next(&states, Reconnected);
    assert_eq!(
        client.session_id(),
        Some(session),
        "session changed over a restart"
    );
    assert!(
        client.exists("/eph").unwrap().is_some(),
        "ephemeral lost over a restart"
    );
    assert!(watch.try_event().is_none());
    client.set_data("/watched", b"2").unwrap();
    let event = watch
        .wait_timeout(patience())
        .expect("watch set before the restart did not fire");
    assert_eq!(event.kind, WatchEventKind::NodeDataChanged);
    assert_eq!(event.path, "/watched");
}

#[test]
fn frozen_server_is_noticed_while_the_client_keeps_sending() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let session_timeout = Duration::from_secs(6);
    let client = zklock::Client::builder(&server.connect_string())
        .session_timeout(session_timeout)
        .operation_timeout(Duration::from_millis(500))
        .connect()
        .unwrap();
    let states = client.connection_states();
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (client, stop) = (client.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = client.exists("/");
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    server.pause().unwrap();
    let paused = Instant::now();
    let before = expect_state(&states, Suspended);
    let noticed = paused.elapsed();
    server.resume().unwrap();
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    assert!(before.is_empty(), "states before Suspended: {before:?}");
    eprintln!("Suspended {noticed:?} after SIGSTOP (session timeout {session_timeout:?})");
    // The state came while the server was still frozen; it comes back to the same session
    // unless the freeze outlived it.
    let after = next_state(&states, "Reconnected or Lost");
    assert!(matches!(after, Reconnected | Lost), "{after:?}");
}

#[test]
fn server_down_past_session_timeout_means_lost_then_a_new_session() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(3));
    let states = client.connection_states();
    let old = client.session_id().unwrap();
    client
        .create("/old-eph")
        .mode(CreateMode::Ephemeral)
        .call()
        .unwrap();

    server.stop().unwrap();
    expect_next(&states, Suspended);
    // Lost must come while the server is still down.
    expect_next(&states, Lost);
    assert!(server.pid().is_none());
    server.restart().unwrap();
    expect_next(&states, Reconnected);
    let new = client.session_id().unwrap();
    assert_ne!(new, old, "a new session was expected");
    wait_for("the old session's ephemeral to go", || {
        client.exists("/old-eph").unwrap().is_none()
    });
    client.create("/after").call().unwrap();
    assert!(client.exists("/after").unwrap().is_some());
}

#[test]
fn expired_session_is_lost_then_replaced() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    let states = client.connection_states();
    client
        .create("/mine")
        .mode(CreateMode::Ephemeral)
        .call()
        .unwrap();
    let old = expire_session(&client).unwrap();
    let before = expect_state(&states, Lost);
    assert!(before.iter().all(|s| *s == Suspended), "{before:?}");
    expect_next(&states, Reconnected);
    let new = client.session_id().unwrap();
    assert_ne!(new, old);
    assert!(
        client.exists("/mine").unwrap().is_none(),
        "the expired session's ephemeral survived"
    );
}

#[test]
fn leader_killed_in_a_cluster_keeps_the_session() {
    init_logging();
    let mut cluster = TestingCluster::start(3).unwrap();
    let client = client(&cluster.connect_string(), Duration::from_secs(20));
    let states = client.connection_states();
    let session = client.session_id().unwrap();
    client
        .create("/eph")
        .mode(CreateMode::Ephemeral)
        .call()
        .unwrap();
    let leader = cluster.wait_for_leader(patience()).unwrap();
    cluster.kill(leader).unwrap();
    expect_next(&states, Suspended);
    expect_next(&states, Reconnected);
    assert_eq!(client.session_id(), Some(session));
    assert!(client.exists("/eph").unwrap().is_some());
    let new_leader = cluster.wait_for_leader(patience()).unwrap();
    assert_ne!(new_leader, leader);
}

#[test]
fn listeners_get_states_in_order_on_the_watcher_thread() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    let (tx, rx) = crossbeam_channel::unbounded();
    let id = client.on_connection_state(move |s| {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        // A slow listener must not hold up the session.
        std::thread::sleep(Duration::from_millis(200));
        let _ = tx.send((s, name));
    });
    server.restart().unwrap();
    let (first, thread) = rx.recv_timeout(patience()).unwrap();
    assert_eq!(first, Suspended);
    assert!(
        thread.starts_with("zklock-watch-"),
        "listener ran on {thread:?}"
    );
    assert_eq!(rx.recv_timeout(patience()).unwrap().0, Reconnected);
    assert!(client.remove_connection_state_listener(id));
    client.create("/still-works").call().unwrap();
}
