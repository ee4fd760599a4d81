//! Fencing tokens of PostgreSQL holders in `participants`: shown from the opt-in table
//! `zklock_tokens` (made with the SQL of `docs/postgres.md`), never without it, never for a
//! session that ended, and at no cost to a grant that reads no token.

mod common;

use std::time::Duration;

use common::postgres::client;
use common::wait_for;

use zklock::postgres::{PgLeaderLatch, PgMutex, PgParticipant, PgReadWriteLock, PgSemaphore};
use zklock::testing::TestingPostgres;
use zklock::{PgClient, RetryForever};

/// The SQL `docs/postgres.md` gives to make the table and grant it: the first `sql` block after
/// its heading.
fn documented_sql() -> String {
    let docs = include_str!("../docs/postgres.md");
    let section = docs
        .split("### Tokens in `holders`")
        .nth(1)
        .expect("the docs' section on the table of tokens");
    let block = section.split("```sql\n").nth(1).expect("its SQL block");
    block.split("```").next().unwrap().to_owned()
}

/// Makes the roles the documented SQL grants to (`app` writes, `ops` reads), then runs it.
fn make_the_table(server: &TestingPostgres) {
    server
        .sql("CREATE ROLE app LOGIN PASSWORD 'app'; CREATE ROLE ops LOGIN PASSWORD 'ops'")
        .unwrap();
    server.sql(&documented_sql()).unwrap();
}

/// A Client of `server` as `role` (its password is its name). Its session timeout is long, so
/// that no heartbeat comes between a statement and a look at the session's last statement.
fn client_as(server: &TestingPostgres, role: &str) -> PgClient {
    let url = if role == server.user() {
        server.url()
    } else {
        server.url_as(role, role, "postgres")
    };
    PgClient::builder(&url)
        .retry_policy(RetryForever::new(Duration::from_millis(100)).unwrap())
        .session_timeout(Duration::from_secs(600))
        .connect()
        .expect("connect")
}

/// The holders of `name`'s locks (leases up to `leases`) as `viewer` reads them.
fn holders(viewer: &PgClient, name: &str, leases: u32) -> Vec<PgParticipant> {
    let all = viewer.participants(name, leases).unwrap();
    all.into_iter().filter(|p| p.holds).collect()
}

/// The token `viewer` shows for the holder of `name`'s lock on backend `pid`.
fn token_of(viewer: &PgClient, name: &str, leases: u32, pid: i32) -> Option<u64> {
    let found = holders(viewer, name, leases);
    let holder = found.iter().find(|p| p.backend_pid == pid);
    holder
        .unwrap_or_else(|| panic!("no holder {pid}: {found:?}"))
        .token
}

/// How many rows of the table are the backend `pid`'s.
fn rows_of(server: &TestingPostgres, pid: i32) -> usize {
    let rows = server
        .sql(&format!(
            "SELECT count(*) FROM zklock_tokens WHERE pid = {pid}"
        ))
        .unwrap();
    rows[0][0].as_deref().unwrap().parse().unwrap()
}

/// The last statement the backend `pid` ran (`pg_stat_activity.query`).
fn last_statement(server: &TestingPostgres, pid: i32) -> String {
    let rows = server
        .sql(&format!(
            "SELECT query FROM pg_stat_activity WHERE pid = {pid}"
        ))
        .unwrap();
    rows[0][0].clone().unwrap_or_default()
}

/// The next transaction id the server will assign (reading it assigns none).
fn next_xid(server: &TestingPostgres) -> u64 {
    let rows = server
        .sql("SELECT txid_snapshot_xmax(txid_current_snapshot())")
        .unwrap();
    rows[0][0].as_deref().unwrap().parse().unwrap()
}

#[test]
fn without_the_table_no_holder_shows_a_token_and_nothing_names_it() {
    let server = TestingPostgres::start().unwrap();
    let c = client_as(&server, server.user());
    let mutex = PgMutex::new(&c, "untabled").unwrap();
    let guard = mutex.lock().unwrap();
    let pid = mutex.backend_pid().unwrap();
    let token = guard.fencing_token();
    assert!(token > 0);
    assert!(
        last_statement(&server, pid).contains("txid_current()"),
        "the token read ran on the holder's session"
    );
    assert!(!last_statement(&server, pid).contains("zklock_tokens"));
    assert_eq!(token_of(&c, "untabled", 0, pid), None);
    let semaphore = PgSemaphore::new(&c, "untabled-sem", 1).unwrap();
    let lease = semaphore.acquire().unwrap();
    assert!(lease.fencing_token() > token);
    assert_eq!(token_of(&c, "untabled-sem", 1, lease.backend_pid()), None);
    drop((guard, lease));
    c.close();
}

/// A mutex holder shows no token until it reads one, then the guard's; released and held again
/// on the same pooled session, it shows none until it reads its new one. A grant and a release
/// that read no token assign no transaction id with the table either.
#[test]
fn a_mutex_holder_shows_its_token_once_read_and_a_new_hold_none_until_asked() {
    let server = TestingPostgres::start().unwrap();
    make_the_table(&server);
    let c = client_as(&server, "app");
    let viewer = client(&server);
    let mutex = PgMutex::new(&c, "ledger").unwrap();
    let guard = mutex.lock().unwrap();
    let pid = mutex.backend_pid().unwrap();
    assert_eq!(token_of(&viewer, "ledger", 0, pid), None, "not read yet");
    assert!(!last_statement(&server, pid).contains("zklock_tokens"));
    let first = guard.fencing_token();
    assert!(first > 0);
    assert!(
        last_statement(&server, pid).contains("zklock_tokens"),
        "one statement read and recorded it"
    );
    assert_eq!(token_of(&viewer, "ledger", 0, pid), Some(first));
    // The holder's own Client reads it too (same role).
    assert_eq!(token_of(&c, "ledger", 0, pid), Some(first));
    guard.release().unwrap();
    assert_eq!(rows_of(&server, pid), 0, "the release deleted its row");
    let guard = mutex.lock().unwrap();
    assert_eq!(mutex.backend_pid(), Some(pid), "the same pooled session");
    assert_eq!(
        token_of(&viewer, "ledger", 0, pid),
        None,
        "a new hold, not read"
    );
    let second = guard.fencing_token();
    assert!(second > first);
    assert_eq!(token_of(&viewer, "ledger", 0, pid), Some(second));
    guard.release().unwrap();
    // Holds that read no token: no transaction id, no write (the release deletes nothing).
    let before = next_xid(&server);
    for _ in 0..20 {
        mutex.lock().unwrap().release().unwrap();
    }
    let assigned = next_xid(&server) - before;
    println!("20 holds without their token, with the table: {assigned} transaction ids");
    assert!(assigned < 5, "{assigned} transaction ids for 20 holds");
    c.close();
    viewer.close();
}

#[test]
fn leases_a_latch_leader_and_readers_show_their_tokens() {
    let server = TestingPostgres::start().unwrap();
    make_the_table(&server);
    let c = client_as(&server, "app");
    let viewer = client(&server);
    let semaphore = PgSemaphore::new(&c, "pool", 3).unwrap();
    let a = semaphore.acquire().unwrap();
    let b = semaphore.acquire().unwrap();
    for lease in [&a, &b] {
        assert_eq!(
            token_of(&viewer, "pool", 3, lease.backend_pid()),
            Some(lease.fencing_token()),
            "lease {}",
            lease.index()
        );
    }
    let (a_pid, a_index) = (a.backend_pid(), a.index());
    a.release().unwrap();
    assert_eq!(rows_of(&server, a_pid), 0, "the release deleted its row");
    // The same pooled session, another lease: its token came with the grant.
    let again = semaphore.acquire().unwrap();
    println!("lease {a_index} released; lease {} taken", again.index());
    assert_eq!(
        token_of(&viewer, "pool", 3, again.backend_pid()),
        Some(again.fencing_token())
    );
    drop((b, again));

    let latch = PgLeaderLatch::start(&c, "leader").unwrap();
    latch.await_leadership().unwrap();
    let epoch = latch.epoch().unwrap();
    wait_for("the leader with its epoch", || {
        let found = holders(&viewer, "leader", 0);
        found.len() == 1 && found[0].token == Some(epoch)
    });
    latch.close();

    // Two readers on sessions of two Clients: each shows its own token.
    let other = client_as(&server, "app");
    let (one, two) = (
        PgReadWriteLock::new(&c, "shared").unwrap(),
        PgReadWriteLock::new(&other, "shared").unwrap(),
    );
    let (r1, r2) = (
        one.read_lock().lock().unwrap(),
        two.read_lock().lock().unwrap(),
    );
    let (t1, t2) = (r1.fencing_token(), r2.fencing_token());
    let found = holders(&viewer, "shared", 0);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().all(|p| p.kind == "read"), "{found:?}");
    let mut shown: Vec<Option<u64>> = found.iter().map(|p| p.token).collect();
    shown.sort_unstable();
    let mut read = vec![Some(t1), Some(t2)];
    read.sort_unstable();
    assert_eq!(shown, read);
    drop((r1, r2));
    c.close();
    other.close();
    viewer.close();
}

/// A row whose session is gone is never shown, even on a live holder with the same pid; the
/// next record write on its key deletes it.
#[test]
fn a_row_of_a_session_that_ended_is_not_shown_and_is_pruned() {
    let server = TestingPostgres::start().unwrap();
    make_the_table(&server);
    let viewer = client(&server);
    let killed = client_as(&server, "app");
    let mutex = PgMutex::new(&killed, "pruned").unwrap();
    let guard = mutex.lock().unwrap();
    let dead = mutex.backend_pid().unwrap();
    guard.fencing_token();
    assert!(server.terminate_backend(dead).unwrap());
    wait_for("the killed holder's lock to be free", || {
        server.advisory_lock("pruned").unwrap().0.is_empty()
    });
    drop(guard);
    assert_eq!(rows_of(&server, dead), 1, "the killed session left its row");

    let c = client_as(&server, "app");
    let mutex = PgMutex::new(&c, "pruned").unwrap();
    let guard = mutex.lock().unwrap();
    let pid = mutex.backend_pid().unwrap();
    assert_ne!(pid, dead);
    assert_eq!(token_of(&viewer, "pruned", 0, pid), None);
    // A row on this holder's pid with another start: a session that had the pid before.
    server
        .sql(&format!(
            "INSERT INTO zklock_tokens VALUES (hashtextextended('pruned', 0), {pid}, \
             now() - interval '1 day', false, 42)"
        ))
        .unwrap();
    assert_eq!(
        token_of(&viewer, "pruned", 0, pid),
        None,
        "another session's row"
    );
    // The same row with this session's start is this session's: shown.
    server
        .sql(&format!(
            "UPDATE zklock_tokens SET backend_start = \
             (SELECT backend_start FROM pg_stat_activity WHERE pid = {pid}) WHERE pid = {pid}"
        ))
        .unwrap();
    assert_eq!(token_of(&viewer, "pruned", 0, pid), Some(42));
    // Reading the token records it, and deletes the killed session's row.
    let token = guard.fencing_token();
    assert_eq!(token_of(&viewer, "pruned", 0, pid), Some(token));
    assert_eq!(
        rows_of(&server, dead),
        0,
        "the record write pruned the dead row"
    );
    guard.release().unwrap();
    c.close();
    viewer.close();
}

/// A role that may only read the table, and one that may not even read it, lock with rising
/// tokens and record none; the reader sees its own role's recorded tokens only.
#[test]
fn roles_that_cannot_write_the_table_lock_with_rising_tokens() {
    let server = TestingPostgres::start().unwrap();
    make_the_table(&server);
    server
        .sql("CREATE ROLE stranger LOGIN PASSWORD 'stranger'")
        .unwrap();
    let writer = client_as(&server, "app");
    let app_mutex = PgMutex::new(&writer, "shared-name").unwrap();
    for role in ["ops", "stranger"] {
        let c = client_as(&server, role);
        let mutex = PgMutex::new(&c, "roles").unwrap();
        let mut tokens = Vec::new();
        for _ in 0..3 {
            let guard = mutex.lock().unwrap();
            let pid = mutex.backend_pid().unwrap();
            tokens.push(guard.fencing_token());
            assert_eq!(rows_of(&server, pid), 0, "{role} recorded nothing");
            assert_eq!(token_of(&c, "roles", 0, pid), None, "{role}");
            guard.release().unwrap();
        }
        let semaphore = PgSemaphore::new(&c, "roles-sem", 2).unwrap();
        let lease = semaphore.acquire().unwrap();
        tokens.push(lease.fencing_token());
        assert_eq!(rows_of(&server, lease.backend_pid()), 0);
        drop(lease);
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{role}: {tokens:?}");
        // Another role's holder: its row is there, but this role may not see its session's
        // start (without pg_read_all_stats), so no token is shown.
        let guard = app_mutex.lock().unwrap();
        let app_pid = app_mutex.backend_pid().unwrap();
        guard.fencing_token();
        assert_eq!(rows_of(&server, app_pid), 1);
        assert_eq!(token_of(&c, "shared-name", 0, app_pid), None, "{role}");
        guard.release().unwrap();
        c.close();
    }
    // Granted pg_read_all_stats, the reading role sees the app's tokens.
    server.sql("GRANT pg_read_all_stats TO ops").unwrap();
    let ops = client_as(&server, "ops");
    let guard = app_mutex.lock().unwrap();
    let token = guard.fencing_token();
    let app_pid = app_mutex.backend_pid().unwrap();
    assert_eq!(token_of(&ops, "shared-name", 0, app_pid), Some(token));
    guard.release().unwrap();
    ops.close();
    writer.close();
}

/// A table dropped while Clients that found it run: each path that used it (a release, a token
/// read, a lease's grant, a latch's grant, the participants) falls back to the plain statement
/// and works, with rising tokens.
#[test]
fn a_table_dropped_under_running_clients_leaves_every_call_working() {
    let server = TestingPostgres::start().unwrap();
    make_the_table(&server);
    let clients: Vec<PgClient> = (0..5).map(|_| client_as(&server, "app")).collect();
    let mutex = PgMutex::new(&clients[0], "dropped").unwrap();
    let guard = mutex.lock().unwrap();
    let first = guard.fencing_token();
    let reader = PgMutex::new(&clients[1], "dropped-read").unwrap();
    // Each Client prepares its statements on its session before the table goes.
    reader.lock().unwrap().release().unwrap();
    let semaphore = PgSemaphore::new(&clients[2], "dropped-sem", 2).unwrap();
    drop(semaphore.acquire().unwrap());
    assert_eq!(
        token_of(&clients[4], "dropped", 0, mutex.backend_pid().unwrap()),
        Some(first)
    );
    server.sql("DROP TABLE zklock_tokens").unwrap();

    guard
        .release()
        .expect("the release falls back to the plain unlock");
    let guard = reader.lock().unwrap();
    let second = guard.fencing_token();
    assert!(
        second > first,
        "the token read falls back: {second} after {first}"
    );
    guard.release().unwrap();
    let lease = semaphore
        .acquire_timeout(Duration::from_secs(30))
        .unwrap()
        .expect("a lease, granted by the plain statements");
    assert!(lease.fencing_token() > second);
    let latch = PgLeaderLatch::start(&clients[3], "dropped-latch").unwrap();
    assert!(latch
        .await_leadership_timeout(Duration::from_secs(60))
        .unwrap());
    assert!(latch.epoch().unwrap() > lease.fencing_token());
    let found = holders(&clients[4], "dropped-sem", 2);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].token, None);
    drop(lease);
    latch.close();
    for c in clients {
        c.close();
    }
}
