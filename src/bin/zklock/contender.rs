//! `run` on Redis and PostgreSQL: a backend's mutex, a half of its read-write lock or a lease of
//! its semaphore, contended for the same way on both through what their types have in common
//! ([`Backend`]).

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{never, Receiver};
use zklock::{HealthEvent, Lock, LockHealth};

use crate::args::Global;
use crate::run::{Contend, Held};
use crate::{CliResult, Failure};

/// A backend's lock types, as `run` uses them.
pub trait Backend: 'static {
    type Client: Send + 'static;
    type Mutex: Lock + 'static;
    type ReadWrite: Send + Sync + 'static;
    type Semaphore: Send + Sync + 'static;
    type Lease: Held + 'static;

    fn close(client: &Self::Client);
    /// The write half (`write`) or the read half.
    fn half(rw: &Self::ReadWrite, write: bool) -> &Self::Mutex;
    fn mutex_events(mutex: &Self::Mutex) -> zklock::Receiver<HealthEvent>;
    /// What the command is told it holds (`ZKLOCK_NODE`).
    fn node(mutex: &Self::Mutex) -> String;
    fn lease_events(semaphore: &Self::Semaphore) -> zklock::Receiver<HealthEvent>;
    fn cancel_lease_waiters(semaphore: &Self::Semaphore);
    /// A lease, waiting up to `timeout` (forever if `None`); `None` on timeout.
    fn acquire_lease(
        semaphore: &Self::Semaphore,
        timeout: Option<Duration>,
    ) -> zklock::Result<Option<Self::Lease>>;
}

/// The lock `run` takes.
pub enum Target<B: Backend> {
    Mutex(Arc<B::Mutex>),
    /// A read-write lock and whether we write.
    Half(Arc<B::ReadWrite>, bool),
    Lease(Arc<B::Semaphore>),
}

impl<B: Backend> Clone for Target<B> {
    fn clone(&self) -> Self {
        match self {
            Target::Mutex(m) => Target::Mutex(m.clone()),
            Target::Half(rw, write) => Target::Half(rw.clone(), *write),
            Target::Lease(s) => Target::Lease(s.clone()),
        }
    }
}

impl<B: Backend> Target<B> {
    /// The mutex or half taken (not a lease).
    fn mutex(&self) -> Option<&B::Mutex> {
        match self {
            Target::Mutex(m) => Some(m),
            Target::Half(rw, write) => Some(B::half(rw, *write)),
            Target::Lease(_) => None,
        }
    }
}

/// A backend's lock `run` contends on, and its Client.
pub struct Contender<B: Backend> {
    pub client: B::Client,
    pub target: Target<B>,
}

impl<B: Backend> Contend for Contender<B> {
    fn health_events(&self) -> zklock::Receiver<HealthEvent> {
        match (&self.target, self.target.mutex()) {
            (Target::Lease(s), _) => B::lease_events(s),
            (_, Some(m)) => B::mutex_events(m),
            (_, None) => unreachable!("every lock but a lease is a mutex"),
        }
    }

    fn revocations(&self) -> Receiver<()> {
        never()
    }

    fn canceller(&self) -> Box<dyn Fn() + Send> {
        let target = self.target.clone();
        Box::new(move || match &target {
            Target::Lease(s) => B::cancel_lease_waiters(s),
            other => {
                if let Some(m) = other.mutex() {
                    m.cancel_waiters();
                }
            }
        })
    }

    fn acquire(&self, timeout: Option<Duration>) -> zklock::Result<Option<Box<dyn Held>>> {
        if let Target::Lease(s) = &self.target {
            let lease = B::acquire_lease(s, timeout)?;
            return Ok(lease.map(|l| Box::new(l) as Box<dyn Held>));
        }
        let m = self
            .target
            .mutex()
            .expect("every lock but a lease is a mutex");
        let acquired = match timeout {
            Some(t) => m.acquire_timeout(t)?,
            None => {
                m.acquire()?;
                true
            }
        };
        Ok(acquired.then(|| Box::new(HeldMutex(self.target.clone())) as Box<dyn Held>))
    }

    fn close(&self) {
        B::close(&self.client);
    }
}

/// A mutex or half held by this thread (`run` holds and releases on its main thread).
struct HeldMutex<B: Backend>(Target<B>);

impl<B: Backend> HeldMutex<B> {
    fn mutex(&self) -> &B::Mutex {
        self.0.mutex().expect("a held mutex")
    }
}

impl<B: Backend> Held for HeldMutex<B> {
    fn fencing_token(&self) -> u64 {
        self.mutex().fencing_token().unwrap_or_default()
    }

    fn node(&self) -> String {
        B::node(self.mutex())
    }

    fn health(&self) -> LockHealth {
        self.mutex().health().unwrap_or(LockHealth::Lost)
    }

    fn release(self: Box<Self>) -> zklock::Result<()> {
        self.mutex().release()
    }
}

/// Refuses the options only ZooKeeper has: `--namespace`, and `--digest` (`password_hint`
/// says where the password goes instead).
pub fn refuse_zookeeper_options(
    global: &Global,
    backend: &str,
    password_hint: &str,
) -> CliResult<()> {
    let digest = global.digest.is_some() || global.digest_file.is_some();
    for (given, option) in [
        (global.namespace.is_some(), "--namespace".to_owned()),
        (
            digest,
            format!("--digest (give the password in the URL: {password_hint})"),
        ),
    ] {
        if given {
            return Err(Failure::new(format!(
                "{option} is for ZooKeeper, not {backend}"
            )));
        }
    }
    Ok(())
}

/// The TLS files the options name, read.
#[cfg(feature = "tls")]
pub struct TlsPems {
    /// The CA's certificates (`--tls-ca`).
    pub ca: Option<String>,
    /// The client's certificate and key (`--tls-cert`, `--tls-key`).
    pub identity: Option<(String, String)>,
}

/// Reads the TLS files the options name.
#[cfg(feature = "tls")]
pub fn tls_pems(global: &Global) -> CliResult<TlsPems> {
    let ca = match &global.tls_ca {
        Some(ca) => Some(crate::read_text(ca, "--tls-ca")?),
        None => None,
    };
    let identity = match (&global.tls_cert, &global.tls_key) {
        (Some(cert), Some(key)) => Some((
            crate::read_text(cert, "--tls-cert")?,
            crate::read_text(key, "--tls-key")?,
        )),
        _ => None,
    };
    Ok(TlsPems { ca, identity })
}
