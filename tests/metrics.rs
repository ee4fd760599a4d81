//! Metrics (feature `metrics`): a test recorder sees the documented counters, histograms and
//! gauges move as a mutex is taken, waited for, timed out on, held, lost and released.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use zklock::testing::TestingServer;
use zklock::{InterProcessMutex, LockHealth};

/// (name, path label, `to` label) → counter value, gauge value, or histogram sample count.
fn read(snapshotter: &Snapshotter) -> HashMap<(String, String, String), f64> {
    let mut out = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
                .unwrap_or_default()
        };
        let v = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Histogram(samples) => samples.len() as f64,
        };
        *out.entry((key.name().to_owned(), label("path"), label("to")))
            .or_default() += v;
    }
    out
}

#[test]
fn the_documented_metrics_move() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let get = |seen: &HashMap<(String, String, String), f64>, name: &str, to: &str| {
        seen.get(&(name.to_owned(), "/m".to_owned(), to.to_owned()))
            .copied()
            .unwrap_or(0.0)
    };

    let server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    let mutex = Arc::new(InterProcessMutex::new(&client, "/m").unwrap());
    let guard = mutex.lock().unwrap();

    // A second thread times out once, then waits and gets it after the release.
    let (timed_out_tx, timed_out) = crossbeam_channel::bounded(1);
    let waiter = {
        let mutex = mutex.clone();
        thread::spawn(move || {
            assert!(!mutex.acquire_timeout(Duration::from_millis(200)).unwrap());
            timed_out_tx.send(()).unwrap();
            mutex.lock().unwrap().release().unwrap();
        })
    };
    timed_out.recv_timeout(patience()).unwrap();
    // Histograms are drained by each snapshot: add up what each one saw.
    let mut waits = 0.0;
    let mut holds = 0.0;
    wait_for("the waiter counted in zklock_waiters", || {
        let seen = read(&snapshotter);
        waits += get(&seen, "zklock_wait_seconds", "");
        get(&seen, "zklock_waiters", "") == 1.0
    });
    guard.release().unwrap();
    waiter.join().unwrap();

    // A third hold, lost: its node is deleted under it.
    let guard = mutex.lock().unwrap();
    client.delete(&mutex.lock_node().unwrap()).unwrap();
    wait_for("the loss", || guard.health() == LockHealth::Lost);
    drop(guard);

    wait_for("every figure", || {
        let seen = read(&snapshotter);
        waits += get(&seen, "zklock_wait_seconds", "");
        holds += get(&seen, "zklock_hold_seconds", "");
        get(&seen, "zklock_acquisitions_total", "") == 3.0
            && get(&seen, "zklock_acquire_timeouts_total", "") == 1.0
            && get(&seen, "zklock_health_changes_total", "lost") == 1.0
            && get(&seen, "zklock_waiters", "") == 0.0
            && waits >= 3.0
            && holds >= 3.0
            && seen
                .get(&(
                    "zklock_background_deletes_pending".to_owned(),
                    String::new(),
                    String::new(),
                ))
                .copied()
                == Some(0.0)
    });
    client.close();
}
