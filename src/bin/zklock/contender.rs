//! What `run` contends on and holds ([`Contend`], [`Held`]), and the contender of every
//! backend but ZooKeeper, through the library's [`AnyClient`]: a mutex, a half
//! of a read-write lock or a lease of a semaphore, by name. What the command line adds per
//! backend — the node it tells the command of, its holders listing, its words for a lost hold —
//! comes with the Client as a [`Site`].

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{never, Receiver};
use zklock::{AnyClient, AnyLease, AnyReadWriteLock, AnySemaphore, Lock, LockHealth};

use crate::args::{Global, RunArgs};
use crate::listing::{report_waiting, Listing};
use crate::{CliResult, Context, Failure};

/// What `run` contends on: ZooKeeper's own recipes (revocation, node data: `run.rs`), or any
/// backend's locks through the library's `AnyClient` (below).
pub trait Contend {
    /// Revocation requests on a channel (where the backend has them).
    fn revocations(&self) -> Receiver<()>;
    fn canceller(&self) -> Box<dyn Fn() + Send>;
    /// Waits up to `timeout` (forever if `None`): the hold, or `None` on timeout.
    fn acquire(&self, timeout: Option<Duration>) -> zklock::Result<Option<Box<dyn Held>>>;
    /// Who holds and waits now.
    fn listing(&self, max_leases: Option<u32>) -> CliResult<Listing>;
    /// While `waiting` on a terminal: says who holds the lock, each time that changes.
    fn report_holders(&self, path: String, max_leases: Option<u32>, waiting: Arc<AtomicBool>);
    /// Why a lost hold ended, in the backend's words.
    fn lost(&self) -> &'static str;
    /// Closes the connection.
    fn close(&self);
}

/// A hold `run` has, on any backend.
pub trait Held {
    fn fencing_token(&self) -> u64;
    /// What the command is told it holds (`ZKLOCK_NODE`).
    fn node(&self) -> String;
    fn health(&self) -> LockHealth;
    fn release(self: Box<Self>) -> zklock::Result<()>;
}

/// Reads the holders and waiters of a name (a semaphore's first N leases with `Some(N)`).
pub type ReadListing = dyn Fn(&str, Option<u32>) -> CliResult<Listing> + Send + Sync;

/// A backend's Client and what the command line knows of the backend beside it.
pub struct Site {
    pub client: AnyClient,
    /// What `ZKLOCK_NODE` says of the lock a name makes.
    pub node: Box<dyn Fn(&str) -> String>,
    /// The holders and waiters of a name (a semaphore's first N leases with `Some(N)`).
    pub listing: Arc<ReadListing>,
    /// Why a hold ends, in the backend's words: what `run` says when it stops the command.
    pub lost: &'static str,
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Site")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// The lock `run` takes.
#[derive(Clone)]
enum Target {
    Mutex(Arc<dyn Lock>),
    /// A read-write lock and whether we write.
    Half(Arc<AnyReadWriteLock>, bool),
    Lease(Arc<AnySemaphore>),
}

impl Target {
    /// The mutex or half taken (not a lease).
    fn lock(&self) -> Option<&dyn Lock> {
        match self {
            Target::Mutex(m) => Some(&**m),
            Target::Half(rw, true) => Some(rw.write_lock()),
            Target::Half(rw, false) => Some(rw.read_lock()),
            Target::Lease(_) => None,
        }
    }
}

/// A lock `run` contends on, with its backend.
pub struct Contender {
    site: Site,
    target: Target,
    name: String,
}

/// The lock `run` takes on the backend `site` names, from its options.
pub fn contender(site: Site, args: &RunArgs) -> CliResult<Box<dyn Contend>> {
    if args.revocable {
        return Err(Failure::usage(format!(
            "--revocable is for ZooKeeper locks, not {}",
            site.client.backend()
        )));
    }
    let name = &args.path;
    let cannot = || format!("cannot use {name}");
    let target = if let Some(n) = args.semaphore {
        Target::Lease(Arc::new(site.client.semaphore(name, n).context(cannot)?))
    } else if args.read || args.write {
        let rw = site.client.read_write_lock(name).context(cannot)?;
        Target::Half(Arc::new(rw), args.write)
    } else {
        Target::Mutex(site.client.mutex(name).context(cannot)?)
    };
    match &target {
        Target::Lease(s) => s.set_max_hold(args.max_hold),
        other => (other.lock()).map_or(Ok(()), |lock| lock.set_max_hold(args.max_hold)),
    }
    .context(cannot)?;
    Ok(Box::new(Contender {
        site,
        target,
        name: name.clone(),
    }))
}

impl Contend for Contender {
    fn revocations(&self) -> Receiver<()> {
        never()
    }

    fn canceller(&self) -> Box<dyn Fn() + Send> {
        let target = self.target.clone();
        Box::new(move || match &target {
            Target::Lease(s) => s.cancel_waiters(),
            other => {
                if let Some(lock) = other.lock() {
                    lock.cancel_waiters();
                }
            }
        })
    }

    fn acquire(&self, timeout: Option<Duration>) -> zklock::Result<Option<Box<dyn Held>>> {
        let node = (self.site.node)(&self.name);
        if let Target::Lease(s) = &self.target {
            let lease = match timeout {
                Some(t) => s.acquire_timeout(t)?,
                None => Some(s.acquire()?),
            };
            return Ok(lease.map(|lease| Box::new(HeldLease { lease }) as Box<dyn Held>));
        }
        let lock = self
            .target
            .lock()
            .expect("every lock but a lease is a mutex");
        let acquired = match timeout {
            Some(t) => lock.acquire_timeout(t)?,
            None => {
                lock.acquire()?;
                true
            }
        };
        Ok(acquired.then(|| {
            Box::new(HeldLock {
                target: self.target.clone(),
                node,
            }) as Box<dyn Held>
        }))
    }

    fn listing(&self, max_leases: Option<u32>) -> CliResult<Listing> {
        (self.site.listing)(&self.name, max_leases)
    }

    fn report_holders(&self, path: String, max_leases: Option<u32>, waiting: Arc<AtomicBool>) {
        let listing = self.site.listing.clone();
        let name = path.clone();
        report_waiting(path, Arc::new(move || listing(&name, max_leases)), waiting);
    }

    fn lost(&self) -> &'static str {
        self.site.lost
    }

    fn close(&self) {
        self.site.client.close();
    }
}

/// A mutex or half held by this thread (`run` holds and releases on its main thread).
struct HeldLock {
    target: Target,
    node: String,
}

impl HeldLock {
    fn lock(&self) -> &dyn Lock {
        self.target.lock().expect("a held mutex")
    }
}

impl Held for HeldLock {
    fn fencing_token(&self) -> u64 {
        self.lock().fencing_token().unwrap_or_default()
    }

    fn node(&self) -> String {
        self.node.clone()
    }

    fn health(&self) -> LockHealth {
        self.lock().health().unwrap_or(LockHealth::Lost)
    }

    fn release(self: Box<Self>) -> zklock::Result<()> {
        self.lock().release()
    }
}

/// A semaphore's lease.
struct HeldLease {
    lease: AnyLease,
}

impl Held for HeldLease {
    fn fencing_token(&self) -> u64 {
        self.lease.fencing_token()
    }

    fn node(&self) -> String {
        self.lease.id().to_owned()
    }

    fn health(&self) -> LockHealth {
        self.lease.health()
    }

    fn release(self: Box<Self>) -> zklock::Result<()> {
        self.lease.release()
    }
}

/// Refuses the options only ZooKeeper has: `--namespace`, and `--digest` (`password_hint`
/// says where the password goes instead).
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]
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
            return Err(Failure::usage(format!(
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
