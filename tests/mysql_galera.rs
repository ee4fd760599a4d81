//! The MySQL backend on a real Galera cluster: MariaDB 10.11 nodes with Debian's `galera-4`
//! provider on loopback (`TestingMariaDb::start_galera`). The `GET_LOCK` mode is refused at
//! connect; the table mode excludes across nodes, one contender of many takes an expired record
//! over whatever node each runs on, and a holder's node killed: the holder reads `Lost` and a
//! Client on a surviving node is granted once the lease has run out by the database's clock;
//! and a guarded transaction of a holder whose lease is taken over on another node meanwhile is
//! refused, nothing applied.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use common::mysql::{client, one_winner_per_round, Sections};
use common::{chain, patience, wait_for};
use zklock::mysql::{MySqlMode, MySqlMutex, MySqlStatement};
use zklock::testing::TestingMariaDb;
use zklock::{Error, LockHealth, MySqlClient};

fn start(nodes: usize) -> Vec<TestingMariaDb> {
    let t = Instant::now();
    let cluster = TestingMariaDb::start_galera(nodes).expect("a Galera cluster starts");
    println!("{nodes} Galera nodes Synced in {:?}", t.elapsed());
    cluster
}

/// Waits until `node` has applied every write the cluster committed before now (a read with
/// `wsrep_sync_wait = 1`, which waits for it).
fn applied(node: &TestingMariaDb) {
    node.root_sql("SET SESSION wsrep_sync_wait = 1; SELECT 1")
        .expect("a causal read");
}

/// The sum over `nodes` of the status counters `names`.
fn counted(nodes: &[TestingMariaDb], names: &[&str]) -> u64 {
    let list = names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ");
    nodes
        .iter()
        .flat_map(|n| {
            n.root_sql(&format!("SHOW STATUS WHERE Variable_name IN ({list})"))
                .expect("status")
        })
        .map(|row| row[1].parse::<u64>().unwrap_or(0))
        .sum()
}

/// Two sessions, on nodes `a` and `b`, each without the server's retry
/// (`wsrep_retry_autocommit = 0`), update one row at the same moment, `rounds` times: the
/// errors the statements that lost certification were answered with.
fn conflicting_updates(a: &TestingMariaDb, b: &TestingMariaDb, rounds: usize) -> Vec<String> {
    use mysql::prelude::Queryable;
    let session = |node: &TestingMariaDb| {
        let mut c = mysql::Conn::new(mysql::Opts::from_url(&node.url()).unwrap()).unwrap();
        c.query_drop("SET SESSION wsrep_retry_autocommit = 0")
            .unwrap();
        c
    };
    let (mut first, mut second) = (session(a), session(b));
    first
        .query_drop(
            "CREATE TABLE conflict (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; \
             INSERT INTO conflict VALUES (1, 0)",
        )
        .unwrap();
    applied(b);
    let mut errors = Vec::new();
    for _ in 0..rounds {
        let start = Barrier::new(2);
        thread::scope(|s| {
            let updates = [&mut first, &mut second].map(|c| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    c.query_drop("UPDATE conflict SET v = v + 1 WHERE id = 1")
                })
            });
            for update in updates {
                if let Err(e) = update.join().unwrap() {
                    errors.push(e.to_string());
                }
            }
        });
    }
    errors
}

/// The `GET_LOCK` mode is refused at connect on a Galera node, with a cause that names
/// `wsrep_on` and points to the table mode — and rightly: the same `GET_LOCK` name is granted
/// on two nodes at once. The table mode connects; once one node of the two is killed, a take on
/// the other, which has lost its quorum, is an error.
#[test]
fn the_get_lock_mode_is_refused_on_a_galera_node() {
    let nodes = start(2);
    // One `mariadb` client holds GET_LOCK('same') on the first node...
    let holder = thread::scope(|s| {
        let holding = s.spawn(|| nodes[0].root_sql("SELECT GET_LOCK('same', 0), SLEEP(600)"));
        wait_for("the first node's client holds", || {
            nodes[0].lock_holder("same").unwrap().is_some()
        });
        // ... and another is granted it on the second node meanwhile.
        let second = nodes[1]
            .root_sql("SELECT GET_LOCK('same', 0)")
            .expect("GET_LOCK on the second node");
        let id = nodes[0].lock_holder("same").unwrap().unwrap();
        assert!(nodes[0].kill_session(id).unwrap());
        let _ = holding.join().unwrap();
        second
    });
    println!("GET_LOCK('same', 0) on the second node while the first node's is held: {holder:?}");
    assert_eq!(holder, [["1"]], "GET_LOCK is one node's");

    let e = match MySqlClient::connect(&nodes[0].url()) {
        Err(e) => e,
        Ok(_) => panic!("the GET_LOCK mode was not refused on a Galera node"),
    };
    println!("refused: {}", chain(&e));
    match &e {
        Error::ConnectFailed { cause, .. } => match cause.as_ref() {
            Error::MySql(why) => {
                assert!(why.contains("wsrep_on"), "{why}");
                assert!(why.contains("lock_mode=table"), "{why}");
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    let table = MySqlClient::connect(&format!("{}?lock_mode=table", nodes[1].url())).unwrap();
    assert_eq!(table.mode(), MySqlMode::Table);
    let mutex = MySqlMutex::new(&table, "same").unwrap();
    assert!(mutex.acquire_timeout(patience()).unwrap());
    mutex.release().unwrap();

    // With one node of two gone the other has no quorum: a Client on it is not granted (its
    // take waits for the cluster, which then has no primary component); the node's refusals
    // are a server gone away, retried through the retry policy and then reported as such.
    let mut nodes = nodes;
    nodes[0].kill().unwrap();
    let killed = Instant::now();
    let got = mutex.acquire_timeout(patience());
    println!(
        "on the surviving node of two, {:?} after the kill: {:?}; the node's state {:?}",
        killed.elapsed(),
        got.as_ref().map_err(chain),
        nodes[1].galera_state()
    );
    assert!(
        matches!(got, Err(Error::ConnectionLoss) | Ok(false)),
        "{got:?}"
    );
}

/// Three nodes, a table-mode Client on each. Two threads per Client, 60 sections in all: never
/// two inside and the tokens strictly rising. Then a record whose lease has run out (by the
/// database's clock) is taken over by exactly one of eight contenders spread over the nodes,
/// and 20 more rounds of eight at once on a released record, half of them with the servers'
/// retry of a conflicting autocommit statement turned off (`wsrep_retry_autocommit = 0`) so
/// that certification conflicts reach zklock as error 1213 (what they are answered with, seen
/// first with two plain sessions): one winner each round, no error.
#[test]
fn the_table_mode_excludes_across_nodes() {
    let nodes = start(3);
    let errors = conflicting_updates(&nodes[0], &nodes[1], 30);
    println!(
        "30 pairs of updates of one row on two nodes at once: {} lost certification; {:?}",
        errors.len(),
        errors.first()
    );
    assert!(
        errors.iter().all(|e| e.contains("1213")),
        "not all deadlock errors: {errors:?}"
    );
    let mutexes: Vec<MySqlMutex> = nodes
        .iter()
        .map(|n| MySqlMutex::new(&client(n, Duration::from_secs(10)), "ledger").unwrap())
        .collect();
    let t = Instant::now();
    let log = Sections::each_twice(&mutexes, 10);
    println!("60 sections on 3 Clients of 3 nodes in {:?}", t.elapsed());
    log.check(60);
    drop(mutexes);

    let old = client(&nodes[0], Duration::from_secs(3));
    let held = MySqlMutex::new(&old, "expired").unwrap();
    assert!(held.acquire_timeout(Duration::ZERO).unwrap());
    let first = held.fencing_token().unwrap();
    let contenders = || -> Vec<MySqlMutex> {
        (0..8)
            .map(|i| {
                let c = client(&nodes[i % 3], Duration::from_secs(10));
                MySqlMutex::new(&c, "expired").unwrap()
            })
            .collect()
    };
    let retrying = contenders();
    nodes[0]
        .root_sql(
            "UPDATE zklock.zklock_lock_record SET expire_time = NOW(6) - INTERVAL 1 SECOND \
             WHERE lock_name = 'expired'",
        )
        .unwrap();
    let conflicts = || {
        (
            counted(&nodes, &["wsrep_local_cert_failures"]),
            counted(&nodes, &["wsrep_local_bf_aborts"]),
        )
    };
    let start = conflicts();
    let last = one_winner_per_round(&retrying, first, 11, |round| {
        if round == 1 {
            wait_for("the old holder reads Lost", || {
                held.health() == Some(LockHealth::Lost)
            });
        }
        // Each node has applied the last round's release: every contender sees it free.
        nodes.iter().for_each(applied);
    });
    let middle = conflicts();
    // Sessions opened from now on do not retry: a conflict is answered with error 1213.
    for n in &nodes {
        n.root_sql("SET GLOBAL wsrep_retry_autocommit = 0").unwrap();
    }
    let last = one_winner_per_round(&contenders(), last, 10, |_| {
        nodes.iter().for_each(applied);
    });
    let end = conflicts();
    println!(
        "21 rounds of 8 contenders on 3 nodes, one winner each (tokens {} to {last}); \
         certification failures and brute-force aborts: {:?} in 11 rounds with \
         wsrep_retry_autocommit = 1, {:?} in 10 rounds with 0",
        first + 1,
        (middle.0 - start.0, middle.1 - start.1),
        (end.0 - middle.0, end.1 - middle.1),
    );
    assert_eq!(last, first + 21);
}

/// A holder's node is killed (kill -9): the others drop it from the cluster (suspected after
/// 3 s, evicted after 6 s), the holder reads `Suspended`, then `Lost` once a whole
/// lease has passed since its last answered renewal; a Client on a surviving node is refused
/// while the record's lease runs (by that node's clock: the record came with every renewal)
/// and granted once it has run out, with the next token — and the holder reads `Lost` by then.
#[test]
fn a_holder_whose_node_is_killed() {
    let mut nodes = start(3);
    let lease = Duration::from_secs(10);
    let a = client(&nodes[0], lease);
    let held = MySqlMutex::new(&a, "node").unwrap();
    assert!(held.acquire_timeout(Duration::ZERO).unwrap());
    let held_token = held.fencing_token().unwrap();
    let b = client(&nodes[1], lease);
    let other = MySqlMutex::new(&b, "node").unwrap();
    // Let a renewal or two go by, so that the lease left at the kill is not the whole of it.
    thread::sleep(Duration::from_secs(4));
    applied(&nodes[1]);
    let left = nodes[1]
        .root_sql(
            "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), expire_time) FROM \
             zklock.zklock_lock_record WHERE lock_name = 'node'",
        )
        .unwrap();
    let read = Instant::now();
    let left = Duration::from_micros(left[0][0].parse().unwrap());
    nodes[0].kill().unwrap();
    let killed = Instant::now();
    println!("node 0 killed; the record's lease has {left:?} left by node 1's clock");

    // The Client on node 1 waits; this thread, the holder's, watches the hold's health.
    let granted = AtomicBool::new(false);
    let (suspended, lost, lost_at_grant, dropped, (got, at, since_read, token)) =
        thread::scope(|s| {
            let waiter = s.spawn(|| {
                let got = other.acquire_timeout(patience() + lease);
                let (at, since_read) = (killed.elapsed(), read.elapsed());
                granted.store(true, Ordering::SeqCst);
                let token = other.fencing_token();
                if matches!(got, Ok(true)) {
                    other.release().unwrap();
                }
                (got, at, since_read, token)
            });
            let dropped = s.spawn(|| {
                // When node 1 no longer counts node 0 in the cluster.
                while !granted.load(Ordering::SeqCst) {
                    if nodes[1].galera_state().is_ok_and(|(n, _)| n == 2) {
                        return Some(killed.elapsed());
                    }
                    thread::sleep(Duration::from_millis(100));
                }
                None
            });
            let (mut suspended, mut lost) = (None, None);
            while !granted.load(Ordering::SeqCst) {
                match held.health() {
                    Some(LockHealth::Suspended) if suspended.is_none() => {
                        suspended = Some(killed.elapsed())
                    }
                    Some(LockHealth::Lost) if lost.is_none() => lost = Some(killed.elapsed()),
                    _ => {}
                }
                thread::sleep(Duration::from_millis(10));
            }
            // Lost stays Lost: read after the grant, it says the hold was lost by then at the
            // latest (the local lease runs from the last answered renewal's send, the record's
            // from its execution).
            let lost_at_grant = held.health();
            let dropped = dropped.join().unwrap();
            (
                suspended,
                lost,
                lost_at_grant,
                dropped,
                waiter.join().unwrap(),
            )
        });
    let size = nodes[1].galera_state().unwrap();
    println!(
        "after the kill: node 1 dropped node 0 from the cluster at {dropped:?}; the holder \
         read Suspended at {suspended:?}, Lost at {lost:?}; the \
         Client on node 1 was granted at {at:?}, {since_read:?} after the lease left was read \
         (lease {lease:?}, {left:?} of it left at the \
         kill), token {token:?} after {token0}; node 1 sees {size:?}",
        token0 = held_token,
    );
    assert!(got.unwrap(), "not granted on the surviving node");
    assert_eq!(lost_at_grant, Some(LockHealth::Lost), "granted while held");
    assert!(suspended.is_some(), "the holder never read Suspended");
    // The grant came after the lease had run out by node 1's clock (a few ms of slack: the
    // lease left was read just before `read`).
    assert!(
        since_read + Duration::from_millis(100) >= left,
        "granted {since_read:?} after the lease left was read, before it ran out ({left:?})"
    );
    assert_eq!(token, Some(held_token + 1));
    assert_eq!(held.release(), Err(Error::LockLost));

    // The killed node joins again (a state transfer) with the record as the others have it:
    // a Client on it takes the lock with the token after the last.
    let t = Instant::now();
    nodes[0].restart().unwrap();
    nodes.iter().for_each(|n| n.await_galera(3).unwrap());
    println!("node 0 rejoined and all three Synced in {:?}", t.elapsed());
    let again = MySqlMutex::new(&client(&nodes[0], lease), "node").unwrap();
    assert!(again.acquire_timeout(patience()).unwrap());
    assert_eq!(again.fencing_token(), Some(held_token + 2));
    again.release().unwrap();

    // Dropped, the cluster leaves no process and no directory behind (rsync's daemon and the
    // transfer scripts included: their command lines name the directories).
    let dirs: Vec<String> = nodes
        .iter()
        .map(|n| n.dir().display().to_string())
        .collect();
    drop(nodes);
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| dirs.iter().any(|d| c.contains(d.as_str())))
        .collect();
    assert!(left.is_empty(), "processes left: {left:?}");
    assert!(dirs.iter().all(|d| !std::path::Path::new(d).exists()));
}

/// A holder on node 0 runs a guarded transaction (its check, then a statement that waits
/// longer than its lease); meanwhile its lease runs out and a Client on node 1 takes it over.
/// The guarded transaction's check is a write of the lease record, so the take-over, certified
/// first, aborts it or fails its certification: refused, nothing applied; the new holder keeps
/// the lock and its record.
#[test]
fn a_guarded_write_of_a_lease_taken_over_on_another_node_is_refused() {
    let nodes = start(2);
    nodes[0]
        .root_sql(
            "CREATE TABLE zklock.guarded (k VARCHAR(10) PRIMARY KEY, v TEXT) ENGINE=InnoDB; \
             INSERT INTO zklock.guarded VALUES ('x', 'none')",
        )
        .unwrap();
    let lease = Duration::from_secs(3);
    let statuses = ["wsrep_local_cert_failures", "wsrep_local_bf_aborts"];
    let before = counted(&nodes, &statuses);
    let rounds = 3;
    for round in 0..rounds {
        let name = format!("guarded{round}");
        // Each answer of the guarded transaction may take a whole lease and more.
        let a = MySqlClient::builder(&format!("{}?lock_mode=table", nodes[0].url()))
            .session_timeout(lease)
            .connect_timeout(Duration::from_secs(5))
            .operation_timeout(Duration::from_secs(30))
            .connect()
            .expect("connect");
        let held = MySqlMutex::new(&a, &name).unwrap();
        assert!(held.acquire_timeout(Duration::ZERO).unwrap());
        let held_token = held.fencing_token().unwrap();
        let b = client(&nodes[1], Duration::from_secs(30));
        let other = MySqlMutex::new(&b, &name).unwrap();
        let t = Instant::now();
        let (checked, check) = std::sync::mpsc::channel::<()>();
        thread::scope(|s| {
            // The holder's keeper cannot renew the record while the transaction has it: the
            // lease runs out, and node 1 gives it to its Client, which keeps it until the
            // data are checked.
            let (took, taken) = std::sync::mpsc::channel();
            s.spawn(move || {
                assert!(
                    other.acquire_timeout(patience()).unwrap(),
                    "round {round}: node 1's Client was not granted the expired lease"
                );
                took.send((other.fencing_token().unwrap(), t.elapsed()))
                    .unwrap();
                check.recv().unwrap();
                assert_eq!(other.health(), Some(LockHealth::Held), "round {round}");
                other.release().unwrap();
            });
            let refusal = held.guarded_transaction(&[
                MySqlStatement::new("SELECT SLEEP(?)").bind(lease.as_secs() as i64 * 3),
                MySqlStatement::new("UPDATE guarded SET v = ? WHERE k = 'x'").bind("stale"),
            ]);
            let (token, taken_at) = taken.recv().unwrap();
            println!(
                "round {round}: taken over on node 1 at {taken_at:?} (token {token} after \
                 {held_token}); the guarded transaction on node 0 answered at {:?}: \
                 {refusal:?}",
                t.elapsed()
            );
            assert!(token > held_token, "round {round}");
            match &refusal {
                Err(Error::HoldLost { .. }) => {}
                Err(Error::TransactionFailed { source, .. }) if matches!(**source, Error::MySql(ref m) if m.contains("1213")) =>
                    {}
                other => {
                    panic!("round {round}: the guarded transaction was not refused: {other:?}")
                }
            }
            for node in &nodes {
                applied(node);
                assert_eq!(
                    node.root_sql("SELECT v FROM zklock.guarded WHERE k = 'x'")
                        .unwrap(),
                    [["none"]],
                    "round {round}: a stale write landed"
                );
            }
            checked.send(()).unwrap();
        });
        drop(held);
        a.close();
        b.close();
    }
    println!(
        "{rounds} of {rounds} guarded transactions refused; the nodes counted {} certification \
         failures and brute-force aborts",
        counted(&nodes, &statuses) - before
    );
}
