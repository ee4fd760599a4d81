//! LeaderSelector and `elect` against a real server: never two leaders' closures at once,
//! everyone leads, interruption, Suspended under the Standard policy, a panicking closure.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::{Client, ErrorPolicy, LeaderSelector, LockHealth};

#[test]
fn five_selectors_take_turns_and_never_overlap() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let path = "/election/selector";
    const TERMS: usize = 20;
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(Mutex::new(BTreeMap::<usize, Vec<u64>>::new()));
    let clients: Vec<Client> = (0..5)
        .map(|_| client(&server.connect_string(), Duration::from_secs(30)))
        .collect();
    let selectors: Vec<LeaderSelector> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (inside, overlaps, terms) = (inside.clone(), overlaps.clone(), terms.clone());
            let selector = LeaderSelector::builder(c, path)
                .id(&format!("s{i}"))
                .auto_requeue(true)
                .build(move |leadership| {
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    terms
                        .lock()
                        .unwrap()
                        .entry(i)
                        .or_default()
                        .push(leadership.fencing_token());
                    assert_eq!(leadership.health(), LockHealth::Held);
                    thread::sleep(Duration::from_millis(2));
                    inside.store(false, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
            selector.start().unwrap();
            selector
        })
        .collect();
    wait_for("every selector to lead 20 terms", || {
        let t = terms.lock().unwrap();
        t.len() == 5 && t.values().all(|v| v.len() >= TERMS)
    });
    for s in &selectors {
        s.close();
    }
    for s in &selectors {
        assert!(s.close_timeout(patience()), "the selector's thread ended");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two leaders at once");
    // Epochs rise strictly across all terms, whoever led.
    let mut all: Vec<u64> = terms.lock().unwrap().values().flatten().copied().collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "every term had its own epoch");
    assert_clean(|| server.four_letter("wchc").unwrap(), &clients[0], path);
}

#[test]
fn interruption_cancels_the_handle_and_the_return_ends_the_term() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let path = "/election/interrupt";
    let c = client(&server.connect_string(), Duration::from_secs(30));
    let (started_tx, started) = crossbeam_channel::unbounded();
    let (ended_tx, ended) = crossbeam_channel::unbounded();
    let selector = LeaderSelector::builder(&c, path)
        .id("interrupted")
        .build(move |leadership| {
            started_tx.send(leadership.fencing_token()).unwrap();
            let cancelled = leadership.cancelled();
            // Leads until told otherwise.
            cancelled.recv_timeout(Duration::from_secs(600)).unwrap();
            assert!(leadership.is_cancelled());
            ended_tx.send(()).unwrap();
            Ok(())
        })
        .unwrap();
    selector.start().unwrap();
    started.recv_timeout(patience()).unwrap();
    assert!(selector.has_leadership());
    assert_eq!(selector.leader().unwrap().unwrap().id, "interrupted");
    selector.interrupt_leadership();
    ended.recv_timeout(patience()).unwrap();
    wait_for("the node to go after the return", || {
        c.children(path).map(|c| c.is_empty()).unwrap_or(true)
    });
    assert!(!selector.has_leadership());
    // Without auto-requeue it waits for requeue().
    assert!(started.recv_timeout(Duration::from_millis(300)).is_err());
    assert!(selector.requeue().unwrap());
    started.recv_timeout(patience()).unwrap();
    selector.close();
    ended.recv_timeout(patience()).unwrap();
    assert!(selector.close_timeout(patience()));
    assert_clean(|| server.four_letter("wchc").unwrap(), &c, path);
}

#[test]
fn suspended_cancels_under_standard_and_a_panic_ends_a_term() {
    init_logging();
    let mut server = TestingServer::start().unwrap();
    let path = "/election/suspended";
    let c = Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(30))
        .connection_timeout(Duration::from_secs(30))
        .error_policy(ErrorPolicy::Standard)
        .connect()
        .unwrap();
    let (term_tx, terms) = crossbeam_channel::unbounded();
    let calls = Arc::new(AtomicUsize::new(0));
    let n = calls.clone();
    let selector = LeaderSelector::builder(&c, path)
        .auto_requeue(true)
        .build(move |leadership| {
            match n.fetch_add(1, Ordering::SeqCst) {
                // The first term panics: it ends, and auto-requeue takes part again.
                0 => panic!("a leader's bug"),
                // The second leads until cancelled.
                1 => {
                    term_tx.send("leading").unwrap();
                    while !leadership.wait_cancelled(Duration::from_millis(100)) {}
                    term_tx.send("cancelled").unwrap();
                }
                _ => term_tx.send("again").unwrap(),
            }
            Ok(())
        })
        .unwrap();
    selector.start().unwrap();
    assert_eq!(terms.recv_timeout(patience()).unwrap(), "leading");
    server.restart().unwrap();
    assert_eq!(terms.recv_timeout(patience()).unwrap(), "cancelled");
    // Leads again once reconnected.
    assert_eq!(terms.recv_timeout(patience()).unwrap(), "again");
    selector.close();
    assert!(selector.close_timeout(patience()));
}

#[test]
fn elect_runs_the_closure_as_leader_on_the_calling_thread() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let path = "/election/elect";
    let a = client(&server.connect_string(), Duration::from_secs(30));
    let b = client(&server.connect_string(), Duration::from_secs(30));
    let (inside_tx, inside) = crossbeam_channel::unbounded();
    let (leave_tx, leave) = crossbeam_channel::unbounded::<()>();
    let first = thread::spawn(move || {
        zklock::zookeeper::elect(&a, path, "a", |l| {
            inside_tx.send(l.fencing_token()).unwrap();
            leave.recv().unwrap();
            l.fencing_token()
        })
        .unwrap()
    });
    let first_epoch = inside.recv_timeout(patience()).unwrap();
    let b2 = b.clone();
    let second =
        thread::spawn(move || zklock::zookeeper::elect(&b2, path, "b", |l| l.fencing_token()));
    wait_for("b to queue", || {
        b.children(path).map(|c| c.len() == 2).unwrap_or(false)
    });
    assert!(!second.is_finished());
    leave_tx.send(()).unwrap();
    assert_eq!(first.join().unwrap(), first_epoch);
    let second_epoch = second.join().unwrap().unwrap();
    assert!(second_epoch > first_epoch);
    assert_clean(|| server.four_letter("wchc").unwrap(), &b, path);
}
