//! The one error type of zklock.

use std::fmt;

/// What went wrong, grouped by what the caller can do about it.
///
/// Input is checked before any I/O: a malformed path, connect string or timeout is reported as
/// [`Error::InvalidArgument`] / [`Error::InvalidPath`] and nothing is sent to ZooKeeper. Nothing in
/// zklock panics on a server's answer: an unexpected one becomes [`Error::ZooKeeper`].
///
/// # Example
/// ```
/// # fn main() {
/// let err = zklock::Client::builder("").build().unwrap_err();
/// assert!(matches!(err, zklock::Error::InvalidArgument(_)));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bad argument: connect string, timeout, data size, retry parameters. Fix the call.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A path ZooKeeper would refuse (relative, trailing slash, `.` / `..`, NUL, empty component).
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// [`ClientBuilder::connect`](crate::ClientBuilder::connect) could not open a session within
    /// the connection timeout; `cause` says why the last attempt failed (a refused port, a
    /// name that does not resolve, no right to create the namespace, ...).
    #[error("cannot connect to {hosts}")]
    ConnectFailed {
        /// The hosts tried.
        hosts: String,
        /// Why the last attempt failed.
        #[source]
        cause: Box<Error>,
    },
    /// A socket-level failure: a name that does not resolve, a refused or unreachable port.
    #[error("{context}: {message}")]
    Io {
        /// What was being done (`connecting to 127.0.0.1:2181`).
        context: String,
        /// The operating system's classification.
        kind: std::io::ErrorKind,
        /// The operating system's message.
        message: String,
    },
    /// The server refused this client's authentication (a SASL login that failed, or none
    /// where the server requires it) and ended the session.
    #[error("authentication failed: {0}")]
    AuthFailed(String),
    /// A TLS connection was refused: the server's certificate is not trusted or does not name
    /// the host, or the server refused this client's certificate (or its lack of one).
    #[error("TLS: {0}")]
    Tls(String),
    /// The connection was lost and the retry policy (or the call's deadline) gave up; the session
    /// may still be alive. Retrying later may succeed.
    #[error("connection to the server lost")]
    ConnectionLoss,
    /// The ZooKeeper session ended; ephemeral nodes of it are gone. The [`Client`](crate::Client)
    /// opens a new session by itself.
    #[error("session expired")]
    SessionExpired,
    /// The call's deadline passed before it could complete.
    #[error("operation timed out")]
    Timeout,
    /// The node does not exist.
    #[error("no node {0:?}")]
    NoNode(String),
    /// The node already exists.
    #[error("node {0:?} already exists")]
    NodeExists(String),
    /// The node has children.
    #[error("node {0:?} has children")]
    NotEmpty(String),
    /// The expected version did not match.
    #[error("bad version for node {0:?}")]
    BadVersion(String),
    /// The ACL forbids this client the operation.
    #[error("not authorised (NoAuth) for {0:?}")]
    NoAuth(String),
    /// An ephemeral node cannot have children.
    #[error("node {0:?} is ephemeral and cannot have children")]
    NoChildrenForEphemerals(String),
    /// The [`Client`](crate::Client) was closed.
    #[error("client closed")]
    Closed,
    /// A thread released a lock it does not hold.
    #[error("the current thread does not hold this lock")]
    NotOwner,
    /// `release()` of a lock that is not held (semaphore mutex), or of a guard whose hold was
    /// released through the lock already (and perhaps taken again: a stale guard releases
    /// nothing).
    #[error("the lock is not acquired")]
    NotAcquired,
    /// A thread that holds a read lock asked for the write lock of the same read-write lock
    /// (or, in kazoo's layout, one that holds the write lock asked for the read lock). It would
    /// wait for itself (Curator deadlocks here): release what it holds first.
    #[error(
        "a thread holding one half of a read-write lock would wait for itself taking the other \
         (the write lock while reading; in kazoo's layout also the read lock while writing): \
         release what it holds first"
    )]
    WouldDeadlock,
    /// A kazoo-layout semaphore's node records a number of leases other than this participant's
    /// `max_leases`: every participant must use the same (kazoo raises `ValueError` here).
    /// Delete the semaphore's node, with no lease held, to change it.
    #[error(
        "semaphore {path:?} allows {recorded} leases but this participant was made with \
         max_leases {ours}: every participant must use the same max_leases"
    )]
    LeaseCountMismatch {
        /// The semaphore's path.
        path: String,
        /// This participant's `max_leases`.
        ours: u32,
        /// The number the semaphore's node records.
        recorded: i64,
    },
    /// The lock had been lost (session expired, node deleted) before it was released: whatever
    /// it protected may have been touched by another holder meanwhile.
    #[error("the lock had been lost before it was released")]
    LockLost,
    /// A transaction (ZooKeeper's multi) failed at one of its operations, so none of them
    /// was applied: `index` counts from 0 in the caller's list, `op` describes the operation,
    /// `source` is why it failed (a [`BadVersion`](Error::BadVersion), a
    /// [`NoNode`](Error::NoNode), ...).
    #[error("operation {index} of the transaction ({op}) failed, nothing was applied: {source}")]
    TransactionFailed {
        /// The failed operation's position in the caller's list.
        index: usize,
        /// What the operation was (`set_data /app/config at version 3`).
        op: String,
        /// Why the server refused it.
        #[source]
        source: Box<Error>,
    },
    /// A write guarded by a lock was refused because the hold it was guarded by is gone (its
    /// node was deleted, its session expired): nothing of it was applied. Another process
    /// may hold the lock now; stop working on what it protects.
    #[error("the hold on {lock:?} is gone, so the guarded write was not applied")]
    HoldLost {
        /// The lock's path.
        lock: String,
        /// What showed the hold gone: the holder's node missing ([`NoNode`](Error::NoNode)),
        /// the session expired ([`SessionExpired`](Error::SessionExpired)), or the hold read
        /// `Lost` before anything was sent ([`LockLost`](Error::LockLost)).
        #[source]
        source: Box<Error>,
    },
    /// A call that parks until a ZooKeeper event arrives (an acquire that may wait) was made on a
    /// Client's watcher thread, i.e. from a connection-state listener, a lock-health callback or
    /// a revocation listener. Only that thread delivers the event it would wait for, so it would
    /// wait forever: the call fails at once instead. Hand the work to another thread, or use
    /// `try_lock()` (one attempt, no wait), which is allowed there.
    #[error(
        "a blocking zklock call was made from a listener or callback (the Client's watcher \
         thread), where it would wait for itself: hand the work to another thread"
    )]
    OnWatcherThread,
    /// The lock path's sequence counter has wrapped: ZooKeeper numbers a parent's children with
    /// a signed 32-bit counter, and after 2^31 of them it goes negative. Past that point zklock
    /// and Curator (which compares the numbers as text) would order the queue differently, and
    /// a newcomer could be granted ahead of the holder, so no grant is made there: the
    /// attempt's node is deleted and this is returned. The lock path is a container: once the
    /// lock is idle the server deletes it, and the counter starts again (or delete it by hand).
    #[error("the sequence counter of lock path {0:?} wrapped: no grant until it is deleted")]
    SequenceWrapped(String),
    /// The wait was cancelled with `cancel_waiters()`; the attempt's node was deleted.
    #[error("the acquisition was cancelled")]
    Cancelled,
    /// zklock could not start one of its threads (the process is out of threads or memory).
    #[error("cannot start thread {name}: {message}")]
    ThreadStart {
        /// The thread's name (`zklock-io`, `zklock-elect`, ...).
        name: String,
        /// The operating system's classification.
        kind: std::io::ErrorKind,
        /// The operating system's message.
        message: String,
    },
    /// Any other answer of the server or the wire client, with its description.
    #[error("ZooKeeper error: {0}")]
    ZooKeeper(String),
    /// An error answer of a Redis server that zklock has no better variant for (a script
    /// refused, a server too old, a wrong database index), with the server's words.
    #[error("Redis error: {0}")]
    Redis(String),
    /// An error answer of a PostgreSQL server that zklock has no better variant for (an
    /// unknown database, a server too old, a session that turned out not to be its own), with
    /// the server's words and SQLSTATE code.
    #[error("PostgreSQL error: {0}")]
    Postgres(String),
    /// An error answer of a MySQL or MariaDB server that zklock has no better variant for (an
    /// unknown database, a missing privilege, a setup where `GET_LOCK` cannot exclude), with
    /// the server's words and error code.
    #[error("MySQL error: {0}")]
    MySql(String),
}

/// `Result<T, zklock::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether the retry policy may retry the operation that failed with this error. The one
    /// classification of every path, foreground and background alike.
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(self, Error::ConnectionLoss)
    }

    /// Whether an operation that failed with this error may nonetheless have been applied by
    /// the server (its reply was lost, or the caller stopped waiting for it).
    pub(crate) fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            Error::ConnectionLoss | Error::Timeout | Error::Cancelled
        )
    }

    pub(crate) fn io(context: impl fmt::Display, e: &std::io::Error) -> Error {
        Error::Io {
            context: context.to_string(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    pub(crate) fn thread_start(name: &str, e: &std::io::Error) -> Error {
        Error::ThreadStart {
            name: name.to_owned(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    pub(crate) fn invalid(what: impl fmt::Display) -> Error {
        Error::InvalidArgument(what.to_string())
    }

    /// [`Error::HoldLost`] for the lock `lock`, shown gone by `source`.
    pub(crate) fn hold_lost(lock: &str, source: Error) -> Error {
        Error::HoldLost {
            lock: lock.to_owned(),
            source: Box::new(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_cannot_start_is_named() {
        let e = Error::thread_start(
            "zklock-io-7",
            &std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        );
        assert!(matches!(&e, Error::ThreadStart { name, kind, .. }
            if name == "zklock-io-7" && *kind == std::io::ErrorKind::OutOfMemory));
        assert!(e.to_string().contains("zklock-io-7"));
    }

    #[test]
    fn error_is_send_sync_static() {
        fn check<T: Send + Sync + 'static + std::error::Error>() {}
        check::<Error>();
    }
}
