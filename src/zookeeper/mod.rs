//! The ZooKeeper backend (feature `zookeeper`, on by default): the Client, the lock protocol
//! with Curator's node layouts, the lock recipes and leader election.

pub(crate) mod client;
mod error;
pub(crate) mod leader;
pub(crate) mod locks;
pub(crate) mod path;
