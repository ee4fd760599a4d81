//! Leader election: Curator's `LeaderLatch` and `LeaderSelector`, both on the one lock
//! algorithm (`LockInternals`) with Curator's node layouts, plus kazoo's one-call `elect`.

mod latch;
mod participant;
mod selector;
mod term;

pub use self::latch::{CloseMode, LeaderLatch, LeaderLatchBuilder};
pub use self::participant::Participant;
pub use self::selector::{elect, LeaderSelector, LeaderSelectorBuilder, Leadership};
