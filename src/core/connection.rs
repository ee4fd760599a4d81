//! The connection state every backend's Client reports, with Curator's meaning.

/// The connection state of a Client, with Curator's meaning, on every backend.
///
/// | state | meaning |
/// |---|---|
/// | `Connected` | the first connection is established |
/// | `Suspended` | the connection is gone (or the server stopped answering); the server may still keep our session or holds — a held lock's validity is unknown |
/// | `Reconnected` | connected again: to the same session, or (after `Lost`) to a new one |
/// | `Lost` | the session expired, or the server has been silent so long that it may have expired (what the server keeps for us has expired) |
/// | `ReadOnly` | ZooKeeper: connected to a server that is partitioned from its quorum (read-only mode) |
///
/// `Lost` is raised locally no later than one session timeout (on Redis: one hold TTL) after
/// the server last answered, even while it is still unreachable.
///
/// # Example
/// ```
/// use zklock::ConnectionState;
/// assert!(ConnectionState::Reconnected.is_connected());
/// assert!(!ConnectionState::Suspended.is_connected());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// The first successful connection.
    Connected,
    /// The connection was lost; the session may still be alive.
    Suspended,
    /// Connected again after `Suspended` or `Lost`.
    Reconnected,
    /// The session is (or must be taken as) expired.
    Lost,
    /// Connected to a read-only server (ZooKeeper).
    ReadOnly,
}

impl ConnectionState {
    /// Whether requests can be served in this state.
    pub fn is_connected(self) -> bool {
        matches!(self, Self::Connected | Self::Reconnected | Self::ReadOnly)
    }
}
