//! LockInternals: the one lock algorithm every recipe composes.
//!
//! Create our node (protected, parents as containers, the first listing sent right behind the
//! create) → the waiter (`waiting.rs`: listing, asking the driver, watching the node ahead,
//! parking, taking over) → granted, with the token and our node as read for its keeper.
//!
//! Invariants:
//! * A node is granted only while it exists in the **current** session (CURATOR-604).
//! * Every path that ends without the lock (timeout, cancel, error, a stale node) deletes our
//!   node in the background (guaranteed delete); a create whose reply was lost is found by its
//!   protection id, adopted only in our session and deleted otherwise (CURATOR-45/498).
//! * The caller's deadline bounds the *wait*; each ZooKeeper step of the attempt may run past
//!   it by the Client's operation (else connection) timeout, so that a short timeout never
//!   misses a free lock for want of a round trip.
//! * A holder on a long queue marks its node (its own data written again, version 0 → 1) so
//!   that the waiter behind, which read that data at version 0, knows it holds; its release
//!   deletes the node only after the mark was answered.
//!
//! What each case costs in requests is in `docs/design.md` ("Cost per case").

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::driver::{LockDriver, LockNode};
use super::revocation::REVOKE_MESSAGE;
use super::store::{Claim, ClaimOps, ClaimReply, Store};
use super::waiter::Waiter;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
pub(crate) use crate::core::lock::Release;
use crate::core::metrics;
use crate::zookeeper::client::{
    create_protected, is_watcher_thread, on_io_thread, Call, Doomed, NodeRead, NodeSpec, SharedAcl,
    Siblings, Signal, Stat,
};
use crate::zookeeper::path;

/// A holder marks its node only when the queue it last listed held at least this many other
/// nodes: a mark costs a quorum write (and the next waiter a read) to spare that waiter a
/// listing, which pays only when the listing is long. Chosen by measurement
/// (`docs/decisions/0004-mark-threshold.md`).
const MARK_FROM: usize = 16;

/// A granted holder marks its node by writing the data it holds again, at version 0: version 1
/// with the very bytes the node held at version 0 (`unmarked`, as the waiter behind read them)
/// is a mark. Anything else is someone else's write — a revocation request (Curator's
/// `Revoker` writes at any version), a stray setData — or a mark the waiter cannot tell from
/// one, having first read the node after it was written: the waiter then lists the queue when
/// the node goes, as for a node that did not hold.
fn is_holder_mark(stat: &Stat, data: &[u8], unmarked: Option<&[u8]>) -> bool {
    stat.version == 1 && unmarked == Some(data) && data != REVOKE_MESSAGE
}

/// A granted attempt.
#[derive(Debug)]
pub(crate) struct Acquired {
    pub(crate) path: String,
    /// Rises strictly across successive holders of the lock path.
    pub(crate) token: u64,
    /// The session our node belongs to.
    pub(crate) session: i64,
    /// Our node as read by the grant, for the keeper to start from.
    pub(crate) primed: Option<NodeRead>,
}

pub(crate) struct LockInternals<S: Store> {
    pub(crate) store: S,
    pub(crate) path: String,
    lock_name: String,
    /// The names the nodes we queue with carry before their sequence, for drivers that sort by
    /// creation.
    sequence_names: Option<Vec<String>>,
    driver: Arc<dyn LockDriver>,
    leases: Leases,
    node_data: Mutex<Option<Vec<u8>>>,
    /// The recipe's own ACL provider for its nodes and their parents; `None`: the Client's.
    acl: Mutex<Option<SharedAcl>>,
    /// Whether a granted holder marks its node for the waiter behind it (see `wait_for_lock`).
    holder_marks: bool,
    /// Marks only when the last listing held at least this many other nodes.
    mark_from: usize,
    /// Shared by the attempts in progress; replaced by a fresh one when they are cancelled.
    cancel: Mutex<Cancel>,
    /// Holders' marks not yet answered, by node: a release waits for its node's mark.
    marking: Mutex<HashMap<String, Signal>>,
}

/// Cancels the attempts that share it: ends their I/O waits and wakes their parked waiters.
#[derive(Clone, Default)]
struct Cancel {
    signal: Signal,
    parked: Arc<Mutex<Vec<Weak<Waiter>>>>,
}

impl Cancel {
    fn attach(&self, waiter: &Arc<Waiter>) {
        let mut parked = self.parked.lock();
        parked.retain(|w| w.strong_count() > 0);
        parked.push(Arc::downgrade(waiter));
    }

    fn cancel(&self) {
        self.signal.set();
        let parked: Vec<Arc<Waiter>> = self
            .parked
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        parked.iter().for_each(|w| w.wake());
    }

    fn check(&self) -> Result<()> {
        if self.signal.is_set() {
            return Err(Error::Cancelled);
        }
        Ok(())
    }
}

/// How many contenders may hold at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leases {
    Fixed(usize),
    /// Read from a Curator `SharedCount` node (a 4-byte big-endian integer).
    Shared(String),
}

/// Parses a Curator `SharedCount` node's data; at least one lease.
pub(crate) fn shared_count(path: &str, data: &[u8]) -> Result<usize> {
    let bytes: [u8; 4] = data.try_into().map_err(|_| {
        Error::ZooKeeper(format!(
            "{path:?} does not hold a shared count ({} bytes)",
            data.len()
        ))
    })?;
    Ok(i32::from_be_bytes(bytes).max(1) as usize)
}

enum Outcome {
    /// `mark`: waiters may be queued behind us; tell the next one we hold.
    Granted {
        token: u64,
        mark: bool,
        primed: Option<NodeRead>,
    },
    TimedOut,
    /// Our node vanished or belongs to an ended session: start over with a new node.
    Restart,
}

/// Who made the last unfair claim on a lock, as its parent records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claimant {
    /// No claim was ever made: the parent's data was never written.
    Never,
    /// This contender (a name among the children) made it.
    Named(String),
    /// The parent names no contender: a write by someone else, or a claim that recorded no
    /// name.
    Unknown,
}

/// Deletes our node unless the attempt succeeded.
struct Cleanup<'a, S: Store> {
    store: &'a S,
    path: Option<String>,
    owner: i64,
}

impl<S: Store> Drop for Cleanup<'_, S> {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            self.store
                .delete_background(Doomed::node(&path, Some(self.owner)));
        }
    }
}

impl<S: Store> LockInternals<S> {
    pub(crate) fn new(
        store: S,
        path: &str,
        lock_name: &str,
        driver: Arc<dyn LockDriver>,
        leases: Leases,
    ) -> Result<Self> {
        path::validate(path, false)?;
        if path == "/" {
            return Err(Error::InvalidPath {
                path: path.into(),
                reason: "a lock needs its own node",
            });
        }
        Ok(LockInternals {
            store,
            path: path.to_owned(),
            lock_name: lock_name.to_owned(),
            sequence_names: driver
                .sorts_by_creation()
                .then(|| driver.sequence_names(lock_name)),
            driver,
            leases,
            node_data: Mutex::new(None),
            acl: Mutex::new(None),
            holder_marks: true,
            mark_from: MARK_FROM,
            cancel: Mutex::new(Cancel::default()),
            marking: Mutex::new(HashMap::new()),
        })
    }

    /// Holders never write to their nodes. Curator's `LeaderLatch` watches its predecessor for
    /// deletion only and does not re-arm its watch after a data change, so a mark would leave a
    /// Java latch behind ours waiting for good.
    pub(crate) fn without_holder_marks(mut self) -> Self {
        self.holder_marks = false;
        self
    }

    /// Marks when the last listing held at least `n` other nodes (0: always, as before).
    #[cfg(test)]
    pub(crate) fn marking_from(mut self, n: usize) -> Self {
        self.mark_from = n;
        self
    }

    /// Ends every attempt in progress with [`Error::Cancelled`] (their nodes are deleted);
    /// attempts that start later are not affected.
    pub(crate) fn cancel_waiters(&self) {
        let current = std::mem::take(&mut *self.cancel.lock());
        current.cancel();
    }

    /// The ACL provider for the nodes (and parents) this recipe creates from now on.
    pub(crate) fn set_acl_provider(&self, provider: SharedAcl) {
        *self.acl.lock() = Some(provider);
    }

    pub(crate) fn set_node_data(&self, data: Option<Vec<u8>>) -> Result<()> {
        if let Some(d) = &data {
            if d.len() > crate::zookeeper::client::MAX_DATA_LEN {
                return Err(Error::invalid("lock node data is over 1 MiB"));
            }
        }
        *self.node_data.lock() = data;
        Ok(())
    }

    /// Tries to take the lock, waiting until `wait`: `None` when it is not ours by then, with
    /// our node deleted. An expired `wait` makes one attempt without waiting (`try_lock`).
    pub(crate) fn attempt_lock(&self, wait: Deadline) -> Result<Option<Acquired>> {
        let started = std::time::Instant::now();
        let _waiting = metrics::Waiting::new(&self.path);
        let outcome = self.attempt_unmetered(wait);
        match &outcome {
            Ok(Some(_)) => metrics::acquired(&self.path, started.elapsed()),
            Ok(None) => metrics::timed_out(&self.path),
            Err(_) => {}
        }
        outcome
    }

    /// [`attempt_lock`](Self::attempt_lock) for a caller that counts its own metrics (the
    /// core's re-entrant shell).
    pub(crate) fn attempt_unmetered(&self, wait: Deadline) -> Result<Option<Acquired>> {
        if !wait.expired() && is_watcher_thread() {
            return Err(Error::OnWatcherThread);
        }
        let cancel = self.cancel.lock().clone();
        self.attempt(wait, &cancel)
    }

    fn attempt(&self, wait: Deadline, cancel: &Cancel) -> Result<Option<Acquired>> {
        let io = wait.or_later(Deadline::after(self.store.io_grace()));
        let mut call = self.store.new_call(io);
        call.cancel = Some(cancel.signal.clone());
        loop {
            let (our_path, stat, listing) = match self.create_node(&mut call) {
                Ok(created) => created,
                Err(Error::Timeout) => return Ok(None),
                Err(e) => return Err(e),
            };
            let mut cleanup = Cleanup {
                store: &self.store,
                path: Some(our_path.clone()),
                owner: stat.ephemeral_owner,
            };
            match self.wait_for_lock(&our_path, &stat, listing, &mut call, wait, cancel) {
                Ok(Outcome::Granted {
                    token,
                    mark,
                    primed,
                }) => {
                    cleanup.path = None;
                    return Ok(Some(self.granted(our_path, &stat, token, mark, primed)));
                }
                Ok(Outcome::TimedOut) | Err(Error::Timeout) => return Ok(None),
                Ok(Outcome::Restart) => {
                    tracing::debug!("lock node {our_path} is gone or stale; trying with a new one");
                    if wait.expired() {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Our node, granted: marked when waiters may be behind us on a long queue.
    fn granted(
        &self,
        our_path: String,
        stat: &Stat,
        token: u64,
        mark: bool,
        primed: Option<NodeRead>,
    ) -> Acquired {
        if mark {
            let answered = self.store.mark_holder(&our_path, &self.current_data());
            let mut marking = self.marking.lock();
            marking.retain(|_, answered| !answered.is_set());
            marking.insert(our_path.clone(), answered);
        }
        Acquired {
            path: our_path,
            token,
            session: stat.ephemeral_owner,
            primed,
        }
    }

    /// Whether a node owned by `owner` can be granted in the session we are in now
    /// (CURATOR-604). A persistent node (owner 0) belongs to no session.
    fn in_our_session(&self, owner: i64) -> bool {
        owner == 0 || self.store.session_id() == Some(owner)
    }

    fn current_data(&self) -> Vec<u8> {
        let data = self.node_data.lock().clone();
        data.unwrap_or_else(|| self.store.default_data().to_vec())
    }

    /// Creates a node named `node` that holds at once, without asking the driver: the caller
    /// knows it holds (a writer's downgrade to a read). Bounded by the operation timeout.
    pub(crate) fn create_held(&self, node: LockNode) -> Result<Acquired> {
        let mut call = self.store.new_call(Deadline::after(self.store.io_grace()));
        let (path, stat) = self.create_named(node, None, &mut call)?;
        Ok(Acquired {
            path,
            token: stat.czxid as u64,
            session: stat.ephemeral_owner,
            primed: None,
        })
    }

    /// Our new node, with the lock's children as listed right behind its create when the
    /// driver lets the first listing come before anything else (a claim reads the parent first).
    fn create_node(&self, call: &mut Call) -> Result<(String, Stat, Option<Vec<String>>)> {
        let node = self.driver.create_lock_node(&self.lock_name);
        if self.driver.grant_by_claim() {
            let (path, stat) = self.create_named(node, None, call)?;
            return Ok((path, stat, None));
        }
        let siblings = Siblings::default();
        let (path, stat) = self.create_named(node, Some(&siblings), call)?;
        let listing = siblings.lock().take();
        Ok((path, stat, listing))
    }

    fn create_named(
        &self,
        node: LockNode,
        siblings: Option<&Siblings>,
        call: &mut Call,
    ) -> Result<(String, Stat)> {
        let data = self.node_data.lock().clone();
        let provider = self.acl.lock().clone();
        let prefix = path::join(&self.path, &node.name);
        let spec = NodeSpec {
            path: &prefix,
            data: data.as_deref().unwrap_or(self.store.default_data()),
            mode: node.mode,
            acl: None,
            provider: provider.as_ref(),
            parents: true,
            protected: false,
            siblings,
            layout: node.layout,
        };
        create_protected(&self.store, &spec, call)
    }

    /// The children, sorted as the driver orders them.
    pub(crate) fn sorted_children(&self, call: &mut Call) -> Result<Vec<String>> {
        let children = self.store.children(&self.path, call)?;
        Ok(self.sorted(children))
    }

    /// Refuses a queue whose sequence counter has wrapped (see [`Error::SequenceWrapped`]),
    /// for drivers that order by sequence.
    fn check_sequences(&self, children: &[String]) -> Result<()> {
        let Some(names) = &self.sequence_names else {
            return Ok(());
        };
        if children.iter().any(|c| {
            names
                .iter()
                .any(|name| super::driver::sequence_wrapped(c, name))
        }) {
            return Err(Error::SequenceWrapped(self.path.clone()));
        }
        Ok(())
    }

    fn sorted(&self, mut children: Vec<String>) -> Vec<String> {
        children.sort_by_cached_key(|c| (self.driver.sort_key(c, &self.lock_name), c.clone()));
        children
    }

    /// The holder ahead of us is gone and nothing is left ahead: the lock is ours if our node
    /// still exists (`None`: it does not). That is known from our node's read while its watch
    /// has not fired since, or from a listing we have not parked since — one round trip ago, as
    /// for a free lock (the keeper reads the node once the hold lasts). Else it is read again,
    /// unless it went (deleted by hand, say), which a listing would have shown. Our mark goes
    /// out after this read: sent before it, the read would wait for the mark's commit.
    fn take_over(
        &self,
        our_path: &str,
        own: Option<NodeRead>,
        fresh_listing: bool,
        call: &mut Call,
    ) -> Result<Option<Option<NodeRead>>> {
        if let Some(mut primed) = own {
            if primed.untouched() {
                return Ok(Some(Some(primed)));
            }
        } else if fresh_listing {
            return Ok(Some(None));
        }
        Ok(self.store.prime_keeper(our_path, call)?.map(Some))
    }

    /// The last claimant as recorded in the lock's parent, read (`data`, at `version`) before
    /// the listing.
    fn claimant(&self, version: i32, data: &[u8]) -> Claimant {
        if version == 0 {
            return Claimant::Never;
        }
        match std::str::from_utf8(data) {
            Ok(name)
                if name.starts_with(path::PROTECTED_PREFIX)
                    && name.contains(&self.lock_name)
                    && !name.contains('/') =>
            {
                Claimant::Named(name.to_owned())
            }
            _ => Claimant::Unknown,
        }
    }

    /// The unfair driver's claim: marks our node, provided no other contender holds and no claim
    /// was made since the listing (the parent at `parent_version`).
    ///
    /// A contender holds if it made the last claim and still exists. The claim writes the
    /// claimant's name into the lock's parent, so a contender found written (its data version
    /// above 0) holds if the parent names it. Any contender can be written without holding:
    /// a revocation request (Curator's `Revoker` writes at any version) on a waiting node, or a
    /// stray setData. When the parent names another node, or no claim was ever made, such a
    /// contender is checked at the version it has now and the claim is made again. When the
    /// parent names no contender (a stray write to the parent, or a claim that recorded no
    /// name), a written contender is taken to hold: the lock waits rather than risk two
    /// holders. Our own node found written is claimed over, keeping its data, so that a
    /// revocation request stays for our keeper to hand on.
    fn claim(
        &self,
        our_path: &str,
        children: &[String],
        (parent_version, claimant): (i32, &Claimant),
        call: &mut Call,
    ) -> Result<Claim> {
        let our_name = path::name(our_path);
        let mut others: Vec<(String, i32)> = children
            .iter()
            .filter(|c| c.as_str() != our_name)
            .map(|c| (path::join(&self.path, c), 0))
            .collect();
        let mut ours = (self.current_data(), 0);
        loop {
            let ops = ClaimOps {
                ours: (our_path, &ours.0, ours.1),
                others: &others,
                parent: (&self.path, parent_version),
            };
            match self.store.claim(&ops, call)? {
                ClaimReply::Won(stat) => return Ok(Claim::Won(stat)),
                ClaimReply::Parent
                | ClaimReply::Ours { gone: true }
                | ClaimReply::Other { gone: true, .. } => return Ok(Claim::Changed),
                ClaimReply::Ours { gone: false } => match self.store.read(our_path, call)? {
                    Some((stat, data)) => ours = (data, stat.version),
                    None => return Ok(Claim::Changed),
                },
                ClaimReply::Other { index, gone: false } => {
                    let other = &mut others[index];
                    match claimant {
                        Claimant::Named(name) if name != path::name(&other.0) => {}
                        Claimant::Never => {}
                        Claimant::Named(_) | Claimant::Unknown => {
                            return Ok(Claim::HeldBy(other.0.clone()))
                        }
                    }
                    match self.store.stat(&other.0, call)? {
                        Some(stat) => other.1 = stat.version,
                        None => return Ok(Claim::Changed),
                    }
                }
            }
        }
    }

    /// Deletes a held node of session `owner` as `how` says.
    ///
    /// A hold released before its mark was answered first waits for that answer (within the
    /// release's bound): the waiter behind us, woken by the mark, reads our node to see that
    /// it holds, and a delete sent right behind the mark would usually win that race, so that
    /// the waiter lists the whole queue again. Sent after the answer, the delete still has a
    /// quorum write to go through while that read is answered at once.
    ///
    /// On the I/O thread (which cannot wait for its own reply) every release is a background
    /// one. A bounded release that runs out of time hands the delete to the background too
    /// (see [`Store::delete_guaranteed`]).
    pub(crate) fn release(&self, our_path: &str, owner: i64, how: Release) -> Result<()> {
        let mark = self.marking.lock().remove(our_path);
        let how = match how {
            Release::Within(_) if on_io_thread() => Release::Background,
            how => how,
        };
        match how {
            Release::Background => {
                let doomed = Doomed::node(our_path, Some(owner));
                match mark {
                    Some(answered) if !answered.is_set() => {
                        self.store.delete_background_after(doomed, answered)
                    }
                    _ => self.store.delete_background(doomed),
                }
                Ok(())
            }
            Release::Within(by) => {
                let deadline = self.bounded(by);
                if let Some(answered) = mark {
                    answered.wait_until(deadline);
                }
                let mut call = self.store.new_call(deadline);
                self.store.delete_guaranteed(our_path, &mut call)
            }
        }
    }

    /// By `by`, or if `None`, within the Client's operation (else connection) timeout.
    fn bounded(&self, by: Option<std::time::Instant>) -> Deadline {
        match by {
            Some(at) => Deadline::at(at),
            None => Deadline::after(self.store.io_grace()),
        }
    }

    /// Full paths of this lock name's contenders, the holder(s) first.
    pub(crate) fn participant_nodes(&self) -> Result<Vec<String>> {
        let mut call = self.store.new_call(self.bounded(None));
        match self.sorted_children(&mut call) {
            Ok(c) => Ok(c
                .iter()
                .filter(|c| self.driver.is_contender(c, &self.lock_name))
                .map(|c| path::join(&self.path, c))
                .collect()),
            Err(Error::NoNode(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// The data of the children `keep` picks, in lock order, as text (kazoo's `contenders()`:
    /// the identifiers its contenders wrote); nodes that go while being read are left out.
    /// Bounded by the Client's operation (else connection) timeout.
    pub(crate) fn contenders(&self, keep: impl Fn(&str) -> bool) -> Result<Vec<String>> {
        let mut call = self.store.new_call(self.bounded(None));
        let children = match self.sorted_children(&mut call) {
            Ok(c) => c,
            Err(Error::NoNode(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for child in children.iter().filter(|c| keep(c)) {
            if let Some((_, data)) = self.store.read(&path::join(&self.path, child), &mut call)? {
                out.push(String::from_utf8_lossy(&data).into_owned());
            }
        }
        Ok(out)
    }

    /// [`contenders`](Self::contenders) of the children the driver counts as contenders.
    pub(crate) fn driver_contenders(&self) -> Result<Vec<String>> {
        self.contenders(|c| self.driver.is_contender(c, &self.lock_name))
    }
}

mod resumable;
mod waiting;

pub(crate) use self::resumable::{Progress, Resumable};

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
