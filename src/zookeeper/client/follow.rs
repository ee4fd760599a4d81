//! Following a node: the I/O thread reads and watches a node and reports what becomes of it —
//! read, out of reach while the connection is gone, seen again after a reconnection, gone with
//! its session or deleted, or given up with the session by the Client — until told to stop.
//! No user code runs here.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::future;
use zookeeper_client as zk;

use super::backoff::Backoff;
use super::runtime::{sleep, Signal};
use super::shared::Shared;
use super::Client;

/// How long a followed node's watch, once told to stop, waits to be cleared by the node's
/// deletion (which usually follows) before it is removed by a request of its own.
const LINGER: Duration = Duration::from_secs(10);

/// What becomes of a followed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeNews {
    /// Read (with a watch) in its session: here is its data and their version. Again after
    /// every data change.
    Read {
        /// The node's data.
        data: Vec<u8>,
        /// The data's version (the stat's `version`).
        version: i32,
    },
    /// Seen again after a reconnection to the same session.
    Seen,
    /// The connection is gone (or, for a persistent node, the session ended): out of reach.
    Disconnected,
    /// Deleted, or its session ended on the server.
    Gone,
    /// The Client gave its session up (no answer for a whole session timeout): the server may
    /// still have it, and the node with it.
    GivenUp,
}

/// Told what becomes of a followed node, on the I/O thread; must not block.
pub(crate) type OnNews = Arc<dyn Fn(NodeNews) + Send + Sync>;

/// A node already read with a watch (by a call that needed it anyway): a follower starts from
/// it instead of reading the node again.
pub(crate) struct NodeRead(Option<ReadWatch>);

/// Resolves when the watch fires.
type Fired = std::pin::Pin<Box<dyn std::future::Future<Output = zk::WatchedEvent> + Send>>;

impl NodeRead {
    /// Whether the node's watch has not fired since it was read: not deleted, not written.
    pub(crate) fn untouched(&mut self) -> bool {
        match &mut self.0 {
            Some(w) => future::block_on(future::poll_once(w.fired.as_mut())).is_none(),
            None => false,
        }
    }

    /// A node read in session `session` (its data at `version`), whose watch resolves `fired`.
    pub(crate) fn watched(
        session: i64,
        data: Vec<u8>,
        version: i32,
        fired: impl std::future::Future<Output = zk::WatchedEvent> + Send + 'static,
    ) -> NodeRead {
        NodeRead(Some(ReadWatch {
            session,
            data,
            version,
            fired: Box::pin(fired),
        }))
    }
}

impl std::fmt::Debug for NodeRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeRead")
            .field("watch", &self.0.as_ref().map(|w| w.session))
            .finish()
    }
}

struct ReadWatch {
    session: i64,
    data: Vec<u8>,
    version: i32,
    fired: Fired,
}

/// Stops following when dropped.
pub(crate) struct FollowGuard(Signal);

impl Drop for FollowGuard {
    fn drop(&mut self) {
        self.0.set();
    }
}

impl Client {
    /// Reads a node with the watch a follower of it will need, so that a caller's "is the node
    /// still there" and the follower's first read are one request; `None` if the node is gone.
    pub(crate) fn read_for_follower(
        &self,
        path: &str,
        call: &mut super::Call,
    ) -> crate::Result<Option<NodeRead>> {
        let read = self.run("read_for_follower", call, |zk, _| async move {
            match zk.get_and_watch_data(path).await {
                Ok((data, stat, watcher)) => Ok(Some(NodeRead::watched(
                    zk.session_id().0,
                    data,
                    stat.version,
                    watcher.changed(),
                ))),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(crate::Error::from_zk(e, path)),
            }
        })?;
        Ok(read)
    }

    /// Follows `path` (owned by session `owner`, or 0 for a persistent node) and tells `news`
    /// what becomes of it, until the guard drops. With `start` (read already, in the owner's
    /// session) the follower starts from that read; without it, it first reads the node
    /// `first_look` from now (what happens to it before then is told late).
    ///
    /// An ephemeral node is followed in its session only: [`NodeNews::Gone`] or
    /// [`NodeNews::GivenUp`] ends it, and so does a session that is no longer the owner's
    /// already ([`NodeNews::GivenUp`] at once). A persistent node outlives sessions: it is
    /// [`NodeNews::Disconnected`] between them and read again from the next one.
    pub(crate) fn follow_node(
        &self,
        path: &str,
        owner: i64,
        first_look: Duration,
        news: OnNews,
        start: Option<NodeRead>,
    ) -> FollowGuard {
        let cancel = Signal::default();
        let mut node = Followed {
            path: path.to_owned(),
            cancel: cancel.clone(),
            news,
            first_look,
        };
        if owner == 0 {
            self.shared()
                .spawn(follow_persistent(self.inner.shared.clone(), node));
            return FollowGuard(cancel);
        }
        let (zk, ended, moved) = {
            let conn = self.shared().conn.lock();
            (conn.zk.clone(), conn.ended.clone(), conn.moved.clone())
        };
        match zk {
            Some(zk) if zk.session_id().0 == owner => {
                let start = start
                    .and_then(|r| r.0)
                    .filter(|r| r.session == owner)
                    .map(|r| (r.data, r.version, r.fired));
                let shared = self.inner.shared.clone();
                self.shared().spawn(async move {
                    let wire = Wire { zk, moved };
                    match follow(&shared, wire, &ended, &mut node, start).await {
                        End::Stopped => {}
                        End::Gone => node.tell(NodeNews::Gone),
                        End::GivenUp => node.tell(NodeNews::GivenUp),
                    }
                });
            }
            _ => (node.news)(NodeNews::GivenUp),
        }
        FollowGuard(cancel)
    }
}

/// A followed node and whom to tell about it.
struct Followed {
    path: String,
    /// Set when the guard drops: stop, and tell nothing more (a late NoNode may be the
    /// caller's own delete).
    cancel: Signal,
    news: OnNews,
    /// How long after the start to read the node first, when not started from a read.
    first_look: Duration,
}

impl Followed {
    fn tell(&self, news: NodeNews) {
        if !self.cancel.is_set() {
            (self.news)(news)
        }
    }
}

/// Why [`follow`] returned.
enum End {
    /// Told to stop.
    Stopped,
    /// The node was deleted, or its session ended on the server.
    Gone,
    /// The Client gave the session up; the server may still have it.
    GivenUp,
}

/// Follows a persistent node through every session until told to stop or it is deleted.
async fn follow_persistent(shared: Arc<Shared>, mut node: Followed) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(500));
    loop {
        let (zk, ended) = loop {
            if node.cancel.is_set() {
                return;
            }
            let current = {
                let conn = shared.conn.lock();
                conn.zk.clone().filter(|_| conn.connected).map(|zk| {
                    let moved = conn.moved.clone();
                    (Wire { zk, moved }, conn.ended.clone())
                })
            };
            match current {
                Some(found) => break found,
                None => future::or(sleep(backoff.next_pause()), node.cancel.wait()).await,
            }
        };
        backoff.reset();
        if let End::Stopped = follow(&shared, zk, &ended, &mut node, None).await {
            return;
        }
        // Deleted, or only our session ended: a live session tells which (the session may
        // have moved to another wire client meanwhile).
        let zk = shared.conn.lock().zk.clone();
        let gone = match zk {
            Some(zk) => matches!(zk.check_stat(&node.path).await, Ok(None)),
            None => false,
        };
        if gone {
            node.tell(NodeNews::Gone);
            return;
        }
        node.tell(NodeNews::Disconnected);
        future::or(sleep(backoff.next_pause()), node.cancel.wait()).await;
    }
}

/// A wire client, and the signal set when the session moves off it.
struct Wire {
    zk: zk::Client,
    moved: Signal,
}

impl Wire {
    /// The wire client the session moved to, if it is still this session's.
    fn successor(&self, shared: &Shared) -> Option<Wire> {
        let conn = shared.conn.lock();
        let zk = conn.zk.clone()?;
        (zk.session_id() == self.zk.session_id()).then(|| Wire {
            zk,
            moved: conn.moved.clone(),
        })
    }
}

/// What interrupts a follower's wait.
enum Ev {
    /// Told to stop.
    Stop,
    /// The Client gave the session up.
    Ended,
    /// The session moved to another wire client.
    Moved,
    /// The node's watch fired.
    Watch(zk::WatchedEvent),
    /// The wire client's state changed.
    State(zk::SessionState),
}

/// `start`: the node's data and watch, read already in this session. When the session moves
/// to another wire client, the node is followed there (checked as after a reconnection).
///
/// A follower spends a hold in its wait for the next event; the steps it takes now and then (a
/// read, a check after a reconnection, the wait after a stop) await boxed futures, so that
/// their state is not part of the size every follower's task keeps for the whole hold (1408
/// bytes instead of 1672 in a release build).
async fn follow(
    shared: &Shared,
    mut wire: Wire,
    ended: &Signal,
    node: &mut Followed,
    mut start: Option<(Vec<u8>, i32, Fired)>,
) -> End {
    let cancel = node.cancel.clone();
    let mut zk = wire.zk.clone();
    let mut states = zk.state_watcher();
    // The caller has just seen the node in this session: a follower stopped within
    // `first_look` costs no read at all.
    if start.is_none() {
        let first_look = node.first_look;
        match future::or(interrupt(&cancel, ended, wire.moved.clone()), async {
            sleep(first_look).await;
            Ev::State(zk::SessionState::SyncConnected)
        })
        .await
        {
            Ev::Stop => return End::Stopped,
            Ev::Ended => return End::GivenUp,
            _ => {}
        }
    }
    // Set when the session moved: the node is checked on the new wire client before it is
    // read there.
    let mut recheck = false;
    loop {
        if cancel.is_set() {
            return End::Stopped;
        }
        if recheck {
            let Some(next) = wire.successor(shared) else {
                return End::GivenUp;
            };
            wire = next;
            zk = wire.zk.clone();
            states = zk.state_watcher();
            let interrupted = interrupt(&cancel, ended, wire.moved.clone());
            match Box::pin(look_again(&zk, node, interrupted)).await {
                Ok(moved) => recheck = moved,
                Err(end) => return end,
            }
            continue;
        }
        let read = match start.take() {
            Some(read) => Ok(Ok(read)),
            None => Box::pin(read_watched(&zk, &node.path, &cancel, ended, &wire.moved)).await,
        };
        let watcher = match after_read(node, read) {
            Armed::Watching(watcher) => Some(watcher),
            // The state watcher below says when to look again.
            Armed::Disconnected => None,
            Armed::Moved => {
                recheck = true;
                continue;
            }
            Armed::Over(end) => return end,
        };
        let watching = watcher.is_some();
        let mut fired = pin!(async move {
            match watcher {
                Some(w) => w.await,
                None => future::pending().await,
            }
        });
        let ev = future::or(
            interrupt(&cancel, ended, wire.moved.clone()),
            future::or(async { Ev::Watch(fired.as_mut().await) }, async {
                Ev::State(states.changed().await)
            }),
        )
        .await;
        match ev {
            Ev::Stop if watching => {
                // Stopped: the delete that usually follows fires this watch and so clears it on
                // the server. Dropped before that, it would cost a request (removeWatches).
                let cleared = async {
                    fired.await;
                };
                Box::pin(future::or(cleared, future::or(sleep(LINGER), ended.wait()))).await;
                return End::Stopped;
            }
            Ev::Stop => return End::Stopped,
            Ev::Ended => return End::GivenUp,
            Ev::Moved => recheck = true,
            Ev::Watch(e) if e.event_type == zk::EventType::NodeDataChanged => {}
            // Deleted, or the session ended.
            Ev::Watch(_) => return End::Gone,
            Ev::State(zk::SessionState::Disconnected) => node.tell(NodeNews::Disconnected),
            Ev::State(s) if s.is_terminated() => return End::Gone,
            Ev::State(_) => {
                // Reconnected to the same session: told once the node is seen.
                let interrupted = interrupt(&cancel, ended, wire.moved.clone());
                match Box::pin(look_again(&zk, node, interrupted)).await {
                    Ok(moved) => recheck = moved,
                    Err(end) => return end,
                }
            }
        }
    }
}

/// What every step of a follower races: the stop (`cancel`), the Client giving the session up
/// (`ended`) and the session moving to another wire client (`moved`). A request sent while
/// disconnected may wait for the reconnection.
async fn interrupt(cancel: &Signal, ended: &Signal, moved: Signal) -> Ev {
    future::or(
        async {
            cancel.wait().await;
            Ev::Stop
        },
        future::or(
            async {
                ended.wait().await;
                Ev::Ended
            },
            async move {
                moved.wait().await;
                Ev::Moved
            },
        ),
    )
    .await
}

/// After a reconnection, or on the wire client the session moved to: checks that the node is
/// still there and tells [`NodeNews::Seen`] if it is. `Ok(true)`: the session moved (again)
/// meanwhile; `Err`: the follower ends so.
async fn look_again(
    zk: &zk::Client,
    node: &Followed,
    interrupted: impl std::future::Future<Output = Ev>,
) -> Result<bool, End> {
    let checked = future::or(async { Err(interrupted.await) }, async {
        Ok(zk.check_stat(&node.path).await)
    });
    match checked.await {
        Err(Ev::Stop) => Err(End::Stopped),
        Err(Ev::Moved) => Ok(true),
        Err(_) => Err(End::GivenUp),
        Ok(Ok(None)) => Err(End::Gone),
        Ok(Ok(Some(_))) => {
            node.tell(NodeNews::Seen);
            Ok(false)
        }
        Ok(Err(_)) => {
            sleep(Duration::from_millis(10)).await;
            Ok(false)
        }
    }
}

/// A follower's read of its node: its data, their version and the watch; the server's refusal;
/// or what interrupted it.
type Read = Result<Result<(Vec<u8>, i32, Fired), zk::Error>, Ev>;

/// What a follower's read of its node came to.
enum Armed {
    /// Read, and told: the watch is set.
    Watching(Fired),
    /// Not read for lack of a connection.
    Disconnected,
    /// The session moved to another wire client.
    Moved,
    /// The follower ends so.
    Over(End),
}

/// Tells what `read` (see [`read_watched`]) found, and what it means for the follower.
fn after_read(node: &Followed, read: Read) -> Armed {
    match read {
        Err(Ev::Stop) => Armed::Over(End::Stopped),
        Err(Ev::Moved) => Armed::Moved,
        Err(_) => Armed::Over(End::GivenUp),
        Ok(Ok((data, version, watcher))) => {
            node.tell(NodeNews::Read { data, version });
            Armed::Watching(watcher)
        }
        Ok(Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed)) => {
            Armed::Over(End::Gone)
        }
        Ok(Err(_)) => Armed::Disconnected,
    }
}

/// Reads the node and sets its watch; `Err` if the read was interrupted. A read on its way is
/// let finish after the stop (for a while): dropped before its answer, the watch it sets would
/// cost a removeWatches of its own.
async fn read_watched(
    zk: &zk::Client,
    path: &str,
    cancel: &Signal,
    ended: &Signal,
    moved: &Signal,
) -> Read {
    let released = async {
        cancel.wait().await;
        sleep(LINGER).await;
        Ev::Stop
    };
    let ended = async {
        ended.wait().await;
        Ev::Ended
    };
    let moved = async {
        moved.wait().await;
        Ev::Moved
    };
    let gone = future::or(released, future::or(ended, moved));
    future::or(async { Err(gone.await) }, async {
        Ok(zk
            .get_and_watch_data(path)
            .await
            .map(|(data, stat, watcher)| {
                (data, stat.version, Box::pin(watcher.changed()) as Fired)
            }))
    })
    .await
}
