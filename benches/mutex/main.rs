//! InterProcessMutex against a real ZooKeeper, beside the floor of its wire client: uncontended
//! latency, contended handoffs/s, and the drain of a queue of waiters (which must stay flat per
//! handoff as the queue grows) — each with what it cost the server and the client.
//!
//! ```sh
//! cargo bench --features testing --bench mutex
//! cargo bench --features testing --bench mutex -- --with-curator     # + Curator 5, same loads
//! ZK_CONNECT=host:port cargo bench --features testing --bench mutex   # your own server
//! cargo bench --features testing --bench mutex -- --only=contended --contended-secs=20
//! ```
//!
//! `--only=` takes a comma-separated list of `uncontended`, `contended`, `drain`.
//! `--rounds=N` runs the uncontended and contended cases N times on each server and ends with
//! the median and range of every ratio over the rounds (each ratio is taken within one round,
//! where floor, zklock and Curator ran back to back).
//!
//! The floor (`floor.rs`) is the lock protocol on `zookeeper-client` directly, one thread per
//! session driving both the wire client and the protocol: what any lock on this wire client
//! costs at least. The socket floor (`socket.rs`, uncontended and contended) is the same
//! protocol on blocking sockets with hand-encoded requests and no wire library: what the kernel
//! and the server cost the client, below which no client can go on the machine at hand; its
//! threaded variant adds a reader thread per session, as any client that keeps its session alive
//! needs. `--with-curator` runs Curator's `InterProcessMutex`
//! (`benches/java/CuratorBench.java`, Debian's `libcurator-recipes-java` and a JDK) beside each
//! contended and drain row, on the same server in the same run, and prints the ratios.
//!
//! Plain `fn main` (harness = false): one run, prints tables. Server-side counters come from
//! the four-letter word `mntr` (deltas of `zk_packets_received`, of the read and write request
//! counts and of the log fsyncs; they include the few pings of the bench's Clients) and, for a
//! TestingServer, from the JVM's `/proc/<pid>/io` (`wchar`: bytes the server wrote, i.e. its
//! responses and watch events plus its transaction log), which shows whether each handoff
//! re-reads the whole queue. Client CPU is this process's (`CLOCK_PROCESS_CPUTIME_ID`, every
//! thread), and the calling threads' own share (`CLOCK_THREAD_CPUTIME_ID`): the rest is the
//! Clients' I/O and watcher threads.
//!
//! `cargo test` runs this bench once too, as a short pass (it keeps the bench working; its
//! figures mean nothing).

mod contended;
mod counters;
mod curator;
#[path = "../common/curator_jvm.rs"]
mod curator_jvm;
mod drain;
mod floor;
mod report;
mod socket;
mod uncontended;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use zklock::testing::TestingServer;
use zklock::{Client, CreateMode, InterProcessMutex};

use contended::*;
use counters::{thread_cpu, PerOp, Zk, COUNTER_HEAD};
use curator::Curator;
use drain::*;
use report::*;
use uncontended::*;

const COMMAND: &str = "cargo bench --features testing --bench mutex";
const CONTENDERS: [usize; 2] = [2, 8];
const DRAIN_CLIENTS: usize = 10;
const WAITER_STACK: usize = 64 * 1024;
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// Gives up on a phase that makes no progress for this long (the bench must never hang).
const STALL: Duration = Duration::from_secs(60);

type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How much of each case runs: all of it under `cargo bench`, a short pass under `cargo test`.
struct Plan {
    /// The short pass of `cargo test`, whose figures mean nothing.
    short: bool,
    warmup: usize,
    iterations: usize,
    contended: Duration,
    queues: &'static [usize],
    drain_runs: usize,
}

const FULL: Plan = Plan {
    short: false,
    warmup: 100,
    iterations: 500,
    contended: Duration::from_secs(5),
    queues: &[20, 100, 1000],
    drain_runs: 3,
};

const SHORT: Plan = Plan {
    short: true,
    warmup: 10,
    iterations: 50,
    contended: Duration::from_millis(500),
    queues: &[20, 100],
    drain_runs: 1,
};

fn main() {
    if let Err(e) = run() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

/// The value of the command-line argument `prefix<value>`.
fn arg(prefix: &str) -> Option<String> {
    std::env::args().find_map(|a| a.strip_prefix(prefix).map(str::to_owned))
}

fn run() -> Res<()> {
    // `cargo bench` passes --bench; `cargo test` does not.
    let mut plan = if std::env::args().any(|a| a == "--bench") {
        FULL
    } else {
        SHORT
    };
    if let Some(secs) = arg("--contended-secs=") {
        plan.contended = Duration::from_secs_f64(secs.parse()?);
    }
    let plan = &plan;
    let nproc = thread::available_parallelism().map_or(0, |n| n.get());
    let zk = match std::env::var("ZK_CONNECT") {
        Ok(connect) if !connect.is_empty() => Zk {
            server: None,
            connect,
        },
        _ => {
            let started = Instant::now();
            let server = TestingServer::start()?;
            eprintln!("TestingServer up in {:.1?}", started.elapsed());
            Zk {
                connect: server.connect_string(),
                server: Some(server),
            }
        }
    };
    let version = zk
        .four_letter("srvr")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Zookeeper version: ").map(str::to_owned))
        })
        .unwrap_or_else(|| "unknown".into());
    let root = format!(
        "/zklock-bench-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );

    println!("# zklock InterProcessMutex bench");
    println!("# command:   {COMMAND}");
    if plan.short {
        println!("# SHORT PASS (run by cargo test): the figures below mean nothing");
    }
    println!(
        "# machine:   nproc={nproc}, {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    println!(
        "# zookeeper: {} at {} (version {version}), session timeout {:?}",
        if zk.server.is_some() {
            "TestingServer (standalone, loopback, forceSync=no)"
        } else {
            "ZK_CONNECT"
        },
        zk.connect,
        SESSION_TIMEOUT
    );
    println!("# counters per op (per handoff in 2 and 3): packets received, read and write requests and log fsyncs (mntr), bytes written by the server JVM (/proc/<pid>/io wchar), this process's CPU (every thread) and the calling threads' own CPU");
    println!();

    let bench_start = Instant::now();
    let curator = if std::env::args().any(|a| a == "--with-curator") {
        Some(Curator::compile()?)
    } else {
        None
    };
    let curator = curator.as_ref();
    let only = arg("--only=");
    let case = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|c| c == name))
    };
    let rounds: usize = arg("--rounds=").map_or(Ok(1), |r| r.parse())?;
    for round in 1..=rounds {
        if rounds > 1 {
            println!("# round {round} of {rounds}");
        }
        if case("uncontended") {
            uncontended(&zk, &root, "", plan)?;
        }
        if case("contended") {
            contended(&zk, &root, "", plan, curator)?;
        }
    }
    // Waiters that release at once, then waiters that hold for a millisecond (longer than a
    // round trip, so each can see that the one ahead of it holds).
    if case("drain") {
        drain(&zk, &root, "", Duration::ZERO, plan, curator)?;
        drain(&zk, &root, "", Duration::from_millis(1), plan, curator)?;
    }
    // The same on a server that fsyncs every transaction, as in production.
    if zk.server.is_some() {
        let durable = TestingServer::start_durable()?;
        let zk = Zk {
            connect: durable.connect_string(),
            server: Some(durable),
        };
        let label = " (forceSync=yes)";
        for round in 1..=rounds {
            if rounds > 1 {
                println!("# round {round} of {rounds}");
            }
            if case("uncontended") {
                uncontended(&zk, &root, label, plan)?;
            }
            if case("contended") {
                contended(&zk, &root, label, plan, curator)?;
            }
        }
        if case("drain") {
            drain(&zk, &root, label, Duration::from_millis(1), plan, curator)?;
        }
    }
    if rounds > 1 {
        print_ratios(rounds);
    }
    println!();
    println!("# total bench time {:.1?}", bench_start.elapsed());
    Ok(())
}
