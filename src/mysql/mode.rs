//! How a MySQL Client's locks lock: `GET_LOCK` or the table mode.

/// How the locks of a [`MySqlClient`](super::MySqlClient) lock, chosen by [`MySqlClientBuilder::mode`](super::MySqlClientBuilder::mode) or the URL
/// parameter `lock_mode=get_lock` / `lock_mode=table`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MySqlMode {
    /// `GET_LOCK` on one server (the default): a held connection per lock, FIFO hand-off,
    /// every recipe. Refused where `GET_LOCK` is not one lock (Galera, multi-primary Group
    /// Replication, TiDB).
    #[default]
    GetLock,
    /// Leases as rows of the table `zklock_lock_record` (unique name, owner, an expiry by the
    /// database's clock, a version that is the fencing token), renewed by the Client's keeper,
    /// taken by waiters that poll: for the setups where `GET_LOCK` cannot exclude. Mutexes
    /// only; see `docs/mysql.md`.
    Table,
}
