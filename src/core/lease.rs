//! The local lease (Chubby's "jeopardy"): how long ago the client could last vouch that the
//! server still had its session (ZooKeeper) or its lease (a key's TTL, a database session).
//! Lock health is computed from it at call time, so a process frozen past the server-side
//! timeout (SIGSTOP, a stalled VM, a swapped-out heap) does not read `Held` in the moment
//! between waking up and its threads noticing the silence.
//!
//! Each backend renews the lease when it hears from the server (on ZooKeeper: the session
//! supervisor's beat while connected, a round trip sent after a stall, a reconnection to the
//! same session) and opens it with the server-side timeout and the suspend threshold.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::core::health::LockHealth;

/// The time since some fixed point, as the lease reads it.
pub(crate) type Clock = fn() -> Duration;

/// The lease's clock: `CLOCK_BOOTTIME` where there is one, which goes on counting while the
/// machine is suspended. (`Instant` is `CLOCK_MONOTONIC` on Linux, which stops during suspend: a
/// holder resumed past its session would read `Held`.) Elsewhere, `Instant`.
pub(crate) fn boot_clock() -> Duration {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        Duration::new(
            t.tv_sec.max(0) as u64,
            t.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed()
    }
}

/// One session's local lease.
pub(crate) struct LocalLease {
    clock: Clock,
    /// When the session was last vouched for, in ms of `clock`; `u64::MAX`: no session yet.
    heard: AtomicU64,
    /// The session's negotiated timeout, ms.
    session: AtomicU64,
    /// Silence after which the connection counts as suspended (the wire client's connection
    /// timeout), ms.
    suspend: AtomicU64,
}

impl LocalLease {
    pub(crate) fn new() -> LocalLease {
        LocalLease::on(boot_clock)
    }

    /// A lease read on `clock`.
    pub(crate) fn on(clock: Clock) -> LocalLease {
        LocalLease {
            clock,
            heard: AtomicU64::new(u64::MAX),
            session: AtomicU64::new(0),
            suspend: AtomicU64::new(0),
        }
    }

    /// A session was opened with this negotiated timeout; it is heard from now.
    pub(crate) fn open(&self, session: Duration, suspend: Duration) {
        self.session.store(ms(session), Ordering::Release);
        self.suspend
            .store(ms(suspend.min(session)), Ordering::Release);
        self.heard();
    }

    /// A session was opened with this negotiated timeout and vouched for by an answer to a
    /// request sent at `sent` (a reading of the lease's clock): the lease counts from then.
    pub(crate) fn open_at(&self, session: Duration, suspend: Duration, sent: Duration) {
        self.open(session, suspend);
        self.heard.store(ms(sent), Ordering::Release);
    }

    /// The server has the session now.
    pub(crate) fn heard(&self) {
        self.heard.store(ms((self.clock)()), Ordering::Release);
    }

    /// A renewal sent at `sent` (a reading of the lease's clock) was acknowledged: the server's
    /// timer restarted no earlier than that. An older acknowledgement than the last one counted
    /// changes nothing.
    pub(crate) fn heard_at(&self, sent: Duration) {
        let sent = ms(sent);
        let _ = self
            .heard
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |heard| {
                (heard == u64::MAX || sent > heard).then_some(sent)
            });
    }

    /// How long since the session was last vouched for; `None` before the first session.
    pub(crate) fn since_heard(&self) -> Option<Duration> {
        let heard = self.heard.load(Ordering::Acquire);
        (heard != u64::MAX).then(|| (self.clock)().saturating_sub(Duration::from_millis(heard)))
    }

    pub(crate) fn session_timeout(&self) -> Duration {
        Duration::from_millis(self.session.load(Ordering::Acquire))
    }

    /// The period of the supervisor's beat, and how late a beat may come and still count as
    /// on time.
    pub(crate) fn beat(&self) -> (Duration, Duration) {
        let suspend = Duration::from_millis(self.suspend.load(Ordering::Acquire));
        let period = (suspend / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        (period, period + suspend / 4)
    }

    /// Whether the session has not been vouched for for a whole session timeout: the server
    /// has expired it unless it stood still as long.
    pub(crate) fn timed_out(&self) -> bool {
        self.since_heard()
            .is_some_and(|s| s > self.session_timeout())
    }

    /// What can be said now of a node of the current session: Held while the session was
    /// vouched for within the suspend threshold, Suspended up to the session timeout, Lost
    /// beyond it.
    pub(crate) fn health(&self) -> LockHealth {
        let Some(since) = self.since_heard() else {
            return LockHealth::Suspended;
        };
        let suspend = Duration::from_millis(self.suspend.load(Ordering::Acquire));
        if since <= suspend {
            LockHealth::Held
        } else if since <= self.session_timeout() {
            LockHealth::Suspended
        } else {
            LockHealth::Lost
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock the test moves: ms since it started.
    static NOW: AtomicU64 = AtomicU64::new(100_000);

    fn test_clock() -> Duration {
        Duration::from_millis(NOW.load(Ordering::SeqCst))
    }

    /// A lease last renewed `ago`, on a clock of its own that stands still.
    fn renewed(ago: Duration) -> LocalLease {
        let l = LocalLease::new();
        l.open(Duration::from_secs(9), Duration::from_secs(3));
        l.heard
            .store(ms(boot_clock()).saturating_sub(ms(ago)), Ordering::Release);
        l
    }

    /// The lease reads time only through its clock: a clock that jumps (as `CLOCK_BOOTTIME`
    /// does across a suspend of the machine) makes it Lost at once.
    #[test]
    fn a_clock_that_moved_past_the_session_reads_lost() {
        let l = LocalLease::on(test_clock);
        l.open(Duration::from_secs(9), Duration::from_secs(3));
        assert_eq!(l.health(), LockHealth::Held);
        NOW.fetch_add(4_000, Ordering::SeqCst);
        assert_eq!(l.health(), LockHealth::Suspended);
        NOW.fetch_add(20_000, Ordering::SeqCst); // the machine slept
        assert_eq!(l.health(), LockHealth::Lost);
        assert!(l.timed_out());
        l.heard();
        assert_eq!(l.health(), LockHealth::Held);
    }

    #[test]
    fn an_acknowledgement_counts_from_its_send_time_and_never_goes_back() {
        let l = LocalLease::new();
        let before = boot_clock();
        std::thread::sleep(Duration::from_millis(5));
        l.open(Duration::from_secs(9), Duration::from_secs(3));
        let opened = l.heard.load(Ordering::Acquire);
        l.heard_at(before);
        assert_eq!(
            l.heard.load(Ordering::Acquire),
            opened,
            "an older ack is ignored"
        );
        std::thread::sleep(Duration::from_millis(5));
        let sent = boot_clock();
        l.heard_at(sent);
        assert_eq!(l.heard.load(Ordering::Acquire), ms(sent));
    }

    #[test]
    fn a_lease_opened_at_a_send_time_counts_from_it() {
        let l = LocalLease::new();
        let sent = boot_clock().saturating_sub(Duration::from_secs(4));
        l.open_at(Duration::from_secs(9), Duration::from_secs(3), sent);
        assert_eq!(l.health(), LockHealth::Suspended);
        assert_eq!(l.heard.load(Ordering::Acquire), ms(sent));
    }

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = boot_clock();
        std::thread::sleep(Duration::from_millis(5));
        assert!(boot_clock() > a);
    }

    #[test]
    fn health_follows_the_time_since_the_session_was_vouched_for() {
        assert_eq!(LocalLease::new().health(), LockHealth::Suspended);
        assert_eq!(renewed(Duration::ZERO).health(), LockHealth::Held);
        assert_eq!(renewed(Duration::from_secs(2)).health(), LockHealth::Held);
        assert_eq!(
            renewed(Duration::from_secs(4)).health(),
            LockHealth::Suspended
        );
        let frozen = renewed(Duration::from_secs(20));
        assert_eq!(frozen.health(), LockHealth::Lost);
        assert!(frozen.timed_out());
        frozen.heard();
        assert_eq!(frozen.health(), LockHealth::Held);
        assert!(!frozen.timed_out());
    }

    #[test]
    fn the_beat_is_a_fraction_of_the_suspend_threshold() {
        let l = LocalLease::new();
        l.open(Duration::from_secs(9), Duration::from_secs(3));
        let (period, late) = l.beat();
        assert_eq!(period, Duration::from_millis(750));
        assert!(late > period && late < Duration::from_secs(3));
    }
}
