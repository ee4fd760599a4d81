//! The background guaranteed delete: nodes a caller no longer wants (a released lock, an
//! abandoned attempt, a node left in a session the Client gave up) are deleted on the executor
//! thread, through whatever session is current, until they are gone. Callers never wait for it,
//! which is what lets `Drop` return at once.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_lite::future;
use zookeeper_client as zk;

use super::backoff::Backoff;
use super::runtime::{sleep, Signal};
use super::shared::Shared;
use crate::core::error::{Error, Result};
use crate::zookeeper::path;

/// A node to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Doomed {
    /// The node at `path`. With `owner`, it is deleted from another session only while it still
    /// belongs to session `owner` (0: a persistent node).
    Node { path: String, owner: Option<i64> },
    /// What a protected create whose outcome is unknown may have made: the child of `parent`
    /// whose name starts with `prefix` (CURATOR-45: the create may have been applied).
    Protected { parent: String, prefix: String },
}

impl Doomed {
    pub(crate) fn node(path: &str, owner: Option<i64>) -> Doomed {
        Doomed::Node {
            path: path.to_owned(),
            owner,
        }
    }

    pub(crate) fn protected(prefix_path: &str) -> Doomed {
        Doomed::Protected {
            parent: path::parent(prefix_path).to_owned(),
            prefix: path::name(prefix_path).to_owned(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Doomed::Node { path, .. } => path.clone(),
            Doomed::Protected { parent, prefix } => format!("{parent}/{prefix}*"),
        }
    }
}

/// Starts deleting `doomed` in the background; returns at once.
pub(crate) fn spawn(shared: &Arc<Shared>, doomed: Doomed) {
    spawn_after(shared, doomed, None);
}

/// Starts deleting `doomed` in the background once `after` is set (or its bound has passed);
/// returns at once.
pub(crate) fn spawn_after(shared: &Arc<Shared>, doomed: Doomed, after: Option<(Signal, Duration)>) {
    let task_shared = shared.clone();
    let pending = crate::core::metrics::PendingDelete::new();
    shared.spawn(async move {
        let _pending = pending;
        if let Some((after, bound)) = after {
            future::or(after.wait(), sleep(bound)).await;
        }
        let shared = task_shared;
        let what = doomed.describe();
        let misses = AtomicU32::new(0);
        until_gone(&what, shared.stop.clone(), || {
            attempt(&shared, &doomed, &misses)
        })
        .await;
    });
}

/// How often a protected node that is not there (yet) is looked for again: its create may still
/// be on its way to the leader.
const PROTECTED_LOOKS: u32 = 3;

async fn attempt(shared: &Shared, doomed: &Doomed, misses: &AtomicU32) -> Result<()> {
    let zk = shared.current().ok_or(Error::ConnectionLoss)?;
    match doomed {
        Doomed::Node { path, owner } => {
            if let Some(owner) = *owner {
                if zk.session_id().0 != owner {
                    // Another session (the Client gave `owner` up): only a node still of
                    // `owner` is ours to delete.
                    let stat = zk
                        .check_stat(path)
                        .await
                        .map_err(|e| Error::from_zk(e, path))?;
                    match stat {
                        None => return Ok(()),
                        Some(s) if s.ephemeral_owner != owner => {
                            return Err(Error::ZooKeeper(format!(
                                "{path:?} belongs to session {:#x}, not {owner:#x}",
                                s.ephemeral_owner
                            )))
                        }
                        Some(_) => {}
                    }
                }
            }
            delete(&zk, path).await
        }
        Doomed::Protected { parent, prefix } => {
            // A follower may lag behind the leader that applied the create: catch up first.
            zk.sync(parent)
                .await
                .map_err(|e| Error::from_zk(e, parent))?;
            let children = zk
                .list_children(parent)
                .await
                .map_err(|e| Error::from_zk(e, parent))?;
            match children.iter().find(|c| c.starts_with(prefix.as_str())) {
                Some(name) => delete(&zk, &path::join(parent, name)).await,
                None if misses.fetch_add(1, Ordering::Relaxed) + 1 < PROTECTED_LOOKS => {
                    Err(Error::ConnectionLoss)
                }
                None => Ok(()),
            }
        }
    }
}

async fn delete(zk: &zk::Client, path: &str) -> Result<()> {
    zk.delete(path, None)
        .await
        .map_err(|e| Error::from_zk(e, path))
}

/// Runs `attempt` until it deletes (or finds nothing to delete), with jittered backoff between
/// attempts. A connection loss of any kind ([`Error::is_retryable`], the same test as every
/// foreground call) and a session's end are retried; `stop` (the Client closing) ends it.
pub(crate) async fn until_gone<F, Fut>(what: &str, stop: Signal, mut attempt: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        if stop.is_set() {
            return false;
        }
        match attempt().await {
            Ok(()) | Err(Error::NoNode(_)) => return true,
            Err(Error::Closed) => return false,
            Err(e) if e.is_retryable() || e == Error::SessionExpired => {
                tracing::debug!("background delete of {what}: {e}; retrying");
                future::or(sleep(backoff.next_pause()), stop.wait()).await;
            }
            Err(e) => {
                tracing::warn!("background delete of {what} gave up: {e}");
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::deadline::Deadline;
    use crate::zookeeper::client::runtime::block_on;
    use std::collections::VecDeque;

    fn run(answers: Vec<Result<()>>) -> (bool, usize) {
        let mut answers: VecDeque<_> = answers.into();
        let mut calls = 0;
        let done = block_on(
            until_gone("/l/n", Signal::default(), || {
                calls += 1;
                let next = answers.pop_front().unwrap_or(Ok(()));
                async move { next }
            }),
            Deadline::after(Duration::from_secs(60)),
        )
        .expect("finishes");
        (done, calls)
    }

    #[test]
    fn connection_errors_of_any_kind_and_session_ends_are_retried() {
        // A frozen server makes the wire client fail requests with its own error, which maps
        // to ConnectionLoss like every other socket failure; the old code gave up on it.
        let custom = Error::ConnectionLoss;
        let (done, calls) = run(vec![
            Err(custom),
            Err(Error::SessionExpired),
            Err(Error::ConnectionLoss),
            Ok(()),
        ]);
        assert!(done);
        assert_eq!(calls, 4);
        assert_eq!(run(vec![Err(Error::NoNode("/l/n".into()))]), (true, 1));
    }

    #[test]
    fn a_refusal_or_a_close_ends_it() {
        assert_eq!(run(vec![Err(Error::NoAuth("/l/n".into()))]), (false, 1));
        assert_eq!(run(vec![Err(Error::Closed)]), (false, 1));
        let stop = Signal::default();
        stop.set();
        let mut calls = 0;
        let done = block_on(
            until_gone("/l/n", stop, || {
                calls += 1;
                async { Ok(()) }
            }),
            Deadline::NEVER,
        );
        assert_eq!((done, calls), (Some(false), 0));
    }
}
