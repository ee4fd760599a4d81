//! The few ZooKeeper operations the lock algorithm needs, as a trait (the port): the Client
//! implements it against the server through its mechanism (calls, watches with code to run when
//! they fire, writes sent without waiting), and unit tests implement it in memory with injected
//! faults. What the operations mean for a lock — the holder mark, the unfair claim, a waiter's
//! wake — is decided here, not in the Client.

use std::sync::Arc;

use super::waiter::{self, Waiter};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::zookeeper::client::{
    Call, Client, Doomed, MultiOp, NodeOps, NodeRead, Registration, Signal, Stat, WatchGuard,
    WatchTarget,
};

/// A watch set by [`Store::watch`], with what the node held then.
pub(crate) type Watched = (WatchGuard, Stat, Vec<u8>);

/// What an unfair claim concluded (see [`LockInternals::claim`](super::LockInternals)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Ours is marked now; the stat of that write.
    Won(Stat),
    /// This node is marked: it holds.
    HeldBy(String),
    /// A node vanished meanwhile (maybe ours), or a claim was made since the listing: look
    /// again.
    Changed,
}

/// One claim transaction, as [`Store::claim`] sends it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimOps<'a> {
    /// Our node, the data the claim writes into it and the data version it must be at.
    pub(crate) ours: (&'a str, &'a [u8], i32),
    /// Every other listed contender, with the data version it must be at.
    pub(crate) others: &'a [(String, i32)],
    /// The lock's parent and its data version as read before the listing. The claim writes our
    /// node's name into it.
    pub(crate) parent: (&'a str, i32),
}

/// How one claim transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClaimReply {
    /// Applied: the stat of our node's write.
    Won(Stat),
    /// The `index`-th other contender is gone, or at another version.
    Other { index: usize, gone: bool },
    /// Our node is gone, or at another version.
    Ours { gone: bool },
    /// The parent's version moved on since the listing.
    Parent,
}

/// What a data change on a node watched by [`Store::watch`] has the I/O thread read (with the
/// node's new watch, under the same guard) before the waiter is woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnChange {
    /// Nothing: the waiter is woken, and the watch is spent.
    Wake,
    /// The node again, with a new watch.
    Reread,
    /// The node again, with a new watch, and its parent's stat, sent right behind it.
    RereadAndCount,
}

/// What LockInternals does to ZooKeeper, beyond the creates, listings and deletes of
/// [`NodeOps`]. Every method retries connection losses within the call's budget.
pub(crate) trait Store: NodeOps {
    /// A call bounded by `deadline` with a fresh retry budget.
    fn new_call(&self, deadline: Deadline) -> Call;
    /// How long a step of a lock attempt may take beyond the caller's wait.
    fn io_grace(&self) -> std::time::Duration;
    /// A data watch on `path` that wakes `waiter`, with the node's stat and data; `None` if the
    /// node does not exist. `on_change` says what a data change has read before `waiter` is
    /// woken (see [`Waiter::reread_since`]).
    fn watch(
        &self,
        path: &str,
        waiter: &Arc<Waiter>,
        on_change: OnChange,
        call: &mut Call,
    ) -> Result<Option<Watched>>;
    /// Reads a node about to be held with the watch its keeper will start from; `None` if the
    /// node is gone.
    fn prime_keeper(&self, path: &str, call: &mut Call) -> Result<Option<NodeRead>>;
    /// Marks a granted holder's node (setData at version 0): sent before this returns, its
    /// reply awaited in the background; the signal is set once it came (or failed).
    fn mark_holder(&self, path: &str, data: &[u8]) -> Signal;
    /// [`delete_background`](NodeOps::delete_background) once `after` is set (or at the latest
    /// after the Client's operation timeout).
    fn delete_background_after(&self, doomed: Doomed, after: Signal);
    /// Deletes now (a missing node counts as deleted); on connection loss the error is
    /// returned and the delete goes on in the background.
    fn delete_guaranteed(&self, path: &str, call: &mut Call) -> Result<()>;
    /// One claim transaction (ZooKeeper's multi): checks every other contender at its version,
    /// sets our node's data at its version, and writes our node's name into the lock's parent
    /// at the version read before the listing, all or nothing. Connection losses are retried
    /// within the call's budget; a claim applied whose reply was lost is found by the parent's
    /// data naming our node.
    fn claim(&self, ops: &ClaimOps<'_>, call: &mut Call) -> Result<ClaimReply>;
    /// A node's stat and data, without a watch; `None` if the node does not exist.
    fn read(&self, path: &str, call: &mut Call) -> Result<Option<(Stat, Vec<u8>)>>;
    /// Has every connection-state change wake `waiter` until the registration drops.
    fn register(&self, waiter: &Arc<Waiter>) -> Registration;
    fn default_data(&self) -> &[u8];
}

impl Store for Client {
    fn new_call(&self, deadline: Deadline) -> Call {
        Client::new_call(self, deadline)
    }

    fn io_grace(&self) -> std::time::Duration {
        Client::io_grace(self)
    }

    fn watch(
        &self,
        path: &str,
        waiter: &Arc<Waiter>,
        on_change: OnChange,
        call: &mut Call,
    ) -> Result<Option<Watched>> {
        let cancel = Signal::default();
        // A waiter is only a counter and a condvar: woken on the I/O thread, one thread hop
        // (the watcher thread's) less on every handoff. A marked node is read again there too,
        // as the event comes in: its holder deletes it once the mark is answered, and a read
        // sent by the waiter after its wake-up would often come after that delete (the waiter
        // then cannot tell a holder from a waiter that gave up, and lists the queue).
        let target = match on_change {
            OnChange::Wake => WatchTarget::Call(waiter::tell(waiter)),
            OnChange::Reread => WatchTarget::Reading {
                parent: false,
                deliver: waiter::tell_reread(waiter),
            },
            OnChange::RereadAndCount => WatchTarget::Reading {
                parent: true,
                deliver: waiter::tell_reread(waiter),
            },
        };
        match self.data_watch_in(path, target, cancel.clone(), call) {
            Ok((data, stat)) => Ok(Some((WatchGuard(cancel), stat, data))),
            Err(Error::NoNode(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn prime_keeper(&self, path: &str, call: &mut Call) -> Result<Option<NodeRead>> {
        self.read_for_follower(path, call)
    }

    fn mark_holder(&self, path: &str, data: &[u8]) -> Signal {
        // Version 0: never overwrite a revocation request that came first. Sent before this
        // returns, so that a read of the node sent after it sees the mark (and a watch that
        // read sets does not fire for it).
        self.set_data_unawaited(path, data, 0)
    }

    fn delete_background_after(&self, doomed: Doomed, after: Signal) {
        self.delete_in_background_after(doomed, after);
    }

    fn delete_guaranteed(&self, path: &str, call: &mut Call) -> Result<()> {
        self.delete_guaranteed_in(path, call)
    }

    fn register(&self, waiter: &Arc<Waiter>) -> Registration {
        self.park(waiter.clone())
    }

    fn claim(&self, ops: &ClaimOps<'_>, call: &mut Call) -> Result<ClaimReply> {
        let (ours, data, version) = ops.ours;
        let (parent, parent_version) = ops.parent;
        let our_name = crate::zookeeper::path::name(ours).as_bytes();
        let mut multi: Vec<MultiOp<'_>> = ops
            .others
            .iter()
            .map(|(other, version)| MultiOp::Check {
                path: other,
                version: *version,
            })
            .collect();
        multi.push(MultiOp::SetData {
            path: ours,
            data,
            version,
        });
        multi.push(MultiOp::SetData {
            path: parent,
            data: our_name,
            version: parent_version,
        });
        let n = ops.others.len();
        loop {
            match self.multi_once(&multi, call) {
                Ok(Ok(stats)) => {
                    return match stats.get(n) {
                        Some(Some(stat)) => Ok(ClaimReply::Won(*stat)),
                        other => Err(Error::ZooKeeper(format!(
                            "unexpected claim reply {other:?}"
                        ))),
                    }
                }
                Ok(Err((index, failed))) => {
                    let gone = match failed {
                        Error::NoNode(_) => true,
                        Error::BadVersion(_) => false,
                        e => return Err(e),
                    };
                    return Ok(match index {
                        i if i < n => ClaimReply::Other { index: i, gone },
                        i if i == n => ClaimReply::Ours { gone },
                        _ => ClaimReply::Parent,
                    });
                }
                Err(e) if e.is_retryable() => {
                    // The reply may be lost after the server applied it: the parent names the
                    // last claimant, and its last write is the claim's.
                    if let Ok((named, stat)) = self.data_in(parent, call) {
                        if stat.version == parent_version + 1 && named == our_name {
                            return Ok(ClaimReply::Won(stat));
                        }
                    }
                    self.backoff(call, e)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn read(&self, path: &str, call: &mut Call) -> Result<Option<(Stat, Vec<u8>)>> {
        match self.data_in(path, call) {
            Ok((data, stat)) => Ok(Some((stat, data))),
            Err(Error::NoNode(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn default_data(&self) -> &[u8] {
        Client::default_data(self)
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests;
