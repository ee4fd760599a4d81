//! A Client that follows the ensemble: through a reconfiguration that replaces every member
//! (ensemble tracker on; off, with and without `update_connect_string`), and through rolling
//! restarts under contention.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use zklock::testing::{FenceEventKind, FencedRegister, TestingCluster};
use zklock::{Client, ConnectionState, InterProcessMutex, LockHealth};

/// The members of `cluster` at `indices`, as the Client writes its list.
fn hosts_of(cluster: &TestingCluster, indices: &[usize]) -> String {
    let hosts: Vec<String> = indices
        .iter()
        .map(|&i| cluster.connect_string_of(i))
        .collect();
    hosts.join(",")
}

/// The member (of `among`) whose connections list `session`.
fn serving_member(cluster: &TestingCluster, among: &[usize], session: i64) -> Option<usize> {
    let id = format!("sid=0x{session:x}");
    among.iter().copied().find(|&i| {
        cluster
            .four_letter(i, "cons")
            .is_ok_and(|c| c.contains(&id))
    })
}

/// Every state a Client goes through, recorded from its listener.
fn record_states(client: &Client) -> Arc<Mutex<Vec<ConnectionState>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    client.on_connection_state(move |s| log.lock().unwrap().push(s));
    seen
}

/// Waits until no member in `members` holds a watch and no path of `paths` has children. A
/// lookup that fails (past a brief retry) fails the test with its cause.
fn assert_nothing_left(cluster: &TestingCluster, members: &[usize], connect: &str, paths: &[&str]) {
    let checker = client(connect, Duration::from_secs(10));
    for path in paths {
        wait_for(&format!("no node left under {path}"), || {
            children_left(&checker, path)
                .unwrap_or_else(|e| panic!("{e}"))
                .is_empty()
        });
    }
    // The checker's own tracker watches the configuration until it closes.
    checker.close();
    for &i in members {
        wait_for(&format!("no watch left on member {i}"), || {
            cluster
                .four_letter(i, "wchs")
                .is_ok_and(|w| w.contains("Total watches:0"))
        });
    }
}

#[test]
fn a_tracking_client_follows_a_reconfiguration_to_new_members() {
    init_logging();
    let mut cluster = TestingCluster::start(3).expect("cluster");
    let first = cluster.connect_string();
    let tracking = Client::builder(&first)
        .namespace("ens")
        .session_timeout(Duration::from_secs(20))
        .connection_timeout(Duration::from_secs(10))
        .connect()
        .expect("tracking client");
    let fixed = Client::builder(&first)
        .namespace("ens")
        .ensemble_tracker(false)
        .session_timeout(Duration::from_secs(4))
        .connection_timeout(Duration::from_secs(2))
        .connect()
        .expect("fixed client");
    // Tracker off too, but given the new members by hand before the old ones go.
    let updated = Client::builder(&first)
        .namespace("ens")
        .ensemble_tracker(false)
        .session_timeout(Duration::from_secs(20))
        .connection_timeout(Duration::from_secs(10))
        .connect()
        .expect("updated client");
    let tracking_states = record_states(&tracking);
    let fixed_states = record_states(&fixed);
    let updated_states = record_states(&updated);
    let session = tracking.session_id().expect("session");
    let updated_session = updated.session_id().expect("session");
    // The tracker reads the configuration: the same members, in server-id order.
    wait_for("the tracker's first read", || {
        tracking.connect_string() == hosts_of(&cluster, &[0, 1, 2])
    });

    // A lock held by the tracking Client through the whole change.
    let mutex = InterProcessMutex::new(&tracking, "/lock").unwrap();
    mutex.acquire().unwrap();
    let updated_mutex = InterProcessMutex::new(&updated, "/updated-lock").unwrap();
    updated_mutex.acquire().unwrap();

    let added = cluster.add_members(2).expect("add two members");
    assert_eq!(added, vec![3, 4]);
    wait_for("the five members", || {
        tracking.connect_string() == hosts_of(&cluster, &[0, 1, 2, 3, 4])
    });
    cluster
        .remove_members(&[0, 1, 2])
        .expect("remove the first three");
    wait_for("the two new members", || {
        tracking.connect_string() == hosts_of(&cluster, &[3, 4])
    });
    assert_eq!(fixed.connect_string(), first, "tracker off: the list stays");
    assert_eq!(
        updated.connect_string(),
        first,
        "tracker off: the list stays"
    );
    let new_members = hosts_of(&cluster, &[3, 4]);
    updated.update_connect_string(&new_members).unwrap();
    assert_eq!(updated.connect_string(), new_members);
    for i in 0..3 {
        cluster.stop(i).unwrap();
    }

    // The old addresses are gone: the tracking Client moves its session to a new member.
    wait_for("the tracking Client on a new member", || {
        serving_member(&cluster, &[3, 4], session).is_some() && tracking.is_connected()
    });
    assert_eq!(tracking.session_id(), Some(session), "the same session");
    tracking.create("/after-move").call().unwrap();
    wait_for("the held lock known good", || {
        mutex.health() == Some(LockHealth::Held)
    });
    // So does the Client given the new members by hand.
    wait_for("the updated Client on a new member", || {
        serving_member(&cluster, &[3, 4], updated_session).is_some() && updated.is_connected()
    });
    assert_eq!(
        updated.session_id(),
        Some(updated_session),
        "the same session"
    );
    updated.create("/updated-after-move").call().unwrap();
    wait_for("its held lock known good", || {
        updated_mutex.health() == Some(LockHealth::Held)
    });

    // The namespace moved with the sessions: a Client without one finds their nodes under it.
    let plain = client(&new_members, Duration::from_secs(10));
    for node in ["/after-move", "/updated-after-move"] {
        let full = format!("/ens{node}");
        assert!(plain.exists(&full).unwrap().is_some(), "{full} not found");
        assert!(
            plain.exists(node).unwrap().is_none(),
            "{node} outside the namespace"
        );
    }
    plain.close();

    // Their current connections killed: each reconnects to a new member, same session.
    let mut serving: Vec<usize> = [session, updated_session]
        .iter()
        .map(|&s| serving_member(&cluster, &[3, 4], s).unwrap())
        .collect();
    serving.dedup();
    for on in serving {
        cluster.restart(on).unwrap();
        cluster.wait_for_quorum(patience()).unwrap();
    }
    wait_for("the tracking Client back on a new member", || {
        tracking.exists("/after-move").is_ok_and(|s| s.is_some())
    });
    assert!(serving_member(&cluster, &[3, 4], session).is_some());
    assert_eq!(tracking.session_id(), Some(session));
    wait_for("the held lock known good again", || {
        mutex.health() == Some(LockHealth::Held)
    });
    mutex.release().unwrap();
    tracking.delete("/after-move").unwrap();
    let seen = tracking_states.lock().unwrap().clone();
    assert!(
        !seen.contains(&ConnectionState::Lost),
        "the tracking Client lost its session: {seen:?}"
    );

    wait_for("the updated Client back on a new member", || {
        updated
            .exists("/updated-after-move")
            .is_ok_and(|s| s.is_some())
    });
    assert!(serving_member(&cluster, &[3, 4], updated_session).is_some());
    assert_eq!(updated.session_id(), Some(updated_session));
    assert_eq!(updated.connect_string(), new_members);
    wait_for("its held lock known good again", || {
        updated_mutex.health() == Some(LockHealth::Held)
    });
    updated_mutex.release().unwrap();
    updated.delete("/updated-after-move").unwrap();
    let seen = updated_states.lock().unwrap().clone();
    assert!(
        !seen.contains(&ConnectionState::Lost),
        "the updated Client lost its session: {seen:?}"
    );
    updated.close();

    // Tracker off: the Client knows only the retired members and cannot come back.
    wait_for("the fixed Client gives its session up", || {
        fixed_states
            .lock()
            .unwrap()
            .contains(&ConnectionState::Lost)
    });
    assert!(!fixed.is_connected());
    assert!(fixed.exists("/").is_err(), "no member it knows answers");
    fixed.close();

    tracking.close();
    assert_nothing_left(
        &cluster,
        &[3, 4],
        &new_members,
        &["/ens/lock", "/ens/updated-lock"],
    );
}

#[test]
fn update_connect_string_checks_its_argument() {
    let client = Client::builder("127.0.0.1:1").build().unwrap();
    assert!(client.update_connect_string("").is_err());
    assert!(client.update_connect_string("a:1/chroot").is_err());
    assert!(client.update_connect_string("a:x").is_err());
    assert_eq!(client.connect_string(), "127.0.0.1:1");
    client.update_connect_string(" b:2 ,c").unwrap();
    assert_eq!(client.connect_string(), "b:2,c:2181");
    client.close();
}

/// Three Clients contend for one lock, writing to a fenced register under it, while every
/// member is restarted in turn (`rounds` of [`TestingCluster::rolling_restart`], leader last,
/// then leader first). Returns the longest gap between two accepted writes.
fn contend_through_rolling_restarts(members: usize) -> Duration {
    let mut cluster = TestingCluster::start(members).expect("cluster");
    let connect = cluster.connect_string();
    let register = FencedRegister::start().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut states = Vec::new();
    let mut workers = Vec::new();
    for w in 0..3 {
        let client = Client::builder(&connect)
            .session_timeout(Duration::from_secs(20))
            .connection_timeout(Duration::from_secs(10))
            .connect()
            .expect("client");
        states.push(record_states(&client));
        let (stop, mut fence) = (stop.clone(), register.client().unwrap());
        workers.push(thread::spawn(move || {
            let name = format!("w{w}");
            let mutex = InterProcessMutex::new(&client, "/rolling").unwrap();
            while !stop.load(Ordering::Relaxed) {
                match mutex.acquire_timeout(Duration::from_secs(5)) {
                    Ok(true) => {}
                    Ok(false) | Err(_) => continue,
                }
                let token = mutex.fencing_token().unwrap();
                let _ = fence.enter(token, &name);
                let _ = fence.write(token, &name, "v");
                thread::sleep(Duration::from_millis(5));
                let _ = fence.exit(token, &name);
                let _ = mutex.release();
            }
            client.close();
        }));
    }
    wait_for("writes before the restarts", || register.log().len() > 30);
    for leader_last in [true, false] {
        let order = cluster.restart_order(leader_last).unwrap();
        cluster.rolling_restart(&order).expect("rolling restart");
    }
    let before = register.log().len();
    wait_for("writes after the restarts", || {
        register.log().len() > before + 30
    });
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let report = register.check();
    assert!(
        report.overlaps.is_empty(),
        "overlaps: {:?}",
        report.overlaps
    );
    assert!(report.stale_accepted.is_empty(), "stale writes accepted");
    for (w, seen) in states.iter().enumerate() {
        let seen = seen.lock().unwrap();
        assert!(
            !seen.contains(&ConnectionState::Lost),
            "client {w} lost its session: {seen:?}"
        );
    }
    let accepted: Vec<Duration> = register
        .log()
        .iter()
        .filter(|e| e.kind == FenceEventKind::Accepted)
        .map(|e| e.at)
        .collect();
    let gap = accepted
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or_default();
    println!(
        "{members} members: {} accepted writes, longest gap between two {gap:?}",
        accepted.len()
    );
    let all: Vec<usize> = (0..members).collect();
    assert_nothing_left(&cluster, &all, &connect, &["/rolling"]);
    gap
}

#[test]
fn three_members_restarted_in_turn_while_clients_contend() {
    contend_through_rolling_restarts(3);
}

/// Five members: longer; run by `scripts/chaos.sh` (or `--ignored`).
#[test]
#[ignore]
fn five_members_restarted_in_turn_while_clients_contend() {
    contend_through_rolling_restarts(5);
}
