//! The ZooKeeper constructor of the multi-lock: one mutex per path.

use super::mutex::InterProcessMutex;
use crate::core::error::Result;
use crate::core::lock::Lock;
use crate::core::multi::InterProcessMultiLock;
use crate::zookeeper::client::Client;

impl InterProcessMultiLock {
    /// One [`InterProcessMutex`] per distinct path, taken in sorted order.
    ///
    /// # Errors
    /// [`Error::InvalidPath`](crate::Error::InvalidPath) for a bad path;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for no path at all.
    pub fn new(client: &Client, paths: &[&str]) -> Result<InterProcessMultiLock> {
        let mut paths = paths.to_vec();
        paths.sort_unstable();
        paths.dedup();
        let locks = paths
            .iter()
            .map(|p| InterProcessMutex::new(client, p).map(|m| Box::new(m) as Box<dyn Lock>))
            .collect::<Result<Vec<_>>>()?;
        Self::from_locks(locks)
    }
}
