//! The PostgreSQL chaos run: worker processes contend for one `PgMutex` (session timeout 2 s)
//! and write with their fencing tokens to a [`FencedRegister`](zklock::testing::FencedRegister),
//! while faults hit the holders and the server: kill -9 of the holder, SIGSTOP of the holder
//! past its session timeout, a restart of the server, `pg_terminate_backend` of the holder's
//! session, and SIGSTOP of the server past the session timeout. After each fault the run waits
//! for a new holder's accepted write, and at the end it checks the register's whole log (no
//! overlap, no stale write accepted) and prints a report per fault: the longest gap between
//! accepted writes, the writes the fence refused, and the late writes of a frozen holder.
//!
//! A second run fails the server over: the workers reach a primary and its synchronous standby
//! through one two-host URL, the primary is killed (kill -9) or, every other round, silenced
//! (SIGSTOP of all its processes: the kernel accepts connections, nothing answers, as a host
//! powered off or partitioned away) and the standby promoted, again and again
//! (`ZKLOCK_CHAOS_FAILOVERS` rounds, 2 by default: a kill and a silent primary;
//! `scripts/chaos.sh` runs 10). A silent primary is killed once the workers' writes went on
//! without it (as a failover manager fences an old primary before it could run again).
//!
//! Workers are this test binary run again (`postgres_chaos_worker`), one Client and one thread
//! each (`chaos_lab` has the loop, the lab and the report).

mod chaos_lab;

use std::thread;
use std::time::{Duration, Instant};

use chaos_lab::{patience, row, Lab};
use zklock::postgres::PgMutex;
use zklock::testing::TestingPostgres;
use zklock::PgClient;

const WORKER: &str = "ZKLOCK_PG_CHAOS_WORKER";
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);
const LOCK: &str = "chaos";

/// The worker: one Client on the URL it is given, the lab's loop on the lock.
#[test]
fn postgres_chaos_worker() {
    let Some((url, register, name, checks)) = chaos_lab::worker_args(WORKER) else {
        return; // only as a worker process
    };
    let stop = chaos_lab::stop_on_stdin();
    let client = chaos_lab::connect_until_up(|| {
        PgClient::builder(&url)
            .session_timeout(SESSION_TIMEOUT)
            .connect_timeout(Duration::from_secs(1))
            .operation_timeout(Duration::from_millis(500))
            .connect()
    });
    let mutex = PgMutex::new(&client, LOCK).unwrap();
    chaos_lab::work(&mutex, &register, &name, checks, &stop);
    client.close();
}

/// The backend of the session that holds the lock now (waits for one).
fn holding_backend(server: &TestingPostgres) -> i32 {
    let deadline = std::time::Instant::now() + patience();
    loop {
        if let Some(&pid) = server.advisory_lock(LOCK).unwrap().0.first() {
            return pid;
        }
        assert!(std::time::Instant::now() < deadline, "nobody holds");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn postgres_chaos_schedule() {
    let mut server = TestingPostgres::start().unwrap();
    let mut lab = Lab::new(server.url(), "postgres_chaos_worker", WORKER);
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(20, "before the first fault");
    let mut rows = Vec::new();

    // kill -9 of the holder: its connection closes with it, the server frees the lock.
    let from = lab.next_seq();
    lab.kill_holder();
    lab.progress(10, "after the holder was killed");
    rows.push(row("kill -9 of the holder", &lab, from, None));
    lab.start_worker();

    // SIGSTOP of the holder past its session timeout: the server ends its silent session and
    // the others go on; once it runs again a holder that checks health() writes nothing, one
    // that does not is refused by the fence.
    let from = lab.next_seq();
    let frozen = lab.freeze_holder(SESSION_TIMEOUT);
    rows.push(row(
        "SIGSTOP of the holder for > session timeout",
        &lab,
        from,
        Some((&frozen.0, frozen.1)),
    ));

    // A restart of the server: every session ends, the workers open new ones.
    let from = lab.next_seq();
    lab.holder();
    server.restart().unwrap();
    lab.progress(10, "after the server restarted");
    rows.push(row("restart of the server", &lab, from, None));

    // pg_terminate_backend of the holder's session: as a KILL on MySQL, the server frees the
    // lock before the holder can know, which may write until its Client reads the end.
    let from = lab.next_seq();
    let terminated_at = from;
    let pid = holding_backend(&server);
    server.terminate_backend(pid).unwrap();
    lab.progress(10, "after the holder's backend was terminated");
    rows.push(row("pg_terminate_backend of the holder", &lab, from, None));

    // SIGSTOP of the server (every process of it) past the session timeout.
    let from = lab.next_seq();
    lab.holder();
    server.pause().unwrap();
    thread::sleep(SESSION_TIMEOUT + SESSION_TIMEOUT / 2);
    server.resume().unwrap();
    lab.progress(10, "after the server ran again");
    rows.push(row(
        "SIGSTOP of the server for > session timeout",
        &lab,
        from,
        None,
    ));

    lab.finish_with(&rows, 100, |o, log| {
        chaos_lab::began_across(o, log, terminated_at)
    });
}

/// Failovers under the fenced register. Each round: three workers on the URL of the primary
/// and its synchronous standby contend; the primary is killed, or every other round silenced
/// (SIGSTOP), while a worker holds, and the standby promoted. The holder's session died or went
/// silent with the primary: it reads `Lost` (a worker that checks `health()` stops writing, a
/// blind one is refused by the fence, as tokens on the new primary are above every earlier
/// one); the others are served on the new primary, their new sessions opened past the silent
/// host within the per-host connection timeout. For the next round the new primary gets a
/// standby of its own and the workers are replaced by ones whose URL names the two.
#[test]
fn postgres_failover_chaos() {
    let rounds = chaos_lab::failovers();
    let mut primary = TestingPostgres::start().unwrap();
    let mut standby = primary.start_standby(true).unwrap();
    let mut lab = Lab::new(
        primary.url_with_standby(&standby),
        "postgres_chaos_worker",
        WORKER,
    );
    for _ in 0..3 {
        lab.start_worker();
    }
    lab.progress(20, "before the first failover");
    let mut rows = Vec::new();
    let mut silenced = 0;
    for round in 1..=rounds {
        let from = lab.next_seq();
        lab.holder();
        let struck = Instant::now();
        let silent = round % 2 == 0;
        let fault = if silent {
            primary.pause().unwrap();
            silenced += 1;
            "SIGSTOP of the primary (silent host), standby promoted"
        } else {
            primary.kill().unwrap();
            "kill -9 of the primary, standby promoted"
        };
        standby.promote().unwrap();
        lab.progress(10, "after the standby was promoted");
        println!(
            "failover {round} ({fault}): 10 writes accepted {:?} after the fault",
            struck.elapsed()
        );
        if silent {
            primary.kill().unwrap();
        }
        rows.push(row(fault, &lab, from, None));
        if round < rounds {
            let next = standby.start_standby(true).unwrap();
            primary = std::mem::replace(&mut standby, next);
            lab.url = primary.url_with_standby(&standby);
            for old in std::mem::take(&mut lab.workers) {
                old.stop();
            }
            for _ in 0..3 {
                lab.start_worker();
            }
            lab.progress(10, "with the workers on the new pair");
        }
    }
    lab.finish(&rows, 20 * rounds);
    println!("{rounds} failovers, {silenced} of them with a silent primary");
}
