//! A caller's thread drives its own PostgreSQL session while it waits for a statement's answer,
//! as the synchronous `postgres` crate does: it writes the request and reads the answer on the
//! session's socket itself, where a task on the Client's I/O thread would take each answer and
//! wake it (two thread wake-ups per round trip, which on a small machine take cores from the
//! server). Between a caller's statements a session's connection is polled by its monitor, a
//! task on the Client's runtime, which carries the heartbeats and sees a terminated backend at
//! once.
//!
//! * [`block_on`] runs a blocking call's future on the calling thread: it polls the future,
//!   then sleeps in `poll(2)` on the sockets the future found not ready and on an eventfd that
//!   the future's waker writes (a timer, a channel, a cancel from another thread).
//! * [`Socket`] is a session's socket, non-blocking. Read or written on a thread in `block_on`,
//!   a socket that is not ready is added to that thread's `poll`; anywhere else (the monitor, on
//!   the Client's runtime) it waits in the Client's [`Watch`], armed only while the monitor has
//!   it.
//! * [`Watch`] is one epoll set per Client, itself registered once with the runtime's reactor.
//!   Arming a socket there when the monitor gets it back, and disarming it when a caller takes
//!   it, is one `epoll_ctl` each way, where registering the socket itself with the reactor and
//!   taking it out again would be two each way, with the reactor's own bookkeeping, and would
//!   wake the reactor's thread every sixteenth time to free a slot.
//! * [`Conn`] keeps a session's connection: its monitor polls it, and a caller's statement
//!   ([`Conn::drive`]) takes it for as long as the statement waits, then hands it back.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::task::{ready, Context, Poll, Wake, Waker};

use parking_lot::Mutex;
use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::event::{PollFd, PollFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// How a thread in [`block_on`] is woken: an eventfd, written only while the thread sleeps.
struct Alarm {
    fd: OwnedFd,
    state: AtomicU8,
}

/// The thread polls its future: a wake needs no write, only a note to poll again.
const POLLING: u8 = 0;
/// Woken while polling: poll again before sleeping.
const NOTED: u8 = 1;
/// In `poll(2)`, or about to be: a wake writes the eventfd.
const SLEEPING: u8 = 2;
/// Woken while sleeping: the eventfd was written.
const RUNG: u8 = 3;

impl Wake for Alarm {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            let next = match state {
                POLLING => NOTED,
                SLEEPING => RUNG,
                _ => return,
            };
            match self
                .state
                .compare_exchange(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if next == RUNG {
                        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
                    }
                    return;
                }
                Err(now) => state = now,
            }
        }
    }
}

impl Alarm {
    fn new() -> io::Result<Arc<Alarm>> {
        let fd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )?;
        Ok(Arc::new(Alarm {
            fd,
            state: AtomicU8::new(POLLING),
        }))
    }

    fn drain(&self) {
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut buf);
    }
}

/// Sockets a thread in `block_on` waits on, each with what it waits for.
type Wanted = Vec<(Arc<Shared>, PollFlags)>;

thread_local! {
    /// This thread's alarm, made on its first `block_on`.
    static ALARM: RefCell<Option<Arc<Alarm>>> = const { RefCell::new(None) };
    /// The sockets the future in this thread's `block_on` found not ready while it was last
    /// polled; `None` outside `block_on`.
    static WANTED: RefCell<Option<Wanted>> = const { RefCell::new(None) };
}

/// Whether the calling thread is in [`block_on`], so that a socket it reads waits in its
/// `poll`.
fn in_block_on() -> bool {
    WANTED.with(|w| w.borrow().is_some())
}

/// Has the calling thread's `block_on` wait for `sock` to be ready for `flags`.
fn want(sock: &Arc<Shared>, flags: PollFlags) {
    WANTED.with(|w| {
        if let Some(wanted) = w.borrow_mut().as_mut() {
            wanted.push((sock.clone(), flags));
        }
    });
}

/// Ends `block_on`'s mark on the thread, however it ends.
struct InBlockOn;

impl Drop for InBlockOn {
    fn drop(&mut self) {
        WANTED.with(|w| *w.borrow_mut() = None);
    }
}

/// Runs `f` to its end on the calling thread, within `handle`'s runtime (its timers, its
/// tasks): the thread drives the sockets of the sessions `f` waits on itself (see the module's
/// docs). Falls back to `handle.block_on` on a thread that cannot make an eventfd, or that is
/// in a `block_on` already.
pub(crate) fn block_on<F: Future>(handle: &tokio::runtime::Handle, f: F) -> F::Output {
    let alarm = ALARM.with(|a| {
        let mut a = a.borrow_mut();
        if a.is_none() {
            *a = Alarm::new().ok();
        }
        a.clone()
    });
    let Some(alarm) = alarm.filter(|_| !in_block_on()) else {
        return handle.block_on(f);
    };
    let _runtime = handle.enter();
    WANTED.with(|w| *w.borrow_mut() = Some(Vec::new()));
    let _mark = InBlockOn;
    let waker = Waker::from(alarm.clone());
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    // Kept across the waits, so that a wait allocates nothing.
    let mut wanted = Vec::new();
    loop {
        alarm.state.store(POLLING, Ordering::Release);
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        WANTED.with(|w| std::mem::swap(&mut wanted, w.borrow_mut().as_mut().expect("marked")));
        if alarm
            .state
            .compare_exchange(POLLING, SLEEPING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            wanted.clear();
            continue;
        }
        match wanted.as_slice() {
            // The usual wait: one socket, whose fds need no allocation.
            [(sock, flags)] => {
                let mut fds = [
                    PollFd::new(&**sock, *flags),
                    PollFd::new(&alarm.fd, PollFlags::IN),
                ];
                sleep(&mut fds);
                if !fds[0].revents().is_empty() {
                    sock.readable.store(true, Ordering::Relaxed);
                }
            }
            _ => {
                let mut fds: Vec<PollFd<'_>> = wanted
                    .iter()
                    .map(|(sock, flags)| PollFd::new(&**sock, *flags))
                    .chain([PollFd::new(&alarm.fd, PollFlags::IN)])
                    .collect();
                sleep(&mut fds);
                for (fd, (sock, _)) in fds.iter().zip(&wanted) {
                    if !fd.revents().is_empty() {
                        sock.readable.store(true, Ordering::Relaxed);
                    }
                }
            }
        }
        wanted.clear();
        if alarm.state.swap(POLLING, Ordering::AcqRel) == RUNG {
            alarm.drain();
        }
    }
}

/// `poll(2)` on `fds` until one is ready (or a signal).
fn sleep(fds: &mut [PollFd<'_>]) {
    if let Err(e) = rustix::event::poll(fds, None) {
        if e != rustix::io::Errno::INTR {
            tracing::debug!("zklock: poll failed ({e}); trying again");
            std::thread::yield_now();
        }
    }
}

/// The most one read takes: the buffer tokio-postgres hands over is 8 KB, and zeroing all of
/// it for every read of an answer of a few hundred bytes costs more than the read.
const READ_CHUNK: usize = 2048;

/// A session's socket to the server.
pub(crate) enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsFd for Sock {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Sock::Tcp(s) => s.as_fd(),
            Sock::Unix(s) => s.as_fd(),
        }
    }
}

/// A socket and what a caller last learnt of it.
pub(crate) struct Shared {
    sock: Sock,
    /// A read may find data: false after a read found none, until a caller's `poll` or the
    /// watch says otherwise, or a caller takes the socket from the monitor. It spares a read
    /// that would fail.
    readable: AtomicBool,
    /// The Client's watch, and this socket's number in it.
    watch: Arc<Watch>,
    id: u64,
    /// What the socket is armed for in the watch (`EventFlags` bits), 0 when disarmed: the
    /// watch fired, a caller took the socket, or the session closed.
    armed: AtomicU32,
    /// Woken when the watch fires: the monitor's waker, as of its last wait.
    waker: Mutex<Option<Waker>>,
}

impl Shared {
    /// Has the watch wake `cx` once the socket is ready for `flags` (or whatever it was armed
    /// for already). Readiness that came before is reported at once: `epoll_ctl` looks.
    fn arm(&self, cx: &Context<'_>, flags: EventFlags) -> io::Result<()> {
        {
            let mut waker = self.waker.lock();
            match &mut *waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                other => *other = Some(cx.waker().clone()),
            }
        }
        let before = self.armed.fetch_or(flags.bits(), Ordering::AcqRel);
        if before & flags.bits() == flags.bits() {
            // Armed for it already, and the watch clears `armed` before it wakes.
            return Ok(());
        }
        self.set(EventFlags::from_bits_retain(before | flags.bits()) | EventFlags::RDHUP)
            .map_err(io::Error::from)
    }

    /// What the watch waits for on this socket, once (`EPOLLONESHOT`); nothing if `flags` is
    /// empty.
    fn set(&self, flags: EventFlags) -> rustix::io::Result<()> {
        let once = flags | EventFlags::ONESHOT;
        epoll::modify(
            &self.watch.epoll,
            &self.sock,
            EventData::new_u64(self.id),
            once,
        )
    }

    /// Shuts the socket down both ways: the server reads its end, and every read or write of
    /// it fails from now on.
    fn shutdown(&self) {
        let how = std::net::Shutdown::Both;
        let shut = match &self.sock {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix(s) => s.shutdown(how),
        };
        if let Err(e) = shut {
            if e.kind() != io::ErrorKind::NotConnected {
                tracing::debug!("zklock: shutting a PostgreSQL socket down failed: {e}");
            }
        }
    }

    /// Takes the socket out of the watch: its readiness wakes no one until it is armed again.
    fn disarm(&self) {
        if self.armed.swap(0, Ordering::AcqRel) != 0 {
            if let Err(e) = self.set(EventFlags::empty()) {
                tracing::debug!("zklock: disarming a PostgreSQL socket failed: {e}");
            }
        }
    }

    /// The watch saw the socket ready: the monitor is woken, unless a caller took the socket
    /// meanwhile.
    fn fire(&self) {
        if self.armed.swap(0, Ordering::AcqRel) == 0 {
            return;
        }
        self.readable.store(true, Ordering::Relaxed);
        let waker = self.waker.lock().clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the socket takes it out of the epoll set.
        self.watch.sockets.lock().remove(&self.id);
    }
}

/// The sockets of a Client's sessions while no caller drives them (see the module's docs).
pub(crate) struct Watch {
    epoll: OwnedFd,
    sockets: Mutex<HashMap<u64, Weak<Shared>>>,
    next: AtomicU64,
}

/// The epoll set as the runtime's reactor registers it.
struct WatchFd(Arc<Watch>);

impl AsRawFd for WatchFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.epoll.as_raw_fd()
    }
}

impl Watch {
    /// A watch whose events are read by a task on `handle`'s runtime, until the runtime ends.
    pub(crate) fn start(handle: &tokio::runtime::Handle) -> io::Result<Arc<Watch>> {
        let watch = Arc::new(Watch {
            epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            sockets: Mutex::default(),
            next: AtomicU64::new(0),
        });
        let _runtime = handle.enter();
        // `AsyncFd::with_interest` is deprecated for fds that may close while registered
        // (tokio's pull 8587); `WatchFd` keeps the epoll set open for as long as it is.
        #[allow(deprecated)]
        let fd = AsyncFd::with_interest(WatchFd(watch.clone()), Interest::READABLE)?;
        handle.spawn(Watch::run(fd));
        Ok(watch)
    }

    /// Runs `f` as [`block_on`] does: a caller with this watch drives its own sessions.
    pub(crate) fn block_on<F: Future>(&self, handle: &tokio::runtime::Handle, f: F) -> F::Output {
        block_on(handle, f)
    }

    /// Wakes the monitor of each socket found ready.
    async fn run(fd: AsyncFd<WatchFd>) {
        loop {
            let Ok(mut ready) = fd.readable().await else {
                return;
            };
            let watch = &fd.get_ref().0;
            match watch.ready() {
                Ok((found, all)) => {
                    if all {
                        ready.clear_ready();
                    }
                    found.iter().for_each(|s| s.fire());
                }
                Err(e) if e == rustix::io::Errno::INTR => {}
                Err(e) => {
                    tracing::debug!("zklock: reading the PostgreSQL sockets' watch failed: {e}");
                    ready.clear_ready();
                }
            }
        }
    }

    /// The sockets found ready now, and whether that is all of them.
    fn ready(&self) -> rustix::io::Result<(Vec<Arc<Shared>>, bool)> {
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 64];
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let (events, _) = epoll::wait(&self.epoll, &mut events[..], Some(&zero))?;
        let sockets = self.sockets.lock();
        let found = events
            .iter()
            .filter_map(|e| sockets.get(&e.data.u64()).and_then(Weak::upgrade))
            .collect();
        Ok((found, events.len() < 64))
    }

    /// Adds `sock`, disarmed.
    fn add(self: &Arc<Watch>, sock: Sock) -> io::Result<Arc<Shared>> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        epoll::add(
            &self.epoll,
            &sock,
            EventData::new_u64(id),
            EventFlags::ONESHOT,
        )?;
        let shared = Arc::new(Shared {
            sock,
            readable: AtomicBool::new(true),
            watch: self.clone(),
            id,
            armed: AtomicU32::new(0),
            waker: Mutex::new(None),
        });
        self.sockets.lock().insert(id, Arc::downgrade(&shared));
        Ok(shared)
    }
}

impl AsFd for Shared {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl Read for &Shared {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.sock {
            Sock::Tcp(s) => (&*s).read(buf),
            Sock::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.sock {
            Sock::Tcp(s) => (&*s).write(buf),
            Sock::Unix(s) => (&*s).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A session's socket as tokio-postgres reads and writes it (see the module's docs).
pub(crate) struct Socket {
    sock: Arc<Shared>,
}

impl Socket {
    /// `sock`, made non-blocking and added to `watch`.
    pub(crate) fn new(sock: Sock, watch: &Arc<Watch>) -> io::Result<Socket> {
        match &sock {
            Sock::Tcp(s) => s.set_nonblocking(true)?,
            Sock::Unix(s) => s.set_nonblocking(true)?,
        }
        Ok(Socket {
            sock: watch.add(sock)?,
        })
    }

    /// What the connection that reads and writes through it shares with it.
    pub(crate) fn handle(&self) -> Arc<Shared> {
        self.sock.clone()
    }

    /// One read, write or shutdown (`io`), on a thread in `block_on` or through the watch.
    fn poll_io<T>(
        &self,
        cx: &mut Context<'_>,
        flags: PollFlags,
        mut io: impl FnMut(&Shared) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        let reading = flags.contains(PollFlags::IN);
        loop {
            // A read that the last one (or `poll`) says would fail is not made: the socket's
            // wait reports it readable if it is.
            if !reading || self.sock.readable.load(Ordering::Relaxed) {
                match io(&self.sock) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => return Poll::Ready(other),
                }
                if reading {
                    self.sock.readable.store(false, Ordering::Relaxed);
                }
            }
            if in_block_on() {
                want(&self.sock, flags);
            } else {
                let wanted = if reading {
                    EventFlags::IN
                } else {
                    EventFlags::OUT
                };
                // Arming looks at the socket: readiness that came before wakes at once.
                self.sock.arm(cx, wanted)?;
            }
            return Poll::Pending;
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Only what an answer usually needs is zeroed first (safe code cannot read into
        // memory that is not initialised): a larger one takes more reads.
        let n = buf.remaining().min(READ_CHUNK);
        let n = ready!(self.poll_io(cx, PollFlags::IN, |mut s| s
            .read(buf.initialize_unfilled_to(n))))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_io(cx, PollFlags::OUT, |mut s| s.write(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let how = std::net::Shutdown::Write;
        Poll::Ready(match &self.sock.sock {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix(s) => s.shutdown(how),
        })
    }
}

/// A session's connection future (tokio-postgres's `Connection`), whatever its TLS.
type Connection = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// A session's connection, between its monitor and the callers that drive it.
pub(crate) struct Conn {
    slot: Mutex<Slot>,
    sock: Arc<Shared>,
}

struct Slot {
    /// `None` while a caller drives it, or once it has ended.
    connection: Option<Connection>,
    /// It ended in a caller's hands, with this error if any.
    ended: Option<Option<tokio_postgres::Error>>,
    /// The monitor's waker, as of its last poll.
    monitor: Option<Waker>,
    /// The session is closed: a connection handed back is dropped, which closes its socket.
    closed: bool,
}

impl Conn {
    /// `connection`, read and written through the socket whose [`Socket::handle`] this is.
    pub(crate) fn new(
        sock: Arc<Shared>,
        connection: impl Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
    ) -> Arc<Conn> {
        Arc::new(Conn {
            slot: Mutex::new(Slot {
                connection: Some(Box::pin(connection)),
                ended: None,
                monitor: None,
                closed: false,
            }),
            sock,
        })
    }

    /// The monitor: polls the connection whenever no caller has it, until it ends (with its
    /// error, if any).
    pub(crate) async fn monitor(&self) -> Option<tokio_postgres::Error> {
        poll_fn(|cx| {
            let mut slot = self.slot.lock();
            if let Some(ended) = slot.ended.take() {
                return Poll::Ready(ended);
            }
            // Kept whatever happens next: a caller that takes the connection wakes the monitor
            // with it when it hands the connection back.
            match &mut slot.monitor {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                other => *other = Some(cx.waker().clone()),
            }
            match slot.connection.as_mut() {
                Some(connection) => match connection.as_mut().poll(cx) {
                    Poll::Ready(r) => {
                        slot.connection = None;
                        Poll::Ready(r.err())
                    }
                    Poll::Pending => Poll::Pending,
                },
                None => Poll::Pending,
            }
        })
        .await
    }

    /// Ends the session now, on the calling thread: the socket is shut down both ways (the
    /// server reads its end at once and frees the session's locks, though the connection's
    /// future or a caller may still hold the socket), the connection is dropped now or as soon
    /// as a caller hands it back, and the monitor returns.
    pub(crate) fn close(&self) {
        let (dropped, monitor) = {
            let mut slot = self.slot.lock();
            if slot.closed {
                return;
            }
            slot.closed = true;
            if slot.ended.is_none() {
                slot.ended = Some(None);
            }
            (slot.connection.take(), slot.monitor.take())
        };
        self.sock.shutdown();
        drop(dropped);
        self.sock.disarm();
        if let Some(monitor) = monitor {
            monitor.wake();
        }
    }

    /// Runs `f`, a statement of this session: on a thread in [`block_on`], with the connection
    /// taken from the monitor and driven here until `f` ends; elsewhere, as it is. `f` is
    /// pinned where it was made, so that it is not copied into this future's state (a
    /// statement's future is a kilobyte and more).
    pub(crate) async fn drive<F: Future>(&self, mut f: Pin<&mut F>) -> F::Output {
        if !in_block_on() {
            return f.await;
        }
        let mut held = Held {
            conn: self,
            connection: None,
        };
        let mut first = true;
        poll_fn(|cx| {
            // Polled first, the connection takes this waker for its requests, so that the
            // request `f` queues wakes no other thread; an answer already in is taken.
            held.take();
            held.poll(cx);
            if let Poll::Ready(out) = f.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            if !std::mem::take(&mut first) {
                return Poll::Pending;
            }
            // The request `f` queued goes out now.
            held.poll(cx);
            f.as_mut().poll(cx)
        })
        .await
    }
}

/// The connection while a caller drives it; handed back to the monitor when dropped.
struct Held<'a> {
    conn: &'a Conn,
    connection: Option<Connection>,
}

impl Held<'_> {
    /// Takes the connection from the monitor, if it has it; the socket is disarmed in the
    /// watch before any request goes out, so that no answer wakes another thread (on two
    /// cores the server often answers before the sending thread runs again).
    fn take(&mut self) {
        if self.connection.is_some() {
            return;
        }
        let mut slot = self.conn.slot.lock();
        if let Some(connection) = slot.connection.take() {
            self.connection = Some(connection);
            self.conn.sock.disarm();
            // Whatever came in while the monitor had it is read at once.
            self.conn.sock.readable.store(true, Ordering::Relaxed);
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) {
        let Some(connection) = self.connection.as_mut() else {
            return;
        };
        if let Poll::Ready(r) = connection.as_mut().poll(cx) {
            self.connection = None;
            let monitor = {
                let mut slot = self.conn.slot.lock();
                slot.ended = Some(r.err());
                slot.monitor.clone()
            };
            if let Some(monitor) = monitor {
                monitor.wake();
            }
        }
    }
}

impl Drop for Held<'_> {
    /// Hands the connection back to the monitor, polled once more here as the monitor polls
    /// it (through the watch, with the monitor's waker), so that the monitor wakes for what
    /// concerns it — an answer to its heartbeat, the socket's end — and no thread is woken now.
    fn drop(&mut self) {
        let Some(mut connection) = self.connection.take() else {
            return;
        };
        let mut slot = self.conn.slot.lock();
        if slot.closed {
            drop(slot);
            drop(connection);
            return;
        }
        let Some(monitor) = slot.monitor.clone() else {
            // The monitor has not polled yet: it will.
            slot.connection = Some(connection);
            return;
        };
        let saved = WANTED.with(|w| w.borrow_mut().take());
        let polled = connection.as_mut().poll(&mut Context::from_waker(&monitor));
        WANTED.with(|w| *w.borrow_mut() = saved);
        match polled {
            Poll::Pending => slot.connection = Some(connection),
            Poll::Ready(r) => {
                slot.ended = Some(r.err());
                drop(slot);
                monitor.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A runtime that no thread drives: only a caller that polls its socket itself gets past
    /// a read.
    fn undriven() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_caller_in_block_on_reads_and_writes_its_socket_itself() {
        let runtime = undriven();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let watch = Watch::start(runtime.handle()).unwrap();
        let mut socket = Socket::new(Sock::Unix(ours), &watch).unwrap();
        let peer = std::thread::spawn(move || {
            let mut theirs = theirs;
            let mut buf = [0u8; 4];
            // A bound, so that a broken read ends (with EOF) instead of hanging.
            theirs
                .set_read_timeout(Some(Duration::from_secs(60)))
                .unwrap();
            theirs.read_exact(&mut buf).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            theirs.write_all(b"pong").unwrap();
            buf
        });
        let got = block_on(runtime.handle(), async {
            socket.write_all(b"ping").await.unwrap();
            let mut buf = [0u8; 4];
            let n = socket.read(&mut buf).await.unwrap();
            buf[..n].to_vec()
        });
        assert_eq!(got, b"pong");
        assert_eq!(&peer.join().unwrap(), b"ping");
        assert!(!in_block_on(), "the mark ends with block_on");
    }

    #[test]
    fn a_wake_from_another_thread_ends_the_wait() {
        let runtime = undriven();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(7).unwrap();
        });
        assert_eq!(block_on(runtime.handle(), rx).unwrap(), 7);
        sender.join().unwrap();
    }
}
