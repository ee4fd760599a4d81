//! A program that simply returns from `main` leaves no lock behind: the guard's drop deletes
//! the node in the caller, and dropping the last Client closes its session (every ephemeral
//! node goes at once). Each program runs as its own process (this test binary run again as a
//! worker), because what is checked is what survives the process's end.

mod common;

use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::worker::{say, Worker};
use common::{patience, wait_for};
use zklock::testing::{FaultProxy, TestingServer};
use zklock::{Client, CreateMode, InterProcessMutex, InterProcessSemaphoreV2, LeaderLatch};

const WORKER: &str = "ZKLOCK_EXIT_WORKER";
const LOCK: &str = "/exit/lock";
const NODE: &str = "/exit-node";
const LATCH: &str = "/exit/latch";
const SEMAPHORE: &str = "/exit/semaphore";

/// Milliseconds since the epoch: the clock both processes read.
fn unix_ms() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i128
}

/// The program a new user writes first: guard, mutex and Client dropped at the end of `main`
/// (in that order), nothing else.
fn idiomatic(connect: &str) -> zklock::Result<()> {
    let client = Client::connect(connect)?;
    let mutex = InterProcessMutex::new(&client, LOCK)?;
    let _guard = mutex.lock()?;
    say(&format!("held {}", unix_ms()));
    thread::sleep(Duration::from_millis(300)); // work()
    Ok(())
}

/// Only a Client and an ephemeral node: nothing but the session's close can free the node.
fn ephemeral(connect: &str) -> zklock::Result<()> {
    let client = Client::connect(connect)?;
    client.create(NODE).mode(CreateMode::Ephemeral).call()?;
    say("created");
    Ok(())
}

/// The Client dropped first: the mutex (and the guard borrowing it) keep the last handle, and
/// it still must not keep the session past the end of `main`.
fn client_dropped_first(connect: &str) -> zklock::Result<()> {
    let mutex = {
        let client = Client::connect(connect)?;
        client.create(NODE).mode(CreateMode::Ephemeral).call()?;
        InterProcessMutex::new(&client, LOCK)?
    };
    let _guard = mutex.lock()?;
    say(&format!("held {}", unix_ms()));
    Ok(())
}

/// A leader latch that leads, then `main` returns: the latch's node must go with the process.
fn latch(connect: &str) -> zklock::Result<()> {
    let client = Client::connect(connect)?;
    client.create(NODE).mode(CreateMode::Ephemeral).call()?;
    let latch = LeaderLatch::new(&client, LATCH)?;
    latch.start()?;
    latch.await_leadership()?;
    say("held");
    Ok(())
}

/// Not a test: the worker process's body, run when [`WORKER`] is set. The process ends as the
/// program returns, as it does at the end of `main` (`process::exit` is what `main`'s return
/// comes to: the standard output flushed, every other thread gone with the process), not after
/// the test harness's own epilogue.
#[test]
fn exit_worker() {
    let Ok(args) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let (program, connect) = args.split_once(' ').unwrap();
    let outcome = match program {
        "idiomatic" => idiomatic(connect),
        "ephemeral" => ephemeral(connect),
        "client-dropped-first" => client_dropped_first(connect),
        "latch" => latch(connect),
        other => panic!("no program {other}"),
    };
    std::process::exit(match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("the program failed: {e}");
            1
        }
    });
}

fn run(program: &str, server: &TestingServer) -> Worker {
    Worker::start(
        "exit_worker",
        WORKER,
        &format!("{program} {}", server.connect_string()),
    )
}

/// Waits for the worker's exit; returns when it was seen, in [`unix_ms`].
fn exited(mut worker: Worker) -> i128 {
    let status = worker.child.wait().unwrap();
    let at = unix_ms();
    assert!(status.success(), "the worker failed: {status}");
    at
}

fn bound() -> i128 {
    5_000 * common::timing() as i128
}

#[test]
fn the_idiomatic_program_run_twice_in_a_row_frees_the_lock_at_exit() {
    let server = TestingServer::start().unwrap();
    let first = run("idiomatic", &server);
    first.expect("held");
    let first_exit = exited(first);
    let second = run("idiomatic", &server);
    let held: i128 = second.expect("held").parse().unwrap();
    let gap = held - first_exit;
    println!("the second run held the lock {gap} ms after the first exited");
    exited(second);
    assert!(gap < bound(), "{gap} ms");

    // A second run already waiting while the first holds: it gets the lock as the first
    // ends (before the process is gone, since the guard's drop deletes the node).
    let first = run("idiomatic", &server);
    first.expect("held");
    let waiting = run("idiomatic", &server);
    let first_exit = exited(first);
    let held: i128 = waiting.expect("held").parse().unwrap();
    let gap = held - first_exit;
    println!("a waiting run held the lock {gap} ms after the holder exited");
    exited(waiting);
    assert!(gap < bound(), "{gap} ms");
}

#[test]
fn returning_from_main_closes_the_session() {
    let server = TestingServer::start().unwrap();
    let observer = common::client(&server.connect_string(), Duration::from_secs(20));
    for program in ["ephemeral", "client-dropped-first", "latch"] {
        let worker = run(program, &server);
        worker.expect(if program == "ephemeral" {
            "created"
        } else {
            "held"
        });
        let exit = exited(worker);
        wait_for("the worker's ephemeral node to go", || {
            observer.exists(NODE).unwrap().is_none()
        });
        let gap = unix_ms() - exit;
        println!("{program}: its session's ephemeral node was gone {gap} ms after exit");
        assert!(gap < bound(), "{program}: {gap} ms");
        assert!(observer.children(LOCK).unwrap_or_default().is_empty());
        assert!(observer.children(LATCH).unwrap_or_default().is_empty());
    }
}

/// Rounds of `drop(guard)` by `holder`, then at once `try_lock()` by `taker`: how many were
/// granted.
fn drop_then_try_lock(holder: &Client, taker: &Client) -> usize {
    let mine = InterProcessMutex::new(holder, LOCK).unwrap();
    let theirs = InterProcessMutex::new(taker, LOCK).unwrap();
    let mut granted = 0;
    for _ in 0..20 {
        let guard = mine.lock().unwrap();
        drop(guard);
        if let Some(g) = theirs.try_lock().unwrap() {
            granted += 1;
            g.release().unwrap();
        }
    }
    granted
}

#[test]
fn drop_then_try_lock_from_another_client_is_granted_20_of_20() {
    let server = TestingServer::start().unwrap();
    let taker = common::client(&server.connect_string(), Duration::from_secs(20));
    let holder = common::client(&server.connect_string(), Duration::from_secs(20));
    let granted = drop_then_try_lock(&holder, &taker);
    println!("same link: granted {granted} of 20");
    assert_eq!(granted, 20);

    // The holder on a slower link than the taker (a delete handed to the background reaches
    // the server after the taker's try_lock has looked).
    let proxy = FaultProxy::for_server(&server).unwrap();
    let holder = common::client(&proxy.connect_string(), Duration::from_secs(20));
    proxy.delay(Duration::from_millis(30));
    let granted = drop_then_try_lock(&holder, &taker);
    println!("holder's link 30 ms slower: granted {granted} of 20");
    assert_eq!(granted, 20);

    // A semaphore's lease, dropped the same way.
    let mine = InterProcessSemaphoreV2::new(&holder, SEMAPHORE, 1).unwrap();
    let theirs = InterProcessSemaphoreV2::new(&taker, SEMAPHORE, 1).unwrap();
    let mut granted = 0;
    for _ in 0..20 {
        drop(mine.acquire().unwrap());
        if let Some(lease) = theirs.try_acquire().unwrap() {
            granted += 1;
            lease.return_lease().unwrap();
        }
    }
    println!("a lease, holder's link 30 ms slower: granted {granted} of 20");
    assert_eq!(granted, 20);
    holder.close();
}

#[test]
fn drops_in_an_outage_return_within_their_bound_and_the_rest_goes_on_later() {
    let server = TestingServer::start().unwrap();
    let observer = common::client(&server.connect_string(), Duration::from_secs(30));
    let client = common::client(&server.connect_string(), Duration::from_secs(30));
    let mutex = InterProcessMutex::new(&client, LOCK).unwrap();
    let guard = mutex.lock().unwrap();
    let node = mutex.lock_node().unwrap();
    let other = common::client(&server.connect_string(), Duration::from_secs(30));

    server.pause().unwrap();
    let started = Instant::now();
    drop(guard);
    let guard_drop = started.elapsed();
    println!("a guard's drop with the server frozen took {guard_drop:?}");

    // The last handle of a Client with the server frozen.
    let started = Instant::now();
    drop(other);
    let client_drop = started.elapsed();
    println!("the last Client handle's drop with the server frozen took {client_drop:?}");
    server.resume().unwrap();

    let limit = Duration::from_secs(3) * common::timing();
    assert!(guard_drop < limit, "{guard_drop:?}");
    assert!(client_drop < limit, "{client_drop:?}");
    // The delete the drop could not finish went to the background, which finishes it.
    let started = Instant::now();
    wait_for("the background delete", || {
        observer.exists(&node).unwrap().is_none()
    });
    println!(
        "the background deleted the node {:?} after the resume",
        started.elapsed()
    );
    assert!(started.elapsed() < patience());
    // And the lock is free.
    let other = InterProcessMutex::new(&observer, LOCK).unwrap();
    assert!(other.try_lock().unwrap().is_some());
}
