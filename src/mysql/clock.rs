//! The database's clock against the Client's, for the table mode: a lease record's expiry is a
//! time on the clock of the server that wrote it (`NOW(6)`), so a step of that clock moves every
//! record's remaining life by the step — forward, and every record expires at once while its
//! holder would read `Held` until its next renewal. While the Client holds table leases, its
//! keeper reads the server's `NOW(6)` every few hundred milliseconds and hands each reading
//! here with when, on the Client's monotonic clock (`CLOCK_BOOTTIME`), the request was sent and
//! answered; a reading that moved by more than the slack from what the monotonic clock allows
//! is a step.
//!
//! The allowance covers the round trips (the server read its clock somewhere between the send
//! and the answer of each request), a rate difference of 1,000 ppm (NTP slews by at most 500
//! ppm), and the slack: the larger of 1 s and a quarter of the lease. A smaller step leaves every
//! `Held` reading true: `Held` ends half a lease after the last answered renewal, a quarter of
//! a lease before the record's expiry at the earliest.

use std::time::Duration;

/// How far the rates of the two clocks may differ, in parts per million.
const RATE_PPM: u128 = 1_000;

/// A step of the database's clock found between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Ahead of the Client's clock by this much: records expire early by up to as much.
    Forward(Duration),
    /// Behind by this much: records outlive their lease by up to as much.
    Back(Duration),
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Forward(d) => write!(f, "forward by {:.1} s", d.as_secs_f64()),
            Step::Back(d) => write!(f, "back by {:.1} s", d.as_secs_f64()),
        }
    }
}

/// The last reading of the database's clock (µs since the epoch, and the request's send and
/// answer times on the Client's clock), and the slack a step must exceed.
#[derive(Debug)]
pub(crate) struct DbClock {
    slack: Duration,
    last: Option<(i128, Duration, Duration)>,
}

impl DbClock {
    /// A watch for a Client whose lease is `lease`.
    pub(crate) fn new(lease: Duration) -> DbClock {
        DbClock {
            slack: (lease / 4).max(Duration::from_secs(1)),
            last: None,
        }
    }

    /// The reading `db_us` of a request sent at `sent` and answered at `answered`: the step
    /// since the last reading, if there was one.
    pub(crate) fn observe(
        &mut self,
        db_us: i128,
        sent: Duration,
        answered: Duration,
    ) -> Option<Step> {
        let answered = answered.max(sent);
        let (last_us, last_sent, last_answered) = self.last.replace((db_us, sent, answered))?;
        // The database's clock has moved at least from the last answer to this send, at most
        // from the last send to this answer.
        let least = sent.saturating_sub(last_answered).as_micros() as i128;
        let span = answered.saturating_sub(last_sent);
        let most = span.as_micros() as i128;
        let allowance = (self.slack.as_micros() + span.as_micros() * RATE_PPM / 1_000_000) as i128;
        let moved = db_us - last_us;
        if moved > most + allowance {
            Some(Step::Forward(micros(moved - most)))
        } else if moved < least - allowance {
            Some(Step::Back(micros(least - moved)))
        } else {
            None
        }
    }

    /// Forgets the last reading (nothing is held: the next reading starts afresh).
    pub(crate) fn forget(&mut self) {
        self.last = None;
    }
}

fn micros(us: i128) -> Duration {
    Duration::from_micros(u64::try_from(us.max(0)).unwrap_or(u64::MAX))
}

/// The statement that reads the database's clock in µs since the epoch (every zklock session
/// is in UTC).
pub(crate) const NOW_SQL: &str = "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', NOW(6))";

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// Readings every `every` s, each answered 2 ms after it was sent, the database's clock
    /// `offset` s off from the `from`th on.
    fn run(lease: f64, every: f64, offset: f64, from: usize) -> Vec<Option<Step>> {
        let mut clock = DbClock::new(secs(lease));
        let epoch = 1_800_000_000_000_000i128;
        (0..6)
            .map(|i| {
                let sent = secs(100.0 + every * i as f64);
                let shift = if i >= from { offset } else { 0.0 };
                let db = epoch + ((sent.as_secs_f64() + 0.001 + shift) * 1e6) as i128;
                clock.observe(db, sent, sent + secs(0.002))
            })
            .collect()
    }

    #[test]
    fn clocks_in_step_report_nothing() {
        assert!(run(30.0, 0.5, 0.0, 0).iter().all(Option::is_none));
        // An offset there from the start is no step.
        assert!(run(2.0, 0.5, 3600.0, 0).iter().all(Option::is_none));
    }

    #[test]
    fn a_step_is_reported_once_with_its_direction_and_size() {
        let forward = run(30.0, 0.5, 3600.0, 3);
        assert_eq!(forward.iter().flatten().count(), 1, "{forward:?}");
        let Some(Step::Forward(by)) = forward[3] else {
            panic!("{forward:?}")
        };
        assert!((by.as_secs_f64() - 3600.0).abs() < 0.01, "{by:?}");
        let back = run(2.0, 0.5, -60.0, 2);
        let Some(Step::Back(by)) = back[2] else {
            panic!("{back:?}")
        };
        assert!((by.as_secs_f64() - 60.0).abs() < 0.01, "{by:?}");
        assert_eq!(back.iter().flatten().count(), 1, "{back:?}");
    }

    #[test]
    fn a_step_within_the_slack_or_a_slow_answer_is_no_step() {
        // Lease 2 s: the slack is 1 s; lease 30 s: 7.5 s.
        assert!(run(2.0, 0.5, 0.9, 2).iter().all(Option::is_none));
        assert!(run(2.0, 0.5, 1.2, 2)[2].is_some());
        assert!(run(30.0, 0.5, -7.0, 2).iter().all(Option::is_none));
        let mut clock = DbClock::new(secs(2.0));
        let epoch = 1_800_000_000_000_000i128;
        assert_eq!(clock.observe(epoch, secs(10.0), secs(10.001)), None);
        // Sent at 20 s, answered at 25 s: the server may have read its clock at 24.9 s.
        assert_eq!(
            clock.observe(epoch + 14_900_000, secs(20.0), secs(25.0)),
            None
        );
        clock.forget();
        assert_eq!(
            clock.observe(epoch + 3_600_000_000, secs(26.0), secs(26.1)),
            None
        );
    }
}
