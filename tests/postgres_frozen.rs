//! Every bound of docs/postgres.md's table against a frozen server (SIGSTOP of the postmaster
//! and every backend): each call is made while the server is frozen, on a Client of its own
//! connected before, and must return; the times are printed beside the stated bounds (no test
//! asserts a duration). `acquire()` without a deadline, waiting when the server froze, ends
//! once its Client reads `Lost`.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{patience, wait_for};

use zklock::postgres::{PgLeaderLatch, PgMutex, PgSemaphore};
use zklock::testing::TestingPostgres;
use zklock::{ConnectionState, Lock, PgClient};

/// The session timeout `T`, connection timeout `C` and operation timeout `O` of every Client.
const T: Duration = Duration::from_secs(3);
const C: Duration = Duration::from_secs(3);
const O: Duration = Duration::from_secs(2);
/// The `d` of the calls that take a deadline.
const D: Duration = Duration::from_secs(1);

fn client(server: &TestingPostgres) -> PgClient {
    PgClient::builder(&server.url())
        .session_timeout(T)
        .connect_timeout(C)
        .operation_timeout(O)
        .connect()
        .expect("connect")
}

/// A call made on a thread of its own once the server is frozen: `body` sets up with the
/// server up, calls `gate.wait()` (which returns once the server is frozen), makes the call
/// and says how it ended; the time from the gate to the end is reported.
struct Timed {
    what: &'static str,
    bound: &'static str,
    go: mpsc::Sender<()>,
    done: mpsc::Receiver<(Duration, String)>,
}

/// Where a call's thread waits for the freeze.
struct Gate {
    ready: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
}

impl Gate {
    fn wait(self) -> Instant {
        self.ready.send(()).unwrap();
        self.go.recv().unwrap();
        Instant::now()
    }
}

fn timed(
    what: &'static str,
    bound: &'static str,
    body: impl FnOnce(Gate) -> (Instant, String) + Send + 'static,
) -> Timed {
    let (go, wait) = mpsc::channel();
    let (ready, is_ready) = mpsc::channel();
    let (report, done) = mpsc::channel();
    thread::spawn(move || {
        let (started, outcome) = body(Gate { ready, go: wait });
        let _ = report.send((started.elapsed(), outcome));
    });
    is_ready.recv_timeout(patience()).expect("set up");
    Timed {
        what,
        bound,
        go,
        done,
    }
}

#[test]
fn every_bound_holds_against_a_frozen_server() {
    let server = TestingPostgres::start().unwrap();
    let holder = client(&server);
    let busy = PgMutex::new(&holder, "busy").unwrap();
    let busy_guard = busy.lock().unwrap();
    let busy2 = PgMutex::new(&holder, "busy2").unwrap();
    let busy2_guard = busy2.lock().unwrap();

    // Waiting when the server freezes: a waiter without a deadline, and one to cancel.
    let waiter = client(&server);
    let (waited, waited_rx) = mpsc::channel();
    {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let mutex = PgMutex::new(&waiter, "busy").unwrap();
            let outcome = mutex.acquire();
            let _ = waited.send((Instant::now(), format!("{outcome:?}")));
        });
    }
    let cancelled = Arc::new(PgMutex::new(&client(&server), "busy2").unwrap());
    let (cancel_done, cancel_rx) = mpsc::channel();
    {
        let cancelled = cancelled.clone();
        thread::spawn(move || {
            let outcome = cancelled.acquire();
            let _ = cancel_done.send((Instant::now(), format!("{outcome:?}")));
        });
    }
    // A semaphore waiter without a deadline, its one lease held.
    let sem_holder = PgSemaphore::new(&holder, "full", 1).unwrap();
    let _lease = sem_holder.acquire().unwrap();
    let (sem_done, sem_rx) = mpsc::channel();
    {
        let c = client(&server);
        thread::spawn(move || {
            let s = PgSemaphore::new(&c, "full", 1).unwrap();
            let outcome = s.acquire().map(|_| ());
            let _ = sem_done.send((Instant::now(), format!("{outcome:?}")));
        });
    }
    wait_for("two waiters queued", || {
        let queued = |n: &str| server.advisory_lock(n).map(|(_, w)| w.len()).unwrap_or(0);
        queued("busy") == 1 && queued("busy2") == 1
    });

    let latch_leader = PgLeaderLatch::start(&holder, "latch2").unwrap();
    assert!(latch_leader.await_leadership_timeout(patience()).unwrap());
    let url = server.url();
    let calls = vec![
        timed("PgClient::connect", "C + 2O", move |gate| {
            let at = gate.wait();
            let c = PgClient::builder(&url)
                .session_timeout(T)
                .connect_timeout(C)
                .operation_timeout(O)
                .connect();
            (at, format!("{:?}", c.map(|_| ())))
        }),
        {
            let m = PgMutex::new(&client(&server), "busy").unwrap();
            timed("acquire_timeout(d)", "d + C + 3O", move |gate| {
                let at = gate.wait();
                (at, format!("{:?}", m.acquire_timeout(D)))
            })
        },
        {
            let m = PgMutex::new(&client(&server), "busy").unwrap();
            timed("try_lock", "C + 2O", move |gate| {
                let at = gate.wait();
                (at, format!("{:?}", m.try_lock().map(|g| g.is_some())))
            })
        },
        {
            let m = PgMutex::new(&client(&server), "rel").unwrap();
            timed("release", "O", move |gate| {
                m.acquire().unwrap();
                let at = gate.wait();
                (at, format!("{:?}", m.release()))
            })
        },
        {
            let m = PgMutex::new(&client(&server), "rel2").unwrap();
            timed("release_timeout(d)", "d", move |gate| {
                m.acquire().unwrap();
                let at = gate.wait();
                (at, format!("{:?}", m.release_timeout(D)))
            })
        },
        {
            let m = PgMutex::new(&client(&server), "guard").unwrap();
            timed("dropping a guard", "at once", move |gate| {
                let guard = m.lock().unwrap();
                let at = gate.wait();
                drop(guard);
                (at, "dropped".to_owned())
            })
        },
        {
            let m = PgMutex::new(&client(&server), "forgotten").unwrap();
            timed(
                "dropping a PgMutex held, never released",
                "1 s (drop bound)",
                move |gate| {
                    m.acquire().unwrap();
                    let at = gate.wait();
                    drop(m);
                    (at, "dropped".to_owned())
                },
            )
        },
        {
            let c = client(&server);
            let s = PgSemaphore::new(&c, "lease", 2).unwrap();
            timed("dropping a PgLease", "at once", move |gate| {
                let lease = s.acquire().unwrap();
                let at = gate.wait();
                drop(lease);
                (at, "dropped".to_owned())
            })
        },
        {
            let c = client(&server);
            timed("dropping the last PgClient", "at once", move |gate| {
                let m = PgMutex::new(&c, "last").unwrap();
                let guard = m.lock().unwrap();
                std::mem::forget(guard);
                drop(m);
                let at = gate.wait();
                drop(c);
                (at, "dropped".to_owned())
            })
        },
        {
            let c = client(&server);
            timed("close", "O + 1/4 s", move |gate| {
                let m = PgMutex::new(&c, "closed").unwrap();
                let guard = m.lock().unwrap();
                let at = gate.wait();
                c.close();
                drop(guard);
                (at, "closed".to_owned())
            })
        },
        {
            let s = PgSemaphore::new(&client(&server), "sem", 2).unwrap();
            timed("PgSemaphore::try_acquire", "C + O", move |gate| {
                let at = gate.wait();
                (at, format!("{:?}", s.try_acquire().map(|l| l.is_some())))
            })
        },
        {
            let s = PgSemaphore::new(&client(&server), "sem", 2).unwrap();
            timed(
                "PgSemaphore::acquire_timeout(d)",
                "d + 2C + 4O",
                move |gate| {
                    let at = gate.wait();
                    (
                        at,
                        format!("{:?}", s.acquire_timeout(D).map(|l| l.is_some())),
                    )
                },
            )
        },
        {
            let c = client(&server);
            timed(
                "PgLeaderLatch start, has_leadership, close",
                "at once",
                move |gate| {
                    let at = gate.wait();
                    let latch = PgLeaderLatch::start(&c, "latch").unwrap();
                    let leads = latch.has_leadership();
                    latch.close();
                    (at, format!("leads: {leads}"))
                },
            )
        },
        {
            let latch = PgLeaderLatch::start(&client(&server), "latch2").unwrap();
            timed("await_leadership_timeout(d)", "d", move |gate| {
                let at = gate.wait();
                (at, format!("{:?}", latch.await_leadership_timeout(D)))
            })
        },
    ];

    server.pause().unwrap();
    let frozen = Instant::now();
    for call in &calls {
        call.go.send(()).unwrap();
    }
    let cancel_sent = Instant::now();
    cancelled.cancel_waiters();
    let cancel_call = cancel_sent.elapsed();

    let mut table = Vec::new();
    for call in &calls {
        let (took, outcome) = call
            .done
            .recv_timeout(patience())
            .unwrap_or_else(|_| panic!("{} did not return against a frozen server", call.what));
        table.push((call.what.to_owned(), call.bound.to_owned(), took, outcome));
    }
    let (at, outcome) = cancel_rx
        .recv_timeout(patience())
        .expect("the cancelled waiter returns");
    table.push((
        "cancel_waiters (the call; the waiter)".into(),
        "at once; O".into(),
        cancel_call,
        format!("waiter after {:?}: {outcome}", at - cancel_sent),
    ));

    wait_for("the waiter's Client to read Lost", || {
        waiter.state() == ConnectionState::Lost
    });
    let lost = Instant::now();
    let (at, outcome) = waited_rx
        .recv_timeout(patience())
        .expect("acquire() without a deadline returns once its Client reads Lost");
    table.push((
        "acquire() waiting as the server froze".into(),
        "T + the retry policy".into(),
        at - frozen,
        format!(
            "{:?} after the Client read Lost: {outcome}",
            at.saturating_duration_since(lost)
        ),
    ));
    let (at, outcome) = sem_rx
        .recv_timeout(patience())
        .expect("PgSemaphore::acquire() without a deadline returns");
    table.push((
        "PgSemaphore::acquire() waiting as it froze".into(),
        "the retry policy".into(),
        at - frozen,
        outcome,
    ));
    server.resume().unwrap();

    println!("T = {T:?}, C = {C:?}, O = {O:?}, d = {D:?}");
    for (what, bound, took, outcome) in &table {
        println!("{what:<45} {bound:<22} {took:>10.3?}  {outcome}");
    }
    assert!(
        table
            .last()
            .is_some_and(|(_, _, _, outcome)| outcome.contains("Err")),
        "the waiter gave up with an error"
    );
    drop(busy_guard);
    drop(busy2_guard);
    drop(latch_leader);
}
