//! Hand-off across processes: two contender processes on one lock, one holding while the other
//! waits; the time from the holder's release (taken just before it sends it) to the waiter's
//! grant, on the wall clock both processes share. The waiter has waited `H` when the holder
//! lets go (H = 0, 10, 100, 500 ms): a waiter that misses its wake-up shows at once.
//!
//! Peers, in the same run on the same server: zklock's `RedisMutex` (a waiter is woken by a
//! message on its Client's channel), python-redis-lock (a waiter blocks on a signal list with
//! `BLPOP`, which a release pushes to; from PyPI, installed into a virtualenv under the target
//! directory on first use) and redis-py's `Lock` (a waiter polls every 100 ms, its default).

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zklock::redis::RedisMutex;
use zklock::testing::TestingRedis;
use zklock::RedisClient;

use crate::common::Res;

/// The environment variable that makes this bench a zklock contender process: `URL NAME`.
pub const WORKER: &str = "ZKLOCK_BENCH_HANDOFF";

/// The python-redis-lock release this bench measures.
const PYTHON_REDIS_LOCK: &str = "python-redis-lock==4.0.1";

const HOLDS_MS: [u64; 4] = [0, 10, 100, 500];

/// The wall clock in nanoseconds.
fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The zklock contender process: answers `take`, `wait`, `release` and `quit` on its standard
/// input as `benches/python/redis_handoff.py` does.
pub fn worker(args: &str) -> Res<()> {
    let (url, name) = args.split_once(' ').ok_or("WORKER is `URL NAME`")?;
    let client = RedisClient::connect(url)?;
    let mutex = RedisMutex::new(&client, name)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "take" => {
                mutex.acquire()?;
                writeln!(out, "G {}", now_ns())?;
            }
            "wait" => {
                writeln!(out, "W {}", now_ns())?;
                out.flush()?;
                mutex.acquire()?;
                writeln!(out, "G {}", now_ns())?;
                mutex.release()?;
                writeln!(out, "D")?;
            }
            "release" => {
                writeln!(out, "R {}", now_ns())?;
                mutex.release()?;
                writeln!(out, "D")?;
            }
            _ => break,
        }
        out.flush()?;
    }
    client.close();
    Ok(())
}

/// One contender process.
struct Contender {
    child: Child,
    input: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Contender {
    fn start(mut command: Command) -> Res<Contender> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let input = child.stdin.take().ok_or("no stdin")?;
        let lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut c = Contender {
            child,
            input,
            lines,
        };
        c.expect("ready")?;
        Ok(c)
    }

    fn send(&mut self, cmd: &str) -> Res<()> {
        writeln!(self.input, "{cmd}")?;
        Ok(())
    }

    /// The rest of its next line, which must start with `what`.
    fn expect(&mut self, what: &str) -> Res<String> {
        let line = self.lines.next().ok_or("a contender ended")??;
        match line.strip_prefix(what) {
            Some(rest) => Ok(rest.trim().to_owned()),
            None => Err(format!("a contender said {line:?}, not {what:?}").into()),
        }
    }

    fn time(&mut self, what: &str) -> Res<u128> {
        Ok(self.expect(what)?.parse()?)
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        let _ = self.send("quit");
        let _ = self.child.wait();
    }
}

/// A Python with redis-py and python-redis-lock: a virtualenv over Debian's python3 (whose
/// `python3-redis` it sees), python-redis-lock installed into it from PyPI once.
fn python() -> Res<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-python");
    let python = venv.join("bin/python3");
    let has = |python: &PathBuf| {
        Command::new(python)
            .args(["-c", "import redis, redis_lock"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if has(&python) {
        return Ok(python);
    }
    let ok = Command::new("/usr/bin/python3")
        .args(["-m", "venv", "--system-site-packages"])
        .arg(&venv)
        .status()?
        .success()
        && Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", PYTHON_REDIS_LOCK])
            .status()?
            .success();
    if !ok || !has(&python) {
        return Err(format!(
            "cannot install {PYTHON_REDIS_LOCK} into {} (needs python3-venv, python3-redis \
             and PyPI)",
            venv.display()
        )
        .into());
    }
    Ok(python)
}

/// How to start a contender of `peer` on the lock `name`.
fn contender(peer: &str, server: &TestingRedis, name: &str, python: &PathBuf) -> Command {
    if peer == "zklock" {
        let mut c = Command::new(std::env::current_exe().expect("this bench"));
        c.env(WORKER, format!("{} {name}", server.url()));
        return c;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/python/redis_handoff.py"
    );
    let mut c = Command::new(python);
    c.args([script, &server.url(), peer, name]);
    c
}

/// The hand-off table: per hold and peer, p50, p99 and the most of the release-to-grant times.
pub fn handoff(short: bool, server: &TestingRedis) -> Res<()> {
    println!(
        "## hand-off across processes: the holder's release to the waiter's grant, after the \
         waiter waited H\n"
    );
    println!("| H | peer | hand-offs | p50 | p99 | most |");
    println!("|---|---|---|---|---|---|");
    let python = python()?;
    for hold in HOLDS_MS {
        let rounds = match (short, hold) {
            (true, _) => 2,
            (false, 0 | 10) => 100,
            (false, 100) => 40,
            (false, _) => 20,
        };
        for peer in ["zklock", "python-redis-lock", "redis-py"] {
            let name = format!("handoff-{peer}-{hold}");
            let mut a = Contender::start(contender(peer, server, &name, &python))?;
            let mut b = Contender::start(contender(peer, server, &name, &python))?;
            let mut gaps = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                a.send("take")?;
                a.time("G")?;
                b.send("wait")?;
                b.time("W")?;
                std::thread::sleep(Duration::from_millis(hold));
                a.send("release")?;
                let released = a.time("R")?;
                a.expect("D")?;
                let granted = b.time("G")?;
                b.expect("D")?;
                gaps.push(granted.saturating_sub(released));
            }
            gaps.sort_unstable();
            let at = |q: f64| gaps[((gaps.len() - 1) as f64 * q).round() as usize];
            let ms = |ns: u128| format!("{:.2} ms", ns as f64 / 1e6);
            println!(
                "| {hold} ms | {peer} | {rounds} | {} | {} | {} |",
                ms(at(0.5)),
                ms(at(0.99)),
                ms(*gaps.last().unwrap_or(&0))
            );
        }
    }
    println!();
    Ok(())
}
