//! [`FenceEvent`]: one line of the register's log, and its text form.

use std::fmt;
use std::io;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use super::*;

/// What happened in a [`FenceEvent`].
///
/// # Example
///
/// ```
/// use zklock::testing::FenceEventKind;
/// assert_eq!("rejected".parse::<FenceEventKind>(), Ok(FenceEventKind::Rejected));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceEventKind {
    /// A holder got the lock (it believes it may write from now on).
    Enter,
    /// A holder let the lock go (or learnt it lost it).
    Exit,
    /// A write the register applied.
    Accepted,
    /// A write the register refused: its token was lower than one already accepted.
    Rejected,
}

impl FenceEventKind {
    fn as_str(self) -> &'static str {
        match self {
            FenceEventKind::Enter => "enter",
            FenceEventKind::Exit => "exit",
            FenceEventKind::Accepted => "accepted",
            FenceEventKind::Rejected => "rejected",
        }
    }
}

impl fmt::Display for FenceEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FenceEventKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "enter" => Ok(FenceEventKind::Enter),
            "exit" => Ok(FenceEventKind::Exit),
            "accepted" => Ok(FenceEventKind::Accepted),
            "rejected" => Ok(FenceEventKind::Rejected),
            other => Err(format!("not a fence event kind: {other:?}")),
        }
    }
}

/// One entry of a [`FencedRegister`]'s log.
///
/// Its text form (`Display` / `FromStr`, one line, as [`FencedRegister::save`] writes it) is
/// `<seq> <seconds since start> <kind> <token> <worker>`, e.g. `3 0.125000 accepted 42 A`.
///
/// # Example
///
/// ```
/// use zklock::testing::{FenceEvent, FenceEventKind};
///
/// let e: FenceEvent = "3 0.125000 accepted 42 A".parse().unwrap();
/// assert_eq!((e.seq, e.kind, e.token, e.worker.as_str()), (3, FenceEventKind::Accepted, 42, "A"));
/// assert_eq!(e.to_string(), "3 0.125000 accepted 42 A");
/// // A hand-made log for FenceReport::check:
/// let e = FenceEvent::new(FenceEventKind::Enter, 42, "A");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceEvent {
    /// Position in the register's serial order (0, 1, 2, ...).
    pub seq: u64,
    /// Time since the register started (monotonic).
    pub at: Duration,
    /// What happened.
    pub kind: FenceEventKind,
    /// The fencing token the holder sent.
    pub token: u64,
    /// The holder's worker name.
    pub worker: String,
}

impl FenceEvent {
    /// An event with `seq` 0 and `at` zero, for hand-made logs ([`FenceReport::check`] takes
    /// the order of the slice as the serial order).
    pub fn new(kind: FenceEventKind, token: u64, worker: &str) -> FenceEvent {
        FenceEvent {
            seq: 0,
            at: Duration::ZERO,
            kind,
            token,
            worker: worker.to_owned(),
        }
    }

    /// Reads a log written by [`FencedRegister::save`] (blank lines and lines starting with
    /// `#` are skipped).
    pub fn load(path: impl AsRef<Path>) -> io::Result<Vec<FenceEvent>> {
        let text = std::fs::read_to_string(path)?;
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.parse().map_err(protocol_error))
            .collect()
    }
}

impl fmt::Display for FenceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:.6} {} {} {}",
            self.seq,
            self.at.as_secs_f64(),
            self.kind,
            self.token,
            self.worker
        )
    }
}

impl FromStr for FenceEvent {
    type Err = String;
    fn from_str(line: &str) -> Result<Self, String> {
        let bad = || format!("not a fence event: {line:?}");
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [seq, at, kind, token, worker] = fields[..] else {
            return Err(bad());
        };
        let at: f64 = at.parse().map_err(|_| bad())?;
        if !at.is_finite() || at < 0.0 {
            return Err(bad());
        }
        Ok(FenceEvent {
            seq: seq.parse().map_err(|_| bad())?,
            at: Duration::from_secs_f64(at),
            kind: kind.parse()?,
            token: token.parse().map_err(|_| bad())?,
            worker: worker.to_owned(),
        })
    }
}

// ---------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------
