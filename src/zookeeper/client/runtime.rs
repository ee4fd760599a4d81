//! The library-owned threads that run the async wire client, and the small `block_on` that lets
//! user threads wait for it. Users never see a future or a runtime.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use async_executor::Executor;
use parking_lot::Mutex;

use crate::core::deadline::Deadline;

/// A one-shot flag a future can wait for; set from any thread.
#[derive(Clone, Default)]
pub(crate) struct Signal(Arc<Mutex<SignalState>>);

#[derive(Default)]
struct SignalState {
    set: bool,
    wakers: Vec<Waker>,
}

impl Signal {
    pub(crate) fn set(&self) {
        let wakers = {
            let mut s = self.0.lock();
            s.set = true;
            std::mem::take(&mut s.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    pub(crate) fn is_set(&self) -> bool {
        self.0.lock().set
    }

    /// Blocks until set or `deadline`; returns whether it is set.
    pub(crate) fn wait_until(&self, deadline: Deadline) -> bool {
        self.is_set() || block_on(self.wait(), deadline).is_some()
    }

    /// Resolves once [`Signal::set`] was called.
    pub(crate) fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let state = self.0.clone();
        std::future::poll_fn(move |cx| {
            let mut s = state.lock();
            if s.set {
                Poll::Ready(())
            } else {
                if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    s.wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        })
    }
}

/// A value on its way from a background task to a caller that may stop waiting. The caller
/// gets it from [`Handoff::recv`]; a value nobody received (the caller's future was dropped
/// first, on a deadline or a cancel) goes to the `orphan` callback instead, so that what it
/// stands for (a node the server made) is not lost.
pub(crate) struct Handoff<T>(Arc<Mutex<HandoffState<T>>>, Signal);

type Orphan<T> = Box<dyn FnOnce(T) + Send>;

struct HandoffState<T> {
    value: Option<T>,
    abandoned: bool,
    orphan: Option<Orphan<T>>,
}

/// The waiting side of a [`Handoff`].
pub(crate) struct HandoffReceiver<T: Send + 'static>(Arc<Mutex<HandoffState<T>>>, Signal);

impl<T: Send + 'static> Handoff<T> {
    pub(crate) fn new(orphan: impl FnOnce(T) + Send + 'static) -> (Handoff<T>, HandoffReceiver<T>) {
        let state = Arc::new(Mutex::new(HandoffState {
            value: None,
            abandoned: false,
            orphan: Some(Box::new(orphan)),
        }));
        let signal = Signal::default();
        (
            Handoff(state.clone(), signal.clone()),
            HandoffReceiver(state, signal),
        )
    }

    pub(crate) fn send(self, value: T) {
        let orphan = {
            let mut s = self.0.lock();
            if s.abandoned {
                s.orphan.take()
            } else {
                s.value = Some(value);
                self.1.set();
                return;
            }
        };
        if let Some(orphan) = orphan {
            orphan(value);
        }
    }
}

impl<T> Drop for Handoff<T> {
    /// Unsent (the task was dropped): the caller gets `None`.
    fn drop(&mut self) {
        self.1.set();
    }
}

impl<T: Send + 'static> HandoffReceiver<T> {
    /// The value, or `None` if the sender was dropped without sending.
    pub(crate) async fn recv(self) -> Option<T> {
        self.1.wait().await;
        self.0.lock().value.take()
    }
}

impl<T: Send + 'static> Drop for HandoffReceiver<T> {
    fn drop(&mut self) {
        let (value, orphan) = {
            let mut s = self.0.lock();
            s.abandoned = true;
            match s.value.take() {
                Some(v) => (v, s.orphan.take()),
                None => return,
            }
        };
        if let Some(orphan) = orphan {
            orphan(value);
        }
    }
}

/// A Client's tasks (its wire client's session, pings, reconnects; zklock's background work):
/// an executor of its own, run inside the process's one I/O thread. zookeeper-client spawns its
/// session task through `spawns`; every poll of a Client's executor installs that executor as
/// the spawner, so every task of this Client runs on it and ends with it.
pub(crate) struct Runtime {
    executor: Arc<Executor<'static>>,
    stop: Signal,
    /// Set once this Client's executor has stopped running (its tasks go with the Runtime).
    ended: Signal,
    #[cfg_attr(not(feature = "testing"), allow(dead_code))] // only `testing` freezes the I/O
    freeze: Arc<Freeze>,
}

struct Spawner(Arc<Executor<'static>>);

impl spawns::Spawn for Spawner {
    fn spawn(&self, task: spawns::Task) {
        self.0.spawn(Box::into_pin(task.future)).detach();
    }
}

/// The name of the process's I/O thread.
pub(crate) const IO_THREAD: &str = "zklock-io";

/// How long [`Runtime::shutdown`] waits for a Client's tasks to stop.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);

/// The process's one I/O thread, shared by every Client while at least one runs. async-io has
/// one reactor per process and only one thread can wait on it: with a thread per Client, a
/// socket's readiness found by another Client's thread had to be handed to the owner's thread
/// before the answer reached the caller (one more thread wake per request with several
/// Clients). On one thread the reactor and every session task meet.
struct IoThread {
    executor: Arc<Executor<'static>>,
    stop: Signal,
    /// Runtimes whose tasks run here.
    users: usize,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct IoState {
    current: Option<IoThread>,
    /// Threads that ended with the last Runtime, for [`Runtime::shutdown`] to join.
    retired: Vec<JoinHandle<()>>,
}

static IO: Mutex<IoState> = Mutex::new(IoState {
    current: None,
    retired: Vec::new(),
});

thread_local! {
    static ON_IO_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is the process's I/O thread, which must never wait for a reply
/// (only it could receive it).
pub(crate) fn on_io_thread() -> bool {
    ON_IO_THREAD.with(|on| on.get())
}

impl IoThread {
    /// Registers one more Runtime; starts the thread if none runs.
    fn join() -> std::io::Result<Arc<Executor<'static>>> {
        let mut io = IO.lock();
        if let Some(current) = &mut io.current {
            current.users += 1;
            return Ok(current.executor.clone());
        }
        let executor = Arc::new(Executor::new());
        let stop = Signal::default();
        let thread = thread::Builder::new().name(IO_THREAD.into()).spawn({
            let executor = executor.clone();
            let stop = stop.wait();
            move || {
                ON_IO_THREAD.with(|on| on.set(true));
                // async-io's block_on lets this thread drive the I/O reactor while it waits.
                async_io::block_on(executor.run(stop));
            }
        })?;
        io.current = Some(IoThread {
            executor: executor.clone(),
            stop,
            users: 1,
            thread: Some(thread),
        });
        Ok(executor)
    }

    /// A Runtime's tasks have ended; the last one stops the thread.
    fn leave() {
        let mut io = IO.lock();
        let last = io.current.as_mut().is_some_and(|c| {
            c.users -= 1;
            c.users == 0
        });
        if last {
            let mut current = io.current.take().expect("checked above");
            current.stop.set();
            io.retired.extend(current.thread.take());
        }
    }
}

/// Runs one Client's executor on the I/O thread, with that executor as the `spawns` spawner;
/// when it ends (stopped, or dropped with the I/O thread's executor) the Client is done.
struct ClientTasks<F> {
    run: Pin<Box<F>>,
    spawner: Spawner,
    ended: Signal,
    freeze: Arc<Freeze>,
}

impl<F: Future<Output = ()>> Future for ClientTasks<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.freeze.holds(cx) {
            return Poll::Pending;
        }
        let _scope = spawns::enter(&this.spawner);
        this.run.as_mut().poll(cx)
    }
}

impl<F> Drop for ClientTasks<F> {
    fn drop(&mut self) {
        // Leave first: once `ended` is seen, a retired I/O thread is already there to join.
        IoThread::leave();
        self.ended.set();
    }
}

/// Holds one Client's tasks still (for tests that act on its session behind its back).
#[derive(Default)]
struct Freeze {
    frozen: std::sync::atomic::AtomicBool,
    state: Mutex<FreezeState>,
}

#[derive(Default)]
struct FreezeState {
    /// Told once the Client's tasks have stopped running.
    ack: Option<crossbeam_channel::Sender<()>>,
    waker: Option<Waker>,
}

impl Freeze {
    /// Whether the Client's tasks must stay still; if so, wakes the poll when they may go on.
    fn holds(&self, cx: &Context<'_>) -> bool {
        if !self.frozen.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let mut s = self.state.lock();
        if !self.frozen.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        if let Some(ack) = s.ack.take() {
            let _ = ack.send(());
        }
        s.waker = Some(cx.waker().clone());
        true
    }

    #[cfg_attr(not(feature = "testing"), allow(dead_code))] // only `testing` freezes the I/O
    fn thaw(&self) {
        let waker = {
            let mut s = self.state.lock();
            self.frozen
                .store(false, std::sync::atomic::Ordering::Release);
            s.waker.take()
        };
        waker.into_iter().for_each(Waker::wake);
    }
}

/// Keeps a Client's tasks still until dropped.
#[cfg(feature = "testing")]
pub(crate) struct Frozen(Arc<Freeze>);

#[cfg(feature = "testing")]
impl Drop for Frozen {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

impl Runtime {
    /// Starts a Client's executor on the process's I/O thread (starting that thread if it is
    /// not running).
    pub(crate) fn start() -> std::io::Result<Runtime> {
        let io = IoThread::join()?;
        let executor = Arc::new(Executor::new());
        let stop = Signal::default();
        let ended = Signal::default();
        let freeze = Arc::new(Freeze::default());
        let run = {
            let executor = executor.clone();
            let stop = stop.wait();
            async move { executor.run(stop).await }
        };
        io.spawn(ClientTasks {
            run: Box::pin(run),
            spawner: Spawner(executor.clone()),
            ended: ended.clone(),
            freeze: freeze.clone(),
        })
        .detach();
        Ok(Runtime {
            executor,
            stop,
            ended,
            freeze,
        })
    }

    pub(crate) fn executor(&self) -> std::sync::Weak<Executor<'static>> {
        Arc::downgrade(&self.executor)
    }

    pub(crate) fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        self.executor.spawn(f).detach();
    }

    /// Lets the executor run until `done` is set (at most `bound`), then stops it; returns at
    /// once.
    pub(crate) fn shutdown_after(&self, done: Signal, bound: Duration) {
        let stop = self.stop.clone();
        self.executor
            .spawn(async move {
                futures_lite::future::or(done.wait(), sleep(bound)).await;
                stop.set();
            })
            .detach();
    }

    /// Stops the executor (pending tasks are dropped) and waits for it, at most 10 s; when this
    /// was the last Runtime of the process, also for the I/O thread to end. On the I/O thread
    /// itself it only stops the executor.
    pub(crate) fn shutdown(&self) {
        self.stop.set();
        if on_io_thread() {
            return;
        }
        block_on(self.ended.wait(), Deadline::after(SHUTDOWN_BOUND));
        let retired = std::mem::take(&mut IO.lock().retired);
        for handle in retired {
            let _ = handle.join();
        }
    }

    /// Holds this Client's tasks still (no reads, writes, timers or reconnects) until the
    /// returned value drops; returns once they are still (at most 60 s).
    #[cfg(feature = "testing")]
    pub(crate) fn freeze(&self) -> Frozen {
        let (ack, acked) = crossbeam_channel::bounded(1);
        {
            let mut s = self.freeze.state.lock();
            s.ack = Some(ack);
            self.freeze
                .frozen
                .store(true, std::sync::atomic::Ordering::Release);
        }
        // Makes sure the executor is polled (and sees the freeze) even if it has nothing to do.
        self.executor.spawn(async {}).detach();
        let _ = acked.recv_timeout(Duration::from_secs(60));
        Frozen(self.freeze.clone())
    }
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `f` on the calling thread until it completes or `deadline` passes (`None`).
pub(crate) fn block_on<F: Future>(f: F, deadline: Deadline) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
        match deadline.remaining() {
            None => thread::park(),
            Some(d) if d.is_zero() => return None,
            Some(d) => thread::park_timeout(d),
        }
    }
}

/// Sleeps inside a task on the I/O thread.
pub(crate) async fn sleep(d: std::time::Duration) {
    async_io::Timer::after(d).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn block_on_returns_none_at_the_deadline_and_signal_wakes() {
        let signal = Signal::default();
        assert_eq!(
            block_on(signal.wait(), Deadline::after(Duration::from_millis(20))),
            None
        );
        let s2 = signal.clone();
        let t = thread::spawn(move || s2.set());
        assert_eq!(block_on(signal.wait(), Deadline::NEVER), Some(()));
        t.join().unwrap();
        assert!(signal.is_set());
    }

    #[test]
    fn runtimes_share_one_io_thread_and_a_frozen_one_holds_only_its_own_tasks() {
        let on_io = || {
            let (tx, rx) = crossbeam_channel::bounded(1);
            move |rt: &Runtime| {
                let tx = tx.clone();
                rt.spawn(async move {
                    let _ = tx.send(thread::current().name().map(str::to_owned));
                });
                rx.recv_timeout(Duration::from_secs(30)).ok().flatten()
            }
        };
        let (a, b) = (Runtime::start().unwrap(), Runtime::start().unwrap());
        assert_eq!(on_io()(&a).as_deref(), Some(IO_THREAD));
        assert_eq!(on_io()(&b).as_deref(), Some(IO_THREAD));

        // A frozen runtime runs nothing; the other goes on.
        let ran = Signal::default();
        let frozen = a.freeze();
        let r = ran.clone();
        a.spawn(async move { r.set() });
        let ticks = Signal::default();
        let t = ticks.clone();
        b.spawn(async move {
            sleep(Duration::from_millis(50)).await;
            t.set();
        });
        assert_eq!(
            block_on(ticks.wait(), Deadline::after(Duration::from_secs(30))),
            Some(())
        );
        assert!(!ran.is_set(), "a frozen runtime ran a task");
        drop(frozen);
        assert_eq!(
            block_on(ran.wait(), Deadline::after(Duration::from_secs(30))),
            Some(())
        );

        a.shutdown();
        assert!(a.ended.is_set());
        assert!(!b.ended.is_set());
        b.shutdown();
        assert!(b.ended.is_set());
    }

    #[test]
    fn a_handoff_nobody_waits_for_goes_to_the_orphan_callback() {
        let orphans = Arc::new(Mutex::new(Vec::new()));
        let new = || {
            let orphans = orphans.clone();
            Handoff::new(move |v: u32| orphans.lock().push(v))
        };
        let forever = Deadline::NEVER;
        // Received: not an orphan.
        let (tx, rx) = new();
        tx.send(1);
        assert_eq!(block_on(rx.recv(), forever), Some(Some(1)));
        // The caller gave up before the value came.
        let (tx, rx) = new();
        assert_eq!(block_on(rx.recv(), Deadline::after(Duration::ZERO)), None);
        tx.send(2);
        // The value came, but the caller went away without taking it.
        let (tx, rx) = new();
        tx.send(3);
        drop(rx);
        // The sender went away without a value.
        let (tx, rx) = new();
        drop(tx);
        assert_eq!(block_on(rx.recv(), forever), Some(None));
        assert_eq!(*orphans.lock(), vec![2, 3]);
    }
}
