//! Retry policies: Curator's `org.apache.curator.retry`, same parameters and sleep sequences.

use std::{
    fmt,
    sync::Arc,
    time::{Duration, Instant},
};

use crate::core::error::{Error, Result};

/// Decides whether a failed ZooKeeper operation is tried again and after how long.
///
/// Only failures that may succeed on a new attempt (a lost connection) are offered to the
/// policy; a call's deadline still bounds the total time spent, whatever the policy says.
///
/// # Example
/// A policy of one's own: at most 5 retries, 10 ms apart, and none after one second.
/// ```
/// use std::time::Duration;
/// use zklock::RetryPolicy;
///
/// #[derive(Debug)]
/// struct FiveQuickOnes;
///
/// impl RetryPolicy for FiveQuickOnes {
///     fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
///         (retry_count < 5 && elapsed < Duration::from_secs(1))
///             .then_some(Duration::from_millis(10))
///     }
/// }
///
/// assert_eq!(FiveQuickOnes.allow_retry(0, Duration::ZERO), Some(Duration::from_millis(10)));
/// assert_eq!(FiveQuickOnes.allow_retry(5, Duration::ZERO), None);
/// ```
pub trait RetryPolicy: Send + Sync + fmt::Debug + 'static {
    /// Called after a retryable failure.
    ///
    /// `retry_count` is the number of retries already made in this call (0 before the first
    /// retry) and `elapsed` the time since the call began. Returns `Some(sleep)` to retry after
    /// sleeping that long, `None` to give up.
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration>;
}

/// Curator's `ExponentialBackoffRetry`: at most `max_retries` retries, sleeping a random and
/// growing multiple of `base_sleep` before each.
///
/// Before retry `n` (counted from 0) it sleeps `base_sleep * max(1, r)`, `r` drawn uniformly from
/// `[0, 2^(n+1))`, capped at `max_sleep` (unbounded unless given). `max_retries` is pinned to 29,
/// like Curator.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use zklock::{ExponentialBackoffRetry, RetryPolicy};
///
/// let policy = ExponentialBackoffRetry::new(Duration::from_millis(100), 3)?;
/// assert_eq!(policy.allow_retry(0, Duration::ZERO), Some(Duration::from_millis(100)));
/// let second = policy.allow_retry(1, Duration::ZERO).unwrap();
/// assert!(second >= Duration::from_millis(100) && second < Duration::from_millis(400));
/// assert_eq!(policy.allow_retry(3, Duration::ZERO), None);
/// # Ok::<(), zklock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ExponentialBackoffRetry {
    base_sleep: Duration,
    max_retries: u32,
    max_sleep: Duration,
}

impl ExponentialBackoffRetry {
    /// Largest `max_retries` honoured; larger values are pinned to it (`2^30` base sleeps).
    const MAX_RETRIES_LIMIT: u32 = 29;

    /// Backoff from `base_sleep` with at most `max_retries` retries and no cap on the sleep.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `base_sleep` is zero.
    pub fn new(base_sleep: Duration, max_retries: u32) -> Result<Self> {
        Self::with_max_sleep(base_sleep, max_retries, Duration::MAX)
    }

    /// Backoff from `base_sleep` with at most `max_retries` retries, each sleep at most
    /// `max_sleep`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `base_sleep` is zero or `max_sleep` is below `base_sleep`.
    pub fn with_max_sleep(
        base_sleep: Duration,
        max_retries: u32,
        max_sleep: Duration,
    ) -> Result<Self> {
        if base_sleep.is_zero() {
            return Err(Error::invalid(
                "retry policy: base_sleep must be greater than zero",
            ));
        }
        if max_sleep < base_sleep {
            return Err(Error::invalid(format_args!(
                "retry policy: max_sleep ({max_sleep:?}) must be at least base_sleep \
                 ({base_sleep:?})"
            )));
        }
        let max_retries = if max_retries > Self::MAX_RETRIES_LIMIT {
            tracing::warn!(
                "max_retries too large ({max_retries}), pinned to {}",
                Self::MAX_RETRIES_LIMIT
            );
            Self::MAX_RETRIES_LIMIT
        } else {
            max_retries
        };
        Ok(Self {
            base_sleep,
            max_retries,
            max_sleep,
        })
    }
}

impl RetryPolicy for ExponentialBackoffRetry {
    fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        if retry_count >= self.max_retries {
            return None;
        }
        // retry_count < 29, so the bound is at most 2^29.
        let factor = fastrand::u32(0..1 << (retry_count + 1)).max(1);
        let sleep = self.base_sleep.checked_mul(factor).unwrap_or(Duration::MAX);
        Some(sleep.min(self.max_sleep))
    }
}

/// Curator's `BoundedExponentialBackoffRetry`: [`ExponentialBackoffRetry`] whose sleeps never
/// exceed `max_sleep`.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use zklock::{BoundedExponentialBackoffRetry, RetryPolicy};
///
/// let ms = Duration::from_millis;
/// let policy = BoundedExponentialBackoffRetry::new(ms(100), ms(250), 10)?;
/// assert!(policy.allow_retry(5, Duration::ZERO).unwrap() <= ms(250));
/// assert_eq!(policy.allow_retry(10, Duration::ZERO), None);
/// # Ok::<(), zklock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BoundedExponentialBackoffRetry {
    inner: ExponentialBackoffRetry,
}

impl BoundedExponentialBackoffRetry {
    /// Backoff from `base_sleep`, each sleep at most `max_sleep`, at most `max_retries` retries
    /// (pinned to 29).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `base_sleep` is zero or `max_sleep` is below `base_sleep`.
    pub fn new(base_sleep: Duration, max_sleep: Duration, max_retries: u32) -> Result<Self> {
        let inner = ExponentialBackoffRetry::with_max_sleep(base_sleep, max_retries, max_sleep)?;
        Ok(Self { inner })
    }
}

impl RetryPolicy for BoundedExponentialBackoffRetry {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        self.inner.allow_retry(retry_count, elapsed)
    }
}

/// Curator's `RetryNTimes`: at most `n` retries, sleeping `sleep_between` before each.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use zklock::{RetryNTimes, RetryPolicy};
///
/// let policy = RetryNTimes::new(3, Duration::from_millis(50))?;
/// assert_eq!(policy.allow_retry(2, Duration::ZERO), Some(Duration::from_millis(50)));
/// assert_eq!(policy.allow_retry(3, Duration::ZERO), None);
/// # Ok::<(), zklock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RetryNTimes {
    n: u32,
    sleep_between: Duration,
}

impl RetryNTimes {
    /// At most `n` retries (`0`: never retry), `sleep_between` apart (zero allowed, as in
    /// Curator).
    ///
    /// # Errors
    /// None at present; the `Result` keeps all policy constructors alike.
    pub fn new(n: u32, sleep_between: Duration) -> Result<Self> {
        Ok(Self { n, sleep_between })
    }
}

impl RetryPolicy for RetryNTimes {
    fn allow_retry(&self, retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        (retry_count < self.n).then_some(self.sleep_between)
    }
}

/// Curator's `RetryOneTime`: a single retry after `sleep`; [`RetryNTimes`] with `n = 1`.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use zklock::{RetryOneTime, RetryPolicy};
///
/// let policy = RetryOneTime::new(Duration::from_millis(50))?;
/// assert_eq!(policy.allow_retry(0, Duration::ZERO), Some(Duration::from_millis(50)));
/// assert_eq!(policy.allow_retry(1, Duration::ZERO), None);
/// # Ok::<(), zklock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RetryOneTime {
    inner: RetryNTimes,
}

impl RetryOneTime {
    /// One retry, after sleeping `sleep` (zero allowed).
    ///
    /// # Errors
    /// None at present; the `Result` keeps all policy constructors alike.
    pub fn new(sleep: Duration) -> Result<Self> {
        Ok(Self {
            inner: RetryNTimes::new(1, sleep)?,
        })
    }
}

impl RetryPolicy for RetryOneTime {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        self.inner.allow_retry(retry_count, elapsed)
    }
}

/// Curator's `RetryUntilElapsed`: retries, `sleep_between` apart, as long as less than
/// `max_elapsed` has passed since the call began.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use zklock::{RetryPolicy, RetryUntilElapsed};
///
/// let policy = RetryUntilElapsed::new(Duration::from_secs(5), Duration::from_millis(100))?;
/// assert_eq!(policy.allow_retry(40, Duration::from_secs(4)), Some(Duration::from_millis(100)));
/// assert_eq!(policy.allow_retry(0, Duration::from_secs(5)), None);
/// # Ok::<(), zklock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RetryUntilElapsed {
    max_elapsed: Duration,
    sleep_between: Duration,
}

impl RetryUntilElapsed {
    /// Retries while the call has run less than `max_elapsed`, `sleep_between` apart (zero
    /// allowed, as in Curator).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `max_elapsed` is zero: no retry could ever be made.
    pub fn new(max_elapsed: Duration, sleep_between: Duration) -> Result<Self> {
        if max_elapsed.is_zero() {
            return Err(Error::invalid(
                "retry policy: max_elapsed must be greater than zero",
            ));
        }
        Ok(Self {
            max_elapsed,
            sleep_between,
        })
    }
}

impl RetryPolicy for RetryUntilElapsed {
    fn allow_retry(&self, retry_count: u32, elapsed: Duration) -> Option<Duration> {
        (retry_count < u32::MAX && elapsed < self.max_elapsed).then_some(self.sleep_between)
    }
}

/// Curator's `RetryForever`: always retries, `interval` apart. Only a call's deadline (or the
/// client closing) ends the attempts.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use zklock::{RetryForever, RetryPolicy};
///
/// let policy = RetryForever::new(Duration::from_secs(1))?;
/// assert_eq!(policy.allow_retry(u32::MAX, Duration::MAX), Some(Duration::from_secs(1)));
/// # Ok::<(), zklock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RetryForever {
    interval: Duration,
}

impl RetryForever {
    /// Retries without end, sleeping `interval` before each retry.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `interval` is zero (as Curator refuses it).
    pub fn new(interval: Duration) -> Result<Self> {
        if interval.is_zero() {
            return Err(Error::invalid(
                "retry policy: interval must be greater than zero",
            ));
        }
        Ok(Self { interval })
    }
}

impl RetryPolicy for RetryForever {
    fn allow_retry(&self, _retry_count: u32, _elapsed: Duration) -> Option<Duration> {
        Some(self.interval)
    }
}

/// One retry budget per user call, shared by nested steps (CURATOR-559): the policy sees the
/// retries and time of the whole call, not of each step.
#[derive(Debug, Clone)]
pub(crate) struct RetryBudget {
    policy: Arc<dyn RetryPolicy>,
    retries: u32,
    started: Instant,
}

impl RetryBudget {
    /// A fresh budget; the call's elapsed time counts from now.
    pub(crate) fn new(policy: Arc<dyn RetryPolicy>) -> Self {
        Self {
            policy,
            retries: 0,
            started: Instant::now(),
        }
    }

    /// Called after a retryable failure: `Some(sleep)` if another attempt is allowed (and counts
    /// it), `None` to give up.
    pub(crate) fn next_sleep(&mut self) -> Option<Duration> {
        let sleep = self
            .policy
            .allow_retry(self.retries, self.started.elapsed())?;
        self.retries = self.retries.saturating_add(1);
        Some(sleep)
    }

    /// After a round trip the server answered: the next failure starts a fresh budget, as
    /// Curator's per-operation retry loop does, so a long wait survives any number of outages
    /// that are each within the policy.
    pub(crate) fn reset(&mut self) {
        self.retries = 0;
        self.started = Instant::now();
    }

    /// Retries granted so far.
    pub(crate) fn retries(&self) -> u32 {
        self.retries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Z: Duration = Duration::ZERO;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn is_invalid(r: Result<impl fmt::Debug>, param: &str) -> bool {
        matches!(r, Err(Error::InvalidArgument(msg)) if msg.contains(param))
    }

    #[test]
    fn exponential_sleeps_are_random_multiples_of_base_within_bounds() {
        let base = ms(10);
        let policy = ExponentialBackoffRetry::new(base, 10).unwrap();
        for n in 0..10 {
            let upper = (1u32 << (n + 1)) - 1;
            let mut largest = 0;
            for _ in 0..500 {
                let sleep = policy.allow_retry(n, Z).unwrap();
                assert_eq!(sleep.as_nanos() % base.as_nanos(), 0, "{sleep:?}");
                let factor = (sleep.as_nanos() / base.as_nanos()) as u32;
                assert!((1..=upper).contains(&factor), "retry {n}: factor {factor}");
                largest = largest.max(factor);
            }
            // The first retry always sleeps exactly base; later ones spread out.
            if n == 0 {
                assert_eq!(largest, 1);
            } else {
                assert!(largest > upper / 2, "retry {n}: largest factor {largest}");
            }
        }
    }

    #[test]
    fn exponential_gives_up_at_max_retries() {
        let policy = ExponentialBackoffRetry::new(ms(1), 3).unwrap();
        for n in 0..3 {
            assert!(policy.allow_retry(n, Duration::from_secs(3600)).is_some());
        }
        assert_eq!(policy.allow_retry(3, Z), None);
        assert_eq!(policy.allow_retry(u32::MAX, Z), None);
        assert_eq!(
            ExponentialBackoffRetry::new(ms(1), 0)
                .unwrap()
                .allow_retry(0, Z),
            None
        );
    }

    #[test]
    fn max_retries_is_pinned_to_29() {
        let policy = ExponentialBackoffRetry::new(Duration::from_secs(1), 100).unwrap();
        assert_eq!(policy.max_retries, 29);
        assert!(policy.allow_retry(28, Z).is_some());
        assert_eq!(policy.allow_retry(29, Z), None);
        let bounded = BoundedExponentialBackoffRetry::new(ms(1), ms(5), u32::MAX).unwrap();
        assert_eq!(bounded.inner.max_retries, 29);
        assert_eq!(
            ExponentialBackoffRetry::new(ms(1), 29).unwrap().max_retries,
            29
        );
    }

    #[test]
    fn exponential_sleeps_are_capped_at_max_sleep() {
        let unbounded = ExponentialBackoffRetry::new(Duration::from_secs(3600), 29).unwrap();
        assert_eq!(unbounded.max_sleep, Duration::MAX);
        for _ in 0..100 {
            let sleep = unbounded.allow_retry(28, Z).unwrap();
            assert!(sleep >= Duration::from_secs(3600) && sleep < Duration::from_secs(3600 << 29));
        }
        let capped = ExponentialBackoffRetry::with_max_sleep(ms(10), 29, ms(35)).unwrap();
        let bounded = BoundedExponentialBackoffRetry::new(ms(10), ms(35), 29).unwrap();
        for policy in [&capped as &dyn RetryPolicy, &bounded] {
            assert_eq!(policy.allow_retry(0, Z), Some(ms(10)));
            let sleeps: Vec<_> = (0..200)
                .map(|_| policy.allow_retry(5, Z).unwrap())
                .collect();
            assert!(sleeps.iter().all(|s| *s >= ms(10) && *s <= ms(35)));
            assert!(sleeps.contains(&ms(35)));
            assert_eq!(policy.allow_retry(29, Z), None);
        }
    }

    #[test]
    fn retry_n_times_allows_counts_below_n() {
        let policy = RetryNTimes::new(3, ms(20)).unwrap();
        for n in 0..3 {
            assert_eq!(
                policy.allow_retry(n, Duration::from_secs(3600)),
                Some(ms(20))
            );
        }
        assert_eq!(policy.allow_retry(3, Z), None);
        assert_eq!(RetryNTimes::new(0, ms(20)).unwrap().allow_retry(0, Z), None);
        assert_eq!(RetryNTimes::new(1, Z).unwrap().allow_retry(0, Z), Some(Z));
    }

    #[test]
    fn retry_one_time_allows_only_the_first_retry() {
        let policy = RetryOneTime::new(ms(7)).unwrap();
        assert_eq!(policy.allow_retry(0, Z), Some(ms(7)));
        assert_eq!(policy.allow_retry(1, Z), None);
    }

    #[test]
    fn retry_until_elapsed_stops_once_max_elapsed_passed() {
        let policy = RetryUntilElapsed::new(ms(500), ms(50)).unwrap();
        assert_eq!(policy.allow_retry(0, Z), Some(ms(50)));
        assert_eq!(policy.allow_retry(1000, ms(499)), Some(ms(50)));
        assert_eq!(policy.allow_retry(1, ms(500)), None);
        assert_eq!(policy.allow_retry(1, ms(501)), None);
        assert_eq!(policy.allow_retry(u32::MAX, Z), None);
    }

    #[test]
    fn retry_forever_never_gives_up() {
        let policy = RetryForever::new(ms(100)).unwrap();
        for n in [0, 1, 1000, u32::MAX] {
            assert_eq!(policy.allow_retry(n, Duration::MAX), Some(ms(100)));
        }
    }

    #[test]
    fn constructors_reject_bad_parameters() {
        assert!(is_invalid(ExponentialBackoffRetry::new(Z, 3), "base_sleep"));
        assert!(is_invalid(
            ExponentialBackoffRetry::with_max_sleep(ms(10), 3, ms(5)),
            "max_sleep"
        ));
        assert!(is_invalid(
            BoundedExponentialBackoffRetry::new(Z, ms(5), 3),
            "base_sleep"
        ));
        assert!(is_invalid(
            BoundedExponentialBackoffRetry::new(ms(10), ms(5), 3),
            "max_sleep"
        ));
        assert!(is_invalid(RetryUntilElapsed::new(Z, ms(5)), "max_elapsed"));
        assert!(is_invalid(RetryForever::new(Z), "interval"));
        assert!(BoundedExponentialBackoffRetry::new(ms(10), ms(10), 3).is_ok());
        assert!(RetryUntilElapsed::new(ms(1), Z).is_ok());
    }

    #[test]
    fn budget_counts_granted_retries_and_stops_when_policy_gives_up() {
        let mut budget = RetryBudget::new(Arc::new(RetryNTimes::new(2, ms(3)).unwrap()));
        assert_eq!(budget.retries(), 0);
        assert_eq!(budget.next_sleep(), Some(ms(3)));
        assert_eq!(budget.next_sleep(), Some(ms(3)));
        assert_eq!(budget.retries(), 2);
        assert_eq!(budget.next_sleep(), None);
        assert_eq!(budget.next_sleep(), None);
        assert_eq!(budget.retries(), 2);
    }

    #[test]
    fn budget_passes_elapsed_time_since_creation() {
        let mut budget = RetryBudget::new(Arc::new(RetryUntilElapsed::new(ms(200), Z).unwrap()));
        assert_eq!(budget.next_sleep(), Some(Z));
        std::thread::sleep(ms(250));
        assert_eq!(budget.next_sleep(), None);
        assert_eq!(budget.retries(), 1);
    }
}
