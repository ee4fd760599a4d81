//! Keeps an eye on a held lock's node: reports Suspended while the connection is gone, Held
//! once reconnected with the node verified, and Lost when the node is deleted, its session ends,
//! or the Client gives the session up. Runs on the executor thread; no user code runs here.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::future;
use zookeeper_client as zk;

use super::backoff::Backoff;
use super::cleanup::{self, Doomed};
use super::runtime::{sleep, Signal};
use super::session::Shared;
use super::Client;
use crate::core::health::{worst, LockHealth};

/// How long after its grant a hold's node is first read and watched. The grant has just seen it
/// in our session, so until then a deletion by someone else is noticed this much later than it
/// would be; a hold released sooner (a short critical section) costs no read and no watch.
const FIRST_LOOK: Duration = Duration::from_millis(5);

/// How long a released hold's watch waits to be cleared by the node's deletion before it is
/// removed by a request of its own.
const LINGER: Duration = Duration::from_secs(10);

/// Told the held node's data whenever the keeper reads it.
pub(crate) type OnData = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// A node about to be held, already read with a watch by its acquire (while it waited, or to
/// check that our node still exists after our predecessor went): the keeper starts from it
/// instead of reading the node again.
pub(crate) struct Primed(Option<PrimedWatch>);

/// Resolves when the watch fires.
type Fired = std::pin::Pin<Box<dyn std::future::Future<Output = zk::WatchedEvent> + Send>>;

impl Primed {
    /// Whether the node's watch has not fired since it was read: not deleted, not written.
    pub(crate) fn untouched(&mut self) -> bool {
        match &mut self.0 {
            Some(w) => future::block_on(future::poll_once(w.fired.as_mut())).is_none(),
            None => false,
        }
    }

    /// A node read in session `session`, whose watch resolves `fired`.
    pub(crate) fn watched(
        session: i64,
        data: Vec<u8>,
        fired: impl std::future::Future<Output = zk::WatchedEvent> + Send + 'static,
    ) -> Primed {
        Primed(Some(PrimedWatch {
            session,
            data,
            fired: Box::pin(fired),
        }))
    }
}

impl std::fmt::Debug for Primed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primed")
            .field("watch", &self.0.as_ref().map(|w| w.session))
            .finish()
    }
}

struct PrimedWatch {
    session: i64,
    data: Vec<u8>,
    fired: Fired,
}

/// Stops the keeper when dropped.
pub(crate) struct KeeperGuard(Signal);

impl Drop for KeeperGuard {
    fn drop(&mut self) {
        self.0.set();
    }
}

impl Client {
    /// A held node's health as of now: the keeper's last report (`reported`), made worse by the
    /// local lease on the session (`core/lease.rs`) when this process has not been able to vouch
    /// for its session lately. A persistent node (`owner` 0) outlives sessions: at worst
    /// Suspended on that account.
    pub(crate) fn vouch(&self, owner: i64, reported: LockHealth) -> LockHealth {
        let lease = match self.shared().lease.health() {
            LockHealth::Lost if owner == 0 => LockHealth::Suspended,
            lease => lease,
        };
        worst(reported, lease)
    }

    /// Reads a node we are about to hold with the watch its keeper will need, so that the
    /// check "our node is still there" and the keeper's first read are one request; `None` if
    /// the node is gone.
    pub(crate) fn prime_keeper(
        &self,
        path: &str,
        call: &mut super::Call,
    ) -> crate::Result<Option<Primed>> {
        let read = self.run("prime_keeper", call, |zk, _| async move {
            match zk.get_and_watch_data(path).await {
                Ok((data, _, watcher)) => Ok(Some(Primed::watched(
                    zk.session_id().0,
                    data,
                    watcher.changed(),
                ))),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(crate::Error::from_zk(e, path)),
            }
        })?;
        Ok(read)
    }

    /// Watches `path` (owned by session `owner`, or 0 for a persistent node) and calls `report`
    /// on every health change, and `on_data` with the node's data whenever it is read (when the
    /// keeper starts and after every change: the lock layer decides what the data means, e.g.
    /// Curator's revocation request)
    /// into the node.
    ///
    /// An ephemeral node is Lost with its session. When the Client gives that session up
    /// locally (no answer for a whole session timeout) the server may still be keeping it, and
    /// with it our node at the head of the queue: the node is then deleted in the background
    /// from the next session, so that the lock does not stay blocked until the server expires
    /// the old session. A persistent node outlives sessions: it is Suspended between them and
    /// Held again once seen from the next one.
    pub(crate) fn keep_node(
        &self,
        path: &str,
        owner: i64,
        report: Arc<dyn Fn(LockHealth) + Send + Sync>,
        on_data: Option<OnData>,
        primed: Option<Primed>,
    ) -> KeeperGuard {
        let cancel = Signal::default();
        let mut node = Kept {
            path: path.to_owned(),
            cancel: cancel.clone(),
            report,
            on_data,
        };
        if owner == 0 {
            self.shared()
                .spawn(keep_persistent(self.inner.shared.clone(), node));
            return KeeperGuard(cancel);
        }
        let (zk, ended) = {
            let conn = self.shared().conn.lock();
            (conn.zk.clone(), conn.ended.clone())
        };
        match zk {
            Some(zk) if zk.session_id().0 == owner => {
                let shared = self.inner.shared.clone();
                let primed = primed
                    .and_then(|p| p.0)
                    .filter(|p| p.session == owner)
                    .map(|p| (p.data, p.fired));
                self.shared().spawn(async move {
                    match keep(&zk, &ended, &mut node, primed).await {
                        End::Stopped => {}
                        End::Lost => node.report(LockHealth::Lost),
                        End::GivenUp => {
                            node.report(LockHealth::Lost);
                            cleanup::spawn(&shared, Doomed::node(&node.path, Some(owner)));
                        }
                    }
                });
            }
            _ => {
                (node.report)(LockHealth::Lost);
                self.delete_in_background(Doomed::node(path, Some(owner)));
            }
        }
        KeeperGuard(cancel)
    }
}

/// A held node and whom to tell about it.
struct Kept {
    path: String,
    /// Set by the release: stop, and report nothing more (a late NoNode is our own delete).
    cancel: Signal,
    report: Arc<dyn Fn(LockHealth) + Send + Sync>,
    on_data: Option<OnData>,
}

impl Kept {
    fn report(&self, health: LockHealth) {
        if !self.cancel.is_set() {
            (self.report)(health)
        }
    }
}

/// Why [`keep`] returned.
enum End {
    /// Released.
    Stopped,
    /// The node was deleted, or its session ended on the server.
    Lost,
    /// The Client gave the session up; the server may still have it.
    GivenUp,
}

/// Follows a persistent node through every session until it is released or deleted.
async fn keep_persistent(shared: Arc<Shared>, mut node: Kept) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(500));
    loop {
        let (zk, ended) = loop {
            if node.cancel.is_set() {
                return;
            }
            let current = {
                let conn = shared.conn.lock();
                conn.zk
                    .clone()
                    .filter(|_| conn.connected)
                    .map(|zk| (zk, conn.ended.clone()))
            };
            match current {
                Some(found) => break found,
                None => future::or(sleep(backoff.next_pause()), node.cancel.wait()).await,
            }
        };
        backoff.reset();
        if let End::Stopped = keep(&zk, &ended, &mut node, None).await {
            return;
        }
        // Deleted, or only our session ended: a live session tells which.
        if matches!(zk.check_stat(&node.path).await, Ok(None)) {
            node.report(LockHealth::Lost);
            return;
        }
        node.report(LockHealth::Suspended);
        future::or(sleep(backoff.next_pause()), node.cancel.wait()).await;
    }
}

/// `primed`: the node's data and watch, read already in this session.
async fn keep(
    zk: &zk::Client,
    ended: &Signal,
    node: &mut Kept,
    mut primed: Option<(Vec<u8>, Fired)>,
) -> End {
    enum Ev {
        Stop,
        Ended,
        Watch(zk::WatchedEvent),
        State(zk::SessionState),
    }
    let path = node.path.clone();
    let cancel = node.cancel.clone();
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
    let mut states = zk.state_watcher();
    // The grant has just seen the node in this session: a hold that ends within FIRST_LOOK
    // costs no read at all.
    if primed.is_none() {
        match future::or(interrupt(), async {
            sleep(FIRST_LOOK).await;
            Ev::State(zk::SessionState::SyncConnected)
        })
        .await
        {
            Ev::Stop => return End::Stopped,
            Ev::Ended => return End::GivenUp,
            _ => {}
        }
    }
    loop {
        if cancel.is_set() {
            return End::Stopped;
        }
        let armed = match primed.take() {
            Some((data, watcher)) => Ok(Ok((data, watcher))),
            None => {
                // A read on its way is let finish after a release (for a while): dropped before
                // its answer, the watch it sets would cost a removeWatches of its own.
                let released = async {
                    cancel.wait().await;
                    sleep(LINGER).await;
                    Ev::Stop
                };
                let ended = async {
                    ended.wait().await;
                    Ev::Ended
                };
                future::or(async { Err(future::or(released, ended).await) }, async {
                    Ok(zk
                        .get_and_watch_data(&path)
                        .await
                        .map(|(data, _, watcher)| (data, Box::pin(watcher.changed()) as Fired)))
                })
                .await
            }
        };
        let watcher = match armed {
            Err(Ev::Stop) => return End::Stopped,
            Err(_) => return End::GivenUp,
            Ok(Ok((data, watcher))) => {
                node.report(LockHealth::Held);
                if let Some(f) = &node.on_data {
                    f(&data);
                }
                Some(watcher)
            }
            Ok(Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed)) => {
                return End::Lost;
            }
            // Disconnected: the state watcher below says when to look again.
            Ok(Err(_)) => None,
        };
        let watching = watcher.is_some();
        let mut fired = pin!(async move {
            match watcher {
                Some(w) => w.await,
                None => future::pending().await,
            }
        });
        let ev = future::or(
            interrupt(),
            future::or(async { Ev::Watch(fired.as_mut().await) }, async {
                Ev::State(states.changed().await)
            }),
        )
        .await;
        match ev {
            Ev::Stop if watching => {
                // Released: the delete that follows fires this watch and so clears it on the
                // server. Dropped before that, it would cost a request (removeWatches) per hold.
                let cleared = async {
                    fired.await;
                };
                future::or(cleared, future::or(sleep(LINGER), ended.wait())).await;
                return End::Stopped;
            }
            Ev::Stop => return End::Stopped,
            Ev::Ended => return End::GivenUp,
            Ev::Watch(e) if e.event_type == zk::EventType::NodeDataChanged => {}
            // Deleted, or the session ended.
            Ev::Watch(_) => return End::Lost,
            Ev::State(zk::SessionState::Disconnected) => node.report(LockHealth::Suspended),
            Ev::State(s) if s.is_terminated() => return End::Lost,
            Ev::State(_) => {
                // Reconnected to the same session: Held again once the node is seen.
                let checked = future::or(async { Err(interrupt().await) }, async {
                    Ok(zk.check_stat(&path).await)
                });
                match checked.await {
                    Err(Ev::Stop) => return End::Stopped,
                    Err(_) => return End::GivenUp,
                    Ok(Ok(None)) => return End::Lost,
                    Ok(Ok(Some(_))) => node.report(LockHealth::Held),
                    Ok(Err(_)) => sleep(Duration::from_millis(10)).await,
                }
            }
        }
    }
}
