//! [`FencedRegister`]: a loopback service that keeps one value, refuses writes carrying a stale
//! fencing token, and logs every event for [`FenceReport::check`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a [`FenceClient`] waits for an answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// A resource protected by fencing tokens: a loopback TCP service (a thread) holding one value.
///
/// Holders send their fencing token ([`MutexGuard::fencing_token`](crate::MutexGuard)) with
/// every write. The register **rejects a write whose token is lower than the highest token it
/// has accepted**; an equal token is the same holder and is accepted. Holders also report
/// `enter` (they believe they hold the lock) and `exit` (they stopped believing it). Every
/// event (enter, exit, accepted write, rejected write) is appended to one log in the
/// register's serial order, with the time since the register started; [`log`](Self::log)
/// returns it, [`save`](Self::save) writes it one event per line (see [`FenceEvent`]), and
/// [`FenceReport::check`] judges it.
///
/// Clients in this process or in others talk to it with [`FenceClient`] over a line protocol,
/// one request line, one answer line:
///
/// | request | answer |
/// |---|---|
/// | `ENTER <token> <worker>` | `OK <seq>` |
/// | `EXIT <token> <worker>` | `OK <seq>` |
/// | `WRITE <token> <worker> <value…>` | `OK <seq>` or `REJECTED <seq> <highest>` |
/// | `READ` | `VALUE <token> <value…>` or `EMPTY` |
/// | anything else | `ERR <why>` |
///
/// `worker` is a name without white space; `value` is the rest of the line.
///
/// Dropping the register closes its listener and connections and joins its threads.
///
/// # Example
///
/// ```no_run
/// use zklock::testing::{FenceReport, FencedRegister};
///
/// # fn main() -> std::io::Result<()> {
/// let register = FencedRegister::start()?;
/// let mut a = register.client()?;
/// a.enter(7, "A")?;
/// assert!(a.write(7, "A", "balance=10")?.is_accepted());
/// assert!(!a.write(6, "old-A", "balance=0")?.is_accepted()); // stale token: refused
/// a.exit(7, "A")?;
/// assert!(FenceReport::check(&register.log()).is_clean());
/// # Ok(()) }
/// ```
pub struct FencedRegister {
    shared: Arc<RegisterShared>,
    addr: SocketAddr,
    listener: Option<JoinHandle<()>>,
}

struct RegisterShared {
    started: Instant,
    state: Mutex<RegisterState>,
}

#[derive(Default)]
struct RegisterState {
    stopped: bool,
    highest: Option<u64>,
    value: Option<(u64, String)>,
    log: Vec<FenceEvent>,
    conns: HashMap<u64, TcpStream>,
    next_conn: u64,
    threads: Vec<JoinHandle<()>>,
}

impl RegisterShared {
    fn lock(&self) -> MutexGuard<'_, RegisterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends an event in the serial order; returns it.
    fn record(
        state: &mut RegisterState,
        started: Instant,
        kind: FenceEventKind,
        token: u64,
        worker: &str,
    ) -> u64 {
        let seq = state.log.len() as u64;
        state.log.push(FenceEvent {
            seq,
            at: started.elapsed(),
            kind,
            token,
            worker: worker.to_owned(),
        });
        seq
    }

    /// Answers one request line.
    fn handle(&self, line: &str) -> String {
        let line = line.trim_end_matches(['\r', '\n']);
        let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
        if verb == "READ" {
            return match &self.lock().value {
                Some((token, value)) => format!("VALUE {token} {value}"),
                None => "EMPTY".to_owned(),
            };
        }
        let mut parts = rest.splitn(3, ' ');
        let token = parts.next().and_then(|t| t.parse::<u64>().ok());
        let worker = parts.next().filter(|w| !w.is_empty());
        let (Some(token), Some(worker)) = (token, worker) else {
            return format!("ERR expected `{verb} <token> <worker>`");
        };
        let mut state = self.lock();
        let state = &mut *state;
        match verb {
            "ENTER" | "EXIT" => {
                let kind = if verb == "ENTER" {
                    FenceEventKind::Enter
                } else {
                    FenceEventKind::Exit
                };
                let seq = Self::record(state, self.started, kind, token, worker);
                format!("OK {seq}")
            }
            "WRITE" => {
                let value = parts.next().unwrap_or("");
                match state.highest {
                    Some(highest) if token < highest => {
                        let seq = Self::record(
                            state,
                            self.started,
                            FenceEventKind::Rejected,
                            token,
                            worker,
                        );
                        format!("REJECTED {seq} {highest}")
                    }
                    _ => {
                        state.highest = Some(token);
                        state.value = Some((token, value.to_owned()));
                        let seq = Self::record(
                            state,
                            self.started,
                            FenceEventKind::Accepted,
                            token,
                            worker,
                        );
                        format!("OK {seq}")
                    }
                }
            }
            _ => format!("ERR unknown request {verb:?}"),
        }
    }
}

impl FencedRegister {
    /// Starts the register on a free `127.0.0.1` port.
    pub fn start() -> io::Result<FencedRegister> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(RegisterShared {
            started: Instant::now(),
            state: Mutex::new(RegisterState::default()),
        });
        let accepting = shared.clone();
        let listener = thread::Builder::new()
            .name(format!("zkfence-{}", addr.port()))
            .spawn(move || accept_loop(&accepting, listener))?;
        Ok(FencedRegister {
            shared,
            addr,
            listener: Some(listener),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A new client connected to this register.
    pub fn client(&self) -> io::Result<FenceClient> {
        FenceClient::connect(self.addr)
    }

    /// Every event so far, in the register's serial order.
    pub fn log(&self) -> Vec<FenceEvent> {
        self.shared.lock().log.clone()
    }

    /// The current value and the token it was written with; `None` before the first write.
    pub fn value(&self) -> Option<(u64, String)> {
        self.shared.lock().value.clone()
    }

    /// [`FenceReport::check`] of the log so far.
    pub fn check(&self) -> FenceReport {
        FenceReport::check(&self.log())
    }

    /// Writes the log to `path`, one [`FenceEvent`] per line (read it back with
    /// [`FenceEvent::load`]).
    pub fn save(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let mut text = String::from("# zklock fenced register: seq seconds kind token worker\n");
        for event in self.log() {
            text.push_str(&event.to_string());
            text.push('\n');
        }
        std::fs::write(path, text)
    }
}

impl Drop for FencedRegister {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stopped = true;
            for conn in state.conns.values() {
                let _ = conn.shutdown(Shutdown::Both);
            }
        }
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(listener) = self.listener.take() {
            let _ = listener.join();
        }
        let threads = std::mem::take(&mut self.shared.lock().threads);
        for t in threads {
            let _ = t.join();
        }
    }
}

impl fmt::Debug for FencedRegister {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedRegister")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn accept_loop(shared: &Arc<RegisterShared>, listener: TcpListener) {
    for stream in listener.incoming() {
        let mut state = shared.lock();
        if state.stopped {
            return;
        }
        let Ok(stream) = stream else {
            drop(state);
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        let Ok(registered) = stream.try_clone() else {
            continue;
        };
        let id = state.next_conn;
        state.next_conn += 1;
        state.conns.insert(id, registered);
        state.threads.retain(|t| !t.is_finished());
        let conn_shared = shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("zkfence-{id}"))
            .spawn(move || serve(&conn_shared, id, stream));
        match spawned {
            Ok(t) => state.threads.push(t),
            Err(_) => {
                state.conns.remove(&id);
            }
        }
    }
}

fn serve(shared: &RegisterShared, id: u64, stream: TcpStream) {
    let Ok(mut writer) = stream.try_clone() else {
        shared.lock().conns.remove(&id);
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let mut answer = shared.handle(&line);
        answer.push('\n');
        if writer.write_all(answer.as_bytes()).is_err() {
            break;
        }
    }
    shared.lock().conns.remove(&id);
}

/// A blocking client of a [`FencedRegister`], usable from any process that can reach it.
///
/// Each call sends one request and waits (up to 30 s) for its answer.
///
/// # Example
///
/// ```no_run
/// use zklock::testing::FenceClient;
///
/// # fn main() -> std::io::Result<()> {
/// let addr = std::env::var("FENCE_ADDR").unwrap(); // from the process that owns the register
/// let mut fence = FenceClient::connect(addr.as_str())?;
/// let token = 42; // guard.fencing_token()
/// fence.enter(token, "worker-1")?;
/// if !fence.write(token, "worker-1", "x=1")?.is_accepted() {
///     // someone with a newer token wrote: we are a stale holder
/// }
/// fence.exit(token, "worker-1")?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FenceClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

/// The answer to [`FenceClient::write`].
///
/// # Example
///
/// ```
/// use zklock::testing::WriteOutcome;
/// assert!(WriteOutcome::Accepted.is_accepted());
/// assert!(!WriteOutcome::Rejected { highest: 9 }.is_accepted());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The write was applied.
    Accepted,
    /// The token was lower than `highest`, the highest token accepted so far.
    Rejected {
        /// The highest token the register has accepted.
        highest: u64,
    },
}

impl WriteOutcome {
    /// Whether the write was applied.
    pub fn is_accepted(self) -> bool {
        self == WriteOutcome::Accepted
    }
}

fn protocol_error(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl FenceClient {
    /// Connects to a register at `addr`.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<FenceClient> {
        let writer = TcpStream::connect(addr)?;
        writer.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        writer.set_write_timeout(Some(CLIENT_TIMEOUT))?;
        writer.set_nodelay(true)?;
        Ok(FenceClient {
            reader: BufReader::new(writer.try_clone()?),
            writer,
        })
    }

    fn request(&mut self, line: &str) -> io::Result<String> {
        if line.contains(['\n', '\r']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a request is one line",
            ));
        }
        self.writer.write_all(format!("{line}\n").as_bytes())?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the register closed the connection",
            ));
        }
        let answer = answer.trim_end().to_owned();
        if let Some(why) = answer.strip_prefix("ERR ") {
            return Err(protocol_error(format!("register: {why}")));
        }
        Ok(answer)
    }

    fn check_worker(worker: &str) -> io::Result<()> {
        if worker.is_empty() || worker.contains(char::is_whitespace) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a worker name is one word, not {worker:?}"),
            ));
        }
        Ok(())
    }

    fn event(&mut self, verb: &str, token: u64, worker: &str) -> io::Result<()> {
        Self::check_worker(worker)?;
        let answer = self.request(&format!("{verb} {token} {worker}"))?;
        match answer.starts_with("OK ") {
            true => Ok(()),
            false => Err(protocol_error(format!("unexpected answer {answer:?}"))),
        }
    }

    /// Reports that `worker` now holds the lock with `token`.
    pub fn enter(&mut self, token: u64, worker: &str) -> io::Result<()> {
        self.event("ENTER", token, worker)
    }

    /// Reports that `worker` no longer holds the lock it got with `token`.
    pub fn exit(&mut self, token: u64, worker: &str) -> io::Result<()> {
        self.event("EXIT", token, worker)
    }

    /// Writes `value` (one line) with `token`; the register refuses it when a higher token
    /// has been accepted.
    pub fn write(&mut self, token: u64, worker: &str, value: &str) -> io::Result<WriteOutcome> {
        Self::check_worker(worker)?;
        let answer = self.request(&format!("WRITE {token} {worker} {value}"))?;
        if answer.starts_with("OK ") {
            return Ok(WriteOutcome::Accepted);
        }
        let highest = answer
            .strip_prefix("REJECTED ")
            .and_then(|rest| rest.split(' ').nth(1))
            .and_then(|h| h.parse().ok());
        match highest {
            Some(highest) => Ok(WriteOutcome::Rejected { highest }),
            None => Err(protocol_error(format!("unexpected answer {answer:?}"))),
        }
    }

    /// The current value and its token; `None` before the first accepted write.
    pub fn read(&mut self) -> io::Result<Option<(u64, String)>> {
        let answer = self.request("READ")?;
        if answer == "EMPTY" {
            return Ok(None);
        }
        let parsed = answer.strip_prefix("VALUE ").and_then(|rest| {
            let (token, value) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((token.parse().ok()?, value.to_owned()))
        });
        parsed
            .map(Some)
            .ok_or_else(|| protocol_error(format!("unexpected answer {answer:?}")))
    }
}

// ---------------------------------------------------------------------------
// The log
// ---------------------------------------------------------------------------

/// What happened in a [`FenceEvent`].
///
/// # Example
///
/// ```
/// use zklock::testing::FenceEventKind;
/// assert_eq!("rejected".parse::<FenceEventKind>(), Ok(FenceEventKind::Rejected));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceEventKind {
    /// A holder got the lock (it believes it may write from now on).
    Enter,
    /// A holder let the lock go (or learnt it lost it).
    Exit,
    /// A write the register applied.
    Accepted,
    /// A write the register refused: its token was lower than one already accepted.
    Rejected,
}

impl FenceEventKind {
    fn as_str(self) -> &'static str {
        match self {
            FenceEventKind::Enter => "enter",
            FenceEventKind::Exit => "exit",
            FenceEventKind::Accepted => "accepted",
            FenceEventKind::Rejected => "rejected",
        }
    }
}

impl fmt::Display for FenceEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FenceEventKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "enter" => Ok(FenceEventKind::Enter),
            "exit" => Ok(FenceEventKind::Exit),
            "accepted" => Ok(FenceEventKind::Accepted),
            "rejected" => Ok(FenceEventKind::Rejected),
            other => Err(format!("not a fence event kind: {other:?}")),
        }
    }
}

/// One entry of a [`FencedRegister`]'s log.
///
/// Its text form (`Display` / `FromStr`, one line, as [`FencedRegister::save`] writes it) is
/// `<seq> <seconds since start> <kind> <token> <worker>`, e.g. `3 0.125000 accepted 42 A`.
///
/// # Example
///
/// ```
/// use zklock::testing::{FenceEvent, FenceEventKind};
///
/// let e: FenceEvent = "3 0.125000 accepted 42 A".parse().unwrap();
/// assert_eq!((e.seq, e.kind, e.token, e.worker.as_str()), (3, FenceEventKind::Accepted, 42, "A"));
/// assert_eq!(e.to_string(), "3 0.125000 accepted 42 A");
/// // A hand-made log for FenceReport::check:
/// let e = FenceEvent::new(FenceEventKind::Enter, 42, "A");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceEvent {
    /// Position in the register's serial order (0, 1, 2, ...).
    pub seq: u64,
    /// Time since the register started (monotonic).
    pub at: Duration,
    /// What happened.
    pub kind: FenceEventKind,
    /// The fencing token the holder sent.
    pub token: u64,
    /// The holder's worker name.
    pub worker: String,
}

impl FenceEvent {
    /// An event with `seq` 0 and `at` zero, for hand-made logs ([`FenceReport::check`] takes
    /// the order of the slice as the serial order).
    pub fn new(kind: FenceEventKind, token: u64, worker: &str) -> FenceEvent {
        FenceEvent {
            seq: 0,
            at: Duration::ZERO,
            kind,
            token,
            worker: worker.to_owned(),
        }
    }

    /// Reads a log written by [`FencedRegister::save`] (blank lines and lines starting with
    /// `#` are skipped).
    pub fn load(path: impl AsRef<Path>) -> io::Result<Vec<FenceEvent>> {
        let text = std::fs::read_to_string(path)?;
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.parse().map_err(protocol_error))
            .collect()
    }
}

impl fmt::Display for FenceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:.6} {} {} {}",
            self.seq,
            self.at.as_secs_f64(),
            self.kind,
            self.token,
            self.worker
        )
    }
}

impl FromStr for FenceEvent {
    type Err = String;
    fn from_str(line: &str) -> Result<Self, String> {
        let bad = || format!("not a fence event: {line:?}");
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [seq, at, kind, token, worker] = fields[..] else {
            return Err(bad());
        };
        let at: f64 = at.parse().map_err(|_| bad())?;
        if !at.is_finite() || at < 0.0 {
            return Err(bad());
        }
        Ok(FenceEvent {
            seq: seq.parse().map_err(|_| bad())?,
            at: Duration::from_secs_f64(at),
            kind: kind.parse()?,
            token: token.parse().map_err(|_| bad())?,
            worker: worker.to_owned(),
        })
    }
}

// ---------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------

/// Two holders that both mutated the resource at the same time (see [`FenceReport::check`]).
///
/// # Example
///
/// ```
/// let report = zklock::testing::FenceReport::check(&[]);
/// for o in &report.overlaps {
///     println!("{}#{} and {}#{} both wrote", o.first_worker, o.first_token, o.second_worker, o.second_token);
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The holder whose tenure began first: worker and token.
    pub first_worker: String,
    /// Its token.
    pub first_token: u64,
    /// The other holder.
    pub second_worker: String,
    /// Its token.
    pub second_token: u64,
    /// Index in the log (= `seq` in a register's log) of the first holder's first accepted
    /// write inside the shared interval.
    pub first_write: usize,
    /// Index of the second holder's first accepted write inside the shared interval.
    pub second_write: usize,
}

/// Per-worker counts of a [`FenceReport`].
///
/// # Example
///
/// ```
/// let report = zklock::testing::FenceReport::check(&[]);
/// for (worker, s) in &report.workers {
///     println!("{worker}: {} acquisitions, {} writes accepted", s.acquisitions, s.accepted);
/// }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// `enter` events.
    pub acquisitions: u64,
    /// Accepted writes.
    pub accepted: u64,
    /// Rejected writes.
    pub rejected: u64,
}

/// What [`FenceReport::check`] found in a register's log.
///
/// `Display` prints a short Markdown block: a one-row table, the per-worker counts and any
/// violation.
///
/// # Example
///
/// ```
/// use zklock::testing::{FenceEvent, FenceEventKind::*, FenceReport};
///
/// // A holds token 1; B gets token 2 while A still believes it holds the lock; both write,
/// // and a broken resource accepts A's stale token.
/// let log = [
///     FenceEvent::new(Enter, 1, "A"),
///     FenceEvent::new(Accepted, 1, "A"),
///     FenceEvent::new(Enter, 2, "B"),
///     FenceEvent::new(Accepted, 2, "B"),
///     FenceEvent::new(Accepted, 1, "A"),
/// ];
/// let report = FenceReport::check(&log);
/// assert!(!report.is_clean());
/// assert_eq!(report.overlaps.len(), 1);
/// assert_eq!(report.stale_accepted, [4]);
/// println!("{report}");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FenceReport {
    /// Events checked.
    pub events: usize,
    /// Pairs of holders that both wrote while both were inside.
    pub overlaps: Vec<Overlap>,
    /// Index in the log (= `seq` in a register's log) of every accepted write whose token was
    /// lower than one accepted before it (impossible with a working fence).
    pub stale_accepted: Vec<usize>,
    /// Rejected writes whose token was lower than one accepted before them: stale holders
    /// the fence stopped.
    pub stale_rejected: usize,
    /// Counts per worker name.
    pub workers: BTreeMap<String, WorkerStats>,
}

/// One holder's time inside: from its `enter` (or, without one, its first accepted write) to
/// its `exit` (or the end of the log).
struct Tenure {
    worker: String,
    token: u64,
    start: usize,
    end: usize,
    writes: Vec<usize>,
}

impl FenceReport {
    /// Checks a log; the order of `events` is the serial order (their `seq` and `at` are not
    /// used: hand-made logs may leave them 0).
    ///
    /// A **holder** is a (worker, token) pair. Its **tenure** runs from its `enter` to its
    /// next `exit`, both included; a holder that never exits stays inside until the end of
    /// the log; an accepted write by a holder that is not inside opens a tenure at that write.
    ///
    /// * **Overlap** (violation): two tenures of different holders whose intersection holds an
    ///   accepted write of *each*. Both mutated the resource while both believed they held the
    ///   lock. A stale holder that is still "inside" but whose writes were all rejected is not
    ///   a violation: the fence did its job. Nor are two holders whose tenures overlap while
    ///   only one of them writes (e.g. an old holder that never logged its exit).
    /// * **Stale write accepted** (violation): an accepted write whose token is lower than a
    ///   token accepted earlier.
    /// * **Stale write rejected** (counted): a rejected write whose token is lower than a token
    ///   accepted earlier.
    pub fn check(events: &[FenceEvent]) -> FenceReport {
        let mut report = FenceReport {
            events: events.len(),
            ..FenceReport::default()
        };
        let mut tenures: Vec<Tenure> = Vec::new();
        let mut open: HashMap<(&str, u64), usize> = HashMap::new();
        let mut highest: Option<u64> = None;
        for (i, e) in events.iter().enumerate() {
            let key = (e.worker.as_str(), e.token);
            let stats = report.workers.entry(e.worker.clone()).or_default();
            let stale = highest.is_some_and(|h| e.token < h);
            let open_tenure = |tenures: &mut Vec<Tenure>| {
                tenures.push(Tenure {
                    worker: e.worker.clone(),
                    token: e.token,
                    start: i,
                    end: usize::MAX,
                    writes: Vec::new(),
                });
                tenures.len() - 1
            };
            match e.kind {
                FenceEventKind::Enter => {
                    stats.acquisitions += 1;
                    let t = open_tenure(&mut tenures);
                    open.insert(key, t);
                }
                FenceEventKind::Exit => {
                    if let Some(t) = open.remove(&key) {
                        tenures[t].end = i;
                    }
                }
                FenceEventKind::Accepted => {
                    stats.accepted += 1;
                    if stale {
                        report.stale_accepted.push(i);
                    }
                    highest = highest.max(Some(e.token));
                    let t = match open.get(&key) {
                        Some(&t) => t,
                        None => {
                            let t = open_tenure(&mut tenures);
                            open.insert(key, t);
                            t
                        }
                    };
                    tenures[t].writes.push(i);
                }
                FenceEventKind::Rejected => {
                    stats.rejected += 1;
                    if stale {
                        report.stale_rejected += 1;
                    }
                }
            }
        }
        for (a_i, a) in tenures.iter().enumerate() {
            for b in &tenures[a_i + 1..] {
                if (&a.worker, a.token) == (&b.worker, b.token) {
                    continue;
                }
                let (lo, hi) = (a.start.max(b.start), a.end.min(b.end));
                let within = |t: &Tenure| t.writes.iter().copied().find(|w| (lo..=hi).contains(w));
                if let (Some(wa), Some(wb)) = (within(a), within(b)) {
                    report.overlaps.push(Overlap {
                        first_worker: a.worker.clone(),
                        first_token: a.token,
                        second_worker: b.worker.clone(),
                        second_token: b.token,
                        first_write: wa,
                        second_write: wb,
                    });
                }
            }
        }
        report
    }

    /// Whether the log shows no overlap and no accepted stale write.
    pub fn is_clean(&self) -> bool {
        self.overlaps.is_empty() && self.stale_accepted.is_empty()
    }
}

impl fmt::Display for FenceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let acquisitions: u64 = self.workers.values().map(|w| w.acquisitions).sum();
        let accepted: u64 = self.workers.values().map(|w| w.accepted).sum();
        writeln!(
            f,
            "| events | acquisitions | accepted writes | stale rejected | stale accepted | overlaps | verdict |"
        )?;
        writeln!(f, "|---:|---:|---:|---:|---:|---:|---|")?;
        writeln!(
            f,
            "| {} | {acquisitions} | {accepted} | {} | {} | {} | {} |",
            self.events,
            self.stale_rejected,
            self.stale_accepted.len(),
            self.overlaps.len(),
            if self.is_clean() {
                "clean"
            } else {
                "**VIOLATION**"
            }
        )?;
        writeln!(f)?;
        for (worker, s) in &self.workers {
            writeln!(
                f,
                "- `{worker}`: {} acquisitions, {} writes accepted, {} rejected",
                s.acquisitions, s.accepted, s.rejected
            )?;
        }
        for o in &self.overlaps {
            writeln!(
                f,
                "- overlap: `{}` (token {}) wrote at #{} and `{}` (token {}) at #{} while both were inside",
                o.first_worker, o.first_token, o.first_write, o.second_worker, o.second_token, o.second_write
            )?;
        }
        if !self.stale_accepted.is_empty() {
            writeln!(f, "- stale writes accepted at {:?}", self.stale_accepted)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::FenceEventKind::*;
    use super::*;

    fn log(events: &[(FenceEventKind, u64, &str)]) -> Vec<FenceEvent> {
        events
            .iter()
            .enumerate()
            .map(|(i, (kind, token, worker))| FenceEvent {
                seq: i as u64,
                ..FenceEvent::new(*kind, *token, worker)
            })
            .collect()
    }

    #[test]
    fn events_round_trip_through_text() {
        let e = FenceEvent {
            seq: 12,
            at: Duration::from_micros(1_500_250),
            kind: Rejected,
            token: 99,
            worker: "w-3".into(),
        };
        assert_eq!(e.to_string(), "12 1.500250 rejected 99 w-3");
        assert_eq!(e.to_string().parse::<FenceEvent>(), Ok(e));
        assert!("12 1.5 rejected 99".parse::<FenceEvent>().is_err());
        assert!("12 x rejected 99 w".parse::<FenceEvent>().is_err());
        assert!("12 1.5 written 99 w".parse::<FenceEvent>().is_err());
    }

    #[test]
    fn register_answers_the_line_protocol() {
        let shared = RegisterShared {
            started: Instant::now(),
            state: Mutex::new(RegisterState::default()),
        };
        assert_eq!(shared.handle("READ\n"), "EMPTY");
        assert_eq!(shared.handle("ENTER 5 A\n"), "OK 0");
        assert_eq!(shared.handle("WRITE 5 A x = 1\n"), "OK 1");
        assert_eq!(shared.handle("READ"), "VALUE 5 x = 1");
        assert_eq!(shared.handle("WRITE 4 B y"), "REJECTED 2 5");
        assert_eq!(shared.handle("WRITE 5 A z"), "OK 3");
        assert!(shared.handle("WRITE five A z").starts_with("ERR "));
        assert!(shared.handle("JUMP 5 A").starts_with("ERR "));
        let kinds: Vec<_> = shared.lock().log.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Enter, Accepted, Rejected, Accepted]);
    }

    #[test]
    fn a_writer_without_enter_still_overlaps() {
        let report = FenceReport::check(&log(&[
            (Enter, 1, "A"),
            (Accepted, 2, "B"),
            (Accepted, 2, "A"),
        ]));
        // (A,2) never entered: its tenure opens at its write; B's write is before it, so only
        // a write inside both tenures counts. B is still inside (no exit): (A,2) and B overlap
        // from A's write on, but B wrote before. Not a violation.
        assert!(report.overlaps.is_empty(), "{report}");
        let report = FenceReport::check(&log(&[
            (Accepted, 2, "B"),
            (Accepted, 2, "A"),
            (Accepted, 2, "B"),
        ]));
        assert_eq!(report.overlaps.len(), 1, "{report}");
    }

    #[test]
    fn re_entering_the_same_holder_is_not_an_overlap() {
        let report = FenceReport::check(&log(&[
            (Enter, 3, "A"),
            (Accepted, 3, "A"),
            (Exit, 3, "A"),
            (Enter, 3, "A"),
            (Accepted, 3, "A"),
        ]));
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.workers["A"].acquisitions, 2);
    }
}
