//! The server a Client talks to, and connections to it opened within a bound: one server, the
//! primary its sentinels name at each new connection, or the primaries of a cluster (the one
//! that owns a lock's slot, for that lock's calls).

use std::sync::Arc;
use std::time::Duration;

use super::cluster::Cluster;
use super::node::Node;
use super::scripts::Keys;
use super::sentinel::Sentinels;

/// One server, the sentinels that name the primary, or a cluster's primaries.
#[derive(Clone)]
pub(crate) struct Server {
    target: Target,
}

#[derive(Clone)]
enum Target {
    /// One server.
    Direct(Node),
    /// The primary the sentinels name.
    Sentinels(Arc<Sentinels>),
    /// The primaries of a cluster.
    Cluster(Arc<Cluster>),
}

/// Where a lock's calls go: on a cluster, the hash slot its keys share; `None` elsewhere (and
/// for calls of no lock, which any node takes).
pub(crate) type Route = Option<u16>;

/// The route of the lock with `keys`.
pub(crate) fn route(keys: &Keys) -> Route {
    Some(super::cluster::slot(&keys.holder))
}

impl Server {
    /// One server, reached directly.
    pub(crate) fn direct(node: Node) -> Server {
        Server {
            target: Target::Direct(node),
        }
    }

    /// The primary that `sentinels` name, looked up at each new connection.
    pub(crate) fn sentinel(sentinels: Sentinels) -> Server {
        Server {
            target: Target::Sentinels(Arc::new(sentinels)),
        }
    }

    /// The primaries of the cluster in `cluster`.
    pub(crate) fn cluster(cluster: Cluster) -> Server {
        Server {
            target: Target::Cluster(Arc::new(cluster)),
        }
    }

    /// The cluster, if this is one.
    pub(crate) fn as_cluster(&self) -> Option<&Cluster> {
        match &self.target {
            Target::Cluster(c) => Some(c),
            _ => None,
        }
    }

    /// The node a connection for `route` goes to, as known now without I/O: `""` for one
    /// server or the sentinels' primary (every call goes there), the primary of the slot on a
    /// cluster (`None` if the map must be read first).
    pub(crate) fn known_node(&self, route: Route) -> Option<String> {
        match (&self.target, route) {
            (Target::Cluster(c), Some(slot)) => c.known(slot),
            (Target::Cluster(_), None) => Some(ANY.to_owned()),
            _ => Some(String::new()),
        }
    }

    /// A new connection for `route` and the node it goes to (as [`known_node`](Self::known_node)
    /// names it), opened within `timeout`, reads and writes bounded by `io`.
    pub(crate) fn connect_route(
        &self,
        route: Route,
        timeout: Duration,
        io: Duration,
    ) -> redis::RedisResult<(String, redis::Connection)> {
        match (&self.target, route) {
            (Target::Cluster(c), Some(slot)) => {
                c.connect_slot(slot, timeout, io.max(Duration::from_millis(1)))
            }
            (Target::Cluster(_), None) => Ok((ANY.to_owned(), self.connect(timeout, io)?)),
            _ => Ok((String::new(), self.connect(timeout, io)?)),
        }
    }

    /// A new connection to the cluster node `node` (`host:port`, from a redirect).
    pub(crate) fn connect_node(
        &self,
        node: &str,
        timeout: Duration,
        io: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        match &self.target {
            Target::Cluster(c) => c.connect_node(node, timeout, io.max(Duration::from_millis(1))),
            _ => self.connect(timeout, io),
        }
    }

    /// A new connection, opened within `timeout` (see [`Node::connect`]), with reads and
    /// writes bounded by `io`.
    pub(crate) fn connect(
        &self,
        timeout: Duration,
        io: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        match &self.target {
            Target::Direct(node) => node.connect(timeout, io),
            Target::Sentinels(s) => s.connect(timeout, io.max(Duration::from_millis(1))),
            Target::Cluster(c) => c.connect_any(timeout, io.max(Duration::from_millis(1))),
        }
    }

    /// Whether the sentinels name another primary than the one connections went to (see
    /// [`Sentinels::primary_moved`]); always `false` for one server or a cluster.
    pub(crate) fn primary_moved(&self, timeout: Duration) -> bool {
        match &self.target {
            Target::Sentinels(s) => s.primary_moved(timeout),
            _ => false,
        }
    }

    /// How many times the primary has moved (sentinels only; always 0 for one server): a
    /// connection opened before the count last changed should be opened again.
    pub(crate) fn moves(&self) -> u64 {
        match &self.target {
            Target::Direct(_) => 0,
            Target::Sentinels(s) => s.moves(),
            Target::Cluster(c) => c.moves(),
        }
    }
}

/// The node name of a cluster connection for no lock (any primary).
pub(crate) const ANY: &str = "*";
