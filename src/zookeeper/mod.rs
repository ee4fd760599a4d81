//! The ZooKeeper backend (feature `zookeeper`, on by default): the Client, the lock protocol
//! with Curator's node layouts, the lock recipes and leader election. Its names keep Curator's
//! (and kazoo's), and are also at the crate root, where Curator's users look for them.
//!
//! # Example
//! ```no_run
//! use zklock::zookeeper::{Client, InterProcessMutex};
//! use zklock::Lock;
//!
//! # fn main() -> zklock::Result<()> {
//! let client = Client::connect("127.0.0.1:2181")?;
//! let mutex = InterProcessMutex::new(&client, "/locks/ledger")?;
//! let _guard = mutex.lock()?;
//! # Ok(()) }
//! ```

pub(crate) mod any;
pub(crate) mod client;
mod error;
pub(crate) mod leader;
pub(crate) mod locks;
pub(crate) mod path;

pub use self::client::{
    Acl, AclProvider, Client, ClientBuilder, Create, CreateMode, ErrorPolicy, Op, OpResult, Perms,
    Stat, Watch, WatchEvent, WatchEventKind,
};
pub use self::leader::{
    elect, CloseMode, KazooElection, LeaderLatch, LeaderLatchBuilder, LeaderSelector,
    LeaderSelectorBuilder, Leadership, Participant,
};
pub use self::locks::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreMutex,
    InterProcessSemaphoreV2, KazooDriver, KazooLease, KazooSemaphore, Lease, LockDriver, LockNode,
    MutexGuard, Predicate, ReadLock, Revoker, SharedCount, StandardDriver, UnfairDriver,
    VersionedCount, WriteLock,
};
