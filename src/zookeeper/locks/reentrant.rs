//! The re-entrant hold bookkeeping shared by the mutex and both halves of the read-write lock:
//! per-thread holds (the core's count) over LockInternals, lock health and fencing tokens.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::driver::{LockDriver, LockNode};
use super::internals::{Acquired, Leases, LockInternals, Release};
use super::keeper::{keep_node, vouch, KeeperGuard, OnData};
use super::revocation::REVOKE_MESSAGE;
use crate::core::channel::Receiver;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::{HealthCell, HealthEvent, HealthFeed, LockHealth};
use crate::core::reentrant::{Detached, ThreadHolds};
use crate::zookeeper::client::Client;

pub(crate) struct Reentrant {
    client: Client,
    pub(crate) internals: LockInternals<Client>,
    holders: ThreadHolds<Holding>,
    feed: Arc<HealthFeed>,
    revocable: Mutex<Option<RevokeListener>>,
}

type RevokeListener = Arc<dyn Fn() + Send + Sync>;

/// One thread's hold of the lock node.
pub(crate) struct Holding {
    pub(crate) path: String,
    /// The session the node belongs to (0: a persistent node).
    session: i64,
    token: u64,
    health: HealthCell,
    keeper: Option<KeeperGuard>,
    since: Instant,
}

impl Reentrant {
    pub(crate) fn new(
        client: &Client,
        path: &str,
        lock_name: &str,
        driver: Arc<dyn LockDriver>,
    ) -> Result<Reentrant> {
        Ok(Reentrant {
            client: client.clone(),
            internals: LockInternals::new(
                client.clone(),
                path,
                lock_name,
                driver,
                Leases::Fixed(1),
            )?,
            holders: ThreadHolds::default(),
            feed: Arc::default(),
            revocable: Mutex::new(None),
        })
    }

    pub(crate) fn acquire_until(&self, deadline: Deadline) -> Result<bool> {
        if self.reenter()? {
            return Ok(true);
        }
        let Some(acquired) = self.internals.attempt_lock(deadline)? else {
            return Ok(false);
        };
        let holding = self.hold(acquired);
        self.holders.insert(holding);
        Ok(true)
    }

    /// Holds through a node the caller knows holds at once (see
    /// [`LockInternals::create_held`]).
    pub(crate) fn acquire_held(&self, node: LockNode) -> Result<()> {
        if self.reenter()? {
            return Ok(());
        }
        let acquired = self.internals.create_held(node)?;
        let holding = self.hold(acquired);
        self.holders.insert(holding);
        Ok(())
    }

    /// Counts one more hold if this thread holds already. A hold that is already lost is not
    /// entered again: whatever it protected may have been touched by another holder, and the
    /// caller must hear it ([`Error::LockLost`]; release it, then acquire anew).
    pub(crate) fn reenter(&self) -> Result<bool> {
        if self.health() == Some(LockHealth::Lost) {
            return Err(Error::LockLost);
        }
        Ok(self.holders.reenter())
    }

    fn hold(&self, mut acquired: Acquired) -> Holding {
        let (health, report) = self.feed.hold(
            self.client.dispatch(),
            crate::zookeeper::path::parent(&acquired.path),
            &acquired.path,
            acquired.token,
        );
        // Curator's revocation request is a data write into the held node; told once.
        // Runs in the keeper's follower: it holds the watcher thread's queue, not the Client
        // (which would keep the session open as long as the follower lingers).
        let on_revoke = self.revocable.lock().clone().map(|listener| {
            let dispatch = self.client.dispatch();
            let told = AtomicBool::new(false);
            Arc::new(move |data: &[u8]| {
                if data == REVOKE_MESSAGE && !told.swap(true, Ordering::SeqCst) {
                    let listener = listener.clone();
                    dispatch(Box::new(move || listener()));
                }
            }) as OnData
        });
        let keeper = keep_node(
            &self.client,
            &acquired.path,
            acquired.session,
            report,
            on_revoke,
            acquired.primed.take(),
        );
        Holding {
            path: acquired.path,
            session: acquired.session,
            token: acquired.token,
            health,
            keeper: Some(keeper),
            since: Instant::now(),
        }
    }

    /// Ends one hold of the calling thread without deleting anything.
    pub(crate) fn detach(&self) -> Result<Detached<Holding>> {
        self.holders.detach()
    }

    /// Deletes a released hold's node as `how` says; [`Error::LockLost`] if the hold had been
    /// lost.
    pub(crate) fn finish(&self, mut holding: Holding, how: Release) -> Result<()> {
        let lost = *holding.health.lock() == LockHealth::Lost;
        holding.keeper.take();
        crate::core::metrics::released(&self.internals.path, holding.since.elapsed());
        let deleted = self.internals.release(&holding.path, holding.session, how);
        if lost {
            return Err(Error::LockLost);
        }
        deleted
    }

    pub(crate) fn release(&self, how: Release) -> Result<()> {
        match self.detach()? {
            Detached::StillHeld => Ok(()),
            Detached::Released(holding) => self.finish(holding, how),
        }
    }

    pub(crate) fn cancel_waiters(&self) {
        self.internals.cancel_waiters();
    }

    /// How long a guard's drop waits for the delete (see [`Client::drop_bound`]).
    pub(crate) fn drop_bound(&self) -> std::time::Duration {
        self.client.drop_bound()
    }

    pub(crate) fn is_acquired_in_this_process(&self) -> bool {
        self.holders.any()
    }

    pub(crate) fn is_owned_by_current_thread(&self) -> bool {
        self.holders.mine_exists()
    }

    fn mine<T>(&self, f: impl FnOnce(&Holding) -> T) -> Option<T> {
        self.holders.mine(f)
    }

    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.mine(|h| h.token)
    }

    pub(crate) fn lock_node(&self) -> Option<String> {
        self.mine(|h| h.path.clone())
    }

    /// The calling thread's hold's health, computed now (see [`Holding::health`]).
    pub(crate) fn health(&self) -> Option<LockHealth> {
        self.mine(|h| h.health(&self.client))
    }

    pub(crate) fn make_revocable(&self, listener: impl Fn() + Send + Sync + 'static) {
        *self.revocable.lock() = Some(Arc::new(listener));
    }

    pub(crate) fn health_events(&self) -> Receiver<HealthEvent> {
        self.feed.channel()
    }

    pub(crate) fn on_health(&self, f: impl FnMut(HealthEvent) + Send + 'static) -> u64 {
        self.feed.on_health(f)
    }

    pub(crate) fn remove_health_listener(&self, id: u64) -> bool {
        self.feed.remove(id)
    }
}

impl Holding {
    /// The keeper's last report, made worse by the Client's local lease on the session: a
    /// process that has stood still reads Suspended or Lost before its I/O thread catches up.
    pub(crate) fn health(&self, client: &Client) -> LockHealth {
        vouch(client, self.session, *self.health.lock())
    }
}

impl Drop for Reentrant {
    /// Holds never released (a guard forgotten, `acquire()` without `release()`) go as a
    /// guard's do: within one drop bound for all of them, the rest in the background.
    fn drop(&mut self) {
        let by = crate::core::deadline::instant_after(self.drop_bound());
        for holding in self.holders.drain() {
            let _ = self.finish(holding, Release::Within(Some(by)));
        }
    }
}
