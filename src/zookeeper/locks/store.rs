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

/// The outcome of [`Store::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Ours is marked now; the stat of that write.
    Won(Stat),
    /// This node is marked: it holds.
    HeldBy(String),
    /// A node vanished meanwhile (maybe ours): look again.
    Changed,
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
    /// Marks `ours` as the holder with one atomic write (setData at version 0), provided none
    /// of `others` is marked (all still at version 0) and no claim was made under `parent`
    /// since its data version was `parent_version` (read before `others` was listed): the
    /// claim bumps that version, so a contender created after our listing, and so missing from
    /// `others`, cannot have claimed meanwhile.
    fn claim(
        &self,
        ours: &str,
        data: &[u8],
        others: &[String],
        parent: (&str, i32),
        call: &mut Call,
    ) -> Result<Claim>;
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

    fn claim(
        &self,
        ours: &str,
        data: &[u8],
        others: &[String],
        (parent, parent_version): (&str, i32),
        call: &mut Call,
    ) -> Result<Claim> {
        let mut ops: Vec<MultiOp<'_>> = others
            .iter()
            .map(|other| MultiOp::Check {
                path: other,
                version: 0,
            })
            .collect();
        ops.push(MultiOp::SetData {
            path: ours,
            data,
            version: 0,
        });
        ops.push(MultiOp::SetData {
            path: parent,
            data: &[],
            version: parent_version,
        });
        loop {
            match self.multi_once(&ops, call) {
                Ok(Ok(stats)) => {
                    return match stats.get(others.len()) {
                        Some(Some(stat)) => Ok(Claim::Won(*stat)),
                        other => Err(Error::ZooKeeper(format!(
                            "unexpected claim reply {other:?}"
                        ))),
                    }
                }
                Ok(Err((index, failed))) => {
                    return match (others.get(index), failed) {
                        (Some(holder), Error::BadVersion(_)) => Ok(Claim::HeldBy(holder.clone())),
                        (_, Error::NoNode(_) | Error::BadVersion(_)) => Ok(Claim::Changed),
                        (_, e) => Err(e),
                    }
                }
                Err(e) if e.is_retryable() => {
                    // The reply may be lost after the server applied it: our mark tells.
                    if let Ok(Some(stat)) = self.exists_in(ours, call) {
                        if stat.version > 0 {
                            return Ok(Claim::Won(stat));
                        }
                    }
                    self.backoff(call, e)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn default_data(&self) -> &[u8] {
        Client::default_data(self)
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests;
