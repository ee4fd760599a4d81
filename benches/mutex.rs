//! InterProcessMutex against a real ZooKeeper: uncontended latency beside the raw floor,
//! contended handoffs/s, and the drain time of a queue of waiters (which must stay flat per
//! handoff as the queue grows).
//!
//! ```sh
//! cargo bench --features testing --bench mutex
//! cargo bench --features testing --bench mutex -- --with-curator     # + Curator 5, same load
//! ZK_CONNECT=host:port cargo bench --features testing --bench mutex   # your own server
//! ```
//!
//! `--with-curator` runs Curator's `InterProcessMutex` (`benches/java/CuratorBench.java`,
//! Debian's `libcurator-recipes-java` and a JDK) beside each contended row, on the same server
//! in the same run, and prints the ratio.
//!
//! Plain `fn main` (harness = false): one run, prints a table. Server-side counters come from
//! the four-letter word `mntr` (deltas of `zk_packets_received` and of the read and write
//! request counts; they include the few pings of the bench's Clients) and, for a
//! TestingServer, from the JVM's `/proc/<pid>/io` (`wchar`: bytes the server wrote, i.e. its
//! responses and watch events plus its transaction log), which shows whether each handoff
//! re-reads the whole queue.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use zklock::testing::TestingServer;
use zklock::{Client, CreateMode, InterProcessMutex};

const COMMAND: &str = "cargo bench --features testing --bench mutex";
const WARMUP: usize = 100;
const ITERATIONS: usize = 500;
const CONTENDED_SECS: u64 = 5;
const CONTENDERS: [usize; 2] = [2, 8];
const QUEUES: [usize; 3] = [20, 100, 1000];
const DRAIN_RUNS: usize = 3;
const DRAIN_CLIENTS: usize = 10;
const WAITER_STACK: usize = 64 * 1024;
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// Gives up on a phase that makes no progress for this long (the bench must never hang).
const STALL: Duration = Duration::from_secs(60);

type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Where ZooKeeper is, and how to ask it four-letter words.
struct Zk {
    server: Option<TestingServer>,
    connect: String,
}

impl Zk {
    fn four_letter(&self, cmd: &str) -> Option<String> {
        match &self.server {
            Some(s) => s.four_letter(cmd).ok(),
            None => {
                // First host of ZK_CONNECT (mntr must be whitelisted there).
                let host = self.connect.split(',').next()?.split('/').next()?;
                let mut s = TcpStream::connect(host).ok()?;
                s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
                s.write_all(cmd.as_bytes()).ok()?;
                let mut out = String::new();
                s.read_to_string(&mut out).ok()?;
                Some(out)
            }
        }
    }

    fn mntr(&self) -> Option<Counters> {
        let text = self.four_letter("mntr")?;
        let map: HashMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        let num = |k: &str| map.get(k).and_then(|v| v.parse::<u64>().ok());
        Some(Counters {
            packets: num("zk_packets_received")?,
            reads: num("zk_cnt_readlatency").unwrap_or(0),
            writes: num("zk_cnt_updatelatency").unwrap_or(0),
            fsyncs: num("zk_cnt_fsynctime"),
            out_bytes: self.server_written(),
            client_cpu: client_cpu(),
        })
    }

    /// Bytes the server's JVM has written (`wchar` of `/proc/<pid>/io`), TestingServer only.
    fn server_written(&self) -> Option<u64> {
        let pid = self.server.as_ref()?.pid()?;
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
        io.lines()
            .find_map(|l| l.strip_prefix("wchar:"))
            .and_then(|n| n.trim().parse().ok())
    }

    /// Total watches on the server (`wchs`), if it answers.
    fn watches(&self) -> Option<u64> {
        let text = self.four_letter("wchs")?;
        text.lines()
            .find_map(|l| l.strip_prefix("Total watches:"))
            .and_then(|n| n.trim().parse().ok())
    }

    fn client(&self) -> Res<Client> {
        Ok(Client::builder(&self.connect)
            .session_timeout(SESSION_TIMEOUT)
            .connect()?)
    }
}

/// Server-side counters from `mntr`, and this process's CPU time.
#[derive(Clone, Copy)]
struct Counters {
    packets: u64,
    reads: u64,
    writes: u64,
    /// Transaction-log fsyncs (`zk_cnt_fsynctime`; ZooKeeper counts one per flushed batch,
    /// also with `forceSync=no`, where the flush does not reach the disk).
    fsyncs: Option<u64>,
    out_bytes: Option<u64>,
    /// User + system CPU of the whole bench process (every Client thread included).
    client_cpu: Option<Duration>,
}

/// User + system CPU time of this process, from `/proc/self/stat` (clock ticks of 10 ms).
fn client_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Counters before and after a case, if the server answered `mntr`.
type Deltas = Option<(Counters, Counters)>;

/// Per-operation server counters over `ops` operations, printable.
struct PerOp(Deltas, usize);

impl PerOp {
    /// Server bytes written per op, if known.
    fn bytes(&self) -> Option<f64> {
        let (a, b) = self.0?;
        Some(b.out_bytes?.saturating_sub(a.out_bytes?) as f64 / self.1.max(1) as f64)
    }
}

impl std::fmt::Display for PerOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some((a, b)) = self.0 else {
            return write!(
                f,
                "{:>7} {:>6} {:>6} {:>6} {:>9} {:>8}",
                "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"
            );
        };
        let per = |x: u64, y: u64| (y.saturating_sub(x)) as f64 / self.1.max(1) as f64;
        let bytes = match (a.out_bytes, b.out_bytes) {
            (Some(x), Some(y)) => format!("{:.0}", per(x, y)),
            _ => "n/a".into(),
        };
        let fsyncs = match (a.fsyncs, b.fsyncs) {
            (Some(x), Some(y)) => format!("{:.2}", per(x, y)),
            _ => "n/a".into(),
        };
        let cpu = match (a.client_cpu, b.client_cpu) {
            (Some(x), Some(y)) => format!(
                "{:.3}",
                y.saturating_sub(x).as_secs_f64() * 1e3 / self.1.max(1) as f64
            ),
            _ => "n/a".into(),
        };
        write!(
            f,
            "{:>7.2} {:>6.2} {:>6.2} {fsyncs:>6} {bytes:>9} {cpu:>8}",
            per(a.packets, b.packets),
            per(a.reads, b.reads),
            per(a.writes, b.writes),
        )
    }
}

const COUNTER_HEAD: &str = "pkts/op  reads writes fsyncs srv B/op cpu ms/op";

fn main() {
    if let Err(e) = run() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
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
    println!("# counters per op (per handoff in 2 and 3): packets received, read and write requests and log fsyncs (mntr), bytes written by the server JVM (/proc/<pid>/io wchar), and this process's CPU (all Client threads; /proc/self/stat, 10 ms ticks)");
    println!();

    let bench_start = Instant::now();
    let curator = if std::env::args().any(|a| a == "--with-curator") {
        Some(Curator::compile()?)
    } else {
        None
    };
    uncontended(&zk, &root, "")?;
    contended(&zk, &root, "", curator.as_ref())?;
    // The same on a server that fsyncs every transaction, as in production.
    if zk.server.is_some() {
        let durable = TestingServer::start_durable()?;
        let zk = Zk {
            connect: durable.connect_string(),
            server: Some(durable),
        };
        uncontended(&zk, &root, " (forceSync=yes)")?;
        contended(&zk, &root, " (forceSync=yes)", curator.as_ref())?;
    }
    // Waiters that release at once, then waiters that hold for a millisecond (longer than a
    // round trip, so each can see that the one ahead of it holds).
    drain(&zk, &root, Duration::ZERO)?;
    drain(&zk, &root, Duration::from_millis(1))?;
    println!();
    println!("# total bench time {:.1?}", bench_start.elapsed());
    Ok(())
}

/// Curator 5's InterProcessMutex under the contended load, in a JVM (`--with-curator`).
struct Curator {
    classes: std::path::PathBuf,
    classpath: String,
}

const CURATOR_JARS: &[&str] = &[
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
];

const SLF4J_NOP: &str = "/usr/share/java/slf4j-nop.jar";

impl Curator {
    fn compile() -> Res<Curator> {
        if let Some(missing) = CURATOR_JARS
            .iter()
            .find(|j| !std::path::Path::new(j).exists())
        {
            return Err(format!(
                "--with-curator needs Debian's Curator ({missing} is missing): \
                 apt-get install libcurator-recipes-java default-jdk-headless"
            )
            .into());
        }
        let mut classpath = CURATOR_JARS.join(":");
        // Quiet slf4j (Curator logs nothing the bench needs), if Debian's binding is there.
        if std::path::Path::new(SLF4J_NOP).exists() {
            classpath = format!("{classpath}:{SLF4J_NOP}");
        }
        let classes =
            std::env::temp_dir().join(format!("zklock-bench-java-{}", std::process::id()));
        std::fs::create_dir_all(&classes)?;
        let source = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/java/CuratorBench.java"
        );
        let status = std::process::Command::new("javac")
            .args(["-nowarn", "-d"])
            .arg(&classes)
            .args(["-cp", &classpath, source])
            .status()
            .map_err(|e| format!("--with-curator needs javac (a JDK): {e}"))?;
        if !status.success() {
            return Err(format!("javac failed on {source}").into());
        }
        Ok(Curator { classes, classpath })
    }

    /// Runs `n` Curator contenders on `path` for the contended time: (handoffs, elapsed,
    /// server counters with the JVM's CPU as the client's).
    fn run(&self, zk: &Zk, path: &str, n: usize) -> Res<(u64, Duration, Deltas)> {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let mut child = Command::new("java")
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-cp"])
            .arg(format!("{}:{}", self.classes.display(), self.classpath))
            .args([
                "CuratorBench",
                &zk.connect,
                &n.to_string(),
                &(CONTENDED_SECS * 1000).to_string(),
                path,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut lines = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut next = || -> Res<String> { Ok(lines.next().ok_or("the Curator JVM ended")??) };
        while next()? != "ready" {}
        let before = zk.mntr();
        writeln!(child.stdin.as_mut().ok_or("no stdin")?, "go")?;
        let result = next()?;
        let after = zk.mntr();
        // The JVM closes its clients and exits; a bench never hangs on it.
        let deadline = Instant::now() + STALL;
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                eprintln!("the Curator JVM did not exit; killing it");
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        // curator handoffs <n> elapsed_ms <ms> cpu_ms <ms>
        let f: Vec<&str> = result.split_whitespace().collect();
        let num =
            |i: usize| -> Res<u64> { Ok(f.get(i).ok_or("short Curator result")?.parse::<u64>()?) };
        let (handoffs, elapsed, cpu) = (num(2)?, num(4)?, num(6)?);
        let counters = before.zip(after).map(|(mut a, mut b)| {
            a.client_cpu = Some(Duration::ZERO);
            b.client_cpu = Some(Duration::from_millis(cpu));
            (a, b)
        });
        Ok((handoffs, Duration::from_millis(elapsed), counters))
    }
}

impl Drop for Curator {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.classes);
    }
}

fn stats(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let n = samples.len();
    let p50 = samples[n / 2];
    let p99 = samples[((n * 99).div_ceil(100)).min(n) - 1];
    let mean = samples.iter().sum::<Duration>() / n as u32;
    (p50, p99, mean)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------------------
// 1. Uncontended acquire + release, beside the raw floor.

fn uncontended(zk: &Zk, root: &str, label: &str) -> Res<()> {
    let client = zk.client()?;
    let raw_parent = format!("{root}/raw");
    let raw_prefix = format!("{raw_parent}/lock-");
    let raw_once = || -> Res<()> {
        let node = client
            .create(&raw_prefix)
            .mode(CreateMode::EphemeralSequential)
            .parents_as_containers()
            .protected()
            .call()?;
        let children = client.children(&raw_parent)?;
        assert!(!children.is_empty());
        client.delete(&node)?;
        Ok(())
    };
    let mutex = InterProcessMutex::new(&client, &format!("{root}/uncontended"))?;
    let lock_once = || -> Res<()> {
        mutex.acquire()?;
        mutex.release()?;
        Ok(())
    };

    for _ in 0..WARMUP {
        raw_once()?;
        lock_once()?;
    }

    let mut rows = Vec::new();
    for (name, op) in [
        (
            "raw floor: create(EphSeq, protected, parents) + children + delete",
            &raw_once as &dyn Fn() -> Res<()>,
        ),
        ("InterProcessMutex acquire + release", &lock_once),
    ] {
        let before = zk.mntr();
        let mut samples = Vec::with_capacity(ITERATIONS);
        for _ in 0..ITERATIONS {
            let t = Instant::now();
            op()?;
            samples.push(t.elapsed());
        }
        // The keeper's getData of a lock hold runs in the background: let it land.
        thread::sleep(Duration::from_millis(100));
        let after = zk.mntr();
        rows.push((name, stats(samples), PerOp(before.zip(after), ITERATIONS)));
    }

    println!(
        "## 1. uncontended{label}, one Client, {ITERATIONS} iterations after {WARMUP} warm-up each"
    );
    println!(
        "{:<68} {:>8} {:>8} {:>8} {COUNTER_HEAD}",
        "operation", "p50 ms", "p99 ms", "mean ms"
    );
    for (name, (p50, p99, mean), per) in &rows {
        println!(
            "{name:<68} {:>8.3} {:>8.3} {:>8.3} {per}",
            ms(*p50),
            ms(*p99),
            ms(*mean)
        );
    }
    let (raw, lock) = (rows[0].1 .0, rows[1].1 .0);
    println!(
        "{:<68} {:>8.2}",
        "lock / raw (p50)",
        lock.as_secs_f64() / raw.as_secs_f64()
    );
    println!();
    client.close();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2. Contended handoffs/s: each thread its own Client and its own mutex on one path.

fn contended(zk: &Zk, root: &str, label: &str, curator: Option<&Curator>) -> Res<()> {
    println!("## 2. contended{label}, {CONTENDED_SECS} s per row, each thread: own Client + own InterProcessMutex on one path, loop acquire -> counter += 1 -> release");
    println!(
        "{:>8} {:>10} {:>12} {:>14} {:>12} {:>10} {COUNTER_HEAD}",
        "threads", "handoffs", "handoffs/s", "per-thread", "lost updates", "elapsed"
    );
    for &n in &CONTENDERS {
        let path = format!("{root}/contended-{n}");
        let clients = (0..n).map(|_| zk.client()).collect::<Res<Vec<_>>>()?;
        // Non-atomic read-modify-write on purpose: a mutual-exclusion failure loses updates.
        let counter = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let barrier = Arc::new(Barrier::new(n + 1));
        let mut handles = Vec::new();
        for client in &clients {
            let (client, path, counter, stop, barrier) = (
                client.clone(),
                path.clone(),
                counter.clone(),
                stop.clone(),
                barrier.clone(),
            );
            handles.push(thread::spawn(move || -> Res<(u64, Instant)> {
                let mutex = InterProcessMutex::new(&client, &path)?;
                barrier.wait();
                let mut mine = 0u64;
                while !stop.load(Ordering::Acquire) {
                    mutex.acquire()?;
                    let v = counter.load(Ordering::SeqCst);
                    counter.store(v + 1, Ordering::SeqCst);
                    mine += 1;
                    mutex.release()?;
                }
                Ok((mine, Instant::now()))
            }));
        }
        let before = zk.mntr();
        barrier.wait();
        let start = Instant::now();
        thread::sleep(Duration::from_secs(CONTENDED_SECS));
        stop.store(true, Ordering::Release);
        let mut per_thread = Vec::new();
        let mut last = start;
        for h in handles {
            let (mine, end) = h.join().map_err(|_| "contender panicked")??;
            per_thread.push(mine);
            last = last.max(end);
        }
        let after = zk.mntr();
        let elapsed = last - start;
        let total: u64 = per_thread.iter().sum();
        let lost = total - counter.load(Ordering::SeqCst);
        let (lo, hi) = (
            per_thread.iter().min().copied().unwrap_or(0),
            per_thread.iter().max().copied().unwrap_or(0),
        );
        println!(
            "{n:>8} {total:>10} {:>12.1} {:>14} {lost:>12} {:>9.2}s {}",
            total as f64 / elapsed.as_secs_f64(),
            format!("{lo}..{hi}"),
            elapsed.as_secs_f64(),
            PerOp(before.zip(after), total as usize)
        );
        for c in clients {
            c.close();
        }
        if let Some(curator) = curator {
            let (handoffs, elapsed, counters) = curator.run(zk, &format!("{path}-curator"), n)?;
            let rate = handoffs as f64 / elapsed.as_secs_f64();
            println!(
                "{:>8} {handoffs:>10} {rate:>12.1} {:>14} {:>12} {:>9.2}s {}",
                format!("C {n}"),
                "-",
                "-",
                elapsed.as_secs_f64(),
                PerOp(counters, handoffs as usize)
            );
            println!(
                "{:>8} zklock / Curator handoffs/s: {:.2}x",
                "",
                total as f64 / (last - start).as_secs_f64() / rate
            );
        }
    }
    println!();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3. Drain: Q queued waiters, released at once by the holder.

struct DrainRun {
    drain: Duration,
    counters: PerOp,
    setup: Duration,
}

fn drain(zk: &Zk, root: &str, hold: Duration) -> Res<()> {
    let holder_client = zk.client()?;
    let clients = (0..DRAIN_CLIENTS)
        .map(|_| zk.client())
        .collect::<Res<Vec<_>>>()?;
    println!("## 3. drain, each waiter holding {hold:?}: holder takes the lock, Q waiter threads (each its own InterProcessMutex, sharing {DRAIN_CLIENTS} Clients round-robin, {} KiB stacks) queue; once all Q nodes and their watches are on the server the holder releases; drain = release until the last waiter has acquired and released. {DRAIN_RUNS} runs per Q, median shown.", WAITER_STACK / 1024);
    println!(
        "{:>6} {:>12} {:>14} {:>24} {:>10} {COUNTER_HEAD}",
        "Q", "drain ms", "per handoff ms", "runs ms", "setup s"
    );
    let mut per_handoff = Vec::new();
    for &q in &QUEUES {
        let mut runs = Vec::new();
        for r in 0..DRAIN_RUNS {
            let path = format!("{root}/drain-{q}-{r}-{}", hold.as_millis());
            runs.push(drain_once(zk, &holder_client, &clients, &path, q, hold)?);
        }
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&i| runs[i].drain);
        let median = &runs[order[order.len() / 2]];
        let all = order
            .iter()
            .map(|&i| format!("{:.0}", ms(runs[i].drain)))
            .collect::<Vec<_>>()
            .join("/");
        let per = ms(median.drain) / q as f64;
        per_handoff.push((q, per, median.counters.bytes()));
        println!(
            "{q:>6} {:>12.1} {:>14.3} {all:>24} {:>10.1} {}",
            ms(median.drain),
            per,
            median.setup.as_secs_f64(),
            median.counters
        );
    }
    let (q0, first, first_bytes) = per_handoff[0];
    let (qn, lastc, last_bytes) = per_handoff[per_handoff.len() - 1];
    println!(
        "per-handoff time  Q={qn} / Q={q0}: {:.2}x (flat ~1x: O(n) drain)",
        lastc / first
    );
    if let (Some(a), Some(b)) = (first_bytes, last_bytes) {
        println!(
            "server bytes per handoff Q={qn} / Q={q0}: {:.1}x (flat: no handoff re-reads the queue; \
             growing ~linearly with Q ({}x here): each handoff re-lists the remaining queue, O(n^2) bytes in all)",
            b / a,
            qn / q0
        );
    }
    println!("note: a drain without re-listing costs per handoff 1 write (delete) + 1 read (the new holder's keeper getData) + pings");
    holder_client.close();
    for c in clients {
        c.close();
    }
    Ok(())
}

fn drain_once(
    zk: &Zk,
    holder_client: &Client,
    clients: &[Client],
    path: &str,
    q: usize,
    hold: Duration,
) -> Res<DrainRun> {
    let setup_start = Instant::now();
    let holder = InterProcessMutex::new(holder_client, path)?;
    holder.acquire()?;

    let (tx, rx) = mpsc::channel::<Res<Instant>>();
    let mut handles = Vec::with_capacity(q);
    for i in 0..q {
        let (client, path, tx) = (
            clients[i % clients.len()].clone(),
            path.to_owned(),
            tx.clone(),
        );
        let h = thread::Builder::new()
            .name(format!("waiter-{i}"))
            .stack_size(WAITER_STACK)
            .spawn(move || {
                let result = (|| -> Res<Instant> {
                    let mutex = InterProcessMutex::new(&client, &path)?;
                    mutex.acquire()?;
                    if !hold.is_zero() {
                        thread::sleep(hold);
                    }
                    mutex.release()?;
                    Ok(Instant::now())
                })();
                let _ = tx.send(result);
            })?;
        handles.push(h);
    }
    drop(tx);

    // All Q waiters' nodes under the lock path, besides the holder's.
    let waited = Instant::now();
    loop {
        let n = holder_client.children(path)?.len();
        if n == q + 1 {
            break;
        }
        if waited.elapsed() > STALL {
            return Err(format!("only {n} of {} nodes after {STALL:?}", q + 1).into());
        }
        thread::sleep(Duration::from_millis(10));
    }
    // ... and every waiter parked on its watch (Q getData watches + the holder's keeper).
    if zk.watches().is_some() {
        while zk.watches().unwrap_or(u64::MAX) < q as u64 {
            if waited.elapsed() > STALL {
                return Err(format!("watches not set after {STALL:?}").into());
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
    thread::sleep(Duration::from_millis(50));
    let setup = setup_start.elapsed();

    let before = zk.mntr();
    let start = Instant::now();
    holder.release()?;
    let mut last = start;
    for _ in 0..q {
        let done = rx
            .recv_timeout(STALL)
            .map_err(|_| format!("drain of {q} stalled for {STALL:?}"))??;
        last = last.max(done);
    }
    let drain = last - start;
    // The last holder's keeper getData runs in the background: let it land.
    thread::sleep(Duration::from_millis(50));
    let after = zk.mntr();
    for h in handles {
        h.join().map_err(|_| "waiter panicked")?;
    }
    Ok(DrainRun {
        drain,
        counters: PerOp(before.zip(after), q),
        setup,
    })
}
