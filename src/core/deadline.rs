//! One deadline per user call; internals never see a `Duration` budget.

use std::time::{Duration, Instant};

/// The point in time a call must finish by, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline(Option<Instant>);

/// As good as never: what `now + d` becomes when that does not fit in an `Instant`.
const FAR: Duration = Duration::from_secs(100 * 365 * 86_400);

/// `now + d`, or a point so far ahead that it means "never" when `d` does not fit (a
/// `Duration::MAX` timeout is "no limit", never a panic).
pub(crate) fn instant_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

impl Deadline {
    pub(crate) const NEVER: Deadline = Deadline(None);

    pub(crate) fn after(d: Duration) -> Deadline {
        Deadline(Instant::now().checked_add(d))
    }

    pub(crate) fn at(at: Instant) -> Deadline {
        Deadline(Some(at))
    }

    /// `until`, or `NEVER` for `None`.
    pub(crate) fn until(until: Option<Instant>) -> Deadline {
        Deadline(until)
    }

    /// Time left; `None` when unbounded. Zero once passed.
    pub(crate) fn remaining(&self) -> Option<Duration> {
        self.0
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    pub(crate) fn expired(&self) -> bool {
        self.remaining() == Some(Duration::ZERO)
    }

    /// The earlier of this deadline and `now + d`.
    pub(crate) fn min_after(&self, d: Duration) -> Deadline {
        let other = Deadline::after(d);
        match (self.0, other.0) {
            (Some(a), Some(b)) => Deadline(Some(a.min(b))),
            (a, b) => Deadline(a.or(b)),
        }
    }

    /// The later of the two (`NEVER` if either is).
    pub(crate) fn or_later(self, other: Deadline) -> Deadline {
        match (self.0, other.0) {
            (Some(a), Some(b)) => Deadline(Some(a.max(b))),
            _ => Deadline::NEVER,
        }
    }

    pub(crate) fn instant(&self) -> Option<Instant> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_duration_gives_a_deadline_or_an_instant_without_panicking() {
        assert_eq!(Deadline::after(Duration::MAX), Deadline::NEVER);
        assert!(instant_after(Duration::MAX) > Instant::now() + Duration::from_secs(3600));
        let soon = instant_after(Duration::from_millis(5));
        assert!(soon <= Instant::now() + Duration::from_millis(5));
    }

    #[test]
    fn never_has_no_remaining_and_min_picks_the_earlier() {
        assert_eq!(Deadline::NEVER.remaining(), None);
        assert!(!Deadline::NEVER.expired());
        let d = Deadline::NEVER.min_after(Duration::from_secs(1));
        assert!(d.remaining().unwrap() <= Duration::from_secs(1));
        let far = Deadline::after(Duration::from_secs(100)).min_after(Duration::from_secs(1));
        assert!(far.remaining().unwrap() <= Duration::from_secs(1));
        assert!(Deadline::after(Duration::ZERO).expired());
        assert!(Deadline::at(Instant::now()).expired());
    }
}
