//! [`PgLeaderLatch`]: one leader among every process on a name, with an epoch per term, on the
//! mutex's advisory lock. A latch has no thread: a task on the Client's runtime waits for the
//! lock on a session of the latch's own and keeps the leader's hold.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::advisory::{attempt, check_name, Key};
use super::client::PgClient;
use super::hold::Holding;
use super::keeper::Report;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{HealthCell, LockHealth};
use crate::core::leadership::Election;
use crate::core::lock::Release;

/// How long a latch waits before it queues again after an error (the server down, the retry
/// policy spent).
const AGAIN_AFTER: Duration = Duration::from_secs(1);

/// Curator's `LeaderLatch` on PostgreSQL: every latch on a name waits for the advisory lock
/// `hashtextextended(NAME, 0)` — the [`PgMutex`](super::PgMutex) of the same name — in the
/// server's queue, and the one that holds it leads until it closes, its Client closes, or its
/// hold is lost. Latches and mutexes of one name share the lock.
///
/// # Sessions, no thread
/// [`start`](Self::start) returns at once. A task on the Client's runtime (no thread of its
/// own) waits for the lock on a session of the latch's own, then keeps the leader's hold alive
/// with the hold's heartbeat, as a mutex holder's. Each latch uses one session (a connection)
/// while it waits and while it leads. A hold found lost (its session ended, or the heartbeat
/// late by a whole session timeout) ends the term — listeners hear
/// [`LeadershipChange::Lost`](crate::LeadershipChange::Lost) — and the latch queues again, at
/// the back; after an error it waits a second and queues again. A latch keeps its Client open until it is closed.
///
/// # Asking
/// [`has_leadership`](Self::has_leadership) is computed when called: a term is on and its
/// hold's health is `Held` (a late heartbeat reads `Suspended` and does not count).
///
/// # Epochs
/// Every term has an [`epoch`](Self::epoch): the hold's fencing token, the transaction id
/// assigned at the grant, rising from term to term (see [`PgMutex`](super::PgMutex) for how
/// strong it is).
///
/// # Blocking and Drop
/// `start`, `has_leadership`, `epoch` and `close` return at once (the leader's session is
/// closed in the background, which frees the lock); `await_leadership_timeout(d)` waits at
/// most `d`. Dropping the latch closes it. Listeners run on the Client's events thread and
/// must not block.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::PgClient::connect("postgres://app:secret@127.0.0.1/app")?;
/// let latch = zklock::postgres::PgLeaderLatch::start(&client, "billing-leader")?;
/// if latch.await_leadership_timeout(Duration::from_secs(30))? {
///     println!("leading in epoch {:?}", latch.epoch());
/// }
/// latch.close();
/// # Ok(()) }
/// ```
pub struct PgLeaderLatch {
    client: PgClient,
    name: String,
    election: Arc<Election>,
    /// Bumped by `close`: the task stops waiting or holding.
    closing: watch::Sender<u64>,
}

impl PgLeaderLatch {
    /// Starts taking part in the election `name` (any text of 1 to 1024 bytes without NUL),
    /// in the background; returns at once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, [`Error::Closed`] if the Client is closed;
    /// nothing is sent before it returns.
    pub fn start(client: &PgClient, name: &str) -> Result<PgLeaderLatch> {
        check_name(name)?;
        let inner = client.inner();
        if inner.closed() {
            return Err(Error::Closed);
        }
        let election = Arc::new(Election::new(inner.dispatch()));
        let (closing, closed) = watch::channel(0);
        inner.spawn(contend(
            client.clone(),
            name.to_owned(),
            election.clone(),
            closed,
        ));
        Ok(PgLeaderLatch {
            client: client.clone(),
            name: name.to_owned(),
            election,
            closing,
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops taking part: a leader's term ends (its listeners hear `Lost`) and its session is
    /// closed in the background, which frees the lock; a waiting latch leaves the queue.
    /// Returns at once; idempotent.
    pub fn close(&self) {
        self.election.close();
        self.closing.send_modify(|n| *n = n.wrapping_add(1));
    }
}

crate::core::leadership::forward_election_api!(PgLeaderLatch, election);

impl Drop for PgLeaderLatch {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for PgLeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeaderLatch")
            .field("name", &self.name)
            .field("leads", &self.has_leadership())
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

/// The latch's task: waits for the lock, leads while the hold lasts, and queues again, until
/// the latch or the Client closes.
async fn contend(
    client: PgClient,
    name: String,
    election: Arc<Election>,
    mut closing: watch::Receiver<u64>,
) {
    let inner = client.inner();
    let key = Key::exclusive_with_token(0);
    while !election.is_closed() && !inner.closed() {
        let grant = match attempt(inner, &name, key, Deadline::NEVER, &mut closing).await {
            Ok(Some(grant)) => grant,
            Ok(None) | Err(Error::Cancelled) => continue,
            Err(_) if inner.closed() => break,
            Err(e) => {
                tracing::debug!("zklock: latch {name:?} could not queue ({e}); again soon");
                tokio::select! {
                    () = tokio::time::sleep(AGAIN_AFTER) => {}
                    _ = closing.changed() => {}
                    () = inner.closing() => {}
                }
                continue;
            }
        };
        if election.is_closed() || inner.closed() {
            // Closed while the grant was on its way: dropping it ends its session.
            break;
        }
        let lease = Holding::lease(inner, &grant);
        // The latch's statements read the token (the term's epoch) with the grant.
        let end_term = election.gained(grant.token.unwrap_or_default(), lease.clone());
        let lost = Arc::new(Notify::new());
        let health: HealthCell = Arc::new(parking_lot::Mutex::new(LockHealth::Held));
        let report: Report = {
            let (lost, health) = (lost.clone(), health.clone());
            Arc::new(move |h| {
                *health.lock() = h;
                end_term(h);
                if h == LockHealth::Lost {
                    lost.notify_one();
                }
            })
        };
        let holding = Holding::start(inner, grant, lease, health, report);
        // A close that came since the check above has changed `closing`: seen at once.
        tokio::select! {
            () = lost.notified() => {}
            _ = closing.changed() => {}
        }
        // The session is closed (dropped): the server frees the lock. A lost hold reads so.
        let _ = holding.let_go(inner, &name, key, Release::Background, false);
        election.let_go();
    }
}
