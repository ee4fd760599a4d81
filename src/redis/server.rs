//! The server a Client talks to, and connections to it opened within a bound: one server, the
//! primary its sentinels name at each new connection, or the primaries of a cluster (the one
//! that owns a lock's slot, for that lock's calls).

use std::sync::Arc;
use std::time::Duration;

use super::cluster::Cluster;
use super::scripts::Keys;
use super::sentinel::Sentinels;

/// The `redis` crate's client for the server, and how many replies a new connection's setup
/// waits for; or the sentinels that name the primary.
#[derive(Clone)]
pub(crate) struct Server {
    target: Target,
    /// `AUTH` (or `HELLO`) and `SELECT`, each when the URL asks for it.
    setup_replies: u32,
}

#[derive(Clone)]
enum Target {
    /// One server.
    Direct(Box<redis::Client>),
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
    /// The server `info` names, its client made by `open`, with new connections that send no
    /// `CLIENT SETINFO` (two more replies to wait for on each).
    pub(crate) fn new(
        info: redis::ConnectionInfo,
        open: impl FnOnce(redis::ConnectionInfo) -> redis::RedisResult<redis::Client>,
    ) -> redis::RedisResult<Server> {
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let resp3 = settings.protocol().supports_resp3();
        let setup_replies =
            u32::from(resp3 || settings.password().is_some()) + u32::from(settings.db() != 0);
        let redis = open(info.set_redis_settings(settings))?;
        Ok(Server {
            target: Target::Direct(Box::new(redis)),
            setup_replies,
        })
    }

    /// The primary that `sentinels` name, looked up at each new connection.
    pub(crate) fn sentinel(sentinels: Sentinels) -> Server {
        Server {
            target: Target::Sentinels(Arc::new(sentinels)),
            setup_replies: 0,
        }
    }

    /// The primaries of the cluster in `cluster`.
    pub(crate) fn cluster(cluster: Cluster) -> Server {
        Server {
            target: Target::Cluster(Arc::new(cluster)),
            setup_replies: 0,
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

    /// A new connection, opened within `timeout` even when the server accepts it and then
    /// says nothing (the `redis` crate gives each setup reply the whole timeout that is left
    /// after the TCP connect, so each is given its share), with reads and writes bounded by
    /// `io`.
    pub(crate) fn connect(
        &self,
        timeout: Duration,
        io: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        let redis = match &self.target {
            Target::Direct(redis) => redis,
            Target::Sentinels(s) => return s.connect(timeout, io.max(Duration::from_millis(1))),
            Target::Cluster(c) => return c.connect_any(timeout, io.max(Duration::from_millis(1))),
        };
        let share = (timeout / self.setup_replies.max(1)).max(Duration::from_millis(1));
        let conn = redis.get_connection_with_timeout(share)?;
        let io = io.max(Duration::from_millis(1));
        conn.set_read_timeout(Some(io))?;
        conn.set_write_timeout(Some(io))?;
        Ok(conn)
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

/// The TLS options of a Client (feature `tls`), for every server it opens a `rediss://`
/// connection to: the one server, each sentinel and each primary they name, each cluster
/// node. Without a CA the system's are trusted; without an identity none is presented.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    /// The CA certificates to trust instead of the system's (PEM).
    #[cfg(feature = "tls")]
    pub(crate) ca: Option<String>,
    /// A client certificate and its key (PEM).
    #[cfg(feature = "tls")]
    pub(crate) identity: Option<(String, String)>,
}

impl Tls {
    /// The server at `url` (`redis://` or `rediss://`), its `rediss://` connections made
    /// with these options. Each server's certificate is checked against the host `url`
    /// names (a name, or an IP address).
    pub(crate) fn open(&self, url: &str) -> redis::RedisResult<Server> {
        let info = redis::IntoConnectionInfo::into_connection_info(url)?;
        #[cfg(feature = "tls")]
        if self.ca.is_some() || self.identity.is_some() {
            let certificates = redis::TlsCertificates {
                client_tls: self
                    .identity
                    .as_ref()
                    .map(|(cert, key)| redis::ClientTlsConfig {
                        client_cert: cert.clone().into_bytes(),
                        client_key: key.clone().into_bytes(),
                    }),
                root_cert: self.ca.as_ref().map(|pem| pem.clone().into_bytes()),
            };
            return Server::new(info, |info| {
                redis::Client::build_with_tls(info, certificates)
            });
        }
        Server::new(info, redis::Client::open)
    }
}

/// The node name of a cluster connection for no lock (any primary).
pub(crate) const ANY: &str = "*";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_waits_for_one_setup_reply_per_command_the_url_asks_for() {
        let replies = |url: &str| {
            let info = redis::IntoConnectionInfo::into_connection_info(url).unwrap();
            Server::new(info, redis::Client::open)
                .unwrap()
                .setup_replies
        };
        assert_eq!(replies("redis://127.0.0.1:6379"), 0);
        assert_eq!(replies("redis://127.0.0.1:6379/3"), 1);
        assert_eq!(replies("redis://:pw@127.0.0.1:6379"), 1);
        assert_eq!(replies("redis://user:pw@127.0.0.1:6379/2"), 2);
        assert_eq!(replies("redis://127.0.0.1:6379/?protocol=resp3"), 1);
    }
}
