//! No lock that nobody can take: several Clients contend for one mutex on
//! a 3-node ensemble while its leader is frozen (SIGSTOP) and thawed. Somebody must take the
//! lock again soon after the thaw, and once every contender has released, no node may be left
//! under the lock while the Clients are still open: not one whose background delete gave up
//! (item 8), not one of an attempt that timed out after losing its create reply (item 9), not
//! one of a session the Client gave up while the ensemble kept it (item 10).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use zklock::testing::TestingCluster;
use zklock::{Client, InterProcessMutex, LockHealth};

const LOCK: &str = "/locks/stuck";
/// Contenders connected to the leader when it freezes, and to the other members.
const ON_LEADER: usize = 2;
const ELSEWHERE: usize = 2;
const ATTEMPT: Duration = Duration::from_millis(500);
const HOLD: Duration = Duration::from_millis(5);

/// One hold of the lock, as its holder saw it.
struct Hold {
    client: usize,
    enter: Instant,
    exit: Instant,
    /// `health()` said Held on entry and on exit: the hold is trusted to have been exclusive.
    held: bool,
}

#[derive(Default)]
struct Log {
    holds: Mutex<Vec<Hold>>,
    timeouts: AtomicU64,
    /// (client, what failed, error), when.
    errors: Mutex<Vec<(usize, String, Instant)>>,
}

impl Log {
    fn error(&self, client: usize, op: &str, e: &zklock::Error) {
        // The variant's name: paths in the messages would make every error distinct.
        let debug = format!("{e:?}");
        let variant = debug.split(['(', ' ', '{']).next().unwrap_or("").to_owned();
        self.errors
            .lock()
            .unwrap()
            .push((client, format!("{op}: {variant}"), Instant::now()));
    }

    fn holds_since(&self, t: Instant) -> usize {
        self.holds
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.enter >= t)
            .count()
    }

    fn count(&self) -> usize {
        self.holds.lock().unwrap().len()
    }
}

fn contender(connect: &str, session: Duration) -> Client {
    Client::builder(connect)
        .session_timeout(session)
        .connection_timeout(Duration::from_secs(5))
        .connect()
        .expect("connect")
}

/// Whether member `member` serves `session` (from its `cons` output).
fn serves(cluster: &TestingCluster, member: usize, session: i64) -> bool {
    let sid = format!("sid=0x{:x}", session as u64);
    cluster
        .four_letter(member, "cons")
        .map(|cons| cons.lines().any(|l| l.contains(&format!("{sid},"))))
        .unwrap_or(false)
}

/// Contenders on the whole ensemble's connect string, `ON_LEADER` of them (by luck of the
/// draw) connected to `leader` and `ELSEWHERE` to the other members, as any deployment has.
fn place_contenders(cluster: &TestingCluster, leader: usize, session: Duration) -> Vec<Client> {
    let connect = cluster.connect_string();
    let (mut on_leader, mut elsewhere) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        if on_leader.len() == ON_LEADER && elsewhere.len() == ELSEWHERE {
            break;
        }
        let client = contender(&connect, session);
        let session = client.session_id().expect("a session");
        let (bucket, room) = if serves(cluster, leader, session) {
            (&mut on_leader, ON_LEADER)
        } else {
            (&mut elsewhere, ELSEWHERE)
        };
        if bucket.len() < room {
            bucket.push(client);
        } else {
            client.close();
        }
    }
    let (a, b) = (on_leader.len(), elsewhere.len());
    eprintln!(
        "contenders: clients 0..{a} on the leader (member {leader}), {a}..{} elsewhere",
        a + b
    );
    on_leader.into_iter().chain(elsewhere).collect()
}

fn contend(i: usize, client: Client, log: Arc<Log>, stop: Arc<AtomicBool>) {
    let mutex = InterProcessMutex::new(&client, LOCK).unwrap();
    while !stop.load(Ordering::SeqCst) {
        match mutex.acquire_timeout(ATTEMPT) {
            Ok(true) => {
                let enter = Instant::now();
                let on_entry = mutex.health();
                thread::sleep(HOLD);
                let on_exit = mutex.health();
                let exit = Instant::now();
                let held = on_entry == Some(LockHealth::Held) && on_exit == Some(LockHealth::Held);
                log.holds.lock().unwrap().push(Hold {
                    client: i,
                    enter,
                    exit,
                    held,
                });
                if let Err(e) = mutex.release() {
                    log.error(i, "release", &e);
                }
                if mutex.is_owned_by_current_thread() {
                    panic!("client {i} still owns the lock after release()");
                }
            }
            Ok(false) => {
                log.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                log.error(i, "acquire", &e);
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Every session each contender has had so far (sampled).
#[derive(Default)]
struct Sessions(BTreeMap<usize, Vec<i64>>);

impl Sessions {
    fn sample(&mut self, clients: &[Client]) {
        for (i, c) in clients.iter().enumerate() {
            if let Some(s) = c.session_id() {
                let seen = self.0.entry(i).or_default();
                if seen.last() != Some(&s) {
                    seen.push(s);
                }
            }
        }
    }

    fn describe(&self, owner: i64, clients: &[Client]) -> String {
        for (i, c) in clients.iter().enumerate() {
            if c.session_id() == Some(owner) {
                return format!("client {i}'s current session");
            }
        }
        for (i, seen) in &self.0 {
            if seen.contains(&owner) {
                return format!("client {i}'s earlier session");
            }
        }
        "no contender's session".to_owned()
    }
}

/// The lock's children with their owners, to say what blocks the lock.
fn describe_children(
    observer: &Client,
    clients: &[Client],
    sessions: &Sessions,
    since: Instant,
) -> String {
    let mut children = match observer.children(LOCK) {
        Ok(c) => c,
        Err(e) => return format!("cannot list {LOCK}: {e}"),
    };
    children.sort_by_key(|c| c.rsplit('-').next().unwrap_or("").to_owned());
    let mut out = format!(
        "{} children of {LOCK} at +{:.1?}:",
        children.len(),
        since.elapsed()
    );
    for child in children {
        let path = format!("{LOCK}/{child}");
        let owner = match observer.exists(&path) {
            Ok(Some(stat)) => format!(
                "owner 0x{:x} ({})",
                stat.ephemeral_owner as u64,
                sessions.describe(stat.ephemeral_owner, clients)
            ),
            Ok(None) => "gone".to_owned(),
            Err(e) => format!("stat failed: {e}"),
        };
        out.push_str(&format!("\n  {child}: {owner}"));
    }
    out
}

/// Pairs of trusted holds (Held from entry to exit) that overlapped in time, and pairs where
/// at least one side was not trusted.
fn overlaps(holds: &[Hold]) -> (usize, usize) {
    let mut sorted: Vec<&Hold> = holds.iter().collect();
    sorted.sort_by_key(|h| h.enter);
    let (mut trusted, mut other) = (0, 0);
    for (k, a) in sorted.iter().enumerate() {
        for b in sorted[k + 1..].iter().take_while(|b| b.enter < a.exit) {
            if a.held && b.held {
                eprintln!(
                    "OVERLAP: client {} held {:?}..{:?}, client {} entered {:?} in between",
                    a.client, a.enter, a.exit, b.client, b.enter
                );
                trusted += 1;
            } else {
                other += 1;
            }
        }
    }
    (trusted, other)
}

fn summarise(log: &Log, freeze: Instant, resume: Instant) {
    let holds = log.holds.lock().unwrap();
    let before = holds.iter().filter(|h| h.enter < freeze).count();
    let during = holds
        .iter()
        .filter(|h| h.enter >= freeze && h.enter < resume)
        .count();
    let after = holds.iter().filter(|h| h.enter >= resume).count();
    let last_before = holds
        .iter()
        .filter(|h| h.enter < resume)
        .map(|h| h.enter)
        .max();
    let mut per_client = BTreeMap::<usize, usize>::new();
    for h in holds.iter() {
        *per_client.entry(h.client).or_default() += 1;
    }
    let untrusted = holds.iter().filter(|h| !h.held).count();
    eprintln!(
        "holds: {before} before the freeze, {during} during it, {after} after the resume \
         (per client {per_client:?}; {untrusted} not Held throughout); last before the \
         resume at {}; {} timed-out attempts",
        match last_before {
            Some(t) if t >= freeze => format!("freeze+{:.1?}", t - freeze),
            Some(t) => format!("freeze-{:.1?}", freeze - t),
            None => "-".to_owned(),
        },
        log.timeouts.load(Ordering::Relaxed)
    );
    let mut errors = BTreeMap::<(usize, String), (usize, Duration)>::new();
    for (client, what, at) in log.errors.lock().unwrap().iter() {
        let first = at.saturating_duration_since(freeze);
        let e = errors.entry((*client, what.clone())).or_insert((0, first));
        e.0 += 1;
    }
    for ((client, what), (n, first)) in errors {
        eprintln!("errors: client {client} {what} x{n} (first at freeze+{first:.1?})");
    }
}

/// Sessions of the contenders on the frozen leader survive: the freeze is longer than the two
/// other members take to elect a new leader, shorter than the session timeout plus that election.
#[test]
fn lock_is_taken_again_and_left_clean_after_the_leader_is_frozen_and_thawed() {
    freeze_the_leader(Duration::from_secs(10), Duration::from_secs(10));
}

fn freeze_the_leader(session: Duration, freeze_for: Duration) {
    init_logging();
    let cluster = TestingCluster::start(3).unwrap();
    let leader = cluster.wait_for_leader(patience()).unwrap();
    let clients = place_contenders(&cluster, leader, session);
    let lost = Arc::new(AtomicU64::new(0));
    for c in &clients {
        let lost = lost.clone();
        c.on_connection_state(move |s| {
            if s == zklock::ConnectionState::Lost {
                lost.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let mut sessions = Sessions::default();
    sessions.sample(&clients);

    let log = Arc::new(Log::default());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, client)| {
            let (client, log, stop) = (client.clone(), log.clone(), stop.clone());
            thread::spawn(move || contend(i, client, log, stop))
        })
        .collect();
    wait_for("contention before the fault", || log.count() >= 30);

    let freeze = Instant::now();
    cluster.pause(leader).unwrap();
    while freeze.elapsed() < freeze_for {
        sessions.sample(&clients);
        thread::sleep(Duration::from_millis(100));
    }
    cluster.resume(leader).unwrap();
    let resume = Instant::now();

    // (a) Somebody takes the lock again, and keeps taking it.
    let bound = session + Duration::from_secs(20) * timing();
    let (mut first, mut flowing) = (None, None);
    while resume.elapsed() < bound && flowing.is_none() {
        sessions.sample(&clients);
        let n = log.holds_since(resume);
        if n >= 1 && first.is_none() {
            first = Some(resume.elapsed());
        }
        if n >= 10 {
            flowing = Some(resume.elapsed());
        }
        thread::sleep(Duration::from_millis(25));
    }
    let observer = client(&cluster.connect_string(), Duration::from_secs(20));
    let stuck = flowing
        .is_none()
        .then(|| describe_children(&observer, &clients, &sessions, resume));

    stop.store(true, Ordering::SeqCst);
    wait_for("the contenders to stop", || {
        threads.iter().all(|t| t.is_finished())
    });
    for t in threads {
        t.join().expect("a contender panicked");
    }
    sessions.sample(&clients);
    summarise(&log, freeze, resume);
    eprintln!(
        "sessions seen per client: {:x?}; {} Lost reported",
        sessions.0,
        lost.load(Ordering::Relaxed)
    );
    let (trusted, other) = overlaps(&log.holds.lock().unwrap());
    eprintln!("overlapping holds: {trusted} while Held, {other} with a lost or suspended hold");

    match (first, flowing) {
        (Some(first), Some(flowing)) => eprintln!(
            "recovery: first hold {first:.2?} after the resume, 10 holds after {flowing:.2?}"
        ),
        _ => {
            let now = describe_children(&observer, &clients, &sessions, resume);
            panic!(
                "the lock was not taken again within {bound:?} of the resume (first hold after \
                 the resume: {first:?}; 10th: none).\nWhile stuck: {}\nAfter every contender \
                 stopped: {now}",
                stuck.unwrap_or_default()
            );
        }
    }
    assert_eq!(trusted, 0, "two holders held the lock at once");

    // (b) Every contender released: nothing is left under the lock while the Clients are open.
    let stopped = Instant::now();
    let bound = session + Duration::from_secs(30) * timing();
    let mut clean = None;
    while stopped.elapsed() < bound {
        // A reaped container parent is empty too.
        let children = observer.children(LOCK);
        if children.as_ref().is_ok_and(|c| c.is_empty())
            || matches!(children, Err(zklock::Error::NoNode(_)))
        {
            clean = Some(stopped.elapsed());
            break;
        }
        thread::sleep(Duration::from_millis(25));
    }
    assert!(
        clients.iter().all(|c| !c.is_closed()),
        "a contender's Client closed"
    );
    match clean {
        Some(after) => eprintln!("lock path empty {after:.2?} after the contenders stopped"),
        None => panic!(
            "nodes left under {LOCK} {bound:?} after every contender released: {}",
            describe_children(&observer, &clients, &sessions, resume)
        ),
    }
}
