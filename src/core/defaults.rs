//! The defaults of the options every backend's Client shares, stated once: a Client of any
//! backend, however it is made (its own builder, `connect`, a URL, the command line), starts
//! from these.

use std::time::Duration;

/// The session timeout every backend gets unless told otherwise: the server frees a silent
/// holder's locks this long after its last heartbeat (ZooKeeper's session timeout, the Redis
/// keys' TTL, the PostgreSQL and MySQL sessions' limits).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The connect timeout every backend gets unless told otherwise; it also bounds each round
/// trip (the operation timeout) unless that is set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
