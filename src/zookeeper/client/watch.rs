//! Watches, routed one way: a fired watch goes to a user's [`Watch`](crate::zookeeper::Watch) through the
//! watcher thread, or to the crate's own code on the I/O thread (see [`WatchTarget`]).

use futures_lite::future;
use zookeeper_client as zk;

use super::watcher::Message;
use super::{Call, Client, Reread, Signal, Stat, Watch, WatchEvent, WatchEventKind, WatchTarget};
use crate::core::channel::Receiver;
use crate::core::error::{Error, Result};
use crate::zookeeper::path;

impl Client {
    /// A node's children (unsorted) and a one-shot [`Watch`] that fires when a child is added or
    /// removed, or the node is deleted (Curator's `getChildren().usingWatcher(..)`).
    ///
    /// # Errors
    /// [`Error::NoNode`] if the node does not exist (no watch is left behind then).
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if the node is absent (no watch is left).
    pub fn children_watch(&self, path: &str) -> Result<(Vec<String>, Watch)> {
        path::validate(path, false)?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cancel = Signal::default();
        let (children, watcher, zk) = self.run(
            "children_watch",
            &mut self.user_call(),
            |zk, _| async move {
                let (children, watcher) = zk
                    .list_and_watch_children(path)
                    .await
                    .map_err(|e| Error::from_zk(e, path))?;
                Ok((children, watcher, zk))
            },
        )?;
        let target = WatchTarget::Channel(tx);
        let on_move = WatchEventKind::NodeChildrenChanged;
        self.forward_watch(zk, path, watcher, target, cancel.clone(), on_move);
        Ok((
            children,
            Watch {
                rx: Receiver::new(rx),
                cancel,
            },
        ))
    }

    /// A node's data and stat, and a one-shot [`Watch`] that fires on its next change or
    /// deletion. Uses `getData`, so no watch is left behind on a node that does not exist.
    ///
    /// # Blocking and errors
    /// One call: bounded by the retry policy (and the operation timeout, if set); errors as
    /// listed on [`Client`]: [`NoNode`](Error::NoNode) if absent (no watch is left).
    pub fn data_watch(&self, path: &str) -> Result<(Vec<u8>, Stat, Watch)> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cancel = Signal::default();
        let (data, stat) = self.data_watch_in(
            path,
            WatchTarget::Channel(tx),
            cancel.clone(),
            &mut self.user_call(),
        )?;
        Ok((
            data,
            stat,
            Watch {
                rx: Receiver::new(rx),
                cancel,
            },
        ))
    }

    /// `getData` with a watch whose firing goes to `target`; setting `cancel` removes the watch.
    pub(crate) fn data_watch_in(
        &self,
        path: &str,
        target: WatchTarget,
        cancel: Signal,
        call: &mut Call,
    ) -> Result<(Vec<u8>, Stat)> {
        path::validate(path, false)?;
        let (data, stat, watcher, zk) = self.run("data_watch", call, |zk, _| async move {
            let (data, stat, watcher) = zk
                .get_and_watch_data(path)
                .await
                .map_err(|e| Error::from_zk(e, path))?;
            Ok((data, stat, watcher, zk))
        })?;
        let on_move = WatchEventKind::NodeDataChanged;
        self.forward_watch(zk, path, watcher, target, cancel, on_move);
        Ok((data, Stat::from_zk(stat)))
    }

    /// Hands the event of `watcher` (set on `path` through `zk`) to `target` when it fires;
    /// setting `cancel` removes the watch. If the session moves to another wire client first,
    /// the watch cannot go with it: it fires then as `on_move`, so that its owner reads again.
    fn forward_watch(
        &self,
        zk: zk::Client,
        path: &str,
        mut watcher: zk::OneshotWatcher,
        target: WatchTarget,
        cancel: Signal,
        on_move: WatchEventKind,
    ) {
        let moved = self.moved_signal(&zk);
        let events = self.shared().events.clone();
        let path = path.to_owned();
        // The Client's close: this task holds a clone of the wire handle, and the wire client
        // closes the session only once every clone is gone.
        let closing = self.shared().stop.clone();
        self.shared().spawn(async move {
            let mut target = target;
            loop {
                // On cancel the watcher is dropped here, which removes the watch from the
                // server; on close, a user's `Watch` sees its sender go and returns `None`.
                let event = match fired(watcher, &cancel, &closing, &moved).await {
                    Fired::Stopped => return,
                    Fired::Moved => {
                        let event = WatchEvent {
                            kind: on_move,
                            path: path.clone(),
                        };
                        return target.deliver_alone(&events, event);
                    }
                    Fired::Event(event) => WatchEvent::from_zk(event),
                };
                match target {
                    WatchTarget::Reading {
                        parent,
                        mut deliver,
                    } if event.kind == WatchEventKind::NodeDataChanged => {
                        let (reread, next) = reread(&zk, &path, parent).await;
                        deliver(event, Some(reread));
                        let Some(next) = next else { return };
                        watcher = next;
                        target = WatchTarget::Reading { parent, deliver };
                    }
                    target => return target.deliver_alone(&events, event),
                }
            }
        });
    }

    /// The signal set when the session of `zk` moves off it; one never set if the Client's
    /// session is another already.
    fn moved_signal(&self, zk: &zk::Client) -> Signal {
        let conn = self.shared().conn.lock();
        let same = conn
            .zk
            .as_ref()
            .is_some_and(|c| c.session_id() == zk.session_id());
        if same {
            conn.moved.clone()
        } else {
            Signal::default()
        }
    }
}

/// What ended a forwarded watch's wait.
enum Fired {
    /// The watch fired.
    Event(zk::WatchedEvent),
    /// The session moved to another wire client, which does not have the watch.
    Moved,
    /// Cancelled, or the Client closed.
    Stopped,
}

/// Waits for `watcher` to fire, `cancel` or `closing` to be set, or the session to move. A
/// watcher dropped before it fired (with this future) is removed from the server.
async fn fired(
    watcher: zk::OneshotWatcher,
    cancel: &Signal,
    closing: &Signal,
    moved: &Signal,
) -> Fired {
    future::or(
        async { Fired::Event(watcher.changed().await) },
        future::or(
            async {
                future::or(cancel.wait(), closing.wait()).await;
                Fired::Stopped
            },
            async {
                moved.wait().await;
                Fired::Moved
            },
        ),
    )
    .await
}

/// Reads a node whose data changed again, with a new watch (and its parent's stat, with
/// `parent`): what a [`WatchTarget::Reading`] is given, and the new watch if the node is there.
async fn reread(zk: &zk::Client, path: &str, parent: bool) -> (Reread, Option<zk::OneshotWatcher>) {
    // Both requests go out now, one behind the other: one round trip.
    let node = zk.get_and_watch_data(path);
    let parent_stat = parent.then(|| zk.check_stat(path::parent(path)));
    let node = node.await;
    let parent_stat = match parent_stat {
        Some(stat) => stat.await.ok().flatten().map(Stat::from_zk),
        None => None,
    };
    let (node, next) = match node {
        Ok((data, stat, next)) => (Ok(Some((Stat::from_zk(stat), data))), Some(next)),
        Err(zk::Error::NoNode) => (Ok(None), None),
        Err(e) => (Err(Error::from_zk(e, path)), None),
    };
    let reread = Reread {
        node,
        parent: parent_stat,
    };
    (reread, next)
}

impl WatchTarget {
    /// Hands `event` to the target, with nothing read again: the watch's last event.
    fn deliver_alone(self, events: &crossbeam_channel::Sender<Message>, event: WatchEvent) {
        match self {
            WatchTarget::Channel(tx) => {
                let _ = events.send(Message::Watch(tx, event));
            }
            WatchTarget::Call(call) => call(event),
            WatchTarget::Reading { mut deliver, .. } => deliver(event, None),
        }
    }
}

/// Removes one of the crate's own watches when dropped.
#[must_use]
pub(crate) struct WatchGuard(pub(crate) Signal);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.set();
    }
}
