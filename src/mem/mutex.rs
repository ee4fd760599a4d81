//! [`MemMutex`]: the fair, re-entrant mutex of `mem://`, on the shell every backend shares.

use std::time::Duration;

use super::client::{check_name, MemClient};
use super::store::{next_id, Ask, Kind, MemParticipant, Place, Role};
use crate::core::deadline::Deadline;
use crate::core::error::{Error, Result};
use crate::core::health::LockHealth;
use crate::core::hold::{Granted, RawLock, Reentrant, Report};
use crate::core::listeners::{on_listener_thread, Dispatch};
use crate::core::lock::Release;

/// A mutex in the process: one holder at a time among every Client of the store, re-entrant
/// per thread (through this object), fair (waiters are granted in arrival order), with
/// [`LockHealth`] and fencing tokens — the contract of every zklock mutex, with no server.
///
/// A hold reads `Held` until the Client's controls say otherwise
/// ([`MemClient::lose_holds`] and the others) or the Client closes (`Lost`). The fencing token
/// comes from one counter of the process: it rises across successive holders of every name.
/// A leader latch of the same name queues in the same queue.
///
/// # Blocking
/// A wait lasts until the lock is ours, its deadline, [`cancel_waiters`](Self::cancel_waiters)
/// or the Client's close; nothing else blocks, unless the Client is frozen (see
/// [`MemClient::freeze`]).
///
/// # Example
/// ```
/// # fn main() -> zklock::Result<()> {
/// let client = zklock::mem::MemClient::connect("mutex-doc")?;
/// let mutex = zklock::mem::MemMutex::new(&client, "ledger")?;
/// let guard = mutex.lock()?;
/// assert_eq!(guard.health(), zklock::LockHealth::Held);
/// println!("write with token {}", guard.fencing_token());
/// # Ok(()) }
/// ```
pub struct MemMutex {
    lock: Reentrant<Raw>,
}

/// The mutex without re-entrancy: one name's queue in the store.
struct Raw {
    client: MemClient,
    name: String,
    kind: Kind,
    role: Role,
    /// This object's id in the queue (what `cancel_waiters` ends).
    id: u64,
}

/// One thread's hold: its entry in the store.
struct Grant {
    place: Place,
}

impl MemMutex {
    /// The mutex named `name` (any text of 1 to 1024 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or over-long name.
    pub fn new(client: &MemClient, name: &str) -> Result<MemMutex> {
        Ok(MemMutex {
            lock: Reentrant::new(Raw::new(client, name, Kind::Mutex, Role::Exclusive)?),
        })
    }

    /// The read and the write half of the read-write lock `name`.
    pub(crate) fn read_write(client: &MemClient, name: &str) -> Result<[MemMutex; 2]> {
        let [read, write] = Reentrant::pair(
            Raw::new(client, name, Kind::ReadWrite, Role::Read)?,
            Raw::new(client, name, Kind::ReadWrite, Role::Write)?,
        );
        Ok([MemMutex { lock: read }, MemMutex { lock: write }])
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lock.raw.name
    }

    /// Who holds the lock and who waits, in that order (a read-write lock's half: both
    /// halves' holders and waiters).
    ///
    /// # Errors
    /// [`Error::Closed`] once the Client is closed; [`Error::ConnectionLoss`] on a frozen
    /// Client after the operation timeout.
    pub fn participants(&self) -> Result<Vec<MemParticipant>> {
        let raw = &self.lock.raw;
        let inner = raw.client.inner();
        inner.pass(None)?;
        Ok(inner.store().participants(raw.kind, &raw.name))
    }
}

impl Raw {
    fn new(client: &MemClient, name: &str, kind: Kind, role: Role) -> Result<Raw> {
        check_name("lock", name)?;
        Ok(Raw {
            client: client.clone(),
            name: name.to_owned(),
            kind,
            role,
            id: next_id(),
        })
    }

    fn place(&self, entry: u64) -> Place {
        Place {
            kind: self.kind,
            name: self.name.clone(),
            entry,
        }
    }
}

impl RawLock for Raw {
    type Grant = Grant;
    /// The entry of the same thread's write hold: a read lock asked by the writer is granted
    /// beside it at once (a downgrade).
    type Shared = u64;

    fn share(grant: &Grant) -> u64 {
        grant.place.entry
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn closed(&self) -> bool {
        self.client.inner().closed()
    }

    fn dispatch(&self) -> Dispatch {
        super::client::dispatch()
    }

    fn acquire(&self, deadline: Deadline, partner: Option<u64>) -> Result<Option<Granted<Grant>>> {
        if on_listener_thread() && !deadline.expired() {
            return Err(Error::OnWatcherThread);
        }
        let inner = self.client.inner();
        inner.pass(None)?;
        let ask = Ask {
            kind: self.kind,
            name: &self.name,
            client: inner.id(),
            asker: self.id,
            role: self.role,
        };
        let after = partner.filter(|_| self.role == Role::Read);
        let granted = inner
            .store()
            .acquire(&ask, deadline, after, &|| inner.closed())?;
        Ok(granted.map(|(entry, token)| Granted {
            grant: Grant {
                place: self.place(entry),
            },
            token: token.into(),
            node: format!("{}#{entry}", self.name),
        }))
    }

    fn keep(&self, grant: &mut Grant, report: Report) -> Result<()> {
        let inner = self.client.inner();
        if inner.store().keep(&grant.place, report.clone()) {
            return Ok(());
        }
        if inner.closed() {
            return Err(Error::Closed);
        }
        // Lost between the grant and now: the hold is given, reading `Lost`.
        report(LockHealth::Lost);
        Ok(())
    }

    fn health(&self, _grant: &Grant, reported: LockHealth) -> LockHealth {
        if self.client.inner().closed() {
            LockHealth::Lost
        } else {
            reported
        }
    }

    fn release(&self, grant: Grant, how: Release, lost: bool, _partner: Option<u64>) -> Result<()> {
        release(&self.client, grant.place, how, lost)
    }

    fn cancel_waiters(&self) {
        (self.client.inner().store()).cancel(self.kind, &self.name, self.id);
    }

    fn drop_bound(&self) -> Duration {
        self.client.inner().drop_bound()
    }
}

/// Lets go of the entry at `place` as `how` says: on a frozen Client after waiting for the
/// thaw within the release's bound, else at the thaw with [`Error::ConnectionLoss`] now. A
/// lost hold's entry is gone already.
pub(crate) fn release(client: &MemClient, place: Place, how: Release, lost: bool) -> Result<()> {
    let inner = client.inner();
    if lost || inner.closed() {
        return Ok(());
    }
    let store = inner.store();
    match how {
        Release::Background => {
            store.owe(inner.id(), place);
            Ok(())
        }
        Release::Within(until) => match inner.pass(until) {
            Ok(()) => {
                store.release(&place);
                Ok(())
            }
            Err(e) => {
                store.owe(inner.id(), place);
                Err(e)
            }
        },
    }
}

crate::core::hold::reentrant_lock!(MemMutex, "the mem:// events thread");

impl std::fmt::Debug for MemMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemMutex")
            .field("store", &self.lock.raw.client.store_name())
            .field("name", &self.lock.raw.name)
            .field("held_here", &self.lock.is_acquired_in_this_process())
            .finish_non_exhaustive()
    }
}
