//! LeaderLatch against real servers: one leader at a time, hand-over on close, close modes,
//! expiry (CURATOR-696), error policies on a 3-node ensemble, nothing left behind.

mod common;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use zklock::testing::{expire_session, TestingCluster, TestingServer};
use zklock::{Client, CloseMode, ErrorPolicy, LeaderLatch, LeadershipChange};

fn latch(client: &Client, path: &str, id: &str) -> LeaderLatch {
    let latch = LeaderLatch::builder(client, path).id(id).build().unwrap();
    latch.start().unwrap();
    latch
}

#[test]
fn one_leader_at_a_time_and_closing_it_elects_the_next() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let path = "/election/latch";
    let clients: Vec<Client> = (0..3)
        .map(|_| client(&server.connect_string(), Duration::from_secs(30)))
        .collect();
    let mut latches: Vec<Option<LeaderLatch>> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| Some(latch(c, path, &format!("p{i}"))))
        .collect();
    // `start` returns before the latch's node is queued: wait until all three are.
    wait_for("three participants", || {
        latches[0]
            .as_ref()
            .is_some_and(|l| l.participants().is_ok_and(|p| p.len() == 3))
    });
    let mut epochs = Vec::new();
    let mut led = Vec::new();
    for round in 0..3 {
        let mut leader = None;
        wait_for("exactly one leader", || {
            let l: Vec<usize> = (0..3)
                .filter(|&i| latches[i].as_ref().is_some_and(|l| l.has_leadership()))
                .collect();
            leader = (l.len() == 1).then(|| l[0]);
            leader.is_some()
        });
        let leader = leader.unwrap();
        let l = latches[leader].as_ref().unwrap();
        // Everyone reads the same participants, the leader first.
        let parts = l.participants().unwrap();
        assert_eq!(parts.len(), 3 - round);
        assert!(parts[0].is_leader && parts[1..].iter().all(|p| !p.is_leader));
        assert_eq!(parts[0].id, format!("p{leader}"));
        assert_eq!(parts[0].node, l.leader_node().unwrap());
        for other in latches.iter().flatten() {
            assert_eq!(other.leader().unwrap().unwrap().id, format!("p{leader}"));
        }
        epochs.push(l.epoch().unwrap());
        led.push(leader);
        latches[leader].take().unwrap().close().unwrap();
    }
    led.sort();
    assert_eq!(led, vec![0, 1, 2], "each latch led once");
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "epochs rise: {epochs:?}"
    );
    assert_clean(|| server.four_letter("wchc").unwrap(), &clients[0], path);
}

#[test]
fn close_modes_and_await_timeout() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let path = "/election/modes";
    let c = client(&server.connect_string(), Duration::from_secs(30));
    for (mode, expect_lost) in [(CloseMode::Silent, false), (CloseMode::NotifyLeader, true)] {
        let latch = LeaderLatch::builder(&c, path)
            .close_mode(mode)
            .build()
            .unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        latch.on_change(move |change| h.lock().unwrap().push(change));
        let changes = latch.changes();
        latch.start().unwrap();
        latch.await_leadership().unwrap();
        let epoch = latch.epoch().unwrap();
        assert_eq!(
            changes.recv_timeout(patience()).unwrap(),
            LeadershipChange::Gained { epoch }
        );
        latch.close().unwrap();
        assert!(!latch.has_leadership());
        let after_close = changes.recv_timeout(Duration::from_millis(500));
        assert_eq!(
            after_close.is_ok(),
            expect_lost,
            "{mode:?}: {after_close:?}"
        );
        wait_for("the listener to hear Gained", || {
            !heard.lock().unwrap().is_empty()
        });
        thread::sleep(Duration::from_millis(200));
        let expected = if expect_lost {
            vec![LeadershipChange::Gained { epoch }, LeadershipChange::Lost]
        } else {
            vec![LeadershipChange::Gained { epoch }]
        };
        assert_eq!(*heard.lock().unwrap(), expected, "{mode:?}");
        assert_eq!(latch.await_leadership(), Err(zklock::Error::Closed));
    }

    // A latch that cannot lead says so on time.
    let first = latch(&c, path, "first");
    first.await_leadership().unwrap();
    let second = latch(&c, path, "second");
    let t = Instant::now();
    assert!(!second
        .await_leadership_timeout(Duration::from_millis(300))
        .unwrap());
    assert!(t.elapsed() >= Duration::from_millis(300));
    first.close().unwrap();
    assert!(second.await_leadership_timeout(patience()).unwrap());
    second.close().unwrap();
    assert_clean(|| server.four_letter("wchc").unwrap(), &c, path);
}

/// CURATOR-696: the leader's session expires; it hears Lost, another leads with a higher epoch,
/// and the old node (gone with its session) never leads again.
#[test]
fn an_expired_leader_hears_lost_and_the_next_leads_with_a_higher_epoch() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let path = "/election/expiry";
    let a = client(&server.connect_string(), Duration::from_secs(10));
    let b = client(&server.connect_string(), Duration::from_secs(10));
    let la = latch(&a, path, "a");
    la.await_leadership().unwrap();
    let lb = latch(&b, path, "b");
    wait_for("b to queue", || la.participants().unwrap().len() == 2);
    let old_epoch = la.epoch().unwrap();
    let old_node = la.leader_node().unwrap();
    let changes = la.changes();
    expire_session(&a).unwrap();
    assert_eq!(
        changes.recv_timeout(patience()).unwrap(),
        LeadershipChange::Lost
    );
    assert!(lb.await_leadership_timeout(patience()).unwrap());
    let new_epoch = lb.epoch().unwrap();
    assert!(new_epoch > old_epoch, "{new_epoch} > {old_epoch}");
    // `a` takes part again from its new session, behind `b`, with a new node.
    wait_for("a to queue again", || {
        la.participants().map(|p| p.len() == 2).unwrap_or(false)
    });
    assert!(!la.has_leadership());
    let nodes: Vec<String> = lb
        .participants()
        .unwrap()
        .into_iter()
        .map(|p| p.node)
        .collect();
    assert!(!nodes.contains(&old_node), "the expired node is gone");
    lb.close().unwrap();
    assert!(la.await_leadership_timeout(patience()).unwrap());
    assert!(la.epoch().unwrap() > new_epoch);
    la.close().unwrap();
    assert_clean(|| server.four_letter("wchc").unwrap(), &b, path);
}

/// Whether member `member` serves `session` (from its `cons` output).
fn serves(cluster: &TestingCluster, member: usize, session: i64) -> bool {
    let sid = format!("sid=0x{:x}", session as u64);
    cluster
        .four_letter(member, "cons")
        .map(|cons| cons.lines().any(|l| l.contains(&format!("{sid},"))))
        .unwrap_or(false)
}

/// The member a session is connected to is killed: under `SessionOnly` the leader keeps its
/// leadership through the reconnection; under `Standard` it gives it up and leads again.
#[test]
fn error_policies_on_a_member_kill() {
    init_logging();
    let mut cluster = TestingCluster::start(3).unwrap();
    cluster.wait_for_leader(patience()).unwrap();
    for policy in [ErrorPolicy::SessionOnly, ErrorPolicy::Standard] {
        let c = Client::builder(&cluster.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connection_timeout(Duration::from_secs(30))
            .error_policy(policy)
            .connect()
            .unwrap();
        let path = format!("/election/policy-{policy:?}");
        let l = latch(&c, &path, "only");
        l.await_leadership().unwrap();
        let changes = l.changes();
        let session = c.session_id().unwrap();
        let member = (0..3)
            .find(|&m| serves(&cluster, m, session))
            .expect("a member serves the session");
        cluster.kill(member).unwrap();
        wait_for("the session to move to another member", || {
            c.session_id() == Some(session)
                && c.state() == Some(zklock::ConnectionState::Reconnected)
        });
        match policy {
            ErrorPolicy::SessionOnly => {
                assert!(l.has_leadership());
                thread::sleep(Duration::from_millis(300));
                assert_eq!(
                    changes.try_recv().ok(),
                    None,
                    "kept through the reconnection"
                );
            }
            _ => {
                assert_eq!(
                    changes.recv_timeout(patience()).unwrap(),
                    LeadershipChange::Lost
                );
                assert!(matches!(
                    changes.recv_timeout(patience()).unwrap(),
                    LeadershipChange::Gained { .. }
                ));
                assert!(l.has_leadership());
            }
        }
        cluster.restart(member).unwrap();
        l.close().unwrap();
        c.close();
    }
}

/// Our node is deleted under us (an operator, a session's end): the latch hears Lost, queues a
/// new node and, alone, leads again in a new epoch.
#[test]
fn a_latch_whose_node_vanishes_queues_again() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let path = "/election/vanish";
    let c = client(&server.connect_string(), Duration::from_secs(30));
    let l = latch(&c, path, "solo");
    l.await_leadership().unwrap();
    let (epoch, node) = (l.epoch().unwrap(), l.leader_node().unwrap());
    let changes = l.changes();
    let other = client(&server.connect_string(), Duration::from_secs(30));
    other.delete(&node).unwrap();
    assert_eq!(
        changes.recv_timeout(patience()).unwrap(),
        LeadershipChange::Lost
    );
    match changes.recv_timeout(patience()).unwrap() {
        LeadershipChange::Gained { epoch: again } => assert!(again > epoch),
        other => panic!("expected Gained, got {other:?}"),
    }
    assert_ne!(l.leader_node().unwrap(), node);
    l.close().unwrap();
    assert_clean(|| server.four_letter("wchc").unwrap(), &c, path);
}

#[test]
fn a_listener_that_blocks_holds_up_no_other_latch() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(30));
    let first = LeaderLatch::builder(&c, "/blocking/a")
        .id("first")
        .close_mode(CloseMode::NotifyLeader)
        .build()
        .unwrap();
    let (blocked_tx, blocked) = crossbeam_channel::bounded(1);
    let (release, released) = crossbeam_channel::bounded::<()>(1);
    first.on_change(move |change| {
        if change == LeadershipChange::Lost {
            let _ = blocked_tx.send(());
            // Blocks the Client's watcher thread until released (bounded, so it cannot hang).
            let _ = released.recv_timeout(Duration::from_secs(300));
        }
    });
    first.start().unwrap();
    assert!(first.await_leadership_timeout(patience()).unwrap());
    let second = latch(&c, "/blocking/a", "second");
    let changes = second.changes();
    first.close().unwrap();
    blocked
        .recv_timeout(patience())
        .expect("the first latch's listener heard Lost and blocks");
    // With the watcher thread held, the next latch still leads and says so on its channel,
    // and a latch on another path still leads.
    assert!(matches!(
        changes.recv_timeout(patience()),
        Ok(LeadershipChange::Gained { .. })
    ));
    assert!(second.has_leadership());
    let third = latch(&c, "/blocking/b", "third");
    assert!(third.await_leadership_timeout(patience()).unwrap());
    second.close().unwrap();
    third.close().unwrap();
    release.send(()).unwrap();
    assert_clean(|| server.four_letter("wchc").unwrap(), &c, "/blocking");
}

#[test]
fn a_latch_closed_from_its_own_listener_returns_and_leaves_nothing() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(30));
    let l = Arc::new(
        LeaderLatch::builder(&c, "/self-closed")
            .id("x")
            .build()
            .unwrap(),
    );
    let (tx, closed) = crossbeam_channel::bounded(1);
    let weak = Arc::downgrade(&l);
    l.on_change(move |change| {
        if let (LeadershipChange::Gained { .. }, Some(l)) = (change, weak.upgrade()) {
            let _ = tx.send(l.close().is_ok());
        }
    });
    l.start().unwrap();
    assert_eq!(closed.recv_timeout(patience()), Ok(true));
    assert!(!l.has_leadership());
    assert!(l.await_leadership().is_err(), "closed");
    assert_clean(|| server.four_letter("wchc").unwrap(), &c, "/self-closed");
}
