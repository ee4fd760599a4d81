//! LockInternals against the in-memory fake of the few ZooKeeper calls, with injected faults.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::fake::{Fake, Fault, Op, DEFAULT_DATA};
use super::*;
use crate::zookeeper::client::{CreateMode, Stat};
use crate::zookeeper::locks::driver::{StandardDriver, UnfairDriver};
use crate::zookeeper::locks::revocation::REVOKE_MESSAGE;

const DIR: &str = "/locks/l";

fn lock(fake: &Fake, driver: Arc<dyn LockDriver>) -> LockInternals<Fake> {
    LockInternals::new(fake.clone(), DIR, "lock-", driver, Leases::Fixed(1)).unwrap()
}

fn forever() -> Deadline {
    Deadline::after(Duration::from_secs(60))
}

/// Waits until `n` of our nodes (or contenders) are under the lock.
fn wait_children(fake: &Fake, n: usize) {
    let deadline = forever();
    while fake.children_of(DIR).len() != n {
        assert!(
            !deadline.expired(),
            "children never reached {n}: {:?}",
            fake.children_of(DIR)
        );
        thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until `n` watches are set (waiters parked).
fn wait_watches(fake: &Fake, n: usize) {
    let deadline = forever();
    while fake.live_watches() < n {
        assert!(!deadline.expired(), "watches never reached {n}");
        thread::sleep(Duration::from_millis(1));
    }
}

#[track_caller]
fn assert_none(attempt: Option<Acquired>) {
    assert!(attempt.is_none(), "expected no grant, got {attempt:?}");
}

fn spawn_attempt(l: &Arc<LockInternals<Fake>>) -> thread::JoinHandle<Result<Option<Acquired>>> {
    let l = l.clone();
    thread::spawn(move || l.attempt_lock(forever()))
}

#[test]
fn uncontended_lock_uses_a_protected_sequential_node_and_the_czxid_as_token() {
    let fake = Fake::new();
    let l = lock(&fake, Arc::new(StandardDriver));
    let got = l.attempt_lock(forever()).unwrap().unwrap();
    let name = path::name(&got.path);
    assert!(
        name.starts_with("_c_") && name.ends_with("-lock-0000000000"),
        "{name}"
    );
    assert_eq!(got.token, fake.state.lock().nodes[&got.path].czxid as u64);
    l.release(&got.path, got.session, Release::Within(None))
        .unwrap();
    assert!(fake.children_of(DIR).is_empty());
}

#[test]
fn a_lost_create_reply_adopts_the_node_instead_of_orphaning_it() {
    let fake = Fake::new();
    fake.fail(Op::Create, Fault::LostReply);
    let l = lock(&fake, Arc::new(StandardDriver));
    let got = l.attempt_lock(forever()).unwrap().unwrap();
    assert_eq!(
        fake.children_of(DIR),
        std::slice::from_ref(&got.path),
        "exactly our one node"
    );
    assert_eq!(
        fake.calls(Op::Create),
        1,
        "found by its protection id, not made twice"
    );
}

#[test]
fn a_node_from_an_earlier_session_is_deleted_not_adopted() {
    let fake = Fake::new();
    fake.fail(Op::Create, Fault::LostReplyThenNewSession);
    let l = lock(&fake, Arc::new(StandardDriver));
    let got = l.attempt_lock(forever()).unwrap().unwrap();
    assert_eq!(got.session, 2);
    assert_eq!(
        fake.children_of(DIR),
        std::slice::from_ref(&got.path),
        "the stale node was deleted"
    );
    assert_eq!(fake.calls(Op::Create), 2);
}

#[test]
fn connection_loss_at_any_step_is_retried_within_the_budget() {
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    fake.fail(Op::Create, Fault::ConnectionLoss);
    fake.fail(Op::Children, Fault::ConnectionLoss);
    fake.fail(Op::Watch, Fault::ConnectionLoss);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let t = spawn_attempt(&l);
    wait_children(&fake, 2);
    wait_watches(&fake, 1);
    fake.remove(&holder);
    let got = t.join().unwrap().unwrap().unwrap();
    assert_eq!(fake.children_of(DIR), [got.path]);
    assert_eq!(fake.live_watches(), 0);
}

#[test]
fn the_next_waiter_takes_the_lock_without_listing_again() {
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let t = spawn_attempt(&l);
    wait_children(&fake, 2);
    wait_watches(&fake, 1);
    let listings = fake.calls(Op::Children);
    fake.remove(&holder);
    let got = t.join().unwrap().unwrap().unwrap();
    assert_eq!(
        fake.calls(Op::Children),
        listings,
        "granted on the head's deletion alone"
    );
    assert_eq!(fake.children_of(DIR), [got.path]);
}

#[test]
fn a_latch_never_marks_its_node_however_it_is_granted() {
    // Curator's LeaderLatch watches its predecessor for deletion only; a data change would use
    // up its watch and leave it waiting for good.
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    let latch = |fake: &Fake| Arc::new(lock(fake, Arc::new(StandardDriver)).without_holder_marks());
    let first = latch(&fake);
    let t = spawn_attempt(&first);
    wait_children(&fake, 2);
    wait_watches(&fake, 1);
    let second = latch(&fake);
    let t2 = spawn_attempt(&second);
    wait_children(&fake, 3);
    wait_watches(&fake, 2);
    // Granted on its predecessor's deletion, with a waiter behind it.
    fake.remove(&holder);
    let got = t.join().unwrap().unwrap().unwrap();
    fake.remove(&got.path);
    let got = t2.join().unwrap().unwrap().unwrap();
    fake.remove(&got.path);
    assert_eq!(fake.calls(Op::Mark), 0);
    // A mutex marks in the same position (when marking pays, see below).
    let holder = fake.add_contender(DIR);
    let mutex = Arc::new(lock(&fake, Arc::new(StandardDriver)).marking_from(0));
    let t = spawn_attempt(&mutex);
    wait_watches(&fake, 1);
    fake.remove(&holder);
    t.join().unwrap().unwrap().unwrap();
    assert_eq!(fake.calls(Op::Mark), 1);
}

#[test]
fn a_waiter_whose_own_node_vanished_is_not_granted_on_the_fast_path() {
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let t = spawn_attempt(&l);
    wait_children(&fake, 2);
    wait_watches(&fake, 1);
    let ours = fake
        .children_of(DIR)
        .into_iter()
        .find(|c| *c != holder)
        .unwrap();
    fake.remove(&ours);
    fake.remove(&holder);
    let got = t.join().unwrap().unwrap().unwrap();
    assert_ne!(got.path, ours, "granted with a node that is gone");
    assert_eq!(fake.children_of(DIR), [got.path]);
}

#[test]
fn a_drain_lists_the_queue_once_per_waiter_not_once_per_handoff() {
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    // Every holder marks, as in a queue long enough for marks to pay.
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)).marking_from(0));
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut threads = Vec::new();
    for i in 0..5 {
        let (l, tx) = (l.clone(), tx.clone());
        threads.push(thread::spawn(move || {
            let got = l.attempt_lock(forever()).unwrap().unwrap();
            tx.send(i).unwrap();
            // Held for longer than the follower needs to see the holder's mark.
            thread::sleep(Duration::from_millis(20));
            l.release(&got.path, got.session, Release::Within(None))
                .unwrap();
        }));
        wait_children(&fake, i + 2);
        wait_watches(&fake, i + 1);
    }
    let listings = fake.calls(Op::Children);
    assert_eq!(listings, 5, "each waiter listed once to queue");
    fake.remove(&holder);
    threads.into_iter().for_each(|t| t.join().unwrap());
    let order: Vec<usize> = rx.try_iter().collect();
    assert_eq!(order, [0, 1, 2, 3, 4], "FIFO");
    assert_eq!(
        fake.calls(Op::Children),
        listings,
        "no waiter listed again while draining"
    );
    assert!(fake.children_of(DIR).is_empty());
    assert_eq!(fake.live_watches(), 0);
}

/// Takes the lock as the waiter right behind `ahead` with one more contender behind us, so that
/// the grant marks our node.
fn granted_with_a_mark(fake: &Fake, l: &Arc<LockInternals<Fake>>, ahead: &str) -> Acquired {
    let t = spawn_attempt(l);
    wait_children(fake, 2);
    wait_watches(fake, 1);
    fake.add_contender(DIR);
    fake.remove(ahead);
    let got = t.join().unwrap().unwrap().unwrap();
    assert!(fake.calls(Op::Mark) > 0);
    got
}

/// The contender a previous `granted_with_a_mark` left behind its holder.
fn last_contender(fake: &Fake) -> String {
    fake.children_of(DIR)
        .pop()
        .expect("the contender behind the last holder")
}

fn wait_gone(fake: &Fake, path: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fake.children_of(DIR).iter().any(|c| c == path) {
        assert!(std::time::Instant::now() < deadline, "{path} never deleted");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_release_waits_for_its_marks_answer_before_it_deletes() {
    let fake = Fake::new();
    fake.answer_marks_later();
    let holder = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)).marking_from(0));
    let got = granted_with_a_mark(&fake, &l, &holder);
    let release = {
        let (l, path) = (l.clone(), got.path.clone());
        thread::spawn(move || l.release(&path, got.session, Release::Within(None)))
    };
    thread::sleep(Duration::from_millis(100));
    assert!(
        fake.children_of(DIR).contains(&got.path),
        "deleted before the mark was answered: the waiter behind would list again"
    );
    fake.answer_marks();
    release.join().unwrap().unwrap();
    assert!(!fake.children_of(DIR).contains(&got.path));

    // A guard's release returns at once; its background delete waits for the answer too.
    fake.answer_marks_later();
    let got = granted_with_a_mark(&fake, &l, &last_contender(&fake));
    l.release(&got.path, got.session, Release::Background)
        .unwrap();
    thread::sleep(Duration::from_millis(100));
    assert!(
        fake.children_of(DIR).contains(&got.path),
        "deleted in the background before the mark was answered"
    );
    fake.answer_marks();
    wait_gone(&fake, &got.path);
}

/// A mark whose answer never comes (the connection broke under it) holds a release up only
/// until the release's bound, and the node is deleted all the same.
#[test]
fn a_mark_never_answered_holds_a_release_up_only_until_its_bound() {
    let fake = Fake {
        grace: Duration::from_millis(200),
        ..Fake::new()
    };
    fake.answer_marks_later();
    let holder = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)).marking_from(0));
    let got = granted_with_a_mark(&fake, &l, &holder);
    let (tx, rx) = crossbeam_channel::bounded(1);
    {
        let (l, path) = (l.clone(), got.path.clone());
        thread::spawn(move || {
            let _ = tx.send(l.release(&path, got.session, Release::Within(None)));
        });
    }
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the release waited for the mark past its bound")
        .unwrap();
    wait_gone(&fake, &got.path);

    // The same for a guard's background delete (bounded by the operation timeout).
    let got = granted_with_a_mark(&fake, &l, &last_contender(&fake));
    l.release(&got.path, got.session, Release::Background)
        .unwrap();
    wait_gone(&fake, &got.path);
}

/// The mark only where it pays: a holder marks when the listing it was granted on held at
/// least `marking_from` other nodes, and by default a short queue gets no mark.
#[test]
fn a_holder_marks_only_when_its_queue_was_long_enough() {
    // Granted on a listing [ours, c1, c2]: two others.
    let marks_with = |from: Option<usize>| {
        let fake = Fake::new();
        let head = fake.add_contender(DIR);
        let second = fake.add_contender(DIR);
        let l = lock(&fake, Arc::new(StandardDriver));
        let l = Arc::new(match from {
            Some(n) => l.marking_from(n),
            None => l,
        });
        let t = spawn_attempt(&l);
        wait_children(&fake, 3);
        wait_watches(&fake, 1); // on `second`, which is not the head: no fast path
        fake.add_contender(DIR);
        fake.add_contender(DIR);
        fake.remove(&head);
        fake.remove(&second);
        t.join().unwrap().unwrap().unwrap();
        fake.calls(Op::Mark)
    };
    assert_eq!(marks_with(Some(2)), 1, "two others behind: marks");
    assert_eq!(marks_with(Some(3)), 0, "fewer than three: no mark");
    assert_eq!(marks_with(None), 0, "a queue of three is short by default");
}

/// The node ahead is read again as its mark's event comes in (by the Client's I/O thread), not
/// when the waiter behind gets to run: a holder that marks and releases at once hands over
/// without a listing, however late its follower wakes.
#[test]
fn a_follower_woken_after_the_marked_holder_went_takes_over_without_listing() {
    let fake = Fake::new();
    let head = fake.add_contender(DIR);
    let ahead = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let t = spawn_attempt(&l);
    wait_children(&fake, 3);
    wait_watches(&fake, 1); // on `ahead`, which is not the head: its delete alone says nothing
    let listings = fake.calls(Op::Children);
    {
        // `ahead` is granted, marks its node and releases before we can ask anything.
        let _held_up = fake.watch_gate.lock();
        fake.remove(&head);
        let _ = fake.mark_holder(&ahead, DEFAULT_DATA);
        fake.remove(&ahead);
    }
    let got = t.join().unwrap().unwrap().unwrap();
    assert_eq!(fake.calls(Op::Children), listings, "listed the queue again");
    assert_eq!(fake.children_of(DIR), [got.path]);
    assert_eq!(fake.live_watches(), 0);
}

/// A waiter that listed a short queue but then sees the holder ahead mark its node (the holder
/// saw a long one) counts the queue with one stat of the parent, and marks in its turn if the
/// queue is long: a drain is marked from its first handoffs on, not only once the waiters'
/// listings were long. Without the mark it counts nothing.
#[test]
fn a_waiter_behind_a_marked_holder_counts_the_queue_and_marks_if_it_grew() {
    let run = |joined_behind: usize| {
        let fake = Fake::new();
        let head = fake.add_contender(DIR);
        let ahead = fake.add_contender(DIR);
        let l = Arc::new(lock(&fake, Arc::new(StandardDriver)).marking_from(3));
        let t = spawn_attempt(&l);
        wait_children(&fake, 3); // listed [head, ahead, ours]: 2 others, short
        wait_watches(&fake, 1);
        for _ in 0..joined_behind {
            fake.add_contender(DIR);
        }
        fake.remove(&head);
        let _ = fake.mark_holder(&ahead, DEFAULT_DATA);
        wait_prime(&fake);
        let stats = fake.calls(Op::Stat);
        fake.remove(&ahead);
        let got = t.join().unwrap().unwrap().unwrap();
        (stats, fake.calls(Op::Mark) - 1, got)
    };
    let (stats, marks, _) = run(2);
    assert_eq!((stats, marks), (1, 1), "counted 4 others now: marks");
    let (stats, marks, _) = run(0);
    assert_eq!((stats, marks), (1, 0), "still 2 others: no mark");

    // Behind a holder that did not mark, nothing is counted.
    let fake = Fake::new();
    let head = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)).marking_from(3));
    let t = spawn_attempt(&l);
    wait_children(&fake, 2);
    wait_watches(&fake, 1);
    fake.remove(&head);
    t.join().unwrap().unwrap().unwrap();
    assert_eq!(fake.calls(Op::Stat), 0);
}

/// Waits until a waiter has read its own node (it saw the holder ahead of it hold).
fn wait_prime(fake: &Fake) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fake.calls(Op::Prime) == 0 {
        assert!(std::time::Instant::now() < deadline, "never primed");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_waiter_behind_a_non_head_lists_again_and_keeps_queue_order() {
    let fake = Fake::new();
    let first = fake.add_contender(DIR);
    let second = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let t = {
        let l = l.clone();
        thread::spawn(move || l.attempt_lock(Deadline::after(Duration::from_secs(60))))
    };
    wait_children(&fake, 3);
    wait_watches(&fake, 1);
    // The second contender leaves first: we now wait on the first, still not holding.
    fake.remove(&second);
    thread::sleep(Duration::from_millis(50));
    assert!(
        !t.is_finished(),
        "granted while an earlier node still holds"
    );
    fake.remove(&first);
    let got = t.join().unwrap().unwrap().unwrap();
    assert_eq!(fake.children_of(DIR), [got.path]);
}

#[test]
fn a_holder_gone_before_the_watch_is_set_hands_over_without_another_request() {
    let fake = Fake {
        lists_with_create: true,
        ..Fake::new()
    };
    let holder = fake.add_contender(DIR);
    let l = lock(&fake, Arc::new(StandardDriver));
    // Our create's listing shows the holder at the head; it releases before our watch is set.
    fake.remove_before_next_watch(&holder);
    let got = l.attempt_lock(forever()).unwrap().unwrap();
    assert_eq!(fake.children_of(DIR), std::slice::from_ref(&got.path));
    // The listing, one round trip ago, showed our node: as for a free lock, no other read.
    let reads = |fake: &Fake| {
        [Op::ListWithCreate, Op::Children, Op::Watch, Op::Prime].map(|op| fake.calls(op))
    };
    assert_eq!(reads(&fake), [1, 0, 1, 0]);
    assert!(got.primed.is_none());
    assert_eq!(fake.live_watches(), 0);
    l.release(&got.path, got.session, Release::Within(None))
        .unwrap();

    // The node ahead of us did not head the listing: someone may still hold, so we list again
    // and wait for the head.
    let first = fake.add_contender(DIR);
    let second = fake.add_contender(DIR);
    fake.remove_before_next_watch(&second);
    let l = Arc::new(l);
    let t = spawn_attempt(&l);
    wait_watches(&fake, 1);
    assert_eq!(fake.calls(Op::Children), 1, "listed again");
    thread::sleep(Duration::from_millis(50));
    assert!(!t.is_finished(), "granted while the head still holds");
    fake.remove(&first);
    let got = t.join().unwrap().unwrap().unwrap();
    assert_eq!(fake.children_of(DIR), [got.path]);
}

#[test]
fn our_node_vanishing_while_waiting_starts_over_without_orphans() {
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let t = spawn_attempt(&l);
    wait_children(&fake, 2);
    let ours = fake
        .children_of(DIR)
        .into_iter()
        .find(|p| *p != holder)
        .unwrap();
    fake.remove(&ours);
    fake.registry.wake_all();
    wait_children(&fake, 2);
    fake.remove(&holder);
    let got = t.join().unwrap().unwrap().unwrap();
    assert_ne!(got.path, ours);
    assert_eq!(fake.children_of(DIR), [got.path]);
}

#[test]
fn a_session_change_while_waiting_recreates_the_node_in_the_new_session() {
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let t = spawn_attempt(&l);
    wait_children(&fake, 2);
    fake.new_session();
    wait_children(&fake, 2);
    fake.remove(&holder);
    let got = t.join().unwrap().unwrap().unwrap();
    assert_eq!(
        got.session, 2,
        "granted only to a node of the current session"
    );
    assert_eq!(fake.children_of(DIR), [got.path]);
}

/// Past 2^31 children a lock path's sequence goes negative; Curator (text order) and zklock
/// would then order the queue differently, and past 2^32 a newcomer would sort ahead of the
/// holder. Nothing is granted there: the attempt says why, and leaves no node.
#[test]
fn a_wrapped_sequence_is_refused_not_misordered() {
    let fake = Fake::new();
    fake.state
        .lock()
        .next_seq
        .insert(DIR.into(), i32::MAX as i64);
    let holder = fake.add_contender(DIR);
    assert!(holder.ends_with("-lock-2147483647"), "{holder}");
    let l = lock(&fake, Arc::new(StandardDriver));
    // Our node would be -2147483648.
    for wait in [Deadline::after(Duration::from_millis(100)), forever()] {
        let err = l.attempt_lock(wait).unwrap_err();
        assert!(
            matches!(err, Error::SequenceWrapped(ref p) if p == DIR),
            "{err:?}"
        );
        assert_eq!(
            fake.children_of(DIR),
            std::slice::from_ref(&holder),
            "the refused node was deleted"
        );
    }
    // Unwrapped, the same lock works.
    let fresh = Fake::new();
    let l = lock(&fresh, Arc::new(StandardDriver));
    assert!(l.attempt_lock(forever()).unwrap().is_some());
}

#[test]
fn timeout_deletes_our_node_and_leaves_no_watch() {
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    let l = lock(&fake, Arc::new(StandardDriver));
    assert_none(
        l.attempt_lock(Deadline::after(Duration::from_millis(50)))
            .unwrap(),
    );
    assert_eq!(fake.children_of(DIR), [holder]);
    assert_eq!(fake.live_watches(), 0);
}

/// A holder whose random digits sort last holds all the same: whether its claim named it in the
/// lock's parent or, made by a zklock that recorded no name, only marked its node.
#[test]
fn an_unfair_newcomer_sorting_ahead_of_the_holder_does_not_cut_in() {
    for named in [true, false] {
        let fake = Fake::new();
        let holder = if named {
            unfair_holder_last(&fake).1.path
        } else {
            let holder = unfair_contender_last(&fake);
            let mut st = fake.state.lock();
            st.nodes.get_mut(&holder).unwrap().version = 1;
            st.parent_versions.insert(DIR.into(), 1);
            st.data.insert(DIR.into(), Vec::new());
            holder
        };
        let l = Arc::new(lock(&fake, Arc::new(UnfairDriver)));
        assert_none(
            l.attempt_lock(Deadline::after(Duration::from_millis(100)))
                .unwrap(),
        );
        assert_eq!(fake.children_of(DIR), std::slice::from_ref(&holder));
        let t = spawn_attempt(&l);
        wait_children(&fake, 2);
        wait_watches(&fake, 1);
        assert!(!t.is_finished(), "granted while the holder holds");
        fake.remove(&holder);
        let got = t.join().unwrap().unwrap().unwrap();
        assert_eq!(fake.children_of(DIR), [got.path]);
    }
}

#[test]
fn unfair_tokens_come_from_a_write_at_grant_time() {
    let fake = Fake::new();
    let l = lock(&fake, Arc::new(UnfairDriver));
    let a = l.attempt_lock(forever()).unwrap().unwrap();
    let node = fake.state.lock().nodes[&a.path];
    assert_eq!(node.ephemeral_owner, 1);
    assert!(a.token > node.czxid as u64 - 1 && a.token == node.mzxid as u64);
    l.release(&a.path, a.session, Release::Within(None))
        .unwrap();
    let b = l.attempt_lock(forever()).unwrap().unwrap();
    assert!(b.token > a.token);
    let _ = CreateMode::Ephemeral;
}

/// A mock driver: newest node first, so the algorithm's order comes from the driver alone.
struct NewestFirst;

impl LockDriver for NewestFirst {
    fn create_lock_node(&self, lock_name: &str) -> crate::zookeeper::locks::LockNode {
        crate::zookeeper::locks::LockNode::new(lock_name, CreateMode::EphemeralSequential)
    }

    fn sort_key(&self, node: &str, lock_name: &str) -> u64 {
        u64::MAX - crate::zookeeper::locks::driver::sequence_key(node, lock_name)
    }
}

#[test]
fn the_driver_alone_decides_order_and_leases() {
    let fake = Fake::new();
    let older = fake.add_contender(DIR);
    let newest_first = lock(&fake, Arc::new(NewestFirst));
    let got = newest_first
        .attempt_lock(forever())
        .unwrap()
        .expect("newest goes first");
    assert_eq!(
        newest_first.participant_nodes().unwrap(),
        [got.path.clone(), older.clone()]
    );
    newest_first
        .release(&got.path, got.session, Release::Within(None))
        .unwrap();

    // Two leases: two holders at once, the third waits.
    let two = LockInternals::new(
        fake.clone(),
        DIR,
        "lock-",
        Arc::new(StandardDriver),
        Leases::Fixed(2),
    )
    .unwrap();
    let second = two.attempt_lock(forever()).unwrap().expect("second lease");
    assert_none(
        two.attempt_lock(Deadline::after(Duration::from_millis(50)))
            .unwrap(),
    );
    fake.remove(&older);
    assert!(two.attempt_lock(forever()).unwrap().is_some());
    two.release(&second.path, second.session, Release::Within(None))
        .unwrap();
}

/// A driver whose lock nodes outlive sessions (Curator's `testPersistentLock`).
struct PersistentDriver;

impl LockDriver for PersistentDriver {
    fn create_lock_node(&self, lock_name: &str) -> crate::zookeeper::locks::LockNode {
        crate::zookeeper::locks::LockNode::new(lock_name, CreateMode::PersistentSequential)
    }

    fn sorts_by_creation(&self) -> bool {
        true
    }
}

#[test]
fn a_persistent_lock_node_is_granted_and_survives_a_session_change() {
    let fake = Fake::new();
    let l = Arc::new(lock(&fake, Arc::new(PersistentDriver)));
    // Before: the node's owner (0) never matched the session and the attempt restarted
    // forever (120,708 creates in 2 s).
    let got = l.attempt_lock(forever()).unwrap().expect("granted");
    assert_eq!(got.session, 0);
    assert_eq!(fake.calls(Op::Create), 1);
    let waiter = spawn_attempt(&l);
    wait_watches(&fake, 1);
    fake.new_session();
    assert_eq!(
        fake.children_of(DIR).len(),
        2,
        "persistent nodes outlive the session"
    );
    l.release(&got.path, got.session, Release::Within(None))
        .unwrap();
    let next = waiter.join().unwrap().unwrap().expect("the waiter is next");
    assert_eq!(fake.children_of(DIR), [next.path]);
}

#[test]
fn a_lost_create_reply_then_a_timeout_leaves_no_node() {
    let fake = Fake {
        grace: Duration::ZERO,
        ..Fake::new()
    };
    fake.fail(Op::Create, Fault::LostReply);
    let l = lock(&fake, Arc::new(StandardDriver));
    // The server made the node, the reply was lost, and the deadline ran out before the retry
    // could find it by its protection id: it must still go.
    let got = l.attempt_lock(Deadline::after(Duration::ZERO)).unwrap();
    assert_none(got);
    assert_eq!(fake.calls(Op::Create), 1);
    assert_eq!(fake.children_of(DIR), Vec::<String>::new(), "orphaned node");
}

#[test]
fn a_lost_create_reply_then_a_spent_budget_leaves_no_node() {
    let fake = Fake::new();
    fake.fail(Op::Create, Fault::LostReply);
    for _ in 0..20 {
        fake.fail(Op::Children, Fault::ConnectionLoss);
    }
    let l = lock(&fake, Arc::new(StandardDriver));
    let got = l.attempt_lock(forever());
    assert!(matches!(got, Err(Error::ConnectionLoss)), "{got:?}");
    assert_eq!(fake.children_of(DIR), Vec::<String>::new(), "orphaned node");
}

#[test]
fn try_makes_one_attempt_without_a_watch() {
    let fake = Fake {
        grace: Duration::ZERO,
        ..Fake::new()
    };
    let l = lock(&fake, Arc::new(StandardDriver));
    // A free lock is granted even though the wait is zero and the round trips are not free.
    let got = l.attempt_lock(Deadline::after(Duration::ZERO)).unwrap();
    let got = got.expect("a free lock is granted to a zero wait");
    let other = lock(&fake, Arc::new(StandardDriver));
    let refused = other.attempt_lock(Deadline::after(Duration::ZERO));
    assert!(matches!(refused, Ok(None)), "{refused:?}");
    assert_eq!(fake.children_of(DIR), std::slice::from_ref(&got.path));
    assert_eq!(fake.calls(Op::Watch), 0, "a try never watches");
    assert_eq!(fake.live_watches(), 0);
}

#[test]
fn cancel_ends_a_parked_waiter_and_deletes_its_node() {
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let waiters: Vec<_> = (0..2).map(|_| spawn_attempt(&l)).collect();
    wait_watches(&fake, 2);
    l.cancel_waiters();
    for w in waiters {
        let got = w.join().unwrap();
        assert!(matches!(got, Err(Error::Cancelled)), "{got:?}");
    }
    assert_eq!(fake.children_of(DIR), std::slice::from_ref(&holder));
    assert_eq!(fake.live_watches(), 0);
    // Later attempts are not cancelled.
    let later = spawn_attempt(&l);
    wait_watches(&fake, 1);
    fake.remove(&holder);
    assert!(later.join().unwrap().unwrap().is_some());
}

#[test]
fn the_listing_that_comes_with_the_create_is_the_first_listing() {
    let fake = Fake {
        lists_with_create: true,
        ..Fake::new()
    };
    // Free: granted on the listing that came with the create, none other.
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let got = l.attempt_lock(forever()).unwrap().unwrap();
    assert_eq!(
        (fake.calls(Op::ListWithCreate), fake.calls(Op::Children)),
        (1, 0)
    );
    // Held: a waiter finds the holder in that listing, watches it, and takes the lock when it
    // goes, without a listing of its own.
    let t = spawn_attempt(&l);
    wait_children(&fake, 2);
    wait_watches(&fake, 1);
    l.release(&got.path, got.session, Release::Within(None))
        .unwrap();
    let next = t.join().unwrap().unwrap().unwrap();
    assert_eq!(fake.children_of(DIR), [next.path]);
    assert_eq!(
        (fake.calls(Op::ListWithCreate), fake.calls(Op::Children)),
        (2, 0)
    );
    // A driver that claims reads the parent before it lists: it lists on its own.
    let claiming = lock(&fake, Arc::new(UnfairDriver));
    assert_none(
        claiming
            .attempt_lock(Deadline::after(Duration::ZERO))
            .unwrap(),
    );
    assert_eq!(fake.calls(Op::ListWithCreate), 2);
    assert!(fake.calls(Op::Children) > 0);
}

#[test]
fn a_waiter_behind_the_holder_takes_the_lock_without_a_request_when_it_goes() {
    let fake = Fake::new();
    let holder = fake.add_contender(DIR);
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let t = spawn_attempt(&l);
    wait_watches(&fake, 1);
    // Our own node was read (with the keeper's watch) while the holder held.
    let deadline = forever();
    while fake.calls(Op::Prime) == 0 {
        assert!(!deadline.expired(), "our node was never read");
        thread::sleep(Duration::from_millis(1));
    }
    let before: Vec<usize> = [Op::Children, Op::Watch, Op::Prime]
        .iter()
        .map(|&op| fake.calls(op))
        .collect();
    fake.remove(&holder);
    let got = t.join().unwrap().unwrap().unwrap();
    assert!(
        got.primed.is_some(),
        "the keeper starts from the read made while waiting"
    );
    let after: Vec<usize> = [Op::Children, Op::Watch, Op::Prime]
        .iter()
        .map(|&op| fake.calls(op))
        .collect();
    assert_eq!(before, after, "the handoff made a request");
}

/// Runs one attempt on a thread and waits for its outcome, a minute at most: a waiter that
/// never settles fails the test instead of hanging it.
fn attempt_within(l: &Arc<LockInternals<Fake>>, wait: Duration) -> Option<Acquired> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let l = l.clone();
    thread::spawn(move || {
        let _ = tx.send(l.attempt_lock(Deadline::after(wait)));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the attempt never returned")
        .unwrap()
}

/// An unfair contender of another process that sorts after any node `UnfairDriver` names, so
/// that ours is the driver's pick.
fn unfair_contender_last(fake: &Fake) -> String {
    let node = format!("{DIR}/_c_{}-lock-9999999999", uuid::Uuid::new_v4());
    let mut st = fake.state.lock();
    st.zxid += 1;
    let stat = Stat {
        czxid: st.zxid,
        mzxid: st.zxid,
        ephemeral_owner: 99,
        ..Stat::default()
    };
    st.nodes.insert(node.clone(), stat);
    node
}

/// `UnfairDriver` whose nodes sort after any node `UnfairDriver` names.
struct UnfairLast;

impl LockDriver for UnfairLast {
    fn create_lock_node(&self, lock_name: &str) -> LockNode {
        LockNode::new(format!("{lock_name}9999999999"), CreateMode::Ephemeral)
    }

    fn grant_by_claim(&self) -> bool {
        true
    }
}

/// A holder that claimed the lock as `UnfairDriver` does, with a node that sorts last.
fn unfair_holder_last(fake: &Fake) -> (LockInternals<Fake>, Acquired) {
    let holder = lock(fake, Arc::new(UnfairLast));
    let held = holder
        .attempt_lock(forever())
        .unwrap()
        .expect("a free lock");
    (holder, held)
}

/// A revocation request (Curator's `Revoker`: a setData at any version) on a contender that is
/// only waiting is not a claim: the lock is still taken, on a fresh lock path and after earlier
/// holds.
#[test]
fn an_unfair_waiters_revocation_request_does_not_block_the_claims() {
    let fake = Fake::new();
    let l = Arc::new(lock(&fake, Arc::new(UnfairDriver)));
    // A fresh lock path: a waiter of another process is asked to release.
    let waiting = unfair_contender_last(&fake);
    fake.set_data(&waiting, REVOKE_MESSAGE);
    let got = attempt_within(&l, Duration::from_secs(10))
        .expect("a revoked waiter's node passed for a claim");
    l.release(&got.path, got.session, Release::Within(None))
        .unwrap();
    // After a hold: the same.
    fake.set_data(&waiting, REVOKE_MESSAGE);
    let got = attempt_within(&l, Duration::from_secs(10))
        .expect("a revoked waiter's node passed for a claim after a hold");
    l.release(&got.path, got.session, Release::Within(None))
        .unwrap();
}

/// Our own node is asked to release while we wait behind an unfair holder: once the holder
/// goes, our claim is made over the request, which stays for our keeper to hand on.
#[test]
fn an_unfair_waiter_asked_to_release_still_takes_the_free_lock() {
    let fake = Fake::new();
    let l = Arc::new(lock(&fake, Arc::new(UnfairDriver)));
    let (holder, held) = unfair_holder_last(&fake);
    let t = spawn_attempt(&l);
    wait_watches(&fake, 1);
    let ours = fake
        .children_of(DIR)
        .into_iter()
        .find(|c| *c != held.path)
        .unwrap();
    fake.set_data(&ours, REVOKE_MESSAGE);
    holder
        .release(&held.path, held.session, Release::Within(None))
        .unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(t.join());
    });
    let got = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a revoked waiter never took the free lock")
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.path, ours);
    let data = fake.state.lock().data.get(&ours).cloned();
    assert_eq!(
        data.as_deref(),
        Some(REVOKE_MESSAGE),
        "the request was lost"
    );
}

/// A holder asked to release still holds until it does: a newcomer never takes its place, even
/// with a revoked waiter beside it.
#[test]
fn an_unfair_holders_revocation_request_is_still_a_claim() {
    let fake = Fake::new();
    let l = Arc::new(lock(&fake, Arc::new(UnfairDriver)));
    let (holder, held) = unfair_holder_last(&fake);
    fake.set_data(&held.path, REVOKE_MESSAGE);
    let waiting = unfair_contender_last(&fake);
    fake.set_data(&waiting, REVOKE_MESSAGE);
    assert_none(attempt_within(&l, Duration::from_millis(200)));
    assert_eq!(
        fake.children_of(DIR).len(),
        2,
        "the refused attempt left its node"
    );
    fake.remove(&waiting);
    let t = spawn_attempt(&l);
    wait_watches(&fake, 1);
    assert!(!t.is_finished(), "granted while the revoked holder holds");
    holder
        .release(&held.path, held.session, Release::Within(None))
        .unwrap();
    let got = t.join().unwrap().unwrap().unwrap();
    assert_eq!(fake.children_of(DIR), [got.path]);
}

/// A stranger's setData on the waiting node ahead of ours, with other bytes than that node
/// holds, is no holder mark: when that node goes, the waiter behind lists the queue again and
/// waits for the holder at its head. Nor is a node whose first read shows it written already,
/// even with its own bytes: what it held before is unknown.
#[test]
fn a_strangers_write_on_the_waiting_node_ahead_is_not_a_mark() {
    for written_before_our_read in [false, true] {
        let fake = Fake::new();
        let head = fake.add_contender(DIR);
        let ahead = fake.add_contender(DIR);
        if written_before_our_read {
            fake.set_data(&ahead, DEFAULT_DATA);
        }
        let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
        let t = spawn_attempt(&l);
        wait_children(&fake, 3);
        wait_watches(&fake, 1); // on `ahead`, which does not hold
        let listings = fake.calls(Op::Children);
        if !written_before_our_read {
            fake.set_data(&ahead, b"10.0.0.7");
        }
        fake.remove(&ahead); // its waiter gave up
        let deadline = forever();
        while fake.calls(Op::Children) == listings && !t.is_finished() {
            assert!(
                !deadline.expired(),
                "the waiter neither listed nor returned"
            );
            thread::sleep(Duration::from_millis(1));
        }
        assert!(
            !t.is_finished(),
            "granted while {head} holds: a stranger's setData passed for a mark"
        );
        fake.remove(&head);
        let got = t.join().unwrap().unwrap().unwrap();
        assert_eq!(fake.children_of(DIR), [got.path]);
    }
}

/// A kazoo writer queues with readers' `__rlock__` nodes too. A reader's node past the wrap
/// sorts first for kazoo (as text) and last for zklock (as a number), so it refuses the
/// writer's attempt just as a wrapped node of its own name would.
#[test]
fn a_wrapped_sequence_on_another_name_the_lock_queues_with_is_refused() {
    use crate::zookeeper::locks::kazoo::{KazooDriver, KAZOO_LOCK_NAME};
    let fake = Fake::new();
    let reader = format!("{DIR}/{}__rlock__-2147483648", "ab".repeat(16));
    {
        let mut st = fake.state.lock();
        st.zxid += 1;
        let stat = Stat {
            czxid: st.zxid,
            ephemeral_owner: 99,
            ..Stat::default()
        };
        st.nodes.insert(reader.clone(), stat);
    }
    let writer = LockInternals::new(
        fake.clone(),
        DIR,
        KAZOO_LOCK_NAME,
        Arc::new(KazooDriver::write()),
        Leases::Fixed(1),
    )
    .unwrap();
    let err = writer.attempt_lock(forever()).unwrap_err();
    assert!(
        matches!(err, Error::SequenceWrapped(ref p) if p == DIR),
        "{err:?}"
    );
    assert_eq!(
        fake.children_of(DIR),
        std::slice::from_ref(&reader),
        "the refused node was deleted"
    );
}

/// A resumable attempt whose hook counts its wakes.
fn resumable(
    l: &Arc<LockInternals<Fake>>,
) -> (Resumable<Fake>, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let wakes = Arc::new(AtomicUsize::new(0));
    let counted = wakes.clone();
    let hook = Arc::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    (Resumable::new(l.clone(), hook), wakes)
}

#[test]
fn a_resumable_attempt_parks_without_a_thread_and_is_granted_when_resumed_after_its_wake() {
    use std::sync::atomic::Ordering;
    let fake = Fake::new();
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let holder = l.attempt_lock(forever()).unwrap().unwrap();
    let (mut attempt, wakes) = resumable(&l);
    assert!(
        matches!(attempt.resume(), Progress::Parked),
        "behind a holder it parks"
    );
    assert_eq!(fake.children_of(DIR).len(), 2, "our node queues");
    assert!(
        matches!(attempt.resume(), Progress::Parked),
        "resumed without a wake, it parks again with no request"
    );
    assert_eq!(wakes.load(Ordering::SeqCst), 0);
    l.release(&holder.path, holder.session, Release::Within(None))
        .unwrap();
    assert!(
        wakes.load(Ordering::SeqCst) >= 1,
        "the holder's delete called the hook"
    );
    let Progress::Done(Ok(granted)) = attempt.resume() else {
        panic!("not granted after the holder went");
    };
    assert!(granted.token > holder.token);
    assert_eq!(fake.children_of(DIR), std::slice::from_ref(&granted.path));
    drop(attempt);
    assert_eq!(
        fake.children_of(DIR),
        std::slice::from_ref(&granted.path),
        "a granted node is the caller's"
    );
}

#[test]
fn a_cancel_wakes_a_parked_resumable_attempt_which_ends_and_deletes_its_node() {
    use std::sync::atomic::Ordering;
    let fake = Fake::new();
    let l = Arc::new(lock(&fake, Arc::new(StandardDriver)));
    let holder = l.attempt_lock(forever()).unwrap().unwrap();
    let (mut attempt, wakes) = resumable(&l);
    assert!(matches!(attempt.resume(), Progress::Parked));
    l.cancel_waiters();
    assert!(
        wakes.load(Ordering::SeqCst) >= 1,
        "the cancel called the hook"
    );
    assert!(matches!(
        attempt.resume(),
        Progress::Done(Err(Error::Cancelled))
    ));
    assert_eq!(fake.children_of(DIR), std::slice::from_ref(&holder.path));
    // Dropped while parked, an attempt deletes its node too.
    let (mut parked, _) = resumable(&l);
    assert!(matches!(parked.resume(), Progress::Parked));
    assert_eq!(fake.children_of(DIR).len(), 2);
    drop(parked);
    assert_eq!(fake.children_of(DIR), std::slice::from_ref(&holder.path));
    assert_eq!(fake.live_watches(), 0, "no watch left behind");
}
