//! [`SilentListener`]: a host that accepts connections and never answers, as one powered
//! off behind a network that drops its packets, or a frozen process, looks to a client.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// A listener on a free `127.0.0.1` port that accepts every connection, reads and discards
/// what it is sent, and never writes a byte nor closes a connection while it runs: the
/// silent node of a high-availability test, put in a URL's host list in place of one
/// sentinel, one PostgreSQL host or one replica. A client's TCP connection succeeds at once;
/// its first read waits until its own timeout. Nothing refuses, nothing resets.
///
/// [`accepted`](Self::accepted) counts the connections it took (how often a client tried
/// it). Dropping it closes the listener and every connection (the peers then read their
/// end) and joins its thread.
///
/// # Example
/// ```no_run
/// use zklock::testing::SilentListener;
///
/// let silent = SilentListener::start()?;
/// // The first sentinel of the URL never answers.
/// let url = format!("redis+sentinel://{},127.0.0.1:26379/mymaster", silent.addr());
/// println!("{url}; {} connections tried it", silent.accepted());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct SilentListener {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What the listener's thread and the handle share.
struct Shared {
    stop: AtomicBool,
    accepted: AtomicU64,
    /// The connections taken, kept open until the listener is dropped.
    conns: Mutex<Vec<TcpStream>>,
}

/// How often the listener's thread looks for a new connection or the stop.
const POLL: Duration = Duration::from_millis(5);

impl SilentListener {
    /// Starts the listener on a free `127.0.0.1` port.
    ///
    /// # Errors
    /// When no port can be bound or the thread cannot be started.
    pub fn start() -> io::Result<SilentListener> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            conns: Mutex::new(Vec::new()),
        });
        let running = shared.clone();
        let thread = thread::Builder::new()
            .name(format!("zksilent-{}", addr.port()))
            .spawn(move || run(&listener, &running))?;
        Ok(SilentListener {
            addr,
            shared,
            thread: Some(thread),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// How many connections it has accepted since it started.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }
}

/// Accepts and keeps connections, and drains what they send (so that no sender blocks on a
/// full buffer and learns something), until told to stop.
fn run(listener: &TcpListener, shared: &Shared) {
    let mut sink = [0u8; 4096];
    while !shared.stop.load(Ordering::Acquire) {
        let mut idle = true;
        // An error is nothing to accept now, or a connection that ended before it was taken.
        if let Ok((conn, _)) = listener.accept() {
            if conn.set_nonblocking(true).is_ok() {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                lock(shared).push(conn);
                idle = false;
            }
        }
        for mut conn in lock(shared).iter() {
            while let Ok(1..) = conn.read(&mut sink) {
                idle = false;
            }
        }
        if idle {
            thread::sleep(POLL);
        }
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Vec<TcpStream>> {
    shared
        .conns
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for SilentListener {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        lock(&self.shared).clear();
    }
}

impl std::fmt::Debug for SilentListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SilentListener")
            .field("addr", &self.addr)
            .field("accepted", &self.accepted())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    #[test]
    fn a_silent_listener_accepts_reads_and_never_answers() {
        let silent = SilentListener::start().unwrap();
        let mut conn = TcpStream::connect(silent.addr()).unwrap();
        conn.write_all(b"PING\r\n").unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 16];
        let e = conn.read(&mut buf).expect_err("no answer");
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{e}"
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while silent.accepted() < 1 {
            assert!(
                Instant::now() < deadline,
                "the connection was never accepted"
            );
            thread::sleep(Duration::from_millis(5));
        }
        drop(silent);
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        // Dropped: the connection ends (EOF or a reset), it does not hang.
        assert!(!matches!(conn.read(&mut buf), Ok(1..)));
    }
}
