//! A server's clock against the Client's: the Redis keys' and MySQL's table-mode lease records'
//! expiries are times on the server's wall clock, so a server clock that steps moves every
//! hold's remaining life by the step — forward, and every hold expires at once while its holder
//! would read `Held` until its next renewal. A backend's keeper reads the server's clock (Redis's
//! `TIME`, MySQL's `NOW(6)`) with its renewals and hands each reading here with when, on the
//! lease clock, the request was sent and answered; a reading that moved by more than the slack
//! from what the lease clock says has passed is a step.
//!
//! The comparison allows for the round trips (the server read its clock somewhere between the
//! send and the answer of each request), for a rate difference of 1,000 ppm (NTP slews by at
//! most 500 ppm), and for the slack: the larger of 1 s and a quarter of the hold's lifetime. A
//! smaller step leaves every `Held` reading true — it moves an expiry by less than the quarter
//! lifetime that separates the end of `Held` (half of it after the last acknowledged renewal)
//! from the expiry three quarters on — so reporting it would only disturb holders.

use std::time::Duration;

/// How far the rates of the two clocks may differ, in parts per million.
const RATE_PPM: u128 = 1_000;

/// A step of the server's clock found between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Ahead of the lease clock by this much: holds expire early by up to as much.
    Forward(Duration),
    /// Behind by this much: holds outlive their lifetime by up to as much.
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

/// One reading of the server's clock.
#[derive(Debug, Clone, Copy)]
struct Reading {
    /// The server's clock, µs since the Unix epoch.
    server_us: i128,
    /// When the round was sent and when it was answered, on the lease clock.
    sent: Duration,
    answered: Duration,
}

/// The last reading of the server's clock and the slack a step must exceed.
#[derive(Debug)]
pub(crate) struct ServerClock {
    slack: Duration,
    last: Option<Reading>,
}

impl ServerClock {
    /// A watch for a Client whose hold TTL is `ttl`.
    pub(crate) fn new(ttl: Duration) -> ServerClock {
        ServerClock {
            slack: slack(ttl),
            last: None,
        }
    }

    /// A reading `server_us` (the server's clock, µs since the epoch) of a round sent at
    /// `sent` and answered at `answered` (the lease clock): the step since the last reading,
    /// if there was one.
    pub(crate) fn observe(
        &mut self,
        server_us: i128,
        sent: Duration,
        answered: Duration,
    ) -> Option<Step> {
        let now = Reading {
            server_us,
            sent,
            answered: answered.max(sent),
        };
        let last = self.last.replace(now)?;
        // What the lease clock allows the server's clock to have moved: at least from the
        // last answer to this send, at most from the last send to this answer.
        let shortest = now.sent.saturating_sub(last.answered).as_micros() as i128;
        let longest = now.answered.saturating_sub(last.sent);
        let allowance = self.slack + rate(longest);
        let (longest, allowance) = (longest.as_micros() as i128, allowance.as_micros() as i128);
        let moved = now.server_us - last.server_us;
        if moved > longest + allowance {
            Some(Step::Forward(micros(moved - longest)))
        } else if moved < shortest - allowance {
            Some(Step::Back(micros(shortest - moved)))
        } else {
            None
        }
    }

    /// Forgets the last reading (the next one starts afresh).
    pub(crate) fn forget(&mut self) {
        self.last = None;
    }
}

/// The smallest step reported for a hold TTL: the larger of 1 s and a quarter of it.
pub(crate) fn slack(ttl: Duration) -> Duration {
    (ttl / 4).max(Duration::from_secs(1))
}

/// How far two clocks whose rates differ by [`RATE_PPM`] drift apart over `over`.
fn rate(over: Duration) -> Duration {
    Duration::from_micros(
        u64::try_from(over.as_micros() * RATE_PPM / 1_000_000).unwrap_or(u64::MAX),
    )
}

fn micros(us: i128) -> Duration {
    Duration::from_micros(u64::try_from(us.max(0)).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i128 = 1_000_000;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// Readings every 10 s of the lease clock, each answered 2 ms after it was sent, the
    /// server's clock reading `offset` s more than the lease clock from the `from`th on.
    fn run(ttl: Duration, offset: f64, from: usize) -> Vec<Option<Step>> {
        let mut clock = ServerClock::new(ttl);
        let epoch = 1_800_000_000 * S;
        (0..6)
            .map(|i| {
                let sent = secs(100.0 + 10.0 * i as f64);
                let answered = sent + secs(0.002);
                let shift = if i >= from { offset } else { 0.0 };
                let server = epoch + ((sent.as_secs_f64() + 0.001 + shift) * 1e6) as i128;
                clock.observe(server, sent, answered)
            })
            .collect()
    }

    #[test]
    fn clocks_in_step_report_nothing() {
        assert!(run(secs(30.0), 0.0, 0).iter().all(Option::is_none));
        // An offset that was there from the start is no step.
        assert!(run(secs(2.0), 3600.0, 0).iter().all(Option::is_none));
    }

    #[test]
    fn an_hour_forward_or_back_is_reported_once_at_the_reading_after_it() {
        let forward = run(secs(30.0), 3600.0, 3);
        assert_eq!(forward.iter().flatten().count(), 1, "{forward:?}");
        let Some(Step::Forward(by)) = forward[3] else {
            panic!("{forward:?}")
        };
        assert!((by.as_secs_f64() - 3600.0).abs() < 0.01, "{by:?}");
        let back = run(secs(2.0), -3600.0, 2);
        let Some(Step::Back(by)) = back[2] else {
            panic!("{back:?}")
        };
        assert!((by.as_secs_f64() - 3600.0).abs() < 0.01, "{by:?}");
        assert_eq!(back.iter().flatten().count(), 1, "{back:?}");
    }

    #[test]
    fn a_step_within_the_slack_is_not_reported() {
        // TTL 2 s: the slack is 1 s. TTL 30 s: 7.5 s.
        assert!(run(secs(2.0), 0.9, 2).iter().all(Option::is_none));
        assert!(run(secs(2.0), -0.9, 2).iter().all(Option::is_none));
        assert!(run(secs(2.0), 1.2, 2)[2].is_some());
        assert!(run(secs(30.0), 7.0, 2).iter().all(Option::is_none));
        assert!(run(secs(30.0), -8.0, 2)[2].is_some());
        assert_eq!(slack(secs(2.0)), secs(1.0));
        assert_eq!(slack(secs(30.0)), secs(7.5));
    }

    #[test]
    fn a_slow_round_trip_is_no_step() {
        // A round that took 5 s to be answered (the server or this process stood still):
        // the server's reading may come from any moment of it.
        let mut clock = ServerClock::new(secs(2.0));
        let epoch = 1_800_000_000 * S;
        assert_eq!(clock.observe(epoch, secs(10.0), secs(10.001)), None);
        // Sent at 20 s, answered at 25 s; the server read its clock at 24.9 s, or at 20.1 s.
        assert_eq!(
            clock.observe(epoch + 14_900_000, secs(20.0), secs(25.0)),
            None
        );
        assert_eq!(
            clock.observe(epoch + 14_900_000 + 100_000, secs(25.1), secs(25.2)),
            None
        );
    }

    #[test]
    fn the_rate_allowance_grows_with_the_time_between_readings() {
        // 1,000 ppm over an hour without a reading: 3.6 s more than the slack.
        let mut clock = ServerClock::new(secs(2.0));
        let epoch = 1_800_000_000 * S;
        clock.observe(epoch, secs(0.0), secs(0.001));
        assert_eq!(
            clock.observe(epoch + 3600 * S + 4_000_000, secs(3600.0), secs(3600.001)),
            None
        );
        clock.forget();
        clock.observe(epoch, secs(0.0), secs(0.001));
        assert!(clock
            .observe(epoch + 3600 * S + 5_000_000, secs(3600.0), secs(3600.001))
            .is_some());
    }
}
