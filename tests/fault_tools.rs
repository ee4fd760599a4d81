//! The fault tools themselves: `FaultProxy` against a real ZooKeeper server, and the
//! `FencedRegister` with its checker.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;
use zklock::testing::{
    FaultProxy, FenceEvent, FenceEventKind::*, FenceReport, FencedRegister, TestingServer,
    WriteOutcome,
};
use zklock::{Client, ConnectionState::*, CreateMode, Error};

/// A Client through `connect` that notices a silent server within a few seconds but whose
/// session outlives any wait of these tests.
fn proxied_client(connect: &str) -> Client {
    Client::builder(connect)
        .session_timeout(Duration::from_secs(30))
        .connection_timeout(Duration::from_secs(3))
        .connect()
        .expect("connect through the proxy")
}

/// Threads of this process belonging to the proxy listening on `port` (`zkpx-<port>…`).
fn proxy_threads(port: u16) -> usize {
    let name = format!("zkpx-{port}");
    thread_names()
        .iter()
        .filter(|comm| **comm == name || comm.starts_with(&format!("{name}-")))
        .count()
}

#[test]
fn a_client_through_the_proxy_connects_and_works() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    assert_eq!(proxy.target().port(), server.port());
    let client = proxied_client(&proxy.connect_string());
    client.create("/through").data(b"proxy").call().unwrap();
    assert_eq!(client.data("/through").unwrap().0, b"proxy");

    let stats = proxy.stats();
    assert!(stats.connections_accepted >= 1, "{stats:?}");
    assert!(stats.open_connections >= 1, "{stats:?}");
    assert!(stats.requests_forwarded >= 2, "{stats:?}");
    assert_eq!(stats.replies_dropped, 0);
    let session = client.session_id().unwrap();
    assert_eq!(proxy.sessions(), vec![session]);

    // The server really got it: read it back directly.
    let direct = Client::connect(&server.connect_string()).unwrap();
    assert_eq!(direct.data("/through").unwrap().0, b"proxy");
}

#[test]
fn a_delay_slows_but_does_not_break_the_client() {
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    let client = proxied_client(&proxy.connect_string());
    proxy.delay(Duration::from_millis(300));
    let started = std::time::Instant::now();
    client.create("/slow").call().unwrap();
    // One request and its reply were each held 300 ms.
    assert!(started.elapsed() >= Duration::from_millis(600));
    proxy.heal();
    assert!(client.exists("/slow").unwrap().is_some());
}

#[test]
fn blackhole_suspends_and_heal_reconnects_the_same_session() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    let client = proxied_client(&proxy.connect_string());
    let session = client.session_id().unwrap();
    let states = client.connection_states();

    proxy.blackhole(true);
    let seen = expect_state(&states, Suspended);
    assert!(seen.is_empty(), "before Suspended: {seen:?}");
    assert!(!client.is_connected());

    proxy.heal();
    let seen = expect_state(&states, Reconnected);
    assert!(!seen.contains(&Lost), "the session must survive: {seen:?}");
    assert_eq!(client.session_id(), Some(session));
    client.create("/after-heal").call().unwrap();
}

/// Fires one protected or plain sequential create through `proxy` with the reply to it lost
/// and the connection then reset; returns the call's result and the children the server has.
fn lost_create_reply(protected: bool) -> (zklock::Result<String>, Vec<String>) {
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    let client = proxied_client(&proxy.connect_string());
    client.create("/lost").call().unwrap();

    proxy.drop_replies_to(FaultProxy::CREATE_OPS, 1);
    let creator = client.clone();
    let call = thread::spawn(move || {
        let create = creator
            .create("/lost/n-")
            .mode(CreateMode::EphemeralSequential);
        if protected {
            create.protected().call()
        } else {
            create.call()
        }
    });
    wait_for("the create's reply to be swallowed", || {
        proxy.stats().replies_dropped == 1
    });
    // The server has applied the create; only the reply is gone. The wire client waits for
    // it on a connection that is otherwise alive, until the connection dies:
    proxy.reset();
    let result = call.join().unwrap();

    let direct = Client::connect(&server.connect_string()).unwrap();
    let mut children = direct.children("/lost").unwrap();
    children.sort();
    (result, children)
}

#[test]
fn a_lost_create_reply_leaves_one_node_with_a_protected_create() {
    init_logging();
    let (result, children) = lost_create_reply(true);
    let path = result.expect("the retry adopts the node the server made");
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(format!("/lost/{}", children[0]), path);
}

#[test]
fn a_lost_create_reply_makes_a_plain_sequential_create_twice() {
    init_logging();
    // The control experiment: the fault is real, and only protection makes the retry safe.
    let (result, children) = lost_create_reply(false);
    let path = result.expect("the retry creates again");
    assert_eq!(children.len(), 2, "{children:?}");
    assert!(children.iter().any(|c| format!("/lost/{c}") == path));
}

#[test]
fn a_lost_reply_without_a_reset_holds_the_call_until_its_deadline() {
    init_logging();
    // What zookeeper-client 0.11 does: it matches replies by xid and has no per-request
    // timeout, and pings keep the connection alive, so the call ends only at its deadline.
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    let client = Client::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(30))
        .connection_timeout(Duration::from_secs(3))
        .operation_timeout(Duration::from_secs(2))
        .connect()
        .unwrap();
    client.create("/held").call().unwrap();
    proxy.drop_replies_to(FaultProxy::CREATE_OPS, 1);
    let err = client
        .create("/held/n-")
        .mode(CreateMode::EphemeralSequential)
        .protected()
        .call()
        .expect_err("no reply, no result");
    assert!(matches!(err, Error::Timeout), "{err:?}");
    assert_eq!(proxy.stats().replies_dropped, 1);
    assert!(client.is_connected(), "the connection itself stayed up");
    // The node the server made is found by its protection id and deleted in the background.
    wait_for("the orphan to be deleted", || {
        client
            .children("/held")
            .map(|c| c.is_empty())
            .unwrap_or(false)
    });
}

#[test]
fn a_cut_off_session_loses_the_server_while_another_keeps_it() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    let victim = proxied_client(&proxy.connect_string());
    let bystander = proxied_client(&proxy.connect_string());
    let session = victim.session_id().unwrap();
    let victim_states = victim.connection_states();
    let bystander_states = bystander.connection_states();

    proxy.cut_off(session);
    expect_state(&victim_states, Suspended);
    // The victim keeps trying through the proxy; its reconnects name the session and stay silent.
    wait_for("the victim to try again", || {
        proxy.stats().connections_accepted >= 4
    });
    bystander.create("/bystander").call().unwrap();
    assert!(bystander.exists("/bystander").unwrap().is_some());
    assert!(!victim.is_connected());
    assert_eq!(bystander_states.try_recv().ok(), None);

    proxy.restore(session);
    let seen = expect_state(&victim_states, Reconnected);
    assert!(!seen.contains(&Lost), "{seen:?}");
    assert_eq!(victim.session_id(), Some(session));
    assert!(victim.exists("/bystander").unwrap().is_some());
}

#[test]
fn reset_makes_the_client_reconnect() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    let client = proxied_client(&proxy.connect_string());
    let session = client.session_id().unwrap();
    let states = client.connection_states();
    let before = proxy.stats().connections_accepted;

    proxy.reset();
    let seen = expect_state(&states, Reconnected);
    assert_eq!(seen, vec![Suspended]);
    assert_eq!(client.session_id(), Some(session));
    assert!(proxy.stats().connections_accepted > before);
    client.create("/after-reset").call().unwrap();
}

#[test]
fn dropping_the_proxy_ends_its_threads() {
    let server = TestingServer::start().unwrap();
    let proxy = FaultProxy::for_server(&server).unwrap();
    let port = proxy.addr().port();
    let client = proxied_client(&proxy.connect_string());
    client.create("/x").call().unwrap();
    // A listener and two threads per connection, one of them holding a frame for an hour.
    assert!(proxy_threads(port) >= 3, "{}", proxy_threads(port));
    proxy.delay(Duration::from_secs(3600));
    let creator = client.clone();
    // Its request is held by the delay when the proxy goes; it ends by the retry policy.
    thread::spawn(move || creator.create("/y").call());

    let (dropped_tx, dropped) = mpsc::channel();
    thread::spawn(move || {
        drop(proxy);
        let _ = dropped_tx.send(());
    });
    dropped
        .recv_timeout(patience())
        .expect("drop returns promptly");
    assert_eq!(proxy_threads(port), 0);
}

#[test]
fn a_proxy_per_cluster_member() {
    init_logging();
    let cluster = zklock::testing::TestingCluster::start(3).unwrap();
    let proxies = FaultProxy::for_cluster(&cluster).unwrap();
    assert_eq!(proxies.len(), 3);
    let connect = FaultProxy::ensemble_connect_string(&proxies);
    assert_eq!(connect.split(',').count(), 3);
    let client = proxied_client(&connect);
    let session = client.session_id().unwrap();
    let serving: Vec<usize> = (0..3)
        .filter(|&i| proxies[i].sessions().contains(&session))
        .collect();
    assert_eq!(serving.len(), 1, "{serving:?}");
    // Silence the member the client is on: it moves to another one, same session.
    let states = client.connection_states();
    proxies[serving[0]].blackhole(true);
    let seen = expect_state(&states, Reconnected);
    assert!(!seen.contains(&Lost), "{seen:?}");
    assert_eq!(client.session_id(), Some(session));
    wait_for("the client on another member", || {
        (0..3).any(|i| i != serving[0] && proxies[i].sessions().contains(&session))
    });
    client.create("/moved").call().unwrap();
}

// ---------------------------------------------------------------------------
// FencedRegister and the checker
// ---------------------------------------------------------------------------

#[test]
fn the_checker_catches_a_planted_overlap() {
    // B gets the lock (token 2) while A (token 1) still believes it holds it, and both write
    // before B writes anything, so the fence accepts both.
    let log = [
        FenceEvent::new(Enter, 1, "A"),
        FenceEvent::new(Enter, 2, "B"),
        FenceEvent::new(Accepted, 1, "A"),
        FenceEvent::new(Accepted, 2, "B"),
        FenceEvent::new(Exit, 1, "A"),
        FenceEvent::new(Exit, 2, "B"),
    ];
    let report = FenceReport::check(&log);
    println!("{report}");
    assert!(!report.is_clean());
    assert_eq!(report.overlaps.len(), 1, "{report}");
    let o = &report.overlaps[0];
    assert_eq!((o.first_worker.as_str(), o.first_token), ("A", 1));
    assert_eq!((o.second_worker.as_str(), o.second_token), ("B", 2));
    assert_eq!((o.first_write, o.second_write), (2, 3));
    assert!(report.stale_accepted.is_empty());
    assert!(report.to_string().contains("VIOLATION"));

    // The same two holders one after the other are fine.
    let sequential = [
        FenceEvent::new(Enter, 1, "A"),
        FenceEvent::new(Accepted, 1, "A"),
        FenceEvent::new(Exit, 1, "A"),
        FenceEvent::new(Enter, 2, "B"),
        FenceEvent::new(Accepted, 2, "B"),
        FenceEvent::new(Exit, 2, "B"),
    ];
    assert!(FenceReport::check(&sequential).is_clean());
}

#[test]
fn the_checker_catches_a_planted_stale_write() {
    // A zombie A writes with token 1 after B (token 2) was accepted: a broken fence let it in.
    let log = [
        FenceEvent::new(Enter, 1, "A"),
        FenceEvent::new(Accepted, 1, "A"),
        FenceEvent::new(Exit, 1, "A"),
        FenceEvent::new(Enter, 2, "B"),
        FenceEvent::new(Accepted, 2, "B"),
        FenceEvent::new(Exit, 2, "B"),
        FenceEvent::new(Accepted, 1, "A"),
    ];
    let report = FenceReport::check(&log);
    println!("{report}");
    assert!(!report.is_clean());
    assert_eq!(report.stale_accepted, vec![6]);
    assert!(report.overlaps.is_empty(), "{report}");
}

#[test]
fn a_fenced_stale_holder_is_clean() {
    // A pauses while holding token 1; B takes over with 2; A wakes, writes, is refused, exits.
    let log = [
        FenceEvent::new(Enter, 1, "A"),
        FenceEvent::new(Accepted, 1, "A"),
        FenceEvent::new(Enter, 2, "B"),
        FenceEvent::new(Accepted, 2, "B"),
        FenceEvent::new(Rejected, 1, "A"),
        FenceEvent::new(Exit, 1, "A"),
        FenceEvent::new(Accepted, 2, "B"),
        FenceEvent::new(Exit, 2, "B"),
        FenceEvent::new(Enter, 3, "C"),
        FenceEvent::new(Accepted, 3, "C"),
        FenceEvent::new(Exit, 3, "C"),
    ];
    let report = FenceReport::check(&log);
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.stale_rejected, 1);
    assert_eq!(report.events, log.len());
    assert_eq!(report.workers["A"].acquisitions, 1);
    assert_eq!(report.workers["A"].accepted, 1);
    assert_eq!(report.workers["A"].rejected, 1);
    assert_eq!(report.workers["B"].accepted, 2);
    assert_eq!(report.workers["C"].acquisitions, 1);
    assert!(report.to_string().contains("| clean |"));
}

#[test]
fn the_register_rejects_a_stale_write_over_tcp() {
    let register = FencedRegister::start().unwrap();
    let mut a = register.client().unwrap();
    let mut b = zklock::testing::FenceClient::connect(register.addr()).unwrap();
    assert_eq!(a.read().unwrap(), None);

    a.enter(5, "A").unwrap();
    assert_eq!(a.write(5, "A", "from A").unwrap(), WriteOutcome::Accepted);
    assert_eq!(a.write(5, "A", "again A").unwrap(), WriteOutcome::Accepted);
    b.enter(6, "B").unwrap();
    assert_eq!(b.write(6, "B", "from B").unwrap(), WriteOutcome::Accepted);
    assert_eq!(
        a.write(5, "A", "stale").unwrap(),
        WriteOutcome::Rejected { highest: 6 }
    );
    a.exit(5, "A").unwrap();
    b.exit(6, "B").unwrap();
    assert_eq!(a.read().unwrap(), Some((6, "from B".to_owned())));
    assert_eq!(register.value(), Some((6, "from B".to_owned())));
    assert!(a.enter(1, "two words").is_err());

    let log = register.log();
    let kinds: Vec<_> = log.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [Enter, Accepted, Accepted, Enter, Accepted, Rejected, Exit, Exit]
    );
    assert!(log
        .windows(2)
        .all(|w| w[0].seq + 1 == w[1].seq && w[0].at <= w[1].at));
    let report = register.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.stale_rejected, 1);

    let path = std::env::temp_dir().join(format!("zklock-fence-{}.log", std::process::id()));
    register.save(&path).unwrap();
    let loaded = FenceEvent::load(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(loaded.len(), log.len());
    assert!(loaded
        .iter()
        .zip(&log)
        .all(|(l, e)| (l.seq, l.kind, l.token, &l.worker) == (e.seq, e.kind, e.token, &e.worker)));

    drop(register);
    assert!(a.write(7, "A", "after drop").is_err());
}
