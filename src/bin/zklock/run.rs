//! `zklock run`: take a lock, run a command while holding it, stop the command if the lock is
//! lost.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{never, Receiver};
use parking_lot::Mutex;
use zklock::{
    ArcLockGuard, Client, Error, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphoreV2, Lease, LockHealth, ReadLock, WriteLock,
};

use crate::args::{Global, RunArgs};
use crate::child::{catch_signals, status_code, Child, Outcome, Watchdog};
use crate::contender::{Contend, Held};
use crate::holders;
use crate::listing::{report_waiting, Listing};
use crate::{code, connect, hostname, CliResult, Context, Failure};

/// A ZooKeeper lock `run` contends on, and its Client.
struct ZkContender {
    client: Client,
    lock: Contender,
    path: String,
}

/// The lock object `run` contends on.
enum Contender {
    Mutex(Arc<InterProcessMutex>),
    Read(Arc<ReadLock>),
    Write(Arc<WriteLock>),
    Lease(Arc<InterProcessSemaphoreV2>),
}

/// A hold of it.
enum Hold {
    Mutex(ArcLockGuard<InterProcessMutex>),
    Read(ArcLockGuard<ReadLock>),
    Write(ArcLockGuard<WriteLock>),
    Lease(Lease),
}

impl Contender {
    fn new(client: &Client, args: &RunArgs) -> zklock::Result<Contender> {
        let data = hostname();
        let contender = if let Some(n) = args.semaphore {
            let s = InterProcessSemaphoreV2::new(client, &args.path, n)?;
            s.set_node_data(data.as_bytes())?;
            Contender::Lease(Arc::new(s))
        } else if args.read || args.write {
            let rw = InterProcessReadWriteLock::new(client, &args.path)?;
            rw.set_node_data(data.as_bytes())?;
            if args.read {
                Contender::Read(Arc::new(rw.read_lock().clone()))
            } else {
                Contender::Write(Arc::new(rw.write_lock().clone()))
            }
        } else {
            let m = InterProcessMutex::new(client, &args.path)?;
            m.set_node_data(data.as_bytes())?;
            Contender::Mutex(Arc::new(m))
        };
        match &contender {
            Contender::Mutex(m) => m.set_max_hold(args.max_hold)?,
            Contender::Read(r) => r.set_max_hold(args.max_hold)?,
            Contender::Write(w) => w.set_max_hold(args.max_hold)?,
            Contender::Lease(s) => s.set_max_hold(args.max_hold)?,
        }
        Ok(contender)
    }

    /// Revocation requests on a channel (mutex and read-write only).
    fn revocations(&self) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let listener = move || {
            let _ = tx.try_send(());
        };
        match self {
            Contender::Mutex(m) => m.make_revocable(listener),
            Contender::Read(r) => r.make_revocable(listener),
            Contender::Write(w) => w.make_revocable(listener),
            Contender::Lease(_) => return never(),
        }
        rx
    }

    fn canceller(&self) -> Box<dyn Fn() + Send> {
        match self {
            Contender::Mutex(m) => {
                let m = m.clone();
                Box::new(move || m.cancel_waiters())
            }
            Contender::Read(r) => {
                let r = r.clone();
                Box::new(move || r.cancel_waiters())
            }
            Contender::Write(w) => {
                let w = w.clone();
                Box::new(move || w.cancel_waiters())
            }
            Contender::Lease(s) => {
                let s = s.clone();
                Box::new(move || s.cancel_waiters())
            }
        }
    }

    /// Waits up to `timeout` (forever if `None`): the hold, or `None` on timeout.
    fn acquire(&self, timeout: Option<Duration>) -> zklock::Result<Option<Hold>> {
        Ok(match (self, timeout) {
            (Contender::Mutex(m), Some(t)) => m.try_lock_arc_for(t)?.map(Hold::Mutex),
            (Contender::Mutex(m), None) => Some(Hold::Mutex(m.lock_arc()?)),
            (Contender::Read(r), Some(t)) => r.try_lock_arc_for(t)?.map(Hold::Read),
            (Contender::Read(r), None) => Some(Hold::Read(r.lock_arc()?)),
            (Contender::Write(w), Some(t)) => w.try_lock_arc_for(t)?.map(Hold::Write),
            (Contender::Write(w), None) => Some(Hold::Write(w.lock_arc()?)),
            (Contender::Lease(s), Some(t)) => s.acquire_timeout(t)?.map(Hold::Lease),
            (Contender::Lease(s), None) => Some(Hold::Lease(s.acquire()?)),
        })
    }
}

impl Contend for ZkContender {
    fn revocations(&self) -> Receiver<()> {
        self.lock.revocations()
    }

    fn canceller(&self) -> Box<dyn Fn() + Send> {
        self.lock.canceller()
    }

    fn acquire(&self, timeout: Option<Duration>) -> zklock::Result<Option<Box<dyn Held>>> {
        Ok(self
            .lock
            .acquire(timeout)?
            .map(|h| Box::new(h) as Box<dyn Held>))
    }

    fn listing(&self, max_leases: Option<u32>) -> CliResult<Listing> {
        holders::read(&self.client, &self.path, max_leases)
    }

    fn report_holders(&self, path: String, max_leases: Option<u32>, waiting: Arc<AtomicBool>) {
        let client = self.client.clone();
        let name = path.clone();
        let read = move || holders::read(&client, &name, max_leases);
        report_waiting(path, Arc::new(read), waiting);
    }

    fn lost(&self) -> &'static str {
        crate::ZOOKEEPER_LOST
    }

    fn close(&self) {
        self.client.close();
    }
}

impl Held for Hold {
    fn fencing_token(&self) -> u64 {
        match self {
            Hold::Mutex(g) => g.fencing_token(),
            Hold::Read(g) => g.fencing_token(),
            Hold::Write(g) => g.fencing_token(),
            Hold::Lease(l) => l.fencing_token(),
        }
    }

    fn node(&self) -> String {
        match self {
            Hold::Mutex(g) => g.lock().lock_node(),
            Hold::Read(g) => g.lock().lock_node(),
            Hold::Write(g) => g.lock().lock_node(),
            Hold::Lease(l) => Some(l.path().to_owned()),
        }
        .unwrap_or_default()
    }

    fn health(&self) -> LockHealth {
        match self {
            Hold::Mutex(g) => g.health(),
            Hold::Read(g) => g.health(),
            Hold::Write(g) => g.health(),
            Hold::Lease(l) => l.health(),
        }
    }

    fn release(self: Box<Self>) -> zklock::Result<()> {
        match *self {
            Hold::Mutex(g) => g.release(),
            Hold::Read(g) => g.release(),
            Hold::Write(g) => g.release(),
            Hold::Lease(l) => l.return_lease(),
        }
    }
}

/// The lock `run` takes on ZooKeeper, from its options.
pub fn zookeeper_contender(global: &Global, args: &RunArgs) -> CliResult<Box<dyn Contend>> {
    let client = connect(global)?;
    let lock = Contender::new(&client, args).context(|| format!("cannot use {}", args.path))?;
    Ok(Box::new(ZkContender {
        client,
        lock,
        path: args.path.clone(),
    }))
}

pub fn run(global: &Global, args: RunArgs) -> CliResult<u8> {
    let failed = |f: Failure| f.with_code(code::ZKLOCK_FAILED);
    // Until the signals are caught a signal ends zklock at once: nothing is held yet.
    let contender = match crate::Backend::of(global)? {
        crate::Backend::ZooKeeper => zookeeper_contender(global, &args),
        other => other
            .site(global)
            .and_then(|site| crate::contender::contender(site, &args)),
    }
    .map_err(failed)?;
    let signals = catch_signals().map_err(failed)?;
    let revoked = if args.revocable {
        contender.revocations()
    } else {
        never()
    };

    // Waiting: a signal cancels the acquisition (our node is deleted).
    let waiting = Arc::new(AtomicBool::new(true));
    let caught: Arc<Mutex<Option<i32>>> = Arc::default();
    let (forward_tx, forward_rx) = crossbeam_channel::unbounded();
    {
        let cancel = contender.canceller();
        let waiting = waiting.clone();
        let caught = caught.clone();
        let signals = signals.clone();
        thread::Builder::new()
            .name("zklock-relay".into())
            .spawn(move || {
                for sig in signals.iter() {
                    if waiting.load(Ordering::SeqCst) {
                        caught.lock().get_or_insert(sig.signal);
                        // Cancelling reaches only acquisitions under way: repeat it until
                        // the wait has ended, in case it had not begun yet.
                        while waiting.load(Ordering::SeqCst) {
                            cancel();
                            thread::sleep(Duration::from_millis(50));
                        }
                    }
                    if forward_tx.send(sig).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| Failure::from_error("cannot start a thread", &e))
            .map_err(failed)?;
    }
    if !args.quiet && std::io::stderr().is_terminal() {
        contender.report_holders(args.path.clone(), args.semaphore, waiting.clone());
    }
    let timeout = if args.nonblock {
        Some(Duration::ZERO)
    } else {
        args.timeout
    };
    let acquired = contender.acquire(timeout);
    waiting.store(false, Ordering::SeqCst);
    let granted = std::time::Instant::now();
    let hold = match acquired {
        Ok(Some(hold)) => hold,
        Ok(None) => {
            let held_by = contender
                .listing(args.semaphore)
                .map(|l| format!(" ({})", l.held_by()))
                .unwrap_or_default();
            match timeout {
                Some(t) if t.is_zero() => {
                    eprintln!(
                        "zklock: {} is busy{held_by}: the command was not run",
                        args.path
                    )
                }
                _ => eprintln!(
                    "zklock: timed out after {:?} waiting for {}{held_by}: the command was not run",
                    timeout.unwrap_or_default(),
                    args.path
                ),
            }
            contender.close();
            return Ok(code::TIMEOUT);
        }
        Err(Error::Cancelled) if caught.lock().is_some() => {
            let sig = caught.lock().unwrap_or(0);
            contender.close();
            return Ok((128 + sig) as u8);
        }
        Err(e) => {
            return Err(failed(Failure::from_error(
                &format!("cannot acquire {}", args.path),
                &e,
            )))
        }
    };
    // A signal that came as we got the lock: give it back, run nothing. One that comes from now
    // on is for the command.
    if let Some(sig) = *caught.lock() {
        let _ = hold.release();
        contender.close();
        return Ok((128 + sig) as u8);
    }

    let token = hold.fencing_token();
    let node = hold.node();
    let mut child = match Child::spawn(
        &args.command,
        &[
            ("ZKLOCK_FENCING_TOKEN", token.to_string()),
            ("ZKLOCK_NODE", node.clone()),
        ],
        !args.foreground,
    ) {
        Ok(child) => child,
        Err(f) => {
            let _ = hold.release();
            contender.close();
            return Err(f);
        }
    };
    let health = || hold.health();
    let watchdog = Watchdog {
        health: &health,
        lost: contender.lost(),
        cancelled: &|| false,
        signals: forward_rx,
        revoked,
        suspended_grace: args.suspended_grace,
        kill_after: args.kill_after,
        max_hold: args.max_hold.map(|cap| (capped_at(granted, cap), cap)),
    };
    let outcome = watchdog.supervise(&mut child);
    let result = match outcome {
        Outcome::Exited(status) => {
            if let Err(e) = hold.release() {
                eprintln!("zklock: warning: releasing {node}: {e}");
            }
            status_code(status)
        }
        Outcome::Lost => {
            let _ = hold.release();
            code::LOST
        }
    };
    contender.close();
    Ok(result)
}

/// When a hold granted at `granted` reaches its cap; far in the future for a cap past what the
/// clock can count (the library caps nothing then either).
fn capped_at(granted: std::time::Instant, cap: Duration) -> std::time::Instant {
    (granted.checked_add(cap)).unwrap_or_else(|| granted + Duration::from_secs(100 * 365 * 86_400))
}
