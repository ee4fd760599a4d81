//! [`MySqlLeaderLatch`]: one leader among every process on a name, with an epoch per term, on
//! the mutex's `GET_LOCK`. A thread of the latch's own waits for the lock on a connection of
//! its own and keeps the leader's hold.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::client::MySqlClient;
use super::get_lock::{attempt, Waits};
use super::mode::MySqlMode;
use super::sql::{check_name, key_sql};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::hold::Report;
use crate::core::leadership::Election;
use crate::core::lock::Release;

/// How long a latch waits before it queues again after an error (the server down, the retry
/// policy spent).
const AGAIN_AFTER: Duration = Duration::from_secs(1);

/// Curator's `LeaderLatch` on MySQL or MariaDB: every latch on a name waits for the
/// `GET_LOCK` of the [`MySqlMutex`](super::MySqlMutex) of the same name, in the server's queue
/// (arrival order on MariaDB), and the one that holds it leads until it closes, its Client
/// closes, or its hold is lost. Latches and mutexes of one name share the lock.
///
/// In the table mode ([`MySqlMode::Table`](super::MySqlMode)) the latch's thread polls for the
/// lease record of the name instead (not in arrival order), the Client's keeper renews it while
/// it leads, and the epoch is the record's version.
///
/// # A thread and a connection per latch
/// [`start`](Self::start) returns at once. A thread of the latch's own (`zklock-mysql-latch`)
/// waits for the lock on a connection of its own, then the Client's keeper keeps the leader's
/// hold alive with its heartbeat, as a mutex holder's. A hold found lost (its session ended or
/// killed, or the heartbeat late by a whole session timeout) ends the term — listeners hear
/// [`LeadershipChange::Lost`](crate::LeadershipChange::Lost) — and the latch queues again, at
/// the back; after an error it waits a second and queues again. A latch keeps its Client open
/// until it is closed.
///
/// # Epochs
/// Every term has an [`epoch`](Self::epoch): the hold's fencing token, the counter of the
/// name in `zklock_tokens`, rising from term to term.
///
/// # Blocking and Drop
/// `start`, `has_leadership` and `epoch` return at once; `close` ends a wait with `KILL
/// CONNECTION` from the Client's own session (at most the connection timeout plus the operation
/// timeout) and lets the leader's connection go in the background, which frees the lock.
/// Dropping the latch closes it. Listeners run on the Client's events thread and must not
/// block.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::MySqlClient::connect("mysql://app:secret@127.0.0.1/app")?;
/// let latch = zklock::mysql::MySqlLeaderLatch::start(&client, "billing-leader")?;
/// if latch.await_leadership_timeout(Duration::from_secs(30))? {
///     println!("leading in epoch {:?}", latch.epoch());
/// }
/// latch.close();
/// # Ok(()) }
/// ```
pub struct MySqlLeaderLatch {
    client: MySqlClient,
    name: String,
    election: Arc<Election>,
    shared: Arc<Shared>,
}

/// What the latch and its thread share.
struct Shared {
    /// Bumped by `close`: the wait is cancelled.
    closing: AtomicU64,
    /// Set when the term ends (lost or closed); the thread waits on `changed`.
    ended: Mutex<bool>,
    changed: Condvar,
    /// What `cancel_waiters` names this latch's waits by.
    id: usize,
}

impl MySqlLeaderLatch {
    /// Starts taking part in the election `name` (any text of 1 to 1024 bytes), in the
    /// background; returns at once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, [`Error::Closed`] if the Client is closed,
    /// [`Error::ThreadStart`] if its thread cannot start; nothing is sent before it returns.
    pub fn start(client: &MySqlClient, name: &str) -> Result<MySqlLeaderLatch> {
        check_name(name)?;
        let inner = client.inner();
        if inner.closed() {
            return Err(Error::Closed);
        }
        static IDS: AtomicU64 = AtomicU64::new(1 << 50);
        let election = Arc::new(Election::new(inner.dispatch()));
        let shared = Arc::new(Shared {
            closing: AtomicU64::new(0),
            ended: Mutex::new(false),
            changed: Condvar::new(),
            id: IDS.fetch_add(1, Ordering::Relaxed) as usize,
        });
        {
            let (client, key, election, shared) = (
                client.clone(),
                key_sql(name),
                election.clone(),
                shared.clone(),
            );
            let table = match inner.mode {
                MySqlMode::GetLock => None,
                MySqlMode::Table => Some(super::table::Raw::new(&client, name)?),
            };
            std::thread::Builder::new()
                .name("zklock-mysql-latch".into())
                .spawn(move || match table {
                    None => contend(&client, &key, &election, &shared),
                    Some(raw) => contend_table(&client, &raw, &election, &shared),
                })
                .map_err(|e| Error::thread_start("zklock-mysql-latch", &e))?;
        }
        Ok(MySqlLeaderLatch {
            client: client.clone(),
            name: name.to_owned(),
            election,
            shared,
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops taking part: a leader's term ends (its listeners hear `Lost`) and its connection
    /// is closed by the latch's thread, which frees the lock; a waiting latch's wait is
    /// killed. Idempotent.
    pub fn close(&self) {
        if self.election.is_closed() {
            return;
        }
        self.election.close();
        self.shared.closing.fetch_add(1, Ordering::SeqCst);
        *self.shared.ended.lock() = true;
        self.shared.changed.notify_all();
        let inner = self.client.inner();
        match inner.mode {
            MySqlMode::GetLock => inner.cancel_waiters(self.shared.id),
            // The latch's thread looks at the election before each poll.
            MySqlMode::Table => inner.keeper.wake_waiters(),
        }
    }
}

crate::core::leadership::forward_election_api!(MySqlLeaderLatch, election);

impl Drop for MySqlLeaderLatch {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for MySqlLeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlLeaderLatch")
            .field("name", &self.name)
            .field("leads", &self.has_leadership())
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

/// The latch's thread: waits for the lock, leads while the hold lasts, and queues again, until
/// the latch or the Client closes.
fn contend(client: &MySqlClient, key: &str, election: &Arc<Election>, shared: &Shared) {
    let inner = client.inner();
    while !election.is_closed() && !inner.closed() {
        let waits = Waits {
            owner: shared.id,
            cancelled: &shared.closing,
            gen: shared.closing.load(Ordering::SeqCst),
        };
        if election.is_closed() {
            break;
        }
        let grant = match attempt(inner, key, Deadline::NEVER, &waits) {
            Ok(Some(grant)) => grant,
            Ok(None) | Err(Error::Cancelled) => continue,
            Err(_) if inner.closed() => break,
            Err(e) => {
                tracing::debug!("zklock: latch on {key} could not queue ({e}); again soon");
                let mut ended = shared.ended.lock();
                if !*ended {
                    shared.changed.wait_for(&mut ended, AGAIN_AFTER);
                }
                continue;
            }
        };
        if election.is_closed() || inner.closed() {
            // Closed while the grant was on its way: closing its connection frees the lock.
            grant.session.close();
            break;
        }
        *shared.ended.lock() = false;
        // A lost hold ends the term (`term_ended`), which the wait below looks at.
        let report: Report = election.gained(grant.token.unwrap_or_default(), grant.lease.clone());
        let kept = inner
            .keeper
            .keep(grant.session.clone(), grant.lease.clone(), report);
        {
            let mut ended = shared.ended.lock();
            while !*ended && !election.term_ended() && !inner.closed() {
                shared
                    .changed
                    .wait_for(&mut ended, Duration::from_millis(100));
            }
        }
        inner.keeper.forget(kept);
        // Closing the connection frees the lock.
        grant.session.close();
        election.let_go();
    }
}

/// The latch's thread in the table mode: polls for the lease record of the name, leads while
/// the Client's keeper renews it, and queues again, until the latch or the Client closes.
fn contend_table(
    client: &MySqlClient,
    raw: &super::table::Raw,
    election: &Arc<Election>,
    shared: &Shared,
) {
    let inner = client.inner();
    while !election.is_closed() && !inner.closed() {
        let granted = match raw.acquire_unless(Deadline::NEVER, &|| election.is_closed()) {
            Ok(Some(granted)) => granted,
            Ok(None) | Err(Error::Cancelled) => continue,
            Err(_) if inner.closed() => break,
            Err(e) => {
                tracing::debug!(
                    "zklock: latch on {} could not poll ({e}); again soon",
                    raw.key
                );
                let mut ended = shared.ended.lock();
                if !*ended {
                    shared.changed.wait_for(&mut ended, AGAIN_AFTER);
                }
                continue;
            }
        };
        let mut grant = granted.grant;
        if election.is_closed() || inner.closed() {
            // Closed while the record was being taken: it is let go of at once.
            let _ = raw.release(grant, Release::Within(None), false);
            break;
        }
        *shared.ended.lock() = false;
        let report: Report = election.gained(granted.token.known(), grant.lease.clone());
        if raw.keep(&mut grant, report).is_err() {
            break;
        }
        {
            let mut ended = shared.ended.lock();
            while !*ended && !election.term_ended() && !inner.closed() {
                shared
                    .changed
                    .wait_for(&mut ended, Duration::from_millis(100));
            }
        }
        // A record the keeper found taken or expired is not let go of (its version has
        // moved on); one whose lease ran out here is not either. Otherwise (a close, an end of
        // the term by the latch) it is, so that the next leader takes it at once.
        let lost = super::table::Raw::health(&grant, LockHealth::Held) == LockHealth::Lost;
        let _ = raw.release(grant, Release::Within(None), lost);
        election.let_go();
    }
}
