//! The one backoff of the Client's background loops (session reopen, background deletes, a
//! kept node waiting for a connection): doubling from `first` up to `max`, each pause drawn
//! from half to one and a half times its step, so that the many Clients and kept nodes that
//! lose one server together do not come back in step (a thundering herd on the next one).

use std::time::Duration;

pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    step: Duration,
}

impl Backoff {
    pub(crate) const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            step: first,
        }
    }

    /// The next pause: this step, jittered; the step then doubles up to `max`.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.step.mul_f64(0.5 + fastrand::f64());
        self.step = (self.step * 2).min(self.max);
        pause
    }

    /// Back to the first step, after a success.
    pub(crate) fn reset(&mut self) {
        self.step = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_the_cap_with_jitter_and_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(50), ms(400));
        let mut steps = Vec::new();
        for _ in 0..6 {
            let p = b.next_pause();
            steps.push(p);
        }
        for (p, step) in steps.iter().zip([50, 100, 200, 400, 400, 400]) {
            assert!(
                *p >= ms(step) / 2 && *p <= ms(step) * 3 / 2,
                "{p:?} outside the jitter of {step} ms"
            );
        }
        b.reset();
        assert!(b.next_pause() <= ms(75));
        // Jitter: a thousand Clients pausing together do not all pick one value.
        let mut many: Vec<Duration> = (0..1000)
            .map(|_| Backoff::new(ms(50), ms(400)).next_pause())
            .collect();
        many.sort();
        many.dedup();
        assert!(many.len() > 500, "only {} distinct pauses", many.len());
    }
}
