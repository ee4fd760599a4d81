//! kazoo's lock layout: `<path>/<uuid hex>__lock__<seq10>` (and `__rlock__` for readers), with
//! kazoo's rule of who queues with whom.
//!
//! A contender is a child whose name ends in one of the names it queues with followed by the
//! ten-digit sequence (a minus before it past the signed wrap); the others in the directory are
//! not part of the lock. Contenders are ordered by that sequence.

use super::driver::{sequence_key, LockDriver, LockNode, Predicate};
use crate::core::error::{Error, Result};
use crate::zookeeper::client::CreateMode;

/// kazoo's node name for `Lock` and `WriteLock`.
pub(crate) const KAZOO_LOCK_NAME: &str = "__lock__";
/// kazoo's node name for `ReadLock`.
pub(crate) const KAZOO_READ_NAME: &str = "__rlock__";

/// Which kazoo recipe a driver stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `Lock`: queues with `__lock__` nodes (and the extra patterns).
    Lock,
    /// `WriteLock`: queues with `__lock__` and `__rlock__` nodes.
    Write,
    /// `ReadLock`: waits only for `__lock__` nodes ahead of it.
    Read,
}

/// A [`LockDriver`] on kazoo's node layout, so that a Rust process and Python processes using
/// kazoo's `Lock` queue for one lock: nodes `<path>/<uuid hex>__lock__<seq10>`, ephemeral
/// sequential, ordered by sequence; a contender holds when no contender is ahead of it and
/// otherwise watches the one just ahead. The node's data is the contender's identifier, as
/// kazoo's `contenders()` reads it (set it with
/// [`InterProcessMutex::set_node_data`](crate::InterProcessMutex::set_node_data), or use
/// [`InterProcessMutex::kazoo`](crate::InterProcessMutex::kazoo)).
///
/// # Extra lock patterns
/// kazoo's `extra_lock_patterns`: more node names to queue with, e.g. `-lock-` to queue with
/// Curator's mutex nodes (`_c_<uuid>-lock-<seq10>`) on the same path. zklock takes each as
/// plain text (kazoo reads them as regular-expression fragments; plain names mean the same
/// there): a child whose name ends in the pattern and a ten-digit sequence is a contender.
///
/// # Example
/// ```no_run
/// use zklock::InterProcessMutex;
/// use zklock::zookeeper::KazooDriver;
///
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// // Python: zk.Lock("/locks/report", "rust-1", extra_lock_patterns=["-lock-"])
/// let driver = KazooDriver::new().extra_lock_patterns(["-lock-"])?;
/// let mutex = InterProcessMutex::with_driver(&client, "/locks/report", driver)?;
/// mutex.set_node_data(b"rust-1")?;
/// let _guard = mutex.lock()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct KazooDriver {
    kind: Kind,
    /// The names whose nodes queue with ours (kazoo's `_exclude_names`), without our own.
    queue_with: Vec<String>,
}

impl Default for KazooDriver {
    fn default() -> Self {
        KazooDriver::new()
    }
}

impl KazooDriver {
    /// kazoo's `Lock`: queues with the `__lock__` nodes on the path.
    pub fn new() -> KazooDriver {
        KazooDriver::of(Kind::Lock)
    }

    fn of(kind: Kind) -> KazooDriver {
        let queue_with = match kind {
            Kind::Lock | Kind::Read => vec![KAZOO_LOCK_NAME.to_owned()],
            Kind::Write => vec![KAZOO_LOCK_NAME.to_owned(), KAZOO_READ_NAME.to_owned()],
        };
        KazooDriver { kind, queue_with }
    }

    /// kazoo's `WriteLock`.
    pub(crate) fn write() -> KazooDriver {
        KazooDriver::of(Kind::Write)
    }

    /// kazoo's `ReadLock`.
    pub(crate) fn read() -> KazooDriver {
        KazooDriver::of(Kind::Read)
    }

    /// Also queues with nodes named `<anything><pattern><seq10>` (kazoo's
    /// `extra_lock_patterns`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty pattern or one holding a `/`, which no node
    /// name can end in.
    pub fn extra_lock_patterns<I, S>(mut self, patterns: I) -> Result<KazooDriver>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for pattern in patterns {
            let pattern = pattern.into();
            if pattern.is_empty() || pattern.contains('/') {
                return Err(Error::invalid(format!(
                    "a kazoo lock pattern is part of a node name, not {pattern:?}"
                )));
            }
            if !self.queue_with.contains(&pattern) {
                self.queue_with.push(pattern);
            }
        }
        Ok(self)
    }

    /// Our own nodes' name.
    fn own_name(&self) -> &'static str {
        match self.kind {
            Kind::Lock | Kind::Write => KAZOO_LOCK_NAME,
            Kind::Read => KAZOO_READ_NAME,
        }
    }

    /// Whether `node` is a node of one of `names`.
    fn named(node: &str, names: &[String]) -> bool {
        sequence_of(node, names).is_some()
    }

    /// The names kazoo's `contenders()` lists: those we queue with and our own.
    fn contender_names(&self) -> Vec<String> {
        let mut names = self.queue_with.clone();
        if !names.iter().any(|n| n == self.own_name()) {
            names.push(self.own_name().to_owned());
        }
        names
    }
}

/// The sequence (ten digits, a minus before them past the signed wrap) of a node named
/// `<anything><name><sequence>` for one of `names`.
fn sequence_of<'a>(node: &'a str, names: &[String]) -> Option<&'a str> {
    let split = node.len().checked_sub(10)?;
    if !node.is_char_boundary(split) {
        return None;
    }
    let (rest, digits) = node.split_at(split);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if names.iter().any(|n| rest.ends_with(n.as_str())) {
        return Some(digits);
    }
    let signed = rest.strip_suffix('-')?;
    names
        .iter()
        .any(|n| signed.ends_with(n.as_str()))
        .then(|| &node[split - 1..])
}

impl LockDriver for KazooDriver {
    fn create_lock_node(&self, _lock_name: &str) -> LockNode {
        LockNode::kazoo(self.own_name(), CreateMode::EphemeralSequential)
    }

    /// Our node holds when no node it queues with is ahead; otherwise it watches the last such
    /// node ahead of it. (kazoo 2.8's `ReadLock` also counts writers queued *behind* it, which
    /// can deadlock with them; zklock's reader counts only those ahead, as the ZooKeeper
    /// shared-lock recipe and later kazoo releases do.)
    fn gets_the_lock(
        &self,
        children: &[String],
        our_node: &str,
        _max_leases: usize,
    ) -> Result<Predicate> {
        let ours = children
            .iter()
            .position(|c| c == our_node)
            .ok_or_else(|| Error::NoNode(our_node.to_owned()))?;
        match children[..ours]
            .iter()
            .rev()
            .find(|c| Self::named(c, &self.queue_with))
        {
            None => Ok(Predicate::Granted),
            Some(ahead) => Ok(Predicate::Watch(ahead.clone())),
        }
    }

    /// The sequence of a contender; anything else sorts last.
    fn sort_key(&self, node: &str, _lock_name: &str) -> u64 {
        match sequence_of(node, &self.contender_names()) {
            Some(seq) => sequence_key(seq, ""),
            None => u64::MAX,
        }
    }

    fn sorts_by_creation(&self) -> bool {
        true
    }

    /// Every name that queues with ours, our own included: a writer refuses a wrapped
    /// reader's node too, which kazoo would sort ahead of everyone.
    fn sequence_names(&self, _lock_name: &str) -> Vec<String> {
        self.contender_names()
    }

    fn is_contender(&self, node: &str, _lock_name: &str) -> bool {
        Self::named(node, &self.contender_names())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nodes_are_kazoo_shaped() {
        let node = KazooDriver::new().create_lock_node("lock-");
        assert_eq!(node.name, "__lock__");
        assert_eq!(node.mode, CreateMode::EphemeralSequential);
        assert_eq!(KazooDriver::read().create_lock_node("x").name, "__rlock__");
        assert_eq!(KazooDriver::write().create_lock_node("x").name, "__lock__");
    }

    #[test]
    fn sequences_are_read_after_a_name_at_the_end() {
        let lock = names(&["__lock__"]);
        assert_eq!(
            sequence_of("ab__lock__0000000007", &lock),
            Some("0000000007")
        );
        assert_eq!(sequence_of("ab__lock__-000000007", &lock), None);
        assert_eq!(
            sequence_of("ab__lock__-0000000007", &lock),
            Some("-0000000007")
        );
        assert_eq!(sequence_of("ab__rlock__0000000007", &lock), None);
        assert_eq!(sequence_of("ab__lock__00000000071", &lock), None);
        assert_eq!(sequence_of("0000000007", &lock), None);
        assert_eq!(sequence_of("é", &lock), None);
        let curator = names(&["-lock-"]);
        assert_eq!(
            sequence_of("_c_1-lock-0000000003", &curator),
            Some("0000000003")
        );
    }

    #[test]
    fn a_lock_watches_the_contender_just_ahead_and_ignores_readers() {
        let d = KazooDriver::new();
        let mut c = names(&[
            "c__lock__0000000004",
            "r__rlock__0000000003",
            "b__lock__0000000002",
            "a__lock__0000000001",
            "stranger",
        ]);
        c.sort_by_key(|n| (d.sort_key(n, "lock-"), n.clone()));
        assert_eq!(c[0], "a__lock__0000000001");
        assert_eq!(c.last().unwrap(), "stranger");
        assert_eq!(
            d.gets_the_lock(&c, "a__lock__0000000001", 1).unwrap(),
            Predicate::Granted
        );
        assert_eq!(
            d.gets_the_lock(&c, "c__lock__0000000004", 1).unwrap(),
            Predicate::Watch("b__lock__0000000002".into())
        );
        assert!(matches!(
            d.gets_the_lock(&c, "gone__lock__0000000009", 1),
            Err(Error::NoNode(_))
        ));
        assert!(d.is_contender("a__lock__0000000001", ""));
        assert!(!d.is_contender("r__rlock__0000000003", ""));
    }

    #[test]
    fn extra_patterns_queue_with_other_layouts() {
        let d = KazooDriver::new().extra_lock_patterns(["-lock-"]).unwrap();
        let c = names(&["_c_x-lock-0000000001", "k__lock__0000000002"]);
        assert_eq!(
            d.gets_the_lock(&c, &c[1], 1).unwrap(),
            Predicate::Watch(c[0].clone())
        );
        assert!(KazooDriver::new().extra_lock_patterns([""]).is_err());
        assert!(KazooDriver::new().extra_lock_patterns(["a/b"]).is_err());
    }

    #[test]
    fn writers_wait_for_everyone_ahead_and_readers_for_writers_ahead_only() {
        let (w, r) = (KazooDriver::write(), KazooDriver::read());
        let c = names(&[
            "a__rlock__0000000001",
            "b__lock__0000000002",
            "c__rlock__0000000003",
            "d__rlock__0000000004",
            "e__lock__0000000005",
        ]);
        assert_eq!(r.gets_the_lock(&c, &c[0], 1).unwrap(), Predicate::Granted);
        assert_eq!(
            w.gets_the_lock(&c, &c[1], 1).unwrap(),
            Predicate::Watch(c[0].clone())
        );
        // Readers behind a writer wait for it, not for the writer queued behind them.
        assert_eq!(
            r.gets_the_lock(&c, &c[3], 1).unwrap(),
            Predicate::Watch(c[1].clone())
        );
        assert_eq!(
            w.gets_the_lock(&c, &c[4], 1).unwrap(),
            Predicate::Watch(c[3].clone())
        );
        let readers = names(&["a__rlock__0000000001", "c__rlock__0000000003"]);
        assert_eq!(
            r.gets_the_lock(&readers, &readers[1], 1).unwrap(),
            Predicate::Granted
        );
        assert!(r.is_contender("a__rlock__0000000001", ""));
        assert!(r.is_contender("b__lock__0000000002", ""));
    }
}
