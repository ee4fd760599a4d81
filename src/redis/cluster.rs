//! Redis Cluster: each lock's scripts go to the primary that owns the lock's hash slot.
//!
//! A Client given `redis+cluster://[[user]:password@]host[:port][,host[:port]…]` (port 6379
//! unless given; `rediss+cluster://` for TLS to every node) reads the slot map (`CLUSTER SLOTS`) from the first seed node that answers,
//! and sends every script of one lock to the primary owning the slot of the lock's keys (they
//! share a hash tag, so one slot). A `MOVED` answer stands for the slot's entry until the map
//! is read again (before the next call, from the node named first) and the script is sent
//! again there; an `ASK` answer sends it once to the node named, after `ASKING`, and changes
//! nothing else (a redirect names its node as the map does, see [`redirect`]); `TRYAGAIN` and `CLUSTERDOWN` are retried through the retry policy. A connection
//! that fails marks the map stale: the next call reads it again (from the node that answered
//! last, the primaries it names, then the seeds), and while the slot's primary cannot be
//! reached (a failover under way) the map is read again every 100 ms until the call's bound.
//!
//! Over TLS each seed's certificate is checked against the host the URL names for it, and
//! each other node's against the address the map gives for it — an IP address, unless the
//! nodes announce host names (`cluster-announce-hostname` with
//! `cluster-preferred-endpoint-type hostname`): as the `redis` crate's cluster client does,
//! and as the nodes' certificates are usually issued. A certificate refused fails the call
//! at once with rustls's reason (it would be refused again).
//!
//! Wake-ups need no routing: a `PUBLISH` on a cluster reaches the subscribers of every node,
//! so the subscriber and the waiting slots subscribe on any primary; when the slot map
//! changes (a failover, a resharding) they subscribe again, on a primary of the new map.
//!
//! The `redis` crate's `cluster` feature does the routing too, but its blocking connection
//! retries and re-reads the map on its own schedule (a frozen node can hold a call past its
//! bound) and cannot share the keeper's per-node pipelines; this one opens every connection
//! within what is left of its caller's bound, over the backend's own connections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::node::{Node, Tls};
use super::sentinel::share;

/// The default port of a cluster node.
const NODE_PORT: u16 = 6379;

/// The number of hash slots.
const SLOTS: u16 = 16384;

/// How long between two readings of the map while a slot's primary cannot be reached.
const RETRY: Duration = Duration::from_millis(100);

/// A parsed `redis+cluster://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterUrl {
    /// `host:port` of each seed node.
    pub(crate) seeds: Vec<String>,
    /// `user:password@` as written (percent-encoded), or empty.
    auth: String,
    /// `rediss+cluster://`: TLS to every node.
    pub(crate) tls: bool,
}

/// Parses `url` (`redis+cluster://…`); `Err` says what is wrong (without the password).
pub(crate) fn parse(url: &str) -> Result<ClusterUrl, String> {
    let form = "redis+cluster://[[user]:password@]host[:port][,host[:port]…]";
    let (tls, rest) = match (
        url.strip_prefix("redis+cluster://"),
        url.strip_prefix("rediss+cluster://"),
    ) {
        (Some(rest), _) => (false, rest),
        (None, Some(rest)) => (true, rest),
        (None, None) => {
            return Err(format!(
                "a cluster URL starts with redis+cluster:// or rediss+cluster:// ({form})"
            ))
        }
    };
    if rest.contains('?') {
        return Err(format!("a cluster URL takes no options ({form})"));
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !matches!(path, "" | "0") {
        return Err(format!(
            "a cluster has database 0 only: {path:?} after the nodes is not allowed ({form})"
        ));
    }
    let (auth, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let mut seeds = Vec::new();
    for host in hosts.split(',') {
        let (name, port) = super::sentinel::split_port(host)
            .ok_or_else(|| format!("{host:?} is not host[:port]"))?;
        if name.is_empty() {
            return Err(format!("a cluster URL names at least one node ({form})"));
        }
        let port = port.unwrap_or(NODE_PORT);
        seeds.push(match name.contains(':') {
            true => format!("[{name}]:{port}"),
            false => format!("{name}:{port}"),
        });
    }
    Ok(ClusterUrl {
        seeds,
        auth: auth.to_owned(),
        tls,
    })
}

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag — what is between the first `{`
/// and the next `}`, if not empty — or of the whole key, modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(bytes)) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// One range of slots and its primary (`host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    start: u16,
    end: u16,
    node: String,
}

/// The nodes of one cluster and its slot map, read at the first call and again after a
/// redirect or a failed connection.
pub(crate) struct Cluster {
    url: ClusterUrl,
    /// The TLS options, for a `rediss+cluster://` URL.
    tls: Tls,
    /// One direct server per node met, with the URL's credentials.
    servers: Mutex<HashMap<String, Node>>,
    map: RwLock<Vec<Range>>,
    /// Slots a `MOVED` answer placed elsewhere than the map says, until a map agrees.
    moved: RwLock<HashMap<u16, String>>,
    /// A connection failed since the map was read: read it again before the next route.
    stale: AtomicBool,
    /// The node whose map was read last: asked first next time.
    last: Mutex<Option<String>>,
    /// How many times the map has changed: connections that subscribe (on any primary) are
    /// opened again on a primary of the new map.
    moves: AtomicU64,
    /// One reading of the map at a time.
    reading: Mutex<()>,
}

impl Cluster {
    pub(crate) fn new(url: ClusterUrl, tls: Tls) -> Cluster {
        Cluster {
            url,
            tls,
            servers: Mutex::new(HashMap::new()),
            map: RwLock::new(Vec::new()),
            moved: RwLock::new(HashMap::new()),
            stale: AtomicBool::new(true),
            last: Mutex::new(None),
            moves: AtomicU64::new(0),
            reading: Mutex::new(()),
        }
    }

    /// How many times the slot map has changed.
    pub(crate) fn moves(&self) -> u64 {
        self.moves.load(Ordering::Acquire)
    }

    /// A connection failed, or a node answered `TRYAGAIN`/`CLUSTERDOWN`: the map is read
    /// again before the next route.
    pub(crate) fn suspect(&self) {
        self.stale.store(true, Ordering::Release);
    }

    /// A `MOVED slot node` answer (`node` as [`redirect`] gives it): `slot` is served by
    /// `node` until the next map, which is read again before the next route, asking `node`
    /// first.
    pub(crate) fn moved(&self, slot: u16, node: &str) {
        tracing::debug!("zklock: Redis Cluster slot {slot} moved to {node}");
        self.moved.write().insert(slot, node.to_owned());
        *self.last.lock() = Some(node.to_owned());
        self.stale.store(true, Ordering::Release);
    }

    /// What an error answered by `from` (`host:port`) says of the slot map: a `MOVED` is
    /// recorded (see [`moved`](Self::moved)); an `ASK` is not, it is for the one call that
    /// met it; anything else marks the map stale. The redirect, if it is one.
    pub(crate) fn redirected(&self, e: &redis::RedisError, from: &str) -> Option<Redirect> {
        let found = redirect(e, from);
        match &found {
            Some(Redirect::Moved { slot, node }) => self.moved(*slot, node),
            Some(Redirect::Ask { .. }) => {}
            None => self.suspect(),
        }
        found
    }

    /// The primary of `slot` as known now, without I/O; `None` when the map is stale or
    /// does not know it.
    pub(crate) fn known(&self, slot: u16) -> Option<String> {
        if self.stale.load(Ordering::Acquire) {
            return None;
        }
        self.lookup(slot)
    }

    /// The primary of `slot` as known now, stale or not.
    pub(crate) fn serving(&self, slot: u16) -> Option<String> {
        self.lookup(slot)
    }

    fn lookup(&self, slot: u16) -> Option<String> {
        if let Some(node) = self.moved.read().get(&slot) {
            return Some(node.clone());
        }
        let map = self.map.read();
        map.iter()
            .find(|r| r.start <= slot && slot <= r.end)
            .map(|r| r.node.clone())
    }

    fn server(&self, node: &str) -> redis::RedisResult<Node> {
        let mut servers = self.servers.lock();
        if let Some(s) = servers.get(node) {
            return Ok(s.clone());
        }
        let scheme = if self.url.tls { "rediss" } else { "redis" };
        let server = self
            .tls
            .open(&format!("{scheme}://{}{node}", self.url.auth))?;
        servers.insert(node.to_owned(), server.clone());
        Ok(server)
    }

    /// A connection to `node`, opened within `timeout`, reads and writes bounded by `io`.
    pub(crate) fn connect_node(
        &self,
        node: &str,
        timeout: Duration,
        io: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        self.server(node)?.connect(timeout, io)
    }

    /// The nodes to ask for the map, or to subscribe on: the one that answered last, the
    /// primaries of the map, then the seeds.
    fn candidates(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        let mut add = |n: &str| {
            if !all.iter().any(|a| a == n) {
                all.push(n.to_owned());
            }
        };
        if let Some(last) = self.last.lock().as_deref() {
            add(last);
        }
        for r in self.map.read().iter() {
            add(&r.node);
        }
        for s in &self.url.seeds {
            add(s);
        }
        all
    }

    /// A connection to any primary (the seeds at first), opened within `timeout`: for the
    /// server check and for subscriptions, which every node's `PUBLISH` reaches.
    pub(crate) fn connect_any(
        &self,
        timeout: Duration,
        io: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        let until = Instant::now() + timeout;
        let candidates = self.candidates();
        let mut why = Vec::new();
        for (i, node) in candidates.iter().enumerate() {
            let Some(share) = share(until, candidates.len() - i) else {
                why.push(format!("no time left to connect to {node}"));
                break;
            };
            match self
                .connect_node(node, share, io.min(share))
                .and_then(|mut c| {
                    redis::cmd("PING").query::<()>(&mut c)?;
                    Ok(c)
                }) {
                Ok(c) => return Ok(c),
                Err(e) if fatal(&e) => return Err(e),
                Err(e) => why.push(format!("{node}: {e}")),
            }
        }
        Err(unreachable(&why))
    }

    /// A connection to the primary of `slot` (and its `host:port`), opened within `timeout`.
    /// The map is read first if stale; while the primary it names cannot be reached (a
    /// failover under way), the map is read again every 100 ms until `timeout` runs out.
    pub(crate) fn connect_slot(
        &self,
        slot: u16,
        timeout: Duration,
        io: Duration,
    ) -> redis::RedisResult<(String, redis::Connection)> {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if self.stale.load(Ordering::Acquire) || self.lookup(slot).is_none() {
                match self.read_map(left, io) {
                    Ok(()) => {}
                    Err(e) if fatal(&e) || self.lookup(slot).is_none() => return Err(e),
                    Err(e) => tracing::debug!("zklock: the Redis Cluster map was not read: {e}"),
                }
            }
            let Some(node) = self.lookup(slot) else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                    "no node serves the slot",
                    format!("the cluster's map names no primary for slot {slot}"),
                )));
            };
            let left = until.saturating_duration_since(Instant::now());
            let opened = match left.is_zero() {
                true => Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no time left to connect",
                ))),
                false => self.connect_node(&node, left, io),
            };
            match opened {
                Ok(c) => return Ok((node, c)),
                Err(e) if fatal(&e) => return Err(e),
                Err(e) => {
                    self.suspect();
                    if until.saturating_duration_since(Instant::now()) < RETRY {
                        // A primary of the map that refuses is one that died: a failover is
                        // under way (or the cluster is down), which the caller's retries may
                        // outlast — a lost connection, not a refused one.
                        return Err(redis::RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::NotConnected,
                            format!("the primary {node} of slot {slot} cannot be reached: {e}"),
                        )));
                    }
                    tracing::debug!("zklock: Redis Cluster node {node} cannot be reached: {e}");
                    std::thread::sleep(RETRY);
                }
            }
        }
    }

    /// Reads the slot map (`CLUSTER SLOTS`) from the first candidate that answers, within
    /// `timeout`. A reading already under way in another thread is waited for instead.
    pub(crate) fn read_map(&self, timeout: Duration, io: Duration) -> redis::RedisResult<()> {
        let until = Instant::now() + timeout;
        let Some(_reading) = self.reading.try_lock_for(timeout) else {
            return Err(timed_out("the cluster's map is being read by another call"));
        };
        if !self.stale.load(Ordering::Acquire) && !self.map.read().is_empty() {
            return Ok(());
        }
        let candidates = self.candidates();
        let mut why = Vec::new();
        let mut refused = 0;
        for (i, node) in candidates.iter().enumerate() {
            let Some(share) = share(until, candidates.len() - i) else {
                why.push(format!("no time left to ask {node}"));
                break;
            };
            let asked = self
                .connect_node(node, share, io.min(share))
                .and_then(|mut c| {
                    redis::cmd("CLUSTER")
                        .arg("SLOTS")
                        .query::<redis::Value>(&mut c)
                });
            let answer = match asked {
                Ok(a) => a,
                Err(e) if fatal(&e) => return Err(e),
                Err(e) => {
                    refused += usize::from(!super::error::broken(&e));
                    why.push(format!("{node}: {e}"));
                    continue;
                }
            };
            match ranges(&answer, node) {
                Some(map) if !map.is_empty() => {
                    self.install(map);
                    *self.last.lock() = Some(node.clone());
                    self.stale.store(false, Ordering::Release);
                    return Ok(());
                }
                Some(_) => why.push(format!(
                    "{node} serves no slot (a cluster not yet created: assign the slots with \
                     redis-cli --cluster create)"
                )),
                None => why.push(format!("{node} answered CLUSTER SLOTS with {answer:?}")),
            }
            refused += 1;
        }
        let why = why.join("; ");
        if refused > 0 && refused == candidates.len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "not a Redis Cluster node",
                why,
            )));
        }
        Err(unreachable_why(why))
    }

    /// Installs a map read just now: it replaces every `MOVED` answer met before it.
    fn install(&self, map: Vec<Range>) {
        let mut old = self.map.write();
        self.moved.write().clear();
        if *old != map {
            if !old.is_empty() {
                tracing::info!("zklock: the Redis Cluster slot map changed");
                self.moves.fetch_add(1, Ordering::AcqRel);
            }
            *old = map;
        }
    }
}

/// An error no other node would answer otherwise: a refused password, a refused certificate.
fn fatal(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
        || super::error::tls_refused(e)
}

fn timed_out(what: &str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        what.to_owned(),
    ))
}

fn unreachable(why: &[String]) -> redis::RedisError {
    unreachable_why(why.join("; "))
}

fn unreachable_why(why: String) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        format!("no Redis Cluster node answered: {why}"),
    ))
}

/// A node's `host:port` as a node names it (in its map or in a redirect), as zklock keys
/// its nodes: an IPv6 address in brackets, and no host (`""`, or `?` for a host name not
/// announced) replaced by the host of `asked`, the node that answered.
fn endpoint(host: &str, port: u16, asked: &str) -> String {
    match host {
        "" | "?" => {
            let asked_host = asked.rsplit_once(':').map_or(asked, |(h, _)| h);
            format!("{asked_host}:{port}")
        }
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]:{port}"),
        h => format!("{h}:{port}"),
    }
}

/// A redirect answered by a cluster node, its node written as [`endpoint`] writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED`: the slot is served by `node` for good.
    Moved { slot: u16, node: String },
    /// `ASK`: this one call goes to `node`, after `ASKING` (the slot is being moved there).
    Ask { slot: u16, node: String },
}

/// The redirect `e` is (or, for a pipeline's, its first failed command's), answered by `from`
/// (`host:port`); `None` if it is none or names no valid node.
pub(crate) fn redirect(e: &redis::RedisError, from: &str) -> Option<Redirect> {
    if !matches!(
        e.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::Ask | redis::ServerErrorKind::Moved)
    ) {
        return None;
    }
    // `MOVED 3999 host:port`; a pipeline's error keeps its commands' errors apart.
    let detail = match e.detail() {
        Some(detail) => detail.to_owned(),
        None => e
            .clone()
            .into_server_errors()?
            .first()?
            .1
            .details()?
            .to_owned(),
    };
    let mut words = detail.split_ascii_whitespace();
    let slot: u16 = words.next()?.parse().ok()?;
    let (host, port) = words.next()?.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let node = endpoint(host, port.parse().ok()?, from);
    match e.kind() {
        redis::ErrorKind::Server(redis::ServerErrorKind::Ask) => Some(Redirect::Ask { slot, node }),
        _ => Some(Redirect::Moved { slot, node }),
    }
}

/// The ranges of a `CLUSTER SLOTS` answer, asked of `asked` (whose host stands in for a
/// node that gives none); `None` if the answer is not one.
fn ranges(answer: &redis::Value, asked: &str) -> Option<Vec<Range>> {
    let redis::Value::Array(entries) = answer else {
        return None;
    };
    let mut map = Vec::new();
    for entry in entries {
        let redis::Value::Array(parts) = entry else {
            return None;
        };
        let start: u16 = redis::from_redis_value(parts.first()?.clone()).ok()?;
        let end: u16 = redis::from_redis_value(parts.get(1)?.clone()).ok()?;
        let redis::Value::Array(primary) = parts.get(2)? else {
            return None;
        };
        // No endpoint (`cluster-preferred-endpoint-type unknown-endpoint`) is a nil.
        let host: String = match primary.first()? {
            redis::Value::Nil => String::new(),
            h => redis::from_redis_value(h.clone()).ok()?,
        };
        let port: u16 = redis::from_redis_value(primary.get(1)?.clone()).ok()?;
        map.push(Range {
            start,
            end,
            node: endpoint(&host, port, asked),
        });
    }
    map.sort_by_key(|r| r.start);
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag() {
        // Values from the Redis Cluster specification's examples and redis-cli.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("123456789"), 12739);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        let keys =
            super::super::scripts::Keys::new("orders/42", super::super::scripts::Layout::ReadWrite);
        let first = slot(keys.all()[0]);
        assert!(keys.all().iter().all(|k| slot(k) == first));
        // Any name keeps its keys together, except one that begins with '}' (an empty tag).
        for name in ["a}b{c", "x{y", "{z}", "}"] {
            let keys = super::super::scripts::Keys::new(name, super::super::scripts::Layout::Queue);
            let slots: Vec<u16> = keys.all().iter().map(|k| slot(k)).collect();
            assert_eq!(
                slots.iter().all(|s| *s == slots[0]),
                !name.starts_with('}'),
                "{name}"
            );
        }
    }

    #[test]
    fn a_cluster_url_names_its_seeds() {
        let u = parse("redis+cluster://:pw@10.0.0.1,10.0.0.2:7001,[::1]:7002").unwrap();
        assert_eq!(u.seeds, ["10.0.0.1:6379", "10.0.0.2:7001", "[::1]:7002"]);
        assert_eq!(u.auth, ":pw@");
        assert!(!u.tls);
        assert_eq!(parse("redis+cluster://h:7000/").unwrap().seeds, ["h:7000"]);
        let u = parse("rediss+cluster://node-a:7000,node-b:7001").unwrap();
        assert!(u.tls);
        assert_eq!(u.seeds, ["node-a:7000", "node-b:7001"]);
        for (url, why) in [
            ("redis+cluster://", "at least one node"),
            ("redis+cluster://h:port", "host[:port]"),
            ("redis+cluster://h/3", "database 0"),
            ("redis+cluster://h?x=1", "no options"),
            ("redis+cluster://a,,b", "at least one node"),
        ] {
            let e = parse(url).unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn redirects_name_nodes_as_maps_do() {
        let e = |kind, detail: &str| {
            redis::RedisError::from((
                redis::ErrorKind::Server(kind),
                "redirect",
                detail.to_owned(),
            ))
        };
        let (moved, ask) = (redis::ServerErrorKind::Moved, redis::ServerErrorKind::Ask);
        let from = "10.1.1.1:7000";
        for (detail, node) in [
            ("3999 127.0.0.1:7001", "127.0.0.1:7001"),
            ("3999 ::1:7001", "[::1]:7001"),
            ("3999 [::1]:7001", "[::1]:7001"),
            ("3999 ?:7001", "10.1.1.1:7001"),
            ("3999 :7001", "10.1.1.1:7001"),
            ("3999 node-b:7001", "node-b:7001"),
        ] {
            let node = node.to_owned();
            assert_eq!(
                redirect(&e(moved, detail), from),
                Some(Redirect::Moved {
                    slot: 3999,
                    node: node.clone()
                }),
                "{detail}"
            );
            assert_eq!(
                redirect(&e(ask, detail), from),
                Some(Redirect::Ask { slot: 3999, node }),
                "{detail}"
            );
        }
        for detail in ["3999", "x 127.0.0.1:7001", "3999 127.0.0.1", "3999 h:port"] {
            assert_eq!(redirect(&e(moved, detail), from), None, "{detail}");
        }
        let other = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain),
            "x",
        ));
        assert_eq!(redirect(&other, from), None);
    }

    #[test]
    fn a_moved_answer_lasts_until_the_next_map() {
        let cluster = Cluster::new(
            parse("redis+cluster://10.1.1.1:7000").unwrap(),
            Tls::default(),
        );
        let range = |node: &str| Range {
            start: 0,
            end: SLOTS - 1,
            node: node.to_owned(),
        };
        cluster.install(vec![range("10.1.1.1:7000")]);
        cluster.stale.store(false, Ordering::Release);
        cluster.moved(5, "10.1.1.1:7001");
        assert_eq!(cluster.known(5), None, "the map is read again first");
        assert_eq!(cluster.serving(5).as_deref(), Some("10.1.1.1:7001"));
        assert_eq!(cluster.candidates()[0], "10.1.1.1:7001", "asked first");
        // A map that names neither (the node moved to failed over since) replaces it.
        cluster.install(vec![range("10.1.1.1:7002")]);
        assert_eq!(cluster.serving(5).as_deref(), Some("10.1.1.1:7002"));
    }

    #[test]
    fn a_slots_answer_is_read_as_ranges() {
        use redis::Value::{Array, BulkString, Int};
        let node = |h: &str, p| Array(vec![BulkString(h.into()), Int(p)]);
        let answer = Array(vec![
            Array(vec![
                Int(5461),
                Int(16383),
                node("", 7001),
                node("127.0.0.1", 7004),
            ]),
            Array(vec![Int(0), Int(5460), node("127.0.0.1", 7000)]),
        ]);
        let map = ranges(&answer, "10.1.1.1:7000").unwrap();
        assert_eq!(map[0].node, "127.0.0.1:7000");
        assert_eq!((map[1].start, map[1].end), (5461, 16383));
        assert_eq!(map[1].node, "10.1.1.1:7001");
    }
}
