//! What the Redis and PostgreSQL benches share: sessions on threads started together, the
//! process's CPU, threads and memory, and the Python peers run as child processes that print
//! one line of results.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

pub type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// This process's CPU time so far (every thread's).
pub fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The CPU time process `pid` has used so far (user and system, from `/proc/<pid>/stat`),
/// zero if it cannot be read: what a server spent on a case.
pub fn pid_cpu(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // In clock ticks of USER_HZ, which Linux fixes at 100 for this file.
    Duration::from_millis(ticks * 10)
}

/// A field of `/proc/self/status` (`Threads`, `VmRSS` in kB, …).
fn status(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// This process's threads now.
pub fn threads() -> u64 {
    status("Threads").unwrap_or(0)
}

/// This process's resident memory now, in MiB.
pub fn rss_mib() -> f64 {
    status("VmRSS").unwrap_or(0) as f64 / 1024.0
}

/// Runs `session` on `s` threads for `d` after they are all ready; each session's result.
/// `during` runs on the calling thread half-way through (to sample what the run uses).
pub fn run_sessions<T: Send + 'static, D>(
    s: usize,
    d: Duration,
    during: impl FnOnce() -> D,
    session: impl Fn(usize, &AtomicBool) -> Res<T> + Send + Sync + 'static,
) -> Res<(Vec<T>, D)> {
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(s + 1));
    let session = Arc::new(session);
    let threads: Vec<_> = (0..s)
        .map(|i| {
            let (stop, ready, session) = (stop.clone(), ready.clone(), session.clone());
            thread::spawn(move || -> Res<T> {
                ready.wait();
                session(i, &stop)
            })
        })
        .collect();
    ready.wait();
    thread::sleep(d / 2);
    let sampled = during();
    thread::sleep(d - d / 2);
    stop.store(true, Ordering::Relaxed);
    let results = threads
        .into_iter()
        .map(|t| t.join().map_err(|_| "a session panicked")?)
        .collect::<Res<Vec<T>>>()?;
    Ok((results, sampled))
}

/// A Python peer: `python3 SCRIPT ARGS…`, which prints `ready`, waits for a line on its
/// standard input, runs, and prints one line of results.
pub struct Python {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    started: bool,
}

impl Python {
    /// Starts `benches/python/SCRIPT` with `args`; `needs` names the Debian package to install
    /// when it fails.
    pub fn start(script: &str, args: &[&str], needs: &str) -> Res<Python> {
        let script = format!("{}/benches/python/{script}", env!("CARGO_MANIFEST_DIR"));
        // Debian's python3 (with Debian's packages) rather than a virtualenv's.
        let python = if std::path::Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let mut child = Command::new(python)
            .arg(&script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("python3 with Debian's {needs}: {e}"))?;
        let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        match lines.next() {
            Some(Ok(l)) if l == "ready" => {}
            other => {
                return Err(
                    format!("{script} did not start ({needs} installed?): {other:?}").into(),
                )
            }
        }
        Ok(Python {
            child,
            lines,
            started: false,
        })
    }

    /// Lets it run.
    pub fn go(&mut self) -> Res<()> {
        self.child
            .stdin
            .as_mut()
            .ok_or("no stdin")?
            .write_all(b"go\n")?;
        self.started = true;
        Ok(())
    }

    /// Its next line.
    pub fn line(&mut self) -> Res<String> {
        Ok(self.lines.next().ok_or("the Python peer said nothing")??)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts it if not yet, and returns its result line, split.
    pub fn finish(&mut self) -> Res<Vec<String>> {
        if !self.started {
            self.go()?;
        }
        let line = self.lines.next().ok_or("the Python peer said nothing")??;
        self.child.wait()?;
        Ok(line.split_whitespace().map(str::to_owned).collect())
    }
}

impl Drop for Python {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A number from a Python peer's result line (NaN if absent).
pub fn num(s: Option<&String>) -> f64 {
    s.and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

/// Seconds from a Python peer's result line (zero if absent).
pub fn secs(s: Option<&String>) -> Duration {
    Duration::try_from_secs_f64(num(s)).unwrap_or_default()
}

/// What a bench run does, from its arguments: `--bench` for the real run (without it, as
/// `cargo test` runs a bench, a short pass whose figures mean nothing), `--secs=S` for each
/// contended row, `--only=CASE,…` for some cases, `--rows=ROW,…` for some rows of a contended
/// case (the rows whose name starts with one of them; for profiling one row alone).
pub struct Plan {
    args: Vec<String>,
    pub short: bool,
    /// Uncontended acquisitions.
    pub cycles: usize,
    pub contended: Duration,
    pub only: Option<String>,
    pub rows: Option<String>,
}

impl Plan {
    pub fn from_args() -> Plan {
        let args: Vec<String> = std::env::args().collect();
        let short = !args.iter().any(|a| a == "--bench");
        let value = |name: &str| value(&args, name);
        let secs = value("secs").and_then(|s| s.parse().ok()).unwrap_or(5.0);
        Plan {
            args: args.clone(),
            short,
            cycles: if short { 20 } else { 2000 },
            contended: if short {
                Duration::from_millis(300)
            } else {
                Duration::from_secs_f64(secs)
            },
            only: value("only"),
            rows: value("rows"),
        }
    }

    /// The value of `--NAME=VALUE` among the arguments.
    pub fn value(&self, name: &str) -> Option<String> {
        value(&self.args, name)
    }

    /// Whether the row `row` of a contended case runs.
    pub fn runs_row(&self, row: &str) -> bool {
        self.rows
            .as_deref()
            .is_none_or(|rows| rows.split(',').any(|r| row.starts_with(r)))
    }

    /// Whether the case `case` runs.
    pub fn runs(&self, case: &str) -> bool {
        self.only
            .as_deref()
            .is_none_or(|only| only.split(',').any(|c| c == case))
    }
}

fn value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("--{name}=")).map(str::to_owned))
}

/// One session's acquisitions, handoffs (acquisitions after another session's) and waits (µs).
pub struct Counts {
    pub n: u64,
    pub handoffs: u64,
    pub waits: hdrhistogram::Histogram<u64>,
}

impl Counts {
    pub fn new() -> Res<Counts> {
        Ok(Counts {
            n: 0,
            handoffs: 0,
            waits: hdrhistogram::Histogram::new(3)?,
        })
    }

    /// A Python peer's counts from its result line (`contend N CPU HANDOFFS P50 P99 …`):
    /// its wait percentiles stand for its waits.
    pub fn of_python(line: &[String]) -> Res<Counts> {
        let mut waits = hdrhistogram::Histogram::<u64>::new(3)?;
        waits.record(num(line.get(4)) as u64)?;
        waits.record(num(line.get(5)) as u64)?;
        Ok(Counts {
            n: num(line.get(1)) as u64,
            handoffs: num(line.get(3)) as u64,
            waits,
        })
    }
}

/// A latency row of the uncontended table: p50 and p99 of `h` (µs), then the cost per
/// acquisition as the bench words it.
pub fn latency_row(what: &str, h: &hdrhistogram::Histogram<u64>, per_acquisition: &str) {
    println!(
        "| {what} | {} µs | {} µs | {per_acquisition} |",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99)
    );
}
