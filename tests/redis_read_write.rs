//! The Redis read-write lock against a real `redis-server`: readers share and a writer
//! excludes (checked by a checker that can fail), a waiting writer holds back later readers,
//! readers queued together are granted together, downgrade, refused upgrade, and nothing left
//! on the server.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use zklock::redis::RedisReadWriteLock;
use zklock::testing::TestingRedis;
use zklock::{Error, LockHealth};

mod redis_common;
use redis_common::{client, lock_keys, patience, wait_for};

/// Who is in: readers counted, a writer flagged; every overlap a writer would make is counted.
#[derive(Default)]
struct Room {
    readers: AtomicUsize,
    writer: AtomicBool,
    overlaps: AtomicUsize,
    most_readers: AtomicUsize,
}

impl Room {
    fn read(&self) {
        let n = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(n, Ordering::SeqCst);
        if self.writer.load(Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn unread(&self) {
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    fn write(&self) {
        if self.writer.swap(true, Ordering::SeqCst) || self.readers.load(Ordering::SeqCst) > 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn unwrite(&self) {
        self.writer.store(false, Ordering::SeqCst);
    }
}

#[test]
fn readers_share_and_a_writer_excludes() {
    let server = TestingRedis::start().unwrap();
    let room = Arc::new(Room::default());
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let (url, room) = (server.url(), room.clone());
            thread::spawn(move || {
                let client = zklock::RedisClient::connect(&url).unwrap();
                let lock = RedisReadWriteLock::new(&client, "room").unwrap();
                for i in 0..12 {
                    if (w + i) % 3 == 0 {
                        let _guard = lock.write_lock().lock().unwrap();
                        room.write();
                        thread::sleep(Duration::from_millis(3));
                        room.unwrite();
                    } else {
                        let _guard = lock.read_lock().lock().unwrap();
                        room.read();
                        thread::sleep(Duration::from_millis(3));
                        room.unread();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        room.overlaps.load(Ordering::SeqCst),
        0,
        "a writer overlapped"
    );
    wait_for("the lock's keys to go", || {
        lock_keys(&server).lines().all(|k| k.ends_with(":token"))
    });
}

/// The room's check fails when it should: a writer beside a reader is an overlap.
#[test]
fn the_room_check_catches_a_writer_beside_a_reader() {
    let room = Room::default();
    room.read();
    room.write();
    assert_eq!(room.overlaps.load(Ordering::SeqCst), 1);
}

#[test]
fn a_waiting_writer_holds_back_later_readers() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let lock = Arc::new(RedisReadWriteLock::new(&c, "writer-first").unwrap());
    let first_reader = lock.read_lock().lock().unwrap();
    let writer = {
        let lock = lock.clone();
        thread::spawn(move || {
            let guard = lock.write_lock().lock().unwrap();
            thread::sleep(Duration::from_millis(50));
            drop(guard);
        })
    };
    let queue = format!("{}:queue", lock.read_lock().key());
    wait_for("the writer to queue", || {
        server.command(&["LLEN", &queue]).unwrap().trim() == "1"
    });
    // Another thread: a reader of this thread would re-enter its own hold.
    let later = {
        let lock = lock.clone();
        thread::spawn(move || lock.read_lock().try_lock().map(|g| g.is_some()))
    };
    assert!(
        !later.join().unwrap().unwrap(),
        "a reader went ahead of the waiting writer"
    );
    drop(first_reader);
    writer.join().unwrap();
    let after = {
        let lock = lock.clone();
        thread::spawn(move || {
            lock.read_lock()
                .try_lock_for(patience())
                .map(|g| g.is_some())
        })
    };
    assert!(after.join().unwrap().unwrap());
}

#[test]
fn readers_queued_behind_a_writer_are_granted_together() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let lock = Arc::new(RedisReadWriteLock::new(&c, "together").unwrap());
    let write = lock.write_lock().lock().unwrap();
    let queue = format!("{}:queue", lock.read_lock().key());
    let all_in = Arc::new(Barrier::new(3));
    let readers: Vec<_> = (0..3)
        .map(|i| {
            let (lock, all_in) = (lock.clone(), all_in.clone());
            let reader = thread::spawn(move || {
                let _guard = lock.read_lock().lock().unwrap();
                // Every reader holds at once, or this waits for ever (bounded by `patience`).
                all_in.wait();
            });
            wait_for("the reader to queue", || {
                server.command(&["LLEN", &queue]).unwrap().trim() == (i + 1).to_string()
            });
            reader
        })
        .collect();
    drop(write);
    for r in readers {
        r.join().unwrap();
    }
}

#[test]
fn a_writer_downgrades_and_cannot_upgrade() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let lock = Arc::new(RedisReadWriteLock::new(&c, "grade").unwrap());
    let write = lock.write_lock().lock().unwrap();
    // A writer from elsewhere queues: the downgrade still goes ahead of it.
    let other = {
        let lock = lock.clone();
        thread::spawn(move || {
            lock.write_lock()
                .try_lock_for(patience())
                .map(|g| g.is_some())
        })
    };
    let queue = format!("{}:queue", lock.read_lock().key());
    wait_for("the other writer to queue", || {
        server.command(&["LLEN", &queue]).unwrap().trim() == "1"
    });
    let read = lock
        .read_lock()
        .try_lock()
        .unwrap()
        .expect("a writer reads at once");
    drop(write);
    assert_eq!(read.health(), LockHealth::Held);
    assert!(lock.read_lock().is_owned_by_current_thread());
    assert!(matches!(
        lock.write_lock().try_lock(),
        Err(Error::WouldDeadlock)
    ));
    assert!(!other.is_finished(), "the writer waits for the reader");
    drop(read);
    assert!(other.join().unwrap().unwrap());
}

#[test]
fn a_reader_lost_on_the_server_reads_lost() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_millis(600));
    let lock = RedisReadWriteLock::new(&c, "lost").unwrap();
    let events = lock.read_lock().health_events();
    let read = lock.read_lock().lock().unwrap();
    server.command(&["DEL", lock.read_lock().key()]).unwrap();
    assert_eq!(
        events.recv_timeout(patience()).unwrap().health,
        LockHealth::Lost
    );
    assert_eq!(read.health(), LockHealth::Lost);
    assert!(matches!(read.release(), Err(Error::LockLost)));
}

#[test]
fn participants_list_the_writer_the_readers_and_the_queue() {
    let server = TestingRedis::start().unwrap();
    let c = client(&server, Duration::from_secs(30));
    let lock = Arc::new(RedisReadWriteLock::new(&c, "who").unwrap());
    let read = lock.read_lock().lock().unwrap();
    let writer = {
        let lock = lock.clone();
        thread::spawn(move || {
            lock.write_lock()
                .try_lock_for(patience())
                .map(|g| g.is_some())
        })
    };
    wait_for("the writer to queue", || {
        lock.read_lock().participants().unwrap().len() == 2
    });
    let who = lock.write_lock().participants().unwrap();
    assert!(who[0].holds && who[0].id.ends_with('r'), "{who:?}");
    assert!(!who[1].holds && who[1].id.ends_with('w'), "{who:?}");
    assert!(who
        .iter()
        .all(|p| p.expires_in.is_some_and(|d| d <= Duration::from_secs(30))));
    drop(read);
    assert!(writer.join().unwrap().unwrap());
}
