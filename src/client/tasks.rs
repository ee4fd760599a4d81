//! One Client's tasks (its wire client's session, pings and reconnects; zklock's background work)
//! and who runs them: the process's I/O thread, and for a moment the caller that sends a request.
//!
//! A caller in [`Runtime::block_on`](super::Runtime::block_on) runs the Client's tasks itself
//! until its requests are written — the wire client's session task, woken by the request, writes
//! it on the caller's thread — and then leaves them to the I/O thread, which reads the answers
//! as the reactor reports them. Without this every request waited for the I/O thread to be
//! woken and scheduled before it went out.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;

use async_task::Runnable;
use concurrent_queue::ConcurrentQueue;
use parking_lot::Mutex;

use super::runtime::{IoThread, Signal};

/// How many tasks one turn runs before it looks at its own future (or lets other Clients run).
const TURN: usize = 64;

pub(crate) struct Tasks {
    queue: ConcurrentQueue<Runnable>,
    /// Every task not yet finished, by id: woken when the Tasks go, so that each is dropped
    /// (a task waiting for something that never comes would otherwise live on).
    active: Mutex<HashMap<u64, Waker>>,
    next_id: AtomicU64,
    drive: Mutex<Drive>,
    /// Set when the Client's tasks must never run again.
    stop: Signal,
    freeze: Freeze,
    spawner: Spawner,
}

#[derive(Default)]
struct Drive {
    /// A caller inside `block_on` that runs the tasks for now.
    driver: Option<Thread>,
    /// The I/O thread's poll of this Client, woken when no caller drives.
    io: Option<Waker>,
}

/// zookeeper-client spawns its session task through `spawns`; every turn installs the Client's
/// queue as the spawner, so the task is this Client's and ends with it.
struct Spawner(Weak<Tasks>);

impl spawns::Spawn for Spawner {
    fn spawn(&self, task: spawns::Task) {
        if let Some(tasks) = self.0.upgrade() {
            tasks.spawn(Box::into_pin(task.future));
        }
    }
}

impl Tasks {
    pub(crate) fn new() -> Arc<Tasks> {
        Arc::new_cyclic(|me| Tasks {
            queue: ConcurrentQueue::unbounded(),
            active: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            drive: Mutex::new(Drive::default()),
            stop: Signal::default(),
            freeze: Freeze::default(),
            spawner: Spawner(me.clone()),
        })
    }

    pub(crate) fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let finished = Finished(self.spawner.0.clone(), id);
        // Boxed first: a debug build would otherwise copy the future through every frame below.
        let f = Box::pin(f);
        let f = async move {
            let _finished = finished;
            f.await
        };
        let me = self.spawner.0.clone();
        let (runnable, task) = async_task::spawn(f, move |r| {
            // Gone: the Client's tasks were dropped, and this one with them.
            if let Some(tasks) = me.upgrade() {
                tasks.schedule(r);
            }
        });
        self.active.lock().insert(id, runnable.waker());
        runnable.schedule();
        task.detach();
    }

    fn schedule(&self, r: Runnable) {
        if self.queue.push(r).is_err() {
            return;
        }
        let io = {
            let drive = self.drive.lock();
            match &drive.driver {
                Some(driver) => {
                    driver.unpark();
                    None
                }
                None => drive.io.clone(),
            }
        };
        io.into_iter().for_each(Waker::wake);
    }

    /// Wakes the I/O thread's poll of this Client.
    fn kick(&self) {
        let io = self.drive.lock().io.clone();
        io.into_iter().for_each(Waker::wake);
    }

    pub(crate) fn stop(&self) {
        self.stop.set();
        self.kick();
    }

    fn may_run(&self) -> bool {
        !self.stop.is_set() && !self.freeze.is_frozen()
    }

    /// Runs up to [`TURN`] queued tasks; returns whether more are queued.
    fn turn(&self) -> bool {
        let _scope = spawns::enter(&self.spawner);
        for _ in 0..TURN {
            if !self.may_run() {
                return false;
            }
            match self.queue.pop() {
                Ok(runnable) => {
                    runnable.run();
                }
                Err(_) => return false,
            }
        }
        !self.queue.is_empty()
    }

    /// Makes `me` the driver unless another caller drives (or the tasks may not run).
    pub(crate) fn start_driving(&self, me: &Thread) -> bool {
        if !self.may_run() {
            return false;
        }
        let mut drive = self.drive.lock();
        if drive.driver.is_some() {
            return false;
        }
        drive.driver = Some(me.clone());
        true
    }

    /// One turn of the driver; returns whether more tasks are queued.
    pub(crate) fn drive(&self) -> bool {
        self.may_run() && self.turn()
    }

    /// Hands the tasks back to the I/O thread. A task scheduled while the driver was leaving
    /// is seen by one of the two: by `schedule` (no driver any more: it wakes the I/O thread)
    /// or here (queued before the driver left).
    pub(crate) fn stop_driving(&self) {
        let io = {
            let mut drive = self.drive.lock();
            drive.driver = None;
            if self.queue.is_empty() {
                None
            } else {
                drive.io.clone()
            }
        };
        io.into_iter().for_each(Waker::wake);
    }

    /// Holds the tasks still; `ack` is told once the I/O thread has seen it.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn freeze(&self, ack: crossbeam_channel::Sender<()>) {
        {
            let mut s = self.freeze.state.lock();
            s.ack = Some(ack);
            self.freeze.frozen.store(true, Ordering::Release);
        }
        self.kick();
    }

    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn thaw(&self) {
        {
            let _s = self.freeze.state.lock();
            self.freeze.frozen.store(false, Ordering::Release);
        }
        self.kick();
    }
}

/// Takes a task off the active list when it finishes or is dropped.
struct Finished(Weak<Tasks>, u64);

impl Drop for Finished {
    fn drop(&mut self) {
        if let Some(tasks) = self.0.upgrade() {
            tasks.active.lock().remove(&self.1);
        }
    }
}

impl Drop for Tasks {
    /// Drops every task: the queued ones with the queue, the waiting ones by waking them (their
    /// schedule finds no Tasks and drops them).
    fn drop(&mut self) {
        let waiting = std::mem::take(&mut *self.active.lock());
        waiting.into_values().for_each(Waker::wake);
    }
}

/// The I/O thread's side: one task on its executor per Client, running the Client's queue
/// whenever no caller drives it. Ends when the Client stops.
pub(crate) struct ClientTasks {
    tasks: Option<Arc<Tasks>>,
    ended: Signal,
}

impl ClientTasks {
    pub(crate) fn new(tasks: Arc<Tasks>, ended: Signal) -> ClientTasks {
        ClientTasks {
            tasks: Some(tasks),
            ended,
        }
    }
}

impl Future for ClientTasks {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(tasks) = &self.tasks else {
            return Poll::Ready(());
        };
        if tasks.stop.is_set() {
            return Poll::Ready(());
        }
        {
            let mut drive = tasks.drive.lock();
            if !drive.io.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                drive.io = Some(cx.waker().clone());
            }
        }
        if tasks.freeze.holds() {
            return Poll::Pending;
        }
        if tasks.turn() {
            // More queued: let the other Clients run, then come back.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl Drop for ClientTasks {
    fn drop(&mut self) {
        // Let go of the tasks and leave first: once `ended` is set, whoever drops the Runtime
        // drops the tasks, and a retired I/O thread is there to join.
        drop(self.tasks.take());
        IoThread::leave();
        self.ended.set();
    }
}

/// Holds one Client's tasks still (for tests that act on its session behind its back).
#[derive(Default)]
struct Freeze {
    frozen: AtomicBool,
    state: Mutex<FreezeState>,
}

#[derive(Default)]
struct FreezeState {
    /// Told once the Client's tasks have stopped running.
    ack: Option<crossbeam_channel::Sender<()>>,
}

impl Freeze {
    fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Acquire)
    }

    /// Whether the tasks must stay still (acknowledging the freeze the first time).
    fn holds(&self) -> bool {
        if !self.is_frozen() {
            return false;
        }
        let mut s = self.state.lock();
        if let Some(ack) = s.ack.take() {
            let _ = ack.send(());
        }
        self.is_frozen()
    }
}
