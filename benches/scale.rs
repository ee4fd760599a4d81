//! How zklock's cost grows with the number of locks, elections and Clients in one process,
//! beside Curator 5 on the same server in the same run: N locks held by one thread on N fresh
//! paths, N `LeaderLatch`es on N paths (each alone, so each leads), N `LeaderSelector`s on 10
//! paths (each leading once in turn), and N Clients.
//!
//! ```sh
//! cargo bench --features testing --bench scale                      # N = 100, 1000, 10,000
//! ZKLOCK_SCALE_QUICK=1 cargo bench --features testing --bench scale # N = 100, 1000
//! cargo bench --features testing --bench scale -- --without-curator
//! ZK_CONNECT=host:port cargo bench --features testing --bench scale # your own server
//! ```
//!
//! `ZKLOCK_SCALE_SIZES=100,1000`, `ZKLOCK_SCALE_SELECTORS=100,1000` and
//! `ZKLOCK_SCALE_CLIENTS=100,1000` choose the sizes. N Clients stops at 1000 unless asked:
//! 10,000 sessions need 10,000 sockets on each side, and Curator runs 10,000 frameworks with
//! several threads each. N selectors stops at 1000 too: Curator runs a thread per selector
//! (zklock, one per running term).
//!
//! For every case and size, each side reports: the time per item (setting up all N: acquire, or
//! start and await leadership, or connect); the time per item to close them all; the process's
//! threads beyond what it had before (for zklock: one Client connected alone, before the
//! warm-up; for the Clients case: none); its resident memory per item (`VmRSS` of
//! `/proc/<pid>/status`, after against before; Curator's is its JVM's, heap included); zklock's
//! heap per item (bytes allocated and not freed, counted by this bench's global allocator:
//! exact where RSS counts pages); the server's watches per item (`wchs`, while the items live)
//! and those left once they are closed; and the server's requests per item (the
//! `zk_packets_received` delta of `mntr`, which includes the sessions' pings and, for Clients,
//! their connect requests). The last tables give how each figure grows between every two sizes
//! (from N = 100 to N = 10,000 among them), and zklock's time per item against Curator's at
//! each N.
//!
//! Curator runs in a JVM (`benches/java/CuratorBench.java`, Debian's `libcurator-recipes-java`
//! and a JDK, as `benches/mutex` runs it), warmed up on 200 items first; zklock is warmed up the
//! same way. One side runs at a time, zklock first at each size.
//!
//! `cargo test` runs this bench once too, as a short pass without Curator (it keeps the bench
//! working; its figures mean nothing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use zklock::testing::TestingServer;

#[path = "common/curator_jvm.rs"]
mod curator_jvm;
use curator_jvm::CuratorJvm;
use zklock::{Client, InterProcessMutex, LeaderLatch, LeaderSelector};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// Gives up on a step that makes no progress for this long (the bench must never hang).
const STALL: Duration = Duration::from_secs(120);
/// Items set up and closed again before a case is measured.
const WARMUP: usize = 200;

/// The system allocator, counting the bytes this process has allocated and not freed: the
/// exact heap an item costs, which RSS (pages) only approximates.
struct Counting;

static HEAP: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only a counter is kept.
// The crate denies unsafe code; this bench's allocator is the one exception, and measures only.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            HEAP.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            HEAP.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        HEAP.fetch_sub(layout.size() as i64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            HEAP.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

/// The sizes in `var` (comma-separated), or `default`.
fn sizes(var: &str, default: &[usize]) -> Res<Vec<usize>> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(|n| Ok(n.trim().parse::<usize>()?.max(1)))
            .collect(),
        _ => Ok(default.to_vec()),
    }
}

fn run() -> Res<()> {
    // `cargo bench` passes --bench; `cargo test` does not.
    let bench = std::env::args().any(|a| a == "--bench");
    let quick = std::env::var("ZKLOCK_SCALE_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let (items, clients): (&[usize], &[usize]) = match (bench, quick) {
        (false, _) => (&[20, 50], &[5]),
        (true, true) => (&[100, 1000], &[100]),
        (true, false) => (&[100, 1000, 10_000], &[100, 1000]),
    };
    let items = sizes("ZKLOCK_SCALE_SIZES", items)?;
    let selectors = sizes("ZKLOCK_SCALE_SELECTORS", clients)?;
    let clients = sizes("ZKLOCK_SCALE_CLIENTS", clients)?;
    let with_curator = bench && !std::env::args().any(|a| a == "--without-curator");

    let server = Server::start()?;
    let curator = if with_curator {
        Some(Curator::compile()?)
    } else {
        None
    };
    let started = Instant::now();
    let mut rows = Vec::new();
    for case in Case::ALL {
        let ns = match case {
            Case::Clients => &clients,
            Case::Selectors => &selectors,
            _ => &items,
        };
        for &n in ns {
            let path = format!("/scale/{}-{n}", case.name());
            let zk = zklock_case(&server, case, n, &format!("{path}-zklock"))?;
            eprintln!("{}", zk.line("zklock", case));
            rows.push(("zklock", case, zk));
            if let Some(curator) = &curator {
                let cu = curator.case(&server, case, n, &format!("{path}-curator"))?;
                eprintln!("{}", cu.line("Curator", case));
                rows.push(("Curator", case, cu));
            }
        }
    }
    report(&rows, bench, started.elapsed());
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Case {
    Locks,
    Latches,
    Selectors,
    Clients,
}

impl Case {
    const ALL: [Case; 4] = [Case::Locks, Case::Latches, Case::Selectors, Case::Clients];

    fn name(self) -> &'static str {
        match self {
            Case::Locks => "locks",
            Case::Latches => "latches",
            Case::Selectors => "selectors",
            Case::Clients => "clients",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Case::Locks => "N locks held by one thread on N fresh paths, one Client",
            Case::Latches => "N LeaderLatches on N paths, all leading, one Client",
            Case::Selectors => {
                "N LeaderSelectors on 10 paths, each leading once in turn (a closure that returns \
                 at once), one Client"
            }
            Case::Clients => "N Clients, each connected",
        }
    }
}

/// What one side's case of N items cost.
#[derive(Clone, Copy, Debug)]
struct Cost {
    n: usize,
    setup: Duration,
    close: Duration,
    threads: i64,
    rss_kb: i64,
    /// Heap bytes allocated and not freed (this process only: zklock's side).
    heap: Option<i64>,
    watches: Option<i64>,
    watches_left: Option<i64>,
    requests: Option<i64>,
}

impl Cost {
    fn per(&self, v: i64) -> f64 {
        v as f64 / self.n as f64
    }

    fn setup_ms(&self) -> f64 {
        self.setup.as_secs_f64() * 1e3 / self.n as f64
    }

    fn close_ms(&self) -> f64 {
        self.close.as_secs_f64() * 1e3 / self.n as f64
    }

    fn line(&self, side: &str, case: Case) -> String {
        format!(
            "{} {side} N={}: {:.3} ms/item, close {:.3} ms/item, +{} threads, {:.1} KB RSS/item, \
             {} heap bytes/item, {} watches/item ({} left), {} requests/item",
            case.name(),
            self.n,
            self.setup_ms(),
            self.close_ms(),
            self.threads,
            self.per(self.rss_kb),
            opt(self.heap.map(|h| self.per(h)), 0),
            opt(self.watches.map(|w| self.per(w)), 2),
            opt(self.watches_left.map(|w| w as f64), 0),
            opt(self.requests.map(|r| self.per(r)), 2),
        )
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

/// Threads and resident memory (KB) of a process (`"self"` or a pid), from `/proc`.
fn proc_status(pid: &str) -> (i64, i64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("Threads:"), field("VmRSS:"))
}

/// What the process and the server look like at one moment.
#[derive(Clone, Copy)]
struct Sample {
    threads: i64,
    rss_kb: i64,
    heap: Option<i64>,
    watches: Option<i64>,
    packets: Option<i64>,
}

/// The ZooKeeper server both sides use.
struct Server {
    _server: Option<TestingServer>,
    connect: String,
    /// Where to ask four-letter words (the first host of `ZK_CONNECT`, which must allow them).
    host: String,
}

impl Server {
    fn start() -> Res<Server> {
        if let Ok(connect) = std::env::var("ZK_CONNECT") {
            if !connect.is_empty() {
                let host = connect
                    .split(',')
                    .next()
                    .and_then(|h| h.split('/').next())
                    .unwrap_or_default()
                    .to_owned();
                return Ok(Server {
                    _server: None,
                    connect,
                    host,
                });
            }
        }
        let server = TestingServer::start()?;
        let host = format!("127.0.0.1:{}", server.port());
        Ok(Server {
            connect: server.connect_string(),
            _server: Some(server),
            host,
        })
    }

    /// Total watches on the server (`wchs`).
    fn watches(&self) -> Option<i64> {
        four_letter(&self.host, "wchs")?
            .lines()
            .find_map(|l| l.strip_prefix("Total watches:"))
            .and_then(|n| n.trim().parse().ok())
    }

    /// Packets the server received (`mntr`).
    fn packets(&self) -> Option<i64> {
        four_letter(&self.host, "mntr")?
            .lines()
            .find_map(|l| l.strip_prefix("zk_packets_received"))
            .and_then(|n| n.trim().parse().ok())
    }

    fn sample(&self, pid: &str) -> Sample {
        let (threads, rss_kb) = proc_status(pid);
        Sample {
            threads,
            rss_kb,
            heap: (pid == "self").then(|| HEAP.load(Ordering::Relaxed)),
            watches: self.watches(),
            packets: self.packets(),
        }
    }

    fn client(&self) -> Res<Client> {
        Ok(Client::builder(&self.connect)
            .session_timeout(SESSION_TIMEOUT)
            .connect()?)
    }
}

fn four_letter(host: &str, cmd: &str) -> Option<String> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

fn delta(after: Option<i64>, before: Option<i64>) -> Option<i64> {
    Some(after? - before?)
}

/// The items of one zklock case, alive until closed.
enum Items {
    Locks(Vec<InterProcessMutex>),
    Latches(Vec<LeaderLatch>),
    Selectors(Vec<LeaderSelector>),
    Clients(Vec<Client>),
}

/// Sets up `n` items on paths under `path` (locks and latches on `client`).
fn open(server: &Server, client: Option<&Client>, case: Case, n: usize, path: &str) -> Res<Items> {
    let client = || client.ok_or("locks and latches need a Client");
    Ok(match case {
        Case::Locks => {
            let mut locks = Vec::with_capacity(n);
            for i in 0..n {
                let mutex = InterProcessMutex::new(client()?, &format!("{path}/{i}"))?;
                mutex.acquire()?;
                locks.push(mutex);
            }
            Items::Locks(locks)
        }
        Case::Latches => {
            let mut latches = Vec::with_capacity(n);
            for i in 0..n {
                let latch = LeaderLatch::new(client()?, &format!("{path}/{i}"))?;
                latch.start()?;
                latches.push(latch);
            }
            for latch in &latches {
                if !latch.await_leadership_timeout(STALL)? {
                    return Err(format!("a latch under {path} did not lead in {STALL:?}").into());
                }
            }
            Items::Latches(latches)
        }
        Case::Selectors => {
            let led = Arc::new(AtomicUsize::new(0));
            let mut selectors = Vec::with_capacity(n);
            for i in 0..n {
                let led = led.clone();
                let selector =
                    LeaderSelector::new(client()?, &format!("{path}/{}", i % 10), move |_| {
                        led.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })?;
                selector.start()?;
                selectors.push(selector);
            }
            let end = Instant::now() + STALL;
            while led.load(Ordering::SeqCst) < n {
                if Instant::now() > end {
                    return Err(format!("not every selector under {path} led in {STALL:?}").into());
                }
                thread::sleep(Duration::from_millis(1));
            }
            Items::Selectors(selectors)
        }
        Case::Clients => {
            let mut clients = Vec::with_capacity(n);
            for _ in 0..n {
                clients.push(server.client()?);
            }
            Items::Clients(clients)
        }
    })
}

fn close(items: Items) -> Res<()> {
    match items {
        Items::Locks(locks) => locks.iter().try_for_each(|l| l.release())?,
        Items::Latches(latches) => latches.iter().try_for_each(|l| l.close())?,
        Items::Selectors(selectors) => selectors.iter().for_each(LeaderSelector::close),
        Items::Clients(clients) => clients.iter().for_each(Client::close),
    }
    Ok(())
}

/// zklock's side of one case: N items on paths under `path`. Locks and latches start from one
/// Client, connected and warmed up; Clients from none.
fn zklock_case(server: &Server, case: Case, n: usize, path: &str) -> Res<Cost> {
    let baseline = settled_watches(server);
    let client = server.client()?;
    // Threads are counted against this Client alone, before the warm-up starts any shared
    // thread (the leader recipes' `zklock-elect` workers and timer).
    let alone = proc_status("self").0;
    let warmup = if case == Case::Clients { 20 } else { WARMUP };
    close(open(
        server,
        Some(&client),
        case,
        warmup,
        &format!("{path}-warmup"),
    )?)?;
    let client = if case == Case::Clients {
        client.close();
        // The I/O thread ends a moment after the last Client.
        thread::sleep(Duration::from_millis(500));
        None
    } else {
        Some(client)
    };
    settled_watches(server);
    let before = server.sample("self");
    let started = Instant::now();
    let items = open(server, client.as_ref(), case, n, path)?;
    let setup = started.elapsed();
    let after = server.sample("self");
    let closing = Instant::now();
    close(items)?;
    if let Some(client) = client {
        client.close();
    }
    let close = closing.elapsed();
    let left = delta(settled_watches(server), baseline);
    let mut cost = cost(n, setup, close, before, after, left);
    if case != Case::Clients {
        cost.threads = after.threads - alone;
    }
    Ok(cost)
}

fn cost(
    n: usize,
    setup: Duration,
    close: Duration,
    before: Sample,
    after: Sample,
    left: Option<i64>,
) -> Cost {
    // `left`: the server's watches once all is closed, against before the case began.
    Cost {
        n,
        setup,
        close,
        threads: after.threads - before.threads,
        rss_kb: after.rss_kb - before.rss_kb,
        heap: delta(after.heap, before.heap),
        watches: delta(after.watches, before.watches),
        watches_left: left,
        requests: delta(after.packets, before.packets),
    }
}

/// The server's watches once the closed sessions' are gone (polled for a few seconds).
fn settled_watches(server: &Server) -> Option<i64> {
    let end = Instant::now() + Duration::from_secs(5);
    let mut last = server.watches();
    while Instant::now() < end {
        thread::sleep(Duration::from_millis(200));
        let now = server.watches();
        if now == last {
            break;
        }
        last = now;
    }
    last
}

/// Curator 5 in a JVM (`benches/java/CuratorBench.java`).
struct Curator(CuratorJvm);

impl Curator {
    fn compile() -> Res<Curator> {
        CuratorJvm::compile("pass --without-curator").map(Curator)
    }

    /// Curator's side of one case, in a JVM of its own.
    fn case(&self, server: &Server, case: Case, n: usize, path: &str) -> Res<Cost> {
        let baseline = settled_watches(server);
        let n_arg = n.to_string();
        let mut child = self
            .0
            .command("2g", &[case.name(), &server.connect, &n_arg, path])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let outcome = drive(&mut child, server, n);
        // The JVM closes its clients and exits; a bench never hangs on it.
        let deadline = Instant::now() + STALL.max(Duration::from_millis(250) * n as u32);
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline || outcome.is_err() {
                eprintln!("the Curator JVM did not exit; killing it");
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let (setup, close, before, after) = outcome?;
        let left = delta(settled_watches(server), baseline);
        Ok(cost(n, setup, close, before, after, left))
    }
}

/// The JVM's protocol: "ready", go, "done elapsed_us <us>", close, "closed close_us <us>".
fn drive(
    child: &mut Child,
    server: &Server,
    n: usize,
) -> Res<(Duration, Duration, Sample, Sample)> {
    let pid = child.id().to_string();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stdin: ChildStdin = child.stdin.take().ok_or("no stdin")?;
    let (tx, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Curator closes a framework in about 0.1 s: N of them take longer than a stall.
    let patience = STALL.max(Duration::from_millis(250) * n as u32);
    let next = || -> Res<String> {
        Ok(lines
            .recv_timeout(patience)
            .map_err(|_| "the Curator JVM stalled or ended")??)
    };
    let micros = |line: String, key: &str| -> Res<Duration> {
        let us = line
            .strip_prefix(key)
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("unexpected Curator line: {line}"))?;
        Ok(Duration::from_micros(us))
    };
    while next()? != "ready" {}
    settled_watches(server);
    let before = server.sample(&pid);
    writeln!(stdin, "go")?;
    let setup = micros(next()?, "done elapsed_us")?;
    let after = server.sample(&pid);
    writeln!(stdin, "close")?;
    let close = micros(next()?, "closed close_us")?;
    Ok((setup, close, before, after))
}

/// The tables: each case, then growth between every two sizes, and zklock against
/// Curator in the same run.
fn report(rows: &[(&str, Case, Cost)], bench: bool, took: Duration) {
    println!();
    if !bench {
        println!("# short pass (cargo test): the figures mean nothing");
    }
    println!(
        "# scale: one ZooKeeper server, one side at a time, {} cores, {:.0} s in all",
        thread::available_parallelism().map_or(0, |n| n.get()),
        took.as_secs_f64()
    );
    for case in Case::ALL {
        println!("\n## {}\n", case.title());
        println!(
            "| side | N | setup per item | close per item | threads added | RSS per item | \
             heap per item | server watches per item | watches left after close | requests per item |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (side, _, c) in rows.iter().filter(|(_, k, _)| *k == case) {
            println!(
                "| {side} | {} | {:.3} ms | {:.3} ms | {} | {:.1} KB | {} | {} | {} | {} |",
                c.n,
                c.setup_ms(),
                c.close_ms(),
                c.threads,
                c.per(c.rss_kb),
                c.heap
                    .map_or_else(|| "-".into(), |h| format!("{:.0} B", c.per(h))),
                opt(c.watches.map(|w| c.per(w)), 2),
                opt(c.watches_left.map(|w| w as f64), 0),
                opt(c.requests.map(|r| c.per(r)), 2),
            );
        }
    }
    println!("\n## Growth with N (per item: larger N / smaller N)\n");
    println!("| case | side | N | time | RSS | requests | threads added |");
    println!("|---|---|---|---:|---:|---:|---|");
    for case in Case::ALL {
        for side in ["zklock", "Curator"] {
            let of: Vec<&Cost> = rows
                .iter()
                .filter(|(s, k, _)| *s == side && *k == case)
                .map(|(_, _, c)| c)
                .collect();
            let ratio = |a: f64, b: f64| {
                if b > 0.0 {
                    format!("{:.2}x", a / b)
                } else {
                    "-".into()
                }
            };
            for (i, lo) in of.iter().enumerate() {
                for hi in &of[i + 1..] {
                    println!(
                        "| {} | {side} | {} → {} | {} | {} | {} | {} → {} |",
                        case.name(),
                        lo.n,
                        hi.n,
                        ratio(hi.setup_ms(), lo.setup_ms()),
                        ratio(hi.per(hi.rss_kb), lo.per(lo.rss_kb)),
                        match (hi.requests, lo.requests) {
                            (Some(h), Some(l)) => ratio(hi.per(h), lo.per(l)),
                            _ => "-".into(),
                        },
                        lo.threads,
                        hi.threads,
                    );
                }
            }
        }
    }
    let curator: Vec<_> = rows.iter().filter(|(s, _, _)| *s == "Curator").collect();
    if curator.is_empty() {
        return;
    }
    println!("\n## zklock / Curator, same run (time per item)\n");
    println!("| case | N | setup | close |");
    println!("|---|---:|---:|---:|");
    for (_, case, cu) in curator {
        if let Some((_, _, zk)) = rows
            .iter()
            .find(|(s, k, c)| *s == "zklock" && k == case && c.n == cu.n)
        {
            println!(
                "| {} | {} | {:.2} | {:.2} |",
                case.name(),
                cu.n,
                zk.setup_ms() / cu.setup_ms(),
                zk.close_ms() / cu.close_ms().max(1e-9),
            );
        }
    }
}
