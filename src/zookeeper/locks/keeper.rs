//! The keeper behind a hold's `health()`: it follows the held node (the Client's follower, on
//! the I/O thread) and turns what becomes of it into [`LockHealth`] — Held when read or seen
//! again, Suspended while the connection is gone, Lost when the node is deleted or its session
//! ends. When the Client gives the session up locally (no answer for a whole session timeout)
//! the server may still be keeping it, and with it our node at the head of the queue: the
//! keeper then has the node deleted in the background from the next session, so that the lock
//! does not stay blocked until the server expires the old session.

use std::sync::Arc;
use std::time::Duration;

use crate::core::health::{worst, LockHealth};
use crate::zookeeper::client::{Client, Doomed, FollowGuard, NodeNews, NodeRead};

/// How long after its grant a hold's node is first read and watched. The grant has just seen it
/// in our session, so until then a deletion by someone else is noticed this much later than it
/// would be; a hold released sooner (a short critical section) costs no read and no watch.
const FIRST_LOOK: Duration = Duration::from_millis(5);

/// Told the held node's data whenever the keeper reads it (when it starts and after every
/// change): the recipe decides what the data means, e.g. Curator's revocation request.
pub(crate) type OnData = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// Stops the keeper when dropped.
pub(crate) struct KeeperGuard {
    _follow: FollowGuard,
}

/// Keeps `path` (owned by session `owner`, or 0 for a persistent node), calling `report` on
/// every health change and `on_data` with the node's data whenever it is read. `primed`: the
/// node as the acquire read it with a watch (while it waited, or to check that our node still
/// existed after the holder ahead went), to start from instead of reading it again.
///
/// A persistent node outlives sessions: it is Suspended between them and Held again once seen
/// from the next one.
pub(crate) fn keep_node(
    client: &Client,
    path: &str,
    owner: i64,
    report: Arc<dyn Fn(LockHealth) + Send + Sync>,
    on_data: Option<OnData>,
    primed: Option<NodeRead>,
) -> KeeperGuard {
    // Not a Client: the follower can outlive the hold by a while (its watch lingers), and a
    // Client handle there would keep the session open after the user's last handle is gone.
    let deleter = client.background_deleter();
    let node = path.to_owned();
    let news = move |news: NodeNews| match news {
        NodeNews::Read { data, .. } => {
            report(LockHealth::Held);
            if let Some(f) = &on_data {
                f(&data);
            }
        }
        NodeNews::Seen => report(LockHealth::Held),
        NodeNews::Disconnected => report(LockHealth::Suspended),
        NodeNews::Gone => {
            tracing::warn!("lost {node}: deleted, or its session ended");
            report(LockHealth::Lost);
        }
        NodeNews::GivenUp => {
            tracing::warn!("lost {node}: its session was given up; deleting it from the next one");
            report(LockHealth::Lost);
            deleter.delete(Doomed::node(&node, Some(owner)));
        }
    };
    KeeperGuard {
        _follow: client.follow_node(path, owner, FIRST_LOOK, Arc::new(news), primed),
    }
}

/// A held node's health as of now: the keeper's last report (`reported`), made worse by the
/// Client's local lease on the session when this process has not been able to vouch for its
/// session lately. A persistent node (`owner` 0) outlives sessions: at worst Suspended on that
/// account.
pub(crate) fn vouch(client: &Client, owner: i64, reported: LockHealth) -> LockHealth {
    let lease = match client.lease().health() {
        LockHealth::Lost if owner == 0 => LockHealth::Suspended,
        lease => lease,
    };
    worst(reported, lease)
}
