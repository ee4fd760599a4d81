//! The commands on Redis (`--connect redis://…`): `run` on a `RedisMutex`, a read-write half or
//! a semaphore lease, and `elect` on a `RedisLeaderLatch`. The hold's TTL is
//! `--session-timeout`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{never, Receiver};
use zklock::{
    HealthEvent, LockHealth, RedisClient, RedisLeaderLatch, RedisLease, RedisMutex,
    RedisReadWriteLock, RedisSemaphore,
};

use crate::args::{ElectArgs, Global, RunArgs};
use crate::child::{catch_signals, status_code, Child, Outcome, Watchdog};
use crate::run::{Contend, Held};
use crate::{code, hostname, CliResult, Context, Failure};

/// A connected Redis Client from the global options.
pub fn connect(global: &Global) -> CliResult<RedisClient> {
    for (given, option) in [
        (global.namespace.is_some(), "--namespace"),
        (
            global.digest.is_some() || global.digest_file.is_some(),
            "--digest (give the password in the URL: redis://:PASSWORD@host)",
        ),
    ] {
        if given {
            return Err(Failure::new(format!(
                "{option} is for ZooKeeper, not Redis"
            )));
        }
    }
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))] // TLS options are added with `tls`
    let mut builder = RedisClient::builder(&global.connect)
        .ttl(global.session_timeout)
        .connect_timeout(global.connection_timeout);
    #[cfg(feature = "tls")]
    {
        if let Some(ca) = &global.tls_ca {
            builder = builder.tls_ca_pem(&crate::read_text(ca, "--tls-ca")?);
        }
        if let (Some(cert), Some(key)) = (&global.tls_cert, &global.tls_key) {
            builder = builder.tls_identity_pem(
                &crate::read_text(cert, "--tls-cert")?,
                &crate::read_text(key, "--tls-key")?,
            );
        }
    }
    builder
        .connect()
        .context(|| "cannot connect to Redis".to_owned())
}

/// The lock `run` takes, from its options.
pub fn contender(global: &Global, args: &RunArgs) -> CliResult<Box<dyn Contend>> {
    if args.revocable {
        return Err(Failure::new(
            "--revocable is for ZooKeeper locks, not Redis",
        ));
    }
    let client = connect(global)?;
    let name = &args.path;
    let lock = if let Some(n) = args.semaphore {
        RedisLock::Lease(Arc::new(
            RedisSemaphore::new(&client, name, n).context(|| format!("cannot use {name}"))?,
        ))
    } else if args.read || args.write {
        let rw = RedisReadWriteLock::new(&client, name).context(|| format!("cannot use {name}"))?;
        RedisLock::Half(Arc::new(rw), args.write)
    } else {
        RedisLock::Mutex(Arc::new(
            RedisMutex::new(&client, name).context(|| format!("cannot use {name}"))?,
        ))
    };
    Ok(Box::new(RedisContender { client, lock }))
}

struct RedisContender {
    client: RedisClient,
    lock: RedisLock,
}

#[derive(Clone)]
enum RedisLock {
    Mutex(Arc<RedisMutex>),
    /// A read-write lock and whether we write.
    Half(Arc<RedisReadWriteLock>, bool),
    Lease(Arc<RedisSemaphore>),
}

impl RedisLock {
    /// The mutex or half taken (not a lease).
    fn mutex(&self) -> Option<&RedisMutex> {
        match self {
            RedisLock::Mutex(m) => Some(m),
            RedisLock::Half(rw, true) => Some(rw.write_lock()),
            RedisLock::Half(rw, false) => Some(rw.read_lock()),
            RedisLock::Lease(_) => None,
        }
    }
}

impl Contend for RedisContender {
    fn health_events(&self) -> zklock::Receiver<HealthEvent> {
        match (&self.lock, self.lock.mutex()) {
            (RedisLock::Lease(s), _) => s.health_events(),
            (_, Some(m)) => m.health_events(),
            (_, None) => unreachable!("every lock but a lease is a mutex"),
        }
    }

    fn revocations(&self) -> Receiver<()> {
        never()
    }

    fn canceller(&self) -> Box<dyn Fn() + Send> {
        let lock = self.lock.clone();
        Box::new(move || match &lock {
            RedisLock::Lease(s) => s.cancel_waiters(),
            other => {
                if let Some(m) = other.mutex() {
                    m.cancel_waiters();
                }
            }
        })
    }

    fn acquire(&self, timeout: Option<Duration>) -> zklock::Result<Option<Box<dyn Held>>> {
        if let RedisLock::Lease(s) = &self.lock {
            let lease = match timeout {
                Some(t) => s.acquire_timeout(t)?,
                None => Some(s.acquire()?),
            };
            return Ok(lease.map(|l| Box::new(l) as Box<dyn Held>));
        }
        let m = self
            .lock
            .mutex()
            .expect("every lock but a lease is a mutex");
        let acquired = match timeout {
            Some(t) => m.acquire_timeout(t)?,
            None => {
                m.acquire()?;
                true
            }
        };
        Ok(acquired.then(|| Box::new(HeldMutex(self.lock.clone())) as Box<dyn Held>))
    }

    fn close(&self) {
        self.client.close();
    }
}

/// A mutex or half held by this thread (`run` holds and releases on its main thread).
struct HeldMutex(RedisLock);

impl HeldMutex {
    fn mutex(&self) -> &RedisMutex {
        self.0.mutex().expect("a held mutex")
    }
}

impl Held for HeldMutex {
    fn fencing_token(&self) -> u64 {
        self.mutex().fencing_token().unwrap_or_default()
    }

    fn node(&self) -> String {
        self.mutex().key().to_owned()
    }

    fn health(&self) -> LockHealth {
        self.mutex().health().unwrap_or(LockHealth::Lost)
    }

    fn release(self: Box<Self>) -> zklock::Result<()> {
        self.mutex().release()
    }
}

impl Held for RedisLease {
    fn fencing_token(&self) -> u64 {
        RedisLease::fencing_token(self)
    }

    fn node(&self) -> String {
        self.id().to_owned()
    }

    fn health(&self) -> LockHealth {
        RedisLease::health(self)
    }

    fn release(self: Box<Self>) -> zklock::Result<()> {
        RedisLease::release(*self)
    }
}

/// `elect` on Redis: a latch per term; the command runs while it leads.
pub fn elect(global: &Global, args: ElectArgs) -> CliResult<u8> {
    let failed = |f: Failure| f.with_code(code::ZKLOCK_FAILED);
    let signals = catch_signals().map_err(failed)?;
    let client = connect(global).map_err(failed)?;
    let id = args
        .id
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let result = loop {
        let latch = RedisLeaderLatch::start(&client, &args.path)
            .context(|| format!("cannot take part in the election on {}", args.path))
            .map_err(failed)?;
        let changes = latch.changes();
        // Until elected a signal ends zklock (leaving the queue).
        let elected = loop {
            if let Ok(sig) = signals.try_recv() {
                break Err((128 + sig.signal) as u8);
            }
            match latch.await_leadership_timeout(Duration::from_millis(100)) {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(e) => {
                    return Err(failed(Failure::from_error("the election ended", &e)));
                }
            }
        };
        if let Err(code) = elected {
            latch.close();
            break Ok(code);
        }
        let token = latch.epoch().unwrap_or_default();
        eprintln!("zklock: leading {} as {id:?} (epoch {token})", args.path);
        let env = [
            ("ZKLOCK_FENCING_TOKEN", token.to_string()),
            ("ZKLOCK_NODE", latch_key(&args.path)),
            ("ZKLOCK_LEADER_ID", id.clone()),
        ];
        let mut child = match Child::spawn(&args.command, &env, !args.foreground) {
            Ok(child) => child,
            Err(f) => {
                latch.close();
                break Err(f);
            }
        };
        let health = || latch.health().unwrap_or(LockHealth::Lost);
        let (forward, forwarded) = crossbeam_channel::unbounded();
        let relay = signals.clone();
        let watchdog = Watchdog {
            health: &health,
            wake: changes,
            cancelled: &|| false,
            signals: forwarded,
            revoked: never(),
            suspended_grace: args.suspended_grace,
            kill_after: args.kill_after,
        };
        // Signals for zklock go to the command, and end the election after its term.
        let stopping = Arc::new(AtomicBool::new(false));
        let (done, term_over) = crossbeam_channel::bounded::<()>(0);
        let relaying = {
            let stopping = stopping.clone();
            std::thread::spawn(move || loop {
                crossbeam_channel::select! {
                    recv(relay) -> sig => {
                        let Ok(sig) = sig else { break };
                        stopping.store(true, Ordering::SeqCst);
                        if forward.send(sig).is_err() {
                            break;
                        }
                    }
                    recv(term_over) -> _ => break,
                }
            })
        };
        let code = match watchdog.supervise(&mut child) {
            Outcome::Exited(status) => status_code(status),
            Outcome::Lost => code::LOST,
        };
        drop(done);
        let _ = relaying.join();
        latch.close();
        if !args.requeue || stopping.load(Ordering::SeqCst) {
            break Ok(code);
        }
        eprintln!("zklock: the term ended (exit code {code}); queueing again");
    };
    client.close();
    result
}

/// The key a Redis election's leader holds.
fn latch_key(name: &str) -> String {
    format!("zklock:{{{name}}}")
}
