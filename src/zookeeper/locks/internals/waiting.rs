//! The waiter: from our node's creation to the grant, one state at a time.
//!
//! | state | what it does | next |
//! |---|---|---|
//! | `Listing` | lists the children (the first listing came with the create), checks that our node is of the current session and that the sequence has not wrapped, reads a shared lease count with a watch, asks the driver | `Granted`; `Claiming` (a driver that grants by claim); `Watching` the node the driver names; `TimedOut` if the wait is over; `Restart` if our node or its parent is gone |
//! | `Claiming` | marks our node and names it in the lock's parent with one transaction, provided no other contender holds (the last claimant, as the parent names it) and nobody claimed since the listing | `Granted` (the claim's write is the token); `Watching` the claimant; `Listing` if a node vanished or a claim came first |
//! | `Watching` | sets a getData watch on the node ahead (or takes the read the I/O thread made after its data changed); once that node holds, reads our own node with the watch its keeper will start from | `Parked`; `TakingOver` if the node ahead is gone and held the lock; `Listing` if it is gone otherwise |
//! | `Parked` | sleeps until a watch, a connection-state change or a cancel wakes it, or the wait is over; a resumable attempt (`resumable.rs`) returns instead and is resumed on the wake | `Watching` again with the node as read after a data change (a mark); `TakingOver` if the node ahead was deleted and held the lock; `Listing` on anything else; `TimedOut` |
//! | `TakingOver` | makes sure our node is still there: not at all if our own read's watch has not fired, or the listing that showed our node is the last word | `Granted`; `Restart` if our node went |
//!
//! The node ahead *holds* when it headed our listing (nodes only join behind, with a driver
//! that sorts by creation) or when it has marked itself as the holder — its data, as we read it
//! at version 0, written again: nothing is left ahead of it, so its deletion is our grant
//! without a listing. A marked node is read again on the I/O
//! thread as its change comes in, so that our read comes before its holder's delete.
//! `Granted`, `TimedOut` and `Restart` end the waiter; an error or a cancel ends it with that
//! error. Whatever ends it without the lock, the caller deletes our node.

use std::sync::Arc;

use super::{
    is_holder_mark, shared_count, Cancel, Claimant, Leases, LockInternals, Outcome, Store,
};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::zookeeper::client::{
    Call, NodeRead, Registration, Reread, Stat, WatchEventKind, WatchGuard,
};
use crate::zookeeper::locks::driver::Predicate;
use crate::zookeeper::locks::store::{Claim, OnChange};
use crate::zookeeper::locks::waiter::{Seen, Waiter};
use crate::zookeeper::path;

/// Where a waiter is (see the table above).
enum State {
    Listing,
    Claiming {
        children: Vec<String>,
        parent_version: i32,
        claimant: Claimant,
    },
    Watching(Ahead),
    Parked(Ahead),
    TakingOver {
        /// No park since the listing that showed our node: it is the last word on it.
        listing_fresh: bool,
    },
}

/// What a state leads to.
enum Step {
    To(State),
    Done(Outcome),
    /// Parked without a thread: not woken since the last look (a resumable attempt only).
    Suspend(State),
}

/// The node ahead of ours that the waiter watches, as one listing named it.
struct Ahead {
    path: String,
    /// It holds the lock: nothing is left ahead of it.
    holds: bool,
    /// What a data change on it has the I/O thread read before the waiter is woken.
    on_change: OnChange,
    /// Its watch, once set; dropped, it removes the watch.
    _watch: Option<WatchGuard>,
    /// It was read again after a data change, with the watch that read set.
    reread: Option<Reread>,
    /// Whether the waiter has parked since the listing.
    parked: bool,
    /// The watch on a shared lease count, kept for as long as this listing is the last.
    _count: Option<WatchGuard>,
}

/// What a waiter keeps from one step to the next. It owns all of it, so that a resumable
/// attempt can keep it while parked without a thread.
pub(super) struct Memory {
    waiter: Arc<Waiter>,
    /// Every connection-state change wakes the waiter while this lives (`None`: the owner of
    /// the waiter registered it).
    _registration: Option<Registration>,
    /// The state to run next; `None` before the first step.
    state: Option<State>,
    /// The wakes seen so far: a wake after it ends a park.
    seen: Seen,
    /// How many other nodes the last listing held (or a marked holder's read counted).
    others: usize,
    /// Our own node, read with the keeper's watch while the node ahead holds.
    own: Option<NodeRead>,
    /// A node ahead as read at data version 0 (its path and data): a mark writes that data
    /// again.
    unmarked: Option<(String, Vec<u8>)>,
    /// The listing that came with our create, until used.
    first_listing: Option<Vec<String>>,
}

impl Memory {
    /// A waiter's memory for a node just created (with the listing that came with it), woken
    /// through `waiter`, which is registered for state changes and cancels here unless
    /// `registered` says its owner did.
    pub(super) fn new<S: Store>(
        store: &S,
        waiter: Arc<Waiter>,
        registered: bool,
        cancel: &Cancel,
        first_listing: Option<Vec<String>>,
    ) -> Memory {
        let registration = (!registered).then(|| {
            cancel.attach(&waiter);
            store.register(&waiter)
        });
        Memory {
            seen: waiter.epoch(),
            waiter,
            _registration: registration,
            state: None,
            others: 0,
            own: None,
            unmarked: None,
            first_listing,
        }
    }
}

/// One waiter of one attempt, for one run of its steps.
struct Waiting<'a, S: Store> {
    lock: &'a LockInternals<S>,
    our_path: &'a str,
    our_name: &'a str,
    /// Our node's creation: its session and its czxid (the token).
    stat: &'a Stat,
    /// The driver sorts by creation and grants by position: nodes only join behind us.
    fifo: bool,
    /// Holders mark their nodes on long queues (one lease, a fifo driver).
    marks: bool,
    /// A park that would block returns instead (`Step::Suspend`).
    suspend: bool,
    mem: &'a mut Memory,
    call: &'a mut Call,
    wait: Deadline,
    cancel: &'a Cancel,
}

impl<S: Store> LockInternals<S> {
    /// Waits until our node (`our_path`, created with `stat`) is granted, the wait is over,
    /// or our node is found gone or stale.
    pub(super) fn wait_for_lock(
        &self,
        our_path: &str,
        stat: &Stat,
        first_listing: Option<Vec<String>>,
        call: &mut Call,
        wait: Deadline,
        cancel: &Cancel,
    ) -> Result<Outcome> {
        let mut mem = Memory::new(&self.store, Arc::default(), false, cancel, first_listing);
        let outcome = self.run_waiter(our_path, stat, &mut mem, call, wait, cancel, false)?;
        Ok(outcome.expect("a blocking waiter never suspends"))
    }

    /// Runs the waiter of our node from where `mem` left it, with no deadline, until it parks
    /// (`None`: its waiter's next wake should resume it) or ends.
    pub(super) fn resume_waiter(
        &self,
        our_path: &str,
        stat: &Stat,
        mem: &mut Memory,
        call: &mut Call,
        cancel: &Cancel,
    ) -> Result<Option<Outcome>> {
        self.run_waiter(our_path, stat, mem, call, Deadline::NEVER, cancel, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_waiter(
        &self,
        our_path: &str,
        stat: &Stat,
        mem: &mut Memory,
        call: &mut Call,
        wait: Deadline,
        cancel: &Cancel,
        suspend: bool,
    ) -> Result<Option<Outcome>> {
        let fifo = self.driver.sorts_by_creation() && !self.driver.grant_by_claim();
        let mut w = Waiting {
            lock: self,
            our_path,
            our_name: path::name(our_path),
            stat,
            fifo,
            // With one lease, a marked node holds and so has nothing ahead of it. With more, a
            // holder may have others ahead, so marks say nothing about our turn.
            marks: self.holder_marks && fifo && self.leases == Leases::Fixed(1),
            suspend,
            mem,
            call,
            wait,
            cancel,
        };
        let mut state = w.mem.state.take().unwrap_or(State::Listing);
        loop {
            let step = match state {
                State::Listing => w.list()?,
                State::Claiming {
                    children,
                    parent_version,
                    claimant,
                } => w.claim(&children, parent_version, &claimant)?,
                State::Watching(ahead) => w.watch(ahead)?,
                State::Parked(ahead) => w.park(ahead)?,
                State::TakingOver { listing_fresh } => w.take_over(listing_fresh)?,
            };
            match step {
                Step::To(next) => state = next,
                Step::Done(outcome) => return Ok(Some(outcome)),
                Step::Suspend(parked) => {
                    w.mem.state = Some(parked);
                    return Ok(None);
                }
            }
        }
    }
}

impl<S: Store> Waiting<'_, S> {
    fn in_our_session(&self) -> bool {
        self.lock.in_our_session(self.stat.ephemeral_owner)
    }

    fn granted(&self, mark: bool, primed: Option<NodeRead>) -> Step {
        Step::Done(Outcome::Granted {
            token: self.stat.czxid as u64,
            mark,
            primed,
        })
    }

    /// Whether our grant should mark our node: waiters may be behind us, and the queue is
    /// long enough for a mark to pay.
    fn worth_a_mark(&self) -> bool {
        self.marks && self.mem.others >= self.lock.mark_from
    }

    fn list(&mut self) -> Result<Step> {
        self.cancel.check()?;
        self.mem.seen = self.mem.waiter.epoch();
        let claims = self.lock.driver.grant_by_claim();
        // A claim is made against the parent as of before the listing: its version, and the
        // last claimant it names.
        let (parent_version, claimant) = if claims {
            match self.lock.store.read(&self.lock.path, self.call)? {
                Some((parent, data)) => (parent.version, self.lock.claimant(parent.version, &data)),
                None => return Ok(Step::Done(Outcome::Restart)),
            }
        } else {
            (0, Claimant::Never)
        };
        let listed = match self.mem.first_listing.take() {
            Some(children) => Ok(self.lock.sorted(children)),
            None => self.lock.sorted_children(self.call),
        };
        let children = match listed {
            Ok(c) => c,
            Err(Error::NoNode(_)) => return Ok(Step::Done(Outcome::Restart)),
            Err(e) => return Err(e),
        };
        if !self.in_our_session() {
            return Ok(Step::Done(Outcome::Restart));
        }
        self.lock.check_sequences(&children)?;
        self.mem.others = children.len().saturating_sub(1);
        // A shared count is read with a watch, so that a change wakes us.
        let (max_leases, count) = match &self.lock.leases {
            Leases::Fixed(n) => (*n, None),
            Leases::Shared(count_path) => {
                let watched = self.lock.store.watch(
                    count_path,
                    &self.mem.waiter,
                    OnChange::Wake,
                    self.call,
                )?;
                let Some((guard, _, data)) = watched else {
                    return Err(Error::NoNode(count_path.clone()));
                };
                (shared_count(count_path, &data)?, Some(guard))
            }
        };
        let ahead = match self
            .lock
            .driver
            .gets_the_lock(&children, self.our_name, max_leases)
        {
            Ok(Predicate::Granted) if claims => {
                return Ok(Step::To(State::Claiming {
                    children,
                    parent_version,
                    claimant,
                }))
            }
            Ok(Predicate::Granted) => {
                let waiters_behind = children.last().map(String::as_str) != Some(self.our_name);
                return Ok(self.granted(waiters_behind && self.worth_a_mark(), None));
            }
            Ok(Predicate::Watch(_)) if self.wait.expired() => {
                return Ok(Step::Done(Outcome::TimedOut))
            }
            Ok(Predicate::Watch(node)) => node,
            Err(Error::NoNode(_)) => return Ok(Step::Done(Outcome::Restart)),
            Err(e) => return Err(e),
        };
        Ok(Step::To(State::Watching(
            self.ahead(&children, ahead, count),
        )))
    }

    /// The node named `name` in `children`, to be watched.
    fn ahead(&self, children: &[String], name: String, count: Option<WatchGuard>) -> Ahead {
        let holds = self.fifo
            && matches!(self.lock.leases, Leases::Fixed(_))
            && children.first() == Some(&name);
        // On a data change (a mark, typically) the Client's I/O thread reads the node again as
        // the event comes in, and when our listing was short, counts the queue too.
        let on_change = match (self.marks, self.mem.others < self.lock.mark_from) {
            (false, _) => OnChange::Wake,
            (true, false) => OnChange::Reread,
            (true, true) => OnChange::RereadAndCount,
        };
        Ahead {
            path: path::join(&self.lock.path, &name),
            holds,
            on_change,
            _watch: None,
            reread: None,
            parked: false,
            _count: count,
        }
    }

    fn claim(
        &mut self,
        children: &[String],
        parent_version: i32,
        claimant: &Claimant,
    ) -> Result<Step> {
        let claimed = self.lock.claim(
            self.our_path,
            children,
            (parent_version, claimant),
            self.call,
        )?;
        Ok(match claimed {
            Claim::Won(stat) => Step::Done(Outcome::Granted {
                token: stat.mzxid as u64,
                mark: false,
                primed: None,
            }),
            Claim::HeldBy(holder) => {
                let name = path::name(&holder).to_owned();
                Step::To(State::Watching(self.ahead(children, name, None)))
            }
            Claim::Changed => Step::To(State::Listing),
        })
    }

    fn watch(&mut self, mut ahead: Ahead) -> Result<Step> {
        // getData, not exists: no watch is left behind on a node that is already gone.
        let mut counted = None;
        let looked = match ahead.reread.take() {
            Some(Reread {
                node: Ok(looked),
                parent,
            }) => {
                counted = parent;
                looked
            }
            Some(Reread { node: Err(_), .. }) => return Ok(Step::To(State::Listing)),
            None => self
                .lock
                .store
                .watch(&ahead.path, &self.mem.waiter, ahead.on_change, self.call)?
                .map(|(guard, stat, data)| {
                    ahead._watch = Some(guard);
                    (stat, data)
                }),
        };
        let Some((stat, data)) = looked else {
            // The holder ahead went before our watch was set (a short hold, typically): as for
            // its delete's event, the lock is ours without listing again.
            if ahead.holds && self.in_our_session() {
                return Ok(Step::To(State::TakingOver {
                    listing_fresh: !ahead.parked,
                }));
            }
            return Ok(Step::To(State::Listing));
        };
        // A mark is the node's own data written again, so it is told from anyone else's write
        // by the data read before it; a node first read already written is not trusted.
        if self.marks && stat.version == 0 {
            self.mem.unmarked = Some((ahead.path.clone(), data.clone()));
        }
        let unmarked = match &self.mem.unmarked {
            Some((path, data)) if *path == ahead.path => Some(data.as_slice()),
            _ => None,
        };
        let marked = self.marks && is_holder_mark(&stat, &data, unmarked);
        // A marked holder saw a long queue, and ours, listed when we joined, was short: the
        // queue as counted with the mark's read decides whether we mark in our turn, so that
        // the waiter behind us needs no listing either.
        if let (true, Some(parent)) = (marked, counted) {
            self.mem.others = self.mem.others.max(parent.num_children.max(1) as usize - 1);
        }
        ahead.holds |= marked;
        // Our own node, read with the watch its keeper will need while the holder holds: when
        // that holder goes, nothing is left to ask, and the handoff costs no round trip. (Our
        // mark, if we make one, fires that watch once: the keeper reads again, off the
        // handoff's path.)
        if ahead.holds && self.mem.own.is_none() {
            match self.lock.store.prime_keeper(self.our_path, self.call)? {
                Some(read) => self.mem.own = Some(read),
                None => return Ok(Step::Done(Outcome::Restart)),
            }
        }
        Ok(Step::To(State::Parked(ahead)))
    }

    fn park(&mut self, mut ahead: Ahead) -> Result<Step> {
        self.cancel.check()?;
        ahead.parked = true;
        if self.suspend {
            if !self.mem.waiter.woken_since(self.mem.seen) {
                return Ok(Step::Suspend(State::Parked(ahead)));
            }
        } else if !self.mem.waiter.wait(self.mem.seen, self.wait) {
            return Ok(Step::Done(Outcome::TimedOut));
        }
        self.cancel.check()?;
        // It may have marked itself as the holder: the I/O thread read it again as the change
        // came in (that read came before any later event of the watch it set).
        if let Some((then, read)) = self.mem.waiter.reread_since(self.mem.seen, &ahead.path) {
            self.mem.seen = then;
            ahead.reread = Some(read);
            return Ok(Step::To(State::Watching(ahead)));
        }
        Ok(
            match self.mem.waiter.watched_since(self.mem.seen, &ahead.path) {
                // The holder ahead of us went and nodes only join behind us: the lock is ours
                // without listing again, so a drain costs O(1) per handoff where Curator lists the
                // whole queue each time.
                Some(WatchEventKind::NodeDeleted) if ahead.holds && self.in_our_session() => {
                    Step::To(State::TakingOver {
                        listing_fresh: false,
                    })
                }
                _ => Step::To(State::Listing),
            },
        )
    }

    fn take_over(&mut self, listing_fresh: bool) -> Result<Step> {
        let mark = self.worth_a_mark();
        Ok(
            match self.lock.take_over(
                self.our_path,
                self.mem.own.take(),
                listing_fresh,
                self.call,
            )? {
                Some(primed) => self.granted(mark, primed),
                None => Step::Done(Outcome::Restart),
            },
        )
    }
}
