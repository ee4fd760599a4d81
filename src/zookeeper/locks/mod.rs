//! The ZooKeeper lock recipes: one algorithm (`internals`), drivers, and thin recipes on top.

mod driver;
mod guarded;
mod internals;
mod kazoo;
mod kazoo_semaphore;
pub(crate) mod keeper;
mod multi;
mod mutex;
mod raw;
mod read_write;
mod read_write_driver;
mod revocation;
mod semaphore;
mod semaphore_mutex;
mod shared_count;
mod store;
mod waiter;

pub use self::driver::{LockDriver, LockNode, Predicate, StandardDriver, UnfairDriver};
pub(crate) use self::internals::{Acquired, Leases, LockInternals, Progress, Release, Resumable};
pub use self::kazoo::KazooDriver;
pub use self::kazoo_semaphore::{KazooLease, KazooSemaphore};
pub use self::mutex::{InterProcessMutex, MutexGuard};
pub use self::read_write::{InterProcessReadWriteLock, ReadLock, WriteLock};
pub use self::revocation::Revoker;
pub use self::semaphore::{InterProcessSemaphoreV2, Lease};
pub use self::semaphore_mutex::InterProcessSemaphoreMutex;
pub use self::shared_count::{SharedCount, VersionedCount};
