//! The call engine: one user call is one deadline and one retry budget, shared by its nested
//! steps (CURATOR-559); each attempt waits for a connected session, runs its requests on the
//! I/O thread, and a retryable failure sleeps as the retry policy says.

use std::future::Future;
use std::time::Duration;

use futures_lite::future;
use zookeeper_client as zk;

use super::{runtime, Client, Signal};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::retry::RetryBudget;

/// Fails with [`Error::ConnectionLoss`] once the connection has been down for `grace` without
/// coming back. A request sent just as the connection broke may be held by the wire client for
/// the next connection; without this its caller would wait until the session ended.
async fn disconnected_for<T>(zk: zk::Client, grace: Duration) -> Result<T> {
    let mut states = zk.state_watcher();
    loop {
        match states.peek_state() {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                states.changed().await;
            }
            // The request itself fails with the session.
            s if s.is_terminated() => future::pending::<()>().await,
            _ => {
                let back = future::or(async { Some(states.changed().await) }, async {
                    runtime::sleep(grace).await;
                    None
                });
                if back.await.is_none() {
                    return Err(Error::ConnectionLoss);
                }
            }
        }
    }
}

/// The deadline and retry budget of one user call, shared by its nested steps (CURATOR-559).
/// The budget starts afresh after every round trip the server answered.
pub(crate) struct Call {
    pub(crate) deadline: Deadline,
    pub(crate) budget: RetryBudget,
    /// Set from another thread to end the call with [`Error::Cancelled`].
    pub(crate) cancel: Option<Signal>,
}

impl Client {
    pub(crate) fn new_call(&self, deadline: Deadline) -> Call {
        Call {
            deadline,
            budget: RetryBudget::new(self.shared().config.retry.clone()),
            cancel: None,
        }
    }

    pub(super) fn user_call(&self) -> Call {
        let deadline = match self.shared().config.operation_timeout {
            Some(d) => Deadline::after(d),
            None => Deadline::NEVER,
        };
        self.new_call(deadline)
    }

    /// Runs one operation with the call's deadline and retry budget.
    pub(crate) fn run<T, F, Fut>(&self, what: &str, call: &mut Call, mut op: F) -> Result<T>
    where
        F: FnMut(zk::Client, u64) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        loop {
            match self.run_once(call, &mut op) {
                Err(e) if e.is_retryable() => {
                    tracing::debug!("{what}: {e}");
                    self.backoff(call, e)?;
                }
                other => return other,
            }
        }
    }

    /// One attempt: waits for a connected session (up to the connection timeout), then runs `op`.
    pub(crate) fn run_once<T, F, Fut>(&self, call: &mut Call, op: F) -> Result<T>
    where
        F: FnOnce(zk::Client, u64) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let (zk, generation) = self.shared().session(call.deadline, call.cancel.as_ref())?;
        let cancelled = async {
            match &call.cancel {
                Some(c) => c.wait().await,
                None => future::pending().await,
            }
            Err(Error::Cancelled)
        };
        // Closed by another thread: the call ends now, and lets go of its wire handle, whose
        // last clone the session's close waits for.
        let closing = async {
            self.shared().stop.wait().await;
            Err(Error::Closed)
        };
        let stalled = disconnected_for(zk.clone(), self.shared().config.connection_timeout);
        let result = runtime::block_on(
            future::or(
                op(zk, generation),
                future::or(cancelled, future::or(closing, stalled)),
            ),
            call.deadline,
        )
        .unwrap_or(Err(Error::Timeout));
        match &result {
            Err(e) if e.outcome_unknown() => {}
            _ => call.budget.reset(),
        }
        result
    }

    /// After a retryable failure: sleeps as the retry policy says and returns `Ok`, or returns
    /// the error when the policy (or the deadline) gives up.
    pub(crate) fn backoff(&self, call: &mut Call, err: Error) -> Result<()> {
        let Some(sleep) = call.budget.next_sleep() else {
            return Err(err);
        };
        if call.deadline.remaining().is_some_and(|left| left <= sleep) {
            return Err(Error::Timeout);
        }
        tracing::debug!("{err}; retry {} in {sleep:?}", call.budget.retries());
        self.shared().sleep(sleep, call.cancel.as_ref());
        if self.is_closed() {
            return Err(Error::Closed);
        }
        if call.cancel.as_ref().is_some_and(Signal::is_set) {
            return Err(Error::Cancelled);
        }
        Ok(())
    }
}
