//! The file backend (`file:///dir`, always built): the locks of one host, among its processes,
//! with no server. [`FileClient`] opens a directory of a local filesystem; every process that
//! opens the same directory shares its [`FileMutex`]es, [`FileReadWriteLock`]s,
//! [`FileSemaphore`]s and [`FileLeaderLatch`]es. See `docs/file.md` in the repository for
//! what it guarantees and what it cannot. [`FileClient`] is also at the crate root, and
//! `zklock::connect("file:///dir")` reaches the same locks.
//!
//! It is Curator's algorithm on files: each attempt is a sequentially numbered entry file
//! under an operating-system lock held for the attempt's life (freed by the kernel when the
//! process dies, as a ZooKeeper session ends an ephemeral node); the lowest live entry holds;
//! each waiter watches the entry ahead of it only; the fencing token is the entry's number,
//! from a counter synced to disk. A frozen holder (SIGSTOP, a stalled VM) keeps the lock for
//! as long as it is frozen: unlike the server backends, nothing frees it on a timer.
//!
//! # Example
//! ```
//! use zklock::file::{FileClient, FileMutex};
//! use zklock::Lock;
//!
//! # fn main() -> zklock::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("zklock-doc-file-{}", std::process::id()));
//! let client = FileClient::open(&dir)?;
//! let mutex = FileMutex::new(&client, "ledger")?;
//! let _guard = mutex.lock()?;
//! # drop(_guard); client.close(); let _ = std::fs::remove_dir_all(&dir);
//! # Ok(()) }
//! ```

pub(crate) mod any;
mod client;
mod latch;
mod mutex;
mod participants;
mod queue;
mod semaphore;

pub use client::FileClient;
pub use latch::FileLeaderLatch;
pub use mutex::{FileMutex, FileReadWriteLock};
pub use participants::FileParticipant;
pub use semaphore::{FileLease, FileSemaphore};
