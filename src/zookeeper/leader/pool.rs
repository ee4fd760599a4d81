//! The threads every leader latch and waiting selector of the process share, in place of a
//! thread each:
//!
//! * up to [`WORKERS`] `zklock-elect` threads run their steps: a resumed attempt's requests, a
//!   grant, a step-down. A step blocks only on the Client's requests, each bounded by its retry
//!   policy.
//! * one `zklock-elect-timer` thread runs what is due later — an attempt's pause after an error
//!   — and looks at leaders' local leases every [`LEASE_LOOK`], since nothing reports a lease
//!   going stale.
//!
//! Threads start on demand and leave after [`IDLE`] without work, so a process with no
//! participant has none. No user code runs on them: listeners run on the Client's watcher
//! thread, selectors' closures on a thread per term.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use super::term::Term;

/// The most `zklock-elect` threads at once. A step is a round trip or two, so a few threads
/// keep thousands of participants moving.
const WORKERS: usize = 4;
/// How long a thread waits for work before it leaves.
const IDLE: Duration = Duration::from_secs(2);
/// How often leaders' local leases are looked at.
const LEASE_LOOK: Duration = Duration::from_millis(200);

type Job = Box<dyn FnOnce() + Send>;

struct Workers {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    /// Threads running; changed only under this lock.
    threads: Mutex<usize>,
    /// Threads waiting for a job.
    idle: AtomicUsize,
}

fn workers() -> &'static Workers {
    static WORKERS_: OnceLock<Workers> = OnceLock::new();
    WORKERS_.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded();
        Workers {
            tx,
            rx,
            threads: Mutex::new(0),
            idle: AtomicUsize::new(0),
        }
    })
}

/// Runs `job` on a `zklock-elect` thread, starting one if none is idle and fewer than
/// [`WORKERS`] run. A job that panics is logged; the thread goes on.
pub(super) fn spawn(job: impl FnOnce() + Send + 'static) {
    let pool = workers();
    let _ = pool.tx.send(Box::new(job));
    if pool.idle.load(Ordering::SeqCst) > 0 {
        return;
    }
    let mut threads = pool.threads.lock();
    if *threads >= WORKERS {
        return;
    }
    match thread::Builder::new()
        .name("zklock-elect".into())
        .spawn(work)
    {
        Ok(_) => *threads += 1,
        // The job waits for a thread that can start: the next spawn tries again.
        Err(e) => tracing::error!("could not start a zklock-elect thread: {e}"),
    }
}

fn work() {
    let pool = workers();
    loop {
        pool.idle.fetch_add(1, Ordering::SeqCst);
        let next = pool.rx.recv_timeout(IDLE);
        pool.idle.fetch_sub(1, Ordering::SeqCst);
        match next {
            Ok(job) => {
                if catch_unwind(AssertUnwindSafe(job)).is_err() {
                    tracing::error!("a leader election's step panicked");
                }
            }
            Err(_) => {
                // Leave, unless a job came in meanwhile (its sender saw no idle thread and may
                // have found the pool full).
                let mut threads = pool.threads.lock();
                if pool.rx.is_empty() {
                    *threads -= 1;
                    return;
                }
            }
        }
    }
}

struct Timer {
    state: Mutex<Timed>,
    wake: Condvar,
}

#[derive(Default)]
struct Timed {
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    jobs: std::collections::HashMap<u64, Job>,
    next_id: u64,
    running: bool,
    /// Leaders whose leases are looked at.
    leaders: Vec<Weak<Term>>,
    /// Whether a look at the leases is due.
    looking: bool,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<Timer> = OnceLock::new();
    TIMER.get_or_init(|| Timer {
        state: Mutex::new(Timed::default()),
        wake: Condvar::new(),
    })
}

/// Runs `job` on the timer thread once `delay` has passed; it must not block (hand I/O to
/// [`spawn`]).
pub(super) fn after(delay: Duration, job: impl FnOnce() + Send + 'static) {
    let timer = timer();
    let mut state = timer.state.lock();
    schedule(&mut state, delay, Box::new(job));
    timer.wake.notify_all();
}

fn schedule(state: &mut Timed, delay: Duration, job: Job) {
    let at = Instant::now()
        .checked_add(delay)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
    state.next_id += 1;
    let id = state.next_id;
    state.due.push(Reverse((at, id)));
    state.jobs.insert(id, job);
    if !state.running {
        match thread::Builder::new()
            .name("zklock-elect-timer".into())
            .spawn(tick)
        {
            Ok(_) => state.running = true,
            Err(e) => tracing::error!("could not start the zklock-elect-timer thread: {e}"),
        }
    }
}

/// Ends `term` once its local lease breaks its error policy, looked at every [`LEASE_LOOK`]
/// until the term is over.
pub(super) fn watch_lease(term: Weak<Term>) {
    let timer = timer();
    let mut state = timer.state.lock();
    state.leaders.push(term);
    if !state.looking {
        state.looking = true;
        schedule(&mut state, LEASE_LOOK, Box::new(look_at_leases));
    }
    timer.wake.notify_all();
}

fn look_at_leases() {
    let leaders: Vec<Weak<Term>> = {
        let mut state = timer().state.lock();
        state
            .leaders
            .retain(|t| t.upgrade().is_some_and(|t| !t.is_ended()));
        if state.leaders.is_empty() {
            state.looking = false;
            return;
        }
        state.leaders.clone()
    };
    for term in leaders.iter().filter_map(Weak::upgrade) {
        if term.is_over() {
            term.end();
        }
    }
    let mut state = timer().state.lock();
    schedule(&mut state, LEASE_LOOK, Box::new(look_at_leases));
}

fn tick() {
    let timer = timer();
    let mut state = timer.state.lock();
    loop {
        let now = Instant::now();
        match state.due.peek().copied() {
            Some(Reverse((at, id))) if at <= now => {
                state.due.pop();
                if let Some(job) = state.jobs.remove(&id) {
                    drop(state);
                    if catch_unwind(AssertUnwindSafe(job)).is_err() {
                        tracing::error!("a leader election's timed step panicked");
                    }
                    state = timer.state.lock();
                }
            }
            Some(Reverse((at, _))) => {
                timer.wake.wait_until(&mut state, at);
            }
            None => {
                if timer.wake.wait_for(&mut state, IDLE).timed_out() && state.due.is_empty() {
                    state.running = false;
                    return;
                }
            }
        }
    }
}
