//! The drivers of Curator's read-write lock: readers and writers queue on one path, sorted
//! together by sequence; a reader waits only for a writer ahead; a downgrading writer's read
//! node is named after its write node.

use super::driver::{sequence_key, LockDriver, LockNode, Predicate};
use crate::core::error::{Error, Result};
use crate::zookeeper::client::CreateMode;

/// Curator's node names: `<path>/_c_<uuid>-__READ__<seq>` and `..-__WRIT__<seq>`.
pub(crate) const READ_LOCK_NAME: &str = "__READ__";
pub(crate) const WRITE_LOCK_NAME: &str = "__WRIT__";

/// Readers and writers sort together, by sequence. A downgrading writer's read node carries the
/// writer's sequence before its own (`__READ__<writer seq><own seq>`, Curator 5.5's fix of
/// CURATOR-621), so it sorts right behind the writer's node and ahead of everyone who queued
/// after the writer; as text, the same order Curator's string sort gives.
fn rw_sort_key(node: &str) -> u64 {
    let (name, digits) = match node.rfind(WRITE_LOCK_NAME) {
        Some(i) => (WRITE_LOCK_NAME, &node[i + WRITE_LOCK_NAME.len()..]),
        None => match node.rfind(READ_LOCK_NAME) {
            Some(i) => (READ_LOCK_NAME, &node[i + READ_LOCK_NAME.len()..]),
            None => return u64::MAX,
        },
    };
    // A sequence is 10 digits, or a minus and 10 digits past the signed wrap.
    let first = if digits.starts_with('-') { 11 } else { 10 };
    let seq = |d: &str| sequence_key(&format!("{name}{d}"), name);
    match digits.get(first..) {
        Some(own) if !own.is_empty() && name == READ_LOCK_NAME => {
            let own = seq(own).saturating_add(1).min(u64::from(u32::MAX));
            (seq(&digits[..first]) << 32) | own
        }
        _ => seq(digits).saturating_mul(1 << 32),
    }
}

/// The read node a writer takes when it downgrades: named after its write node's sequence.
pub(crate) fn downgrade_node(write_node: &str) -> Option<LockNode> {
    let i = write_node.rfind(WRITE_LOCK_NAME)?;
    let seq = &write_node[i + WRITE_LOCK_NAME.len()..];
    Some(LockNode::new(
        format!("{READ_LOCK_NAME}{seq}"),
        CreateMode::EphemeralSequential,
    ))
}

/// Writers: exclusive and fair against readers and writers alike.
pub(crate) struct WriteDriver;

impl LockDriver for WriteDriver {
    fn create_lock_node(&self, _lock_name: &str) -> LockNode {
        LockNode::new(WRITE_LOCK_NAME, CreateMode::EphemeralSequential)
    }

    fn sort_key(&self, node: &str, _lock_name: &str) -> u64 {
        rw_sort_key(node)
    }

    // Not creation order: a downgrading writer's read node (ours or a Curator 5.5 process's)
    // sorts ahead of nodes created before it, so a writer must list again when the node it
    // watches goes rather than take the lock on the deletion alone.
}

/// Readers: granted while no writer is queued ahead; else wait on the first writer ahead.
pub(crate) struct ReadDriver;

impl LockDriver for ReadDriver {
    fn create_lock_node(&self, _lock_name: &str) -> LockNode {
        LockNode::new(READ_LOCK_NAME, CreateMode::EphemeralSequential)
    }

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
            .find(|c| c.contains(WRITE_LOCK_NAME))
        {
            None => Ok(Predicate::Granted),
            Some(writer) => Ok(Predicate::Watch(writer.clone())),
        }
    }

    fn sort_key(&self, node: &str, _lock_name: &str) -> u64 {
        rw_sort_key(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn readers_share_until_a_writer_is_queued_ahead() {
        let c = names(&[
            "a-__READ__0000000001",
            "b-__READ__0000000002",
            "c-__WRIT__0000000003",
        ]);
        assert_eq!(
            ReadDriver.gets_the_lock(&c, &c[1], 1).unwrap(),
            Predicate::Granted
        );
        let c = names(&[
            "a-__READ__0000000001",
            "w-__WRIT__0000000002",
            "x-__WRIT__0000000003",
            "r-__READ__0000000004",
        ]);
        assert_eq!(
            ReadDriver.gets_the_lock(&c, &c[3], 1).unwrap(),
            Predicate::Watch(c[1].clone())
        );
        assert_eq!(
            WriteDriver.gets_the_lock(&c, &c[1], 1).unwrap(),
            Predicate::Watch(c[0].clone())
        );
        assert!(ReadDriver.gets_the_lock(&c, "gone", 1).is_err());
    }

    #[test]
    fn readers_and_writers_sort_by_sequence_together() {
        let mut c = names(&[
            "z-__WRIT__0000000003",
            "y-__READ__0000000001",
            "a-__READ__0000000002",
        ]);
        c.sort_by_key(|n| rw_sort_key(n));
        assert_eq!(
            c,
            names(&[
                "y-__READ__0000000001",
                "a-__READ__0000000002",
                "z-__WRIT__0000000003"
            ])
        );
    }

    #[test]
    fn a_downgraded_read_sorts_behind_its_writer_and_ahead_of_later_nodes() {
        let w = "w-__WRIT__0000000005";
        let down = downgrade_node(w).unwrap();
        assert_eq!(down.name, "__READ__0000000005");
        let mut c = names(&[
            "r2-__READ__0000000008",
            "d-__READ__00000000050000000009",
            "w2-__WRIT__0000000006",
            w,
            "r1-__READ__0000000007",
            "old-__READ__0000000004",
        ]);
        c.sort_by_key(|n| rw_sort_key(n));
        // As Curator's string sort of what follows the lock name orders them.
        let mut curator = c.clone();
        curator.sort_by_key(|n| n.split("__").last().unwrap().to_owned());
        assert_eq!(c, curator);
        assert_eq!(
            c,
            names(&[
                "old-__READ__0000000004",
                w,
                "d-__READ__00000000050000000009",
                "w2-__WRIT__0000000006",
                "r1-__READ__0000000007",
                "r2-__READ__0000000008",
            ])
        );
        // Once the writer goes, the queued writer waits for the downgraded read.
        let after: Vec<String> = c.iter().filter(|n| *n != w).cloned().collect();
        assert_eq!(
            WriteDriver
                .gets_the_lock(&after, "w2-__WRIT__0000000006", 1)
                .unwrap(),
            Predicate::Watch("d-__READ__00000000050000000009".into())
        );
        // Past the signed wrap, a minus and ten digits.
        let neg = rw_sort_key("d-__READ__-00000000010000000003");
        assert!(neg > rw_sort_key("w-__WRIT__-0000000001"));
    }
}
