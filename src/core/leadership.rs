//! What a leader election's listeners hear, on every backend.

/// What a latch's listeners hear.
///
/// # Example
/// ```
/// use zklock::LeadershipChange;
///
/// fn follow(changes: zklock::Receiver<LeadershipChange>) {
///     for change in changes.iter() {
///         match change {
///             LeadershipChange::Gained { epoch } => println!("leading, epoch {epoch}"),
///             LeadershipChange::Lost => println!("not leading any more"),
///             _ => {}
///         }
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeadershipChange {
    /// We lead, in the term with this epoch (a fencing token: it rises with every term of the
    /// election, so a resource can refuse a deposed leader's late writes).
    Gained {
        /// The term's fencing token.
        epoch: u64,
    },
    /// We do not lead any more.
    Lost,
}
