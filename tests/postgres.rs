//! The PostgreSQL mutex against real PostgreSQL servers: what the conformance suite does not
//! cover (tokens across restarts, a frozen holder's late writes, `psql` on the same key, a
//! terminated backend, poolers, arrival order across processes and a restart, bad input).

mod common;

use std::process::Command;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::postgres::client;
use common::postgres::Psql;
use common::worker::{say, wait_to_be_killed, Worker};
use common::{patience, wait_for};

use zklock::postgres::PgMutex;
use zklock::testing::{FencedRegister, TestingPgBouncer, TestingPostgres};
use zklock::{Error, InterProcessMultiLock, LockHealth, PgClient};

const WORKER: &str = "ZKLOCK_PG_WORKER";

/// The session timeout of the worker processes.
const WORKER_SESSION: Duration = Duration::from_secs(3);

#[test]
fn two_clients_on_one_lock_never_overlap_and_tokens_rise() {
    let server = TestingPostgres::start().unwrap();
    let register = FencedRegister::start().unwrap();
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let client = client(&server);
            let addr = register.addr();
            let tokens = tokens.clone();
            thread::spawn(move || {
                let mutex = PgMutex::new(&client, "exclusion").unwrap();
                let mut fence = zklock::testing::FenceClient::connect(addr).unwrap();
                let me = format!("w{w}");
                for i in 0..25 {
                    let guard = mutex.lock().unwrap();
                    let token = guard.fencing_token();
                    tokens.lock().unwrap().push(token);
                    fence.enter(token, &me).unwrap();
                    assert!(fence
                        .write(token, &me, &i.to_string())
                        .unwrap()
                        .is_accepted());
                    thread::sleep(Duration::from_millis(2));
                    fence.exit(token, &me).unwrap();
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let report = register.check();
    assert!(report.is_clean(), "{report}");
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 50);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens rise in grant order: {tokens:?}"
    );
}

#[test]
fn tokens_rise_across_a_restart_and_a_kill_of_the_server() {
    let mut server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let mutex = PgMutex::new(&c, "restarts").unwrap();
    let mut last = 0;
    for round in 0..3 {
        let guard = mutex.try_lock_for(patience()).unwrap().expect("granted");
        let token = guard.fencing_token();
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
        guard.release().unwrap();
        match round {
            0 => server.restart().unwrap(),
            1 => {
                server.kill().unwrap();
                server.restart().unwrap();
            }
            _ => {}
        }
    }
}

/// A mutex reads its fencing token from the server only when asked for: its grants assign no
/// transaction id (and write no WAL) until then; the token read is kept, rises from holder to
/// holder, and cannot be read once the hold is gone.
#[test]
fn a_mutex_reads_its_token_only_when_asked_for() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let mutex = PgMutex::new(&c, "token when asked").unwrap();
    // The next transaction id the server will assign (reading it assigns none).
    let next_xid = || -> u64 {
        let rows = server
            .sql("SELECT txid_snapshot_xmax(txid_current_snapshot())")
            .unwrap();
        rows[0][0].as_deref().unwrap().parse().unwrap()
    };
    let before = next_xid();
    for _ in 0..20 {
        mutex.lock().unwrap().release().unwrap();
    }
    let untokened = next_xid() - before;
    println!("20 holds without their token: {untokened} transaction ids assigned");
    // A little slack for the server's own work (autovacuum); each grant used to assign one.
    assert!(untokened < 5, "{untokened} transaction ids for 20 holds");
    let before = next_xid();
    let mut tokens = Vec::new();
    for _ in 0..20 {
        let guard = mutex.lock().unwrap();
        let token = guard.fencing_token();
        assert_eq!(guard.fencing_token(), token, "read once, then kept");
        assert_eq!(mutex.fencing_token(), Some(token));
        tokens.push(token);
        guard.release().unwrap();
    }
    let tokened = next_xid() - before;
    println!("20 holds reading their token: {tokened} transaction ids assigned");
    assert!(tokened >= 20, "{tokened}");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // A hold whose session is gone has no token to give: 0, which every fence refuses.
    let guard = mutex.lock().unwrap();
    let pid = mutex.backend_pid().unwrap();
    assert!(server.terminate_backend(pid).unwrap());
    wait_for("Lost", || guard.health() == LockHealth::Lost);
    assert_eq!(mutex.fencing_token(), None);
    assert_eq!(guard.fencing_token(), 0);
    assert!(matches!(guard.release(), Err(Error::LockLost)));
}

#[test]
fn a_terminated_backend_reads_lost_at_once_and_frees_the_lock() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let mutex = PgMutex::new(&c, "terminated").unwrap();
    let events = mutex.health_events();
    let guard = mutex.lock().unwrap();
    assert_eq!(guard.health(), LockHealth::Held);
    let pid = mutex.backend_pid().unwrap();
    assert_eq!(server.advisory_lock("terminated").unwrap().0, vec![pid]);
    assert!(server.terminate_backend(pid).unwrap());
    let event = events.recv_timeout(patience()).expect("a health event");
    assert_eq!(event, LockHealth::Lost);
    assert_eq!(guard.health(), LockHealth::Lost);
    assert!(matches!(mutex.acquire(), Err(Error::LockLost)));
    assert!(matches!(guard.release(), Err(Error::LockLost)));
    let other = PgMutex::new(&client(&server), "terminated").unwrap();
    assert!(other.try_lock().unwrap().is_some());
}

#[test]
fn a_hold_reads_lost_at_once_when_the_server_restarts() {
    let mut server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let mutex = PgMutex::new(&c, "restarted under a holder").unwrap();
    let guard = mutex.lock().unwrap();
    let old = guard.fencing_token();
    server.restart().unwrap();
    wait_for("Lost", || guard.health() == LockHealth::Lost);
    assert!(matches!(guard.release(), Err(Error::LockLost)));
    let again = mutex
        .try_lock_for(patience())
        .unwrap()
        .expect("granted again");
    assert!(again.fencing_token() > old);
}

#[test]
fn a_hold_on_a_frozen_server_turns_suspended_then_lost() {
    let server = TestingPostgres::start().unwrap();
    // Suspended lasts half the session timeout: 3 s to see it on a loaded machine.
    let c = PgClient::builder(&server.url())
        .session_timeout(Duration::from_secs(6))
        .connect()
        .unwrap();
    let mutex = PgMutex::new(&c, "frozen server").unwrap();
    let events = mutex.health_events();
    let guard = mutex.lock().unwrap();
    server.pause().unwrap();
    wait_for("Suspended", || guard.health() == LockHealth::Suspended);
    wait_for("Lost", || guard.health() == LockHealth::Lost);
    server.resume().unwrap();
    let seen: Vec<LockHealth> = std::iter::from_fn(|| events.recv_timeout(patience()).ok())
        .map(|e| e.health)
        .take_while(|h| *h != LockHealth::Lost)
        .collect();
    assert_eq!(seen, vec![LockHealth::Suspended], "then Lost");
    assert!(matches!(guard.release(), Err(Error::LockLost)));
}

#[test]
fn reentrant_per_thread_and_usable_in_a_multi_lock() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let a = PgMutex::new(&c, "a").unwrap();
    a.acquire().unwrap();
    a.acquire().unwrap();
    assert_eq!(server.advisory_lock("a").unwrap().0.len(), 1);
    thread::scope(|s| {
        s.spawn(|| {
            assert!(matches!(a.release(), Err(Error::NotOwner)));
            assert!(a.try_lock().unwrap().is_none(), "another thread waits");
        });
    });
    a.release().unwrap();
    assert!(a.is_owned_by_current_thread());
    a.release().unwrap();
    wait_for("the lock to be free", || {
        server.advisory_lock("a").unwrap().0.is_empty()
    });
    let multi = InterProcessMultiLock::from_locks(vec![
        Box::new(PgMutex::new(&c, "m1").unwrap()),
        Box::new(PgMutex::new(&c, "m2").unwrap()),
    ])
    .unwrap();
    multi.acquire().unwrap();
    assert_eq!(server.advisory_lock("m1").unwrap().0.len(), 1);
    assert_eq!(server.advisory_lock("m2").unwrap().0.len(), 1);
    multi.release().unwrap();
    // A guard's drop returns at once; closing its session frees the lock.
    let guard = a.lock().unwrap();
    drop(guard);
    wait_for("the dropped guard's lock to be free", || {
        server.advisory_lock("a").unwrap().0.is_empty()
    });
}

// ---------------------------------------------------------------------------
// psql on the same key.
// ---------------------------------------------------------------------------

/// `psql -c sql`'s answer.
fn psql_once(server: &TestingPostgres, sql: &str) -> String {
    let out = Command::new("psql")
        .args([&server.url(), "-tA", "-c", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn psql_and_the_mutex_exclude_each_other_on_the_documented_key() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let mutex = PgMutex::new(&c, "shared 'key'").unwrap();
    assert_eq!(
        mutex.lock_sql(),
        "SELECT pg_advisory_lock(hashtextextended('shared ''key''', 0))"
    );
    let mut psql = Psql::start(&server);
    psql.run(&mutex.lock_sql());
    assert!(mutex.try_lock().unwrap().is_none(), "psql holds it");
    psql.run("SELECT pg_advisory_unlock(hashtextextended('shared ''key''', 0))");
    let guard = mutex.try_lock().unwrap().expect("psql let go");
    let try_sql = "SELECT pg_try_advisory_lock(hashtextextended('shared ''key''', 0))";
    assert_eq!(psql_once(&server, try_sql), "f", "zklock holds it");
    guard.release().unwrap();
    assert_eq!(psql_once(&server, try_sql), "t");
}

/// A name with a backslash and quotes: `lock_sql()` takes zklock's key whether the session
/// reads backslashes in plain literals as escapes (`standard_conforming_strings = off`) or not.
#[test]
fn lock_sql_takes_the_same_key_under_every_string_setting() {
    let server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let name = r"back\slash 'quoted' \\n";
    let mutex = PgMutex::new(&c, name).unwrap();
    let mut psql = Psql::start(&server);
    for setting in ["off", "on"] {
        psql.run(&format!("SET standard_conforming_strings = {setting}"));
        psql.run(&mutex.lock_sql());
        assert!(
            mutex.try_lock().unwrap().is_none(),
            "standard_conforming_strings = {setting}: {} took another key",
            mutex.lock_sql()
        );
        psql.run("SELECT pg_advisory_unlock_all()");
        assert!(mutex.try_lock().unwrap().is_some(), "psql let go");
    }
}

// ---------------------------------------------------------------------------
// Bad input.
// ---------------------------------------------------------------------------

#[test]
fn bad_input_is_refused_with_its_cause() {
    let server = TestingPostgres::start().unwrap();
    let cause = |url: &str| match PgClient::connect(url) {
        Err(Error::ConnectFailed { cause, hosts }) => {
            assert!(!hosts.contains(server.password()), "{hosts}");
            *cause
        }
        other => panic!("{url}: {other:?}"),
    };
    let e = cause(&server.url_as("zklock", "wrong", "postgres"));
    assert!(
        matches!(&e, Error::AuthFailed(why) if why.contains("28P01")),
        "{e:?}"
    );
    // No password in the URL, for a server that asks for one.
    let e = cause(&format!(
        "postgres://zklock@127.0.0.1:{}/postgres",
        server.port()
    ));
    assert!(
        matches!(&e, Error::AuthFailed(why) if why.contains("password missing") && why.contains("zklock")),
        "{e:?}"
    );
    let e = cause(&server.url_as("zklock", server.password(), "nosuchdb"));
    assert!(
        matches!(&e, Error::Postgres(why) if why.contains("3D000") && why.contains("nosuchdb")),
        "{e:?}"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let e = cause(&format!("postgres://zklock:x@127.0.0.1:{port}/postgres"));
    assert!(
        matches!(&e, Error::Io { kind, .. } if *kind == std::io::ErrorKind::ConnectionRefused),
        "{e:?}"
    );
    // TLS asked of a server without it: refused before any I/O without the `tls` feature,
    // by the server's answer with it.
    let e = PgClient::connect(&format!("{}?sslmode=require", server.url())).unwrap_err();
    if cfg!(feature = "tls") {
        assert!(
            matches!(&e, Error::ConnectFailed { cause, .. } if cause.to_string().contains("TLS")),
            "{e:?}"
        );
    } else {
        assert!(
            matches!(&e, Error::InvalidArgument(why) if why.contains("TLS")),
            "{e:?}"
        );
    }
    let c = client(&server);
    assert!(matches!(
        PgMutex::new(&c, ""),
        Err(Error::InvalidArgument(_))
    ));
    assert!(c.server_version() >= 110_000);
    c.close();
    let m = PgMutex::new(&c, "after close").unwrap();
    assert!(matches!(m.try_lock(), Err(Error::Closed)));
}

// ---------------------------------------------------------------------------
// A holder in another process: killed, or frozen past its session timeout.
// ---------------------------------------------------------------------------

/// The worker: holds the lock named "worker", writes to the fenced register every 20 ms
/// (checking `health()` before each write), and reports each write.
#[test]
fn holder_worker() {
    let Ok(args) = std::env::var(WORKER) else {
        return; // only as a worker process
    };
    let args: Vec<&str> = args.split(' ').collect();
    let (url, fence) = (args[0], args[1]);
    let client = PgClient::builder(url)
        .session_timeout(WORKER_SESSION)
        .connect()
        .unwrap();
    let mutex = PgMutex::new(&client, "worker").unwrap();
    let mut fence = zklock::testing::FenceClient::connect(fence).unwrap();
    // Held first, so that "worker" is taken on a session opened for it (not the Client's
    // first), whose limits are set as it opens.
    let first = PgMutex::new(&client, "worker's first").unwrap();
    let _first = first.lock().unwrap();
    let guard = mutex.lock().unwrap();
    let token = guard.fencing_token();
    fence.enter(token, "worker").unwrap();
    say(&format!("held {token}"));
    for i in 0.. {
        if guard.health() != LockHealth::Held {
            say("lost");
            break;
        }
        let outcome = fence.write(token, "worker", &i.to_string()).unwrap();
        say(&format!("wrote {}", outcome.is_accepted()));
        thread::sleep(Duration::from_millis(20));
    }
    fence.exit(token, "worker").unwrap();
    wait_to_be_killed();
}

fn start_worker(server: &TestingPostgres, register: &FencedRegister) -> Worker {
    let args = format!("{} {}", server.url(), register.addr());
    Worker::start("holder_worker", WORKER, &args)
}

/// Takes the lock after the worker stopped holding it: how long that took, and the token.
fn take_over(server: &TestingPostgres, register: &FencedRegister) -> (Duration, u64) {
    let c = client(server);
    let mutex = PgMutex::new(&c, "worker").unwrap();
    let started = Instant::now();
    let guard = mutex.try_lock_for(patience()).unwrap().expect("taken over");
    let took = started.elapsed();
    let token = guard.fencing_token();
    let mut fence = register.client().unwrap();
    fence.enter(token, "taker").unwrap();
    assert!(fence.write(token, "taker", "x").unwrap().is_accepted());
    fence.exit(token, "taker").unwrap();
    (took, token)
}

#[test]
fn a_frozen_holder_process_is_replaced_and_makes_no_late_write() {
    let server = TestingPostgres::start().unwrap();
    let register = FencedRegister::start().unwrap();
    let worker = start_worker(&server, &register);
    let held: u64 = worker.expect("held").parse().unwrap();
    worker.expect("wrote true");
    worker.signal("-STOP");
    let (took, token) = take_over(&server, &register);
    println!("taken over {took:?} after SIGSTOP (session timeout {WORKER_SESSION:?})");
    assert!(token > held);
    worker.signal("-CONT");
    worker.expect("lost");
    let report = register.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    let late = report.workers.get("worker").map_or(0, |s| s.rejected);
    assert_eq!(late, 0, "a holder that checks health() writes nothing late");
}

/// The contrast: a session without zklock's server-side limits (psql, the server's defaults)
/// keeps its lock while its process is frozen, and loses it at once when its process is killed
/// (the kernel closes its connection).
#[test]
fn a_frozen_psql_holder_keeps_its_lock_under_the_default_settings_a_killed_one_does_not() {
    let server = TestingPostgres::start().unwrap();
    let mut psql = Psql::start(&server);
    psql.run("SELECT pg_advisory_lock(hashtextextended('worker', 0))");
    let pid = psql.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let c = client(&server);
    let mutex = PgMutex::new(&c, "worker").unwrap();
    // Twice the workers' session timeout, and more: still held.
    let waited = WORKER_SESSION * 2 + Duration::from_secs(2);
    let got = mutex.try_lock_for(waited).unwrap();
    println!(
        "a frozen psql holder still holds after {waited:?}: {}",
        got.is_none()
    );
    assert!(got.is_none());
    // kill -9 of the same holder, still without limits: its kernel closes the connection and
    // the server frees the lock as soon as it reads the end (on one machine; a vanished
    // machine sends no end, and then the server's keepalive defaults take about two hours).
    assert!(Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap()
        .success());
    let started = Instant::now();
    let got = mutex.try_lock_for(patience()).unwrap();
    println!(
        "the same psql holder killed with -9: taken over after {:?}",
        started.elapsed()
    );
    assert!(got.is_some());
}

// ---------------------------------------------------------------------------
// A pooler between zklock and the server.
// ---------------------------------------------------------------------------

#[test]
fn a_transaction_mode_pooler_never_grants_one_lock_twice() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "transaction").unwrap();
    let a = PgClient::connect(&bouncer.url()).expect("connect through PgBouncer");
    let b = PgClient::connect(&bouncer.url()).expect("connect through PgBouncer");
    let (ma, mb) = (
        PgMutex::new(&a, "pooled").unwrap(),
        PgMutex::new(&b, "pooled").unwrap(),
    );
    let ga = ma.try_lock();
    let gb = mb.try_lock();
    println!("through a transaction-mode PgBouncer: {ga:?} / {gb:?}");
    let held =
        |g: &zklock::Result<Option<zklock::LockGuard<'_, PgMutex>>>| matches!(g, Ok(Some(_)));
    assert!(!(held(&ga) && held(&gb)), "granted twice");
    let refused = [&ga, &gb]
        .iter()
        .any(|g| matches!(g, Err(Error::Postgres(why)) if why.contains("pool_mode = transaction")));
    assert!(refused, "the pooler is named: {ga:?} / {gb:?}");
}

#[test]
fn a_session_mode_pooler_works() {
    let server = TestingPostgres::start().unwrap();
    let bouncer = TestingPgBouncer::start(&server, "session").unwrap();
    let a = PgClient::connect(&bouncer.url()).expect("connect through PgBouncer");
    let b = PgClient::connect(&bouncer.url()).expect("connect through PgBouncer");
    let ma = PgMutex::new(&a, "pooled").unwrap();
    let mb = PgMutex::new(&b, "pooled").unwrap();
    let guard = ma.try_lock().unwrap().expect("granted");
    assert!(mb.try_lock().unwrap().is_none());
    // A second hold of one Client opens a session of its own through the pooler.
    let other = PgMutex::new(&a, "other").unwrap();
    assert!(other.try_lock().unwrap().is_some());
    guard.release().unwrap();
    assert!(mb.try_lock().unwrap().is_some());
}

// ---------------------------------------------------------------------------
// What a lock needs of the server: no privilege, and a server that comes back.
// ---------------------------------------------------------------------------

/// A role with no privilege at all (not a superuser, no grants, no role memberships) takes
/// every kind of lock, with rising fencing tokens: the token's logical message and the
/// own-session setting need nothing beyond what PostgreSQL grants everyone.
#[test]
fn a_role_without_privileges_locks_and_gets_rising_tokens() {
    let server = TestingPostgres::start().unwrap();
    server
        .sql("CREATE ROLE plain LOGIN PASSWORD 'plain' NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION")
        .unwrap();
    let roles = server
        .sql("SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = 'plain'")
        .unwrap();
    assert_eq!(
        roles,
        vec![vec![Some("f".to_owned()), Some("f".to_owned())]],
        "the role is not a superuser and cannot replicate"
    );
    let c = PgClient::connect(&server.url_as("plain", "plain", "postgres")).unwrap();
    let mutex = PgMutex::new(&c, "unprivileged").unwrap();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let guard = mutex.lock().unwrap();
        assert_eq!(guard.health(), LockHealth::Held);
        tokens.push(guard.fencing_token());
        guard.release().unwrap();
    }
    let guard = mutex.try_lock().unwrap().expect("a free lock");
    tokens.push(guard.fencing_token());
    drop(guard);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let rw = zklock::postgres::PgReadWriteLock::new(&c, "unprivileged-rw").unwrap();
    rw.read_lock().lock().unwrap().release().unwrap();
    rw.write_lock().lock().unwrap().release().unwrap();
    let semaphore = zklock::postgres::PgSemaphore::new(&c, "unprivileged-sem", 2).unwrap();
    let a = semaphore.acquire().unwrap();
    let b = semaphore.acquire().unwrap();
    assert!(semaphore
        .acquire_timeout(Duration::from_millis(50))
        .unwrap()
        .is_none());
    drop((a, b));
    c.close();
}

/// An `acquire` that starts while the server is down is retried by the Client's retry policy
/// and granted once the server is back.
#[test]
fn an_acquire_rides_out_a_server_stop_and_is_granted_after() {
    let mut server = TestingPostgres::start().unwrap();
    let c = client(&server);
    let mutex = PgMutex::new(&c, "outage").unwrap();
    mutex.lock().unwrap().release().unwrap();
    server.stop().unwrap();
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let mutex = PgMutex::new(&c, "outage").unwrap();
        thread::spawn(move || {
            let _ = tx.send(mutex.lock().map(|g| g.fencing_token()));
        })
    };
    // The acquire is still retrying while the server is down.
    assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
    server.restart().unwrap();
    let token = rx
        .recv_timeout(patience())
        .expect("granted once the server is back")
        .expect("no error through the outage");
    assert!(token > 0);
    waiter.join().unwrap();
    c.close();
}

const QUEUE_WORKER: &str = "ZKLOCK_PG_QUEUE_WORKER";

/// The worker: takes the lock named in its arguments, says its token, holds it a moment and
/// lets it go.
#[test]
fn queue_worker() {
    let Ok(args) = std::env::var(QUEUE_WORKER) else {
        return; // only as a worker process
    };
    let (url, name) = args.split_once(' ').unwrap();
    let client = PgClient::connect(url).unwrap();
    let mutex = PgMutex::new(&client, name).unwrap();
    let guard = mutex.lock().unwrap();
    say(&format!("held {}", guard.fencing_token()));
    thread::sleep(Duration::from_millis(20));
    guard.release().unwrap();
    say("released");
    wait_to_be_killed();
}

/// Three processes queue behind a holder, one after another: the server grants them in that
/// order (their tokens, assigned at each grant, rise in it), and a process that takes the lock
/// after a restart of the server gets a higher token still.
#[test]
fn processes_are_granted_in_arrival_order_and_tokens_rise_across_a_restart() {
    let mut server = TestingPostgres::start().unwrap();
    let name = "fifo-processes";
    let c = client(&server);
    let holder = PgMutex::new(&c, name).unwrap();
    let guard = holder.lock().unwrap();
    let first = guard.fencing_token();
    let args = format!("{} {name}", server.url());
    let mut workers = Vec::new();
    for i in 0..3 {
        workers.push(Worker::start("queue_worker", QUEUE_WORKER, &args));
        // The next process starts once this one waits on the server.
        wait_for("the process to queue", || {
            server.advisory_lock(name).unwrap().1.len() == i + 1
        });
    }
    guard.release().unwrap();
    let tokens: Vec<u64> = workers
        .iter()
        .map(|w| w.expect("held").parse().unwrap())
        .collect();
    for w in &workers {
        w.expect("released");
    }
    assert!(
        first < tokens[0] && tokens.windows(2).all(|t| t[0] < t[1]),
        "granted in arrival order, each with a higher token: {first} then {tokens:?}"
    );
    drop(workers);
    c.close();
    server.restart().unwrap();
    let after = Worker::start("queue_worker", QUEUE_WORKER, &args);
    let token: u64 = after.expect("held").parse().unwrap();
    assert!(
        token > tokens[2],
        "{token} after the restart, {tokens:?} before"
    );
}

/// The server's own race between a lock timeout and a grant: a wait that its `lock_timeout`
/// ends just as the lock is handed to it fails with `lock_not_available`, yet its session holds
/// the lock (a session-level advisory lock outlives the statement's error). Here the waiting
/// backend is frozen while the holder lets go (the lock is handed to it) and past its lock
/// timeout, then woken. The try reports "not granted", and must leave nothing held: a session
/// kept for the next acquisition would be granted the lock again at once (a session's own lock
/// needs no queueing), ahead of every other waiter, hold after hold.
#[test]
fn a_wait_timed_out_as_the_lock_is_handed_over_leaves_nothing_held() {
    let server = TestingPostgres::start().unwrap();
    let name = "handover";
    let mut holder = Psql::start(&server);
    holder.run("SELECT pg_advisory_lock(hashtextextended('handover', 0))");
    // The Client hears the server's answer long after the lock timeout (its operation timeout
    // is longer), and none of its sessions is ended for being idle (its session timeout).
    let c = PgClient::builder(&server.url())
        .session_timeout(Duration::from_secs(3600))
        .operation_timeout(Duration::from_secs(600))
        .connect()
        .unwrap();
    let mutex = Arc::new(PgMutex::new(&c, name).unwrap());
    let wait = Duration::from_secs(5);
    let started = Instant::now();
    let waiter = thread::spawn({
        let mutex = mutex.clone();
        move || mutex.try_lock_for(wait).map(|guard| guard.is_some())
    });
    let mut waiting = Vec::new();
    wait_for("the Client to wait on the server", || {
        waiting = server.advisory_lock(name).unwrap().1;
        !waiting.is_empty()
    });
    let frozen = Frozen::stop(waiting[0]);
    wait_for("the waiting backend to stop", || {
        std::fs::read_to_string(format!("/proc/{}/stat", waiting[0])).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, s)| s.starts_with('T'))
        })
    });
    assert!(
        server.advisory_lock(name).unwrap().1 == waiting,
        "the wait was frozen before its lock timeout"
    );
    holder.run("SELECT pg_advisory_unlock(hashtextextended('handover', 0))");
    wait_for("the lock to be handed to the frozen waiter", || {
        server.advisory_lock(name).unwrap() == (waiting.clone(), Vec::new())
    });
    // Past the lock timeout (at most `wait` from the statement's start), then woken.
    thread::sleep(
        (started + wait + Duration::from_secs(1)).saturating_duration_since(Instant::now()),
    );
    drop(frozen);
    assert!(
        !waiter.join().unwrap().unwrap(),
        "the server answered lock_not_available"
    );
    // Another session can take the lock: nothing of the Client's holds it.
    let mut other = Psql::start(&server);
    wait_for("another session to take the lock", || {
        other.run("SELECT pg_try_advisory_lock(hashtextextended('handover', 0))") == ["t"]
    });
    assert!(
        mutex.try_lock().unwrap().is_none(),
        "held by another session"
    );
    c.close();
}

/// A process stopped with SIGSTOP until this is dropped (SIGCONT), also when a test fails.
struct Frozen(String);

impl Frozen {
    fn stop(pid: i32) -> Frozen {
        let pid = pid.to_string();
        assert!(Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success());
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

/// A session zklock connects itself (one host: TCP as everywhere else here, or a Unix socket)
/// and one tokio-postgres connects (several hosts) lock alike, and a terminated backend reads
/// `Lost` at once on both.
#[test]
fn unix_socket_and_several_host_urls_lock_and_see_their_backend_end() {
    let server = TestingPostgres::start().unwrap();
    let dir = server.dir().display().to_string().replace('/', "%2F");
    let urls = [
        format!("postgres://zklock@{dir}:{}/postgres", server.port()),
        format!(
            "postgres://zklock:{}@127.0.0.1:1,127.0.0.1:{}/postgres",
            server.password(),
            server.port()
        ),
    ];
    let other = client(&server);
    for (i, url) in urls.iter().enumerate() {
        let c = PgClient::connect(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        let name = format!("reached-{i}");
        let mutex = PgMutex::new(&c, &name).unwrap();
        let events = mutex.health_events();
        let guard = mutex.lock().unwrap();
        let pid = mutex.backend_pid().unwrap();
        assert_eq!(server.advisory_lock(&name).unwrap().0, vec![pid], "{url}");
        let theirs = PgMutex::new(&other, &name).unwrap();
        assert!(theirs.try_lock().unwrap().is_none(), "{url}: held");
        guard.release().unwrap();
        assert!(theirs.try_lock().unwrap().is_some(), "{url}: released");
        let guard = mutex.lock().unwrap();
        let pid = mutex.backend_pid().unwrap();
        assert!(server.terminate_backend(pid).unwrap());
        let event = events.recv_timeout(patience()).expect("a health event");
        assert_eq!(event, LockHealth::Lost, "{url}");
        assert!(matches!(guard.release(), Err(Error::LockLost)));
    }
}

/// On Linux a Client's callers drive their own sessions unless `ZKLOCK_PG_CALLER_DRIVES=0`
/// (CI runs this binary once with it set); elsewhere every statement goes through
/// `zklock-pg-io`. Either way the locks work.
#[test]
fn callers_drive_their_sessions_unless_told_not_to() {
    let forced = std::env::var("ZKLOCK_PG_CALLER_DRIVES").is_ok_and(|v| v == "0");
    let expected = cfg!(target_os = "linux") && !forced;
    println!("ZKLOCK_PG_CALLER_DRIVES=0: {forced}; callers drive their sessions: {expected}");
    let server = TestingPostgres::start().unwrap();
    let client = client(&server);
    let shown = format!("{client:?}");
    assert!(
        shown.contains(&format!("caller_drives: {expected}")),
        "{shown}"
    );
    let mutex = PgMutex::new(&client, "path").unwrap();
    let guard = mutex.lock().unwrap();
    let other = PgMutex::new(&client, "path").unwrap();
    let waiter = thread::spawn(move || other.lock().unwrap().release().unwrap());
    wait_for("the waiter to queue", || {
        server.advisory_lock("path").unwrap().1.len() == 1
    });
    guard.release().unwrap();
    waiter.join().unwrap();
}
