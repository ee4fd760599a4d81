//! Fairness of `InterProcessMutex`: ten contenders, each with its own Client (own session), ask
//! for one lock 300 ms apart. The first holder keeps the lock until all ten have their node, so
//! the whole queue really exists at once; then each holder keeps it about 200 ms. With the
//! standard driver the grant order is the queue order (FIFO, a guarantee: the demo exits
//! non-zero otherwise); with `--unfair` (`UnfairDriver`) it is shuffled, and the demo just reports
//! it. Either way two holders at once (mutual exclusion broken) make the exit code non-zero.
//!
//! Uses `ZK_CONNECT` if set, else starts a throwaway ZooKeeper server.
//!
//! ```sh
//! cargo run --features testing --example fairness              # standard driver: FIFO
//! cargo run --features testing --example fairness -- --unfair  # UnfairDriver: random order
//! ```

use std::collections::HashMap;
use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use zklock::zookeeper::UnfairDriver;
use zklock::{Client, InterProcessMutex};

const THREADS: usize = 10;
const ASK_EVERY: Duration = Duration::from_millis(300);
const HOLD: Duration = Duration::from_millis(200);
const LOCK_PATH: &str = "/zklock-demo/fairness";
/// Bounds every wait, so that the demo cannot hang.
const GIVE_UP: Duration = Duration::from_secs(30);

type BoxError = Box<dyn Error + Send + Sync>;

/// One node of the queue as the first holder saw it once everyone had asked.
struct Queued {
    node: String,
    thread: Option<usize>,
    czxid: i64,
}

struct Shared {
    start: Instant,
    connect: String,
    unfair: bool,
    /// When t0 asks; ti asks `i * ASK_EVERY` later.
    first_ask: Instant,
    /// Threads in the order they were granted the lock.
    grants: Mutex<Vec<usize>>,
    /// Threads holding right now (more than one would break mutual exclusion).
    holding: AtomicUsize,
    overlaps: Mutex<Vec<String>>,
    /// Threads whose node is gone (released).
    released: AtomicUsize,
    /// Each thread's node creation zxid, recorded by the thread while it holds.
    created: Mutex<HashMap<usize, i64>>,
    /// The queue when all had asked, in the lock's own order (holder first).
    snapshot: Mutex<Option<(f64, Vec<Queued>)>>,
}

impl Shared {
    fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn say(&self, msg: impl std::fmt::Display) {
        println!("{:>6.2}s {msg}", self.secs());
    }
}

fn name(node: &str) -> &str {
    node.rsplit('/').next().unwrap_or(node)
}

fn label(thread: Option<usize>) -> String {
    thread.map_or_else(|| "?".to_owned(), |i| format!("t{i}"))
}

fn order(threads: &[usize]) -> String {
    threads
        .iter()
        .map(|&i| format!("t{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn contender(i: usize, sh: Arc<Shared>) -> Result<(), BoxError> {
    let client = Client::builder(&sh.connect)
        .session_timeout(Duration::from_secs(10))
        .connect()?;
    let mutex = if sh.unfair {
        InterProcessMutex::with_driver(&client, LOCK_PATH, UnfairDriver)?
    } else {
        InterProcessMutex::new(&client, LOCK_PATH)?
    };
    // The node's data tells the first holder whose node it is.
    mutex.set_node_data(format!("t{i}").as_bytes())?;

    let ask_at = sh.first_ask + ASK_EVERY * i as u32;
    thread::sleep(ask_at.saturating_duration_since(Instant::now()));
    sh.say(format_args!("t{i} asks"));
    if !mutex.acquire_timeout(GIVE_UP)? {
        return Err(format!("t{i} gave up waiting for the lock after {GIVE_UP:?}").into());
    }
    let also_holding = sh.holding.fetch_add(1, Ordering::SeqCst);
    let nth = {
        let mut grants = sh.grants.lock().unwrap();
        grants.push(i);
        grants.len()
    };
    let node = mutex.lock_node().expect("held by this thread");
    let czxid = client.data(&node)?.1.czxid;
    sh.created.lock().unwrap().insert(i, czxid);
    sh.say(format_args!("t{i} holds     ({})", name(&node)));
    if also_holding > 0 {
        let msg = format!("t{i} was granted while {also_holding} other holder(s) held the lock");
        sh.say(format_args!("!! {msg}"));
        sh.overlaps.lock().unwrap().push(msg);
    }

    if nth == 1 {
        wait_for_full_queue(i, &sh, &client, &mutex)?;
    } else {
        thread::sleep(HOLD);
    }

    sh.holding.fetch_sub(1, Ordering::SeqCst);
    sh.say(format_args!("t{i} releases"));
    mutex.release()?;
    sh.released.fetch_add(1, Ordering::SeqCst);
    client.close();
    Ok(())
}

/// The first holder keeps the lock until every thread has asked: each thread has one node from
/// asking until releasing, so all have asked once `released + nodes == THREADS` (normally: ten
/// nodes). Then it records the queue, mapping nodes to threads by their data.
fn wait_for_full_queue(
    i: usize,
    sh: &Shared,
    client: &Client,
    mutex: &InterProcessMutex,
) -> Result<(), BoxError> {
    sh.say(format_args!(
        "t{i} keeps the lock until all {THREADS} are queued"
    ));
    let deadline = Instant::now() + GIVE_UP;
    let nodes = loop {
        // `released` first: a release in between is then counted nowhere, never twice.
        let released = sh.released.load(Ordering::SeqCst);
        let nodes = mutex.participant_nodes()?;
        if nodes.len() + released >= THREADS {
            break nodes;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {THREADS} queued after {GIVE_UP:?}",
                nodes.len() + released
            )
            .into());
        }
        thread::sleep(Duration::from_millis(20));
    };
    let at = sh.secs();
    let mut queued = Vec::new();
    for node in nodes {
        match client.data(&node) {
            Ok((data, stat)) => {
                let thread = std::str::from_utf8(&data)
                    .ok()
                    .and_then(|s| s.strip_prefix('t'))
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|&n| n < THREADS);
                queued.push(Queued {
                    node,
                    thread,
                    czxid: stat.czxid,
                });
            }
            Err(zklock::Error::NoNode(_)) => {} // released meanwhile (only an unfair overtaker)
            Err(e) => return Err(e.into()),
        }
    }
    sh.say(format_args!(
        "all {THREADS} queued ({} nodes under {LOCK_PATH})",
        queued.len()
    ));
    *sh.snapshot.lock().unwrap() = Some((at, queued));
    Ok(())
}

fn run(unfair: bool, start: Instant) -> Result<bool, BoxError> {
    let stamp = || format!("{:>6.2}s", start.elapsed().as_secs_f64());
    if std::env::var("ZK_CONNECT").is_err() {
        println!("{} starting a throwaway ZooKeeper server…", stamp());
    }
    let (connect, server) = zklock::testing::connect_string_or_start()?;
    let driver = if unfair {
        "UnfairDriver (--unfair)"
    } else {
        "standard driver (fair)"
    };
    println!(
        "{} ZooKeeper at {connect}; lock {LOCK_PATH}, {driver}; {THREADS} threads, one session each",
        stamp()
    );

    let sh = Arc::new(Shared {
        start,
        connect,
        unfair,
        // Leave the threads time to connect before t0 asks.
        first_ask: Instant::now() + Duration::from_millis(500),
        grants: Mutex::new(Vec::new()),
        holding: AtomicUsize::new(0),
        overlaps: Mutex::new(Vec::new()),
        released: AtomicUsize::new(0),
        created: Mutex::new(HashMap::new()),
        snapshot: Mutex::new(None),
    });
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let sh = sh.clone();
            thread::Builder::new()
                .name(format!("t{i}"))
                .spawn(move || contender(i, sh))
        })
        .collect::<Result<_, _>>()?;
    let mut failures = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("t{i}: {e}")),
            Err(_) => failures.push(format!("t{i} panicked")),
        }
    }
    drop(server); // stops the JVM
    if !failures.is_empty() {
        return Err(failures.join("; ").into());
    }

    // Queue order: the order the nodes were created (= the order the threads asked), taken from
    // the snapshot and completed by what holders recorded if the snapshot missed a node.
    let (at, queued) = sh
        .snapshot
        .lock()
        .unwrap()
        .take()
        .ok_or("no queue snapshot")?;
    let mut created = sh.created.lock().unwrap().clone();
    for q in &queued {
        if let Some(t) = q.thread {
            created.insert(t, q.czxid);
        }
    }
    let mut queue: Vec<usize> = created.keys().copied().collect();
    queue.sort_by_key(|t| created[t]);
    let grants = sh.grants.lock().unwrap().clone();
    let overlaps = sh.overlaps.lock().unwrap().clone();
    let fifo = grants == queue;

    println!();
    println!("queue at {at:.2}s, in the lock's order (holder first):");
    for q in &queued {
        println!("  {:<3} {}", label(q.thread), name(&q.node));
    }
    let missing = THREADS - queued.len();
    if missing > 0 {
        println!("  ({missing} node(s) already released: granted out of turn)");
    }
    println!("queue order (node creation): {}", order(&queue));
    println!("grant order:                 {}", order(&grants));
    if !overlaps.is_empty() {
        println!("MUTUAL EXCLUSION VIOLATED {} time(s):", overlaps.len());
        for o in &overlaps {
            println!("  {o}");
        }
    }
    println!("FIFO: {}", if fifo { "yes" } else { "no" });

    if unfair {
        // The unfair driver promises no order, only exclusion.
        return Ok(overlaps.is_empty());
    }
    let all = grants.len() == THREADS && queued.len() == THREADS;
    if !all {
        eprintln!("expected all {THREADS} queued at once and granted");
    }
    Ok(fifo && overlaps.is_empty() && all)
}

fn main() {
    let start = Instant::now();
    let mut unfair = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--unfair" => unfair = true,
            _ => {
                eprintln!("usage: fairness [--unfair]");
                std::process::exit(2);
            }
        }
    }
    let code = match run(unfair, start) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    };
    std::process::exit(code);
}
