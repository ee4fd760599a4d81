//! Curator's cooperative revocation: a contender asks the holder to release.

use crate::core::error::{Error, Result};
use crate::zookeeper::client::Client;

/// What Curator's `Revoker` writes into a holder's node.
pub(crate) const REVOKE_MESSAGE: &[u8] = b"__REVOKE__";

/// Curator's `Revoker`: asks the holder of a lock node to release it, by writing `__REVOKE__`
/// into the node. Revocation is strictly cooperative: a holder that called
/// [`InterProcessMutex::make_revocable`](crate::InterProcessMutex::make_revocable) has its
/// listener called; whether and when it releases is up to it.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let mutex = zklock::InterProcessMutex::new(&client, "/locks/report")?;
/// if let Some(holder) = mutex.participant_nodes()?.first() {
///     zklock::Revoker::attempt_revoke(&client, holder)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Revoker;

impl Revoker {
    /// Asks the holder of `node_path` to release; a node that is already gone is fine.
    pub fn attempt_revoke(client: &Client, node_path: &str) -> Result<()> {
        match client.set_data(node_path, REVOKE_MESSAGE) {
            Ok(_) | Err(Error::NoNode(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
