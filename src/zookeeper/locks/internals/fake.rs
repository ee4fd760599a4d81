//! An in-memory fake of the few ZooKeeper calls LockInternals makes (the [`Store`] port), with
//! injected faults: lost replies, connection losses, session changes, held-back answers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

use super::super::store::{ClaimOps, ClaimReply, OnChange, Store, Watched};
use super::super::waiter::Waiter;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::retry::{RetryBudget, RetryNTimes};
use crate::zookeeper::client::{
    Call, Doomed, NodeOps, NodeRead, NodeSpec, Registration, Registry, Reread, Signal, Stat,
    WatchEvent, WatchEventKind, WatchGuard,
};
use crate::zookeeper::path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Op {
    Create,
    Children,
    Watch,
    Mark,
    /// A listing sent right behind a create.
    ListWithCreate,
    /// A read of our own node with the watch its keeper starts from.
    Prime,
    /// A stat of a node (the lock's parent, to count its queue).
    Stat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    /// The request fails before the server sees it.
    ConnectionLoss,
    /// The server applies it, the reply is lost.
    LostReply,
    /// The server applies it, the reply is lost, and the session changes before the retry.
    LostReplyThenNewSession,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) nodes: BTreeMap<String, Stat>,
    /// Node data written since creation; a node not listed holds [`DEFAULT_DATA`].
    pub(super) data: HashMap<String, Vec<u8>>,
    /// Data versions of parents (bumped by claims).
    pub(super) parent_versions: HashMap<String, i32>,
    pub(super) next_seq: HashMap<String, i64>,
    pub(super) zxid: i64,
    pub(super) session: i64,
    /// Data watches: the waiter, the guard's signal, what a data change reads.
    pub(super) watches: HashMap<String, Vec<(Arc<Waiter>, Signal, OnChange)>>,
    pub(super) faults: VecDeque<(Op, Fault)>,
    pub(super) calls: HashMap<Op, usize>,
    /// Marks whose answer is held back (`Some`) until `answer_marks`; `None`: answered at once.
    pub(super) unanswered_marks: Option<Vec<Signal>>,
    /// A node that goes just before the next watch is set (its holder released meanwhile).
    pub(super) gone_before_watch: Option<String>,
}

/// What every node holds until it is written (the fake's default node data).
pub(super) const DEFAULT_DATA: &[u8] = b"fake";

#[derive(Clone)]
pub(super) struct Fake {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) registry: Arc<Registry>,
    /// What the Client's operation timeout would be.
    pub(super) grace: Duration,
    /// Answers a create's request for its siblings, as the Client does.
    pub(super) lists_with_create: bool,
    /// Held by a test to keep `watch` requests from being answered meanwhile.
    pub(super) watch_gate: Arc<Mutex<()>>,
}

impl Fake {
    pub(super) fn new() -> Fake {
        let state = State {
            session: 1,
            ..State::default()
        };
        Fake {
            state: Arc::new(Mutex::new(state)),
            registry: Arc::new(Registry::default()),
            grace: Duration::from_secs(5),
            lists_with_create: false,
            watch_gate: Arc::default(),
        }
    }

    /// Holds back the answers of later marks until [`Fake::answer_marks`].
    pub(super) fn answer_marks_later(&self) {
        self.state.lock().unanswered_marks = Some(Vec::new());
    }

    pub(super) fn answer_marks(&self) {
        let held = self.state.lock().unanswered_marks.take();
        held.into_iter().flatten().for_each(|s| s.set());
    }

    /// `path` goes right before the next watch request is answered.
    pub(super) fn remove_before_next_watch(&self, path: &str) {
        self.state.lock().gone_before_watch = Some(path.to_owned());
    }

    pub(super) fn fail(&self, op: Op, fault: Fault) {
        self.state.lock().faults.push_back((op, fault));
    }

    pub(super) fn calls(&self, op: Op) -> usize {
        self.state.lock().calls.get(&op).copied().unwrap_or(0)
    }

    pub(super) fn children_of(&self, parent: &str) -> Vec<String> {
        let st = self.state.lock();
        st.nodes
            .keys()
            .filter(|p| path::parent(p) == parent)
            .cloned()
            .collect()
    }

    /// Another process adds a contender.
    pub(super) fn add_contender(&self, parent: &str) -> String {
        let mut st = self.state.lock();
        let seq = Self::next_seq(&mut st, parent);
        let path = format!("{parent}/_c_{}-lock-{seq:010}", uuid::Uuid::new_v4());
        st.zxid += 1;
        let stat = Stat {
            czxid: st.zxid,
            ephemeral_owner: 99,
            ..Stat::default()
        };
        st.nodes.insert(path.clone(), stat);
        path
    }

    pub(super) fn next_seq(st: &mut State, parent: &str) -> i32 {
        let next = st.next_seq.entry(parent.to_owned()).or_insert(0);
        let seq = *next as i32;
        *next = if seq == i32::MAX {
            i32::MIN as i64
        } else {
            *next + 1
        };
        seq
    }

    /// Another process deletes a node; its watchers fire.
    pub(super) fn remove(&self, path: &str) {
        let fired = {
            let mut st = self.state.lock();
            st.nodes.remove(path);
            st.data.remove(path);
            st.watches.remove(path).unwrap_or_default()
        };
        for (w, cancel, _) in fired {
            if !cancel.is_set() {
                w.wake_watch(WatchEvent {
                    kind: WatchEventKind::NodeDeleted,
                    path: path.into(),
                });
            }
        }
    }

    /// Someone else's setData on `path` at any version (a revocation request, a stray write);
    /// its data watches fire as for a mark.
    pub(super) fn set_data(&self, path: &str, data: &[u8]) {
        self.write(path, data, None);
    }

    /// A setData at `version` (`None`: any); whether it was applied. The node's data watches
    /// fire, and a rereading one reads the node again before it wakes its waiter, as the
    /// Client's I/O thread does.
    fn write(&self, path: &str, data: &[u8], version: Option<i32>) -> bool {
        let fired = {
            let mut st = self.state.lock();
            st.zxid += 1;
            let zxid = st.zxid;
            match st.nodes.get_mut(path) {
                Some(n) if version.is_none_or(|v| v == n.version) => {
                    n.version += 1;
                    n.mzxid = zxid;
                }
                _ => return false,
            }
            st.data.insert(path.to_owned(), data.to_vec());
            st.watches.remove(path).unwrap_or_default()
        };
        for (w, cancel, on_change) in fired {
            if cancel.is_set() {
                continue;
            }
            let event = WatchEvent {
                kind: WatchEventKind::NodeDataChanged,
                path: path.into(),
            };
            if on_change == OnChange::Wake {
                w.wake_watch(event);
                continue;
            }
            let node = {
                let mut st = self.state.lock();
                let stat = st.nodes.get(path).copied();
                if stat.is_some() {
                    st.watches.entry(path.to_owned()).or_default().push((
                        w.clone(),
                        cancel.clone(),
                        on_change,
                    ));
                }
                *st.calls.entry(Op::Watch).or_default() += 1;
                stat.map(|stat| (stat, Self::data_of(&st, path)))
            };
            let parent = if on_change == OnChange::RereadAndCount {
                let mut call = self.new_call(Deadline::NEVER);
                self.stat(path::parent(path), &mut call).unwrap()
            } else {
                None
            };
            w.wake_reread(
                event,
                Reread {
                    node: Ok(node),
                    parent,
                },
            );
        }
        true
    }

    fn data_of(st: &State, path: &str) -> Vec<u8> {
        st.data
            .get(path)
            .cloned()
            .unwrap_or_else(|| DEFAULT_DATA.to_vec())
    }

    /// The session expires: its ephemerals go, a new session starts, every waiter is woken.
    pub(super) fn new_session(&self) {
        let old: Vec<String> = {
            let mut st = self.state.lock();
            let s = st.session;
            st.session += 1;
            st.nodes
                .iter()
                .filter(|(_, n)| n.ephemeral_owner == s)
                .map(|(p, _)| p.clone())
                .collect()
        };
        old.iter().for_each(|p| self.remove(p));
        self.registry.wake_all();
    }

    pub(super) fn live_watches(&self) -> usize {
        let st = self.state.lock();
        st.watches
            .values()
            .flatten()
            .filter(|(_, c, _)| !c.is_set())
            .count()
    }

    pub(super) fn fault(&self, op: Op) -> Option<Fault> {
        let mut st = self.state.lock();
        *st.calls.entry(op).or_default() += 1;
        let i = st.faults.iter().position(|(o, _)| *o == op)?;
        st.faults.remove(i).map(|(_, f)| f)
    }
}

impl NodeOps for Fake {
    fn create_once(&self, spec: &NodeSpec<'_>, _call: &mut Call) -> Result<(String, Stat)> {
        let fault = self.fault(Op::Create);
        if fault == Some(Fault::ConnectionLoss) {
            return Err(Error::ConnectionLoss);
        }
        let created = {
            let mut st = self.state.lock();
            let parent = path::parent(spec.path).to_owned();
            let path = if spec.mode.is_sequential() {
                let seq = Self::next_seq(&mut st, &parent);
                format!("{}{seq:010}", spec.path)
            } else {
                spec.path.to_owned()
            };
            if st.nodes.contains_key(&path) {
                return Err(Error::NodeExists(path));
            }
            st.zxid += 1;
            let owner = if spec.mode.is_ephemeral() {
                st.session
            } else {
                0
            };
            let stat = Stat {
                czxid: st.zxid,
                mzxid: st.zxid,
                ephemeral_owner: owner,
                ..Stat::default()
            };
            st.nodes.insert(path.clone(), stat);
            (path, stat)
        };
        match fault {
            Some(Fault::LostReply) => Err(Error::ConnectionLoss),
            Some(Fault::LostReplyThenNewSession) => {
                self.state.lock().session += 1;
                Err(Error::ConnectionLoss)
            }
            _ => {
                if let (true, Some(slot)) = (self.lists_with_create, spec.siblings) {
                    let parent = path::parent(spec.path);
                    let names = self.children_of(parent);
                    *slot.lock() = Some(names.iter().map(|p| path::name(p).to_owned()).collect());
                    *self
                        .state
                        .lock()
                        .calls
                        .entry(Op::ListWithCreate)
                        .or_default() += 1;
                }
                Ok(created)
            }
        }
    }

    fn backoff(&self, call: &mut Call, err: Error) -> Result<()> {
        if call.deadline.expired() {
            return Err(Error::Timeout);
        }
        call.budget.next_sleep().map(|_| ()).ok_or(err)
    }

    fn children(&self, path: &str, call: &mut Call) -> Result<Vec<String>> {
        loop {
            if self.fault(Op::Children).is_some() {
                self.backoff(call, Error::ConnectionLoss)?;
                continue;
            }
            return Ok(self
                .children_of(path)
                .iter()
                .map(|p| path::name(p).to_owned())
                .collect());
        }
    }

    fn stat(&self, path: &str, _call: &mut Call) -> Result<Option<Stat>> {
        let mut st = self.state.lock();
        *st.calls.entry(Op::Stat).or_default() += 1;
        if let Some(node) = st.nodes.get(path) {
            return Ok(Some(*node));
        }
        // A parent exists while it has children (containers), with the version claims bumped.
        let children = st.nodes.keys().filter(|k| path::parent(k) == path).count();
        Ok((children > 0).then(|| Stat {
            version: st.parent_versions.get(path).copied().unwrap_or(0),
            num_children: children as i32,
            ..Stat::default()
        }))
    }

    fn delete_background(&self, doomed: Doomed) {
        match doomed {
            Doomed::Node { path, .. } => self.remove(&path),
            Doomed::Protected { parent, prefix } => {
                let found = self
                    .children_of(&parent)
                    .into_iter()
                    .find(|p| path::name(p).starts_with(&prefix));
                if let Some(p) = found {
                    self.remove(&p);
                }
            }
        }
    }

    fn session_id(&self) -> Option<i64> {
        Some(self.state.lock().session)
    }
}

impl Store for Fake {
    fn new_call(&self, deadline: Deadline) -> Call {
        let policy = Arc::new(RetryNTimes::new(10, Duration::ZERO).unwrap());
        Call {
            deadline,
            budget: RetryBudget::new(policy),
            cancel: None,
        }
    }

    fn io_grace(&self) -> Duration {
        self.grace
    }

    fn prime_keeper(&self, path: &str, _call: &mut Call) -> Result<Option<NodeRead>> {
        if !self.state.lock().nodes.contains_key(path) {
            return Ok(None);
        }
        *self.state.lock().calls.entry(Op::Prime).or_default() += 1;
        // Fires once the node is gone (looked at whenever polled).
        let (state, path) = (self.state.clone(), path.to_owned());
        let fired = std::future::poll_fn(move |_| {
            if state.lock().nodes.contains_key(&path) {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(zookeeper_client::WatchedEvent::new(
                    zookeeper_client::EventType::NodeDeleted,
                    path.clone(),
                ))
            }
        });
        let session = self.state.lock().session;
        Ok(Some(NodeRead::watched(session, Vec::new(), 0, fired)))
    }

    fn claim(&self, ops: &ClaimOps<'_>, _call: &mut Call) -> Result<ClaimReply> {
        let mut st = self.state.lock();
        for (index, (other, version)) in ops.others.iter().enumerate() {
            match st.nodes.get(other) {
                None => return Ok(ClaimReply::Other { index, gone: true }),
                Some(n) if n.version != *version => {
                    return Ok(ClaimReply::Other { index, gone: false })
                }
                Some(_) => {}
            }
        }
        let (ours, data, version) = ops.ours;
        match st.nodes.get(ours) {
            None => return Ok(ClaimReply::Ours { gone: true }),
            Some(n) if n.version != version => return Ok(ClaimReply::Ours { gone: false }),
            Some(_) => {}
        }
        let (parent, parent_version) = ops.parent;
        if st.parent_versions.get(parent).copied().unwrap_or(0) != parent_version {
            return Ok(ClaimReply::Parent);
        }
        st.zxid += 1;
        let zxid = st.zxid;
        let node = st.nodes.get_mut(ours).expect("checked above");
        node.mzxid = zxid;
        node.version += 1;
        let won = *node;
        st.data.insert(ours.to_owned(), data.to_vec());
        *st.parent_versions.entry(parent.to_owned()).or_default() += 1;
        st.data
            .insert(parent.to_owned(), path::name(ours).as_bytes().to_vec());
        Ok(ClaimReply::Won(won))
    }

    fn read(&self, path: &str, call: &mut Call) -> Result<Option<(Stat, Vec<u8>)>> {
        let stat = self.stat(path, call)?;
        let st = self.state.lock();
        let data = match st.nodes.contains_key(path) {
            true => Self::data_of(&st, path),
            false => st.data.get(path).cloned().unwrap_or_default(),
        };
        Ok(stat.map(|stat| (stat, data)))
    }

    fn watch(
        &self,
        path: &str,
        waiter: &Arc<Waiter>,
        on_change: OnChange,
        call: &mut Call,
    ) -> Result<Option<Watched>> {
        drop(self.watch_gate.lock());
        while self.fault(Op::Watch).is_some() {
            self.backoff(call, Error::ConnectionLoss)?;
        }
        let gone = self.state.lock().gone_before_watch.take();
        gone.inspect(|p| self.remove(p));
        let mut st = self.state.lock();
        let Some(stat) = st.nodes.get(path).copied() else {
            return Ok(None);
        };
        let cancel = Signal::default();
        st.watches.entry(path.to_owned()).or_default().push((
            waiter.clone(),
            cancel.clone(),
            on_change,
        ));
        let data = Self::data_of(&st, path);
        Ok(Some((WatchGuard(cancel), stat, data)))
    }

    fn mark_holder(&self, path: &str, data: &[u8]) -> Signal {
        let answered = Signal::default();
        {
            let mut st = self.state.lock();
            match &mut st.unanswered_marks {
                Some(held) => held.push(answered.clone()),
                None => answered.set(),
            }
            *st.calls.entry(Op::Mark).or_default() += 1;
        }
        self.write(path, data, Some(0));
        answered
    }

    fn delete_background_after(&self, doomed: Doomed, after: Signal) {
        let me = self.clone();
        thread::spawn(move || {
            after.wait_until(Deadline::after(me.grace));
            me.delete_background(doomed);
        });
    }

    fn delete_guaranteed(&self, path: &str, _call: &mut Call) -> Result<()> {
        self.remove(path);
        Ok(())
    }

    fn register(&self, waiter: &Arc<Waiter>) -> Registration {
        self.registry.register(waiter.clone())
    }

    fn default_data(&self) -> &[u8] {
        DEFAULT_DATA
    }
}
