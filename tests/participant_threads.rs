//! Leader latches and selectors cost no thread each: latches park and lead on the few shared
//! `zklock-elect` threads, and a selector has a thread only while its closure runs. Alone in
//! its test binary, so that the process's threads can be counted; its tests take a lock so
//! that they count one at a time.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::{LeaderLatch, LeaderSelector};

/// One counting test at a time.
static COUNTING: Mutex<()> = Mutex::new(());

/// The shared election threads may number this many (workers and the timer).
const SHARED: usize = 5;

#[test]
fn a_thousand_latches_lead_on_a_few_shared_threads_and_leave_nothing_when_closed() {
    let _one = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    init_logging();
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(30));
    let before = thread_names().len();
    let n = 1000;
    let latches: Vec<LeaderLatch> = (0..n)
        .map(|i| {
            let latch = LeaderLatch::builder(&c, &format!("/many/p{i}"))
                .id(&format!("latch-{i}"))
                .build()
                .unwrap();
            latch.start().unwrap();
            latch
        })
        .collect();
    let mut most = 0;
    wait_for("every latch to lead", || {
        most = most.max(thread_names().len());
        latches.iter().all(LeaderLatch::has_leadership)
    });
    let epochs: Vec<u64> = latches.iter().map(|l| l.epoch().unwrap()).collect();
    assert!(epochs.iter().all(|&e| e > 0));
    assert!(
        most <= before + SHARED,
        "{n} latches took {} threads beyond the Client's {before} (at most {SHARED} expected); \
         now: {} zklock-latch, {} zklock-elect",
        most - before,
        threads_named("zklock-latch"),
        threads_named("zklock-elect"),
    );
    assert_eq!(threads_named("zklock-latch"), 0);
    // Leading, they need no thread either: wait for the workers to go idle and leave.
    wait_for("the shared workers to leave once idle", || {
        threads_named("zklock-elect") <= 1
    });
    for latch in &latches {
        assert!(latch.has_leadership(), "{} stopped leading", latch.id());
    }
    for latch in &latches {
        latch.close().unwrap();
    }
    assert!(latches.iter().all(|l| !l.has_leadership()));
    let wchc = || server.four_letter("wchc").unwrap();
    assert_clean(wchc, &c, "/many");
}

#[test]
fn selectors_run_a_thread_only_while_a_term_runs() {
    let _one = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    init_logging();
    let server = TestingServer::start().unwrap();
    let c = client(&server.connect_string(), Duration::from_secs(30));
    let (n, paths) = (100, 10);
    let running = Arc::new(AtomicUsize::new(0));
    let led = Arc::new(AtomicUsize::new(0));
    // The most `zklock-selector` threads beyond the closures running, as seen from inside them.
    let excess = Arc::new(AtomicUsize::new(0));
    let selectors: Vec<LeaderSelector> = (0..n)
        .map(|i| {
            let (running, led, excess) = (running.clone(), led.clone(), excess.clone());
            let selector = LeaderSelector::builder(&c, &format!("/selectors/p{}", i % paths))
                .id(&format!("selector-{i}"))
                .build(move |_| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    let threads = threads_named("zklock-selector");
                    excess.fetch_max(threads.saturating_sub(now), Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    led.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
            selector.start().unwrap();
            selector
        })
        .collect();
    let mut most_waiting = 0;
    wait_for("every selector to lead once", || {
        if running.load(Ordering::SeqCst) == 0 {
            most_waiting = most_waiting.max(threads_named("zklock-selector"));
        }
        led.load(Ordering::SeqCst) == n
    });
    // A term's thread ends a moment after its closure returns: a few may linger.
    let excess = excess.load(Ordering::SeqCst);
    assert!(
        excess <= paths,
        "{excess} selector threads beyond the closures running"
    );
    assert!(
        most_waiting <= paths,
        "{most_waiting} selector threads while no closure ran"
    );
    wait_for("no selector thread once every term is over", || {
        threads_named("zklock-selector") == 0
    });
    for selector in &selectors {
        assert!(selector.close_timeout(patience()));
    }
    let wchc = || server.four_letter("wchc").unwrap();
    assert_clean(wchc, &c, "/selectors");
}
