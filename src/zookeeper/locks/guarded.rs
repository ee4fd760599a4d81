//! Writes guarded by a hold: the caller's operations run as one transaction behind a check of
//! the hold's node, so the server applies them only while the hold lives. The node layout is
//! the recipe's own (Curator's or kazoo's): nothing is added to it.
//!
//! A hold lives exactly as long as its node: a granted node stays granted until it is deleted
//! (nodes queued after it only wait on it), and an ephemeral node is deleted with its session.
//! So a check that the node exists, in the same transaction as the writes, is a check that the
//! hold is still the caller's at the moment the server applies them — whatever the caller's
//! process believed when it sent them (a holder that stood still past its session sends them
//! believing it holds).

use super::mutex::{InterProcessMutex, MutexGuard};
use super::raw::{self, Reentrant};
use super::read_write::{ReadLock, WriteLock};
use super::semaphore::Lease;
use super::semaphore_mutex::InterProcessSemaphoreMutex;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::lock::{ArcLockGuard, LockGuard};
use crate::zookeeper::client::{Client, Op, OpResult};
use crate::zookeeper::path;

/// Runs `ops` in one transaction after a check that `node`, the hold's node of the lock at
/// `lock`, exists.
pub(crate) fn multi(client: &Client, lock: &str, node: &str, ops: &[Op]) -> Result<Vec<OpResult>> {
    let mut all = Vec::with_capacity(ops.len() + 1);
    all.push(Op::check_exists(node));
    all.extend_from_slice(ops);
    match client.multi(&all) {
        Ok(mut results) => {
            results.remove(0);
            Ok(results)
        }
        Err(e) => Err(unguarded(lock, e)),
    }
}

/// The error of a guarded transaction, in the caller's terms: a failed check of the hold's
/// node or an expired session is [`Error::HoldLost`]; a failed operation of the caller's has
/// its index in the caller's list.
fn unguarded(lock: &str, err: Error) -> Error {
    match err {
        Error::TransactionFailed {
            index: 0, source, ..
        } => Error::HoldLost {
            lock: lock.to_owned(),
            source,
        },
        Error::TransactionFailed { index, op, source } => Error::TransactionFailed {
            index: index - 1,
            op,
            source,
        },
        Error::SessionExpired => Error::hold_lost(lock, Error::SessionExpired),
        other => other,
    }
}

/// [`multi`] behind the calling thread's hold of `lock`, or [`Error::NotOwner`] before any
/// I/O.
fn held_multi(lock: &Reentrant, ops: &[Op]) -> Result<Vec<OpResult>> {
    let node = raw::lock_node(lock).ok_or(Error::NotOwner)?;
    let internals = &lock.raw.internals;
    refuse_if_lost(&internals.path, lock.health())?;
    multi(&internals.store, &internals.path, &node, ops)
}

/// [`Error::HoldLost`] before any I/O for a hold that reads `Lost`: its node was seen deleted,
/// or its session expired or went unvouched for a whole session timeout (a process that
/// stood still past its session reads this the moment it wakes).
fn refuse_if_lost(lock: &str, health: Option<LockHealth>) -> Result<()> {
    match health {
        Some(LockHealth::Lost) | None => Err(Error::hold_lost(lock, Error::LockLost)),
        Some(_) => Ok(()),
    }
}

impl InterProcessMutex {
    /// Runs `ops` as one transaction ([`Client::multi`]) that the server applies only while
    /// the calling thread's hold lives: the transaction begins with a check of the hold's
    /// node. A holder that stood still past its session (a long pause, a frozen VM) and then
    /// writes cannot overwrite what the lock's next holder wrote: the write is refused.
    ///
    /// # Blocking and errors
    /// As [`Client::multi`]. [`Error::NotOwner`] before any I/O if the calling thread does
    /// not hold the lock; [`Error::HoldLost`] if the hold is gone (its node deleted, its
    /// session expired), with nothing applied; [`Error::TransactionFailed`] with the index in
    /// `ops` when one of the caller's operations failed.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let mutex = zklock::InterProcessMutex::new(&client, "/locks/ledger")?;
    /// mutex.acquire()?;
    /// match mutex.guarded_multi(&[Op::set_data("/ledger/balance", b"100")]) {
    ///     Ok(_) => {}
    ///     Err(zklock::Error::HoldLost { .. }) => println!("lost the lock: nothing written"),
    ///     Err(e) => return Err(e),
    /// }
    /// # mutex.release()?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        held_multi(self.reentrant(), ops)
    }
}

impl MutexGuard<'_> {
    /// [`InterProcessMutex::guarded_multi`] for this guard's hold: `ops` as one transaction
    /// that the server applies only while the hold lives.
    ///
    /// # Blocking and errors
    /// As [`InterProcessMutex::guarded_multi`]; [`Error::NotOwner`] before any I/O if the
    /// hold was released through the mutex meanwhile.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let mutex = zklock::InterProcessMutex::new(&client, "/locks/ledger")?;
    /// let guard = mutex.lock()?;
    /// let (_, stat) = client.data("/ledger/balance")?;
    /// guard.guarded_multi(&[Op::set_data_version("/ledger/balance", b"100", stat.version)])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        self.current_lock()
            .ok_or(Error::NotOwner)?
            .guarded_multi(ops)
    }
}

impl ReadLock {
    /// As [`InterProcessMutex::guarded_multi`], for the calling thread's read hold: `ops` as
    /// one transaction that the server applies only while the read hold lives (no writer can
    /// hold the lock meanwhile).
    ///
    /// # Blocking and errors
    /// As [`InterProcessMutex::guarded_multi`].
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let rw = zklock::InterProcessReadWriteLock::new(&client, "/locks/catalog")?;
    /// let _reading = rw.read_lock().lock()?;
    /// rw.read_lock().guarded_multi(&[Op::create("/catalog/readers/r-", b"", zklock::CreateMode::EphemeralSequential)])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        held_multi(self.reentrant(), ops)
    }
}

impl WriteLock {
    /// As [`InterProcessMutex::guarded_multi`], for the calling thread's write hold: `ops` as
    /// one transaction that the server applies only while the write hold lives.
    ///
    /// # Blocking and errors
    /// As [`InterProcessMutex::guarded_multi`].
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let rw = zklock::InterProcessReadWriteLock::new(&client, "/locks/catalog")?;
    /// let writing = rw.write_lock().lock()?;
    /// writing.guarded_multi(&[Op::set_data("/catalog/version", b"8")])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        held_multi(self.reentrant(), ops)
    }
}

impl LockGuard<'_, ReadLock> {
    /// [`ReadLock::guarded_multi`] for this guard's hold.
    ///
    /// # Blocking and errors
    /// As [`ReadLock::guarded_multi`]; [`Error::NotOwner`] before any I/O if the hold was
    /// released through the lock meanwhile.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let rw = zklock::InterProcessReadWriteLock::new(&client, "/locks/catalog")?;
    /// let reading = rw.read_lock().lock()?;
    /// reading.guarded_multi(&[Op::check("/catalog/version", 8)])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        self.current_lock()
            .ok_or(Error::NotOwner)?
            .guarded_multi(ops)
    }
}

impl LockGuard<'_, WriteLock> {
    /// [`WriteLock::guarded_multi`] for this guard's hold.
    ///
    /// # Blocking and errors
    /// As [`WriteLock::guarded_multi`]; [`Error::NotOwner`] before any I/O if the hold was
    /// released through the lock meanwhile.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let rw = zklock::InterProcessReadWriteLock::new(&client, "/locks/catalog")?;
    /// let writing = rw.write_lock().lock()?;
    /// writing.guarded_multi(&[Op::set_data("/catalog/version", b"9")])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        self.current_lock()
            .ok_or(Error::NotOwner)?
            .guarded_multi(ops)
    }
}

impl Lease {
    /// As [`InterProcessMutex::guarded_multi`], for this lease: `ops` as one transaction that
    /// the server applies only while the lease lives (its node exists).
    ///
    /// # Blocking and errors
    /// As [`InterProcessMutex::guarded_multi`]; [`Error::HoldLost`] once the lease is gone.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let pool = zklock::InterProcessSemaphoreV2::new(&client, "/semaphores/db", 5)?;
    /// let lease = pool.acquire()?;
    /// lease.guarded_multi(&[Op::set_data("/jobs/42/owner", lease.path().as_bytes())])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        let semaphore = path::parent(path::parent(self.path()));
        refuse_if_lost(semaphore, Some(self.health()))?;
        multi(&self.client(), semaphore, self.path(), ops)
    }
}

impl InterProcessSemaphoreMutex {
    /// As [`Lease::guarded_multi`], for the lease this object holds: `ops` as one transaction
    /// that the server applies only while the hold lives.
    ///
    /// # Blocking and errors
    /// As [`InterProcessMutex::guarded_multi`]; [`Error::NotOwner`] before any I/O if this
    /// object does not hold the lock.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let mutex = zklock::InterProcessSemaphoreMutex::new(&client, "/locks/batch")?;
    /// let guard = mutex.lock()?;
    /// guard.guarded_multi(&[Op::set_data("/batch/state", b"running")])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        let (client, node, health) = self
            .with_lease(|l| (l.client(), l.path().to_owned(), l.health()))
            .ok_or(Error::NotOwner)?;
        let semaphore = path::parent(path::parent(&node));
        refuse_if_lost(semaphore, Some(health))?;
        multi(&client, semaphore, &node, ops)
    }
}

impl LockGuard<'_, InterProcessSemaphoreMutex> {
    /// [`InterProcessSemaphoreMutex::guarded_multi`] for this guard's hold.
    ///
    /// # Blocking and errors
    /// As [`InterProcessSemaphoreMutex::guarded_multi`]; [`Error::NotOwner`] before any I/O
    /// if the hold was released through the lock meanwhile.
    ///
    /// # Example
    /// ```no_run
    /// use zklock::zookeeper::Op;
    /// # fn main() -> zklock::Result<()> {
    /// # let client = zklock::Client::connect("127.0.0.1:2181")?;
    /// let mutex = zklock::InterProcessSemaphoreMutex::new(&client, "/locks/batch")?;
    /// let guard = mutex.lock()?;
    /// guard.guarded_multi(&[Op::delete("/batch/pending")])?;
    /// # Ok(()) }
    /// ```
    pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        self.current_lock()
            .ok_or(Error::NotOwner)?
            .guarded_multi(ops)
    }
}

/// `guarded_multi` on the owned guards ([`ArcLockGuard`]) of each lock named.
macro_rules! owned_guard_forms {
    ($($lock:ident),*) => {$(
        impl ArcLockGuard<$lock> {
            #[doc = concat!(
                "[`", stringify!($lock), "::guarded_multi`] for this guard's hold: `ops` as one ",
                "transaction that the server applies only while the hold lives."
            )]
            ///
            /// # Blocking and errors
            #[doc = concat!(
                "As [`", stringify!($lock), "::guarded_multi`]; [`Error::NotOwner`] before any ",
                "I/O if the hold was released through the lock meanwhile."
            )]
            pub fn guarded_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
                self.current_lock()
                    .ok_or(Error::NotOwner)?
                    .guarded_multi(ops)
            }
        }
    )*};
}

owned_guard_forms!(
    InterProcessMutex,
    ReadLock,
    WriteLock,
    InterProcessSemaphoreMutex
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_check_of_the_node_is_the_hold_lost() {
        let check_failed = Error::TransactionFailed {
            index: 0,
            op: "check_exists /l/_c_x-lock-0000000001".into(),
            source: Box::new(Error::NoNode("/l/_c_x-lock-0000000001".into())),
        };
        assert!(matches!(
            unguarded("/l", check_failed),
            Error::HoldLost { lock, source } if lock == "/l" && matches!(*source, Error::NoNode(_))
        ));
        assert!(matches!(
            unguarded("/l", Error::SessionExpired),
            Error::HoldLost { source, .. } if *source == Error::SessionExpired
        ));
        let theirs = Error::TransactionFailed {
            index: 2,
            op: "delete /a".into(),
            source: Box::new(Error::NotEmpty("/a".into())),
        };
        assert!(matches!(
            unguarded("/l", theirs),
            Error::TransactionFailed { index: 1, .. }
        ));
        assert_eq!(
            unguarded("/l", Error::ConnectionLoss),
            Error::ConnectionLoss
        );
    }

    /// The server's check, with nothing local in the way: a hold whose node is gone is refused
    /// by the transaction itself, and nothing of it is applied.
    #[cfg(feature = "testing")]
    #[test]
    fn the_server_refuses_a_write_behind_a_node_that_is_gone() {
        use std::time::Duration;

        let server = crate::testing::TestingServer::start().unwrap();
        let client = Client::builder(&server.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connect()
            .unwrap();
        client
            .create("/g/data")
            .parents_as_containers()
            .call()
            .unwrap();
        let mutex = InterProcessMutex::new(&client, "/g/lock").unwrap();
        mutex.acquire().unwrap();
        let node = mutex.lock_node().unwrap();
        multi(
            &client,
            "/g/lock",
            &node,
            &[Op::set_data("/g/data", b"held")],
        )
        .unwrap();
        client.delete(&node).unwrap();
        let err = multi(
            &client,
            "/g/lock",
            &node,
            &[Op::set_data("/g/data", b"stale")],
        );
        assert!(
            matches!(&err, Err(Error::HoldLost { lock, source })
                if lock == "/g/lock" && **source == Error::NoNode(node.clone())),
            "{err:?}"
        );
        assert_eq!(client.data("/g/data").unwrap().0, b"held");
        let _ = mutex.release();
        client.close();
    }
}
