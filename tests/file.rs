//! The file backend across processes: eight processes taking one `file://` lock 200 times
//! each against the fenced register, a holder killed with `kill -9`, and a waiter killed in
//! the middle of the queue.

mod common;

use std::time::{Duration, Instant};

use common::patience;
use common::worker::{say, Worker};
use zklock::file::{FileClient, FileMutex};
use zklock::testing::{FenceClient, FenceEventKind, FencedRegister};

/// The environment variable that makes this binary a worker process: `MODE DIR NAME [...]`.
const WORKER: &str = "ZKLOCK_FILE_WORKER";

const PROCESSES: usize = 8;
const ROUNDS: usize = 200;

/// Not a test: the worker process of the others. `loop DIR NAME ADDR ROUNDS WHO` takes the
/// lock ROUNDS times, writing to the register at ADDR each time; `hold DIR NAME` holds it
/// until killed; `wait DIR NAME` waits for it until killed.
#[test]
fn worker() {
    let Ok(args) = std::env::var(WORKER) else {
        return;
    };
    let args: Vec<&str> = args.split(' ').collect();
    let client = FileClient::open(args[1]).unwrap();
    let lock = FileMutex::new(&client, args[2]).unwrap();
    match args[0] {
        "loop" => {
            let mut fence = FenceClient::connect(args[3]).unwrap();
            let rounds: usize = args[4].parse().unwrap();
            let who = args[5];
            say("ready");
            for i in 0..rounds {
                let guard = lock.try_lock_for(patience()).unwrap().expect("granted");
                let token = guard.fencing_token();
                fence.enter(token, who).unwrap();
                let written = fence.write(token, who, &format!("{who}-{i}")).unwrap();
                assert!(written.is_accepted(), "{who}: token {token} was refused");
                fence.exit(token, who).unwrap();
                drop(guard);
            }
            say("done");
        }
        "hold" => {
            let guard = lock.lock().unwrap();
            say(&format!("held {}", guard.fencing_token()));
            common::worker::wait_to_be_killed();
        }
        "wait" => {
            say("waiting");
            let _ = lock.try_lock_for(patience());
            common::worker::wait_to_be_killed();
        }
        other => panic!("no worker mode {other}"),
    }
}

fn start(args: &str) -> Worker {
    Worker::start("worker", WORKER, args)
}

/// Eight processes, 200 acquisitions each, every holder writing its token to the fenced
/// register: no two inside at once, every write accepted, and the tokens of the grants rise
/// one by one — each is the number its entry got on arrival, so nobody was overtaken.
#[test]
fn eight_processes_take_turns_in_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let register = FencedRegister::start().unwrap();
    let path = dir.path().display().to_string();
    let workers: Vec<Worker> = (0..PROCESSES)
        .map(|w| {
            start(&format!(
                "loop {path} shared {} {ROUNDS} w{w}",
                register.addr()
            ))
        })
        .collect();
    let started = Instant::now();
    for w in &workers {
        w.expect("done");
    }
    let took = started.elapsed();
    let log = register.log();
    let report = register.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.rejected(), 0, "two holders were inside together");
    let entered: Vec<u64> = log
        .iter()
        .filter(|e| e.kind == FenceEventKind::Enter)
        .map(|e| e.token)
        .collect();
    assert_eq!(entered.len(), PROCESSES * ROUNDS);
    assert!(
        entered.windows(2).all(|w| w[0] < w[1]),
        "a grant out of arrival order"
    );
    let consecutive = entered.windows(2).all(|w| w[1] == w[0] + 1);
    assert!(consecutive, "an entry was granted out of turn or skipped");
    println!(
        "{} acquisitions by {PROCESSES} processes in {took:?}: {:.0} hand-offs/s",
        entered.len(),
        entered.len() as f64 / took.as_secs_f64()
    );
    // Nothing is left of the 1600 entries.
    let left: Vec<_> = entries(&dir.path().join("lock.shared"));
    assert!(left.is_empty(), "entries left behind: {left:?}");
}

/// The numbered entries (and `tmp-` files) of a lock's directory.
fn entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "state")
        .collect()
}

/// A holder process killed with `kill -9`: the waiter behind it holds within milliseconds,
/// with a higher token. Five rounds; the times are printed, not asserted.
#[test]
fn killed_holder_is_replaced_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display().to_string();
    let client = FileClient::open(dir.path()).unwrap();
    let lock = FileMutex::new(&client, "killed").unwrap();
    let mut times = Vec::new();
    for _ in 0..5 {
        let holder = start(&format!("hold {path} killed"));
        let token: u64 = holder.expect("held ").parse().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let client = client.clone();
            std::thread::spawn(move || {
                let lock = FileMutex::new(&client, "killed").unwrap();
                let guard = lock.try_lock_for(patience()).unwrap().expect("granted");
                tx.send((Instant::now(), guard.fencing_token())).unwrap();
            })
        };
        // Let the waiter queue behind the holder.
        common::wait_for("the waiter to queue", || {
            lock.participants().unwrap().len() == 2
        });
        let killed = Instant::now();
        holder.signal("-KILL");
        let (at, next) = rx.recv_timeout(patience()).expect("the waiter was served");
        waiter.join().unwrap();
        assert!(next > token, "tokens rise: {next} after {token}");
        times.push(at.saturating_duration_since(killed));
    }
    times.sort();
    println!(
        "kill -9 of the holder to the next waiter's grant: {times:?} (median {:?})",
        times[times.len() / 2]
    );
    assert!(entries(&dir.path().join("lock.killed")).is_empty());
}

/// A waiter process killed in the middle of the queue: the waiter behind it is served as
/// soon as the holder lets go, and nothing of the dead waiter is left once the queue moves.
#[test]
fn waiter_killed_mid_queue_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display().to_string();
    let client = FileClient::open(dir.path()).unwrap();
    let lock = FileMutex::new(&client, "queue").unwrap();
    lock.acquire().unwrap();
    let middle = start(&format!("wait {path} queue"));
    middle.expect("waiting");
    common::wait_for("the middle waiter to queue", || {
        lock.participants().unwrap().len() == 2
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let last = {
        let client = client.clone();
        std::thread::spawn(move || {
            let lock = FileMutex::new(&client, "queue").unwrap();
            let guard = lock.try_lock_for(patience()).unwrap().expect("granted");
            tx.send(Instant::now()).unwrap();
            drop(guard);
        })
    };
    common::wait_for("the last waiter to queue", || {
        lock.participants().unwrap().len() == 3
    });
    middle.signal("-KILL");
    std::thread::sleep(Duration::from_millis(100));
    let released = Instant::now();
    lock.release().unwrap();
    let at = rx
        .recv_timeout(patience())
        .expect("the last waiter was served");
    last.join().unwrap();
    println!(
        "the waiter behind the killed one served {:?} after the release",
        at.saturating_duration_since(released)
    );
    let left = entries(&dir.path().join("lock.queue"));
    assert!(left.is_empty(), "entries left behind: {left:?}");
}

/// A hold whose entry is removed under it reads `Lost`, its subscribers hear it, and its
/// release says so; after `close()` no thread of the Client is left.
#[test]
fn a_removed_entry_reads_lost_and_close_leaves_no_thread() {
    let dir = tempfile::tempdir().unwrap();
    let client = FileClient::open(dir.path()).unwrap();
    let lock = FileMutex::new(&client, "removed").unwrap();
    let events = lock.health_events();
    lock.acquire().unwrap();
    assert_eq!(lock.health(), Some(zklock::LockHealth::Held));
    let entry = lock.participants().unwrap()[0].id.clone();
    std::fs::remove_file(dir.path().join("lock.removed").join(entry)).unwrap();
    assert_eq!(lock.health(), Some(zklock::LockHealth::Lost));
    let heard = events.recv_timeout(patience()).expect("a health event");
    assert_eq!(heard, zklock::LockHealth::Lost);
    assert_eq!(lock.release(), Err(zklock::Error::LockLost));
    let threads = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("zklock-file"))
            .count()
    };
    assert!(threads() >= 2, "the keeper and the events thread run");
    client.close();
    drop((lock, client));
    common::wait_for("the Client's threads to end", || threads() == 0);
}
