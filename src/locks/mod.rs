//! The lock recipes: one algorithm (`internals`), drivers, and thin recipes on top.

mod driver;
mod guard;
mod internals;
mod mutex;
mod read_write;
mod reentrant;
mod semaphore;

pub use self::driver::{LockDriver, LockNode, Predicate, StandardDriver, UnfairDriver};
pub use self::guard::{Lock, LockGuard};
pub use self::mutex::{InterProcessMutex, MutexGuard};
pub use self::read_write::{InterProcessReadWriteLock, ReadLock, WriteLock};
pub use self::semaphore::{InterProcessSemaphoreMutex, InterProcessSemaphoreV2, Lease};
