//! The library-owned threads that run the async wire client, and the small `block_on` that lets
//! user threads wait for it. Users never see a future or a runtime.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};

use async_executor::Executor;
use parking_lot::Mutex;

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

/// One executor thread per Client. zookeeper-client spawns its session task through `spawns`;
/// this thread installs itself as the spawner, so every task of this Client runs here.
pub(crate) struct Runtime {
    executor: Arc<Executor<'static>>,
    stop: Signal,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Spawner(Arc<Executor<'static>>);

impl spawns::Spawn for Spawner {
    fn spawn(&self, task: spawns::Task) {
        self.0.spawn(Box::into_pin(task.future)).detach();
    }
}

impl Runtime {
    pub(crate) fn start(name: String) -> std::io::Result<Runtime> {
        let executor = Arc::new(Executor::new());
        let stop = Signal::default();
        let thread = thread::Builder::new().name(name).spawn({
            let executor = executor.clone();
            let stop = stop.wait();
            move || {
                let spawner = Spawner(executor.clone());
                let _scope = spawns::enter(&spawner);
                // async-io's block_on lets this thread drive the I/O reactor while it waits.
                async_io::block_on(executor.run(stop));
            }
        })?;
        Ok(Runtime {
            executor,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub(crate) fn executor(&self) -> std::sync::Weak<Executor<'static>> {
        Arc::downgrade(&self.executor)
    }

    pub(crate) fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        self.executor.spawn(f).detach();
    }

    /// Lets the executor run until `done` is set (at most `bound`), then stops it; returns at
    /// once and leaves the thread to end by itself.
    pub(crate) fn shutdown_after(&self, done: Signal, bound: std::time::Duration) {
        let stop = self.stop.clone();
        self.executor
            .spawn(async move {
                futures_lite::future::or(done.wait(), sleep(bound)).await;
                stop.set();
            })
            .detach();
        drop(self.thread.lock().take());
    }

    /// Stops the executor (pending tasks are dropped) and joins its thread.
    pub(crate) fn shutdown(&self) {
        self.stop.set();
        let handle = self.thread.lock().take();
        if let Some(handle) = handle {
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
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
    fn runtime_runs_tasks_and_its_thread_exits_on_shutdown() {
        let rt = Runtime::start("zklock-test-rt".into()).unwrap();
        let done = Signal::default();
        let d2 = done.clone();
        rt.spawn(async move {
            sleep(Duration::from_millis(5)).await;
            d2.set();
        });
        assert_eq!(
            block_on(done.wait(), Deadline::after(Duration::from_secs(30))),
            Some(())
        );
        rt.shutdown();
        assert!(rt.thread.lock().is_none());
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
