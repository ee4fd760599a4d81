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
        let (zk, generation, moved) = self.shared().session(call.deadline, call.cancel.as_ref())?;
        self.run_on(zk, generation, moved, call, op)
    }

    /// Runs `op` on the wire client `zk` of session generation `generation`, until it ends, the
    /// call is cancelled or its deadline passes, the Client closes, the connection stays down
    /// for the connection timeout, or the session moves off `zk` (`moved`).
    ///
    /// A session that moved lives on on another wire client, but a request still queued on
    /// this one (sent while it was reconnecting, the Client not yet told) waits there until
    /// that wire client gives up and then fails as if the session had expired: a release's
    /// delete would leave its lock node in a live session for good. So the move ends the
    /// attempt as a connection loss, whose outcome is unknown and which the call retries on the
    /// wire client the session moved to.
    fn run_on<T, F, Fut>(
        &self,
        zk: zk::Client,
        generation: u64,
        moved: Signal,
        call: &mut Call,
        op: F,
    ) -> Result<T>
    where
        F: FnOnce(zk::Client, u64) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let moved_off = async {
            moved.wait().await;
            Err(Error::ConnectionLoss)
        };
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
                future::or(
                    cancelled,
                    future::or(closing, future::or(stalled, moved_off)),
                ),
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

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::testing::{FaultProxy, TestingServer};
    use crate::zookeeper::client::CreateMode;
    use crate::ConnectionState;

    /// A request queued on a wire client while it reconnects (the Client not yet told it is
    /// disconnected), then the session moves to another wire client: the attempt ends as a
    /// connection loss at the move and its retry deletes the node through the moved session,
    /// instead of waiting for the old wire client to give up and failing as if the session had
    /// expired, which left the node — a released lock's — in the live session.
    #[test]
    fn a_request_queued_on_a_wire_client_the_session_moved_off_is_retried() {
        let server = TestingServer::start().unwrap();
        let (old, new) = (
            FaultProxy::for_server(&server).unwrap(),
            FaultProxy::for_server(&server).unwrap(),
        );
        // The chaos workers' settings: the old wire client gives up (1.4 sessions after it last
        // heard from its server) before it has been disconnected for a connection timeout.
        let client = Client::builder(&old.connect_string())
            .session_timeout(Duration::from_secs(10))
            .connection_timeout(Duration::from_secs(30))
            .connect()
            .unwrap();
        let node = client
            .create("/moved/node")
            .mode(CreateMode::Ephemeral)
            .parents_as_containers()
            .call()
            .unwrap();
        let session = client.session_id();
        client.update_connect_string(&new.connect_string()).unwrap();
        let patience = Deadline::after(Duration::from_secs(60));
        let (zk, generation, moved) = client.shared().session(patience, None).unwrap();
        // The old proxy goes silent: its wire client finds its connection dead and keeps
        // reconnecting through it, where nothing answers.
        old.blackhole(true);
        while client.state() != Some(ConnectionState::Suspended) {
            assert!(!patience.expired(), "never suspended");
            std::thread::sleep(Duration::from_millis(20));
        }
        // A release's delete that took this wire client just before the Client heard of the
        // loss: it is queued there, behind the reconnection.
        let mut call = client.new_call(patience);
        let started = Instant::now();
        let first = client.run_on(zk.clone(), generation, moved, &mut call, |zk, _| {
            let path = node.clone();
            async move {
                zk.delete(&path, None)
                    .await
                    .map_err(|e| Error::from_zk(e, &path))
            }
        });
        assert_eq!(
            first,
            Err(Error::ConnectionLoss),
            "after {:?}; the old wire client is {}",
            started.elapsed(),
            zk.state_watcher().peek_state()
        );
        assert_eq!(client.session_id(), session, "the same session, moved");
        assert_eq!(client.state(), Some(ConnectionState::Reconnected));
        // The retry goes through the wire client the session moved to.
        client.delete_guaranteed_in(&node, &mut call).unwrap();
        assert_eq!(client.exists(&node).unwrap(), None);
        assert_eq!(client.session_id(), session);
    }

    /// A guaranteed delete sent just as its connection went silent, for longer than the session
    /// lives: however its first attempt ends (retried through the next session, or answered
    /// with the expiry and then retried in the background), the persistent node is not left
    /// behind.
    #[test]
    fn a_guaranteed_delete_that_fails_with_an_expired_session_goes_on_in_the_background() {
        let server = TestingServer::start().unwrap();
        let proxy = FaultProxy::for_server(&server).unwrap();
        let client = Client::builder(&proxy.connect_string())
            .session_timeout(Duration::from_secs(2))
            .connection_timeout(Duration::from_secs(60))
            .connect()
            .unwrap();
        let node = client.create("/guaranteed").call().unwrap();
        let session = client.session_id();
        // The connection goes silent with the delete on its way: the Client has not heard of it.
        proxy.blackhole(true);
        let deleting = {
            let (client, node) = (client.clone(), node.clone());
            std::thread::spawn(move || client.delete_guaranteed(&node))
        };
        let patience = Deadline::after(Duration::from_secs(60));
        while client.state() != Some(ConnectionState::Suspended) {
            assert!(!patience.expired(), "never suspended");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The server ends the session it hears nothing from; then the connection comes back.
        let observer = Client::connect(&server.connect_string()).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        proxy.blackhole(false);
        let first = deleting.join().unwrap();
        assert!(
            matches!(
                first,
                Err(Error::SessionExpired) | Err(Error::ConnectionLoss) | Ok(())
            ),
            "{first:?}"
        );
        while observer.exists(&node).unwrap().is_some() {
            assert!(
                !patience.expired(),
                "the node is still there: the first attempt said {first:?}, session {session:?} \
                 is now {:?}",
                client.session_id()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
