//! Public value types of the Client: connection states, node modes, ACLs, stats, watches.

use std::time::Duration;

pub(crate) use crate::core::connection::ConnectionState;

use super::runtime::Signal;

/// When a leader gives leadership up because of the connection (Curator's
/// `ConnectionStateErrorPolicy`).
///
/// | policy | leadership is given up on | Curator |
/// |---|---|---|
/// | `Standard` (default) | `Suspended` or `Lost`: the connection is gone, so leadership can no longer be vouched for | `StandardConnectionStateErrorPolicy` |
/// | `SessionOnly` | `Lost` only: a leader rides out a disconnection that its session survives | `SessionConnectionStateErrorPolicy` |
///
/// Under `SessionOnly` a leader may act while its session is in fact expiring: pass the
/// leadership's fencing token to the resource.
///
/// # Example
/// ```no_run
/// use zklock::{Client, ErrorPolicy};
/// # fn main() -> zklock::Result<()> {
/// let client = Client::builder("127.0.0.1:2181")
///     .error_policy(ErrorPolicy::SessionOnly)
///     .connect()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ErrorPolicy {
    /// Give leadership up on `Suspended` and on `Lost`.
    #[default]
    Standard,
    /// Give leadership up on `Lost` only.
    SessionOnly,
}

/// The kind of node [`Client::create`](crate::Client::create) makes.
///
/// # Example
/// ```
/// assert!(zklock::CreateMode::EphemeralSequential.is_sequential());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CreateMode {
    /// Stays until deleted.
    #[default]
    Persistent,
    /// Persistent, with a 10-digit sequence appended by the server.
    PersistentSequential,
    /// Deleted by the server when the session ends.
    Ephemeral,
    /// Ephemeral, with a sequence appended.
    EphemeralSequential,
    /// Deleted by the server some time after its last child goes (ZooKeeper ≥ 3.5).
    Container,
}

impl CreateMode {
    /// Whether the server appends a sequence number.
    pub fn is_sequential(self) -> bool {
        matches!(self, Self::PersistentSequential | Self::EphemeralSequential)
    }

    /// Whether the node dies with its session.
    pub fn is_ephemeral(self) -> bool {
        matches!(self, Self::Ephemeral | Self::EphemeralSequential)
    }

    pub(crate) fn to_zk(self) -> zookeeper_client::CreateMode {
        use zookeeper_client::CreateMode as Z;
        match self {
            Self::Persistent => Z::Persistent,
            Self::PersistentSequential => Z::PersistentSequential,
            Self::Ephemeral => Z::Ephemeral,
            Self::EphemeralSequential => Z::EphemeralSequential,
            Self::Container => Z::Container,
        }
    }
}

/// Permission bits of an [`Acl`] entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perms(u32);

impl Perms {
    /// Read data and children.
    pub const READ: Perms = Perms(1);
    /// Set data.
    pub const WRITE: Perms = Perms(2);
    /// Create children.
    pub const CREATE: Perms = Perms(4);
    /// Delete children.
    pub const DELETE: Perms = Perms(8);
    /// Set ACLs.
    pub const ADMIN: Perms = Perms(16);
    /// Everything.
    pub const ALL: Perms = Perms(31);

    /// Union of two permission sets.
    pub const fn union(self, other: Perms) -> Perms {
        Perms(self.0 | other.0)
    }
}

/// One ACL entry: permissions for an identity (`scheme`, `id`), as ZooKeeper defines them.
///
/// # Example
/// ```
/// use zklock::Acl;
/// use zklock::zookeeper::Perms;
/// let acl = vec![Acl::creator_all(), Acl::new(Perms::READ, "world", "anyone")];
/// assert_eq!(acl[1].scheme(), "world");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Acl {
    perms: Perms,
    scheme: String,
    id: String,
}

impl Acl {
    /// An entry granting `perms` to the identity `scheme:id`.
    pub fn new(perms: Perms, scheme: &str, id: &str) -> Acl {
        Acl {
            perms,
            scheme: scheme.to_owned(),
            id: id.to_owned(),
        }
    }

    /// Everything for everyone (`world:anyone`, ZooKeeper's `OPEN_ACL_UNSAFE`); the default.
    pub fn open_unsafe() -> Acl {
        Acl::new(Perms::ALL, "world", "anyone")
    }

    /// Everything for the identities the creating session authenticated with (`CREATOR_ALL_ACL`).
    pub fn creator_all() -> Acl {
        Acl::new(Perms::ALL, "auth", "")
    }

    /// Read-only for everyone (`READ_ACL_UNSAFE`).
    pub fn read_unsafe() -> Acl {
        Acl::new(Perms::READ, "world", "anyone")
    }

    /// The permissions.
    pub fn perms(&self) -> Perms {
        self.perms
    }

    /// The scheme (`world`, `auth`, `digest`, `ip`, …).
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The identity within the scheme.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn from_zk(acl: &zookeeper_client::Acl) -> Acl {
        let perms = PERM_BITS
            .into_iter()
            .filter(|(_, p)| acl.permission().has(*p))
            .fold(0, |acc, (bit, _)| acc | bit);
        Acl::new(Perms(perms), acl.scheme(), acl.id())
    }

    pub(crate) fn to_zk(&self) -> zookeeper_client::Acl {
        use zookeeper_client::Permission as P;
        let bits = PERM_BITS;
        let perm = bits
            .into_iter()
            .filter(|(bit, _)| self.perms.0 & bit != 0)
            .fold(P::NONE, |acc, (_, p)| acc | p);
        zookeeper_client::Acl::new(perm, zookeeper_client::AuthId::new(&self.scheme, &self.id))
    }
}

const PERM_BITS: [(u32, zookeeper_client::Permission); 5] = [
    (1, zookeeper_client::Permission::READ),
    (2, zookeeper_client::Permission::WRITE),
    (4, zookeeper_client::Permission::CREATE),
    (8, zookeeper_client::Permission::DELETE),
    (16, zookeeper_client::Permission::ADMIN),
];

/// A node's metadata, as ZooKeeper's `Stat`.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// if let Some(stat) = client.exists("/locks/a")? {
///     // A lock node's creation zxid is its fencing token; its owner, the session.
///     println!("czxid {} owner {:#x} children {}", stat.czxid, stat.ephemeral_owner, stat.num_children);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stat {
    /// zxid of the change that created the node (rises with creation order: a fencing token).
    pub czxid: i64,
    /// zxid of the last data change.
    pub mzxid: i64,
    /// zxid of the last change to the children.
    pub pzxid: i64,
    /// Creation time, ms since the epoch.
    pub ctime: i64,
    /// Last modification time, ms since the epoch.
    pub mtime: i64,
    /// Number of data changes.
    pub version: i32,
    /// Number of child changes.
    pub cversion: i32,
    /// Number of ACL changes.
    pub aversion: i32,
    /// Owning session of an ephemeral node, else 0.
    pub ephemeral_owner: i64,
    /// Data length in bytes.
    pub data_length: i32,
    /// Number of children.
    pub num_children: i32,
}

impl Stat {
    pub(crate) fn from_zk(s: zookeeper_client::Stat) -> Stat {
        Stat {
            czxid: s.czxid,
            mzxid: s.mzxid,
            pzxid: s.pzxid,
            ctime: s.ctime,
            mtime: s.mtime,
            version: s.version,
            cversion: s.cversion,
            aversion: s.aversion,
            ephemeral_owner: s.ephemeral_owner,
            data_length: s.data_length,
            num_children: s.num_children,
        }
    }
}

/// What fired a one-shot watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WatchEventKind {
    /// The node was created.
    NodeCreated,
    /// The node was deleted.
    NodeDeleted,
    /// The node's data changed.
    NodeDataChanged,
    /// The node's children changed.
    NodeChildrenChanged,
    /// The session the watch was set in ended; the watch will not fire.
    SessionEnded,
}

/// A fired watch: what happened and to which path (relative to the namespace).
///
/// # Example
/// ```no_run
/// use zklock::zookeeper::WatchEventKind;
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let (_data, _stat, watch) = client.data_watch("/config")?;
/// if let Some(event) = watch.wait() {
///     match event.kind {
///         WatchEventKind::NodeDataChanged => println!("{} changed", event.path),
///         WatchEventKind::NodeDeleted => println!("{} is gone", event.path),
///         other => println!("{other:?}"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchEventKind,
    /// The watched path.
    pub path: String,
}

impl WatchEvent {
    pub(crate) fn from_zk(e: zookeeper_client::WatchedEvent) -> WatchEvent {
        use zookeeper_client::EventType as E;
        let kind = match e.event_type {
            E::NodeCreated => WatchEventKind::NodeCreated,
            E::NodeDeleted => WatchEventKind::NodeDeleted,
            E::NodeDataChanged => WatchEventKind::NodeDataChanged,
            E::NodeChildrenChanged => WatchEventKind::NodeChildrenChanged,
            _ => WatchEventKind::SessionEnded,
        };
        WatchEvent { kind, path: e.path }
    }
}

/// A one-shot watch set by [`Client::data_watch`](crate::Client::data_watch). It survives
/// reconnections within its session (the wire client re-registers it) and fires at most once.
/// Dropping it removes the watch from the server.
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let (_data, _stat, watch) = client.data_watch("/config")?;
/// if let Some(event) = watch.wait_timeout(std::time::Duration::from_secs(5)) {
///     println!("{:?} on {}", event.kind, event.path);
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping a Watch removes it"]
pub struct Watch {
    pub(crate) rx: crate::core::channel::Receiver<WatchEvent>,
    pub(crate) cancel: Signal,
}

impl Watch {
    /// Waits for the event up to `timeout` (from a listener or callback, not at all: see
    /// [`Receiver`](crate::Receiver)).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<WatchEvent> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Waits for the event; `None` if the Client closed first. From a listener or callback it
    /// does not wait (the Client's watcher thread delivers the event): the event if it fired,
    /// else `None` at once.
    pub fn wait(&self) -> Option<WatchEvent> {
        self.rx.recv().ok()
    }

    /// The event if it already fired.
    pub fn try_event(&self) -> Option<WatchEvent> {
        self.rx.try_recv().ok()
    }

    /// The channel the event arrives on.
    pub fn receiver(&self) -> &crate::core::channel::Receiver<WatchEvent> {
        &self.rx
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.cancel.set();
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("fired", &!self.rx.is_empty())
            .finish()
    }
}
