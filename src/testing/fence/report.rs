//! [`FenceReport`]: the checker that judges a register's log — overlapping holders, stale
//! writes accepted, per-worker figures.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::*;

/// Two holders that both mutated the resource at the same time (see [`FenceReport::check`]).
///
/// # Example
///
/// ```
/// let report = zklock::testing::FenceReport::check(&[]);
/// for o in &report.overlaps {
///     println!("{}#{} and {}#{} both wrote", o.first_worker, o.first_token, o.second_worker, o.second_token);
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The holder whose tenure began first: worker and token.
    pub first_worker: String,
    /// Its token.
    pub first_token: u64,
    /// The other holder.
    pub second_worker: String,
    /// Its token.
    pub second_token: u64,
    /// Index in the log (= `seq` in a register's log) of the first holder's first accepted
    /// write inside the shared interval.
    pub first_write: usize,
    /// Index of the second holder's first accepted write inside the shared interval.
    pub second_write: usize,
}

/// Per-worker counts of a [`FenceReport`].
///
/// # Example
///
/// ```
/// let report = zklock::testing::FenceReport::check(&[]);
/// for (worker, s) in &report.workers {
///     println!("{worker}: {} acquisitions, {} writes accepted", s.acquisitions, s.accepted);
/// }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// `enter` events.
    pub acquisitions: u64,
    /// Accepted writes.
    pub accepted: u64,
    /// Rejected writes.
    pub rejected: u64,
}

/// What [`FenceReport::check`] found in a register's log.
///
/// `Display` prints a short Markdown block: a one-row table, the per-worker counts and any
/// violation.
///
/// # Example
///
/// ```
/// use zklock::testing::{FenceEvent, FenceEventKind::*, FenceReport};
///
/// // A holds token 1; B gets token 2 while A still believes it holds the lock; both write,
/// // and a broken resource accepts A's stale token.
/// let log = [
///     FenceEvent::new(Enter, 1, "A"),
///     FenceEvent::new(Accepted, 1, "A"),
///     FenceEvent::new(Enter, 2, "B"),
///     FenceEvent::new(Accepted, 2, "B"),
///     FenceEvent::new(Accepted, 1, "A"),
/// ];
/// let report = FenceReport::check(&log);
/// assert!(!report.is_clean());
/// assert_eq!(report.overlaps.len(), 1);
/// assert_eq!(report.stale_accepted, [4]);
/// println!("{report}");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FenceReport {
    /// Events checked.
    pub events: usize,
    /// Pairs of holders that both wrote while both were inside.
    pub overlaps: Vec<Overlap>,
    /// Index in the log (= `seq` in a register's log) of every accepted write whose token was
    /// lower than one accepted before it (impossible with a working fence).
    pub stale_accepted: Vec<usize>,
    /// Rejected writes whose token was lower than one accepted before them: stale holders
    /// the fence stopped.
    pub stale_rejected: usize,
    /// Counts per worker name.
    pub workers: BTreeMap<String, WorkerStats>,
}

/// One holder's time inside: from its `enter` (or, without one, its first accepted write) to
/// its `exit` (or the end of the log).
struct Tenure {
    worker: String,
    token: u64,
    start: usize,
    end: usize,
    writes: Vec<usize>,
}

impl FenceReport {
    /// Checks a log; the order of `events` is the serial order (their `seq` and `at` are not
    /// used: hand-made logs may leave them 0).
    ///
    /// A **holder** is a (worker, token) pair. Its **tenure** runs from its `enter` to its
    /// next `exit`, both included; a holder that never exits stays inside until the end of
    /// the log; an accepted write by a holder that is not inside opens a tenure at that write.
    ///
    /// * **Overlap** (violation): two tenures of different holders whose intersection holds an
    ///   accepted write of *each*. Both mutated the resource while both believed they held the
    ///   lock. A stale holder that is still "inside" but whose writes were all rejected is not
    ///   a violation: the fence did its job. Nor are two holders whose tenures overlap while
    ///   only one of them writes (e.g. an old holder that never logged its exit).
    /// * **Stale write accepted** (violation): an accepted write whose token is lower than a
    ///   token accepted earlier.
    /// * **Stale write rejected** (counted): a rejected write whose token is lower than a token
    ///   accepted earlier.
    pub fn check(events: &[FenceEvent]) -> FenceReport {
        let mut report = FenceReport {
            events: events.len(),
            ..FenceReport::default()
        };
        let mut tenures: Vec<Tenure> = Vec::new();
        let mut open: HashMap<(&str, u64), usize> = HashMap::new();
        let mut highest: Option<u64> = None;
        for (i, e) in events.iter().enumerate() {
            let key = (e.worker.as_str(), e.token);
            let stats = report.workers.entry(e.worker.clone()).or_default();
            let stale = highest.is_some_and(|h| e.token < h);
            let open_tenure = |tenures: &mut Vec<Tenure>| {
                tenures.push(Tenure {
                    worker: e.worker.clone(),
                    token: e.token,
                    start: i,
                    end: usize::MAX,
                    writes: Vec::new(),
                });
                tenures.len() - 1
            };
            match e.kind {
                FenceEventKind::Enter => {
                    stats.acquisitions += 1;
                    let t = open_tenure(&mut tenures);
                    open.insert(key, t);
                }
                FenceEventKind::Exit => {
                    if let Some(t) = open.remove(&key) {
                        tenures[t].end = i;
                    }
                }
                FenceEventKind::Accepted => {
                    stats.accepted += 1;
                    if stale {
                        report.stale_accepted.push(i);
                    }
                    highest = highest.max(Some(e.token));
                    let t = match open.get(&key) {
                        Some(&t) => t,
                        None => {
                            let t = open_tenure(&mut tenures);
                            open.insert(key, t);
                            t
                        }
                    };
                    tenures[t].writes.push(i);
                }
                FenceEventKind::Rejected => {
                    stats.rejected += 1;
                    if stale {
                        report.stale_rejected += 1;
                    }
                }
            }
        }
        for (a_i, a) in tenures.iter().enumerate() {
            for b in &tenures[a_i + 1..] {
                if (&a.worker, a.token) == (&b.worker, b.token) {
                    continue;
                }
                let (lo, hi) = (a.start.max(b.start), a.end.min(b.end));
                let within = |t: &Tenure| t.writes.iter().copied().find(|w| (lo..=hi).contains(w));
                if let (Some(wa), Some(wb)) = (within(a), within(b)) {
                    report.overlaps.push(Overlap {
                        first_worker: a.worker.clone(),
                        first_token: a.token,
                        second_worker: b.worker.clone(),
                        second_token: b.token,
                        first_write: wa,
                        second_write: wb,
                    });
                }
            }
        }
        report
    }

    /// Whether the log shows no overlap and no accepted stale write.
    pub fn is_clean(&self) -> bool {
        self.overlaps.is_empty() && self.stale_accepted.is_empty()
    }

    /// Rejected writes, every worker's together. A clean report may still have some: a holder
    /// overtaken by a newer token is refused, which is the fence at work, not an overlap. In a
    /// run without faults there should be none, since every holder exits before the next
    /// enters; a rejection there means two holders were inside at once, even when the report
    /// shows no [`Overlap`] (the newer one wrote first, so the older one's write was refused).
    ///
    /// # Example
    ///
    /// ```
    /// use zklock::testing::{FenceEvent, FenceEventKind::*, FenceReport};
    ///
    /// // B enters and writes while A is still inside; A's write is refused.
    /// let log = [
    ///     FenceEvent::new(Enter, 1, "A"),
    ///     FenceEvent::new(Enter, 2, "B"),
    ///     FenceEvent::new(Accepted, 2, "B"),
    ///     FenceEvent::new(Rejected, 1, "A"),
    /// ];
    /// let report = FenceReport::check(&log);
    /// assert!(report.is_clean()); // the fence held
    /// assert_eq!(report.rejected(), 1); // but A and B were inside together
    /// ```
    pub fn rejected(&self) -> u64 {
        self.workers.values().map(|w| w.rejected).sum()
    }
}

impl fmt::Display for FenceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let acquisitions: u64 = self.workers.values().map(|w| w.acquisitions).sum();
        let accepted: u64 = self.workers.values().map(|w| w.accepted).sum();
        writeln!(
            f,
            "| events | acquisitions | accepted writes | stale rejected | stale accepted | overlaps | verdict |"
        )?;
        writeln!(f, "|---:|---:|---:|---:|---:|---:|---|")?;
        writeln!(
            f,
            "| {} | {acquisitions} | {accepted} | {} | {} | {} | {} |",
            self.events,
            self.stale_rejected,
            self.stale_accepted.len(),
            self.overlaps.len(),
            if self.is_clean() {
                "clean"
            } else {
                "**VIOLATION**"
            }
        )?;
        writeln!(f)?;
        for (worker, s) in &self.workers {
            writeln!(
                f,
                "- `{worker}`: {} acquisitions, {} writes accepted, {} rejected",
                s.acquisitions, s.accepted, s.rejected
            )?;
        }
        for o in &self.overlaps {
            writeln!(
                f,
                "- overlap: `{}` (token {}) wrote at #{} and `{}` (token {}) at #{} while both were inside",
                o.first_worker, o.first_token, o.first_write, o.second_worker, o.second_token, o.second_write
            )?;
        }
        if !self.stale_accepted.is_empty() {
            writeln!(f, "- stale writes accepted at {:?}", self.stale_accepted)?;
        }
        Ok(())
    }
}
