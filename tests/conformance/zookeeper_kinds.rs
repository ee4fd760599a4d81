//! ZooKeeper's exclusive lock kinds under the same scenarios: container parents reaped, a
//! restart, an expired session, a namespace.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::common::*;
use zklock::testing::{expire_session, TestingServer};
use zklock::{
    Client, Error, InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphoreMutex, Lock, LockHealth,
};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Mutex,
    SemaphoreMutex,
    WriteLock,
    MultiLock,
}

fn make(kind: Kind, client: &Client, path: &str) -> Box<dyn Lock> {
    match kind {
        Kind::Mutex => Box::new(InterProcessMutex::new(client, path).unwrap()),
        Kind::SemaphoreMutex => Box::new(InterProcessSemaphoreMutex::new(client, path).unwrap()),
        Kind::WriteLock => {
            let rw = InterProcessReadWriteLock::new(client, path).unwrap();
            Box::new(rw.write_lock().clone())
        }
        Kind::MultiLock => {
            let (a, b) = (format!("{path}/a"), format!("{path}/b"));
            Box::new(InterProcessMultiLock::new(client, &[&a, &b]).unwrap())
        }
    }
}

fn main_path(kind: Kind, scenario: &str) -> String {
    format!("/conformance/{kind:?}-{scenario}")
}

fn session_client(cs: &str) -> Client {
    client(cs, Duration::from_secs(20))
}

/// Waits until nothing ephemeral is left below `path` and no watch is set below it.
fn assert_nothing_left(server: &TestingServer, client: &Client, path: &str) {
    fn ephemerals(client: &Client, path: &str, out: &mut Vec<String>) {
        let Ok(children) = client.children(path) else {
            return;
        };
        for c in children {
            let p = format!("{path}/{c}");
            if let Ok(Some(stat)) = client.exists(&p) {
                if stat.ephemeral_owner != 0 {
                    out.push(p.clone());
                }
            }
            ephemerals(client, &p, out);
        }
    }
    wait_for(&format!("no lock nodes left under {path}"), || {
        let mut left = Vec::new();
        ephemerals(client, path, &mut left);
        left.is_empty()
    });
    wait_for(&format!("no watch left under {path}"), || {
        !server.four_letter("wchc").unwrap().contains(path)
    });
}

fn two_sessions_exclude(kind: Kind) {
    let server = TestingServer::start().unwrap();
    let path = main_path(kind, "two");
    let (a, b) = (
        session_client(&server.connect_string()),
        session_client(&server.connect_string()),
    );
    let la = make(kind, &a, &path);
    let lb = make(kind, &b, &path);
    la.acquire().unwrap();
    assert!(
        !lb.acquire_timeout(Duration::from_millis(300)).unwrap(),
        "both held"
    );
    la.release().unwrap();
    assert!(lb.acquire_timeout(patience()).unwrap());
    lb.release().unwrap();
    assert_nothing_left(&server, &a, &path);
    // The container parents go once the last lock node has.
    wait_for("the lock's container parent to be reaped", || {
        a.exists(&path).unwrap().is_none()
    });
}

fn ten_threads_on_one_object(kind: Kind) {
    let server = TestingServer::start().unwrap();
    let path = main_path(kind, "ten");
    let client = session_client(&server.connect_string());
    let lock: Arc<dyn Lock> = Arc::from(make(kind, &client, &path));
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..10)
        .map(|_| {
            let (lock, inside, overlaps) = (lock.clone(), inside.clone(), overlaps.clone());
            thread::spawn(move || {
                for _ in 0..10 {
                    lock.acquire().unwrap();
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_millis(1));
                    inside.store(false, Ordering::SeqCst);
                    lock.release().unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_nothing_left(&server, &client, &path);
}

fn holder_server_restarted(kind: Kind) {
    let mut server = TestingServer::start().unwrap();
    let path = main_path(kind, "restart");
    let cs = server.connect_string();
    let (held_tx, held_rx) = crossbeam_channel::bounded(1);
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
    let holder = {
        let (cs, path) = (cs.clone(), path.clone());
        thread::spawn(move || {
            let client = session_client(&cs);
            let lock = make(kind, &client, &path);
            lock.acquire().unwrap();
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            lock.release().unwrap();
        })
    };
    held_rx.recv_timeout(patience()).unwrap();
    let waiter = {
        let (cs, path) = (cs.clone(), path.clone());
        thread::spawn(move || {
            let client = session_client(&cs);
            let lock = make(kind, &client, &path);
            assert!(lock.acquire_timeout(patience()).unwrap());
            lock.release().unwrap();
        })
    };
    thread::sleep(Duration::from_millis(200));
    server.kill().unwrap();
    server.restart().unwrap();
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    waiter.join().unwrap();
    let client = session_client(&cs);
    assert_nothing_left(&server, &client, &path);
}

fn holder_session_expired(kind: Kind) {
    let server = TestingServer::start().unwrap();
    let path = main_path(kind, "expired");
    let (a, b) = (
        session_client(&server.connect_string()),
        session_client(&server.connect_string()),
    );
    let la = make(kind, &a, &path);
    la.acquire().unwrap();
    let waiter = {
        let path = path.clone();
        thread::spawn(move || {
            let lb = make(kind, &b, &path);
            assert!(lb.acquire_timeout(patience()).unwrap());
            lb.release().unwrap();
            b
        })
    };
    thread::sleep(Duration::from_millis(200));
    expire_session(&a).unwrap();
    wait_for("the holder's health to go Lost", || {
        la.health() == Some(LockHealth::Lost)
    });
    let b = waiter.join().unwrap();
    assert_eq!(la.release(), Err(Error::LockLost));
    assert_nothing_left(&server, &b, &path);
}

fn namespaced(kind: Kind) {
    let server = TestingServer::start().unwrap();
    let path = main_path(kind, "ns");
    let ns = Client::builder(&server.connect_string())
        .namespace("tenant")
        .connect()
        .unwrap();
    let root = session_client(&server.connect_string());
    let lock = make(kind, &ns, &path);
    lock.acquire().unwrap();
    let mut found = Vec::new();
    fn walk(c: &Client, p: &str, out: &mut Vec<String>) {
        for child in c.children(p).unwrap_or_default() {
            let q = format!("{p}/{child}");
            out.push(q.clone());
            walk(c, &q, out);
        }
    }
    walk(&root, &format!("/tenant{path}"), &mut found);
    assert!(
        found.iter().any(|p| p.contains("_c_")),
        "lock nodes under the namespace: {found:?}"
    );
    lock.release().unwrap();
    assert_nothing_left(&server, &root, &format!("/tenant{path}"));
}

macro_rules! conformance {
    ($($name:ident => $kind:expr),* $(,)?) => {$(
        mod $name {
            use super::*;
            #[test] fn two_sessions_exclude_each_other() { two_sessions_exclude($kind) }
            #[test] fn ten_threads_on_one_object_never_overlap() { ten_threads_on_one_object($kind) }
            #[test] fn holder_server_killed_and_restarted() { holder_server_restarted($kind) }
            #[test] fn holder_session_expired_waiter_acquires() { holder_session_expired($kind) }
            #[test] fn namespaced_client_works() { namespaced($kind) }
        }
    )*};
}

conformance! {
    mutex => Kind::Mutex,
    semaphore_mutex => Kind::SemaphoreMutex,
    write_lock => Kind::WriteLock,
    multi_lock => Kind::MultiLock,
}
