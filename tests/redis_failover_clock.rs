//! A lock held through Sentinel (`redis+sentinel://`) while the primary fails over to a replica
//! whose wall clock is an hour ahead of the old primary's, or an hour behind
//! (`TestingSentinel::start_with_replica_clock`: the machine's clock is not touched). Redis 7
//! replicates expiry times as absolute times, and the promoted replica expires keys on its own
//! clock; the Client's watch on the server's clock follows the primary, so the failover reads
//! as a step of the server's clock. Each test prints what the holder reads and when (after the
//! failover is seen: every sentinel names the new primary and it says it is one), what the log
//! says, whether another Client is granted the lock and when, and both fencing tokens.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{just_renewed, patience, until_not_held, wait_for, warnings_naming};
use zklock::redis::RedisMutex;
use zklock::testing::{ClockOffset, TestingSentinel};
use zklock::{Error, LockHealth, RedisClient};

/// Long enough that the holder stays `Held` through the failover itself (a renewal period of
/// 3.3 s, `Suspended` for lateness only 5 s after the last renewal).
const TTL: Duration = Duration::from_secs(10);

const HOUR: Duration = Duration::from_secs(3600);

const NAME: &str = "failover-clock";
const KEY: &str = "zklock:{failover-clock}";

/// A set whose replica's clock reads `offset` from the host's (the one a failover promotes),
/// its warnings captured, and two Clients through its sentinels: the holder's and another's.
fn start(offset: ClockOffset) -> (TestingSentinel, RedisClient, RedisClient) {
    let set = TestingSentinel::start_with_replica_clock(offset).unwrap();
    let _ = warnings_naming(&set.url());
    let (holder, other) = (client(&set), client(&set));
    (set, holder, other)
}

fn client(set: &TestingSentinel) -> RedisClient {
    RedisClient::builder(&set.url())
        .ttl(TTL)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .expect("connect through the sentinels")
}

/// Milliseconds of `a` after `b`, negative if before.
fn after(a: Instant, b: Instant) -> i128 {
    match a.checked_duration_since(b) {
        Some(d) => d.as_millis() as i128,
        None => -(b.duration_since(a).as_millis() as i128),
    }
}

/// What a failover did to a holder.
struct Failover {
    /// When the failover was asked for (`SENTINEL FAILOVER`), and when it was seen done.
    asked: Instant,
    seen: Instant,
    /// When the holder first read something other than `Held`, and what.
    changed: Instant,
    health: LockHealth,
}

/// Holds `mutex` (just renewed, so that the next renewal is a period away), fails the set over
/// to the replica whose clock differs, and watches the holder's health until it is no longer
/// `Held`.
fn fail_over_under(set: &TestingSentinel, guard_health: impl Fn() -> LockHealth) -> Failover {
    let old = set.primary().unwrap();
    just_renewed(old, KEY);
    let asked = Instant::now();
    let old = set.failover().unwrap();
    let (seen, health, changed) = thread::scope(|s| {
        let waiting = s.spawn(|| {
            let new = set.wait_for_new_primary(old).unwrap();
            assert_eq!(
                new,
                set.nodes()[1].port(),
                "the replica whose clock differs"
            );
            Instant::now()
        });
        let (took, health) = until_not_held(asked, guard_health);
        let seen = waiting.join().unwrap();
        (seen, health, asked + took)
    });
    let period = TTL / 3;
    println!(
        "failover seen {} ms after it was asked; the holder read {health:?} {} ms after it was \
         seen (renewal period {} ms)",
        after(seen, asked),
        after(changed, seen),
        period.as_millis()
    );
    Failover {
        asked,
        seen,
        changed,
        health,
    }
}

/// The promise: not `Held` within one renewal period of the failover being seen
/// (generous: 2 s more on this loaded machine).
fn within_a_renewal_period(f: &Failover) {
    let bound = TTL / 3 + Duration::from_secs(2);
    assert!(
        f.changed <= f.seen + bound,
        "{:?} came {} ms after the failover was seen",
        f.health,
        after(f.changed, f.seen)
    );
    assert!(f.changed >= f.asked);
}

/// The warnings that name this set (its sentinel URL), once one contains every one of `words`.
fn log_saying(set: &TestingSentinel, words: &[&str]) -> Vec<String> {
    let url = set.url();
    wait_for("the log to say why", || {
        warnings_naming(&url)
            .iter()
            .any(|l| words.iter().all(|w| l.contains(w)))
    });
    let log = warnings_naming(&url);
    println!("the log:\n{}", log.join("\n"));
    log
}

/// An hour ahead: the holder's key (and the token key) expire on the new primary at once.
/// A Client that connects after the failover is granted the lock at once, while the holder
/// reads `Held` until its keeper's next round moves it to the new primary and finds the key
/// gone: `Lost`, the log naming the forward step. A Client connected before is moved by its
/// own keeper within a renewal period too. The new holders' tokens are higher (the new
/// primary's clock, an hour ahead), so a fence refuses the old holder.
#[test]
fn a_failover_to_a_replica_an_hour_ahead_makes_the_holder_lost_and_the_lock_free_at_once() {
    let (set, holder, other) = start(ClockOffset::Ahead(HOUR));
    let mutex = RedisMutex::new(&holder, NAME).unwrap();
    let guard = mutex.lock().unwrap();
    let theirs = RedisMutex::new(&other, NAME).unwrap();
    assert!(theirs.try_lock().unwrap().is_none());
    let ours = guard.fencing_token();
    let f = thread::scope(|s| {
        // A Client connected before the failover tries from then on, every 20 ms.
        let taking = s.spawn(|| loop {
            if let Ok(Some(g)) = theirs.try_lock() {
                let granted = (Instant::now(), g.fencing_token());
                g.release().unwrap();
                return granted;
            }
            thread::sleep(Duration::from_millis(20));
        });
        // A Client that connects once the failover is done (every sentinel names the new
        // primary: a Client goes where a majority of them say) tries once.
        let fresh = s.spawn(|| {
            let new = set.nodes()[1].port().to_string();
            wait_for("every sentinel to name the new primary", || {
                (0..set.sentinel_ports().len()).all(|i| {
                    set.sentinel_command(
                        i,
                        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", set.master_name()],
                    )
                    .is_ok_and(|a| a.lines().nth(1) == Some(new.as_str()))
                })
            });
            let c = client(&set);
            let m = RedisMutex::new(&c, NAME).unwrap();
            let tried = Instant::now();
            let got = m.try_lock().unwrap().map(|g| {
                let token = g.fencing_token();
                g.release().unwrap();
                (Instant::now(), token)
            });
            c.close();
            (tried, got)
        });
        let f = fail_over_under(&set, || guard.health());
        let (granted, token) = taking.join().unwrap();
        let (tried, fresh) = fresh.join().unwrap();
        println!(
            "the Client connected before was granted the lock {} ms after the failover was \
             seen ({} ms before the holder read {:?}); tokens: holder {ours}, new holder \
             {token} (+{})",
            after(granted, f.seen),
            after(f.changed, granted),
            f.health,
            token.saturating_sub(ours)
        );
        assert!(token > ours, "the token rose");
        match fresh {
            Some((at, token)) => {
                println!(
                    "a Client connected after the failover was granted the lock {} ms after \
                     it was seen ({} ms before the holder read {:?}), token +{}",
                    after(at, f.seen),
                    after(f.changed, at),
                    f.health,
                    token.saturating_sub(ours)
                );
                assert!(token > ours, "the token rose");
            }
            // Only if the Client connected before had it then.
            None => assert!(granted <= tried, "the lock was not free on the new primary"),
        }
        f
    });
    assert_eq!(f.health, LockHealth::Lost);
    within_a_renewal_period(&f);
    log_saying(&set, &["stepped forward by 3600", "expired early"]);
    assert!(matches!(guard.release(), Err(Error::LockLost)));
    holder.close();
    other.close();
}

/// An hour behind: the holder's key is on the new primary with an hour more to live (as is
/// every key: the token key's TTL read more than an hour). The holder's next renewal there
/// sets its TTL again on the new clock and finds the step: `Suspended` for a renewal period,
/// the log naming the backward step, then `Held` again. Another Client is not granted the lock
/// while the holder holds; after the release it is, with a higher token (the last one + 1:
/// the new primary's clock is behind it).
#[test]
fn a_failover_to_a_replica_an_hour_behind_makes_the_holder_suspended_for_a_renewal_period() {
    let (set, holder, other) = start(ClockOffset::Behind(HOUR));
    let mutex = RedisMutex::new(&holder, NAME).unwrap();
    let guard = mutex.lock().unwrap();
    let theirs = RedisMutex::new(&other, NAME).unwrap();
    let f = fail_over_under(&set, || guard.health());
    let new = &set.nodes()[1];
    let token_ttl: i64 = new
        .command(&["PTTL", &format!("{KEY}:token")])
        .unwrap()
        .parse()
        .unwrap();
    println!(
        "the token key's TTL on the new primary: {:.1} s (set for {} s at the grant)",
        token_ttl as f64 / 1000.0,
        (TTL * 10).as_secs()
    );
    assert!(token_ttl > HOUR.as_millis() as i64, "{token_ttl} ms");
    assert_eq!(f.health, LockHealth::Suspended);
    within_a_renewal_period(&f);
    log_saying(&set, &["stepped back by 3600", "outlives its TTL"]);
    // The renewal that found the step set the key's TTL on the new clock.
    let key_ttl: i64 = new.command(&["PTTL", KEY]).unwrap().parse().unwrap();
    println!("the holder's key's TTL after its renewal: {key_ttl} ms");
    assert!(key_ttl <= TTL.as_millis() as i64, "{key_ttl} ms");
    assert!(
        theirs.try_lock().unwrap().is_none(),
        "another Client was granted a held lock"
    );
    let deadline = Instant::now() + patience();
    while guard.health() != LockHealth::Held {
        assert!(Instant::now() < deadline, "never Held again");
        thread::sleep(Duration::from_millis(5));
    }
    println!(
        "Held again {} ms after it read Suspended",
        after(Instant::now(), f.changed)
    );
    let old_token = guard.fencing_token();
    guard.release().unwrap();
    let released = Instant::now();
    let g = theirs
        .try_lock_for(patience())
        .unwrap()
        .expect("granted after the release");
    println!(
        "another Client was granted the lock {} ms after the release; tokens: holder \
         {old_token}, new holder {} (+{})",
        after(Instant::now(), released),
        g.fencing_token(),
        g.fencing_token().saturating_sub(old_token)
    );
    assert!(g.fencing_token() > old_token, "the token rose");
    g.release().unwrap();
    holder.close();
    other.close();
}
