//! The keeper: one thread per Client (`zklock-redis-keeper`) that renews every hold of the
//! Client in one pipeline at a third of the hold TTL, keeps each hold's local lease, reports
//! each hold's health as it changes, and finishes the releases that could not be done in the
//! caller's time (a guard's drop, a release whose bound ran out).
//!
//! A hold's lease counts from the *send* time of its last acknowledged renewal (or of the grant):
//! the key's TTL restarted no earlier than that, so the lease runs out no later than the key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::scripts::{invocation, Keys, Scripts};
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::lease::{boot_clock, LocalLease};

/// What a hold's health is reported through.
pub(crate) type Report = Arc<dyn Fn(LockHealth) + Send + Sync>;

/// One hold the keeper renews.
struct Kept {
    keys: Keys,
    owner: String,
    lease: Arc<LocalLease>,
    report: Report,
}

/// A release still owed to the server.
struct Owed {
    keys: Keys,
    owner: String,
    give_up: Instant,
}

#[derive(Default)]
struct Shared {
    holds: Mutex<HashMap<u64, Kept>>,
    owed: Mutex<Vec<Owed>>,
    next: AtomicU64,
    signalled: Mutex<bool>,
    signal: Condvar,
}

/// The keeper's handle, kept by the Client.
pub(crate) struct Keeper {
    shared: Arc<Shared>,
    ttl: Duration,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Keeper {
    pub(crate) fn start(
        client: redis::Client,
        scripts: Arc<Scripts>,
        ttl: Duration,
        operation_timeout: Duration,
        closed: Arc<AtomicBool>,
    ) -> Result<Keeper> {
        let shared = Arc::new(Shared::default());
        let run = Run {
            shared: shared.clone(),
            client,
            scripts,
            ttl,
            operation_timeout,
            closed,
            conn: None,
        };
        let thread = std::thread::Builder::new()
            .name("zklock-redis-keeper".into())
            .spawn(move || run.run())
            .map_err(|e| Error::thread_start("zklock-redis-keeper", &e))?;
        Ok(Keeper {
            shared,
            ttl,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A new hold's lease, opened at `sent` (when the granting call was sent).
    pub(crate) fn lease(&self, sent: Duration) -> Arc<LocalLease> {
        let lease = LocalLease::new();
        lease.open(self.ttl, self.ttl / 2);
        lease.heard_at(sent);
        Arc::new(lease)
    }

    /// Renews a hold from now on, until [`forget`](Self::forget).
    pub(crate) fn keep(
        &self,
        keys: &Keys,
        owner: &str,
        lease: Arc<LocalLease>,
        report: Report,
    ) -> u64 {
        let id = self.shared.next.fetch_add(1, Ordering::Relaxed);
        self.shared.holds.lock().insert(
            id,
            Kept {
                keys: keys.clone(),
                owner: owner.to_owned(),
                lease,
                report,
            },
        );
        id
    }

    pub(crate) fn forget(&self, id: u64) {
        self.shared.holds.lock().remove(&id);
    }

    /// Releases a hold in the background, retrying until it is done or its key has expired
    /// by itself (a TTL from now).
    pub(crate) fn release_later(&self, keys: &Keys, owner: &str) {
        self.shared.owed.lock().push(Owed {
            keys: keys.clone(),
            owner: owner.to_owned(),
            give_up: Instant::now() + self.ttl,
        });
        self.shared.wake();
    }

    /// Tells the thread to finish (it releases what it holds and owes, within the operation
    /// timeout) and waits for it.
    pub(crate) fn join(&self) {
        self.shared.wake();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }

    /// Wakes the thread without waiting for it (the Client is dropped).
    pub(crate) fn wake(&self) {
        self.shared.wake();
    }
}

impl Shared {
    fn wake(&self) {
        *self.signalled.lock() = true;
        self.signal.notify_all();
    }

    fn wait(&self, until: Instant) {
        let mut s = self.signalled.lock();
        if !*s {
            let _ = self.signal.wait_until(&mut s, until);
        }
        *s = false;
    }
}

struct Run {
    shared: Arc<Shared>,
    client: redis::Client,
    scripts: Arc<Scripts>,
    ttl: Duration,
    operation_timeout: Duration,
    closed: Arc<AtomicBool>,
    conn: Option<redis::Connection>,
}

impl Run {
    fn run(mut self) {
        let period = self.ttl / 3;
        let tick = (self.ttl / 20).clamp(Duration::from_millis(5), Duration::from_millis(500));
        let mut next_renewal = Instant::now() + period;
        while !self.closed.load(Ordering::Acquire) {
            self.shared.wait(Instant::now() + tick);
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            self.pay_owed();
            if Instant::now() >= next_renewal {
                next_renewal = Instant::now() + period;
                self.renew();
            }
            self.report();
        }
        self.finish();
    }

    /// The keeper's connection, opened when missing. Its calls wait at most a sixth of the TTL
    /// (or the operation timeout if shorter), so that a silent server delays the health the
    /// keeper reports by no more than that.
    fn conn(&mut self) -> Option<&mut redis::Connection> {
        if self.conn.is_none() {
            let timeout = self
                .operation_timeout
                .min(self.ttl / 6)
                .max(Duration::from_millis(10));
            match self
                .client
                .get_connection_with_timeout(timeout)
                .and_then(|c| {
                    c.set_read_timeout(Some(timeout))?;
                    c.set_write_timeout(Some(timeout))?;
                    Ok(c)
                }) {
                Ok(c) => self.conn = Some(c),
                Err(e) => tracing::debug!("zklock: Redis keeper cannot connect: {e}"),
            }
        }
        self.conn.as_mut()
    }

    fn renew(&mut self) {
        let batch: Vec<(u64, Keys, String, Arc<LocalLease>, Report)> = self
            .shared
            .holds
            .lock()
            .iter()
            .map(|(id, k)| {
                let (keys, owner) = (k.keys.clone(), k.owner.clone());
                (*id, keys, owner, k.lease.clone(), k.report.clone())
            })
            .collect();
        if batch.is_empty() {
            return;
        }
        let ttl_ms = ms(self.ttl);
        let scripts = self.scripts.clone();
        let Some(conn) = self.conn() else { return };
        let mut pipe = redis::pipe();
        for (_, keys, owner, _, _) in &batch {
            let renew = scripts.renew(keys.layout);
            pipe.add_command(evalsha(renew, keys, &[owner, &ttl_ms.to_string()]));
        }
        let sent = boot_clock();
        let answers: redis::RedisResult<Vec<i64>> = pipe.query(conn);
        let answers = match answers {
            // The server forgot the scripts (a restart, SCRIPT FLUSH): load them, send again.
            Err(e) if e.code() == Some("NOSCRIPT") => {
                for (_, keys, _, _, _) in &batch {
                    let _ = scripts.renew(keys.layout).prepare_invoke().load(conn);
                }
                pipe.query(conn)
            }
            other => other,
        };
        match answers {
            Ok(answers) => {
                for ((id, _, _, lease, report), ours) in batch.into_iter().zip(answers) {
                    if ours == 1 {
                        lease.heard_at(sent);
                    } else {
                        tracing::warn!(
                            "zklock: a Redis lock or lease was lost: it expired or was taken"
                        );
                        self.shared.holds.lock().remove(&id);
                        report(LockHealth::Lost);
                    }
                }
            }
            Err(e) => {
                tracing::debug!("zklock: Redis renewal failed: {e}");
                if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                    self.conn = None;
                }
            }
        }
    }

    /// Reports each hold's health as its lease reads now.
    fn report(&self) {
        let holds: Vec<(Arc<LocalLease>, Report)> = self
            .shared
            .holds
            .lock()
            .values()
            .map(|k| (k.lease.clone(), k.report.clone()))
            .collect();
        for (lease, report) in holds {
            report(lease.health());
        }
    }

    fn pay_owed(&mut self) {
        let owed = std::mem::take(&mut *self.shared.owed.lock());
        if owed.is_empty() {
            return;
        }
        let scripts = self.scripts.clone();
        let mut left = Vec::new();
        for o in owed {
            let done = match self.conn() {
                Some(conn) => {
                    let mut call = invocation(scripts.release(o.keys.layout), &o.keys);
                    call.arg(&o.owner);
                    match call.invoke::<i64>(conn) {
                        Ok(_) => true,
                        Err(e) => {
                            tracing::debug!("zklock: Redis release failed, will retry: {e}");
                            self.conn = None;
                            false
                        }
                    }
                }
                None => false,
            };
            if !done && Instant::now() < o.give_up {
                left.push(o);
            }
        }
        self.shared.owed.lock().extend(left);
    }

    /// The Client is closing: what it holds is released, what it owes paid, within the
    /// operation timeout.
    fn finish(&mut self) {
        let holds: Vec<Kept> = self.shared.holds.lock().drain().map(|(_, k)| k).collect();
        let give_up = Instant::now() + self.operation_timeout;
        {
            let mut owed = self.shared.owed.lock();
            for k in &holds {
                owed.push(Owed {
                    keys: k.keys.clone(),
                    owner: k.owner.clone(),
                    give_up,
                });
            }
        }
        for k in holds {
            (k.report)(LockHealth::Lost);
        }
        while !self.shared.owed.lock().is_empty() && Instant::now() < give_up {
            self.pay_owed();
            if !self.shared.owed.lock().is_empty() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let left = self.shared.owed.lock().len();
        if left > 0 {
            tracing::warn!(
                "zklock: {left} Redis lock(s) not released at close: they expire by their TTL"
            );
        }
    }
}

/// `EVALSHA` of `script` with the lock's keys and `args`, for a pipeline.
fn evalsha(script: &redis::Script, keys: &Keys, args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.all().len());
    for key in keys.all() {
        cmd.arg(key);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
