//! A multi-host PostgreSQL URL (`target_session_attrs=read-write`) whose first host is silent:
//! a host that accepts connections and never answers, or a frozen (SIGSTOPped) primary whose
//! standby was promoted. The connection timeout applies to each host, the startup phase
//! included, so a session opens on the next host.

mod common;

use std::time::{Duration, Instant};

use common::{patience, wait_for};
use zklock::postgres::PgMutex;
use zklock::testing::{SilentListener, TestingPostgres};
use zklock::PgClient;

const TIMEOUT: Duration = Duration::from_secs(2);

/// `server`'s URL with a host `first` (`host:port`) before it, asking for a read-write session.
fn url_after(first: &str, server: &TestingPostgres) -> String {
    let url = server.url();
    let at = format!("127.0.0.1:{}", server.port());
    url.replace(&at, &format!("{first},{at}")) + "?target_session_attrs=read-write"
}

/// The first host accepts connections and never answers: the Client connects to the second
/// within about one connection timeout, and its later sessions go there first.
#[test]
fn a_session_opens_past_a_silent_first_host() {
    let server = TestingPostgres::start().unwrap();
    let silent = SilentListener::start().unwrap();
    let url = url_after(&silent.addr().to_string(), &server);
    let began = Instant::now();
    let client = PgClient::builder(&url).connect_timeout(TIMEOUT).connect();
    let took = began.elapsed();
    println!(
        "connect with a silent first host (connection timeout {TIMEOUT:?}): {} after {took:?}",
        match &client {
            Ok(_) => "connected".to_owned(),
            Err(e) => format!("failed ({e})"),
        }
    );
    let client = client.expect("a session on the second host");
    let tried = silent.accepted();
    assert!(tried >= 1, "the silent host was tried first");
    // More sessions than the pool has: each new one goes to the host that answered.
    let mutexes: Vec<PgMutex> = (0..3)
        .map(|i| PgMutex::new(&client, &format!("past-silent-{i}")).unwrap())
        .collect();
    let began = Instant::now();
    let guards: Vec<_> = mutexes.iter().map(|m| m.lock().unwrap()).collect();
    println!(
        "three locks on three sessions {:?}; the silent host tried {} times after connect",
        began.elapsed(),
        silent.accepted() - tried
    );
    let pids = mutexes
        .iter()
        .map(|m| m.backend_pid().unwrap())
        .collect::<Vec<_>>();
    println!("backends {pids:?}");
    assert_eq!(silent.accepted(), tried, "a silent host is tried last");
    drop(guards);
}

/// A primary is frozen (SIGSTOP: the kernel still accepts connections to it) and its standby
/// promoted. A new Client on the two-host URL opens its session on the new primary, and a
/// running Client, whose sessions were on the frozen one, takes a lock there too.
#[test]
fn a_session_opens_past_a_frozen_primary_on_the_promoted_standby() {
    let primary = TestingPostgres::start().unwrap();
    let standby = primary.start_standby(false).unwrap();
    let url = primary.url_with_standby(&standby);
    let running = PgClient::builder(&url)
        .session_timeout(Duration::from_secs(10))
        .connect_timeout(TIMEOUT)
        .connect()
        .unwrap();
    let mutex = PgMutex::new(&running, "past-frozen").unwrap();
    mutex.lock().unwrap().release().unwrap();
    primary.pause().unwrap();
    standby.promote().unwrap();
    wait_for("the standby promoted", || {
        standby.in_recovery().ok() == Some(false)
    });
    let began = Instant::now();
    let client = PgClient::builder(&url).connect_timeout(TIMEOUT).connect();
    println!(
        "connect with a frozen first host (connection timeout {TIMEOUT:?}): {} after {:?}",
        match &client {
            Ok(_) => "connected".to_owned(),
            Err(e) => format!("failed ({e})"),
        },
        began.elapsed()
    );
    let client = client.expect("a session on the promoted standby");
    let theirs = PgMutex::new(&client, "past-frozen").unwrap();
    let pid = {
        let g = theirs.lock().unwrap();
        let pid = theirs.backend_pid().unwrap();
        g.release().unwrap();
        pid
    };
    let on_standby = standby
        .sql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"
        ))
        .unwrap();
    assert_eq!(
        on_standby[0][0].as_deref(),
        Some("1"),
        "the session is on the new primary"
    );
    // The running Client's pooled session is on the frozen host: its next lock finds that out
    // within its bounds and opens a session on the new primary.
    let began = Instant::now();
    let deadline = Instant::now() + patience();
    let guard = loop {
        match mutex.try_lock_for(TIMEOUT) {
            Ok(Some(g)) => break g,
            other => {
                println!("running Client: {other:?}");
                assert!(Instant::now() < deadline, "no lock on the new primary");
            }
        }
    };
    println!("running Client granted after {:?}", began.elapsed());
    let pid = mutex.backend_pid().unwrap();
    let on_standby = standby
        .sql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"
        ))
        .unwrap();
    assert_eq!(on_standby[0][0].as_deref(), Some("1"));
    guard.release().unwrap();
    primary.resume().unwrap();
}
