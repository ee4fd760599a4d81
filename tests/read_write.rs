//! InterProcessReadWriteLock against a real ZooKeeper (ports of Curator's scenarios).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::{Client, Error, InterProcessReadWriteLock};

fn session_client(server: &TestingServer) -> Client {
    client(&server.connect_string(), Duration::from_secs(20))
}

/// Node data (Curator's `lockData`) for both halves, or each on its own, and the downgrade's
/// read node carries the read half's.
#[test]
fn both_halves_write_their_node_data() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let rw = InterProcessReadWriteLock::new(&client, "/locks/rw-data").unwrap();
    rw.set_node_data(b"host-a").unwrap();
    let data = |node: Option<String>| client.data(&node.expect("held")).unwrap().0;
    let w = rw.write_lock().lock().unwrap();
    assert_eq!(data(rw.write_lock().lock_node()), b"host-a");
    rw.read_lock().set_node_data(b"reader").unwrap();
    let r = rw.read_lock().lock().unwrap(); // downgrade
    assert_eq!(data(rw.read_lock().lock_node()), b"reader");
    drop((r, w));
    rw.write_lock().set_node_data(b"writer").unwrap();
    let w = rw.write_lock().lock().unwrap();
    assert_eq!(data(rw.write_lock().lock_node()), b"writer");
    drop(w);
    let big = vec![0u8; 2 << 20];
    assert!(matches!(
        rw.set_node_data(&big),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn twenty_readers_hold_while_eight_writers_queue() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let observer = InterProcessReadWriteLock::new(&client, "/locks/rw-many").unwrap();
    let all_read = Arc::new(Barrier::new(21));
    let done = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for _ in 0..20 {
        let (client, all_read, done) = (client.clone(), all_read.clone(), done.clone());
        threads.push(thread::spawn(move || {
            let rw = InterProcessReadWriteLock::new(&client, "/locks/rw-many").unwrap();
            let guard = rw.read_lock().lock().unwrap();
            all_read.wait();
            while !done.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(10));
            }
            drop(guard);
        }));
    }
    all_read.wait();
    for _ in 0..8 {
        let client = client.clone();
        threads.push(thread::spawn(move || {
            let rw = InterProcessReadWriteLock::new(&client, "/locks/rw-many").unwrap();
            rw.write_lock().lock().unwrap().release().unwrap();
        }));
    }
    wait_for("8 writers queued", || {
        observer.write_lock().participant_nodes().unwrap().len() == 8
    });
    assert_eq!(observer.read_lock().participant_nodes().unwrap().len(), 20);
    done.store(true, Ordering::SeqCst);
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/rw-many",
    );
}

#[test]
fn upgrade_is_refused_and_a_writer_excludes_readers() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let rw = Arc::new(InterProcessReadWriteLock::new(&client, "/locks/rw-up").unwrap());
    rw.read_lock().acquire().unwrap();
    assert_eq!(
        rw.write_lock().acquire_timeout(Duration::from_secs(1)),
        Err(Error::WouldDeadlock)
    );
    rw.read_lock().release().unwrap();

    rw.write_lock().acquire().unwrap();
    let other = session_client(&server);
    let reader = thread::spawn(move || {
        let rw = InterProcessReadWriteLock::new(&other, "/locks/rw-up").unwrap();
        rw.read_lock()
            .acquire_timeout(Duration::from_millis(500))
            .unwrap()
    });
    assert!(
        !reader.join().unwrap(),
        "a reader got in while a writer held"
    );
    rw.write_lock().release().unwrap();
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/rw-up",
    );
}

/// kazoo's `contenders()` on Curator's layout: readers' and writers' node data together, in
/// lock order, the holder first; readers that share are listed side by side.
#[test]
fn contenders_list_readers_and_writers_in_lock_order() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let path = "/locks/rw-contenders";
    let observer = InterProcessReadWriteLock::new(&client, path).unwrap();
    assert_eq!(observer.contenders().unwrap(), Vec::<String>::new());
    let writer = InterProcessReadWriteLock::new(&client, path).unwrap();
    writer.set_node_data(b"writer-1").unwrap();
    let held = writer.write_lock().lock().unwrap();
    // Behind the writer: a reader, a writer, then another reader, each on its own thread.
    let queued: Vec<_> = [("reader-1", false), ("writer-2", true), ("reader-2", false)]
        .iter()
        .enumerate()
        .map(|(i, &(name, write))| {
            let rw = InterProcessReadWriteLock::new(&client, path).unwrap();
            rw.set_node_data(name.as_bytes()).unwrap();
            let t = thread::spawn(move || {
                if write {
                    rw.write_lock().lock().unwrap().release().unwrap();
                } else {
                    rw.read_lock().lock().unwrap().release().unwrap();
                }
            });
            wait_for(name, || observer.contenders().unwrap().len() == i + 2);
            t
        })
        .collect();
    assert_eq!(
        observer.contenders().unwrap(),
        ["writer-1", "reader-1", "writer-2", "reader-2"]
    );
    held.release().unwrap();
    for t in queued {
        t.join().unwrap();
    }
    // Two readers sharing, then a writer waiting for both.
    let (r1, r2) = (
        InterProcessReadWriteLock::new(&client, path).unwrap(),
        InterProcessReadWriteLock::new(&client, path).unwrap(),
    );
    r1.set_node_data(b"reader-a").unwrap();
    r2.set_node_data(b"reader-b").unwrap();
    let a = r1.read_lock().lock().unwrap();
    let b = r2.read_lock().lock().unwrap();
    let writer = InterProcessReadWriteLock::new(&client, path).unwrap();
    writer.set_node_data(b"writer-c").unwrap();
    let waiting = thread::spawn(move || writer.write_lock().lock().unwrap().release().unwrap());
    wait_for("the writer to queue", || {
        observer.contenders().unwrap().len() == 3
    });
    assert_eq!(
        observer.contenders().unwrap(),
        ["reader-a", "reader-b", "writer-c"]
    );
    drop((a, b));
    waiting.join().unwrap();
    wait_for("no contenders", || {
        observer.contenders().unwrap().is_empty()
    });
}

/// CURATOR-621, as Curator 5.5 fixed it: a writer queued before the downgrade waits for the
/// downgraded read; a reader queued behind the downgrading writer (no writer ahead of it) gets
/// in beside it.
#[test]
fn downgrade_lets_queued_readers_in_and_keeps_queued_writers_out() {
    let server = TestingServer::start().unwrap();
    let client = session_client(&server);
    let path = "/locks/rw-down";
    let rw = InterProcessReadWriteLock::new(&client, path).unwrap();
    rw.write_lock().acquire().unwrap();

    // A reader, then a writer, queue behind the writer before it downgrades.
    let writer_in = Arc::new(AtomicBool::new(false));
    let (reader_in_tx, reader_in) = crossbeam_channel::unbounded();
    let (reader_out_tx, reader_out) = crossbeam_channel::unbounded::<()>();
    let reader = {
        let other = session_client(&server);
        thread::spawn(move || {
            let rw = InterProcessReadWriteLock::new(&other, path).unwrap();
            rw.read_lock().acquire().unwrap();
            reader_in_tx.send(()).unwrap();
            reader_out.recv().unwrap();
            rw.read_lock().release().unwrap();
        })
    };
    wait_for("the reader to queue", || {
        rw.read_lock().participant_nodes().unwrap().len() == 1
    });
    let writer = {
        let (other, writer_in) = (session_client(&server), writer_in.clone());
        thread::spawn(move || {
            let rw = InterProcessReadWriteLock::new(&other, path).unwrap();
            rw.write_lock().acquire().unwrap();
            writer_in.store(true, Ordering::SeqCst);
            rw.write_lock().release().unwrap();
        })
    };
    wait_for("the second writer to queue", || {
        rw.write_lock().participant_nodes().unwrap().len() == 2
    });

    rw.read_lock().acquire().unwrap();
    assert!(rw.read_lock().is_owned_by_current_thread());
    rw.write_lock().release().unwrap();
    assert!(!rw.write_lock().is_owned_by_current_thread());
    assert!(
        rw.read_lock().is_owned_by_current_thread(),
        "the downgrade keeps the read hold"
    );
    reader_in
        .recv_timeout(patience())
        .expect("the queued reader gets in beside the downgraded read");
    reader_out_tx.send(()).unwrap();
    reader.join().unwrap();
    thread::sleep(Duration::from_millis(300));
    assert!(
        !writer_in.load(Ordering::SeqCst),
        "a queued writer got in while the downgraded read was held"
    );
    assert_eq!(
        rw.write_lock().acquire_timeout(Duration::from_secs(1)),
        Err(Error::WouldDeadlock)
    );
    rw.read_lock().release().unwrap();
    writer.join().unwrap();
    assert!(writer_in.load(Ordering::SeqCst));
    assert_clean(|| server.four_letter("wchc").unwrap(), &client, path);
}

#[test]
fn random_mix_keeps_writers_exclusive_and_lets_readers_share() {
    let server = TestingServer::start().unwrap();
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (cs, readers, writers, max_readers, violations) = (
                server.connect_string(),
                readers.clone(),
                writers.clone(),
                max_readers.clone(),
                violations.clone(),
            );
            thread::spawn(move || {
                let client = client(&cs, Duration::from_secs(20));
                let rw = InterProcessReadWriteLock::new(&client, "/locks/rw-mix").unwrap();
                for _ in 0..100 {
                    if fastrand::u8(0..10) == 0 {
                        let g = rw.write_lock().lock().unwrap();
                        if writers.fetch_add(1, Ordering::SeqCst) != 0
                            || readers.load(Ordering::SeqCst) != 0
                        {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::sleep(Duration::from_millis(2));
                        writers.fetch_sub(1, Ordering::SeqCst);
                        g.release().unwrap();
                    } else {
                        let g = rw.read_lock().lock().unwrap();
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(now, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) != 0 {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::sleep(Duration::from_millis(2));
                        readers.fetch_sub(1, Ordering::SeqCst);
                        g.release().unwrap();
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    assert!(
        max_readers.load(Ordering::SeqCst) > 1,
        "readers never shared"
    );
    let client = session_client(&server);
    assert_clean(
        || server.four_letter("wchc").unwrap(),
        &client,
        "/locks/rw-mix",
    );
}
