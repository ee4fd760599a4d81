//! What zklock reports through the `metrics` facade (feature `metrics`); without the feature
//! every function here is empty and compiles away. The names are listed in
//! `docs/observability.md`; each lock-level one carries a `path` label: the lock's path (the
//! parent of its nodes; a semaphore's leases are under `<path>/leases`).

use std::time::Duration;

#[cfg(feature = "metrics")]
mod on {
    use super::*;

    pub(crate) fn acquired(path: &str, waited: Duration) {
        let path = path.to_owned();
        metrics::counter!("zklock_acquisitions_total", "path" => path.clone()).increment(1);
        metrics::histogram!("zklock_wait_seconds", "path" => path).record(waited.as_secs_f64());
    }

    pub(crate) fn timed_out(path: &str) {
        metrics::counter!("zklock_acquire_timeouts_total", "path" => path.to_owned()).increment(1);
    }

    /// A hold's health went `to` (`"held"`, `"suspended"`, `"lost"`).
    pub(crate) fn health(path: &str, to: &'static str) {
        metrics::counter!("zklock_health_changes_total", "path" => path.to_owned(), "to" => to)
            .increment(1);
    }

    pub(crate) fn released(path: &str, held: Duration) {
        metrics::histogram!("zklock_hold_seconds", "path" => path.to_owned())
            .record(held.as_secs_f64());
    }

    pub(crate) fn waiting(path: &str, delta: f64) {
        metrics::gauge!("zklock_waiters", "path" => path.to_owned()).increment(delta);
    }

    pub(crate) fn background_deletes(delta: f64) {
        metrics::gauge!("zklock_background_deletes_pending").increment(delta);
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    use super::*;

    pub(crate) fn acquired(_: &str, _: Duration) {}
    pub(crate) fn timed_out(_: &str) {}
    pub(crate) fn health(_: &str, _: &'static str) {}
    pub(crate) fn released(_: &str, _: Duration) {}
    pub(crate) fn waiting(_: &str, _: f64) {}
    pub(crate) fn background_deletes(_: f64) {}
}

pub(crate) use on::{acquired, background_deletes, health, released, timed_out};

/// Counts one waiter of this process on `path` in `zklock_waiters` while it lives.
pub(crate) struct Waiting<'a>(&'a str);

impl<'a> Waiting<'a> {
    pub(crate) fn new(path: &'a str) -> Self {
        on::waiting(path, 1.0);
        Waiting(path)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        on::waiting(self.0, -1.0);
    }
}

/// Counts one background delete in `zklock_background_deletes_pending` while it lives.
pub(crate) struct PendingDelete;

impl PendingDelete {
    pub(crate) fn new() -> Self {
        background_deletes(1.0);
        PendingDelete
    }
}

impl Drop for PendingDelete {
    fn drop(&mut self) {
        background_deletes(-1.0);
    }
}
