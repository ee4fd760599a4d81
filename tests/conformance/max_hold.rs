//! `max_hold` on every backend: a holder that never lets go and whose renewals succeed loses
//! its hold when the cap passes, and another Client gets the lock; the cap's bad values are
//! refused. The cap is set through the URL (`?max_hold=2s`), as an operator would.

use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::backends::{Backend, Opts};
use crate::common::patience;
use zklock::{AnyClient, Error, Lock, LockHealth};

/// The cap under test.
const CAP: Duration = Duration::from_secs(2);

/// A short session, so that renewals come about every second (each backend's share of it) and
/// several succeed before the cap.
const SESSION: Duration = Duration::from_secs(3);

/// `url` with `?max_hold=2s` (or `&max_hold=2s` after a query of its own).
fn capped(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}max_hold=2s")
}

fn opts() -> Opts {
    Opts {
        session: SESSION,
        op: Duration::from_secs(5),
    }
}

/// What the holder thread saw and answered.
struct Held {
    /// When its acquire returned: the cap passes at most `CAP` later.
    granted: Instant,
    /// Its health reads, in order, until it was told the other Client holds.
    seen: Vec<LockHealth>,
    /// Its health when told.
    when_told: Option<LockHealth>,
    /// Another acquire through the capped object, before releasing.
    reacquire: zklock::Result<()>,
    /// Its two releases (it entered twice).
    releases: [zklock::Result<()>; 2],
}

/// Holds `lock` twice (re-entrant) from a thread of its own and never lets go until `told`;
/// then answers what it saw and releases.
fn hold_forever(
    target: Target,
    granted: mpsc::Sender<Instant>,
    told: mpsc::Receiver<()>,
) -> thread::JoinHandle<Held> {
    thread::spawn(move || {
        let lock = target.lock();
        lock.acquire().unwrap();
        let at = Instant::now();
        lock.acquire().unwrap();
        granted.send(at).unwrap();
        let mut seen = Vec::new();
        loop {
            seen.push(lock.health().expect("the holder's thread holds or held"));
            if told.recv_timeout(Duration::from_millis(20)).is_ok() {
                break;
            }
        }
        let when_told = lock.health();
        let reacquire = lock.acquire_timeout(Duration::ZERO).map(|_| ());
        let releases = [lock.release(), lock.release()];
        Held {
            granted: at,
            seen,
            when_told,
            reacquire,
            releases,
        }
    })
}

/// The scenario on a mutex (`read_write`: on a read-write lock, the holder writing and the
/// other Client reading): A holds without end, B waits; B is granted within the cap plus one
/// renewal period (asserted only against a generous bound, the figure printed); A reads `Lost`
/// then, its health event fired, its second acquire and last release answer `LockLost`, and it
/// can take the lock again once B lets go.
pub fn capped_hold_is_taken_over(b: &dyn Backend, read_write: bool) {
    let what = if read_write { "read-write" } else { "mutex" };
    if read_write && !b.has_read_write() {
        return println!("{}: SKIPPED max_hold {what}: no read-write lock", b.name());
    }
    let server = b.shared();
    let url = server.url();
    let a = b.connect(&capped(&url), opts());
    assert_eq!(a.max_hold(), Some(CAP));
    let other = b.connect(&url, opts());
    let name = format!("max-hold-{what}-{}", b.name());
    let (mine, theirs) = if read_write {
        let (ra, rb) = (a.read_write_lock(&name), other.read_write_lock(&name));
        let (ra, rb) = (Arc::new(ra.unwrap()), Arc::new(rb.unwrap()));
        (Target::Half(ra, true), Target::Half(rb, false))
    } else {
        let (ma, mb) = (a.mutex(&name).unwrap(), other.mutex(&name).unwrap());
        (Target::Mutex(ma), Target::Mutex(mb))
    };
    let lost_events = lost_events();
    let (granted_tx, granted_rx) = mpsc::channel();
    let (tell, told) = mpsc::channel();
    let holder = hold_forever(mine.clone(), granted_tx, told);
    let granted = granted_rx.recv_timeout(patience()).expect("A holds");
    // No renewal stops: the only thing that frees the lock is the cap. The bound: the cap, a
    // whole session (more than one renewal period), and slack for a loaded machine.
    let bound = CAP + SESSION + Duration::from_secs(10) * crate::common::timing();
    let waited = theirs.lock().acquire_timeout(bound).unwrap();
    let at = Instant::now();
    assert!(
        waited,
        "{}: B not granted within {bound:?} of A's grant",
        b.name()
    );
    tell.send(()).unwrap();
    let held = holder.join().unwrap();
    assert_eq!(held.granted, granted);
    let after_cap = at.saturating_duration_since(granted + CAP);
    println!(
        "{}: max_hold {what}: B granted {} ms after A's cap of {CAP:?} passed",
        b.name(),
        after_cap.as_millis()
    );
    assert_eq!(
        held.seen.first(),
        Some(&LockHealth::Held),
        "{}: A's renewals work",
        b.name()
    );
    assert_eq!(held.when_told, Some(LockHealth::Lost), "{}", b.name());
    assert!(
        matches!(held.reacquire, Err(Error::LockLost)),
        "{}: a capped hold is not entered again: {:?}",
        b.name(),
        held.reacquire
    );
    let [inner, outer] = held.releases;
    assert!(inner.is_ok(), "{}: the inner release: {inner:?}", b.name());
    assert!(
        matches!(outer, Err(Error::LockLost)),
        "{}: the last release says the hold was lost: {outer:?}",
        b.name()
    );
    if let Some(count) = lost_events(&name) {
        assert!(count >= 1, "{}: no Lost event for A's hold", b.name());
    }
    // B holds alone: A, released, cannot take it; once B lets go, A can.
    let (mine, theirs) = (mine.lock(), theirs.lock());
    assert!(
        !mine.acquire_timeout(Duration::ZERO).unwrap(),
        "{}",
        b.name()
    );
    theirs.release().unwrap();
    assert!(mine.acquire_timeout(patience()).unwrap(), "{}", b.name());
    assert_eq!(mine.health(), Some(LockHealth::Held));
    mine.release().unwrap();
}

/// The lock a Client takes: a mutex, or a half of a read-write lock (`true`: the write half).
#[derive(Clone)]
enum Target {
    Mutex(Arc<dyn Lock>),
    Half(Arc<zklock::AnyReadWriteLock>, bool),
}

impl Target {
    fn lock(&self) -> &dyn Lock {
        match self {
            Target::Mutex(lock) => &**lock,
            Target::Half(rw, true) => rw.write_lock(),
            Target::Half(rw, false) => rw.read_lock(),
        }
    }
}

/// The cap's bad values are refused before any I/O with `InvalidArgument`; `Duration::MAX` is
/// no cap.
pub fn bad_max_hold_refused(b: &dyn Backend) {
    let server = b.shared();
    let url = server.url();
    let sep = if url.contains('?') { '&' } else { '?' };
    for bad in ["0", "0s", "-1s", "2 weeks", "", "1e999"] {
        let refused = AnyClient::builder(&format!("{url}{sep}max_hold={bad}")).connect();
        assert!(
            matches!(&refused, Err(Error::InvalidArgument(why)) if why.contains("max_hold")),
            "{}: max_hold={bad:?}: {:?}",
            b.name(),
            refused.map(|_| ())
        );
    }
    let zero = AnyClient::builder(&url).max_hold(Some(Duration::ZERO));
    assert!(matches!(zero.connect(), Err(Error::InvalidArgument(_))));
    let client = b.connect(&url, opts());
    let lock = client.mutex("max-hold-bad").unwrap();
    assert!(matches!(
        lock.set_max_hold(Some(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    // Past what the clock can count: no cap, no panic; the hold is an ordinary one.
    lock.set_max_hold(Some(Duration::MAX)).unwrap();
    lock.acquire().unwrap();
    assert_eq!(lock.health(), Some(LockHealth::Held));
    lock.release().unwrap();
    let forever = AnyClient::builder(&capped(&url)).max_hold(Some(Duration::MAX));
    assert_eq!(forever.connect().unwrap().max_hold(), None);
    if b.has_semaphore() {
        let semaphore = client.semaphore("max-hold-bad", 2).unwrap();
        assert!(matches!(
            semaphore.set_max_hold(Some(Duration::ZERO)),
            Err(Error::InvalidArgument(_))
        ));
        semaphore.set_max_hold(Some(Duration::MAX)).unwrap();
        let lease = semaphore.acquire().unwrap();
        assert_eq!(lease.health(), LockHealth::Held);
        lease.release().unwrap();
    }
}

/// A semaphore's lease capped through the URL: a holder of the only lease that never returns
/// it and whose renewals succeed loses it at the cap, another Client gets it, and the late
/// return answers `LockLost`.
pub fn capped_lease_is_taken_over(b: &dyn Backend) {
    if !b.has_semaphore() {
        return println!("{}: SKIPPED max_hold lease: no semaphore", b.name());
    }
    let server = b.shared();
    let url = server.url();
    let (a, other) = (b.connect(&capped(&url), opts()), b.connect(&url, opts()));
    let name = format!("max-hold-lease-{}", b.name());
    let (mine, theirs) = (
        a.semaphore(&name, 1).unwrap(),
        other.semaphore(&name, 1).unwrap(),
    );
    let lease = mine.acquire().unwrap();
    let granted = Instant::now();
    assert_eq!(lease.health(), LockHealth::Held);
    let bound = CAP + SESSION + Duration::from_secs(10) * crate::common::timing();
    let second = theirs.acquire_timeout(bound).unwrap();
    let after_cap = Instant::now().saturating_duration_since(granted + CAP);
    let second = second.unwrap_or_else(|| panic!("{}: no lease within {bound:?}", b.name()));
    println!(
        "{}: max_hold lease: B granted {} ms after A's cap of {CAP:?} passed",
        b.name(),
        after_cap.as_millis()
    );
    assert_eq!(lease.health(), LockHealth::Lost, "{}", b.name());
    let late = lease.release();
    assert!(
        matches!(late, Err(Error::LockLost)),
        "{}: {late:?}",
        b.name()
    );
    assert_eq!(second.health(), LockHealth::Held);
    second.release().unwrap();
}

/// Counts the Lost events of a lock by its name, where the `metrics` feature counts them.
#[cfg(feature = "metrics")]
fn lost_events() -> impl Fn(&str) -> Option<u64> {
    let changes = crate::scenarios::health_changes();
    move |name| Some(changes(name).0)
}

#[cfg(not(feature = "metrics"))]
fn lost_events() -> impl Fn(&str) -> Option<u64> {
    |_| None
}

/// A multi-lock capped as one: each of its locks is capped from its own grant; past the cap the
/// multi-lock reads `Lost`, another Client takes all its locks, and its release answers
/// `LockLost` (after trying every lock).
pub fn capped_multi_lock(b: &dyn Backend) {
    let server = b.shared();
    let url = server.url();
    let (a, other) = (b.connect(&url, opts()), b.connect(&url, opts()));
    let names = ["max-hold-multi-1", "max-hold-multi-2"];
    let multi = |c: &AnyClient| {
        let locks = names.map(|n| Box::new(c.mutex(n).unwrap()) as Box<dyn Lock>);
        zklock::InterProcessMultiLock::from_locks(locks.into()).unwrap()
    };
    let (mine, theirs) = (multi(&a), multi(&other));
    assert!(matches!(
        mine.set_max_hold(Some(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    mine.set_max_hold(Some(CAP)).unwrap();
    mine.acquire().unwrap();
    let granted = Instant::now();
    let bound = CAP + SESSION + Duration::from_secs(10) * crate::common::timing();
    assert!(theirs.acquire_timeout(bound).unwrap(), "{}", b.name());
    let after_cap = Instant::now().saturating_duration_since(granted + CAP);
    println!(
        "{}: max_hold multi-lock: B granted {} ms after A's cap passed",
        b.name(),
        after_cap.as_millis()
    );
    assert_eq!(mine.health(), Some(LockHealth::Lost), "{}", b.name());
    assert!(
        matches!(mine.release(), Err(Error::LockLost)),
        "{}",
        b.name()
    );
    theirs.release().unwrap();
}

/// The holder's own subscribers hear the cap: a channel and a callback, on the in-process
/// backend, ZooKeeper and Redis (the shell is the same on every backend; these three deliver
/// events on three different threads). A callback that calls into the lock does not deadlock.
mod listeners {
    use super::*;

    /// Holds through `lock` with a channel and a callback subscribed; checks both hear `Lost`
    /// once the cap passes, and that the callback's own call into the lock returned.
    fn hears_the_cap<L: Lock + Send + Sync + std::fmt::Debug + 'static>(
        lock: Arc<L>,
        events: zklock::Receiver<zklock::HealthEvent>,
        on_health: impl FnOnce(Box<dyn FnMut(zklock::HealthEvent) + Send>) -> u64,
    ) {
        let (called, heard) = mpsc::channel();
        let me = lock.clone();
        on_health(Box::new(move |event| {
            // Into the lock from the callback's thread: holds nothing there.
            let _ = called.send((event.health, me.health(), me.fencing_token()));
        }));
        crate::common::warnings_naming("guard drop: the lock had been lost");
        lock.set_max_hold(Some(CAP)).unwrap();
        let guard = lock.lock().unwrap();
        let token = guard.fencing_token();
        let event = events.recv_timeout(patience()).expect("a health event");
        assert_eq!(event.health, LockHealth::Lost);
        assert_eq!(event.fencing_token, token);
        let (health, from_there, token_there) =
            heard.recv_timeout(patience()).expect("the callback");
        assert_eq!(health, LockHealth::Lost);
        assert_eq!(
            (from_there, token_there),
            (None, None),
            "the callback's thread holds nothing"
        );
        assert_eq!(guard.health(), LockHealth::Lost);
        assert!(matches!(guard.release(), Err(Error::LockLost)));
        // A guard dropped after its cap: quiet (no warning of a lost lock), and the lock is
        // free for the next holder.
        let name = format!("{lock:?}");
        let guard = lock.lock().unwrap();
        let event = events.recv_timeout(patience()).expect("the second cap");
        assert_eq!(event.health, LockHealth::Lost);
        drop(guard);
        // The event comes before the background release: the lock is free soon after.
        crate::common::wait_for("the lock free after the cap", || {
            lock.try_lock().unwrap().is_some()
        });
        let warned = crate::common::warnings_naming("guard drop: the lock had been lost");
        assert!(warned.is_empty(), "{name}: {warned:?}");
    }

    #[test]
    fn mem() {
        let client = zklock::mem::MemClient::isolated();
        let lock = Arc::new(zklock::mem::MemMutex::new(&client, "max-hold-events").unwrap());
        let events = lock.health_events();
        let l = lock.clone();
        hears_the_cap(lock, events, move |f| l.on_health(f));
    }

    #[test]
    fn zookeeper() {
        let server = zklock::testing::TestingServer::start().unwrap();
        let client = zklock::Client::connect(&server.connect_string()).unwrap();
        let lock = Arc::new(zklock::InterProcessMutex::new(&client, "/max-hold").unwrap());
        let events = lock.health_events();
        let l = lock.clone();
        hears_the_cap(lock, events, move |f| l.on_health(f));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis() {
        let server = zklock::testing::TestingRedis::start().unwrap();
        let client = zklock::RedisClient::connect(&server.url()).unwrap();
        let lock = Arc::new(zklock::redis::RedisMutex::new(&client, "max-hold").unwrap());
        let events = lock.health_events();
        let l = lock.clone();
        hears_the_cap(lock, events, move |f| l.on_health(f));
    }
}
