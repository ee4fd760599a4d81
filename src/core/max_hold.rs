//! `max_hold`: a cap on how long one hold may last even while its renewals succeed (Redisson's
//! `leaseTime`, ShedLock's `lockAtMostFor`). Holds are capped by one timer thread for the whole
//! process, started by the first cap set: no thread per hold. What a capped hold does when its
//! time comes — read `Lost`, tell its listeners, free the server's hold — is the shell's
//! ([`Reentrant`](super::hold::Reentrant)); this file validates the option, parses it from
//! text and runs the timer.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::error::{Error, Result};

/// A cap as a caller gave it, checked: `None` (no cap) stays `None`; zero is refused (a hold
/// that ends as it is granted protects nothing); a length past what the clock can count is no
/// cap. Starts the timer thread, so that a failure to start it is the setter's error.
pub(crate) fn check(max_hold: Option<Duration>) -> Result<Option<Duration>> {
    let Some(cap) = max_hold else {
        return Ok(None);
    };
    if cap.is_zero() {
        return Err(Error::invalid(
            "max_hold must be above zero (None for no cap)",
        ));
    }
    if Instant::now().checked_add(cap).is_none() {
        return Ok(None);
    }
    timer()?;
    Ok(Some(cap))
}

/// A cap written as text: `500ms`, `2s`, `1.5s`, `2m`, `1h` (a bare number is seconds), as the
/// command line's durations; `none` for no cap.
pub(crate) fn parse(text: &str) -> Result<Option<Duration>> {
    let bad = |why: String| Error::invalid(format!("max_hold={text:?}: {why}"));
    let s = text.trim();
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let split = (s.find(|c: char| !(c.is_ascii_digit() || c == '.'))).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| bad("not a duration (try 500ms, 2s, 1m, 1h or none)".into()))?;
    let scale = match unit.trim() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => return Err(bad(format!("unknown unit {other:?} (use ms, s, m or h)"))),
    };
    let cap = Duration::try_from_secs_f64(value * scale).map_err(|e| bad(e.to_string()))?;
    check(Some(cap)).map_err(|e| match e {
        Error::InvalidArgument(why) => bad(why),
        other => other,
    })
}

/// What the timer runs when a cap passes. It must not block: it reports and hands the release
/// to the backend's background.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// A scheduled job, for [`cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key(Instant, u64);

/// The process's cap timer: jobs by due time, one thread running them.
struct Timer {
    jobs: Mutex<Jobs>,
    changed: Condvar,
}

#[derive(Default)]
struct Jobs {
    due: BTreeMap<Key, Job>,
    next: u64,
}

static TIMER: OnceLock<Timer> = OnceLock::new();
static STARTED: Mutex<bool> = Mutex::new(false);

/// The timer, its thread started on first use.
fn timer() -> Result<&'static Timer> {
    let timer = TIMER.get_or_init(|| Timer {
        jobs: Mutex::new(Jobs::default()),
        changed: Condvar::new(),
    });
    let mut started = STARTED.lock();
    if !*started {
        std::thread::Builder::new()
            .name("zklock-max-hold".into())
            .spawn(move || run(timer))
            .map_err(|e| Error::ThreadStart {
                name: "zklock-max-hold".into(),
                kind: e.kind(),
                message: e.to_string(),
            })?;
        *started = true;
    }
    Ok(timer)
}

/// Runs `job` at `at`; `None` when the timer never started (no cap was ever set).
pub(crate) fn schedule(at: Instant, job: Job) -> Option<Key> {
    let timer = TIMER.get()?;
    let mut jobs = timer.jobs.lock();
    jobs.next += 1;
    let key = Key(at, jobs.next);
    let first = jobs.due.keys().next().is_none_or(|k| key < *k);
    jobs.due.insert(key, job);
    drop(jobs);
    if first {
        timer.changed.notify_one();
    }
    Some(key)
}

/// Drops the job of `key` if it has not run.
pub(crate) fn cancel(key: Key) {
    if let Some(timer) = TIMER.get() {
        let job = timer.jobs.lock().due.remove(&key);
        // Dropped outside the timer's lock: it may hold the last handle of a lock object.
        drop(job);
    }
}

fn run(timer: &'static Timer) {
    let mut jobs = timer.jobs.lock();
    loop {
        let now = Instant::now();
        match jobs.due.keys().next().copied() {
            Some(key) if key.0 <= now => {
                let job = jobs.due.remove(&key);
                drop(jobs);
                if let Some(job) = job {
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                        tracing::error!("zklock: a max_hold job panicked");
                    }
                }
                jobs = timer.jobs.lock();
            }
            Some(key) => {
                timer.changed.wait_until(&mut jobs, key.0);
            }
            None => timer.changed.wait(&mut jobs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_checked_and_parsed() {
        assert!(matches!(
            check(Some(Duration::ZERO)),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(check(Some(Duration::MAX)).unwrap(), None);
        assert_eq!(check(None).unwrap(), None);
        assert_eq!(parse("2s").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(parse("500ms").unwrap(), Some(Duration::from_millis(500)));
        assert_eq!(parse("none").unwrap(), None);
        for bad in ["", "0", "0s", "-1s", "2x", "abc", "1e999", "NaN"] {
            match parse(bad) {
                Err(Error::InvalidArgument(why)) => assert!(why.contains("max_hold"), "{why}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn jobs_run_in_time_order_and_cancelled_ones_do_not() {
        check(Some(Duration::from_secs(1))).unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let now = Instant::now();
        let at = |ms| now + Duration::from_millis(ms);
        let send = |n: u32| {
            let tx = tx.clone();
            Box::new(move || {
                let _ = tx.send(n);
            }) as Job
        };
        schedule(at(60), send(3)).unwrap();
        let gone = schedule(at(40), send(2)).unwrap();
        schedule(at(20), send(1)).unwrap();
        cancel(gone);
        let wait = Duration::from_secs(30);
        assert_eq!(rx.recv_timeout(wait), Ok(1));
        assert_eq!(rx.recv_timeout(wait), Ok(3));
    }
}
