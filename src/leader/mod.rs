//! Leader election: Curator's `LeaderLatch` and `LeaderSelector`, both on the one lock
//! algorithm (`LockInternals`) with Curator's node layouts, plus kazoo's one-call `elect`.

mod latch;
mod selector;
mod term;

pub use self::latch::{CloseMode, LeaderLatch, LeaderLatchBuilder, LeadershipChange};
pub use self::selector::{elect, LeaderSelector, LeaderSelectorBuilder, Leadership};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::locks::LockInternals;
use crate::path;

/// A participant in an election, as read from its node (Curator's `Participant`).
///
/// # Example
/// ```no_run
/// # fn main() -> zklock::Result<()> {
/// # let client = zklock::Client::connect("127.0.0.1:2181")?;
/// let latch = zklock::LeaderLatch::builder(&client, "/election").id("node-a").build()?;
/// latch.start()?;
/// for p in latch.participants()? {
///     println!("{} {} {}", p.id, p.node, if p.is_leader { "leads" } else { "waits" });
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// The participant's id: its node's data as UTF-8 (lossy).
    pub id: String,
    /// The full path of its node.
    pub node: String,
    /// Whether it is the leader: the first in sequence order.
    pub is_leader: bool,
}

/// The participants of the election `internals` runs, the leader first. A node that goes while
/// being read is left out.
fn participants(client: &Client, internals: &LockInternals<Client>) -> Result<Vec<Participant>> {
    let nodes = internals.participant_nodes()?;
    let mut out = Vec::with_capacity(nodes.len());
    for node in nodes {
        match client.data(&node) {
            Ok((data, _)) => out.push(Participant {
                id: String::from_utf8_lossy(&data).into_owned(),
                is_leader: out.is_empty(),
                node,
            }),
            Err(Error::NoNode(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The participant id used when none is given: this host's name and the process id.
fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!("{host}:{}", std::process::id())
}

/// Refuses an election path before any I/O.
fn check_path(election: &str) -> Result<()> {
    path::validate(election, false)?;
    if election == "/" {
        return Err(Error::InvalidPath {
            path: "/".into(),
            reason: "an election needs its own node",
        });
    }
    Ok(())
}
