//! [`FaultProxy`]: a userspace TCP proxy in front of one ZooKeeper server that injects network
//! faults on command (delay, silence, lost replies, resets, cut-off sessions), or in front of any
//! TCP server without reading its framing (delay, silence, resets). No root, no `tc`.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{TestingCluster, TestingServer};

/// The xid of a ping and of its reply.
const PING_XID: i32 = -2;
/// A frame longer than this is taken as "not ZooKeeper": the connection is forwarded raw.
const MAX_FRAME: usize = 64 << 20;
/// How long a connection's thread waits to reach the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A TCP proxy on a free `127.0.0.1` port that forwards to one ZooKeeper server and injects
/// faults on command from the test thread.
///
/// It reads ZooKeeper's framing (4-byte big-endian length + body) in both directions, so it
/// knows each connection's **session id** (from the connect request of a reconnect, or from the
/// connect response) and the xid and op code of each request. Faults:
///
/// * [`delay`](Self::delay): hold every frame, both ways, for a while after it arrived before
///   forwarding it (a round trip takes twice the delay more).
/// * [`blackhole`](Self::blackhole): accept and read, forward nothing; sockets stay open, so
///   clients see a silent server (pings go unanswered).
/// * [`drop_replies`](Self::drop_replies) / [`drop_replies_to`](Self::drop_replies_to): the
///   next `n` requests reach the server (which performs them) but their replies are swallowed.
///   Pings (xid -2) and watch notifications (xid -1) never count.
/// * [`reset`](Self::reset): abort every current connection (RST).
/// * [`cut_off`](Self::cut_off): silence one session's current and future connections while
///   other sessions keep the server.
/// * [`restore`](Self::restore) / [`heal`](Self::heal): undo.
///
/// TCP never loses bytes on a live connection, so a connection that was silenced lost frames
/// and cannot carry on: when the silence ends ([`blackhole(false)`](Self::blackhole),
/// [`restore`](Self::restore), [`heal`](Self::heal)) such connections are aborted and clients
/// reconnect. A swallowed reply does not break framing: that connection stays open, and the
/// client waits for the reply until its own deadline or until the connection dies (the
/// `zookeeper-client` crate matches replies by xid and has no per-request timeout; pings keep
/// the connection alive). Follow a dropped reply with [`reset`](Self::reset) to make the
/// client retry, as after a real lost reply.
///
/// [`start_raw`](Self::start_raw) starts a proxy that reads no framing, for a server that does not
/// speak ZooKeeper (PostgreSQL, Redis, MySQL): it forwards bytes as they come, and only
/// `delay`, `blackhole`, `reset` and `heal` apply.
///
/// Dropping the proxy closes its listener and every connection and joins all its threads
/// (named `zkpx-<port>…`) before it returns.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use zklock::testing::{FaultProxy, TestingServer};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = TestingServer::start()?;
/// let proxy = FaultProxy::for_server(&server)?;
/// let client = zklock::Client::builder(&proxy.connect_string())
///     .session_timeout(Duration::from_secs(20))
///     .connect()?;
///
/// proxy.blackhole(true); // the client soon reports Suspended
/// proxy.heal(); // ... and Reconnected
///
/// let session = client.session_id().unwrap();
/// proxy.cut_off(session); // only this session loses the server
/// proxy.restore(session);
///
/// proxy.drop_replies_to(FaultProxy::CREATE_OPS, 1); // the next create is applied, its reply lost
/// # Ok(()) }
/// ```
pub struct FaultProxy {
    shared: Arc<ProxyInner>,
    addr: SocketAddr,
    listener: Option<JoinHandle<()>>,
}

/// Counters of a [`FaultProxy`], from [`FaultProxy::stats`].
///
/// # Example
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// let server = zklock::testing::TestingServer::start()?;
/// let proxy = zklock::testing::FaultProxy::for_server(&server)?;
/// let stats = proxy.stats();
/// println!("{} connections, {} replies dropped", stats.connections_accepted, stats.replies_dropped);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyStats {
    /// Client connections accepted since the proxy started.
    pub connections_accepted: u64,
    /// Client connections open now.
    pub open_connections: usize,
    /// Requests forwarded to the server (not counting connect requests and pings).
    pub requests_forwarded: u64,
    /// Replies swallowed by [`FaultProxy::drop_replies`] / [`FaultProxy::drop_replies_to`].
    pub replies_dropped: u64,
}

impl FaultProxy {
    /// ZooKeeper's op codes of the create family: create (1), create2 (15), createContainer
    /// (19), createTTL (21). For [`drop_replies_to`](Self::drop_replies_to).
    pub const CREATE_OPS: &'static [i32] = &[1, 15, 19, 21];

    /// Starts a proxy on a free `127.0.0.1` port that forwards to `target` (the first address
    /// it resolves to).
    pub fn start(target: impl ToSocketAddrs) -> io::Result<FaultProxy> {
        FaultProxy::start_with(target, false)
    }

    /// Starts a proxy on a free `127.0.0.1` port that forwards to `target` bytes as they come,
    /// reading no framing: [`delay`](Self::delay), [`blackhole`](Self::blackhole),
    /// [`reset`](Self::reset) and [`heal`](Self::heal) apply to any TCP protocol (the
    /// ZooKeeper-only faults do nothing).
    ///
    /// ```no_run
    /// # #[cfg(feature = "postgres")]
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use zklock::testing::{FaultProxy, TestingPostgres};
    ///
    /// let server = TestingPostgres::start()?;
    /// let proxy = FaultProxy::start_raw(("127.0.0.1", server.port()))?;
    /// proxy.delay(Duration::from_micros(250)); // half a millisecond more per round trip
    /// let url = server.url().replace(
    ///     &format!(":{}/", server.port()),
    ///     &format!(":{}/", proxy.addr().port()),
    /// );
    /// let client = zklock::PgClient::connect(&url)?;
    /// # Ok(()) }
    /// # #[cfg(not(feature = "postgres"))]
    /// # fn main() {}
    /// ```
    pub fn start_raw(target: impl ToSocketAddrs) -> io::Result<FaultProxy> {
        FaultProxy::start_with(target, true)
    }

    fn start_with(target: impl ToSocketAddrs, raw: bool) -> io::Result<FaultProxy> {
        let target = target.to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no address to forward to")
        })?;
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(ProxyInner {
            target,
            raw,
            name: format!("zkpx-{}", addr.port()),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            accepted: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        });
        let accepting = shared.clone();
        let listener = thread::Builder::new()
            .name(shared.name.clone())
            .spawn(move || accept_loop(&accepting, listener))?;
        Ok(FaultProxy {
            shared,
            addr,
            listener: Some(listener),
        })
    }

    /// A proxy in front of `server`.
    pub fn for_server(server: &TestingServer) -> io::Result<FaultProxy> {
        FaultProxy::start(("127.0.0.1", server.port()))
    }

    /// One proxy in front of each member of `cluster`, in member order. Join their connect
    /// strings with [`ensemble_connect_string`](Self::ensemble_connect_string).
    pub fn for_cluster(cluster: &TestingCluster) -> io::Result<Vec<FaultProxy>> {
        (0..cluster.len())
            .map(|i| FaultProxy::start(("127.0.0.1", cluster.port(i))))
            .collect()
    }

    /// The connect string of an ensemble reached through `proxies`:
    /// `"127.0.0.1:p1,127.0.0.1:p2,..."`.
    pub fn ensemble_connect_string(proxies: &[FaultProxy]) -> String {
        let hosts: Vec<String> = proxies.iter().map(FaultProxy::connect_string).collect();
        hosts.join(",")
    }

    /// Where clients connect: `"127.0.0.1:PORT"`.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// The proxy's listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server it forwards to.
    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// Holds every frame, both ways, until `d` after it arrived before forwarding it
    /// (`Duration::ZERO`: off): each round trip takes `2 × d` more.
    pub fn delay(&self, d: Duration) {
        self.shared.lock().delay = d;
        self.shared.wake.notify_all();
    }

    /// Silences every connection (`true`) or ends the silence (`false`, which aborts the
    /// connections that lost frames meanwhile).
    pub fn blackhole(&self, on: bool) {
        let mut state = self.shared.lock();
        state.blackhole = on;
        if !on {
            state.abort_broken();
        }
    }

    /// Swallows the replies to the next `n` requests of any kind (pings excepted), counting
    /// across all connections. Replaces an earlier `drop_replies*` budget.
    pub fn drop_replies(&self, n: u32) {
        self.shared.lock().drop = Some(DropRule { ops: None, left: n });
    }

    /// Swallows the replies to the next `n` requests whose op code is in `ops` (e.g.
    /// [`CREATE_OPS`](Self::CREATE_OPS)). The requests still reach the server.
    pub fn drop_replies_to(&self, ops: &[i32], n: u32) {
        self.shared.lock().drop = Some(DropRule {
            ops: Some(ops.to_vec()),
            left: n,
        });
    }

    /// Aborts every current connection: both the client and the server get a TCP reset.
    /// Faults stay as they are; new connections are accepted.
    pub fn reset(&self) {
        let mut state = self.shared.lock();
        let ids: Vec<u64> = state.conns.keys().copied().collect();
        for id in ids {
            state.abort(id);
        }
    }

    /// Silences session `session_id`: its current connections and every later connection that
    /// resumes it (the connect request names the session) or that the server assigns it.
    /// A new session the client opens after this one expired is not affected.
    pub fn cut_off(&self, session_id: i64) {
        self.shared.lock().cut_off.insert(session_id);
    }

    /// Ends [`cut_off`](Self::cut_off) of `session_id`, aborting its connections that lost
    /// frames (the client reconnects).
    pub fn restore(&self, session_id: i64) {
        let mut state = self.shared.lock();
        state.cut_off.remove(&session_id);
        state.abort_broken();
    }

    /// Ends every fault: no delay, no blackhole, no dropped replies, nobody cut off; aborts the
    /// connections that lost frames.
    pub fn heal(&self) {
        let mut state = self.shared.lock();
        state.delay = Duration::ZERO;
        state.blackhole = false;
        state.drop = None;
        state.cut_off.clear();
        state.abort_broken();
        drop(state);
        self.shared.wake.notify_all();
    }

    /// The session ids of the open connections (as far as known: a fresh connection has none
    /// until the server answered it), sorted, without duplicates.
    pub fn sessions(&self) -> Vec<i64> {
        let state = self.shared.lock();
        let mut ids: Vec<i64> = state.conns.values().filter_map(|c| c.session).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The proxy's counters.
    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            connections_accepted: self.shared.accepted.load(Ordering::Relaxed),
            open_connections: self.shared.lock().conns.len(),
            requests_forwarded: self.shared.forwarded.load(Ordering::Relaxed),
            replies_dropped: self.shared.dropped.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stopped = true;
            for conn in state.conns.values() {
                conn.close(Shutdown::Both);
            }
            state.conns.clear();
        }
        self.shared.wake.notify_all();
        // Wake the accept loop, which then sees `stopped`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(listener) = self.listener.take() {
            let _ = listener.join();
        }
        // Connection threads may still spawn their partner until they see `stopped`.
        loop {
            let threads = std::mem::take(&mut self.shared.lock().threads);
            if threads.is_empty() {
                break;
            }
            for t in threads {
                let _ = t.join();
            }
        }
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("target", &self.shared.target)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------

struct ProxyInner {
    target: SocketAddr,
    /// Forward bytes as they come, reading no ZooKeeper framing.
    raw: bool,
    /// Thread-name prefix.
    name: String,
    state: Mutex<State>,
    /// Wakes frames held by a delay (delay changed, or the proxy stops).
    wake: Condvar,
    accepted: AtomicU64,
    forwarded: AtomicU64,
    dropped: AtomicU64,
}

#[derive(Default)]
struct State {
    stopped: bool,
    delay: Duration,
    blackhole: bool,
    drop: Option<DropRule>,
    cut_off: HashSet<i64>,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    threads: Vec<JoinHandle<()>>,
}

struct DropRule {
    /// `None`: any op.
    ops: Option<Vec<i32>>,
    left: u32,
}

/// One proxied connection, as the forwarding threads and the fault commands see it.
struct Conn {
    client: TcpStream,
    server: Option<TcpStream>,
    session: Option<i64>,
    /// Frames were swallowed by a silence: the byte stream can no longer carry on.
    broken: bool,
    /// Requests whose replies are to be swallowed.
    doomed_xids: HashSet<i32>,
}

impl Conn {
    fn close(&self, how: Shutdown) {
        let _ = self.client.shutdown(how);
        if let Some(server) = &self.server {
            let _ = server.shutdown(how);
        }
    }
}

impl State {
    /// Aborts connection `id` with a reset (SO_LINGER 0, then the forwarding threads end and
    /// close the sockets).
    fn abort(&mut self, id: u64) {
        if let Some(conn) = self.conns.remove(&id) {
            set_linger_zero(&conn.client);
            if let Some(server) = &conn.server {
                set_linger_zero(server);
            }
            // Shutting down the read half wakes the threads without sending anything; the
            // last close then sends the RST.
            conn.close(Shutdown::Read);
        }
    }

    /// Aborts the connections that lost frames and are no longer silenced.
    fn abort_broken(&mut self) {
        let broken: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.broken && !self.blackhole && !c.session.is_some_and(|s| self.cut_off.contains(&s))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in broken {
            self.abort(id);
        }
    }
}

impl ProxyInner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spawn(&self, state: &mut State, suffix: &str, f: impl FnOnce() + Send + 'static) -> bool {
        state.threads.retain(|t| !t.is_finished());
        match thread::Builder::new()
            .name(format!("{}-{suffix}", self.name))
            .spawn(f)
        {
            Ok(t) => {
                state.threads.push(t);
                true
            }
            Err(e) => {
                tracing::warn!("FaultProxy: cannot start a thread: {e}");
                false
            }
        }
    }

    /// What to do with one frame (`body` without its length) going `dir` on connection `id`.
    fn verdict(&self, id: u64, dir: Dir, body: Option<&[u8]>, first: bool) -> Verdict {
        let mut state = self.lock();
        let state = &mut *state;
        let Some(conn) = state.conns.get_mut(&id) else {
            return Verdict::Close;
        };
        let frame = body.map(|b| match dir {
            Dir::Up => parse_request(b, first),
            Dir::Down => parse_reply(b, first),
        });
        if let Some(Frame::Connect { session_id }) = frame {
            if session_id != 0 {
                conn.session = Some(session_id);
            }
        }
        let silenced = state.blackhole
            || conn.broken
            || conn.session.is_some_and(|s| state.cut_off.contains(&s));
        if silenced {
            conn.broken = true;
            return Verdict::Swallow;
        }
        match (dir, frame) {
            (Dir::Up, Some(Frame::Op { xid, op })) if xid != PING_XID => {
                self.forwarded.fetch_add(1, Ordering::Relaxed);
                if let Some(rule) = &mut state.drop {
                    let wanted = rule.ops.as_ref().is_none_or(|ops| ops.contains(&op));
                    if xid >= 0 && wanted && rule.left > 0 {
                        rule.left -= 1;
                        conn.doomed_xids.insert(xid);
                    }
                }
            }
            (Dir::Down, Some(Frame::Op { xid, .. })) if conn.doomed_xids.remove(&xid) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return Verdict::Swallow;
            }
            _ => {}
        }
        Verdict::Forward
    }

    /// Waits until `received + delay` (as the delay is now), or until the proxy stops.
    fn hold(&self, received: Instant) {
        let mut state = self.lock();
        loop {
            let due = received + state.delay;
            let now = Instant::now();
            if state.stopped || now >= due {
                return;
            }
            state = self
                .wake
                .wait_timeout(state, due - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Closes connection `id` gracefully after one side closed it (a no-op once aborted).
    fn finish(&self, id: u64) {
        if let Some(conn) = self.lock().conns.remove(&id) {
            conn.close(Shutdown::Both);
        }
    }
}

fn set_linger_zero(stream: &TcpStream) {
    if let Err(e) = rustix::net::sockopt::set_socket_linger(stream, Some(Duration::ZERO)) {
        tracing::debug!("FaultProxy: SO_LINGER: {e}");
    }
}

// ---------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------

fn accept_loop(shared: &Arc<ProxyInner>, listener: TcpListener) {
    for client in listener.incoming() {
        let mut state = shared.lock();
        if state.stopped {
            return;
        }
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                drop(state);
                tracing::debug!("FaultProxy: accept: {e}");
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        let Ok(registered) = client.try_clone() else {
            continue;
        };
        let id = state.next_id;
        state.next_id += 1;
        state.conns.insert(
            id,
            Conn {
                client: registered,
                server: None,
                session: None,
                broken: false,
                doomed_xids: HashSet::new(),
            },
        );
        let conn_shared = shared.clone();
        let started = shared.spawn(&mut state, &format!("{id}u"), move || {
            serve(&conn_shared, id, client)
        });
        if !started {
            state.conns.remove(&id);
        }
    }
}

/// Connects to the server, starts the server→client thread, forwards client→server.
fn serve(shared: &Arc<ProxyInner>, id: u64, client: TcpStream) {
    let server = match TcpStream::connect_timeout(&shared.target, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("FaultProxy: cannot reach {}: {e}", shared.target);
            shared.finish(id);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(server_reader), Ok(client_writer), Ok(registered)) =
        (server.try_clone(), client.try_clone(), server.try_clone())
    else {
        shared.finish(id);
        return;
    };
    {
        let mut state = shared.lock();
        if state.stopped {
            return;
        }
        let Some(conn) = state.conns.get_mut(&id) else {
            return; // reset while we connected
        };
        conn.server = Some(registered);
        let down_shared = shared.clone();
        let started = shared.spawn(&mut state, &format!("{id}d"), move || {
            pump(&down_shared, id, Dir::Down, server_reader, client_writer)
        });
        if !started {
            drop(state);
            shared.finish(id);
            return;
        }
    }
    pump(shared, id, Dir::Up, client, server);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// Client to server: requests.
    Up,
    /// Server to client: replies and notifications.
    Down,
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Forward,
    Swallow,
    Close,
}

/// Forwards frames from `from` to `to` until either side closes, then closes the connection.
fn pump(shared: &Arc<ProxyInner>, id: u64, dir: Dir, from: TcpStream, mut to: TcpStream) {
    // Bytes are read on a thread of their own and stamped with when they came, so that a delay
    // holds each until `delay` after it came, not after the bytes before it left.
    let (stamped, chunks) = mpsc::channel();
    {
        let mut state = shared.lock();
        let suffix = match dir {
            Dir::Up => format!("{id}ur"),
            Dir::Down => format!("{id}dr"),
        };
        // Only while the connection is open: closing it (here or in `Drop`) ends the reader.
        let open = !state.stopped && state.conns.contains_key(&id);
        if !open || !shared.spawn(&mut state, &suffix, move || read_stamped(from, &stamped)) {
            drop(state);
            shared.finish(id);
            return;
        }
    }
    let mut buf = Vec::new();
    let mut first = true;
    let mut raw = shared.raw;
    'read: while let Ok((received, chunk)) = chunks.recv() {
        buf.extend_from_slice(&chunk);
        loop {
            let len = if raw {
                buf.len()
            } else {
                match frame_len(&buf) {
                    Ok(Some(len)) => len,
                    Ok(None) => break,
                    Err(()) => {
                        tracing::debug!("FaultProxy: not ZooKeeper framing; forwarding raw");
                        raw = true;
                        buf.len()
                    }
                }
            };
            if len == 0 {
                break;
            }
            let body = (!raw).then(|| &buf[4..len]);
            match shared.verdict(id, dir, body, first) {
                Verdict::Forward => {
                    shared.hold(received);
                    // A reset while the frame was held must not let it through.
                    if !shared.lock().conns.contains_key(&id) || to.write_all(&buf[..len]).is_err()
                    {
                        break 'read;
                    }
                }
                Verdict::Swallow => {}
                Verdict::Close => break 'read,
            }
            first = false;
            buf.drain(..len);
        }
    }
    shared.finish(id);
}

/// Reads `from` until it closes, sending each chunk with the time it came.
fn read_stamped(mut from: TcpStream, to: &mpsc::Sender<(Instant, Vec<u8>)>) {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.send((Instant::now(), chunk[..n].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// ZooKeeper framing
// ---------------------------------------------------------------------------

/// The length (header included) of the complete frame at the start of `buf`; `Ok(None)` when
/// it is not complete yet; `Err` when the length is not plausible for ZooKeeper.
fn frame_len(buf: &[u8]) -> Result<Option<usize>, ()> {
    let Some(header) = buf.get(..4) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let len = usize::try_from(len).map_err(|_| ())?;
    if len > MAX_FRAME {
        return Err(());
    }
    Ok((buf.len() >= 4 + len).then_some(4 + len))
}

/// What the proxy needs to know of a frame.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Frame {
    /// A connect request (`session_id` 0 for a new session) or connect response.
    Connect { session_id: i64 },
    /// A request (`op` its op code) or a reply (`op` 0).
    Op { xid: i32, op: i32 },
    /// Too short to say.
    Unknown,
}

fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A client frame. The first is the connect request: protocolVersion i32, lastZxidSeen i64,
/// timeOut i32, sessionId i64, passwd...; later ones start with xid i32, op type i32.
fn parse_request(body: &[u8], first: bool) -> Frame {
    let parsed = if first {
        be_i64(body, 16).map(|session_id| Frame::Connect { session_id })
    } else {
        be_i32(body, 0)
            .zip(be_i32(body, 4))
            .map(|(xid, op)| Frame::Op { xid, op })
    };
    parsed.unwrap_or(Frame::Unknown)
}

/// A server frame. The first is the connect response: protocolVersion i32, timeOut i32,
/// sessionId i64, passwd...; later ones start with xid i32, zxid i64, err i32.
fn parse_reply(body: &[u8], first: bool) -> Frame {
    let parsed = if first {
        be_i64(body, 8).map(|session_id| Frame::Connect { session_id })
    } else {
        be_i32(body, 0).map(|xid| Frame::Op { xid, op: 0 })
    };
    parsed.unwrap_or(Frame::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    fn connect_request(session: i64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0i32.to_be_bytes()); // protocolVersion
        b.extend_from_slice(&77i64.to_be_bytes()); // lastZxidSeen
        b.extend_from_slice(&30_000i32.to_be_bytes()); // timeOut
        b.extend_from_slice(&session.to_be_bytes());
        b.extend_from_slice(&16i32.to_be_bytes()); // passwd length
        b.extend_from_slice(&[7u8; 16]);
        b.push(0); // readOnly
        b
    }

    fn connect_response(session: i64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0i32.to_be_bytes()); // protocolVersion
        b.extend_from_slice(&20_000i32.to_be_bytes()); // timeOut
        b.extend_from_slice(&session.to_be_bytes());
        b.extend_from_slice(&16i32.to_be_bytes());
        b.extend_from_slice(&[9u8; 16]);
        b.push(0);
        b
    }

    #[test]
    fn frame_len_waits_for_a_whole_frame() {
        let f = frame(b"hello");
        assert_eq!(frame_len(&f[..3]), Ok(None));
        assert_eq!(frame_len(&f[..6]), Ok(None));
        assert_eq!(frame_len(&f), Ok(Some(9)));
        let mut two = f.clone();
        two.extend_from_slice(&frame(b"x"));
        assert_eq!(frame_len(&two), Ok(Some(9)));
        assert_eq!(frame_len(&frame(b"")), Ok(Some(4)));
    }

    #[test]
    fn frame_len_refuses_implausible_lengths() {
        assert_eq!(frame_len(&(-1i32).to_be_bytes()), Err(()));
        assert_eq!(frame_len(&(i32::MAX).to_be_bytes()), Err(()));
        // A four-letter word is not a frame either.
        assert_eq!(frame_len(b"srvr"), Err(()));
    }

    #[test]
    fn connect_frames_carry_the_session_id() {
        let session = 0x1234_5678_9abc_def0;
        assert_eq!(
            parse_request(&connect_request(session), true),
            Frame::Connect {
                session_id: session
            }
        );
        assert_eq!(
            parse_request(&connect_request(0), true),
            Frame::Connect { session_id: 0 }
        );
        assert_eq!(
            parse_reply(&connect_response(session), true),
            Frame::Connect {
                session_id: session
            }
        );
        assert_eq!(parse_request(&[0; 10], true), Frame::Unknown);
        assert_eq!(parse_reply(&[0; 10], true), Frame::Unknown);
    }

    #[test]
    fn requests_and_replies_carry_xid_and_op() {
        let mut create = Vec::new();
        create.extend_from_slice(&42i32.to_be_bytes());
        create.extend_from_slice(&15i32.to_be_bytes());
        create.extend_from_slice(b"path...");
        assert_eq!(parse_request(&create, false), Frame::Op { xid: 42, op: 15 });
        let mut reply = Vec::new();
        reply.extend_from_slice(&42i32.to_be_bytes());
        reply.extend_from_slice(&99i64.to_be_bytes());
        reply.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(parse_reply(&reply, false), Frame::Op { xid: 42, op: 0 });
        let ping = [(-2i32).to_be_bytes(), 11i32.to_be_bytes()].concat();
        assert_eq!(
            parse_request(&ping, false),
            Frame::Op {
                xid: PING_XID,
                op: 11
            }
        );
        assert_eq!(parse_request(&[0, 0, 0], false), Frame::Unknown);
    }

    fn with_conn(shared: &ProxyInner, session: Option<i64>) -> u64 {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut state = shared.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.conns.insert(
            id,
            Conn {
                client,
                server: None,
                session,
                broken: false,
                doomed_xids: HashSet::new(),
            },
        );
        id
    }

    fn shared() -> ProxyInner {
        ProxyInner {
            target: "127.0.0.1:1".parse().unwrap(),
            raw: false,
            name: "zkpx-test".into(),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            accepted: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn op(xid: i32, op: i32) -> Vec<u8> {
        [xid.to_be_bytes(), op.to_be_bytes()].concat()
    }

    #[test]
    fn only_replies_to_chosen_requests_are_dropped() {
        let s = shared();
        let id = with_conn(&s, Some(5));
        s.lock().drop = Some(DropRule {
            ops: Some(FaultProxy::CREATE_OPS.to_vec()),
            left: 1,
        });
        // A ping and a getData do not count; the create does; the next create does not.
        for (xid, code) in [(PING_XID, 11), (3, 4), (4, 15), (5, 1)] {
            assert_eq!(
                s.verdict(id, Dir::Up, Some(&op(xid, code)), false),
                Verdict::Forward
            );
        }
        let reply = |xid: i32| [xid.to_be_bytes().to_vec(), vec![0; 12]].concat();
        for (xid, want) in [
            (PING_XID, Verdict::Forward),
            (-1, Verdict::Forward),
            (3, Verdict::Forward),
            (4, Verdict::Swallow),
            (5, Verdict::Forward),
        ] {
            assert_eq!(s.verdict(id, Dir::Down, Some(&reply(xid)), false), want);
        }
        assert_eq!(s.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(s.forwarded.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn cut_off_sessions_are_silenced_and_broken() {
        let s = shared();
        let other = with_conn(&s, None);
        let fresh = with_conn(&s, None);
        s.lock().cut_off.insert(7);
        // A reconnect naming session 7 is swallowed from its connect request on.
        assert_eq!(
            s.verdict(fresh, Dir::Up, Some(&connect_request(7)), true),
            Verdict::Swallow
        );
        // Another session learnt from the connect response is forwarded.
        assert_eq!(
            s.verdict(other, Dir::Up, Some(&connect_request(0)), true),
            Verdict::Forward
        );
        assert_eq!(
            s.verdict(other, Dir::Down, Some(&connect_response(8)), true),
            Verdict::Forward
        );
        let state = s.lock();
        assert!(state.conns[&fresh].broken);
        assert_eq!(state.conns[&fresh].session, Some(7));
        assert!(!state.conns[&other].broken);
        assert_eq!(state.conns[&other].session, Some(8));
    }

    /// An echo server on a free port: sends back whatever it reads, on each connection.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                thread::spawn(move || {
                    let mut back = conn.try_clone().unwrap();
                    let _ = io::copy(&mut conn, &mut back);
                });
            }
        });
        addr
    }

    #[test]
    fn a_raw_proxy_forwards_bytes_that_are_no_zookeeper_frame_with_its_delay() {
        let proxy = FaultProxy::start_raw(echo()).unwrap();
        let delay = Duration::from_millis(25);
        proxy.delay(delay);
        let mut conn = TcpStream::connect(proxy.addr()).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        // A PostgreSQL SSLRequest: its length counts itself, so as a ZooKeeper frame it would
        // be incomplete, and wait for bytes that never come.
        let request = [0, 0, 0, 8, 4, 210, 22, 47];
        let sent = Instant::now();
        conn.write_all(&request).unwrap();
        let mut back = [0u8; 8];
        conn.read_exact(&mut back).unwrap();
        let took = sent.elapsed();
        println!("a round trip through the proxy with a delay of {delay:?}: {took:?}");
        assert_eq!(back, request);
        assert!(took >= delay * 2, "{took:?}");
    }

    #[test]
    fn a_delay_holds_each_chunk_from_when_it_came() {
        let proxy = FaultProxy::start_raw(echo()).unwrap();
        let delay = Duration::from_millis(500);
        proxy.delay(delay);
        let mut conn = TcpStream::connect(proxy.addr()).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let sent = Instant::now();
        conn.write_all(b"a").unwrap();
        thread::sleep(Duration::from_millis(100));
        conn.write_all(b"b").unwrap();
        let mut back = [0u8; 1];
        for want in [b'a', b'b'] {
            conn.read_exact(&mut back).unwrap();
            assert_eq!(back[0], want);
        }
        // "b" came 100 ms after "a": held from then each way, it is back 2 × 500 + 100 ms after
        // "a" was sent; held from when "a" left the proxy instead, after 3 × 500 ms.
        let took = sent.elapsed();
        println!("two chunks 100 ms apart, the second back after {took:?}");
        assert!(took >= delay * 2, "{took:?}");
        assert!(took < delay * 2 + Duration::from_millis(300), "{took:?}");
    }
}
