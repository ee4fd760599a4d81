//! The server a Client talks to, and connections to it opened within a bound: one server, or
//! the primary its sentinels name at each new connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

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
        };
        let share = (timeout / self.setup_replies.max(1)).max(Duration::from_millis(1));
        let conn = redis.get_connection_with_timeout(share)?;
        let io = io.max(Duration::from_millis(1));
        conn.set_read_timeout(Some(io))?;
        conn.set_write_timeout(Some(io))?;
        Ok(conn)
    }

    /// How many times the primary has moved (sentinels only; always 0 for one server): a
    /// connection opened before the count last changed should be opened again.
    pub(crate) fn moves(&self) -> u64 {
        match &self.target {
            Target::Direct(_) => 0,
            Target::Sentinels(s) => s.moves(),
        }
    }

    /// [`connect`](Self::connect) within what is left until `until` (at most `timeout`).
    pub(crate) fn connect_by(
        &self,
        until: Instant,
        timeout: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        let left = until.saturating_duration_since(Instant::now()).min(timeout);
        if left.is_zero() {
            return Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no time left to connect",
            )));
        }
        self.connect(left, left)
    }
}

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
