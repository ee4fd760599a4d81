//! The lock recipes: one algorithm (`internals`), drivers, and thin recipes on top.

mod driver;
mod guard;
mod internals;
mod mutex;
mod read_write;
mod reentrant;

pub use self::driver::{LockDriver, LockNode, Predicate, StandardDriver, UnfairDriver};
pub use self::guard::{Lock, LockGuard};
pub use self::mutex::{InterProcessMutex, MutexGuard};
pub use self::read_write::{InterProcessReadWriteLock, ReadLock, WriteLock};
