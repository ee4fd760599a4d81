//! The lock recipes: one algorithm (`internals`), drivers, and thin recipes on top.

mod driver;
mod internals;
mod mutex;

pub use self::driver::{LockDriver, LockNode, Predicate, StandardDriver, UnfairDriver};
pub use self::mutex::{InterProcessMutex, MutexGuard};
