//! [`FencedRegister`]: a loopback service that keeps one value, refuses writes carrying a stale
//! fencing token, and logs every event for [`FenceReport::check`].

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
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

fn protocol_error(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

mod client;
mod events;
mod report;
#[cfg(test)]
mod tests;

pub use self::client::{FenceClient, WriteOutcome};
pub use self::events::{FenceEvent, FenceEventKind};
pub use self::report::{FenceReport, Overlap, WorkerStats};
