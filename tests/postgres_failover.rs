//! A failover from a primary to its promoted streaming standby (`TestingPostgres::
//! start_standby`, `promote`), through a two-host URL with `target_session_attrs=read-write`:
//! the old primary's holders read `Lost`, its waiters are served on the new primary, and the
//! fencing tokens are above every earlier one when the standby is synchronous — and, with
//! asynchronous replication, can be handed out again when the last commits had not reached it.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{patience, wait_for};
use zklock::postgres::PgMutex;
use zklock::testing::TestingPostgres;
use zklock::{LockHealth, PgClient, RetryForever};

/// A Client that retries for ever (the test's own deadlines bound it), so that a waiter rides
/// out the time without a primary.
fn client(url: &str) -> PgClient {
    PgClient::builder(url)
        .session_timeout(Duration::from_secs(10))
        .connect_timeout(Duration::from_secs(2))
        .retry_policy(RetryForever::new(Duration::from_millis(50)).unwrap())
        .connect()
        .expect("connect")
}

/// What a waiter reports once granted: its token, its backend, and how to make it release.
struct Granted {
    token: u64,
    pid: i32,
    release: mpsc::Sender<()>,
}

/// A thread on a Client of its own that waits for `name`, reports the grant, and holds until
/// told to release (or the sender is dropped).
fn waiter(url: String, name: &'static str, granted: mpsc::Sender<Granted>) {
    thread::spawn(move || {
        let client = client(&url);
        let mutex = PgMutex::new(&client, name).unwrap();
        let guard = mutex.lock().expect("the waiter is granted");
        let (release, told) = mpsc::channel::<()>();
        let _ = granted.send(Granted {
            token: guard.fencing_token(),
            pid: mutex.backend_pid().unwrap(),
            release,
        });
        let _ = told.recv();
        let _ = guard.release();
    });
}

/// Promotions in a row, each to a new synchronous standby of the last promoted server.
const PROMOTIONS: usize = 10;

#[test]
fn after_each_failover_holders_read_lost_waiters_are_served_and_tokens_rise() {
    let started = Instant::now();
    let mut primary = TestingPostgres::start().unwrap();
    let mut highest = 0;
    for round in 1..=PROMOTIONS {
        let standby = primary.start_standby(true).unwrap();
        highest = fail_over(round, &mut primary, &standby, highest);
        primary = standby;
    }
    let took = started.elapsed();
    println!("{PROMOTIONS} promotions in {took:?}");
}

/// One failover under contention: a holder and two waiters on the primary, `kill -9` of the
/// primary, promotion of the standby. The tokens before it are above `highest`; returns the
/// highest token granted.
fn fail_over(
    round: usize,
    primary: &mut TestingPostgres,
    standby: &TestingPostgres,
    highest: u64,
) -> u64 {
    let url = primary.url_with_standby(standby);
    let holder = client(&url);
    // The Client reports the standby it connected with as synchronous.
    assert_eq!(
        holder.synchronous_standby_names(),
        format!("\"zklock-pg-{}\"", standby.port())
    );
    let mutex = PgMutex::new(&holder, "failover").unwrap();
    // Tokens granted before the failover; the last hold is kept.
    let mut before = Vec::new();
    for _ in 0..3 {
        let g = mutex.lock().unwrap();
        before.push(g.fencing_token());
        g.release().unwrap();
    }
    let held = mutex.lock().unwrap();
    before.push(held.fencing_token());
    assert!(
        before.windows(2).all(|w| w[0] < w[1]) && before[0] > highest,
        "round {round}: tokens rise across the earlier failovers: {highest} then {before:?}"
    );
    let highest = *before.last().unwrap();
    // Two waiters queue on the primary.
    let (granted_tx, granted) = mpsc::channel();
    for _ in 0..2 {
        waiter(url.clone(), "failover", granted_tx.clone());
    }
    wait_for("two waiters queued on the primary", || {
        primary.advisory_lock("failover").unwrap().1.len() == 2
    });
    assert_eq!(held.health(), LockHealth::Held);

    // The primary dies; its standby is promoted.
    let killed = Instant::now();
    primary.kill().unwrap();
    wait_for("the holder's hold read Lost", || {
        held.health() == LockHealth::Lost
    });
    let lost = killed.elapsed();
    standby.promote().unwrap();
    let promoted = killed.elapsed();

    // The waiters are served on the new primary, one after the other, above every earlier
    // token.
    let mut after = Vec::new();
    let mut first_grant = Duration::ZERO;
    for n in 0..2 {
        let g = granted
            .recv_timeout(patience())
            .expect("a waiter is served on the new primary");
        if n == 0 {
            first_grant = killed.elapsed();
        }
        let (holders, _) = standby.advisory_lock("failover").unwrap();
        assert_eq!(holders, [g.pid], "held on the new primary by the waiter");
        after.push(g.token);
        // Only one holds; the other is still waiting.
        assert!(granted.recv_timeout(Duration::from_millis(100)).is_err());
        g.release.send(()).unwrap();
        wait_for("the grant released", || {
            !standby
                .advisory_lock("failover")
                .unwrap()
                .0
                .contains(&g.pid)
        });
    }
    assert_eq!(held.health(), LockHealth::Lost);
    drop(held);
    // The old holder's Client takes the lock again, on the new primary.
    let again = mutex.lock().unwrap();
    after.push(again.fencing_token());
    println!(
        "round {round}: after the kill, the holder read Lost in {lost:?}, the standby was \
         promoted in {promoted:?}, the first waiter was served in {first_grant:?}; tokens \
         before {before:?}, after {after:?}"
    );
    assert!(
        after.windows(2).all(|w| w[0] < w[1]) && after[0] > highest,
        "round {round}: with a synchronous standby every token after the failover is above \
         every token before it: before {before:?}, after {after:?}"
    );
    again.release().unwrap();
    *after.last().unwrap()
}

#[test]
fn with_asynchronous_replication_a_token_the_standby_never_received_is_handed_out_again() {
    let mut primary = TestingPostgres::start().unwrap();
    let standby = primary.start_standby(false).unwrap();
    let url = primary.url_with_standby(&standby);
    let holder = client(&url);
    assert_eq!(holder.synchronous_standby_names(), "");
    let mutex = PgMutex::new(&holder, "async").unwrap();
    let replicated = mutex.lock().unwrap().fencing_token();
    let lsn = primary.sql("SELECT pg_current_wal_lsn()").unwrap()[0][0]
        .clone()
        .unwrap();
    wait_for("the first grant replayed on the standby", || {
        standby
            .sql(&format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'"))
            .unwrap()[0][0]
            .as_deref()
            == Some("t")
    });
    // The standby stops receiving (its WAL receiver stopped: no primary_conninfo), as a
    // standby that lags behind when the primary dies. The primary does not wait for it.
    standby
        .sql("ALTER SYSTEM SET primary_conninfo = ''")
        .unwrap();
    standby.sql("SELECT pg_reload_conf()").unwrap();
    wait_for("the standby stopped receiving", || {
        primary
            .sql("SELECT count(*) FROM pg_stat_replication")
            .unwrap()[0][0]
            .as_deref()
            == Some("0")
    });
    let mut lost = Vec::new();
    for _ in 0..5 {
        let g = mutex.lock().unwrap();
        lost.push(g.fencing_token());
        g.release().unwrap();
    }
    primary.kill().unwrap();
    standby.promote().unwrap();
    let g = mutex.lock().unwrap();
    let after = g.fencing_token();
    println!(
        "replicated token {replicated}; granted after the standby stopped receiving {lost:?}; \
         the first after the failover {after}"
    );
    assert!(
        after > replicated && after <= *lost.last().unwrap(),
        "a token at or below one already granted: {after} after {lost:?}"
    );
    g.release().unwrap();
}
