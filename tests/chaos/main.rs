//! The chaos suite: worker processes contend for zklock's mutex, read-write lock, semaphore
//! and kazoo-layout mutex and take turns leading an election (`LeaderSelector`), with Curator
//! JVMs on the mutex and the election and kazoo (Python) workers on the kazoo-layout mutex,
//! on a 3-node ensemble, writing with their fencing tokens to a [`FencedRegister`] per lock,
//! while faults hit the ensemble, the network (through a [`FaultProxy`] per member) and the
//! workers themselves. After each fault every worker
//! stops, and the run checks the registers' logs (overlaps, stale writes), the paused holders'
//! late writes, the lock paths (orphans, duplicate protected nodes) and the servers' watches.
//!
//! * `ci_chaos_schedule` runs a short fixed schedule in the normal test suite.
//! * `ci_ensemble_schedule` runs the ensemble faults (`ensemble.rs`: rolling restarts with the
//!   leader last and first, a reconfiguration that replaces three members) on 3 members, with no
//!   session lost allowed; `ensemble_chaos_run` (ignored, `scripts/chaos.sh`) on 5.
//! * `randomized_chaos_run` (ignored) draws faults at random for `ZKLOCK_CHAOS_MINUTES` with
//!   the seed `ZKLOCK_CHAOS_SEED` (printed, so a run can be replayed), prints the Markdown
//!   report (also written to `ZKLOCK_CHAOS_REPORT` if set) and fails on any violation:
//!   `scripts/chaos.sh` runs it.
//!
//! The zklock workers are this test binary run again (`chaos_worker`), one thread and one
//! Client per slot, driven over stdin (`stop`) and reporting on stdout lines marked `chaos: `.
//! The Curator workers are `tests/java/CuratorChaosWorker.java` (an `InterProcessMutex`, or a
//! `LeaderSelector` in its `leader` mode). The kazoo workers are
//! `tests/python/kazoo_chaos_worker.py` (kazoo's `Lock`). Needs ZooKeeper, a JDK, Debian's
//! Curator jars (see `tests/common/java.rs`) and Debian's python3-kazoo.

#[path = "../common/mod.rs"]
mod common;
mod ensemble;
mod faults;
mod kazoo;
mod lab;
mod procs;
mod report;
mod stall;
mod worker;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::java::{Java, JavaProc, JavaProgram};
use common::*;
use zklock::testing::{
    FaultProxy, FenceClient, FenceEvent, FenceEventKind, FenceReport, FencedRegister,
    TestingCluster, WriteOutcome,
};
use zklock::{
    Client, ConnectionState, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2,
    LeaderSelector, LockHealth,
};

use kazoo::*;
use lab::*;
use procs::*;
use report::*;
use worker::*;

/// A zklock worker process: this binary run again with `--exact chaos_worker` (a no-op in a
/// normal test run).
#[test]
fn chaos_worker() {
    worker::run();
}

fn run_schedule(
    plan: Plan,
    seed: u64,
    next: impl FnMut(&mut fastrand::Rng, usize) -> Option<Fault>,
) -> (Vec<Row>, Duration) {
    let mut next = next;
    let started = Instant::now();
    let mut lab = Lab::start(plan, seed);
    let mut rows = Vec::new();
    while let Some(fault) = next(&mut lab.rng, rows.len()) {
        rows.push(lab.run_and_tell(fault, rows.len() + 1));
    }
    (rows, started.elapsed())
}

/// The short fixed schedule of the normal test suite.
#[test]
fn ci_chaos_schedule() {
    init_logging();
    let plan = Plan {
        session: Duration::from_secs(4),
        zklock_workers: 3,
        curator_workers: 1,
        curator_leaders: 1,
        kazoo_workers: 1,
        burst: 20,
    };
    let schedule = [
        Fault::PauseHolder { curator: false },
        Fault::PauseHolder { curator: true },
        Fault::KillHolder,
        Fault::LostCreateReply,
        Fault::CutOff,
        Fault::LeaderKill,
        Fault::PauseKazooHolder,
    ];
    let (rows, took) = run_schedule(plan, 10, |_, i| schedule.get(i).copied());
    let text = report(
        &rows,
        &format!(
            "CI chaos schedule: {} faults in {:.0} s, session {:?}, {} zklock workers x (3 locks + leader + kazoo-layout mutex) + {} Curator mutex + {} Curator leader + {} kazoo",
            rows.len(),
            took.as_secs_f64(),
            plan.session,
            plan.zklock_workers,
            plan.curator_workers,
            plan.curator_leaders,
            plan.kazoo_workers
        ),
    );
    eprintln!("{text}");
    assert!(
        rows.iter().all(|r| r.violations.is_empty()),
        "violations:\n{text}"
    );
}

/// The ensemble faults in the normal test suite: a 3-member ensemble restarted in turn with
/// the leader last, then with the leader first, then reconfigured (two members added, the
/// original three removed and stopped); 10 s sessions, and no session may be lost.
#[test]
fn ci_ensemble_schedule() {
    init_logging();
    let plan = Plan {
        session: Duration::from_secs(10),
        zklock_workers: 3,
        curator_workers: 1,
        curator_leaders: 0,
        kazoo_workers: 0,
        burst: 0,
    };
    ensemble::run_ensemble_schedule(plan, 3, &Fault::ENSEMBLE, "CI ensemble schedule");
}

/// `scripts/chaos.sh`: the ensemble faults on `ZKLOCK_CHAOS_MEMBERS` members (default 5):
/// `ZKLOCK_CHAOS_ROUNDS` (default 2) rolling restarts each with the leader last and first,
/// then the reconfiguration.
#[test]
#[ignore = "long: run by scripts/chaos.sh"]
fn ensemble_chaos_run() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
    let env = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let members = env("ZKLOCK_CHAOS_MEMBERS", 5).max(3);
    let rounds = env("ZKLOCK_CHAOS_ROUNDS", 2).max(1);
    let plan = Plan {
        session: Duration::from_secs(10),
        zklock_workers: 3,
        curator_workers: 1,
        curator_leaders: 1,
        kazoo_workers: 0,
        burst: 0,
    };
    let mut faults: Vec<Fault> = (0..rounds)
        .flat_map(|_| Fault::ENSEMBLE[..2].to_vec())
        .collect();
    faults.push(Fault::Reconfigure);
    ensemble::run_ensemble_schedule(plan, members, &faults, "Ensemble chaos run");
}

/// `scripts/chaos.sh`: faults drawn at random for `ZKLOCK_CHAOS_MINUTES` (default 10) with
/// seed `ZKLOCK_CHAOS_SEED` (default: from the clock, printed).
#[test]
#[ignore = "long: run by scripts/chaos.sh"]
fn randomized_chaos_run() {
    // Warnings only (RUST_LOG overrides): the run prints its report with --nocapture.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
    let minutes: f64 = std::env::var("ZKLOCK_CHAOS_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(10.0);
    let seed: u64 = std::env::var("ZKLOCK_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1)
        });
    let session_ms: u64 = std::env::var("ZKLOCK_CHAOS_SESSION_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4000);
    eprintln!("chaos: seed {seed}, {minutes} minutes (replay: scripts/chaos.sh --minutes {minutes} --seed {seed})");
    let plan = Plan {
        session: Duration::from_millis(session_ms),
        zklock_workers: 3,
        curator_workers: 2,
        curator_leaders: 1,
        kazoo_workers: 2,
        burst: 50,
    };
    let budget = Duration::from_secs_f64(minutes * 60.0);
    let started = Instant::now();
    // ZKLOCK_CHAOS_SCHEDULE=1,3,3: a fixed list of faults (indices into Fault::ALL) instead.
    let fixed: Option<Vec<Fault>> = std::env::var("ZKLOCK_CHAOS_SCHEDULE").ok().map(|s| {
        s.split(',')
            .map(|i| Fault::ALL[i.trim().parse::<usize>().expect("a fault index")])
            .collect()
    });
    let (rows, took) = run_schedule(plan, seed, |rng, i| match &fixed {
        Some(list) => list.get(i).copied(),
        None => (started.elapsed() < budget).then(|| Fault::ALL[rng.usize(..Fault::ALL.len())]),
    });
    let text = report(
        &rows,
        &format!(
            "Randomized chaos run: seed {seed}, {} faults in {:.1} min, session {:?}, {} zklock \
             workers (mutex + read-write + semaphore + leader selector + kazoo-layout mutex \
             each) + {} Curator workers on the mutex + {} Curator LeaderSelector workers on the \
             election + {} kazoo workers on the kazoo-layout mutex",
            rows.len(),
            took.as_secs_f64() / 60.0,
            plan.session,
            plan.zklock_workers,
            plan.curator_workers,
            plan.curator_leaders,
            plan.kazoo_workers
        ),
    );
    println!("{text}");
    if let Ok(path) = std::env::var("ZKLOCK_CHAOS_REPORT") {
        std::fs::write(&path, &text).expect("write the report");
    }
    let bad = rows.iter().filter(|r| !r.violations.is_empty()).count();
    assert_eq!(bad, 0, "{bad} faults with violations (seed {seed})");
}
