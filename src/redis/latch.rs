//! [`RedisLeaderLatch`]: one leader among every process on a name, with an epoch per term. A
//! latch has no thread: its place in the fair mutex's queue is kept by the Client's keeper
//! thread, which also renews the leader's hold.

use std::sync::Arc;

use std::time::{Duration, Instant};

use super::client::RedisClient;
use super::keeper::{ms, Keeping, Tick};
use super::mutex::check_name;
use super::scripts::{invocation, Keys, Layout, TOKEN_KEEP_TTLS};
use super::wake::Registered;
use crate::core::error::{Error, Result};
use crate::core::leadership::Election;
use crate::core::lease::boot_clock;

/// Curator's `LeaderLatch` on Redis: every latch on a name queues in the fair
/// [`RedisMutex`](super::RedisMutex)'s queue of that name, and the one that holds it leads
/// until it closes, its Client closes, or its hold is lost. Latches and `RedisMutex::new` on
/// the same name share one queue.
///
/// # No thread per latch
/// [`start`](Self::start) returns at once. The Client's keeper thread, which renews its holds,
/// also tries the latch's turn when its wake-up message comes (or at its re-check interval, a
/// third of the TTL), and renews the leader's hold. Ten thousand latches cost ten thousand
/// queue entries, not ten thousand threads.
///
/// # Asking
/// [`has_leadership`](Self::has_leadership) is computed when called: a term is on and its
/// hold's health is `Held` (a late renewal reads `Suspended` and does not count). A hold found
/// lost ends the term (listeners hear [`LeadershipChange::Lost`](crate::LeadershipChange::Lost))
/// and the latch queues again with a new place, at the back.
///
/// # Epochs
/// Every term has an [`epoch`](Self::epoch): the hold's fencing token, rising from term to
/// term on the name (see [`RedisMutex`](super::RedisMutex) for how strong it is).
///
/// # Blocking and Drop
/// `start`, `has_leadership`, `epoch` and `close` return at once (the release or the leave is
/// the keeper's, in the background); `await_leadership_timeout(d)` waits at most `d`. Dropping
/// the latch closes it. Listeners run on the Client's events thread and must not block.
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::RedisClient::connect("redis://127.0.0.1:6379")?;
/// let latch = zklock::redis::RedisLeaderLatch::start(&client, "billing-leader")?;
/// if latch.await_leadership_timeout(Duration::from_secs(30))? {
///     println!("leading in epoch {:?}", latch.epoch());
/// }
/// latch.close();
/// # Ok(()) }
/// ```
pub struct RedisLeaderLatch {
    client: RedisClient,
    name: String,
    contest: Arc<Contest>,
}

impl RedisLeaderLatch {
    /// Starts taking part in the election `name` (any text of 1 to 1024 bytes), in the
    /// background; returns at once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name, [`Error::Closed`] if the
    /// Client is closed; nothing is sent before it returns.
    pub fn start(client: &RedisClient, name: &str) -> Result<RedisLeaderLatch> {
        check_name(name)?;
        let inner = client.inner();
        if inner.closed() {
            return Err(Error::Closed);
        }
        let keys = Keys::new(name, Layout::Queue);
        inner.check_keys(&keys)?;
        let contest = Arc::new(Contest {
            keys,
            election: Arc::new(Election::new(inner.dispatch())),
        });
        inner.keeper.tick_with(Box::new(Contending {
            contest: contest.clone(),
            waiting: None,
            holding: None,
            next_try: Instant::now(),
        }));
        Ok(RedisLeaderLatch {
            client: client.clone(),
            name: name.to_owned(),
            contest,
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops taking part: a leader's term ends (its listeners hear `Lost`) and the keeper
    /// releases the hold, or takes the latch out of the queue, in the background. Returns at
    /// once; idempotent.
    pub fn close(&self) {
        self.contest.close();
        self.client.inner().keeper.wake();
    }
}

crate::core::leadership::forward_election_api!(RedisLeaderLatch, contest.election);

impl Drop for RedisLeaderLatch {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for RedisLeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLeaderLatch")
            .field("name", &self.name)
            .field("leads", &self.has_leadership())
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

/// A latch: what to queue for, and the election it reports to.
struct Contest {
    keys: Keys,
    election: Arc<Election>,
}

impl Contest {
    fn close(&self) {
        self.election.close();
    }
}

/// A latch's place in its queue, kept on the Client's keeper thread (a [`Tick`]).
struct Contending {
    contest: Arc<Contest>,
    /// The queue id of the current attempt, registered for its wake-up.
    waiting: Option<(String, Registered)>,
    /// The hold of the term on, if any: (queue id, kept id).
    holding: Option<(String, u64)>,
    next_try: Instant,
}

impl Tick for Contending {
    /// Lets go of a term that ended, leaves the queue once closed, queues with a new id when
    /// it has none, and tries its turn when woken or due.
    fn tick(&mut self, k: &mut Keeping<'_>) -> bool {
        let election = &self.contest.election;
        let keys = &self.contest.keys;
        if election.term_ended() || election.is_closed() {
            if let Some((owner, kept)) = self.holding.take() {
                k.forget(kept);
                k.owe(keys, &owner, false);
            }
            election.let_go();
        }
        if election.is_closed() {
            if let Some((owner, _)) = self.waiting.take() {
                k.owe(keys, &owner, true);
            }
            return false;
        }
        if self.holding.is_some() {
            return true;
        }
        let (owner, registered) = self.waiting.get_or_insert_with(|| k.new_owner("latch"));
        let woken = registered.parker.take_wake();
        if !woken && Instant::now() < self.next_try {
            return true;
        }
        let owner = owner.clone();
        let (ttl, scripts, replicas) = (k.ttl(), k.scripts(), k.replicas());
        let Some(conn) = k.conn(keys) else {
            self.next_try = Instant::now() + ttl / 20;
            return true;
        };
        let sent = boot_clock();
        let mut call = invocation(scripts.acquire(Layout::Queue), keys);
        call.arg(&owner)
            .arg(ms(ttl))
            .arg(ms(ttl))
            .arg("1")
            .arg(ms(ttl * TOKEN_KEEP_TTLS));
        let answer = call.invoke::<(i64, i64)>(conn).and_then(|answer| {
            // Replicated grants: a grant too few replicas confirmed is released, and the latch
            // tries again at its re-check.
            if let (Some(r), (1, _)) = (replicas, answer) {
                let release = scripts.release(Layout::Queue);
                super::mutex::replicated(conn, r, release, keys, &owner)?;
            }
            Ok(answer)
        });
        match answer {
            Ok((1, token)) => {
                let lease = k.lease(sent);
                let report = election.gained(u64::try_from(token).unwrap_or(0), lease.clone());
                let kept = k.keep(keys, &owner, lease, report);
                self.waiting = None;
                self.holding = Some((owner, kept));
            }
            Ok((_, ahead)) => {
                // Look again at the latest when the one ahead would expire unrenewed.
                let expiry = u64::try_from(ahead)
                    .map_or(ttl / 3, |ms| Duration::from_millis(ms.saturating_add(2)));
                self.next_try = Instant::now() + expiry.min(ttl / 3);
            }
            Err(e) if e.kind() == redis::ErrorKind::Client => {
                tracing::warn!("zklock: a Redis latch's term was not begun: {e}");
                self.next_try = Instant::now() + ttl / 3;
            }
            Err(e) => {
                tracing::debug!("zklock: a Redis latch's attempt failed: {e}");
                k.redirected(keys, &e);
                if super::error::broken(&e) {
                    k.drop_conn(keys);
                    if replicas.is_some() {
                        // It may have been granted before the wait for replicas broke.
                        k.owe(keys, &owner, false);
                    }
                }
                self.next_try = Instant::now() + ttl / 20;
            }
        }
        true
    }

    /// The Client closes: a term on ends, and the latch leaves its queue (the hold itself is
    /// among the Client's holds, which the keeper releases).
    fn finish(&mut self, k: &mut Keeping<'_>) {
        self.contest.close();
        if let Some((owner, _)) = self.waiting.take() {
            k.owe(&self.contest.keys, &owner, true);
        }
    }
}
