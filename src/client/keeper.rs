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
    /// Watches `path` (owned by session `owner`) and calls `report` on every health change.
    pub(crate) fn keep_node(
        &self,
        path: &str,
        owner: i64,
        report: Arc<dyn Fn(LockHealth) + Send + Sync>,
    ) -> KeeperGuard {
        let cancel = Signal::default();
        let (zk, ended) = {
            let conn = self.shared().conn.lock();
            (conn.zk.clone(), conn.ended.clone())
        };
        match zk {
            Some(zk) if zk.session_id().0 == owner => {
                let path = path.to_owned();
                self.shared()
                    .spawn(keep(zk, path, ended, cancel.clone(), report));
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
) {
    enum Ev {
        Stop,
        Ended,
        Watch(zk::WatchedEvent),
        State(zk::SessionState),
    }
    let mut states = zk.state_watcher();
    loop {
        let watcher = match zk.get_and_watch_data(&path).await {
            Ok((_, _, watcher)) => Some(watcher),
            Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed) => {
                report(LockHealth::Lost);
                return;
            }
            // Disconnected: the state watcher below says when to look again.
            Err(_) => None,
        };
        let fired = async {
            match watcher {
                Some(w) => Ev::Watch(w.changed().await),
                None => future::pending().await,
            }
        };
        let ev = future::or(
            async {
                cancel.wait().await;
                Ev::Stop
            },
            future::or(
                async {
                    ended.wait().await;
                    Ev::Ended
                },
                future::or(fired, async { Ev::State(states.changed().await) }),
            ),
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
                // Reconnected to the same session: verified by the getData at the loop's top.
                match zk.check_stat(&path).await {
                    Ok(Some(_)) => report(LockHealth::Held),
                    Ok(None) => {
                        report(LockHealth::Lost);
                        return;
                    }
                    Err(_) => sleep(Duration::from_millis(10)).await,
                }
            }
        }
    }
}
