//! The size of a request: the server's packet limit, and the checks that refuse, before any
//! I/O, a request the server would drop the connection for.

use super::Client;
use crate::core::error::{Error, Result};

/// The largest request a ZooKeeper server reads by default: `jute.maxbuffer`, 1 MiB − 1 bytes,
/// for the whole request after its length prefix (header, path, data, ACL). A larger one makes
/// the server drop the connection.
pub(crate) const MAX_PACKET: usize = 1024 * 1024 - 1;

/// What a request takes besides its path, data and ACL: the header (8 bytes), the path's and
/// the data's lengths (4 each), and a version or the create's flags and ACL count (4 + 4).
pub(crate) const REQUEST_OVERHEAD: usize = 24;

/// The most node data any request can carry (with the shortest path, `/x`, and no ACL).
pub(crate) const MAX_DATA_LEN: usize = MAX_PACKET - REQUEST_OVERHEAD - 2;

/// Refuses data no request could carry (see [`MAX_DATA_LEN`]).
pub(crate) fn check_data(data: &[u8]) -> Result<()> {
    if data.len() > MAX_DATA_LEN {
        return Err(Error::invalid(format!(
            "node data of {} bytes cannot fit in a request: ZooKeeper's packet limit is {MAX_PACKET} \
             bytes for the whole request (jute.maxbuffer)",
            data.len()
        )));
    }
    Ok(())
}

impl Client {
    /// Refuses, before any I/O, a request the server would drop the connection for: `path` (as
    /// given; the namespace is added here, as the wire client adds it) with `data` and `acl`
    /// bytes more than its packet limit.
    pub(super) fn check_request(&self, path: &str, data: usize, acl: usize) -> Result<()> {
        let namespace = self.namespace().map_or(0, |ns| ns.len() + 1);
        let size = REQUEST_OVERHEAD + namespace + path.len() + data + acl;
        if size > MAX_PACKET {
            return Err(Error::invalid(format!(
                "{path:?}: a request of {size} bytes ({data} bytes of data) is over ZooKeeper's \
                 packet limit of {MAX_PACKET} bytes for the whole request (jute.maxbuffer); the \
                 server would drop the connection"
            )));
        }
        Ok(())
    }
}
