//! [`SlowProxy`]: a TCP proxy on loopback whose client-to-server bytes can be held, each chunk
//! for the delay in force when it came, so that a request sent while the proxy is slow reaches
//! the server after one sent on another connection once it is fast again — a renewal in
//! flight, overtaken by a release. Server-to-client bytes pass at once.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The proxy; dropping it closes every connection.
pub struct SlowProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// The delay given to a chunk that comes now, in microseconds.
    delay: AtomicU64,
    /// Chunks that came while the delay was not zero.
    held: AtomicU64,
    /// Chunks that came and are not yet forwarded.
    pending: AtomicU64,
    stop: AtomicBool,
    /// Every socket, shut down when the proxy is dropped.
    sockets: Mutex<Vec<TcpStream>>,
}

impl SlowProxy {
    /// A proxy on a free `127.0.0.1` port forwarding to `127.0.0.1:port`.
    pub fn start(port: u16) -> SlowProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("a free port");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                forward(&accepting, client, server);
            }
        });
        SlowProxy { addr, shared }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Holds each chunk a client sends from now on for `d` (zero: none).
    pub fn set_delay(&self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay.store(micros, Ordering::SeqCst);
    }

    /// How many chunks came while the proxy was slow.
    pub fn held(&self) -> u64 {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// How many chunks came and are not forwarded yet.
    pub fn pending(&self) -> u64 {
        self.shared.pending.load(Ordering::SeqCst)
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for s in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        // Wakes the accept loop, which then sees the stop.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Three threads per connection: one reads the client and stamps each chunk with when it is
/// due, one writes the chunks to the server when due (in order), one copies the answers back.
fn forward(shared: &Arc<Shared>, client: TcpStream, server: TcpStream) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(mut from_client), Ok(mut to_server), Ok(mut from_server), Ok(mut to_client)) = (
        client.try_clone(),
        server.try_clone(),
        server.try_clone(),
        client.try_clone(),
    ) else {
        return;
    };
    shared.sockets.lock().unwrap().extend([client, server]);
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reading = shared.clone();
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_client.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let delay = Duration::from_micros(reading.delay.load(Ordering::SeqCst));
            if !delay.is_zero() {
                reading.held.fetch_add(1, Ordering::SeqCst);
            }
            reading.pending.fetch_add(1, Ordering::SeqCst);
            if tx
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    });
    let writing = shared.clone();
    thread::spawn(move || {
        for (due, chunk) in rx {
            let wait = due.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                thread::sleep(wait);
            }
            let sent = to_server.write_all(&chunk);
            writing.pending.fetch_sub(1, Ordering::SeqCst);
            if sent.is_err() {
                let _ = to_server.shutdown(Shutdown::Both);
                return;
            }
        }
        let _ = to_server.shutdown(Shutdown::Write);
    });
    thread::spawn(move || {
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Both);
    });
}
