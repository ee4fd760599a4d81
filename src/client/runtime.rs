//! The library-owned threads that run the async wire client, and the small `block_on` that lets
//! user threads wait for it. Users never see a future or a runtime.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use async_executor::Executor;
use parking_lot::Mutex;

use super::tasks::{ClientTasks, Tasks};
use crate::deadline::Deadline;

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

/// A value on its way from a background task to a waiter that may stop waiting. The waiter
/// gets it from [`Handoff::recv`]; a value nobody received (the waiter's future was dropped
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
pub(crate) struct Receiver<T: Send + 'static>(Arc<Mutex<HandoffState<T>>>, Signal);

impl<T: Send + 'static> Handoff<T> {
    pub(crate) fn new(orphan: impl FnOnce(T) + Send + 'static) -> (Handoff<T>, Receiver<T>) {
        let state = Arc::new(Mutex::new(HandoffState {
            value: None,
            abandoned: false,
            orphan: Some(Box::new(orphan)),
        }));
        let signal = Signal::default();
        (
            Handoff(state.clone(), signal.clone()),
            Receiver(state, signal),
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
    /// Unsent (the task was dropped): the waiter gets `None`.
    fn drop(&mut self) {
        self.1.set();
    }
}

impl<T: Send + 'static> Receiver<T> {
    /// The value, or `None` if the sender was dropped without sending.
    pub(crate) async fn recv(self) -> Option<T> {
        self.1.wait().await;
        self.0.lock().value.take()
    }
}

impl<T: Send + 'static> Drop for Receiver<T> {
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

/// A Client's tasks ([`Tasks`]): run by the process's one I/O thread, and by a caller of
/// [`Runtime::block_on`] until its requests are written.
pub(crate) struct Runtime {
    tasks: Arc<Tasks>,
    /// Set once the I/O thread has stopped running this Client's tasks (they go with the
    /// Runtime).
    ended: Signal,
}

/// How much stack a caller must have left to run its Client's tasks itself: the wire client's
/// session task is polled on the caller's stack, and in a debug build that poll alone needs
/// more than the 64 KiB a small thread may have (measured: a 64 KiB thread overflowed, a 96 KiB
/// one did not). A caller with less leaves its request to the I/O thread, as every caller did
/// before (one thread wake more per request, nothing else).
const DRIVE_STACK: usize = 256 * 1024;

fn has_stack_to_drive() -> bool {
    stacker::remaining_stack().is_some_and(|left| left >= DRIVE_STACK)
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
pub(crate) struct IoThread {
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
            // async-io's block_on lets this thread drive the I/O reactor while it waits.
            move || async_io::block_on(executor.run(stop))
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
    pub(crate) fn leave() {
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

/// Keeps a Client's tasks still until dropped.
#[cfg(feature = "testing")]
pub(crate) struct Frozen(Arc<Tasks>);

#[cfg(feature = "testing")]
impl Drop for Frozen {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

impl Runtime {
    /// Starts a Client's tasks, on the process's I/O thread (starting that thread if it is not
    /// running) whenever no caller drives them.
    pub(crate) fn start() -> std::io::Result<Runtime> {
        let io = IoThread::join()?;
        let tasks = Tasks::new();
        let ended = Signal::default();
        io.spawn(ClientTasks::new(tasks.clone(), ended.clone()))
            .detach();
        Ok(Runtime { tasks, ended })
    }

    pub(crate) fn tasks(&self) -> std::sync::Weak<Tasks> {
        Arc::downgrade(&self.tasks)
    }

    pub(crate) fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(f);
    }

    /// Runs `f` on the calling thread until it completes or `deadline` passes (`None`). The
    /// requests `f` sends are written on this thread: it runs the Client's tasks until they
    /// are out (unless another caller does the same right now), then hands them back to the I/O
    /// thread, which reads the answers.
    pub(crate) fn block_on<F: Future>(&self, f: F, deadline: Deadline) -> Option<F::Output> {
        let me = thread::current();
        let mut driving = has_stack_to_drive() && self.tasks.start_driving(&me);
        let waker = Waker::from(Arc::new(ThreadWaker(me)));
        let mut cx = Context::from_waker(&waker);
        let mut f = pin!(f);
        let result = loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                break Some(v);
            }
            if driving {
                if self.tasks.drive() {
                    continue;
                }
                self.tasks.stop_driving();
                driving = false;
            }
            match deadline.remaining() {
                None => thread::park(),
                Some(d) if d.is_zero() => break None,
                Some(d) => thread::park_timeout(d),
            }
        };
        if driving {
            self.tasks.stop_driving();
        }
        result
    }

    /// Lets the tasks run until `done` is set (at most `bound`), then stops them; returns at
    /// once.
    pub(crate) fn shutdown_after(&self, done: Signal, bound: Duration) {
        let tasks = Arc::downgrade(&self.tasks);
        self.tasks.spawn(async move {
            futures_lite::future::or(done.wait(), sleep(bound)).await;
            if let Some(tasks) = tasks.upgrade() {
                tasks.stop();
            }
        });
    }

    /// Stops the tasks (pending ones are dropped with the Runtime) and waits, at most 10 s, for
    /// the I/O thread to let them go; when this was the process's last Runtime, also for that
    /// thread to end.
    pub(crate) fn shutdown(&self) {
        self.tasks.stop();
        if thread::current().name() == Some(IO_THREAD) {
            return;
        }
        block_on(self.ended.wait(), Deadline::after(SHUTDOWN_BOUND));
        let retired = std::mem::take(&mut IO.lock().retired);
        for handle in retired {
            let _ = handle.join();
        }
    }

    /// Holds this Client's tasks still (no reads, writes, timers or reconnects) until the
    /// returned value drops; returns once the I/O thread has seen it (at most 60 s).
    #[cfg(feature = "testing")]
    pub(crate) fn freeze(&self) -> Frozen {
        let (ack, acked) = crossbeam_channel::bounded(1);
        self.tasks.freeze(ack);
        let _ = acked.recv_timeout(Duration::from_secs(60));
        Frozen(self.tasks.clone())
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

/// Sleeps inside a task on the executor thread.
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
            b.block_on(ticks.wait(), Deadline::after(Duration::from_secs(30))),
            Some(())
        );
        // Nor does a caller waiting on it run them.
        assert_eq!(
            a.block_on(ran.wait(), Deadline::after(Duration::from_millis(100))),
            None
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
    fn a_caller_runs_its_clients_tasks_until_its_request_is_out_and_the_io_thread_the_rest() {
        let rt = Runtime::start().unwrap();
        let forever = Deadline::after(Duration::from_secs(30));
        // Nobody waits: the I/O thread runs the task.
        let (tx, rx) = crossbeam_channel::bounded(1);
        rt.spawn(async move {
            let _ = tx.send(thread::current().name().map(str::to_owned));
        });
        let ran_on = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(ran_on.as_deref(), Some(IO_THREAD));
        // A task woken by a caller's request runs on the caller's thread — unless the I/O
        // thread, still in its turn, takes it first: either may, so try a few times.
        let on_caller = (0..20)
            .filter(|_| {
                let ran_on = rt.block_on(
                    async {
                        let (tx, rx) = Handoff::new(|_| {});
                        rt.spawn(async move { tx.send(thread::current().id()) });
                        rx.recv().await
                    },
                    forever,
                );
                ran_on == Some(Some(thread::current().id()))
            })
            .count();
        assert!(on_caller > 0, "the caller never ran its own request's task");
        // Once the request is out, they are the I/O thread's again.
        let (tx, rx) = crossbeam_channel::bounded(1);
        rt.spawn(async move {
            let _ = tx.send(thread::current().name().map(str::to_owned));
        });
        let ran_on = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(ran_on.as_deref(), Some(IO_THREAD));
        rt.shutdown();
    }

    #[test]
    fn a_caller_short_of_stack_leaves_its_request_to_the_io_thread() {
        let rt = Arc::new(Runtime::start().unwrap());
        let small = thread::Builder::new()
            .stack_size(DRIVE_STACK / 2)
            .spawn({
                let rt = rt.clone();
                move || {
                    (0..20)
                        .map(|_| {
                            rt.block_on(
                                async {
                                    let (tx, rx) = Handoff::new(|_| {});
                                    rt.spawn(async move {
                                        tx.send(thread::current().name().map(str::to_owned))
                                    });
                                    rx.recv().await
                                },
                                Deadline::after(Duration::from_secs(30)),
                            )
                        })
                        .collect::<Vec<_>>()
                }
            })
            .unwrap();
        let ran_on = small.join().unwrap();
        assert!(
            ran_on
                .iter()
                .all(|r| r == &Some(Some(Some(IO_THREAD.to_owned())))),
            "{ran_on:?}"
        );
        rt.shutdown();
    }

    #[test]
    fn a_task_waiting_for_what_never_comes_is_dropped_with_its_runtime() {
        struct SetOnDrop(Signal);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.set();
            }
        }
        let rt = Runtime::start().unwrap();
        let (dropped, started) = (Signal::default(), Signal::default());
        let guard = SetOnDrop(dropped.clone());
        let s = started.clone();
        rt.spawn(async move {
            let _guard = guard;
            s.set();
            futures_lite::future::pending::<()>().await;
        });
        let forever = Deadline::after(Duration::from_secs(30));
        assert_eq!(block_on(started.wait(), forever), Some(()));
        rt.shutdown();
        assert!(!dropped.is_set());
        drop(rt);
        assert!(dropped.is_set(), "the waiting task outlived its runtime");
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
        // The waiter gave up before the value came.
        let (tx, rx) = new();
        assert_eq!(block_on(rx.recv(), Deadline::after(Duration::ZERO)), None);
        tx.send(2);
        // The value came, but the waiter went away without taking it.
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
