//! The ZooKeeper lock without re-entrancy, [`NodeLock`]: one lock node per hold, through
//! LockInternals, kept by a keeper that watches it. The mutex and both halves of the read-write
//! lock run it in the core's re-entrant shell ([`Reentrant`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::driver::LockDriver;
use super::internals::{Leases, LockInternals, Release};
use super::keeper::{keep_node, vouch, KeeperGuard, OnData};
use super::revocation::REVOKE_MESSAGE;
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::hold::{Granted, RawLock, Report};
use crate::core::listeners::Dispatch;
use crate::zookeeper::client::{Client, NodeRead};

/// A ZooKeeper lock in the core's re-entrant shell.
pub(crate) type Reentrant = crate::core::hold::Reentrant<NodeLock>;

type RevokeListener = Arc<dyn Fn() + Send + Sync>;

/// Lock nodes of one lock name under one path, taken through [`LockInternals`].
pub(crate) struct NodeLock {
    client: Client,
    pub(crate) internals: LockInternals<Client>,
    revocable: Mutex<Option<RevokeListener>>,
    /// A read half: what the same thread's write hold allows. `None` for a lock alone or a
    /// write half.
    read: Option<Downgrade>,
}

/// What a read half does for a thread that holds the write half.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Downgrade {
    /// Curator's layout: a read node named after the write node, held at once.
    AtOnce,
    /// kazoo's layout: the read node would queue behind our own write node.
    Refused,
}

/// One hold's node.
pub(crate) struct NodeGrant {
    path: String,
    /// The session the node belongs to (0: a persistent node).
    session: i64,
    /// The node as the grant read it, for the keeper to start from.
    primed: Option<NodeRead>,
    keeper: Option<KeeperGuard>,
}

impl NodeLock {
    pub(crate) fn new(
        client: &Client,
        path: &str,
        lock_name: &str,
        driver: Arc<dyn LockDriver>,
        read: Option<Downgrade>,
    ) -> Result<NodeLock> {
        Ok(NodeLock {
            client: client.clone(),
            internals: LockInternals::new(
                client.clone(),
                path,
                lock_name,
                driver,
                Leases::Fixed(1),
            )?,
            revocable: Mutex::new(None),
            read,
        })
    }

    pub(crate) fn make_revocable(&self, listener: impl Fn() + Send + Sync + 'static) {
        *self.revocable.lock() = Some(Arc::new(listener));
    }

    /// How long a guard's drop waits for the delete (see [`Client::drop_bound`]).
    pub(crate) fn drop_bound(&self) -> std::time::Duration {
        self.client.drop_bound()
    }
}

impl RawLock for NodeLock {
    type Grant = NodeGrant;
    /// The same thread's write node: a read half downgrades from it.
    type Shared = String;

    fn share(grant: &NodeGrant) -> String {
        grant.path.clone()
    }

    fn name(&self) -> &str {
        &self.internals.path
    }

    fn closed(&self) -> bool {
        self.client.is_closed()
    }

    fn dispatch(&self) -> Dispatch {
        self.client.dispatch()
    }

    fn acquire(
        &self,
        deadline: Deadline,
        write_node: Option<String>,
    ) -> Result<Option<Granted<NodeGrant>>> {
        let acquired = match (self.read, write_node) {
            (Some(Downgrade::Refused), Some(_)) => return Err(Error::WouldDeadlock),
            // A downgrade: granted at once, as Curator grants the write holder's read.
            (Some(Downgrade::AtOnce), Some(write_node)) => {
                let node = super::read_write_driver::downgrade_node(&write_node)
                    .ok_or_else(|| Error::ZooKeeper(format!("{write_node:?} is no write node")))?;
                self.internals.create_held(node)?
            }
            _ => match self.internals.attempt_unmetered(deadline)? {
                Some(acquired) => acquired,
                None => return Ok(None),
            },
        };
        Ok(Some(Granted {
            token: acquired.token.into(),
            node: acquired.path.clone(),
            grant: NodeGrant {
                path: acquired.path,
                session: acquired.session,
                primed: acquired.primed,
                keeper: None,
            },
        }))
    }

    fn keep(&self, grant: &mut NodeGrant, report: Report) -> Result<()> {
        // Curator's revocation request is a data write into the held node; told once. Runs in
        // the keeper's follower: it holds the watcher thread's queue, not the Client (which
        // would keep the session open as long as the follower lingers).
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
        grant.keeper = Some(keep_node(
            &self.client,
            &grant.path,
            grant.session,
            report,
            on_revoke,
            grant.primed.take(),
        ));
        Ok(())
    }

    /// The keeper's last report, made worse by the Client's local lease on the session: a
    /// process that has stood still reads Suspended or Lost before its I/O thread catches up.
    fn health(&self, grant: &NodeGrant, reported: LockHealth) -> LockHealth {
        vouch(&self.client, grant.session, reported)
    }

    fn release(
        &self,
        mut grant: NodeGrant,
        how: Release,
        _lost: bool,
        _write_node: Option<String>,
    ) -> Result<()> {
        grant.keeper.take();
        self.internals.release(&grant.path, grant.session, how)
    }

    fn cancel_waiters(&self) {
        self.internals.cancel_waiters();
    }

    fn drop_bound(&self) -> std::time::Duration {
        NodeLock::drop_bound(self)
    }
}

/// The lock node of the calling thread's hold through `lock`, if it holds.
pub(crate) fn lock_node(lock: &Reentrant) -> Option<String> {
    lock.mine(|h| h.grant.path.clone())
}
