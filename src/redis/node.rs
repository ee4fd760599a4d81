//! One Redis server reached directly — the one server of a `redis://` URL, a sentinel, a
//! primary a sentinel names, a cluster node — and the TLS options its connections open with.

use std::time::Duration;

/// The `redis` crate's client for one server, and how many replies a new connection's setup
/// waits for.
#[derive(Clone)]
pub(crate) struct Node {
    redis: Box<redis::Client>,
    /// `AUTH` (or `HELLO`) and `SELECT`, each when the URL asks for it.
    setup_replies: u32,
}

impl Node {
    /// The server `info` names, its client made by `open`, with new connections that send no
    /// `CLIENT SETINFO` (two more replies to wait for on each).
    pub(crate) fn new(
        info: redis::ConnectionInfo,
        open: impl FnOnce(redis::ConnectionInfo) -> redis::RedisResult<redis::Client>,
    ) -> redis::RedisResult<Node> {
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let resp3 = settings.protocol().supports_resp3();
        let setup_replies =
            u32::from(resp3 || settings.password().is_some()) + u32::from(settings.db() != 0);
        let redis = open(info.set_redis_settings(settings))?;
        Ok(Node {
            redis: Box::new(redis),
            setup_replies,
        })
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
        let share = (timeout / self.setup_replies.max(1)).max(Duration::from_millis(1));
        let conn = self.redis.get_connection_with_timeout(share)?;
        let io = io.max(Duration::from_millis(1));
        conn.set_read_timeout(Some(io))?;
        conn.set_write_timeout(Some(io))?;
        Ok(conn)
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
    pub(crate) fn open(&self, url: &str) -> redis::RedisResult<Node> {
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
            return Node::new(info, |info| {
                redis::Client::build_with_tls(info, certificates)
            });
        }
        Node::new(info, redis::Client::open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_waits_for_one_setup_reply_per_command_the_url_asks_for() {
        let replies = |url: &str| {
            let info = redis::IntoConnectionInfo::into_connection_info(url).unwrap();
            Node::new(info, redis::Client::open).unwrap().setup_replies
        };
        assert_eq!(replies("redis://127.0.0.1:6379"), 0);
        assert_eq!(replies("redis://127.0.0.1:6379/3"), 1);
        assert_eq!(replies("redis://:pw@127.0.0.1:6379"), 1);
        assert_eq!(replies("redis://user:pw@127.0.0.1:6379/2"), 2);
        assert_eq!(replies("redis://127.0.0.1:6379/?protocol=resp3"), 1);
    }
}
