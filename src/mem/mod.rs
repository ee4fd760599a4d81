//! The in-process backend, `mem://NAME`: zklock's locks with no server, for unit tests of code
//! that takes locks, and for programs whose threads are the only contenders. Always built (no
//! cargo feature, no dependency beyond the core). See `docs/mem.md` in the repository.
//!
//! Every Client made from the same name in one process shares its locks, as Clients of one
//! server do; different names never share, and nothing crosses a process. The semantics are
//! those of every backend — fair, re-entrant mutexes, read-write locks, semaphores, leader
//! latches, fencing tokens, health, `close()` and `cancel_waiters()` — and the conformance
//! suite runs on it: it is the reference implementation of the contract.
//!
//! # Testing your rollback path
//! [`MemClient`] has controls that stage what a server would do to a session: make its holds
//! read `Suspended` or `Lost` (the lock freed for others at once), or freeze it so that its
//! calls fail with their stated bounds. A service written against [`Lock`](crate::Lock) or
//! [`AnyClient`](crate::AnyClient) runs unchanged on `mem://` in its unit tests:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use zklock::mem::{MemClient, MemMutex};
//! use zklock::{AnyClient, Error, Lock, LockHealth};
//!
//! /// The code under test: debits an account under a lock, and undoes the debit when the lock
//! /// turns out to be lost before the work is committed.
//! struct Ledger {
//!     lock: Arc<dyn Lock>,
//!     balance: i64,
//! }
//!
//! impl Ledger {
//!     fn debit(&mut self, amount: i64, work: impl FnOnce()) -> Result<(), String> {
//!         self.lock.acquire().map_err(|e| e.to_string())?;
//!         let before = self.balance;
//!         self.balance -= amount;
//!         work();
//!         if self.lock.health() != Some(LockHealth::Held) {
//!             self.balance = before; // the rollback under test
//!             let released = self.lock.release();
//!             return Err(format!("rolled back: {released:?}"));
//!         }
//!         self.lock.release().map_err(|e| e.to_string())
//!     }
//! }
//!
//! # fn main() -> zklock::Result<()> {
//! // The test: a store of its own, and a clone of the Client kept for the controls.
//! let client = MemClient::isolated();
//! let locks = AnyClient::from(client.clone());
//! let mut ledger = Ledger { lock: locks.mutex("ledger")?, balance: 100 };
//!
//! // The session is lost in the middle of the work: the debit is undone.
//! let outcome = ledger.debit(30, || {
//!     client.lose_holds();
//! });
//! assert_eq!(outcome, Err(format!("rolled back: {:?}", Err::<(), _>(Error::LockLost))));
//! assert_eq!(ledger.balance, 100);
//!
//! // The lost lock was freed at once: another Client of the store takes it.
//! let other = MemClient::connect(client.store_name())?;
//! assert!(MemMutex::new(&other, "ledger")?.try_lock()?.is_some());
//!
//! // Undisturbed, the debit stands.
//! assert_eq!(ledger.debit(30, || {}), Ok(()));
//! assert_eq!(ledger.balance, 70);
//!
//! // A frozen Client: calls fail within the operation timeout (1 ms here).
//! let slow = MemClient::builder(client.store_name())
//!     .operation_timeout(Duration::from_millis(1))
//!     .connect()?;
//! let mutex = MemMutex::new(&slow, "ledger")?;
//! slow.freeze();
//! assert_eq!(mutex.try_lock().map(|g| g.is_some()), Err(Error::ConnectionLoss));
//! slow.unfreeze();
//! assert!(mutex.try_lock()?.is_some());
//! # Ok(()) }
//! ```

pub(crate) mod any;
mod client;
mod latch;
mod mutex;
mod read_write;
mod semaphore;
mod store;

pub use client::{MemClient, MemClientBuilder};
pub use latch::MemLeaderLatch;
pub use mutex::MemMutex;
pub use read_write::{MemReadLock, MemReadWriteLock, MemWriteLock};
pub use semaphore::{MemLease, MemSemaphore};
pub use store::MemParticipant;

#[cfg(test)]
mod tests;
