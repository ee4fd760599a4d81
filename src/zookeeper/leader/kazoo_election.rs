//! KazooElection: kazoo's `Election`, a leader election on kazoo's lock layout.

use crate::core::error::Result;
use crate::zookeeper::client::Client;
use crate::zookeeper::locks::InterProcessMutex;

/// kazoo's `Election(path, identifier)`: contenders queue on a kazoo-layout lock at `path`
/// (nodes `<path>/<uuid hex>__lock__<seq10>` holding their identifiers) and the holder leads
/// while its function runs, so Python processes running kazoo's `Election.run` and Rust
/// processes elect one leader between them. Curator's layouts are
/// [`LeaderLatch`](crate::LeaderLatch) and [`LeaderSelector`](crate::LeaderSelector).
///
/// # Blocking
/// [`run`](Self::run) blocks until this contender leads, runs the function, then steps down
/// (its node is deleted in the background, so the next contender is elected). Another thread
/// can end the wait with [`cancel`](Self::cancel).
///
/// # Errors
/// [`Error::Cancelled`](crate::Error::Cancelled) for a cancelled wait (kazoo's `run` returns
/// quietly there); [`Error::OnWatcherThread`](crate::Error::OnWatcherThread) when called from a
/// listener; connection errors once the retry policy gives up.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// // Python beside it: zk.Election("/election/billing", "py-1").run(lead)
/// let election = zklock::zookeeper::KazooElection::new(&client, "/election/billing", "rust-1")?;
/// let served = election.run(|epoch| {
///     println!("leading, epoch {epoch}");
///     42
/// })?;
/// assert_eq!(served, 42);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct KazooElection {
    mutex: InterProcessMutex,
}

impl KazooElection {
    /// A contender for the election at `path`, naming itself `identifier`. No I/O.
    pub fn new(client: &Client, path: &str, identifier: &str) -> Result<KazooElection> {
        Ok(KazooElection {
            mutex: InterProcessMutex::kazoo(client, path, identifier)?,
        })
    }

    /// Waits to be elected, then runs `lead` with the term's fencing epoch (its node's creation
    /// zxid, rising across terms) and steps down when it returns: kazoo's `Election.run`.
    pub fn run<R>(&self, lead: impl FnOnce(u64) -> R) -> Result<R> {
        let guard = self.mutex.lock()?;
        let served = lead(guard.fencing_token());
        drop(guard);
        Ok(served)
    }

    /// Ends a [`run`](Self::run) still waiting to be elected, in any thread, with
    /// [`Error::Cancelled`](crate::Error::Cancelled); a running leader is not interrupted.
    pub fn cancel(&self) {
        self.mutex.cancel_waiters();
    }

    /// The contenders' identifiers, the leader first (kazoo's `contenders()`).
    pub fn contenders(&self) -> Result<Vec<String>> {
        self.mutex.contenders()
    }
}
