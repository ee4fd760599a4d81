//! Keeps an eye on a held lock's node: reports Suspended while the connection is gone, Held
//! once reconnected with the node verified, and Lost when the node is deleted, its session ends,
//! or the Client gives the session up. Runs on the executor thread; no user code runs here.

use std::sync::Arc;
use std::time::Duration;

use futures_lite::future;
use zookeeper_client as zk;

use super::runtime::{sleep, Signal};
use super::Client;

/// The health of a node this process holds (a lock node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockHealth {
    /// Held, and the node is known to exist in our live session.
    Held,
    /// The connection is gone; whether we still hold it is unknown until it comes back.
    Suspended,
    /// Gone for sure: the session expired or was given up, or the node was deleted.
    Lost,
}

/// Stops the keeper when dropped.
pub(crate) struct KeeperGuard(Signal);

impl Drop for KeeperGuard {
    fn drop(&mut self) {
        self.0.set();
    }
}

impl Client {
    /// Watches `path` (owned by session `owner`) and calls `report` on every health change,
    /// and `on_revoke` once if Curator's revocation message is written into the node.
    pub(crate) fn keep_node(
        &self,
        path: &str,
        owner: i64,
        report: Arc<dyn Fn(LockHealth) + Send + Sync>,
        on_revoke: Option<Arc<dyn Fn() + Send + Sync>>,
    ) -> KeeperGuard {
        let cancel = Signal::default();
        let (zk, ended) = {
            let conn = self.shared().conn.lock();
            (conn.zk.clone(), conn.ended.clone())
        };
        match zk {
            Some(zk) if zk.session_id().0 == owner => {
                let path = path.to_owned();
                let task = keep(zk, path, ended, cancel.clone(), report, on_revoke);
                self.shared().spawn(task);
            }
            _ => report(LockHealth::Lost),
        }
        KeeperGuard(cancel)
    }
}

async fn keep(
    zk: zk::Client,
    path: String,
    ended: Signal,
    cancel: Signal,
    report: Arc<dyn Fn(LockHealth) + Send + Sync>,
    mut on_revoke: Option<Arc<dyn Fn() + Send + Sync>>,
) {
    enum Ev {
        Stop,
        Ended,
        Watch(zk::WatchedEvent),
        State(zk::SessionState),
    }
    // Everything below races the release (`cancel`) and the Client giving the session up
    // (`ended`): a request sent while disconnected may wait for the reconnection.
    let interrupt = || {
        future::or(
            async {
                cancel.wait().await;
                Ev::Stop
            },
            async {
                ended.wait().await;
                Ev::Ended
            },
        )
    };
    // After a release nothing is reported: a late NoNode is our own delete.
    let report = |health| {
        if !cancel.is_set() {
            report(health)
        }
    };
    let mut states = zk.state_watcher();
    loop {
        if cancel.is_set() {
            return;
        }
        let armed = future::or(async { Err(interrupt().await) }, async {
            Ok(zk.get_and_watch_data(&path).await)
        });
        let watcher = match armed.await {
            Err(Ev::Stop) => return,
            Err(_) => {
                report(LockHealth::Lost);
                return;
            }
            Ok(Ok((data, _, watcher))) => {
                if data == crate::locks::REVOKE_MESSAGE {
                    if let Some(f) = on_revoke.take() {
                        f();
                    }
                }
                Some(watcher)
            }
            Ok(Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed)) => {
                report(LockHealth::Lost);
                return;
            }
            // Disconnected: the state watcher below says when to look again.
            Ok(Err(_)) => None,
        };
        let fired = async {
            match watcher {
                Some(w) => Ev::Watch(w.changed().await),
                None => future::pending().await,
            }
        };
        let ev = future::or(
            interrupt(),
            future::or(fired, async { Ev::State(states.changed().await) }),
        )
        .await;
        match ev {
            Ev::Stop => return,
            Ev::Ended => {
                report(LockHealth::Lost);
                return;
            }
            Ev::Watch(e) if e.event_type == zk::EventType::NodeDataChanged => {}
            Ev::Watch(_) => {
                // Deleted, or the session ended.
                report(LockHealth::Lost);
                return;
            }
            Ev::State(zk::SessionState::Disconnected) => report(LockHealth::Suspended),
            Ev::State(s) if s.is_terminated() => {
                report(LockHealth::Lost);
                return;
            }
            Ev::State(_) => {
                // Reconnected to the same session: Held again once the node is seen.
                let checked = future::or(async { Err(interrupt().await) }, async {
                    Ok(zk.check_stat(&path).await)
                });
                match checked.await {
                    Err(Ev::Stop) => return,
                    Err(_) | Ok(Ok(None)) => {
                        report(LockHealth::Lost);
                        return;
                    }
                    Ok(Ok(Some(_))) => report(LockHealth::Held),
                    Ok(Err(_)) => sleep(Duration::from_millis(10)).await,
                }
            }
        }
    }
}
