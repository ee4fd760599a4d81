//! The MySQL backend on a real MariaDB: what the conformance suite does not cover (the SQL any
//! client runs, a killed session, tokens across restarts and the holders' tokens shown,
//! refusals with their cause).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{patience, wait_for};
use zklock::mysql::{MySqlClient, MySqlLeaderLatch, MySqlMutex, MySqlParticipant, MySqlSemaphore};
use zklock::testing::TestingMariaDb;
use zklock::{Error, LockHealth};

fn client(server: &TestingMariaDb, session: Duration) -> MySqlClient {
    MySqlClient::builder(&server.url())
        .session_timeout(session)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .expect("connect")
}

/// A `mariadb` client session running `lock_sql()` and a zklock holder exclude each other,
/// also for a name over 64 characters (hashed by the server) and one with a quote.
#[test]
fn a_sql_client_and_zklock_exclude_each_other() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let c = client(&server, Duration::from_secs(30));
    for name in ["ledger", "it's \\ a name", &"long-".repeat(20)] {
        let mutex = MySqlMutex::new(&c, name).unwrap();
        let sql = mutex.lock_sql();
        // zklock holds: the SQL client is refused.
        assert!(mutex.acquire_timeout(Duration::ZERO).unwrap());
        let try_sql = sql.replace(", 31536000)", ", 0)");
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", server.socket().display()))
            .args(["-uroot", "-N", "-B", "-e", &try_sql])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "0",
            "{name}: {try_sql}"
        );
        mutex.release().unwrap();
        // The SQL client holds (and sleeps): zklock is refused until it lets go.
        let mut holder = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", server.socket().display()))
            .args(["-uroot", "-N", "-B", "-e"])
            .arg(format!("{sql}; DO SLEEP(600)"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the SQL client holds", || {
            let got = mutex.acquire_timeout(Duration::ZERO).unwrap();
            if got {
                mutex.release().unwrap();
            }
            !got
        });
        holder.kill().unwrap();
        let _ = holder.wait();
        let t = Instant::now();
        assert!(mutex.acquire_timeout(patience()).unwrap(), "{name}");
        println!(
            "{name:?}: taken {:?} after the SQL client was killed",
            t.elapsed()
        );
        mutex.release().unwrap();
    }
}

/// Names that differ only in bytes MariaDB or a collation would merge are distinct locks, and
/// every name of 1 to 1024 bytes can be taken (a 256-byte name of four-byte characters too).
#[test]
fn distinct_names_are_distinct_locks() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let (a, b) = (
        client(&server, Duration::from_secs(30)),
        client(&server, Duration::from_secs(30)),
    );
    common::mysql::distinct_names_are_distinct_locks(&a, &b);
}

/// `Duration::MAX` and `Duration::ZERO` for every option and every call, in both modes: an
/// option out of range is refused with `InvalidArgument`, every other value works — nothing
/// panics, nothing hangs.
#[test]
fn extreme_durations_are_refused_or_work() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    for url in [server.url(), format!("{}?lock_mode=table", server.url())] {
        let refused = |b: zklock::mysql::MySqlClientBuilder, what: &str| match b.connect() {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("{url}: {what}: {other:?}"),
        };
        let b = || MySqlClient::builder(&url);
        refused(b().session_timeout(Duration::ZERO), "session_timeout(ZERO)");
        refused(b().session_timeout(Duration::MAX), "session_timeout(MAX)");
        refused(b().connect_timeout(Duration::ZERO), "connect_timeout(ZERO)");
        refused(
            b().operation_timeout(Duration::ZERO),
            "operation_timeout(ZERO)",
        );
        refused(b().poll_interval(Duration::ZERO), "poll_interval(ZERO)");
        refused(b().poll_interval(Duration::MAX), "poll_interval(MAX)");
        let builders = [
            ("connect_timeout(MAX)", b().connect_timeout(Duration::MAX)),
            (
                "operation_timeout(MAX)",
                b().operation_timeout(Duration::MAX),
            ),
            (
                "both MAX",
                b().connect_timeout(Duration::MAX)
                    .operation_timeout(Duration::MAX),
            ),
        ];
        for (what, builder) in builders {
            let c = builder.connect().unwrap_or_else(|e| panic!("{what}: {e}"));
            let table = url.contains("lock_mode=table");
            let m = MySqlMutex::new(&c, "durations").unwrap();
            let other = MySqlMutex::new(&c, "durations").unwrap();
            // A bounded wait beside them: its bound plus the operation timeout.
            for t in [Duration::MAX, Duration::ZERO, Duration::from_secs(1)] {
                assert!(
                    m.acquire_timeout(t).unwrap(),
                    "{what}: acquire_timeout({t:?})"
                );
                for wait in [Duration::ZERO, Duration::from_millis(50)] {
                    assert!(!other.acquire_timeout(wait).unwrap(), "{what}: {wait:?}");
                }
                m.release_timeout(t).unwrap();
                let guard = m.try_lock_for(t).unwrap().expect("free");
                guard.release_timeout(t).unwrap();
            }
            let latch = MySqlLeaderLatch::start(&c, "durations-latch").unwrap();
            assert!(
                latch.await_leadership_timeout(Duration::MAX).unwrap(),
                "{what}"
            );
            assert!(
                latch.await_leadership_timeout(Duration::ZERO).unwrap(),
                "{what}"
            );
            latch.close();
            if !table {
                let pool = MySqlSemaphore::new(&c, "durations-pool", 1).unwrap();
                let lease = pool.acquire_timeout(Duration::MAX).unwrap().expect("free");
                for wait in [Duration::ZERO, Duration::from_millis(50)] {
                    assert!(pool.acquire_timeout(wait).unwrap().is_none(), "{what}");
                }
                lease.release_timeout(Duration::MAX).unwrap();
                let lease = pool.acquire_timeout(Duration::ZERO).unwrap().expect("free");
                lease.release_timeout(Duration::ZERO).unwrap();
            }
            c.close();
        }
    }
}

/// A mutex bumps its fencing token only when it is asked for, on the holding session: holds
/// that never read it write nothing; the token read is kept, rises from holder to holder
/// (also over holds that did not read theirs), and cannot be read once the session is gone.
#[test]
fn a_mutex_reads_its_token_only_when_asked_for() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let c = client(&server, Duration::from_secs(30));
    let mutex = MySqlMutex::new(&c, "token-when-asked").unwrap();
    let counter = || -> u64 {
        let rows = server
            .root_sql(
                "SELECT COALESCE(MAX(token), 0) FROM zklock.zklock_tokens \
                 WHERE name = 'token-when-asked'",
            )
            .unwrap();
        rows[0][0].parse().unwrap()
    };
    let mut tokens = Vec::new();
    for round in 0..3 {
        let before = counter();
        for _ in 0..10 {
            mutex.lock().unwrap().release().unwrap();
        }
        assert_eq!(
            counter(),
            before,
            "round {round}: holds without their token wrote"
        );
        for _ in 0..10 {
            let guard = mutex.lock().unwrap();
            let token = guard.fencing_token();
            assert_eq!(guard.fencing_token(), token, "read once, then kept");
            assert_eq!(mutex.fencing_token(), Some(token));
            tokens.push(token);
            guard.release().unwrap();
        }
        assert_eq!(
            counter(),
            before + 10,
            "round {round}: one bump per token read"
        );
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // A hold whose session is gone has no token to give: 0, which every fence refuses.
    let guard = mutex.lock().unwrap();
    let id = mutex.connection_id().unwrap();
    assert!(server.kill_session(u64::from(id)).unwrap());
    wait_for("Lost", || guard.health() == LockHealth::Lost);
    assert_eq!(mutex.fencing_token(), None);
    assert_eq!(guard.fencing_token(), 0);
    assert!(matches!(guard.release(), Err(Error::LockLost)));
}

/// `KILL <session>` of the holder's session: its hold reads `Lost` within a watch tick, and
/// another takes the lock at once.
#[test]
fn a_killed_session_reads_lost() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let (a, b) = (
        client(&server, Duration::from_secs(4)),
        client(&server, Duration::from_secs(4)),
    );
    let mutex = MySqlMutex::new(&a, "killed").unwrap();
    let other = MySqlMutex::new(&b, "killed").unwrap();
    assert!(mutex.acquire_timeout(Duration::ZERO).unwrap());
    let id = mutex.connection_id().unwrap();
    assert_eq!(server.lock_holder("killed").unwrap(), Some(u64::from(id)));
    let token = mutex.fencing_token().unwrap();
    let killed = Instant::now();
    assert!(server.kill_session(u64::from(id)).unwrap());
    wait_for("Lost", || mutex.health() == Some(LockHealth::Lost));
    let lost = killed.elapsed();
    assert!(other.acquire_timeout(patience()).unwrap());
    println!("KILL {id}: Lost after {lost:?}");
    // A watch tick is a twentieth of the session timeout (200 ms here).
    assert!(lost < Duration::from_secs(2), "Lost after {lost:?}");
    assert!(other.fencing_token().unwrap() > token);
    assert_eq!(mutex.release(), Err(Error::LockLost));
    other.release().unwrap();
}

/// Tokens rise across successive holders, across a restart of the server and across a kill -9
/// of it (the counter is committed before the grant is answered).
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

/// Bad input is refused with its cause, before any lock is touched.
#[test]
fn bad_connections_are_refused_with_their_cause() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let cause = |url: &str| match MySqlClient::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .connect()
    {
        Err(Error::ConnectFailed { cause, .. }) => *cause,
        other => panic!("{url}: {other:?}"),
    };
    // Nothing listens on port 9 of loopback.
    let unreachable = cause("mysql://zklock:pw@127.0.0.1:9/zklock");
    assert!(matches!(unreachable, Error::Io { .. }), "{unreachable:?}");
    let wrong = cause(&server.url_as("zklock", "wrong", "zklock"));
    assert!(matches!(wrong, Error::AuthFailed(_)), "{wrong:?}");
    let unknown = cause(&server.url_as("zklock", server.password(), "nosuchdb"));
    assert!(
        matches!(&unknown, Error::MySql(why) if why.contains("nosuchdb")),
        "{unknown:?}"
    );
    let c = client(&server, Duration::from_secs(10));
    assert!(matches!(
        MySqlMutex::new(&c, &"x".repeat(1025)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        MySqlClient::builder(&server.url())
            .session_timeout(Duration::ZERO)
            .connect(),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(server.lock_holder("x").unwrap(), None);
}

/// The read-write lock has neither downgrade nor upgrade on MySQL, and says so; a writer's
/// token is above the readers' before it.
#[test]
fn read_write_refuses_downgrade_and_upgrade() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let c = client(&server, Duration::from_secs(10));
    let rw = zklock::mysql::MySqlReadWriteLock::new(&c, "catalogue").unwrap();
    assert!(rw.read_lock().acquire_timeout(patience()).unwrap());
    let read_token = rw.read_lock().fencing_token().unwrap();
    assert_eq!(
        rw.write_lock().acquire_timeout(Duration::ZERO),
        Err(Error::WouldDeadlock)
    );
    rw.read_lock().release().unwrap();
    assert!(rw.write_lock().acquire_timeout(patience()).unwrap());
    assert!(rw.write_lock().fencing_token().unwrap() > read_token);
    assert!(matches!(
        rw.read_lock().acquire_timeout(Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
    rw.write_lock().release().unwrap();
    assert!(rw
        .read_lock()
        .lock_sql()
        .contains("GET_LOCK('catalogue;r64', 0)"));
}

/// A release the server confirmed leaves a session that holds nothing: the next acquisition of
/// the Client waits on it rather than opening a connection. One the server has ended meanwhile
/// (`KILL`) is not used again. A writer's session (which holds every reader name) is not
/// reused.
#[test]
fn a_released_session_is_reused() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let c = client(&server, Duration::from_secs(10));
    let mutex = MySqlMutex::new(&c, "reused").unwrap();
    let session = |m: &MySqlMutex| {
        assert!(m.acquire_timeout(patience()).unwrap());
        let id = m.connection_id().unwrap();
        m.release().unwrap();
        id
    };
    let first = session(&mutex);
    assert_eq!(
        session(&mutex),
        first,
        "the released session was not reused"
    );
    assert!(server.kill_session(u64::from(first)).unwrap());
    thread_sleep_a_moment();
    let after_kill = session(&mutex);
    assert_ne!(after_kill, first, "a killed session was used again");
    assert_eq!(session(&mutex), after_kill);
    let rw = zklock::mysql::MySqlReadWriteLock::new(&c, "reused-rw").unwrap();
    let write = |w: &zklock::mysql::MySqlWriteLock| {
        assert!(w.acquire_timeout(patience()).unwrap());
        let id = w.connection_id().unwrap();
        w.release().unwrap();
        id
    };
    let writer = write(rw.write_lock());
    let next = write(rw.write_lock());
    assert_ne!(next, writer, "a writer's session was reused");
    // Nothing of the writer's is held any more: another Client reads at once.
    let other = client(&server, Duration::from_secs(10));
    let theirs = zklock::mysql::MySqlReadWriteLock::new(&other, "reused-rw").unwrap();
    assert!(theirs.read_lock().acquire_timeout(Duration::ZERO).unwrap());
    theirs.read_lock().release().unwrap();
}

/// A URL with `socket=` connects through the server's Unix socket (the server sees the session
/// from `localhost`), holds and excludes as on TCP, and a hold whose session is killed reads
/// `Lost`; a URL without it stays on TCP even to a loopback address (the `mysql` crate's own
/// default would switch to a local socket).
#[test]
fn a_socket_url_connects_through_the_unix_socket_and_a_tcp_url_stays_on_tcp() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let host_of = |id: u32| {
        server
            .root_sql(&format!(
                "SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = {id}"
            ))
            .unwrap()[0][0]
            .clone()
    };
    let url = format!("{}?socket={}", server.url(), server.socket().display());
    let on_socket = MySqlClient::builder(&url)
        .session_timeout(Duration::from_secs(10))
        .connect()
        .expect("connects through the socket");
    let on_tcp = client(&server, Duration::from_secs(10));
    let mine = MySqlMutex::new(&on_socket, "by-socket").unwrap();
    let theirs = MySqlMutex::new(&on_tcp, "by-socket").unwrap();
    assert!(mine.acquire_timeout(patience()).unwrap());
    let host = host_of(mine.connection_id().unwrap());
    println!("a socket URL's session comes from {host:?}");
    assert_eq!(host, "localhost", "not on the Unix socket");
    assert!(!theirs.acquire_timeout(Duration::ZERO).unwrap());
    mine.release().unwrap();
    assert!(theirs.acquire_timeout(patience()).unwrap());
    let host = host_of(theirs.connection_id().unwrap());
    println!("a TCP URL's session comes from {host:?}");
    assert!(host.starts_with("127.0.0.1:"), "not on TCP: {host}");
    theirs.release().unwrap();
    // The watch of an idle held session works on a Unix socket too.
    assert!(mine.acquire_timeout(patience()).unwrap());
    assert!(server
        .kill_session(u64::from(mine.connection_id().unwrap()))
        .unwrap());
    wait_for("the killed hold reads Lost", || {
        mine.health() == Some(LockHealth::Lost)
    });
    assert!(theirs.acquire_timeout(patience()).unwrap());
    theirs.release().unwrap();
}

/// Time for the server to end a killed session's socket.
fn thread_sleep_a_moment() {
    std::thread::sleep(Duration::from_millis(200));
}

/// `participants` lists who holds and who waits: the holding connection, then a zklock waiter
/// of another Client and a SQL client waiting on `lock_sql()` (for a plain name and one over
/// 64 characters, which the server knows by its hash); a semaphore's lease; and in the table
/// mode the lease record, with its token.
#[test]
fn participants_show_the_holder_and_the_waiters() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let c = client(&server, Duration::from_secs(30));
    let other = client(&server, Duration::from_secs(30));
    for name in ["report".to_owned(), "long-".repeat(20)] {
        let mutex = MySqlMutex::new(&c, &name).unwrap();
        let guard = mutex.lock().unwrap();
        let held = c.participants(&name, 0).unwrap();
        assert_eq!(held.len(), 1, "{held:?}");
        assert!(held[0].holds && held[0].kind == "lock", "{held:?}");
        assert_eq!(held[0].user.as_deref(), Some("zklock"), "{held:?}");
        // A holder that has not asked for its token has none shown.
        assert_eq!(held[0].token, None, "{held:?}");
        let waiter = {
            let other = other.clone();
            let name = name.clone();
            std::thread::spawn(move || {
                let mutex = MySqlMutex::new(&other, &name).unwrap();
                let served = mutex.try_lock_for(patience()).unwrap().is_some();
                served
            })
        };
        let mut sql = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", server.socket().display()))
            .args(["-uroot", "-N", "-B", "-e", &mutex.lock_sql()])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("two waiters listed", || {
            c.participants(&name, 0)
                .unwrap()
                .iter()
                .filter(|p| !p.holds)
                .count()
                == 2
        });
        let listed = c.participants(&name, 0).unwrap();
        println!("{name}: {listed:#?}");
        assert!(listed[0].holds && listed[1..].iter().all(|p| !p.holds));
        let mut users: Vec<_> = listed[1..].iter().map(|p| p.user.clone()).collect();
        users.sort();
        assert_eq!(
            users,
            [Some("root".to_owned()), Some("zklock".to_owned())],
            "{listed:?}"
        );
        assert!(listed[1..].iter().all(|p| p.waiting.is_some()));
        drop(guard);
        // The SQL client exits once it holds, which lets the zklock waiter in.
        let _ = sql.wait();
        assert!(
            waiter.join().unwrap(),
            "{name}: the zklock waiter was served"
        );
        wait_for("nobody left", || {
            c.participants(&name, 0).unwrap().is_empty()
        });
    }

    let semaphore = MySqlSemaphore::new(&c, "pool", 3).unwrap();
    let lease = semaphore.acquire().unwrap();
    let listed = c.participants("pool", 3).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].kind, "lease");
    assert!(listed[0].holds && listed[0].lease.is_some(), "{listed:?}");
    assert_eq!(listed[0].token, Some(lease.fencing_token()), "{listed:?}");
    lease.release().unwrap();

    let table = MySqlClient::builder(&format!("{}?lock_mode=table", server.url()))
        .session_timeout(Duration::from_secs(30))
        .connect()
        .unwrap();
    let mutex = MySqlMutex::new(&table, "report").unwrap();
    let guard = mutex.lock().unwrap();
    let listed = table.participants("report", 0).unwrap();
    println!("table mode: {listed:#?}");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].token, Some(guard.fencing_token()));
    assert!(listed[0].owner.is_some() && listed[0].connection.is_none());
    assert!(listed[0]
        .expires_in
        .is_some_and(|left| left <= Duration::from_secs(30)));
    drop(guard);
    wait_for("the record expired", || {
        table.participants("report", 0).unwrap().is_empty()
    });
    assert!(matches!(
        c.participants("", 0),
        Err(Error::InvalidArgument(_))
    ));
}

/// Releases while a heartbeat (`GET_LOCK` mode) or a renewal (table mode) is out, made slow by
/// a proxy that holds every packet 40 ms: 200 releases in each mode — guards dropped, `release`,
/// and `release_timeout` of 20 ms, which ends the session rather than wait for the keeper's
/// heartbeat — and no hold reads `Lost`, no `Lost` event, and the Client never leaves
/// `Connected`.
#[test]
fn a_release_during_a_slow_renewal_is_not_a_loss() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use zklock::testing::FaultProxy;
    use zklock::ConnectionState;

    let server = TestingMariaDb::start().expect("mariadbd starts");
    let proxy = FaultProxy::start_raw(("127.0.0.1", server.port())).unwrap();
    let url = server.url().replace(
        &format!(":{}/", server.port()),
        &format!(":{}/", proxy.addr().port()),
    );
    assert_ne!(url, server.url());
    for table in [false, true] {
        let url = match table {
            true => format!("{url}?lock_mode=table"),
            false => url.clone(),
        };
        let c = MySqlClient::builder(&url)
            .session_timeout(Duration::from_secs(3))
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .expect("connect");
        let states = c.connection_states();
        proxy.delay(Duration::from_millis(40));
        let releases = AtomicUsize::new(0);
        let lost = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (c, releases, lost) = (&c, &releases, &lost);
                s.spawn(move || {
                    let mutex = MySqlMutex::new(c, &format!("slow-{t}")).unwrap();
                    let events = mutex.health_events();
                    for i in 0..50 {
                        let guard = mutex.lock().unwrap();
                        std::thread::sleep(Duration::from_millis(fastrand::u64(0..600)));
                        if guard.health() == LockHealth::Lost {
                            lost.fetch_add(1, Ordering::SeqCst);
                        }
                        match i % 3 {
                            0 => drop(guard),
                            1 => guard.release().unwrap(),
                            // Ends the session if the keeper is using it; an answer that
                            // does not come in time ends it too (which frees the lock).
                            _ => match guard.release_timeout(Duration::from_millis(20)) {
                                Ok(()) | Err(Error::Timeout | Error::ConnectionLoss) => {}
                                Err(e) => panic!("{e:?}"),
                            },
                        }
                        releases.fetch_add(1, Ordering::SeqCst);
                    }
                    // The keeper's reports come through the events thread.
                    std::thread::sleep(Duration::from_millis(500));
                    let events: Vec<_> = events.try_iter().collect();
                    let lost_events = events.iter().filter(|e| e.health == LockHealth::Lost);
                    lost.fetch_add(lost_events.count(), Ordering::SeqCst);
                });
            }
        });
        proxy.delay(Duration::ZERO);
        let changes: Vec<ConnectionState> = states.try_iter().collect();
        let (releases, lost) = (releases.into_inner(), lost.into_inner());
        println!("table mode {table}: {releases} releases, {lost} Lost, states {changes:?}");
        assert_eq!(releases, 200);
        assert_eq!(lost, 0, "a release during a renewal was reported Lost");
        assert!(
            changes.iter().all(|s| *s == ConnectionState::Connected),
            "the Client left Connected: {changes:?}"
        );
        assert!(c.is_connected());
        c.close();
    }
}

/// A guard dropped while the keeper's heartbeat waits on a frozen server (SIGSTOP) returns
/// within the drop bound (1 s) instead of waiting for the heartbeat's answer: its connection
/// is ended, which frees the lock once the server reads it. Session timeout 30 s: the
/// heartbeat goes out 10 s after connect and waits up to 5 s.
#[test]
fn a_drop_does_not_wait_for_the_heartbeat_on_a_frozen_server() {
    let mut server = TestingMariaDb::start().expect("mariadbd starts");
    let c = MySqlClient::builder(&server.url())
        .session_timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .unwrap();
    let connected = Instant::now();
    let mutex = MySqlMutex::new(&c, "frozen-drop").unwrap();
    let guard = mutex.lock().unwrap();
    server.pause().unwrap();
    // The heartbeat is out from 10 s after connect until it fails, 5 s later.
    std::thread::sleep(
        (connected + Duration::from_millis(11_500)).saturating_duration_since(Instant::now()),
    );
    let t = Instant::now();
    drop(guard);
    let took = t.elapsed();
    server.resume().unwrap();
    println!("a guard's drop during a heartbeat on a frozen server: {took:?}");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    // The lock is free once the server has read the end of the connection.
    let other = MySqlMutex::new(&client(&server, Duration::from_secs(30)), "frozen-drop").unwrap();
    assert!(other.acquire_timeout(patience()).unwrap());
    other.release().unwrap();
    server.stop().unwrap();
}

/// `acquire()` without a deadline on a frozen server ends once the Client reads `Lost`
/// (the session timeout without an answer) — with the error, after the retry policy's tries
/// against the still frozen server — in both modes, rather than wait on a socket for ever.
#[test]
fn an_acquire_without_deadline_ends_once_the_client_reads_lost() {
    use zklock::ConnectionState;
    let mut server = TestingMariaDb::start().expect("mariadbd starts");
    for table in [false, true] {
        let url = match table {
            true => format!("{}?lock_mode=table", server.url()),
            false => server.url(),
        };
        let connect = || {
            MySqlClient::builder(&url)
                .session_timeout(Duration::from_secs(3))
                .connect_timeout(Duration::from_secs(1))
                .connect()
                .unwrap()
        };
        let (a, b) = (connect(), connect());
        let held = MySqlMutex::new(&a, "frozen-wait").unwrap();
        assert!(held.acquire_timeout(Duration::ZERO).unwrap());
        let waiter = MySqlMutex::new(&b, "frozen-wait").unwrap();
        let states = b.connection_states();
        let (lost_at, ended) = std::thread::scope(|s| {
            let wait = s.spawn(|| {
                let answer = waiter.acquire();
                (Instant::now(), answer)
            });
            std::thread::sleep(Duration::from_millis(300));
            server.pause().unwrap();
            let frozen = Instant::now();
            let lost = loop {
                match states.recv_timeout(patience()) {
                    Ok(ConnectionState::Lost) => break Instant::now(),
                    Ok(_) => {}
                    Err(e) => panic!("never Lost: {e:?}"),
                }
            };
            let (at, answer) = wait.join().unwrap();
            println!(
                "table mode {table}: Lost {:?} after the freeze; acquire() ended {:?} after \
                 Lost with {answer:?}",
                lost - frozen,
                at.saturating_duration_since(lost)
            );
            (lost, answer)
        });
        let _ = lost_at;
        assert!(ended.is_err(), "{ended:?}");
        server.resume().unwrap();
        held.release().unwrap_or_default();
        a.close();
        b.close();
    }
    server.stop().unwrap();
}

/// A table-mode release that finds no usable idle connection (the server restarted) on a
/// frozen server keeps its bound: a guard's drop (1 s) and a `release_timeout(500 ms)` open a
/// connection only within it.
#[test]
fn a_table_mode_release_opens_a_connection_only_within_its_bound() {
    let mut server = TestingMariaDb::start().expect("mariadbd starts");
    let c = MySqlClient::builder(&format!("{}?lock_mode=table", server.url()))
        .session_timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .unwrap();
    let mutex = MySqlMutex::new(&c, "frozen-release").unwrap();
    let mut took = Vec::new();
    for drop_it in [true, false] {
        let guard = mutex.lock().unwrap();
        server.restart().unwrap();
        server.pause().unwrap();
        let t = Instant::now();
        let answer = match drop_it {
            true => {
                drop(guard);
                Ok(())
            }
            false => guard.release_timeout(Duration::from_millis(500)),
        };
        took.push(t.elapsed());
        server.resume().unwrap();
        println!("drop {drop_it}: {:?} ({answer:?})", t.elapsed());
        // Let go of by the keeper, or expired: the next lock() waits for one or the other.
    }
    println!(
        "table mode on a frozen server, no usable idle connection: drop {:?}, \
         release_timeout(500 ms) {:?}",
        took[0], took[1]
    );
    assert!(took[0] < Duration::from_millis(2500), "{took:?}");
    assert!(took[1] < Duration::from_millis(2000), "{took:?}");
    server.stop().unwrap();
}

/// A port that accepts and never answers (a silent host) fails the connect after the
/// handshake's bound with an error that names the host and says it did not answer — not the
/// driver's `CodecError … os error 11`.
#[test]
fn a_port_that_never_answers_is_named() {
    let silent = zklock::testing::SilentListener::start().unwrap();
    let url = format!("mysql://app:secret@127.0.0.1:{}/app", silent.port());
    let t = Instant::now();
    let e = MySqlClient::builder(&url)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .expect_err("nothing answers there");
    let text = common::chain(&e);
    println!("after {:?}: {text}", t.elapsed());
    assert!(matches!(e, Error::ConnectFailed { .. }), "{e:?}");
    assert!(text.contains(&silent.port().to_string()), "{text}");
    assert!(text.contains("did not answer"), "{text}");
    assert!(
        !text.contains("CodecError") && !text.contains("os error 11"),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
}

/// The DDL an administrator runs for each table (as `docs/mysql.md` gives it).
const TABLES_DDL: [&str; 3] = [
    "CREATE TABLE zklock_tokens (name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin \
     NOT NULL PRIMARY KEY, token BIGINT UNSIGNED NOT NULL, holder BIGINT UNSIGNED NULL, \
     marked DATETIME(6) NULL) ENGINE=InnoDB",
    "CREATE TABLE zklock_lock_record (lock_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE \
     utf8mb4_bin NOT NULL PRIMARY KEY, lock_owner VARCHAR(64) CHARACTER SET ascii COLLATE \
     ascii_bin NOT NULL, expire_time DATETIME(6) NOT NULL, version BIGINT UNSIGNED NOT NULL) \
     ENGINE=InnoDB",
    "CREATE TABLE zklock_lock_queue (lock_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE \
     utf8mb4_bin NOT NULL, waiter VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
     since DATETIME(6) NOT NULL, expire_time DATETIME(6) NOT NULL, \
     PRIMARY KEY (lock_name, waiter)) ENGINE=InnoDB",
];

/// A user without `CREATE` works with the tables an administrator created and granted it
/// (both modes: a lock, its token); without them, or without a privilege on them, the error
/// names the table and the privilege.
#[test]
fn a_user_without_create_uses_tables_an_administrator_created() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    let root = |sql: &str| server.root_sql(sql).unwrap();
    root("CREATE DATABASE admin_made");
    root("CREATE USER 'plain'@'%' IDENTIFIED BY 'pw'");
    root("CREATE USER 'plain'@'localhost' IDENTIFIED BY 'pw'");
    let connect = |table: bool| {
        let url = server.url_as("plain", "pw", "admin_made");
        let url = match table {
            true => format!("{url}?lock_mode=table"),
            false => url,
        };
        MySqlClient::builder(&url)
            .connect_timeout(Duration::from_secs(5))
            .connect()
    };
    // No table, no CREATE: the error names the table and CREATE.
    let grant_usage = "GRANT SELECT ON admin_made.* TO 'plain'@'%', 'plain'@'localhost'";
    root(grant_usage);
    let e = connect(false).expect_err("no table and no CREATE");
    let text = common::chain(&e);
    println!("{text}");
    assert!(
        text.contains("zklock_tokens") && text.contains("CREATE") && text.contains("missing"),
        "{text}"
    );
    // The tables made by root; the user has SELECT but not INSERT: the error names INSERT.
    for ddl in TABLES_DDL {
        root(&format!("USE admin_made; {ddl}"));
    }
    let e = connect(false).expect_err("no INSERT");
    let text = common::chain(&e);
    println!("{text}");
    assert!(
        text.contains("zklock_tokens") && text.contains("INSERT"),
        "{text}"
    );
    // Granted what the docs list: both modes work, with tokens.
    for grant in [
        "GRANT SELECT, INSERT, UPDATE ON admin_made.zklock_tokens TO 'plain'@'%', 'plain'@'localhost'",
        "GRANT SELECT, INSERT, UPDATE ON admin_made.zklock_lock_record TO 'plain'@'%', 'plain'@'localhost'",
    ] {
        root(grant);
    }
    let c = connect(false).expect("the GET_LOCK mode with the admin's table");
    let mutex = MySqlMutex::new(&c, "admin-made").unwrap();
    let guard = mutex.lock().unwrap();
    assert_eq!(guard.fencing_token(), 1);
    drop(guard);
    // The table mode without DELETE on the queue: named.
    root("GRANT SELECT, INSERT, UPDATE ON admin_made.zklock_lock_queue TO 'plain'@'%', 'plain'@'localhost'");
    let e = connect(true).expect_err("no DELETE on the queue");
    let text = common::chain(&e);
    println!("{text}");
    assert!(
        text.contains("zklock_lock_queue") && text.contains("DELETE"),
        "{text}"
    );
    root("GRANT DELETE ON admin_made.zklock_lock_queue TO 'plain'@'%', 'plain'@'localhost'");
    let c = connect(true).expect("the table mode with the admin's tables");
    let mutex = MySqlMutex::new(&c, "admin-made").unwrap();
    let guard = mutex.lock().unwrap();
    assert_eq!(guard.fencing_token(), 1);
    drop(guard);
}

// The fencing tokens `participants` shows for a mutex's and a leader latch's holder.

fn connect_to(url: &str) -> zklock::Result<MySqlClient> {
    MySqlClient::builder(url)
        .session_timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(5))
        .connect()
}

/// The one holder of `name`'s lock that `participants` lists.
fn holder(c: &MySqlClient, name: &str) -> MySqlParticipant {
    let listed = c.participants(name, 0).unwrap();
    let held: Vec<_> = listed.into_iter().filter(|p| p.holds).collect();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].kind, "lock", "{held:?}");
    held[0].clone()
}

/// Waits until the server has run for a few whole seconds: a mark made in its first second is
/// not believed (its start is known to the second only).
fn past_its_first_seconds(server: &TestingMariaDb) {
    wait_for("the server's first seconds", || {
        let rows = server.root_sql("SHOW GLOBAL STATUS LIKE 'Uptime'").unwrap();
        rows[0][1].parse::<u64>().unwrap() >= 3
    });
}

/// The mark of `name`'s token as root reads it: the marking connection (or `NULL`).
fn mark(server: &TestingMariaDb, db: &str, name: &str) -> String {
    let rows = server
        .root_sql(&format!(
            "SELECT COALESCE(holder, 'NULL') FROM {db}.zklock_tokens WHERE name = '{name}'"
        ))
        .unwrap();
    rows[0][0].clone()
}

/// A mutex holder shows no token until it asks for one, then the one it was given; its release
/// clears the mark, so a later hold on the same pooled connection that has not asked shows none
/// again, and the next token it asks for is shown.
#[test]
fn a_mutex_holder_shows_its_token_once_it_asked_for_it() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    past_its_first_seconds(&server);
    let c = connect_to(&server.url()).unwrap();
    let mutex = MySqlMutex::new(&c, "shown").unwrap();
    let guard = mutex.lock().unwrap();
    let id = mutex.connection_id().unwrap();
    let p = holder(&c, "shown");
    assert_eq!(p.connection, Some(u64::from(id)), "{p:?}");
    assert_eq!(p.token, None, "no token asked for yet: {p:?}");
    let token = guard.fencing_token();
    assert_eq!(holder(&c, "shown").token, Some(token));
    assert_eq!(mark(&server, "zklock", "shown"), id.to_string());
    guard.release().unwrap();
    assert_eq!(
        mark(&server, "zklock", "shown"),
        "NULL",
        "the release cleared the mark"
    );

    let guard = mutex.lock().unwrap();
    assert_eq!(
        mutex.connection_id(),
        Some(id),
        "the released connection holds again"
    );
    let p = holder(&c, "shown");
    assert_eq!(
        p.token, None,
        "the earlier hold's token is not this one's: {p:?}"
    );
    let next = guard.fencing_token();
    assert!(next > token, "{next} after {token}");
    assert_eq!(holder(&c, "shown").token, Some(next));
    guard.release().unwrap();

    // A hold whose connection ended (a guard dropped) leaves its mark on a connection that is
    // gone: the next holder, on another connection, shows none until it asks.
    let guard = mutex.lock().unwrap();
    let _ = guard.fencing_token();
    drop(guard);
    let other = connect_to(&server.url()).unwrap();
    let theirs = MySqlMutex::new(&other, "shown").unwrap();
    assert!(theirs.acquire_timeout(patience()).unwrap());
    assert_eq!(holder(&c, "shown").token, None);
    let last = theirs.fencing_token().unwrap();
    assert_eq!(holder(&c, "shown").token, Some(last));
    theirs.release().unwrap();
}

/// A leader latch's leader shows its epoch (its term's token, bumped with its grant); the next
/// leader shows its own.
#[test]
fn a_latch_leader_shows_its_epoch() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    past_its_first_seconds(&server);
    let c = connect_to(&server.url()).unwrap();
    let first = MySqlLeaderLatch::start(&c, "elected").unwrap();
    assert!(first.await_leadership_timeout(patience()).unwrap());
    let epoch = first.epoch().unwrap();
    assert_eq!(holder(&c, "elected").token, Some(epoch));
    let second = MySqlLeaderLatch::start(&c, "elected").unwrap();
    first.close();
    assert!(second.await_leadership_timeout(patience()).unwrap());
    let next = second.epoch().unwrap();
    assert!(next > epoch, "{next} after {epoch}");
    wait_for("the new leader's epoch", || {
        c.participants("elected", 0)
            .unwrap()
            .iter()
            .any(|p| p.holds && p.token == Some(next))
    });
    second.close();
}

/// A mark made before the server restarted is not believed, even when it names the holding
/// connection (connection ids start again at a restart); the same mark made since is.
#[test]
fn a_mark_from_before_a_restart_is_not_believed() {
    let mut server = TestingMariaDb::start().expect("mariadbd starts");
    let c = connect_to(&server.url()).unwrap();
    let mutex = MySqlMutex::new(&c, "restarted").unwrap();
    let guard = mutex.lock().unwrap();
    let token = guard.fencing_token();
    // Dropped: its connection ends without clearing the mark.
    drop(guard);
    c.close();
    server.restart().unwrap();
    past_its_first_seconds(&server);
    let c = connect_to(&server.url()).unwrap();
    let mutex = MySqlMutex::new(&c, "restarted").unwrap();
    assert!(mutex.acquire_timeout(patience()).unwrap());
    let id = mutex.connection_id().unwrap();
    // As if the connection of that id before the restart had marked it.
    server
        .root_sql(&format!(
            "UPDATE zklock.zklock_tokens SET holder = {id} WHERE name = 'restarted'"
        ))
        .unwrap();
    let p = holder(&c, "restarted");
    assert_eq!(p.connection, Some(u64::from(id)));
    assert_eq!(p.token, None, "a mark from before the restart: {p:?}");
    // The same mark, made now: believed.
    server
        .root_sql(
            "UPDATE zklock.zklock_tokens SET marked = UTC_TIMESTAMP(6) WHERE name = 'restarted'",
        )
        .unwrap();
    assert_eq!(holder(&c, "restarted").token, Some(token));
    mutex.release().unwrap();
}

/// The tokens' table as made before it had the mark's columns.
const EARLIER_DDL: &str = "CREATE TABLE zklock_tokens (name VARCHAR(64) CHARACTER SET utf8mb4 \
     COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB";

/// A tokens' table made before the mark's columns gets them at connect, its counts kept; a user
/// who may not alter it is told the statement to run, which then lets it connect.
#[test]
fn a_tokens_table_made_before_the_mark_gets_its_columns_at_connect() {
    let server = TestingMariaDb::start().expect("mariadbd starts");
    past_its_first_seconds(&server);
    let root = |sql: &str| server.root_sql(sql).unwrap();
    root(&format!(
        "CREATE DATABASE earlier; USE earlier; {EARLIER_DDL}; \
         INSERT INTO zklock_tokens VALUES ('kept', 5)"
    ));
    let c = connect_to(&server.url_as("zklock", server.password(), "earlier")).unwrap();
    let columns = root(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = 'earlier' AND TABLE_NAME = 'zklock_tokens' ORDER BY ORDINAL_POSITION",
    );
    let columns: Vec<&str> = columns.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(columns, ["name", "token", "holder", "marked"]);
    let mutex = MySqlMutex::new(&c, "kept").unwrap();
    let guard = mutex.lock().unwrap();
    assert_eq!(guard.fencing_token(), 6, "the count was kept");
    assert_eq!(holder(&c, "kept").token, Some(6));
    drop(guard);
    // A second connect finds the columns there.
    connect_to(&server.url_as("zklock", server.password(), "earlier"))
        .unwrap()
        .close();

    // A user with what the table needs but not ALTER: told the statement.
    root(&format!(
        "CREATE DATABASE old_admin; USE old_admin; {EARLIER_DDL}"
    ));
    root("CREATE USER 'plain'@'%' IDENTIFIED BY 'pw'");
    root("CREATE USER 'plain'@'localhost' IDENTIFIED BY 'pw'");
    root("GRANT SELECT, INSERT, UPDATE ON old_admin.* TO 'plain'@'%', 'plain'@'localhost'");
    let url = server.url_as("plain", "pw", "old_admin");
    let e = connect_to(&url).expect_err("no ALTER");
    let text = common::chain(&e);
    println!("{text}");
    let statement = text
        .split("run ")
        .nth(1)
        .expect("the error gives the statement to run")
        .trim();
    assert!(
        statement.starts_with("ALTER TABLE old_admin.zklock_tokens ADD COLUMN holder")
            && statement.contains("ADD COLUMN marked"),
        "{text}"
    );
    root(statement);
    let c = connect_to(&url).expect("connects once the administrator ran it");
    let mutex = MySqlMutex::new(&c, "plain").unwrap();
    let guard = mutex.lock().unwrap();
    assert_eq!(guard.fencing_token(), 1);
    assert_eq!(holder(&c, "plain").token, Some(1));
    drop(guard);
}
