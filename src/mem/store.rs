//! The in-process store behind `mem://NAME`: one per name in the process, shared by every
//! Client made from it and freed with the last of them. Each lock is a queue of entries in
//! arrival order — Curator's sequential nodes without a server — and one grant rule per role
//! decides which entries hold. Every change of a queue runs under the store's lock; what it
//! causes outside the store (waking a waiter, a health report, a latch's term) is collected
//! and done after the lock is let go.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use parking_lot::{Condvar, FairMutex, Mutex};

use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::hold::Report;

/// Every grant's fencing token, from one counter of the process: rising on every lock name,
/// also across a store freed and made again.
static TOKENS: AtomicU64 = AtomicU64::new(0);

/// Ids of entries, Clients and lock objects, unique in the process.
static IDS: AtomicU64 = AtomicU64::new(1);

/// A fresh id.
pub(crate) fn next_id() -> u64 {
    IDS.fetch_add(1, Ordering::Relaxed)
}

/// The stores of the process by name; an entry whose store is gone is removed by its drop.
fn registry() -> &'static Mutex<HashMap<String, Weak<Store>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Weak<Store>>>> = OnceLock::new();
    STORES.get_or_init(Mutex::default)
}

/// Which family of locks a name belongs to: a mutex and a leader latch of one name share a
/// queue; a read-write lock and a semaphore of that name are other locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex,
    ReadWrite,
    Semaphore,
}

impl Kind {
    fn index(self) -> usize {
        match self {
            Kind::Mutex => 0,
            Kind::ReadWrite => 1,
            Kind::Semaphore => 2,
        }
    }
}

/// What an entry asks for, and so when it is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A mutex or a latch: granted when first in the queue.
    Exclusive,
    /// A read lock: granted when no writer is ahead of it.
    Read,
    /// A write lock: granted when first in the queue.
    Write,
    /// A semaphore's lease: granted when fewer than this many entries are ahead of it.
    Lease(u32),
}

/// Where an acquire in a waiting thread stands; changed only under the store's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Waiting,
    Granted(u64),
    Cancelled,
    Closed,
}

/// A waiting thread's parking slot: the store sets its state and wakes it.
struct Slot {
    state: Mutex<Wait>,
    woken: Condvar,
}

/// What a latch's entry does when granted (it has no thread waiting).
pub(crate) trait Contender: Send + Sync {
    /// The entry `entry` holds with `token`: begin a term; the returned report hears the
    /// hold's later health.
    fn granted(&self, entry: u64, token: u64) -> Report;
    /// The hold was lost (or the Client closed, `closed`): end the term, queue again.
    fn lost(self: Arc<Self>, closed: bool);
}

/// Who waits for an entry's grant.
#[derive(Clone)]
enum Waker {
    Thread(Arc<Slot>),
    Latch(Arc<dyn Contender>),
}

/// One holder or waiter of a lock.
struct Entry {
    id: u64,
    client: u64,
    /// The lock object that asked (what `cancel_waiters` ends).
    asker: u64,
    role: Role,
    token: Option<u64>,
    health: LockHealth,
    /// Hears the hold's health once the holder keeps it.
    report: Option<Report>,
    waker: Waker,
}

/// One lock: its entries in arrival order.
#[derive(Default)]
struct Queue {
    entries: Vec<Entry>,
}

/// What a change of the store causes outside it, done once its lock is let go.
enum Effect {
    /// A waiting thread's slot changed: wake it.
    Wake(Arc<Slot>),
    Report(Report, LockHealth),
    /// A latch's entry was granted: (latch, entry, token).
    Granted(Arc<dyn Contender>, u64, u64),
    /// A latch's hold was lost (`false`) or its Client closed (`true`).
    LatchLost(Arc<dyn Contender>, bool),
}

/// A grant's place in the store: which queue and which entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) kind: Kind,
    pub(crate) name: String,
    pub(crate) entry: u64,
}

/// One holder or waiter of a `mem://` lock, semaphore or election, as
/// [`MemMutex::participants`](super::MemMutex::participants) lists them.
///
/// # Example
/// ```
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::mem::MemClient::connect("participants-doc")?;
/// let mutex = zklock::mem::MemMutex::new(&client, "ledger")?;
/// let _guard = mutex.lock()?;
/// let who = mutex.participants()?;
/// assert!(who[0].holds && who[0].client == client.id());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemParticipant {
    /// The entry's id, unique in the process.
    pub id: u64,
    /// Whether it holds (or has a lease); otherwise it waits.
    pub holds: bool,
    /// The id of its Client ([`MemClient::id`](super::MemClient::id)).
    pub client: u64,
    /// The fencing token of a holder.
    pub token: Option<u64>,
    /// Whether it reads (a read-write lock's reader).
    pub reads: bool,
}

/// Who asks for which lock, and as what.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub(crate) kind: Kind,
    pub(crate) name: &'a str,
    pub(crate) client: u64,
    /// The lock object asking (what its `cancel_waiters` ends).
    pub(crate) asker: u64,
    pub(crate) role: Role,
}

/// The frozen Clients of a store, and whether the whole store is.
#[derive(Default)]
struct Gate {
    store: bool,
    clients: HashSet<u64>,
    /// Releases asked of a frozen Client, done when it thaws: (client, place).
    owed: Vec<(u64, Place)>,
}

impl Gate {
    fn frozen(&self, client: u64) -> bool {
        self.store || self.clients.contains(&client)
    }
}

/// The locks of one `mem://NAME`.
pub(crate) struct Store {
    name: String,
    /// Fair: a thread that lets go of the store and asks again at once finds one that was
    /// waiting for the store ahead of it (arrival at the store is arrival in the queue).
    queues: FairMutex<[HashMap<String, Queue>; 3]>,
    gate: Mutex<Gate>,
    /// Whether anything is frozen: the gate is looked at only then.
    any_frozen: AtomicBool,
    thawed: Condvar,
}

impl Store {
    /// The store named `name`, made if the process has none.
    pub(crate) fn open(name: &str) -> Arc<Store> {
        let mut stores = registry().lock();
        if let Some(store) = stores.get(name).and_then(Weak::upgrade) {
            return store;
        }
        let store = Arc::new(Store {
            name: name.to_owned(),
            queues: FairMutex::default(),
            gate: Mutex::default(),
            any_frozen: AtomicBool::new(false),
            thawed: Condvar::new(),
        });
        stores.insert(name.to_owned(), Arc::downgrade(&store));
        store
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Waits while `client` (or the store) is frozen, until `until` at the latest: a call's
    /// round trip to a server that does not answer. [`Error::ConnectionLoss`] if still
    /// frozen then, [`Error::Closed`] once `closed` says so.
    pub(crate) fn pass(
        &self,
        client: u64,
        until: Instant,
        closed: &dyn Fn() -> bool,
    ) -> Result<()> {
        if !self.any_frozen.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut gate = self.gate.lock();
        loop {
            if closed() {
                return Err(Error::Closed);
            }
            if !gate.frozen(client) {
                return Ok(());
            }
            if self.thawed.wait_until(&mut gate, until).timed_out() {
                return match (closed(), gate.frozen(client)) {
                    (true, _) => Err(Error::Closed),
                    (false, true) => Err(Error::ConnectionLoss),
                    (false, false) => Ok(()),
                };
            }
        }
    }

    /// Whether `client` (or the store) is frozen now.
    pub(crate) fn frozen(&self, client: u64) -> bool {
        self.any_frozen.load(Ordering::Acquire) && self.gate.lock().frozen(client)
    }

    /// Freezes (`Some(client)`) a Client or (`None`) the whole store, or thaws it.
    pub(crate) fn freeze(&self, who: Option<u64>, frozen: bool) {
        let owed = {
            let mut gate = self.gate.lock();
            match (who, frozen) {
                (None, f) => gate.store = f,
                (Some(c), true) => {
                    gate.clients.insert(c);
                }
                (Some(c), false) => {
                    gate.clients.remove(&c);
                }
            }
            self.any_frozen
                .store(gate.store || !gate.clients.is_empty(), Ordering::Release);
            let owed = std::mem::take(&mut gate.owed);
            let (due, kept): (Vec<_>, Vec<_>) =
                owed.into_iter().partition(|(c, _)| !gate.frozen(*c));
            gate.owed = kept;
            due
        };
        self.thawed.notify_all();
        for (_, place) in owed {
            self.release(&place);
        }
    }

    /// A release asked of a frozen Client: done when it thaws (or at its close).
    pub(crate) fn owe(&self, client: u64, place: Place) {
        let mut gate = self.gate.lock();
        if gate.frozen(client) {
            gate.owed.push((client, place));
        } else {
            drop(gate);
            self.release(&place);
        }
    }

    /// Wakes every wait at the gate (a Client closed).
    pub(crate) fn wake_gate(&self) {
        let _gate = self.gate.lock();
        self.thawed.notify_all();
    }

    /// Queues `role` for the lock `name` of `kind`, for `client` through the lock object
    /// `asker`, and waits until `deadline` (one look once it has passed): the entry and its
    /// token, or `None` with the entry gone. `after`: the same thread's hold of the other
    /// half of a read-write lock, which a reader is granted beside at once (a downgrade).
    /// [`Error::Closed`] if `closed` says so as the entry would be queued.
    pub(crate) fn acquire(
        &self,
        ask: &Ask<'_>,
        deadline: Deadline,
        after: Option<u64>,
        closed: &dyn Fn() -> bool,
    ) -> Result<Option<(u64, u64)>> {
        let Ask {
            kind,
            name,
            client,
            asker,
            role,
        } = *ask;
        let slot = Arc::new(Slot {
            state: Mutex::new(Wait::Waiting),
            woken: Condvar::new(),
        });
        let id = next_id();
        let mut effects = Vec::new();
        let granted = {
            let mut queues = self.queues.lock();
            if closed() {
                return Err(Error::Closed);
            }
            let queue = queues[kind.index()].entry(name.to_owned()).or_default();
            let mut entry = Entry {
                id,
                client,
                asker,
                role,
                token: None,
                health: LockHealth::Held,
                report: None,
                waker: Waker::Thread(slot.clone()),
            };
            let beside = after.and_then(|a| queue.entries.iter().position(|e| e.id == a));
            match beside {
                Some(at) if role == Role::Read && queue.entries[at].token.is_some() => {
                    let token = next_token();
                    entry.token = Some(token);
                    queue.entries.insert(at + 1, entry);
                    Some(token)
                }
                _ => {
                    queue.entries.push(entry);
                    settle(queue, &mut effects);
                    let token = queue.entries.last().and_then(|e| e.token);
                    if token.is_none() && deadline.expired() {
                        queue.entries.pop();
                        settle(queue, &mut effects);
                        drop_if_empty(&mut queues[kind.index()], name);
                    }
                    token
                }
            }
        };
        // Our own grant wakes nobody: drop it from the effects.
        effects.retain(|e| !matches!(e, Effect::Wake(s) if Arc::ptr_eq(s, &slot)));
        self.run(effects);
        if let Some(token) = granted {
            return Ok(Some((id, token)));
        }
        if deadline.expired() {
            return Ok(None);
        }
        {
            let mut state = slot.state.lock();
            while *state == Wait::Waiting {
                match deadline.instant() {
                    None => slot.woken.wait(&mut state),
                    Some(at) => {
                        if slot.woken.wait_until(&mut state, at).timed_out() {
                            break;
                        }
                    }
                }
            }
        }
        let mut effects = Vec::new();
        let outcome = {
            let mut queues = self.queues.lock();
            match *slot.state.lock() {
                Wait::Granted(token) => Ok(Some((id, token))),
                Wait::Cancelled => Err(Error::Cancelled),
                Wait::Closed => Err(Error::Closed),
                Wait::Waiting => {
                    if let Some(queue) = queues[kind.index()].get_mut(name) {
                        queue.entries.retain(|e| e.id != id);
                        settle(queue, &mut effects);
                    }
                    drop_if_empty(&mut queues[kind.index()], name);
                    Ok(None)
                }
            }
        };
        self.run(effects);
        outcome
    }

    /// Queues a latch for the lock `name` (of the mutex family): `latch` hears its grant.
    /// Returns the entry.
    pub(crate) fn join(&self, name: &str, client: u64, latch: Arc<dyn Contender>) -> u64 {
        let id = next_id();
        let mut effects = Vec::new();
        {
            let mut queues = self.queues.lock();
            let queue = queues[Kind::Mutex.index()]
                .entry(name.to_owned())
                .or_default();
            queue.entries.push(Entry {
                id,
                client,
                asker: id,
                role: Role::Exclusive,
                token: None,
                health: LockHealth::Held,
                report: None,
                waker: Waker::Latch(latch),
            });
            settle(queue, &mut effects);
        }
        self.run(effects);
        id
    }

    /// Sets the report of the held entry at `place`; tells it at once of a health other than
    /// `Held`. `false` if the entry is gone (lost, or its Client closed).
    pub(crate) fn keep(&self, place: &Place, report: Report) -> bool {
        let now = {
            let mut queues = self.queues.lock();
            let entry = queues[place.kind.index()]
                .get_mut(&place.name)
                .and_then(|q| q.entries.iter_mut().find(|e| e.id == place.entry));
            match entry {
                None => None,
                Some(entry) => {
                    entry.report = Some(report.clone());
                    Some(entry.health)
                }
            }
        };
        match now {
            None => false,
            Some(LockHealth::Held) => true,
            Some(health) => {
                report(health);
                true
            }
        }
    }

    /// Takes the entry at `place` out of its queue (a release, a latch leaving), granting
    /// whoever that lets in.
    pub(crate) fn release(&self, place: &Place) {
        let mut effects = Vec::new();
        let mut queues = self.queues.lock();
        let map = &mut queues[place.kind.index()];
        if let Some(queue) = map.get_mut(&place.name) {
            queue.entries.retain(|e| e.id != place.entry);
            settle(queue, &mut effects);
        }
        drop_if_empty(map, &place.name);
        drop(queues);
        self.run(effects);
    }

    /// Ends every wait of the lock object `asker` on `name` with [`Error::Cancelled`].
    pub(crate) fn cancel(&self, kind: Kind, name: &str, asker: u64) {
        self.end(&mut |k, n, e| {
            (k == kind && n == name && e.asker == asker && e.token.is_none())
                .then_some(Fault::Cancel)
        });
    }

    /// A Client closes: its waits end with [`Error::Closed`], its holds are freed and read
    /// `Lost`, its latches leave.
    pub(crate) fn close_client(&self, client: u64) {
        self.gate.lock().owed.retain(|(c, _)| *c != client);
        self.end(&mut |_, _, e| (e.client == client).then_some(Fault::Close));
        self.wake_gate();
    }

    /// Sets the health of the holds that `pick` names (by Client and lock name): `Lost` frees
    /// them. Returns how many it changed.
    pub(crate) fn fault(&self, health: LockHealth, pick: &dyn Fn(u64, &str) -> bool) -> usize {
        let fault = match health {
            LockHealth::Lost => Fault::Lose,
            other => Fault::Health(other),
        };
        self.end(&mut |_, name, e| {
            (e.token.is_some() && pick(e.client, name) && e.health != health).then_some(fault)
        })
    }

    /// Applies what `pick` says to each entry, then settles the queues it touched.
    fn end(&self, pick: &mut dyn FnMut(Kind, &str, &Entry) -> Option<Fault>) -> usize {
        let mut effects = Vec::new();
        let mut changed = 0;
        {
            let mut queues = self.queues.lock();
            for kind in [Kind::Mutex, Kind::ReadWrite, Kind::Semaphore] {
                let map = &mut queues[kind.index()];
                for (name, queue) in map.iter_mut() {
                    let before = changed;
                    queue.entries.retain_mut(|e| {
                        let Some(fault) = pick(kind, name, e) else {
                            return true;
                        };
                        changed += 1;
                        apply(e, fault, &mut effects)
                    });
                    if changed != before {
                        settle(queue, &mut effects);
                    }
                }
                map.retain(|_, q| !q.entries.is_empty());
            }
        }
        self.run(effects);
        changed
    }

    /// The entries of the lock `name` of `kind`, holders first, then waiters in order.
    pub(crate) fn participants(&self, kind: Kind, name: &str) -> Vec<MemParticipant> {
        let queues = self.queues.lock();
        let Some(queue) = queues[kind.index()].get(name) else {
            return Vec::new();
        };
        let who = |e: &Entry| MemParticipant {
            id: e.id,
            holds: e.token.is_some(),
            client: e.client,
            token: e.token,
            reads: e.role == Role::Read,
        };
        let holders = queue.entries.iter().filter(|e| e.token.is_some()).map(who);
        let waiters = queue.entries.iter().filter(|e| e.token.is_none()).map(who);
        holders.chain(waiters).collect()
    }

    /// Does what changes of the store caused, outside its lock.
    fn run(&self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Wake(slot) => {
                    let _state = slot.state.lock();
                    slot.woken.notify_one();
                }
                Effect::Report(report, health) => report(health),
                Effect::Granted(latch, entry, token) => {
                    let report = latch.granted(entry, token);
                    self.latch_report(entry, report);
                }
                Effect::LatchLost(latch, closed) => latch.lost(closed),
            }
        }
    }

    /// Sets the report of a latch's held entry (`Mutex` family), as [`keep`](Self::keep).
    fn latch_report(&self, entry: u64, report: Report) {
        let now = {
            let mut queues = self.queues.lock();
            queues[Kind::Mutex.index()]
                .values_mut()
                .flat_map(|q| q.entries.iter_mut())
                .find(|e| e.id == entry)
                .map(|e| {
                    e.report = Some(report.clone());
                    e.health
                })
        };
        match now {
            Some(LockHealth::Held) => {}
            Some(health) => report(health),
            None => report(LockHealth::Lost),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let mut stores = registry().lock();
        if stores
            .get(&self.name)
            .is_some_and(|w| w.strong_count() == 0)
        {
            stores.remove(&self.name);
        }
    }
}

/// What happens to one entry.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Cancel,
    Close,
    Lose,
    Health(LockHealth),
}

/// Applies `fault` to `e`; whether the entry stays in its queue.
fn apply(e: &mut Entry, fault: Fault, effects: &mut Vec<Effect>) -> bool {
    match (fault, &e.waker) {
        (Fault::Health(h), _) => {
            e.health = h;
            if let Some(report) = &e.report {
                effects.push(Effect::Report(report.clone(), h));
            }
            true
        }
        (Fault::Cancel | Fault::Close, Waker::Thread(slot)) if e.token.is_none() => {
            let to = if matches!(fault, Fault::Cancel) {
                Wait::Cancelled
            } else {
                Wait::Closed
            };
            *slot.state.lock() = to;
            effects.push(Effect::Wake(slot.clone()));
            false
        }
        (_, Waker::Latch(latch)) => {
            effects.push(Effect::LatchLost(
                latch.clone(),
                matches!(fault, Fault::Close),
            ));
            false
        }
        _ => {
            if let Some(report) = &e.report {
                effects.push(Effect::Report(report.clone(), LockHealth::Lost));
            }
            false
        }
    }
}

fn next_token() -> u64 {
    TOKENS.fetch_add(1, Ordering::Relaxed) + 1
}

fn drop_if_empty(map: &mut HashMap<String, Queue>, name: &str) {
    if map.get(name).is_some_and(|q| q.entries.is_empty()) {
        map.remove(name);
    }
}

/// Grants every entry of `queue` that its role lets in now. A waiting mutex or write entry past
/// the head, or a reader behind a writer, blocks every entry after it: the walk stops there
/// rather than looking at every waiter behind.
fn settle(queue: &mut Queue, effects: &mut Vec<Effect>) {
    let mut writer_ahead = false;
    for i in 0..queue.entries.len() {
        let e = &queue.entries[i];
        let grantable = match e.role {
            Role::Exclusive | Role::Write => i == 0,
            Role::Read => !writer_ahead,
            Role::Lease(max) => i < max as usize,
        };
        if e.role == Role::Write {
            writer_ahead = true;
        }
        if e.token.is_some() {
            continue;
        }
        if !grantable {
            if matches!(e.role, Role::Lease(_)) {
                continue;
            }
            break;
        }
        let token = next_token();
        let e = &mut queue.entries[i];
        e.token = Some(token);
        match &e.waker {
            Waker::Thread(slot) => {
                *slot.state.lock() = Wait::Granted(token);
                effects.push(Effect::Wake(slot.clone()));
            }
            Waker::Latch(latch) => effects.push(Effect::Granted(latch.clone(), e.id, token)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_one_store_while_used_and_none_after() {
        let name = format!("registry-{}", next_id());
        let a = Store::open(&name);
        let b = Store::open(&name);
        assert!(Arc::ptr_eq(&a, &b), "one store per name");
        assert!(!Arc::ptr_eq(&a, &Store::open("another")));
        drop(a);
        assert!(registry().lock().contains_key(&name));
        drop(b);
        assert!(!registry().lock().contains_key(&name), "freed when unused");
    }
}
