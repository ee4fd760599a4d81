//! The MySQL backend's table mode (`lock_mode=table`) on a real MariaDB: what the conformance
//! suite (`mariadb_table::`) does not cover — exclusion and tokens across Clients, an expired
//! record taken over by exactly one of eight contenders, the SQL any client runs, tokens across
//! a restart and a kill -9 of the server, the recipes it refuses, and a failover to an
//! asynchronous and to a semi-synchronous replica.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::mysql::{client, one_winner_per_round, Sections};
use common::{patience, wait_for};
use parking_lot::Mutex;
use zklock::mysql::{MySqlClient, MySqlMode, MySqlMutex};
use zklock::testing::TestingMariaDb;
use zklock::{ConnectionState, Error, LockHealth};

/// Three Clients, two threads each, 60 sections in all: never two inside, and the tokens
/// strictly rising in the order the sections ran.
#[test]
fn exclusion_and_rising_tokens_across_clients() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let mutexes: Vec<MySqlMutex> = (0..3)
        .map(|_| MySqlMutex::new(&client(&server, Duration::from_secs(10)), "ledger").unwrap())
        .collect();
    let started = Instant::now();
    let log = Sections::each_twice(&mutexes, 10);
    println!("60 sections on 3 Clients in {:?}", started.elapsed());
    log.check(60);
}

/// Names that differ only in bytes a collation would merge (`"x"` and `"x "` under a
/// pad-space one) are distinct records, and every name of 1 to 1024 bytes can be taken.
#[test]
fn distinct_names_are_distinct_locks() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let (a, b) = (
        client(&server, Duration::from_secs(30)),
        client(&server, Duration::from_secs(30)),
    );
    common::mysql::distinct_names_are_distinct_locks(&a, &b);
}

/// A renewal that finds the Client's own connection dead after a server restart runs again at
/// once on a new one: the first renewal after the restart reaches the server, and the Client
/// never reads `Suspended` (the renewal used to fail and wait a whole renewal period).
#[test]
fn the_first_renewal_after_a_restart_goes_through_a_new_connection() {
    let mut server = TestingMariaDb::start().expect("mariadbd starts");
    // Renewals every 20 s: the restart fits between two of them.
    let c = client(&server, Duration::from_secs(60));
    let mutex = MySqlMutex::new(&c, "renewal").unwrap();
    let guard = mutex.lock().unwrap();
    let expiry = |server: &TestingMariaDb| {
        server
            .root_sql(
                "SELECT expire_time FROM zklock.zklock_lock_record WHERE lock_name = 'renewal'",
            )
            .unwrap()[0][0]
            .clone()
    };
    // Right after a renewal, the server restarts.
    let granted = expiry(&server);
    wait_for("a renewal", || expiry(&server) != granted);
    let states = c.connection_states();
    let t = Instant::now();
    server.restart().unwrap();
    println!("restarted in {:?}", t.elapsed());
    let before = expiry(&server);
    wait_for("a renewal after the restart", || expiry(&server) != before);
    let seen: Vec<ConnectionState> = states.try_iter().collect();
    assert!(!seen.contains(&ConnectionState::Suspended), "{seen:?}");
    assert_eq!(guard.health(), LockHealth::Held);
    guard.release().unwrap();
}

/// `close()` against a frozen server (SIGSTOP) while the keeper waits on the Client's own
/// connection to let go of a released record: it returns within its bound, the operation
/// timeout and a quarter second (the events thread), not behind the keeper's request too.
#[test]
fn close_against_a_frozen_server_keeps_its_bound() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let op = Duration::from_secs(3);
    let c = MySqlClient::builder(&format!("{}?lock_mode=table", server.url()))
        .session_timeout(Duration::from_secs(30))
        .operation_timeout(op)
        .connect()
        .unwrap();
    let released = MySqlMutex::new(&c, "frozen-released").unwrap();
    let held = MySqlMutex::new(&c, "frozen-held").unwrap();
    released.acquire().unwrap();
    held.acquire().unwrap();
    server.pause().unwrap();
    // Unanswered: the record goes to the keeper, which waits on the frozen server for it.
    assert!(released.release().is_err());
    // The keeper, woken by the release, is in its request on the Client's own connection.
    thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    c.close();
    let took = t.elapsed();
    server.resume().unwrap();
    println!("close against a frozen server: {took:?} (operation timeout {op:?})");
    // The slack is for a loaded machine; waiting behind the keeper took a second timeout.
    assert!(took < op + Duration::from_millis(1500), "{took:?}");
    assert_eq!(held.health(), Some(LockHealth::Lost));
}

/// A record whose expiry has passed by the database's clock while its holder still had it:
/// of eight Clients that try at the same moment exactly one takes it over (the optimistic
/// update on the version), with the next token, and the old holder reads `Lost`. Then twenty
/// rounds of eight at once on a released record: one winner each.
#[test]
fn an_expired_record_is_taken_over_by_exactly_one_of_8() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let old = client(&server, Duration::from_secs(3));
    let held = MySqlMutex::new(&old, "expired").unwrap();
    assert!(held.acquire_timeout(Duration::ZERO).unwrap());
    let first = held.fencing_token().unwrap();
    let contenders: Vec<MySqlMutex> = (0..8)
        .map(|_| MySqlMutex::new(&client(&server, Duration::from_secs(10)), "expired").unwrap())
        .collect();
    assert!(
        !contenders[0].acquire_timeout(Duration::ZERO).unwrap(),
        "held"
    );
    // The holder's lease runs out by the database's clock (its keeper has not renewed it yet).
    server
        .root_sql(
            "UPDATE zklock.zklock_lock_record SET expire_time = NOW(6) - INTERVAL 1 SECOND \
             WHERE lock_name = 'expired'",
        )
        .unwrap();
    // Round 0 takes the expired record over; before round 1, the old holder's next renewal
    // has matched nothing: Lost.
    one_winner_per_round(&contenders, first, 21, |round| {
        if round == 1 {
            let t = Instant::now();
            wait_for("the old holder reads Lost", || {
                held.health() == Some(LockHealth::Lost)
            });
            println!(
                "the old holder read Lost {:?} after the take-over",
                t.elapsed()
            );
            assert_eq!(held.release(), Err(Error::LockLost));
        }
    });
}

/// A `mariadb` client running `lock_sql()` (with `@owner` and `@ms` set) and a zklock holder
/// exclude each other, and the tokens go on rising across them.
#[test]
fn a_sql_client_and_zklock_exclude_each_other() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let c = client(&server, Duration::from_secs(10));
    let mutex = MySqlMutex::new(&c, "shared").unwrap();
    let sql_try = |ms: u64| -> (u64, Option<u64>) {
        let script = format!(
            "USE zklock; SET @owner = 'sql-client', @ms = {ms}; {}",
            mutex.lock_sql()
        );
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", server.socket().display()))
            .args(["-uroot", "-N", "-B", "-e", &script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let last = text.lines().last().unwrap_or_default().to_owned();
        let mut fields = last.split('\t');
        let taken = fields.next().unwrap().parse().unwrap();
        let token = fields.next().and_then(|t| t.parse().ok());
        (taken, token)
    };
    assert!(mutex.acquire_timeout(Duration::ZERO).unwrap());
    let zk_token = mutex.fencing_token().unwrap();
    assert_eq!(sql_try(60_000).0, 0, "the SQL client took a held lease");
    mutex.release().unwrap();
    let (taken, token) = sql_try(1_500);
    assert_eq!(taken, 1, "the SQL client could not take a free lease");
    let sql_token = token.unwrap();
    assert!(sql_token > zk_token);
    assert!(
        !mutex.acquire_timeout(Duration::ZERO).unwrap(),
        "zklock took a lease the SQL client holds"
    );
    // The SQL client's lease runs out after 1.5 s: zklock takes it over, with the next token.
    assert!(mutex.acquire_timeout(patience()).unwrap());
    assert_eq!(mutex.fencing_token().unwrap(), sql_token + 1);
    mutex.release().unwrap();
}

/// Tokens rise across successive holders, a restart of the server and a kill -9 of it: the
/// version is in an InnoDB row, committed before the grant is answered.
#[test]
fn tokens_rise_across_restart_and_kill() {
    let mut server = TestingMariaDb::start().expect("mariadbd starts");
    let mut last = 0;
    for round in 0..3 {
        let c = client(&server, Duration::from_secs(10));
        let mutex = MySqlMutex::new(&c, "tokens").unwrap();
        for _ in 0..3 {
            assert!(mutex.acquire_timeout(patience()).unwrap());
            let token = mutex.fencing_token().unwrap();
            assert!(token > last, "round {round}: {token} after {last}");
            last = token;
            mutex.release().unwrap();
        }
        c.close();
        match round {
            0 => server.restart().unwrap(),
            1 => {
                server.kill().unwrap();
                server.restart().unwrap();
            }
            _ => {}
        }
    }
    assert_eq!(last, 9);
}

/// The table mode has mutexes and leader latches only: the other recipes are refused with a
/// clear error, and the mode is read from the URL or the builder (the builder's wins), a bad
/// one refused.
#[test]
fn recipes_and_modes() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let c = client(&server, Duration::from_secs(10));
    for refused in [
        zklock::mysql::MySqlSemaphore::new(&c, "sem", 2).map(|_| ()),
        zklock::mysql::MySqlReadWriteLock::new(&c, "rw").map(|_| ()),
    ] {
        match refused {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("table mode"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    // A latch leads on the mutex's record of the same name: the mutex waits until it closes.
    let latch = zklock::mysql::MySqlLeaderLatch::start(&c, "leader").unwrap();
    assert!(latch.await_leadership_timeout(patience()).unwrap());
    let epoch = latch.epoch().unwrap();
    let mutex = MySqlMutex::new(&client(&server, Duration::from_secs(10)), "leader").unwrap();
    assert!(!mutex.acquire_timeout(Duration::from_millis(300)).unwrap());
    latch.close();
    assert!(mutex.acquire_timeout(patience()).unwrap());
    assert!(mutex.fencing_token().unwrap() > epoch);
    mutex.release().unwrap();
    let any = zklock::connect(&format!("{}?lock_mode=table", server.url())).unwrap();
    assert!(matches!(
        any.semaphore("sem", 2),
        Err(Error::InvalidArgument(_))
    ));
    let back = MySqlClient::builder(&format!("{}?lock_mode=table", server.url()))
        .mode(MySqlMode::GetLock)
        .connect()
        .unwrap();
    assert_eq!(back.mode(), MySqlMode::GetLock);
    assert_eq!(
        MySqlClient::connect(&server.url()).unwrap().mode(),
        MySqlMode::GetLock
    );
    match MySqlClient::connect(&format!("{}?lock_mode=advisory", server.url())) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("lock_mode"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// The cost of waiting: each waiter reads the record once per poll interval (give or take a
/// fifth), one primary-key `SELECT`. Four waiters for 3 s on a held lock, at the default
/// 100 ms and at 20 ms: the server's `Com_select` count, per waiter per second.
#[test]
fn polling_costs_one_select_per_interval_per_waiter() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let selects = || -> u64 {
        server
            .root_sql("SHOW GLOBAL STATUS LIKE 'Com_select'")
            .unwrap()[0][1]
            .parse()
            .unwrap()
    };
    let holder = client(&server, Duration::from_secs(10));
    let held = MySqlMutex::new(&holder, "busy").unwrap();
    assert!(held.acquire_timeout(Duration::ZERO).unwrap());
    for poll in [Duration::from_millis(100), Duration::from_millis(20)] {
        let waiters: Vec<MySqlMutex> = (0..4)
            .map(|_| {
                let c = MySqlClient::builder(&format!("{}?lock_mode=table", server.url()))
                    .poll_interval(poll)
                    .connect()
                    .unwrap();
                MySqlMutex::new(&c, "busy").unwrap()
            })
            .collect();
        let before = selects();
        let t = Instant::now();
        thread::scope(|s| {
            for w in &waiters {
                s.spawn(move || assert!(!w.acquire_timeout(Duration::from_secs(3)).unwrap()));
            }
        });
        // The root session's own SHOW counts as one.
        let counted = selects() - before - 1;
        let rate = counted as f64 / t.elapsed().as_secs_f64() / 4.0;
        println!(
            "poll interval {poll:?}: {counted} SELECTs by 4 waiters in {:?}: {rate:.1} per \
             waiter per second (expected {:.1})",
            t.elapsed(),
            1.0 / poll.as_secs_f64()
        );
        // The cost is the claim: never more than one look per interval (give or take a fifth);
        // a loaded machine can only make the waiters look less often, so the floor is loose
        // (at least one look a second).
        let expected = 1.0 / poll.as_secs_f64();
        assert!(
            rate >= 1.0 && rate < expected * 1.5,
            "{rate:.1} per waiter per second at {poll:?}"
        );
    }
    held.release().unwrap();
}

/// A hold is a row, not a session: it outlives a restart of the server shorter than its lease.
/// The keeper's next renewal goes through a new connection, the hold reads `Held` again, no
/// other Client can take it meanwhile, and its release is confirmed.
#[test]
fn a_hold_outlives_a_server_restart() {
    let mut server = TestingMariaDb::start().expect("mariadbd starts");
    let c = client(&server, Duration::from_secs(12));
    let mutex = MySqlMutex::new(&c, "restart").unwrap();
    assert!(mutex.acquire_timeout(Duration::ZERO).unwrap());
    let token = mutex.fencing_token().unwrap();
    let t = Instant::now();
    server.restart().unwrap();
    println!("restarted in {:?}", t.elapsed());
    let other = MySqlMutex::new(&client(&server, Duration::from_secs(12)), "restart").unwrap();
    assert!(
        !other.acquire_timeout(Duration::from_millis(300)).unwrap(),
        "taken while the lease runs"
    );
    // A renewal comes every third of the lease (4 s): after two of them the hold is Held.
    thread::sleep(Duration::from_secs(9));
    assert_eq!(mutex.health(), Some(LockHealth::Held));
    assert_eq!(mutex.fencing_token(), Some(token));
    mutex.release().unwrap();
    assert!(other.acquire_timeout(patience()).unwrap());
    assert_eq!(other.fencing_token(), Some(token + 1));
    other.release().unwrap();
}

/// Four Clients, one thread each, looping on the lock (1 ms inside) for 4 s: a thread that
/// releases and at once asks again finds the others queued and waits its turn, so each Client
/// gets at least a tenth of a fair share (a quarter of all acquisitions), the lock changes
/// Clients, and the sections never overlap and carry rising tokens.
#[test]
fn a_looping_thread_does_not_starve_the_other_clients() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let mutexes: Vec<MySqlMutex> = (0..4)
        .map(|_| MySqlMutex::new(&client(&server, Duration::from_secs(10)), "loop").unwrap())
        .collect();
    let last = Mutex::new(usize::MAX);
    let handoffs = AtomicUsize::new(0);
    let log = Sections::default();
    let until = Instant::now() + Duration::from_secs(4);
    let counts: Vec<usize> = thread::scope(|s| {
        let threads: Vec<_> = mutexes
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let (last, handoffs, log) = (&last, &handoffs, &log);
                s.spawn(move || {
                    let mut n = 0;
                    while Instant::now() < until {
                        let Some(guard) = m.try_lock_for(Duration::from_secs(2)).unwrap() else {
                            continue;
                        };
                        if std::mem::replace(&mut *last.lock(), i) != i {
                            handoffs.fetch_add(1, Ordering::SeqCst);
                        }
                        log.run(guard.fencing_token());
                        drop(guard);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let handoffs = handoffs.load(Ordering::SeqCst);
    let total: usize = counts.iter().sum();
    let shares: Vec<String> = counts
        .iter()
        .map(|&n| format!("{:.2}", n as f64 * 4.0 / total.max(1) as f64))
        .collect();
    println!(
        "acquisitions per Client in 4 s: {counts:?} (of a fair share: {shares:?}), hand-overs \
         between Clients: {handoffs}"
    );
    log.check(total);
    assert!(
        counts.iter().all(|&n| n * 40 >= total),
        "a Client got less than a tenth of a fair share: {counts:?}"
    );
    assert!(handoffs >= 3, "{handoffs} hand-overs in 4 s");
}

/// A waiter that queued is not overtaken by a newcomer: with the lock held, A queues; a
/// newcomer B that arrives after A, finds the lock free at the release and tries (without
/// waiting) finds A ahead and is refused, and A takes the lock.
#[test]
fn a_newcomer_does_not_overtake_a_queued_waiter() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let holder = MySqlMutex::new(&client(&server, Duration::from_secs(10)), "queue").unwrap();
    let a = MySqlMutex::new(&client(&server, Duration::from_secs(10)), "queue").unwrap();
    let b = MySqlMutex::new(&client(&server, Duration::from_secs(10)), "queue").unwrap();
    assert!(holder.acquire_timeout(Duration::ZERO).unwrap());
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            assert!(a.acquire_timeout(patience()).unwrap());
            let token = a.fencing_token().unwrap();
            a.release().unwrap();
            token
        });
        // A has queued once its row is in the table.
        wait_for("A's queue row", || {
            server
                .root_sql(
                    "SELECT COUNT(*) FROM zklock.zklock_lock_queue WHERE expire_time >= NOW(6)",
                )
                .is_ok_and(|rows| rows[0][0] != "0")
        });
        holder.release().unwrap();
        // Until A takes it, a newcomer's tries are refused.
        let mut refused = 0;
        while !waiter.is_finished() {
            if b.acquire_timeout(Duration::ZERO).unwrap() {
                assert!(waiter.is_finished(), "B overtook A, which was queued");
                b.release().unwrap();
                break;
            }
            refused += 1;
        }
        let token = waiter.join().unwrap();
        println!("B refused {refused} times before A took the lock (token {token})");
        assert_eq!(token, 2);
    });
}

/// A primary and its replica (semi-synchronous with a timeout of `semi_sync`, if given), and
/// a Client of the primary with a lease of `session` and its mutex `name`, held and released
/// three times: the record's version is 3.
fn replicated(
    semi_sync: Option<Duration>,
    name: &str,
    session: Duration,
) -> (TestingMariaDb, TestingMariaDb, MySqlClient, MySqlMutex) {
    let (primary, replica) = match semi_sync {
        Some(timeout) => TestingMariaDb::start_with_semi_sync_replica(timeout),
        None => TestingMariaDb::start_with_replica(),
    }
    .expect("mariadbd pair");
    let a = client(&primary, session);
    let mutex = MySqlMutex::new(&a, name).unwrap();
    for _ in 0..3 {
        assert!(mutex.acquire_timeout(patience()).unwrap());
        mutex.release().unwrap();
    }
    (primary, replica, a, mutex)
}

/// Lets `replica` catch up with `primary`, then stops its replication: what the primary
/// writes next does not reach it.
fn cut_off(primary: &TestingMariaDb, replica: &TestingMariaDb) {
    replica.catch_up(primary).unwrap();
    replica.stop_replication().unwrap();
}

/// Kills `primary`, promotes `replica` and connects a Client there (lease `session`) with a
/// mutex `name`: the Client, the mutex, and when the kill was.
fn fail_over(
    primary: &mut TestingMariaDb,
    replica: &TestingMariaDb,
    name: &str,
    session: Duration,
) -> (MySqlClient, MySqlMutex, Instant) {
    primary.kill().unwrap();
    let killed = Instant::now();
    replica.promote().unwrap();
    let b = client(replica, session);
    let other = MySqlMutex::new(&b, name).unwrap();
    (b, other, killed)
}

/// `other`, on the new primary, is granted at once: its token, released.
fn granted_at_once(other: &MySqlMutex) -> u64 {
    assert!(other.acquire_timeout(Duration::ZERO).unwrap());
    let token = other.fencing_token().unwrap();
    other.release().unwrap();
    token
}

/// `other`, on the new primary, is refused while the lost holder's lease (`session`, token
/// `held`) runs and granted after it with the next token; `what` names the run in the output.
fn refused_until_the_lease_ends(
    other: &MySqlMutex,
    killed: Instant,
    session: Duration,
    held: u64,
    what: &str,
) {
    assert!(
        !other.acquire_timeout(Duration::ZERO).unwrap(),
        "{what}: granted at once after the failover, {:?} after the kill",
        killed.elapsed()
    );
    let refused = killed.elapsed();
    assert!(other.acquire_timeout(patience() + session).unwrap());
    let token = other.fencing_token().unwrap();
    println!(
        "{what}: refused {refused:?} after the kill; granted {:?} after it (lease \
         {session:?}), token {token} after the lost holder's {held}",
        killed.elapsed()
    );
    assert_eq!(token, held + 1);
    other.release().unwrap();
}

/// A failover to a replica (MariaDB binlog replication, the replica promoted by hand after a
/// kill -9 of the primary): a lease record that reached the replica is still there, held
/// until it expires by the new primary's clock, and the next grant's token is above the lost
/// holder's — the version is a column of the replicated row.
#[test]
fn failover_keeps_a_replicated_lease_until_it_expires() {
    let session = Duration::from_secs(20);
    let (mut primary, replica, a, mutex) = replicated(None, "failover", session);
    assert!(mutex.acquire_timeout(patience()).unwrap());
    let held = mutex.fencing_token().unwrap();
    replica.catch_up(&primary).unwrap();
    let (b, other, killed) = fail_over(&mut primary, &replica, "failover", session);
    // The record came with the row: its lease (20 s from the last renewal, at most 7 s
    // before the kill) still holds on the new primary.
    refused_until_the_lease_ends(&other, killed, session, held, "asynchronous");
    b.close();
    drop(a);
}

/// The same failover when the grant had not reached the replica (its replication stopped
/// first, as a lagging replica would be): the new primary has no record of it, so a second
/// Client is granted at once while the first still believes it holds, and with the same
/// token — the version restarts from the replica's. The documented limit of the table mode
/// on asynchronous replication.
#[test]
fn failover_to_a_replica_that_missed_the_grant_grants_it_again() {
    let session = Duration::from_secs(20);
    let (mut primary, replica, a, mutex) = replicated(None, "lagging", session);
    cut_off(&primary, &replica);
    assert!(mutex.acquire_timeout(patience()).unwrap());
    let held = mutex.fencing_token().unwrap();
    let (b, other, _) = fail_over(&mut primary, &replica, "lagging", session);
    let token = granted_at_once(&other);
    println!("second grant with token {token}; the lost holder's is {held}");
    assert_eq!((held, token), (4, 4));
    b.close();
    drop(a);
}

/// The failover on semi-synchronous replication (`AFTER_SYNC`): a grant is answered only once
/// the replica has it in its relay log, so a primary killed right after a grant leaves the
/// record on the replica even when the replica had not applied it yet (its SQL thread is
/// stopped here): the promotion applies the relay log first, and a contender on the new
/// primary is refused while the lost holder's lease runs and granted after it, with the next
/// token.
#[test]
fn semi_sync_failover_keeps_an_answered_grant() {
    let session = Duration::from_secs(8);
    let (mut primary, replica, a, mutex) =
        replicated(Some(Duration::from_secs(60)), "semisync", session);
    // The replica receives and acknowledges, but does not apply.
    replica.root_sql("STOP SLAVE SQL_THREAD").unwrap();
    assert!(mutex.acquire_timeout(patience()).unwrap());
    let held = mutex.fencing_token().unwrap();
    let (b, other, killed) = fail_over(&mut primary, &replica, "semisync", session);
    refused_until_the_lease_ends(&other, killed, session, held, "semi-sync");
    b.close();
    drop(a);
}

/// Semi-synchronous replication with the replica's replication stopped (a replica cut off):
/// the primary does not answer a take the replica has not acknowledged, so the Client on the
/// primary is not granted; after a failover to the replica a Client there is granted at once,
/// with the token the unanswered take would have had — and nobody held before it.
#[test]
fn semi_sync_answers_no_grant_the_replica_lacks() {
    let session = Duration::from_secs(8);
    let (mut primary, replica, a, mutex) =
        replicated(Some(Duration::from_secs(60)), "cutoff", session);
    cut_off(&primary, &replica);
    let t = Instant::now();
    let got = mutex.acquire_timeout(Duration::from_secs(2));
    println!(
        "semi-sync, the replica stopped: the take on the primary returned {:?} after {:?}",
        got.as_ref().map_err(common::chain),
        t.elapsed()
    );
    assert!(!matches!(got, Ok(true)), "granted without the replica");
    assert_eq!(mutex.health(), None);
    let (b, other, _) = fail_over(&mut primary, &replica, "cutoff", session);
    assert_eq!(granted_at_once(&other), 4);
    b.close();
    drop(a);
}

/// Semi-synchronous replication gives up waiting after its timeout: with the replica's
/// replication stopped and a timeout of 1 s, the primary answers the take after that second
/// (and goes on asynchronously), so the grant is given without the replica — and after a
/// failover it is given again with the same token, as on asynchronous replication.
#[test]
fn semi_sync_past_its_timeout_is_asynchronous() {
    let session = Duration::from_secs(20);
    let (mut primary, replica, a, mutex) =
        replicated(Some(Duration::from_secs(1)), "timeout", session);
    cut_off(&primary, &replica);
    let t = Instant::now();
    assert!(mutex.acquire_timeout(patience()).unwrap());
    let held = mutex.fencing_token().unwrap();
    println!(
        "semi-sync with a 1 s timeout, the replica stopped: granted after {:?}",
        t.elapsed()
    );
    let (b, other, _) = fail_over(&mut primary, &replica, "timeout", session);
    assert_eq!((held, granted_at_once(&other)), (4, 4));
    b.close();
    drop(a);
}

/// The database's clock stepping under a table lease (`TestingMariaDb` with a stepped clock,
/// lease 30 s, so renewals 10 s apart): an hour forward expires the record at once — another
/// Client is granted it — and the holder reads `Lost` within the keeper's next clock reading
/// (at most 500 ms apart) rather than at its next renewal; an hour back keeps a hold, which
/// reads `Suspended` for a renewal period, then `Held`.
#[test]
fn a_step_of_the_databases_clock_is_seen_before_the_next_renewal() {
    let server = TestingMariaDb::start_with_stepped_clock().expect("mariadbd starts");
    let c = client(&server, Duration::from_secs(30));
    let m = MySqlMutex::new(&c, "clock").unwrap();
    assert!(m.acquire_timeout(Duration::ZERO).unwrap());
    // The keeper has read the clock at least once (every 500 ms: the step falls between two
    // readings).
    thread::sleep(Duration::from_millis(1250));
    server.set_clock_ahead(Duration::from_secs(3600)).unwrap();
    let stepped = Instant::now();
    let other = MySqlMutex::new(&client(&server, Duration::from_secs(30)), "clock").unwrap();
    assert!(
        other.acquire_timeout(patience()).unwrap(),
        "the record expired at once"
    );
    let granted = stepped.elapsed();
    wait_for("the holder to read Lost", || {
        m.health() == Some(LockHealth::Lost)
    });
    let lost = stepped.elapsed();
    println!("an hour forward: another Client granted {granted:?} after the step, the holder Lost {lost:?} after it");
    assert!(matches!(m.release(), Err(Error::LockLost)));
    other.release().unwrap();
    // An hour back, under the hold of a new Client (the first one doubts its clock readings
    // for a renewal period after the first step).
    let m = MySqlMutex::new(&client(&server, Duration::from_secs(30)), "clock").unwrap();
    assert!(m.acquire_timeout(patience()).unwrap());
    thread::sleep(Duration::from_millis(1250));
    assert_eq!(m.health(), Some(LockHealth::Held));
    server.set_clock_ahead(Duration::ZERO).unwrap();
    let stepped = Instant::now();
    wait_for("the holder to read Suspended", || {
        m.health() == Some(LockHealth::Suspended)
    });
    let suspended = stepped.elapsed();
    wait_for("the holder to read Held again", || {
        m.health() == Some(LockHealth::Held)
    });
    println!(
        "an hour back: Suspended {suspended:?} after the step, Held again {:?} after it",
        stepped.elapsed()
    );
    m.release().unwrap();
}

/// A table-mode hold across restarts and kills (-9) of the server, alternately: after each, a
/// renewal reaches the server (the record's expiry moves on), the hold reads `Held` with the
/// same token, another Client is refused meanwhile, and a release and a new grant give the
/// next token. `ZKLOCK_MYSQL_RESTART_ROUNDS` rounds (default 2: one restart, one kill).
#[test]
fn renewals_and_tokens_across_restarts_and_kills() {
    let rounds: usize = std::env::var("ZKLOCK_MYSQL_RESTART_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let mut server = TestingMariaDb::start().expect("mariadbd starts");
    // Renewals every 4 s.
    let c = client(&server, Duration::from_secs(12));
    let mutex = MySqlMutex::new(&c, "rounds").unwrap();
    let other = MySqlMutex::new(&client(&server, Duration::from_secs(12)), "rounds").unwrap();
    let expiry = |server: &TestingMariaDb| {
        server
            .root_sql(
                "SELECT expire_time FROM zklock.zklock_lock_record WHERE lock_name = 'rounds'",
            )
            .ok()
            .and_then(|rows| rows.first().map(|r| r[0].clone()))
    };
    assert!(mutex.acquire_timeout(patience()).unwrap());
    let mut token = mutex.fencing_token().unwrap();
    let mut passed = 0;
    for round in 0..rounds {
        let before = expiry(&server);
        let t = Instant::now();
        if round % 2 == 0 {
            server.restart().unwrap();
        } else {
            server.kill().unwrap();
            server.restart().unwrap();
        }
        let down = t.elapsed();
        assert!(
            !other.acquire_timeout(Duration::ZERO).unwrap_or(false),
            "round {round}: taken while the lease runs"
        );
        let end = Instant::now() + patience();
        while expiry(&server) == before {
            assert!(
                Instant::now() < end,
                "round {round}: no renewal {:?} after the restart (down {down:?}); the hold \
                 reads {:?}, the Client {:?}, the record's expiry {:?}",
                t.elapsed(),
                mutex.health(),
                c.state(),
                expiry(&server)
            );
            thread::sleep(Duration::from_millis(25));
        }
        let renewed = t.elapsed();
        wait_for("the hold to read Held", || {
            mutex.health() == Some(LockHealth::Held)
        });
        assert_eq!(mutex.fencing_token(), Some(token), "round {round}");
        mutex.release().unwrap();
        assert!(mutex.acquire_timeout(patience()).unwrap());
        let next = mutex.fencing_token().unwrap();
        assert_eq!(next, token + 1, "round {round}");
        token = next;
        passed += 1;
        println!(
            "round {round} ({}): down {down:?}, renewed {renewed:?} after, token {token}",
            if round % 2 == 0 { "restart" } else { "kill -9" }
        );
    }
    println!("{passed}/{rounds} rounds passed");
    mutex.release().unwrap();
}
