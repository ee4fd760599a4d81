//! The file backend beside what a user would pick instead on one host, across processes:
//! `zklock`'s `FileMutex`, `flock(2)` on one file through std (the floor: the kernel's lock
//! alone), the `fs4` crate's `lock` (the maintained successor of `fs2`, also `flock(2)`), and
//! `flock(1)` in a shell loop (a process per acquisition).
//!
//! For each: the uncontended acquire + release latency of one process (median and p99), then
//! 2 and 8 processes taking the lock in a loop for a few seconds, each hold 100 µs of work:
//! acquisitions per second, the longest wait, how often a newcomer overtook a waiter (a grant
//! to a process that asked after another process that was still waiting), and the client CPU
//! per acquisition. `flock(1)`
//! is timed uncontended and for acquisitions per second; its fairness is `flock(2)`'s (it is
//! one `flock(2)` call in a new process).
//!
//! ```sh
//! cargo bench --features testing --bench file            # every row
//! ZKLOCK_BENCH_SECONDS=10 cargo bench --features testing --bench file
//! ```

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use zklock::file::{FileClient, FileMutex};

/// The work under the lock in the contended rows.
const HOLD: Duration = Duration::from_micros(100);

/// Makes this binary a worker: `IMPL DIR SECONDS`.
const WORKER: &str = "ZKLOCK_BENCH_FILE_WORKER";

/// The monotonic clock every process shares, in nanoseconds.
fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// This process's CPU time (user + system) so far, ns (`/proc/self/stat`, 10 ms ticks).
fn cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are the 14th and 15th fields; after the name, the 12th and 13th.
    (ticks(11) + ticks(12)) * 10_000_000
}

/// One way to take the lock.
enum Taker {
    Zklock(FileMutex, #[allow(dead_code)] FileClient),
    Flock(File),
    Fs4(File),
}

impl Taker {
    fn open(kind: &str, dir: &Path) -> Taker {
        let file = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(dir.join("flock"))
                .unwrap()
        };
        match kind {
            "zklock" => {
                let client = FileClient::open(dir).unwrap();
                Taker::Zklock(FileMutex::new(&client, "bench").unwrap(), client)
            }
            "flock2" => Taker::Flock(file()),
            "fs4" => Taker::Fs4(file()),
            other => panic!("no taker {other}"),
        }
    }

    /// Takes the lock; zklock's fencing token (the number its entry drew), else 0.
    fn take(&self) -> u64 {
        match self {
            Taker::Zklock(m, _) => {
                m.acquire().unwrap();
                m.fencing_token().unwrap_or(0)
            }
            Taker::Flock(f) => f.lock().map(|_| 0).unwrap(),
            Taker::Fs4(f) => fs4::FileExt::lock(f).map(|_| 0).unwrap(),
        }
    }

    fn give(&self) {
        match self {
            Taker::Zklock(m, _) => m.release().unwrap(),
            Taker::Flock(f) => f.unlock().unwrap(),
            Taker::Fs4(f) => fs4::FileExt::unlock(f).unwrap(),
        }
    }
}

/// A worker: takes and gives the lock in a loop for the given time, printing `ASK GRANT` (ns)
/// per acquisition at the end.
fn worker(args: &str) {
    let mut args = args.split(' ');
    let (kind, dir, secs) = (
        args.next().unwrap(),
        PathBuf::from(args.next().unwrap()),
        args.next().unwrap().parse::<f64>().unwrap(),
    );
    let taker = Taker::open(kind, &dir);
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut log = Vec::new();
    while Instant::now() < until {
        let ask = now_ns();
        let token = taker.take();
        let grant = now_ns();
        // The work under the lock: long enough for every waiter to be queued.
        let spin = Instant::now();
        while spin.elapsed() < HOLD {
            std::hint::spin_loop();
        }
        taker.give();
        log.push((ask, grant, token));
    }
    let out: Vec<String> = log.iter().map(|(a, g, t)| format!("{a} {g} {t}")).collect();
    println!("{}", out.join("\n"));
    println!("cpu {}", cpu_ns());
}

struct Contended {
    per_sec: f64,
    longest_wait: Duration,
    overtaken_pct: f64,
    /// Grants out of the order of zklock's entry numbers.
    out_of_turn: usize,
    /// Client CPU (user + system) per acquisition, µs.
    cpu: f64,
}

/// `n` worker processes of `kind` for `secs`.
fn contended(kind: &str, n: usize, secs: f64) -> Contended {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|_| {
            Command::new(&exe)
                .env(WORKER, format!("{kind} {} {secs}", dir.path().display()))
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut all: Vec<(u64, u64)> = Vec::new();
    let mut tokens: Vec<(u64, u64)> = Vec::new();
    let mut cpu_ns = 0u64;
    for mut c in children {
        let out = c.stdout.take().unwrap();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(cpu) = line.strip_prefix("cpu ") {
                cpu_ns += cpu.parse::<u64>().unwrap();
                continue;
            }
            let mut w = line.split(' ');
            if let (Some(a), Some(g), Some(t)) = (w.next(), w.next(), w.next()) {
                let (a, g, t) = (a.parse().unwrap(), g.parse().unwrap(), t.parse().unwrap());
                all.push((a, g));
                tokens.push((g, t));
            }
        }
        assert!(c.wait().unwrap().success());
    }
    // Only the window where every process runs: from the latest first ask to the earliest
    // last grant.
    let longest_wait = all.iter().map(|(a, g)| g - a).max().unwrap_or(0);
    let first = all.iter().map(|x| x.1).min().unwrap_or(0);
    let last = all.iter().map(|x| x.1).max().unwrap_or(1);
    let per_sec = all.len() as f64 / ((last - first) as f64 / 1e9);
    // Overtaken: a waiter whose ask came before another's ask and whose grant came after it.
    all.sort_by_key(|x| x.0);
    // A grant that overtook: someone who asked before it was still waiting (granted later).
    let mut overtaking = 0usize;
    let mut latest_earlier_grant = 0u64;
    for (_, g) in &all {
        if latest_earlier_grant > *g {
            overtaking += 1;
        }
        latest_earlier_grant = latest_earlier_grant.max(*g);
    }
    // zklock's arrival is the number its entry drew: grants out of that order.
    tokens.sort();
    let out_of_turn = tokens
        .windows(2)
        .filter(|w| w[1].1 != 0 && w[1].1 < w[0].1)
        .count();
    Contended {
        out_of_turn,
        per_sec,
        longest_wait: Duration::from_nanos(longest_wait),
        overtaken_pct: 100.0 * overtaking as f64 / all.len().max(1) as f64,
        cpu: cpu_ns as f64 / all.len().max(1) as f64 / 1e3,
    }
}

/// Uncontended acquire + release in this process: median and p99 over `n`.
fn uncontended(kind: &str, n: usize) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let taker = Taker::open(kind, dir.path());
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            taker.take();
            taker.give();
            t.elapsed()
        })
        .collect();
    times.sort();
    (times[n / 2], times[n * 99 / 100])
}

/// flock(1) in a shell loop: the time per `flock FILE true`, alone and with `n` loops.
fn flock1(n: usize, rounds: usize) -> Option<(Duration, f64)> {
    let ok = Command::new("flock").arg("--version").output().ok()?;
    if !ok.status.success() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flock");
    let script = format!(
        "i=0; while [ $i -lt {rounds} ]; do flock {} true; i=$((i+1)); done",
        file.display()
    );
    let t = Instant::now();
    assert!(Command::new("sh")
        .args(["-c", &script])
        .status()
        .ok()?
        .success());
    let alone = t.elapsed() / rounds as u32;
    let t = Instant::now();
    let loops: Vec<_> = (0..n)
        .map(|_| Command::new("sh").args(["-c", &script]).spawn().unwrap())
        .collect();
    for mut l in loops {
        l.wait().unwrap();
    }
    let per_sec = (n * rounds) as f64 / t.elapsed().as_secs_f64();
    Some((alone, per_sec))
}

fn main() {
    if let Ok(args) = std::env::var(WORKER) {
        return worker(&args);
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let secs: f64 = std::env::var("ZKLOCK_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    println!(
        "| lock | uncontended p50 | p99 | processes | acquisitions/s | longest wait | grants that overtook an earlier ask | out of entry order | CPU per acquisition |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for kind in ["zklock", "flock2", "fs4"] {
        let (p50, p99) = uncontended(kind, 2000);
        for n in [2, 8] {
            let c = contended(kind, n, secs);
            println!(
                "| {kind} | {p50:.1?} | {p99:.1?} | {n} | {:.0} | {:.1?} | {:.1}% | {} | {:.1} µs |",
                c.per_sec,
                c.longest_wait,
                c.overtaken_pct,
                if kind == "zklock" { c.out_of_turn.to_string() } else { "-".into() },
                c.cpu
            );
        }
    }
    for n in [2, 8] {
        match flock1(n, 300) {
            Some((alone, per_sec)) => println!(
                "| flock(1) in sh | {alone:.1?} | - | {n} | {per_sec:.0} | - | as flock2 | - | - |"
            ),
            None => println!("| flock(1) | not installed | | | | | | | |"),
        }
    }
}
