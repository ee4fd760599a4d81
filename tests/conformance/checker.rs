//! The enter/exit log that every exclusion scenario writes, and the checker that reads it.

use parking_lot::Mutex;

/// What a critical section may share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Alongside other readers, never alongside a writer.
    Read,
    /// Alone, or up to the log's limit of writers at once (a semaphore's leases).
    Write,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    who: usize,
    access: Access,
    enter: bool,
}

/// Critical sections in the order they began and ended, as seen by this process.
#[derive(Debug, Default)]
pub struct Log {
    events: Mutex<Vec<Event>>,
}

impl Log {
    /// Called right after the lock is granted.
    pub fn enter(&self, who: usize, access: Access) {
        self.events.lock().push(Event {
            who,
            access,
            enter: true,
        });
    }

    /// Called right before the lock is released.
    pub fn exit(&self, who: usize, access: Access) {
        self.events.lock().push(Event {
            who,
            access,
            enter: false,
        });
    }

    /// How many sections the log holds.
    pub fn sections(&self) -> usize {
        self.events.lock().iter().filter(|e| e.enter).count()
    }

    /// The most writers inside at once, or the first moment the log breaks the rule: at most
    /// `writers` writers at once, and never a reader beside a writer.
    pub fn check(&self, writers: usize) -> Result<usize, String> {
        let (mut readers, mut inside, mut peak) = (0usize, 0usize, 0usize);
        for (i, e) in self.events.lock().iter().enumerate() {
            match (e.access, e.enter) {
                (Access::Read, true) => readers += 1,
                (Access::Read, false) => readers -= 1,
                (Access::Write, true) => inside += 1,
                (Access::Write, false) => inside -= 1,
            }
            peak = peak.max(inside);
            if inside > writers || (inside > 0 && readers > 0) {
                return Err(format!(
                    "event {i} ({} of {:?} by {}): {inside} writers and {readers} readers inside",
                    if e.enter { "entry" } else { "exit" },
                    e.access,
                    e.who
                ));
            }
        }
        Ok(peak)
    }
}

#[test]
fn the_checker_catches_a_planted_overlap() {
    let log = Log::default();
    log.enter(1, Access::Write);
    log.exit(1, Access::Write);
    log.enter(2, Access::Write);
    log.enter(3, Access::Write); // 3 enters while 2 is inside
    log.exit(2, Access::Write);
    log.exit(3, Access::Write);
    assert!(log.check(1).unwrap_err().contains("2 writers"));
    assert_eq!(log.check(2), Ok(2));

    let log = Log::default();
    log.enter(1, Access::Read);
    log.enter(2, Access::Read);
    log.exit(1, Access::Read);
    log.enter(3, Access::Write); // a writer beside reader 2
    log.exit(3, Access::Write);
    log.exit(2, Access::Read);
    assert!(log.check(1).unwrap_err().contains("1 readers"));
}
