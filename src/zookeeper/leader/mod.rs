//! Leader election: Curator's `LeaderLatch` and `LeaderSelector`, both on the one lock
//! algorithm (`LockInternals`) with Curator's node layouts, plus kazoo's one-call `elect` and kazoo's `Election` on kazoo's lock layout.

mod kazoo_election;
mod latch;
mod participant;
mod pool;
mod selector;
mod term;

pub use self::kazoo_election::KazooElection;
pub use self::latch::{CloseMode, LeaderLatch, LeaderLatchBuilder};
pub use self::participant::Participant;
pub use self::selector::{elect, LeaderSelector, LeaderSelectorBuilder, Leadership};
