//! `mem://`'s mutex beside `parking_lot::Mutex`, the in-process floor, in the same run: what
//! the contract (fairness, re-entrancy per thread, health, fencing tokens, metrics, the
//! shared store) costs over a bare lock.
//!
//! ```sh
//! cargo bench --bench mem
//! cargo bench --bench mem -- --secs=5
//! ```
//!
//! * **Uncontended**: one thread acquires and releases, again and again; each pair is timed
//!   alone (`Instant::now()` around it: the clock's own cost, some tens of nanoseconds, is in
//!   both columns alike). Percentiles of the pair's latency.
//! * **Contended**: 2 or 8 threads, each with its own Client (`mem://`) or sharing the lock
//!   (`parking_lot`), acquire and release in a loop for `--secs` (default 2) per row. An
//!   acquisition is a hand-off when its thread is not the previous holder's: a fair lock hands
//!   off every time, a barging one lets the thread that just released take it again.
//!
//! Without `--bench` (as `cargo test` runs it) it makes a short pass whose figures mean
//! nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use zklock::mem::{MemClient, MemMutex};

/// What each row measures.
struct Plan {
    pairs: u64,
    secs: Duration,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let secs = args
        .iter()
        .find_map(|a| a.strip_prefix("--secs="))
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let plan = if bench {
        Plan {
            pairs: 1_000_000,
            secs: Duration::from_secs_f64(secs),
        }
    } else {
        Plan {
            pairs: 1_000,
            secs: Duration::from_millis(50),
        }
    };
    println!("uncontended acquire + release, {} pairs, ns", plan.pairs);
    println!(
        "{:<20} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "", "p50", "p90", "p99", "p99.9", "max"
    );
    let client = MemClient::isolated();
    let mutex = MemMutex::new(&client, "bench").unwrap();
    row(
        "mem:// MemMutex",
        &uncontended(plan.pairs, || {
            mutex.acquire().unwrap();
            mutex.release().unwrap();
        }),
    );
    let floor = parking_lot::Mutex::new(0u64);
    row(
        "parking_lot::Mutex",
        &uncontended(plan.pairs, || {
            *floor.lock() += 1;
        }),
    );
    println!();
    println!("contended, {:?} per row", plan.secs);
    println!(
        "{:<20} {:>8} {:>14} {:>14} {:>10}",
        "", "threads", "acquired/s", "hand-offs/s", "hand-off %"
    );
    for threads in [2, 8] {
        let store = MemClient::isolated();
        let name = store.store_name().to_owned();
        contended("mem:// MemMutex", threads, plan.secs, move |_| {
            let client = MemClient::connect(&name).unwrap();
            let mutex = MemMutex::new(&client, "bench").unwrap();
            Box::new(move |section: &dyn Fn()| {
                mutex.acquire().unwrap();
                section();
                mutex.release().unwrap();
            })
        });
        let floor = Arc::new(parking_lot::Mutex::new(()));
        contended("parking_lot::Mutex", threads, plan.secs, move |_| {
            let floor = floor.clone();
            Box::new(move |section: &dyn Fn()| {
                let _g = floor.lock();
                section();
            })
        });
    }
}

/// The latency of `pairs` calls of `pair`, in nanoseconds (after a warm-up of a tenth).
fn uncontended(pairs: u64, mut pair: impl FnMut()) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new(3).unwrap();
    for _ in 0..pairs / 10 {
        pair();
    }
    for _ in 0..pairs {
        let t = Instant::now();
        pair();
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        h.record(ns.max(1)).unwrap();
    }
    h
}

fn row(name: &str, h: &Histogram<u64>) {
    println!(
        "{name:<20} {:>8} {:>8} {:>8} {:>8} {:>8}",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max()
    );
}

/// One contender's loop body: acquire, run the section, release.
type Turn = Box<dyn FnMut(&dyn Fn()) + Send>;

/// `threads` contenders, each made by `make(i)`, for `secs`: acquisitions and hand-offs.
fn contended(name: &str, threads: usize, secs: Duration, make: impl Fn(usize) -> Turn) {
    let stop = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicUsize::new(usize::MAX));
    let acquired = Arc::new(AtomicU64::new(0));
    let handoffs = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let mut turn = make(i);
            let (stop, last, acquired, handoffs, start) = (
                stop.clone(),
                last.clone(),
                acquired.clone(),
                handoffs.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    turn(&|| {
                        acquired.fetch_add(1, Ordering::Relaxed);
                        if last.swap(i, Ordering::Relaxed) != i {
                            handoffs.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            })
        })
        .collect();
    start.wait();
    let t = Instant::now();
    thread::sleep(secs);
    stop.store(true, Ordering::Relaxed);
    let (a, h) = (
        acquired.load(Ordering::Relaxed),
        handoffs.load(Ordering::Relaxed),
    );
    let took = t.elapsed().as_secs_f64();
    workers.into_iter().for_each(|w| w.join().unwrap());
    println!(
        "{name:<20} {threads:>8} {:>14.0} {:>14.0} {:>9.1}%",
        a as f64 / took,
        h as f64 / took,
        100.0 * h as f64 / (a.max(1)) as f64
    );
}
