//! Lock drivers: what node an attempt creates, how contenders are ordered, and who holds.

use crate::core::error::{Error, Result};
use crate::zookeeper::client::CreateMode;
use crate::zookeeper::path::Layout;

/// A driver's verdict for one contender.
///
/// # Example
/// ```
/// use zklock::zookeeper::Predicate;
///
/// // FIFO: the first node holds; every other watches the one just ahead of it.
/// fn verdict(sorted: &[&str], ours: usize) -> Predicate {
///     match ours {
///         0 => Predicate::Granted,
///         n => Predicate::Watch(sorted[n - 1].to_owned()),
///     }
/// }
/// assert_eq!(verdict(&["a", "b"], 1), Predicate::Watch("a".into()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Predicate {
    /// The contender holds the lock.
    Granted,
    /// The contender must wait until this node (a name among the children) changes or goes.
    Watch(String),
}

/// The node an attempt creates: `<lock path>/_c_<uuid>-<name>` in `mode`. LockInternals creates
/// it protected, with parents as containers, and deletes it on every failure path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockNode {
    pub(crate) name: String,
    pub(crate) mode: CreateMode,
    pub(crate) layout: Layout,
}

impl LockNode {
    /// A node named `name` (the server appends the sequence for sequential modes).
    pub fn new(name: impl Into<String>, mode: CreateMode) -> LockNode {
        LockNode {
            name: name.into(),
            mode,
            layout: Layout::Curator,
        }
    }

    /// A node in kazoo's layout: `<uuid hex>` + `name`, missing parents made persistent.
    pub(crate) fn kazoo(name: impl Into<String>, mode: CreateMode) -> LockNode {
        LockNode {
            layout: Layout::Kazoo,
            ..LockNode::new(name, mode)
        }
    }
}

/// How a lock orders its contenders and decides who holds: Curator's `LockInternalsDriver`.
///
/// Outside semver before 1.0: this trait (and [`LockNode`], [`Predicate`]) may change in a
/// minor release while the lock algorithm is still being tuned; pin zklock's minor version if
/// you implement it.
///
/// LockInternals runs the one algorithm: create the node the driver describes, list and sort the
/// children with [`sort_key`](LockDriver::sort_key), ask
/// [`gets_the_lock`](LockDriver::gets_the_lock), and if not granted, watch the node it names
/// and park. Drivers do no I/O.
///
/// # Example: a complete custom driver
///
/// A LIFO lock — the newest contender goes first — on Curator's node layout:
///
/// ```no_run
/// use zklock::{CreateMode, InterProcessMutex, LockDriver};
/// use zklock::zookeeper::{LockNode, Predicate};
///
/// struct Lifo;
///
/// impl LockDriver for Lifo {
///     fn create_lock_node(&self, lock_name: &str) -> LockNode {
///         LockNode::new(lock_name, CreateMode::EphemeralSequential)
///     }
///
///     fn gets_the_lock(
///         &self,
///         children: &[String],
///         our_node: &str,
///         _max_leases: usize,
///     ) -> zklock::Result<Predicate> {
///         let ours = children.iter().position(|c| c == our_node)
///             .ok_or_else(|| zklock::Error::NoNode(our_node.to_owned()))?;
///         // The holder is whoever holds already, else the newest node.
///         match children.get(ours + 1) {
///             None => Ok(Predicate::Granted),
///             Some(next) => Ok(Predicate::Watch(next.clone())),
///         }
///     }
///     // sort_key: the default, the node's sequence number.
/// }
///
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let mutex = InterProcessMutex::with_driver(&client, "/locks/lifo", Lifo)?;
/// # Ok(()) }
/// ```
/// (A real LIFO lock would also have to stop a newcomer from overtaking the holder; this one
/// shows the shape of the trait.)
pub trait LockDriver: Send + Sync + 'static {
    /// The node an attempt creates for `lock_name` (e.g. `lock-`).
    fn create_lock_node(&self, lock_name: &str) -> LockNode;

    /// Given the children sorted by [`sort_key`](LockDriver::sort_key) (names, not paths) and
    /// our node's name: granted, or which node to watch. Our node missing from `children`
    /// must be reported as [`Error::NoNode`]; the attempt then starts over with a new node.
    ///
    /// Default (Curator's): granted iff our index < `max_leases`, else watch the node
    /// `max_leases` places ahead.
    fn gets_the_lock(
        &self,
        children: &[String],
        our_node: &str,
        max_leases: usize,
    ) -> Result<Predicate> {
        standard_predicate(children, our_node, max_leases)
    }

    /// The key contenders are sorted by. Default (Curator's): the number after the last
    /// `lock_name` in the node's name, so that the order survives the sequence's signed wrap.
    fn sort_key(&self, node: &str, lock_name: &str) -> u64 {
        sequence_key(node, lock_name)
    }

    /// Whether a child of the lock's path is one of this lock's contenders, as listed by
    /// `participant_nodes` and `contenders`. Default: its name contains `lock_name`.
    fn is_contender(&self, node: &str, lock_name: &str) -> bool {
        node.contains(lock_name)
    }

    /// Whether a node created later always sorts after every existing one (true for sequence
    /// numbers). Lets a waiter whose watched predecessor was the head take the lock without
    /// listing the children again.
    fn sorts_by_creation(&self) -> bool {
        false
    }

    /// For a driver that [sorts by creation](LockDriver::sorts_by_creation): the names after
    /// which the nodes it queues with carry their sequence (`lock-` in
    /// `_c_<uuid>-lock-<seq>`). A listing holding a node of one of them whose sequence has
    /// gone past the signed wrap is refused with
    /// [`Error::SequenceWrapped`](crate::Error::SequenceWrapped). Default: the name of the
    /// nodes this driver creates.
    fn sequence_names(&self, lock_name: &str) -> Vec<String> {
        vec![self.create_lock_node(lock_name).name]
    }

    /// Whether a granted contender must also *claim* the lock. When the sort order is not
    /// creation order, a newcomer can sort ahead of the holder, so names alone cannot tell who
    /// holds: the driver's pick then marks its node with one atomic multi-op (setData on ours,
    /// version checks on every other contender listed, and a setData naming our node on the
    /// lock's parent at the version read before the listing, so that a contender created after
    /// our listing cannot have claimed meanwhile) that fails if another node holds, and waits
    /// on that node otherwise. The parent names the holder, so a revocation request on a
    /// waiting node is not taken for a claim. The write's zxid is the fencing token. Costs a read of the parent
    /// per listing and one multi-op over all contenders per grant.
    fn grant_by_claim(&self) -> bool {
        false
    }
}

/// Curator's standard driver: fair FIFO on ephemeral sequential nodes
/// (`_c_<uuid>-lock-<seq10>`). The fencing token is the node's creation zxid.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let fair = zklock::InterProcessMutex::with_driver(&client, "/locks/a", zklock::StandardDriver)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct StandardDriver;

impl LockDriver for StandardDriver {
    fn create_lock_node(&self, lock_name: &str) -> LockNode {
        LockNode::new(lock_name, CreateMode::EphemeralSequential)
    }

    fn sorts_by_creation(&self) -> bool {
        true
    }
}

/// The seed's `NoFairLockDriver`: ephemeral, non-sequential nodes named
/// `_c_<uuid>-lock-<10 random digits>`, so waiters are granted in random order.
///
/// A newcomer may sort ahead of the holder, so the contender this driver picks must claim the
/// lock atomically (see [`LockDriver::grant_by_claim`]): a multi-op that checks every other
/// contender is unclaimed, that no claim was made since our listing, and marks ours. Exclusion is as strict as with the standard driver;
/// each grant costs one more round trip whose size grows with the number of contenders, and
/// the fencing token is that write's zxid.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let unfair = zklock::InterProcessMutex::with_driver(&client, "/locks/a", zklock::zookeeper::UnfairDriver)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct UnfairDriver;

impl LockDriver for UnfairDriver {
    fn create_lock_node(&self, lock_name: &str) -> LockNode {
        let digits = fastrand::u64(0..10_000_000_000);
        LockNode::new(format!("{lock_name}{digits:010}"), CreateMode::Ephemeral)
    }

    fn grant_by_claim(&self) -> bool {
        true
    }
}

/// Granted iff our index < max_leases; else watch the node `max_leases` places ahead.
pub(crate) fn standard_predicate(
    children: &[String],
    our_node: &str,
    max_leases: usize,
) -> Result<Predicate> {
    let ours = children
        .iter()
        .position(|c| c == our_node)
        .ok_or_else(|| Error::NoNode(our_node.to_owned()))?;
    if ours < max_leases {
        Ok(Predicate::Granted)
    } else {
        Ok(Predicate::Watch(children[ours - max_leases].clone()))
    }
}

/// The number after the last `lock_name` in `node`. ZooKeeper's sequence is a signed 32-bit
/// counter printed as `%010d`: after 2147483647 comes -2147483648, which must sort after it.
pub(crate) fn sequence_key(node: &str, lock_name: &str) -> u64 {
    let digits = match node.rfind(lock_name) {
        Some(i) if !lock_name.is_empty() => &node[i + lock_name.len()..],
        _ => node,
    };
    match digits.parse::<i64>() {
        Ok(n) if n < 0 => (n + (1i64 << 32)) as u64,
        Ok(n) => n as u64,
        Err(_) => u64::MAX,
    }
}

/// Whether `node`'s sequence (after the last `lock_name`) is one of a wrapped counter: negative.
pub(crate) fn sequence_wrapped(node: &str, lock_name: &str) -> bool {
    let digits = match node.rfind(lock_name) {
        Some(i) if !lock_name.is_empty() => &node[i + lock_name.len()..],
        _ => node,
    };
    digits.starts_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_keys_survive_the_signed_wrap() {
        let k = |s| sequence_key(s, "lock-");
        assert!(k("_c_x-lock-0000000001") < k("_c_y-lock-0000000002"));
        assert!(k("_c_x-lock-2147483647") < k("_c_y-lock--2147483648"));
        assert!(k("_c_x-lock--2147483648") < k("_c_y-lock--0000000001"));
        assert_eq!(k("garbage"), u64::MAX);
    }

    #[test]
    fn standard_predicate_grants_within_max_leases_and_watches_ahead() {
        let c: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        assert_eq!(standard_predicate(&c, "a", 1).unwrap(), Predicate::Granted);
        assert_eq!(
            standard_predicate(&c, "c", 1).unwrap(),
            Predicate::Watch("b".into())
        );
        assert_eq!(standard_predicate(&c, "c", 3).unwrap(), Predicate::Granted);
        assert_eq!(
            standard_predicate(&c, "d", 2).unwrap(),
            Predicate::Watch("b".into())
        );
        assert!(matches!(
            standard_predicate(&c, "z", 1),
            Err(Error::NoNode(_))
        ));
    }

    #[test]
    fn unfair_nodes_are_plain_ephemerals_with_random_digits() {
        let a = UnfairDriver.create_lock_node("lock-");
        assert_eq!(a.mode, CreateMode::Ephemeral);
        assert_eq!(a.name.len(), "lock-".len() + 10);
        let names: std::collections::HashSet<_> = (0..50)
            .map(|_| UnfairDriver.create_lock_node("lock-").name)
            .collect();
        assert!(names.len() > 45, "digits should be random");
    }
}
