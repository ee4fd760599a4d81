//! The keeper's watch on each node's wall clock: a reading of `TIME` per round, a step logged
//! with its size and direction, and the holds doubted until the clocks agree again.

use std::time::Duration;

use super::Run;
use crate::core::server_clock::{slack, ServerClock, Step};
use crate::redis::clock::time_us;

impl Run {
    /// A reading of the clock of `node` (its `TIME` answer to a round sent at `sent` and
    /// answered at `answered`): the step since the last reading, if any.
    pub(super) fn clock_read(
        &mut self,
        node: &str,
        time: &redis::Value,
        sent: Duration,
        answered: Duration,
    ) -> Option<Step> {
        let ttl = self.ttl;
        let clock = self
            .clocks
            .entry(node.to_owned())
            .or_insert_with(|| ServerClock::new(ttl));
        let Some(us) = time_us(time) else {
            tracing::debug!("zklock: Redis TIME answered {time:?}");
            clock.forget();
            return None;
        };
        clock.observe(us, sent, answered)
    }

    /// Says in the log what a step of the server's clock does to this Client's holds (`lost`
    /// of them found gone by the renewal that saw it).
    pub(super) fn log_step(&self, node: &str, step: Step, lost: usize) {
        let holds = self.shared.holds.lock().len();
        let what = match step {
            Step::Forward(_) => {
                "every key on it expires early by as much (another Client may have been \
                 granted a lock its holder still believed held)"
            }
            Step::Back(_) => {
                "every key on it outlives its TTL by as much (a holder or waiter that dies now \
                 blocks its lock that much longer; this Client's holds were renewed on the new \
                 clock)"
            }
        };
        tracing::warn!(
            "zklock: the clock of the Redis server {} stepped {step} against this host's \
             monotonic clock (more than the {:.1} s allowed): {what}; {lost} hold(s) found \
             lost, {holds} read Suspended until the clocks agree for a renewal period",
            match node {
                "" | crate::redis::server::ANY => self.shown.clone(),
                node => format!("{} (node {node})", self.shown),
            },
            slack(self.ttl).as_secs_f64()
        );
    }
}
