//! ZooKeeper's four-letter words over a plain socket.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Connect, write and read timeout of a four-letter-word exchange.
pub(super) const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(2);

/// Sends the four-letter word `cmd` to `127.0.0.1:port` and reads the answer to
/// EOF, with [`FOUR_LETTER_TIMEOUT`] for the whole exchange.
pub(super) fn four_letter(port: u16, cmd: &str) -> io::Result<String> {
    if cmd.len() != 4 || !cmd.is_ascii() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a four-letter word: {cmd:?}"),
        ));
    }
    let timed_out = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("`{cmd}` to 127.0.0.1:{port}: no answer within {FOUR_LETTER_TIMEOUT:?}"),
        )
    };
    let deadline = Instant::now() + FOUR_LETTER_TIMEOUT;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream =
        TcpStream::connect_timeout(&addr, FOUR_LETTER_TIMEOUT).map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => timed_out(),
            _ => e,
        })?;
    stream.set_write_timeout(Some(FOUR_LETTER_TIMEOUT))?;
    stream
        .write_all(cmd.as_bytes())
        .map_err(|e| match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => timed_out(),
            _ => e,
        })?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                return Err(timed_out())
            }
            // A server that closes right after answering may reset the connection.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset && !answer.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// The `Mode:` of a `srvr` answer (`standalone`, `leader`, `follower`, `observer`).
pub(super) fn mode(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode:"))
        .map(str::trim)
}
