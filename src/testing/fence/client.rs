//! [`FenceClient`]: the register's line protocol, from any process.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};

use super::*;

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
