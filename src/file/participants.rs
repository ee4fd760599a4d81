//! [`FileParticipant`]: who holds and who waits on a lock's directory.

use std::path::Path;
use std::time::Duration;

use super::queue::{Kind, Listed, Queue};
use crate::core::error::Result;

/// One live entry of a lock's directory, as [`FileMutex::participants`](super::FileMutex)
/// and [`FileSemaphore::participants`](super::FileSemaphore) list it: who holds, then who
/// waits, in arrival order.
///
/// # Example
/// ```
/// # fn main() -> zklock::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("zklock-doc-who-{}", std::process::id()));
/// let client = zklock::FileClient::open(&dir)?;
/// let mutex = zklock::file::FileMutex::new(&client, "ledger")?;
/// for who in mutex.participants()? {
///     println!("{} {} pid {:?} token {}", who.kind, who.holds, who.pid, who.token);
/// }
/// # client.close(); let _ = std::fs::remove_dir_all(&dir);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileParticipant {
    /// The entry's name in the lock's directory.
    pub id: String,
    /// `lock` (a mutex or a latch), `read`, `write` or `lease`.
    pub kind: &'static str,
    /// Whether it holds (else it waits).
    pub holds: bool,
    /// The entry's number: the fencing token of its hold.
    pub token: u64,
    /// The process that made it, as it wrote it in the entry.
    pub pid: Option<u32>,
    /// How long ago the entry was made.
    pub age: Option<Duration>,
}

/// The live entries of `queue` (dead ones found on the way are removed); `max_leases` is
/// how many hold at once for a semaphore.
pub(crate) fn read(queue: &Queue, max_leases: usize) -> Result<Vec<FileParticipant>> {
    let live: Vec<Listed> = (queue.list()?)
        .into_iter()
        .filter(|l| queue.alive(&l.name))
        .collect();
    let mut writer_ahead = false;
    let mut out = Vec::with_capacity(live.len());
    for (i, l) in live.iter().enumerate() {
        let holds = match l.kind {
            Kind::Lock => i == 0,
            Kind::Write => i == 0,
            Kind::Read => !writer_ahead,
            Kind::Lease => i < max_leases,
        };
        writer_ahead |= l.kind == Kind::Write;
        let path = queue.dir.join(&l.name);
        out.push(FileParticipant {
            id: l.name.clone(),
            kind: l.kind.name(),
            holds,
            token: l.seq,
            pid: pid(&path),
            age: std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok()),
        });
    }
    Ok(out)
}

fn pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}
