//! Shared helpers for the integration tests: every test starts its own real ZooKeeper.
#![allow(dead_code)] // each test file uses some of the helpers

use std::time::{Duration, Instant};

use zklock::Receiver;
use zklock::{Client, ConnectionState};

pub mod java;
#[cfg(all(feature = "mysql", feature = "testing"))]
pub mod mysql;
#[cfg(all(feature = "postgres", feature = "testing"))]
pub mod postgres;
pub mod worker;

/// An error and its causes, `error <- cause <- …`: what a test's message shows of it.
pub fn chain(e: &zklock::Error) -> String {
    let mut out = e.to_string();
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        out.push_str(" <- ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

/// A tracing subscriber's output, kept for the test to read (a writer for
/// `tracing_subscriber::fmt().with_writer(move || captured.clone())`).
#[derive(Clone, Default)]
pub struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    /// Installs a tracing subscriber for this test binary with `filter` (an `EnvFilter`
    /// directive) that writes here.
    pub fn install(filter: &str) -> Captured {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// zklock's warnings in this test binary, captured from the first call on (the first call
/// installs the tracing subscriber): the lines that contain `needle`. The tests of a binary run
/// side by side, each on servers of its own, so a test picks its lines by its server's address.
pub fn warnings_naming(needle: &str) -> Vec<String> {
    static LOG: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    let captured = LOG.get_or_init(|| Captured::install("zklock=warn"));
    captured
        .text()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}

/// Waits until a Client's keeper has just renewed `key` on `server` (its TTL jumped back up),
/// so that its next renewal is a whole period away.
#[cfg(all(feature = "redis", feature = "testing"))]
pub fn just_renewed(server: &zklock::testing::TestingRedis, key: &str) {
    let pttl = || {
        server
            .command(&["PTTL", key])
            .unwrap()
            .parse::<i64>()
            .unwrap()
    };
    let mut last = pttl();
    let deadline = Instant::now() + patience();
    loop {
        let now = pttl();
        if now > last {
            return;
        }
        assert!(Instant::now() < deadline, "{key} was never renewed");
        last = now;
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `a` takes the Redis lock `name`; while it holds, `while_held` runs and `b`'s `try_lock` is
/// refused; after `a`'s release `b` is granted it, with a higher fencing token, and releases it.
#[cfg(feature = "redis")]
pub fn held_then_handed_over(
    a: &zklock::RedisClient,
    b: &zklock::RedisClient,
    name: &str,
    while_held: impl FnOnce(),
) {
    let mutex = zklock::redis::RedisMutex::new(a, name).unwrap();
    let guard = mutex.lock().unwrap();
    while_held();
    let theirs = zklock::redis::RedisMutex::new(b, name).unwrap();
    assert!(theirs.try_lock().unwrap().is_none(), "{name} is held");
    let token = guard.fencing_token();
    guard.release().unwrap();
    let again = theirs.try_lock().unwrap().expect("free after the release");
    assert!(again.fencing_token() > token);
    again.release().unwrap();
}

/// How long after `from` `health` first reads something other than `Held`, and what.
pub fn until_not_held(
    from: Instant,
    health: impl Fn() -> zklock::LockHealth,
) -> (Duration, zklock::LockHealth) {
    loop {
        let h = health();
        if h != zklock::LockHealth::Held {
            return (from.elapsed(), h);
        }
        assert!(from.elapsed() < patience(), "still Held");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Asserts that `e` is `Error::ConnectFailed` caused by `Error::Tls` (a refused handshake);
/// returns its chain of causes, for the test to read and print.
pub fn refused_by_tls(e: &zklock::Error) -> String {
    let text = chain(e);
    match e {
        zklock::Error::ConnectFailed { cause, .. } => {
            assert!(matches!(**cause, zklock::Error::Tls(_)), "{text}")
        }
        other => panic!("{other:?}"),
    }
    text
}

/// Multiplies every wait (set `ZKLOCK_TIMING_FACTOR` on a slow machine).
pub fn timing() -> u32 {
    std::env::var("ZKLOCK_TIMING_FACTOR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// A generous deadline for something that should happen within seconds.
pub fn patience() -> Duration {
    Duration::from_secs(60) * timing()
}

/// Polls `cond` until it holds or `patience()` passes; panics with `what` on timeout.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + patience();
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The next state on `rx`, or a panic naming what was expected.
pub fn next_state(rx: &Receiver<ConnectionState>, expected: &str) -> ConnectionState {
    rx.recv_timeout(patience())
        .unwrap_or_else(|_| panic!("no state change: expected {expected}"))
}

/// Waits for `want` on `rx`, returning the states seen before it.
pub fn expect_state(rx: &Receiver<ConnectionState>, want: ConnectionState) -> Vec<ConnectionState> {
    let mut seen = Vec::new();
    loop {
        let s = next_state(rx, &format!("{want:?} (seen {seen:?})"));
        if s == want {
            return seen;
        }
        seen.push(s);
    }
}

pub fn client(connect: &str, session: Duration) -> Client {
    Client::builder(connect)
        .session_timeout(session)
        .connection_timeout(Duration::from_secs(30))
        .connect()
        .expect("connect")
}

/// zklock's and the wire client's events, to the test's output: `RUST_LOG` if set, else
/// info and up plus the wire client's debug events.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,zookeeper_client=debug"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Asserts that the next state on `rx` is `want`.
pub fn expect_next(rx: &Receiver<ConnectionState>, want: ConnectionState) {
    let got = next_state(rx, &format!("{want:?}"));
    assert_eq!(got, want, "expected {want:?} next");
}

/// The children of `path` for a leftover check: none when `path` does not exist. A lookup
/// that fails for want of a connection (a member restarting, a session moving) is tried again
/// for a third of `patience()`; any other error, or one that lasts, is returned with the path,
/// so that a check cannot read a failed lookup as "nothing left".
pub fn children_left(client: &Client, path: &str) -> Result<Vec<String>, String> {
    let end = Instant::now() + patience() / 3;
    loop {
        match client.children(path) {
            Ok(children) => return Ok(children),
            Err(zklock::Error::NoNode(_)) => return Ok(Vec::new()),
            Err(
                zklock::Error::ConnectionLoss
                | zklock::Error::Timeout
                | zklock::Error::SessionExpired,
            ) if Instant::now() < end => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(format!("cannot list the children of {path}: {e}")),
        }
    }
}

/// The names of this process's threads, as the kernel keeps them (at most 15 bytes each).
pub fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

/// How many of this process's threads have a name that starts with `prefix`.
pub fn threads_named(prefix: &str) -> usize {
    thread_names()
        .iter()
        .filter(|name| name.starts_with(prefix))
        .count()
}

/// Waits until `path` has no children and the server holds no watch on anything below it.
pub fn assert_clean(server_wchc: impl Fn() -> String, client: &Client, path: &str) {
    wait_for(
        &format!("no children left under {path}"),
        || match children_left(client, path) {
            Ok(children) => children.is_empty(),
            Err(why) => panic!("{why}"),
        },
    );
    wait_for(&format!("no watch left under {path}"), || {
        !server_wchc().contains(path)
    });
}

/// The paths a session watches, from the server's `wchc` output, but the ensemble's
/// configuration (`/zookeeper/config`), which every Client that follows the ensemble watches.
pub fn watches_of(wchc: &str, session: i64) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = None;
    for line in wchc.lines() {
        if let Some(path) = line.strip_prefix('\t') {
            if current == Some(session) && path.trim() != "/zookeeper/config" {
                out.push(path.trim().to_owned());
            }
        } else if let Some(hex) = line.trim().strip_prefix("0x") {
            current = i64::from_str_radix(hex, 16)
                .ok()
                .or_else(|| u64::from_str_radix(hex, 16).ok().map(|v| v as i64));
        }
    }
    out
}
