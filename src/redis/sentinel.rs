//! Redis Sentinel: the primary of a replicated set, found through its sentinels.
//!
//! A Client given `redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/NAME[/db]`
//! (sentinel port 26379 by default; `?sentinel_password=…` and `sentinel_username=…` for
//! sentinels that ask for a password of their own; `rediss+sentinel://` for TLS to the
//! sentinels and to the data nodes, with the Client's TLS options) asks the sentinels for the primary named
//! `NAME` each time it opens a connection — the command pool's, the keeper's, the
//! subscriber's and the waiting slots' — and checks with `ROLE` that the node it names is a
//! primary. A failover closes the Client's connections to the old primary (the sentinels
//! send `CLIENT KILL` to it, or it died) — or leaves them open on a node that still answers as
//! a primary until the sentinels reconfigure it, which the keeper finds by asking the
//! sentinels at every renewal round ([`Sentinels::primary_moved`]); each is opened again on
//! the new one: the keeper
//! renews there (a hold whose key the new primary lacks reads `Lost`), the subscriber and
//! the slots subscribe again there, and waiters look again.
//!
//! The `redis` crate's `sentinel` module does the same lookup but opens its connections
//! without a timeout (a frozen sentinel would hang a call, where every zklock call has a
//! bound) and reads no URL form; this one opens every connection within what is left of its
//! caller's bound.
//!
//! Over TLS each sentinel's certificate is checked against the host the URL names for it,
//! and the primary's against the address the sentinels give for it (an IP address, unless
//! the sentinels announce host names): as the `redis` crate's sentinel client does. A
//! certificate refused by every sentinel, or by the primary they name, fails the connection
//! at once with rustls's reason (it would be refused again).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::node::{Node, Tls};

/// The sentinels' default port.
const SENTINEL_PORT: u16 = 26379;

/// A parsed `redis+sentinel://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// `host:port` of each sentinel.
    pub(crate) sentinels: Vec<String>,
    /// The primary's name, as the sentinels monitor it.
    pub(crate) master: String,
    /// `rediss+sentinel://`: TLS to the sentinels and to the data nodes.
    pub(crate) tls: bool,
    /// The data nodes' `user:password@` as written (percent-encoded), or empty.
    node_auth: String,
    /// The sentinels' `user:password@`, from the query, or empty.
    sentinel_auth: String,
    db: String,
}

/// Parses `url` (`redis+sentinel://…`); `Err` says what is wrong (without the password).
pub(crate) fn parse(url: &str) -> Result<SentinelUrl, String> {
    let form = "redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/primary_name[/db]";
    let (tls, rest) = match (
        url.strip_prefix("redis+sentinel://"),
        url.strip_prefix("rediss+sentinel://"),
    ) {
        (Some(rest), _) => (false, rest),
        (None, Some(rest)) => (true, rest),
        (None, None) => {
            return Err(format!(
                "a sentinel URL starts with redis+sentinel:// or rediss+sentinel:// ({form})"
            ))
        }
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (node_auth, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let mut sentinels = Vec::new();
    for host in hosts.split(',') {
        let (name, port) =
            split_port(host).ok_or_else(|| format!("{host:?} is not host[:port]"))?;
        if name.is_empty() {
            return Err(format!(
                "a sentinel URL names at least one sentinel ({form})"
            ));
        }
        let port = port.unwrap_or(SENTINEL_PORT);
        sentinels.push(match name.contains(':') {
            true => format!("[{name}]:{port}"),
            false => format!("{name}:{port}"),
        });
    }
    let mut parts = path.split('/');
    let master = parts.next().unwrap_or_default();
    if master.is_empty() {
        return Err(format!(
            "a sentinel URL names the primary after the sentinels, as the sentinels monitor it \
             ({form})"
        ));
    }
    let db = match parts.next() {
        None | Some("") => "0".to_owned(),
        Some(db) if db.parse::<u32>().is_ok() => db.to_owned(),
        Some(db) => return Err(format!("{db:?} is not a database number")),
    };
    if parts.any(|p| !p.is_empty()) {
        return Err(format!("too many path segments ({form})"));
    }
    let (mut user, mut password) = ("", None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sentinel_password", v)) => password = Some(v),
            Some(("sentinel_username", v)) => user = v,
            _ => {
                let name = pair.split('=').next().unwrap_or_default();
                return Err(format!(
                    "unknown option {name:?}: a sentinel URL takes sentinel_password and \
                     sentinel_username"
                ));
            }
        }
    }
    let sentinel_auth = match (user, password) {
        ("", None) => String::new(),
        (user, password) => format!("{user}:{}@", password.unwrap_or_default()),
    };
    Ok(SentinelUrl {
        sentinels,
        master: master.to_owned(),
        tls,
        node_auth: node_auth.to_owned(),
        sentinel_auth,
        db,
    })
}

/// `host[:port]` (an IPv6 host in brackets) as the host and the port if given.
pub(crate) fn split_port(host: &str) -> Option<(&str, Option<u16>)> {
    if let Some(v6) = host.strip_prefix('[') {
        let (name, rest) = v6.split_once(']')?;
        return match rest.strip_prefix(':') {
            Some(port) => Some((name, Some(port.parse().ok()?))),
            None if rest.is_empty() => Some((name, None)),
            None => None,
        };
    }
    match host.split_once(':') {
        Some((name, port)) => Some((name, Some(port.parse().ok()?))),
        None => Some((host, None)),
    }
}

/// The sentinels of one primary, asked for it at every new connection.
pub(crate) struct Sentinels {
    url: SentinelUrl,
    /// One direct server per sentinel, with the sentinels' credentials.
    sentinels: Vec<Node>,
    /// How the data nodes are reached: `redis` or `rediss`, with the TLS options.
    scheme: &'static str,
    tls: Tls,
    /// The sentinel that answered last: asked first next time.
    first: AtomicUsize,
    /// Per sentinel: whether it failed to answer its last question (silent, refused, gone):
    /// asked after every other until it answers again.
    silent: Vec<AtomicBool>,
    /// The primary the last connection went to, and how many times that changed: a
    /// connection made before a change is to a node that is no longer the primary, which may
    /// say nothing (paused, cut off) rather than close it.
    primary: parking_lot::Mutex<String>,
    moves: AtomicU64,
}

impl Sentinels {
    pub(crate) fn new(url: SentinelUrl, tls: Tls) -> redis::RedisResult<Sentinels> {
        let scheme = if url.tls { "rediss" } else { "redis" };
        let sentinels = url
            .sentinels
            .iter()
            .map(|s| tls.open(&format!("{scheme}://{}{s}", url.sentinel_auth)))
            .collect::<redis::RedisResult<Vec<Node>>>()?;
        Ok(Sentinels {
            silent: sentinels.iter().map(|_| AtomicBool::new(false)).collect(),
            url,
            sentinels,
            scheme,
            tls,
            first: AtomicUsize::new(0),
            primary: parking_lot::Mutex::new(String::new()),
            moves: AtomicU64::new(0),
        })
    }

    /// How many times the primary connections go to has changed.
    pub(crate) fn moves(&self) -> u64 {
        self.moves.load(Ordering::Acquire)
    }

    /// A connection to the primary, opened within `timeout` (the sentinels' answers
    /// included), with reads and writes bounded by `io`. Each sentinel is asked in turn
    /// ([`order`](Self::order): the one that answered last first, one that did not answer
    /// last) until a majority of the sentinels in the URL name one node, which must say it is
    /// a primary (one stale sentinel decides nothing), each within an even share of the time
    /// left for the sentinels not yet asked (at least 200 ms); the connection to the node
    /// and its `ROLE` check get the next share. While no primary is found this way (a
    /// failover under way: the primary named is down, or not yet promoted), they are asked
    /// again every 100 ms until `timeout` runs out; a sentinel that did not answer is asked
    /// again only while no other has answered. So a silent sentinel costs one share, a
    /// third of `timeout` with three sentinels, once per call.
    ///
    /// When sentinels answered but no primary was found, the connections the Client has are
    /// dropped as well (see [`primary_moved`](Self::primary_moved)): their primary is not
    /// confirmed either.
    ///
    /// The error says what each sentinel answered: a refused connection when no sentinel
    /// answered; a lost connection (retried by the caller's policy) when the sentinels
    /// answered but no primary could be reached; an error of its own kind when every
    /// sentinel knows no primary of that name.
    pub(crate) fn connect(
        &self,
        timeout: Duration,
        io: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        let until = Instant::now() + timeout;
        let current = self.primary.lock().clone();
        let mut heard = Heard::new(self.sentinels.len());
        loop {
            match self.round(until, io, &mut heard) {
                Round::Connected(c) => return Ok(c),
                Round::Failed(e) => return Err(e),
                Round::Again(why, answered) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left < RETRY {
                        if heard.any {
                            // Sentinels answered, and no majority named a primary: the
                            // connections open are not to one a majority names either.
                            self.unconfirmed(&current);
                        }
                        let master = &self.url.master;
                        let (kind, what) = match answered {
                            true => (std::io::ErrorKind::NotConnected, "no primary"),
                            false => (std::io::ErrorKind::ConnectionRefused, "no primary"),
                        };
                        return Err(redis::RedisError::from(std::io::Error::new(
                            kind,
                            format!("{what} {master:?} through the sentinels: {why}"),
                        )));
                    }
                    std::thread::sleep(RETRY);
                }
            }
        }
    }

    /// Whether the sentinels now name a primary other than the one the Client's connections
    /// go to, each asked in [`order`](Self::order) within an even share of what is left of
    /// `timeout` for those not yet asked (a silent sentinel costs its share, and is asked last
    /// from then on). The answers are counted until a majority of the sentinels in the URL
    /// name one node: the current primary (no move) or another (a move), so that one sentinel
    /// that has not yet heard of a failover, or still names a primary it lost (cut off with
    /// it by a partition), decides neither: it costs a majority of questions, two of three
    /// sentinels, per renewal round. If another node, the count of moves is raised, so that every connection to the old
    /// primary is dropped at its next use or read slice and opened again on the new one. The
    /// keeper asks at every renewal round: after a `SENTINEL FAILOVER` the old primary goes on
    /// answering as a primary, and its connections stay open, until the sentinels reconfigure
    /// it (about 10 s later with Redis 7's sentinels), and a node cut off by a partition may
    /// answer as a primary for as long as it lasts. No majority for the current primary within
    /// `timeout` (a Client on the minority side of a partition, or sentinels that disagree) is
    /// a move too, to no primary: the connections are dropped, and new ones open only where a
    /// majority names (`true`). A `timeout` under 10 ms decides nothing.
    pub(crate) fn primary_moved(&self, timeout: Duration) -> bool {
        let current = self.primary.lock().clone();
        // Too little time to hear any sentinel decides nothing.
        if current.is_empty() || timeout < DECIDE {
            return false;
        }
        let until = Instant::now() + timeout;
        let n = self.sentinels.len();
        let order = self.order();
        let mut tally = Tally::new(current, n);
        for (j, &i) in order.iter().enumerate() {
            let Some(share) = share(until, n - j) else {
                break;
            };
            let asked = self.ask(i, share, share);
            let Ok(Some((host, port))) = asked else {
                continue;
            };
            if tally.is_empty() {
                self.first.store(i, Ordering::Relaxed);
            }
            let (node, count) = match tally.answer(node_address(host, port)) {
                Verdict::Stay => return false,
                Verdict::Ask => continue,
                Verdict::Move { node, votes } => (node, votes),
            };
            let mut primary = self.primary.lock();
            if *primary == node {
                // A connection opened meanwhile asked the sentinels and moved there.
                return false;
            }
            tracing::info!(
                "zklock: {count} of {n} sentinels name {node} as the Redis primary {:?}, where \
                 this Client's connections went to {primary}: they are opened again there",
                self.url.master
            );
            *primary = node;
            self.moves.fetch_add(1, Ordering::AcqRel);
            return true;
        }
        // No majority named the current primary within the bound (the Client is cut off from
        // most sentinels, or they disagree).
        self.unconfirmed(&tally.current)
    }

    /// No majority of the sentinels named `current`, the primary the Client's connections go
    /// to: unless they moved meanwhile, they are dropped (the count of moves raised), and the
    /// next ones open only where a majority names — none while the Client is cut off from most
    /// sentinels. Whether they were.
    fn unconfirmed(&self, current: &str) -> bool {
        let mut primary = self.primary.lock();
        if primary.is_empty() || *primary != current {
            return false;
        }
        tracing::warn!(
            "zklock: no majority of the {} sentinels confirmed {primary} as the Redis primary \
             {:?}: this Client's connections to it are dropped",
            self.sentinels.len(),
            self.url.master
        );
        primary.clear();
        self.moves.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// The order to ask the sentinels in: the one that answered last first, then the others
    /// in the URL's order from there, and those that did not answer their last question after
    /// every other.
    fn order(&self) -> Vec<usize> {
        let n = self.sentinels.len();
        let first = self.first.load(Ordering::Relaxed);
        let mut order: Vec<usize> = (0..n).map(|i| (first + i) % n).collect();
        order.sort_by_key(|&i| self.silent[i].load(Ordering::Relaxed));
        order
    }

    /// Sentinel `i`'s answer to "which node is the primary?", the connection opened within
    /// `timeout` and the answer read within `io`; whether it answered is remembered for
    /// [`order`](Self::order). A node that answers with an error (it is not a sentinel)
    /// answered too.
    fn ask(
        &self,
        i: usize,
        timeout: Duration,
        io: Duration,
    ) -> redis::RedisResult<Option<(String, u16)>> {
        let asked = self.sentinels[i].connect(timeout, io).and_then(|mut c| {
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.url.master)
                .query::<Option<(String, u16)>>(&mut c)
        });
        let answered = asked
            .as_ref()
            .map_or_else(|e| !super::error::broken(e), |_| true);
        let silent = !answered;
        if self.silent[i].swap(silent, Ordering::Relaxed) != silent {
            match answered {
                true => tracing::debug!("zklock: sentinel {} answers again", self.url.sentinels[i]),
                false => tracing::debug!(
                    "zklock: sentinel {} did not answer within {timeout:?}: asked after the \
                     others until it does",
                    self.url.sentinels[i]
                ),
            }
        }
        asked
    }

    /// Each sentinel asked once (one that did not answer earlier in this call only while none
    /// has), each within its share of the time left.
    fn round(&self, until: Instant, io: Duration, heard: &mut Heard) -> Round {
        let n = self.sentinels.len();
        let master = &self.url.master;
        let mut why = Vec::new();
        let (mut unknown, mut answered, mut not_sentinel) = (0, false, 0);
        let mut refused_tls = None;
        let order: Vec<usize> = self
            .order()
            .into_iter()
            .filter(|&i| !(heard.any && heard.silent[i]))
            .collect();
        let skipped = n - order.len();
        // The primary is the node a majority of the sentinels name, not one sentinel's word.
        let mut tally = Tally::new(String::new(), n);
        let mut named = Vec::new();
        let mut first_answer = None;
        for (j, &i) in order.iter().enumerate() {
            let at = &self.url.sentinels[i];
            let Some(bound) = share(until, order.len() - j) else {
                why.push(format!("no time left to ask sentinel {at}"));
                break;
            };
            let asked = self.ask(i, bound, bound.min(io));
            let answered_now = asked
                .as_ref()
                .map_or_else(|e| !super::error::broken(e), |_| true);
            answered |= answered_now;
            heard.any |= answered_now;
            heard.silent[i] = !answered_now;
            let (host, port) = match asked {
                Ok(Some(addr)) => addr,
                Ok(None) => {
                    unknown += 1;
                    why.push(format!("sentinel {at} knows no primary named {master:?}"));
                    continue;
                }
                Err(e) => {
                    not_sentinel += usize::from(!super::error::broken(&e));
                    why.push(format!("sentinel {at}: {e}"));
                    if super::error::tls_refused(&e) {
                        refused_tls.get_or_insert(e);
                    }
                    continue;
                }
            };
            let node = node_address(host, port);
            first_answer.get_or_insert(i);
            named.push(format!("sentinel {at} names {node}"));
            let node = match tally.answer(node) {
                Verdict::Move { node, .. } => node,
                Verdict::Ask | Verdict::Stay => continue,
            };
            let Some(left) = share(until, order.len() - j) else {
                why.push(format!("no time left to connect to {node}"));
                break;
            };
            let opened = self
                .tls
                .open(&format!(
                    "{}://{}{node}/{}",
                    self.scheme, self.url.node_auth, self.url.db
                ))
                .and_then(|server| server.connect(left, left.min(io)))
                .and_then(|mut c| {
                    let role: redis::Value = redis::cmd("ROLE").query(&mut c)?;
                    Ok((c, role))
                });
            match opened {
                Ok((c, role)) if is_primary(&role) => {
                    self.first
                        .store(first_answer.unwrap_or(i), Ordering::Relaxed);
                    let mut primary = self.primary.lock();
                    if *primary != node {
                        if !primary.is_empty() {
                            tracing::info!("zklock: the Redis primary {master:?} is now {node}");
                            self.moves.fetch_add(1, Ordering::AcqRel);
                        }
                        *primary = node;
                    }
                    return Round::Connected(c);
                }
                Ok(_) => why.push(format!(
                    "a majority of the sentinels name {node} for {master:?}, which is not a \
                     primary (a failover is under way)"
                )),
                // A refused password or database is the caller's to hear as it is.
                Err(e) if e.kind() == redis::ErrorKind::AuthenticationFailed => {
                    return Round::Failed(e)
                }
                Err(e) if matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM")) => {
                    return Round::Failed(e)
                }
                // So is a certificate refused: it would be refused again.
                Err(e) if super::error::tls_refused(&e) => return Round::Failed(e),
                Err(e) => why.push(format!("a majority of the sentinels name {node}: {e}")),
            }
            // No other node can have a majority: ask again in the next round.
            break;
        }
        if !tally.decided() && !named.is_empty() {
            why.push(format!(
                "no node named by a majority ({} of {n}): {}",
                n / 2 + 1,
                named.join(", ")
            ));
        }
        if skipped > 0 {
            why.push(format!(
                "{skipped} sentinel(s) that did not answer earlier not asked again"
            ));
        }
        let why = why.join("; ");
        match refused_tls {
            // No sentinel answered, and one refused over TLS: a wrong CA or certificate.
            Some(e) if !answered => return Round::Failed(e),
            _ => {}
        }
        if skipped == 0 && unknown == n {
            return Round::Failed(redis::RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "no sentinel knows the primary",
                why,
            )));
        }
        if skipped == 0 && not_sentinel > 0 && unknown + not_sentinel == n {
            return Round::Failed(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "not a sentinel, or no sentinel knows the primary",
                why,
            )));
        }
        Round::Again(why, answered)
    }
}

/// The sentinels' answers to "which node is the primary?", one at a time, against the primary
/// the Client's connections go to: a node is believed, to stay on or to move to, once a
/// majority of the sentinels in the URL name it, so that one stale sentinel decides nothing.
struct Tally {
    current: String,
    majority: usize,
    votes: Vec<(String, usize)>,
}

/// What the answers so far say.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The current primary stays.
    Stay,
    /// Not decided: ask the next sentinel.
    Ask,
    /// A majority (`votes`) names `node`.
    Move { node: String, votes: usize },
}

impl Tally {
    fn new(current: String, sentinels: usize) -> Tally {
        Tally {
            current,
            majority: sentinels / 2 + 1,
            votes: Vec::new(),
        }
    }

    /// Whether no answer has come yet.
    fn is_empty(&self) -> bool {
        self.votes.is_empty()
    }

    /// Whether a node has a majority.
    fn decided(&self) -> bool {
        self.votes.iter().any(|(_, v)| *v >= self.majority)
    }

    /// One more sentinel's answer: it names `node`.
    fn answer(&mut self, node: String) -> Verdict {
        let votes = match self.votes.iter_mut().find(|(v, _)| *v == node) {
            Some((_, count)) => {
                *count += 1;
                *count
            }
            None => {
                self.votes.push((node.clone(), 1));
                1
            }
        };
        match votes >= self.majority {
            false => Verdict::Ask,
            true if node == self.current => Verdict::Stay,
            true => Verdict::Move { node, votes },
        }
    }
}

/// `host:port` of a node the sentinels name (`[host]:port` for an IPv6 address).
fn node_address(host: String, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// How long between two rounds of questions to the sentinels.
const RETRY: Duration = Duration::from_millis(100);

/// The least time [`Sentinels::primary_moved`] asks the sentinels in: with less, it decides
/// nothing (a loopback sentinel answers in about a millisecond).
const DECIDE: Duration = Duration::from_millis(10);

/// The least time a candidate is given, however little is left for each.
const MIN_SHARE: Duration = Duration::from_millis(200);

/// An even share of what is left until `until` for each of `n` more candidates — sentinels,
/// cluster nodes, a close's pipelines to each primary — (at least [`MIN_SHARE`], at most what
/// is left); `None` when nothing is left.
pub(crate) fn share(until: Instant, n: usize) -> Option<Duration> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return None;
    }
    let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    Some((left / n).max(MIN_SHARE).min(left))
}

/// What one call to [`Sentinels::connect`] has heard so far: whether any sentinel answered,
/// and which did not.
struct Heard {
    any: bool,
    silent: Vec<bool>,
}

impl Heard {
    fn new(n: usize) -> Heard {
        Heard {
            any: false,
            silent: vec![false; n],
        }
    }
}

/// What one round of questions to the sentinels gave.
enum Round {
    Connected(redis::Connection),
    /// Not to be asked again: every sentinel knows no such primary, or a password was refused.
    Failed(redis::RedisError),
    /// Why not, and whether any sentinel answered.
    Again(String, bool),
}

/// Whether a `ROLE` answer is a primary's (`master` first).
fn is_primary(role: &redis::Value) -> bool {
    match role {
        redis::Value::Array(parts) => {
            matches!(
                parts.first(),
                Some(redis::Value::BulkString(b)) if b.as_slice() == b"master"
            ) || matches!(parts.first(), Some(redis::Value::SimpleString(s)) if s == "master")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_primary_is_believed_once_a_majority_of_the_sentinels_name_it() {
        let answers = |sentinels: usize, names: &[&str]| {
            let mut tally = Tally::new("a:1".to_owned(), sentinels);
            names
                .iter()
                .map(|n| tally.answer((*n).to_owned()))
                .collect::<Vec<_>>()
        };
        let to_b = |votes| Verdict::Move {
            node: "b:1".to_owned(),
            votes,
        };
        // Staying takes a majority too: two questions of three.
        assert_eq!(answers(3, &["a:1", "a:1"]), [Verdict::Ask, Verdict::Stay]);
        // One stale sentinel names another node: the others are asked and keep the primary.
        assert_eq!(
            answers(3, &["b:1", "a:1", "a:1"]),
            [Verdict::Ask, Verdict::Ask, Verdict::Stay]
        );
        // One stale sentinel names the old primary: the others move the Client.
        assert_eq!(
            answers(3, &["a:1", "b:1", "b:1"]),
            [Verdict::Ask, Verdict::Ask, to_b(2)]
        );
        // Two of three name the new primary.
        assert_eq!(answers(3, &["b:1", "b:1"]), [Verdict::Ask, to_b(2)]);
        assert_eq!(
            answers(3, &["b:1", "a:1", "b:1"]),
            [Verdict::Ask, Verdict::Ask, to_b(2)]
        );
        // Three different answers: no majority, no move.
        assert_eq!(
            answers(3, &["b:1", "c:1", "a:1"]),
            [Verdict::Ask, Verdict::Ask, Verdict::Ask]
        );
        // One sentinel is its own majority; of five, three must agree.
        assert_eq!(answers(1, &["b:1"]), [to_b(1)]);
        assert_eq!(
            answers(5, &["b:1", "b:1", "c:1", "b:1"]),
            [Verdict::Ask, Verdict::Ask, Verdict::Ask, to_b(3)]
        );
    }

    #[test]
    fn a_sentinel_url_names_the_sentinels_the_primary_and_the_database() {
        let u = parse("redis+sentinel://:pw@10.0.0.1,10.0.0.2:5000,[::1]:26380/locks/3").unwrap();
        assert_eq!(
            u.sentinels,
            ["10.0.0.1:26379", "10.0.0.2:5000", "[::1]:26380"]
        );
        assert_eq!(u.master, "locks");
        assert_eq!(u.node_auth, ":pw@");
        assert_eq!(u.sentinel_auth, "");
        assert_eq!(u.db, "3");
        assert!(!u.tls);
        let u = parse("rediss+sentinel://s1:26380,s2/locks").unwrap();
        assert!(u.tls);
        assert_eq!(u.sentinels, ["s1:26380", "s2:26379"]);
        let u = parse("redis+sentinel://h/m?sentinel_password=s3&sentinel_username=sen").unwrap();
        assert_eq!(u.sentinel_auth, "sen:s3@");
        assert_eq!(u.db, "0");
    }

    #[test]
    fn a_sentinel_url_without_a_primary_name_or_with_junk_is_refused() {
        for (url, why) in [
            ("redis+sentinel://127.0.0.1:26379", "names the primary"),
            ("redis+sentinel://127.0.0.1:26379/", "names the primary"),
            ("redis+sentinel:///m", "at least one sentinel"),
            ("redis+sentinel://h:port/m", "host[:port]"),
            ("redis+sentinel://h/m/x", "database number"),
            ("redis+sentinel://h/m/1/2", "too many"),
            ("redis+sentinel://h/m?password=x", "unknown option"),
        ] {
            let e = parse(url).unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
        }
    }
}
