//! A unit test of a service's rollback path, on `mem://`: the service takes its lock through
//! `AnyClient` as in production; the test makes the hold go `Lost` in the middle of the work
//! and checks that the service undid it — in microseconds, with no server.
//!
//! ```sh
//! cargo run --example unit_test_rollback
//! ```

use std::sync::Arc;
use std::time::Instant;

use zklock::mem::{MemClient, MemMutex};
use zklock::{AnyClient, Error, Lock, LockHealth};

/// The service under test: moves stock between two shelves under a lock, and puts it back if
/// the lock was lost before the move was committed.
struct Warehouse {
    lock: Arc<dyn Lock>,
    shelves: [u32; 2],
    committed: Vec<u64>,
}

impl Warehouse {
    fn new(locks: &AnyClient) -> zklock::Result<Warehouse> {
        Ok(Warehouse {
            lock: locks.mutex("warehouse")?,
            shelves: [10, 0],
            committed: Vec::new(),
        })
    }

    /// Moves `n` items; `meanwhile` is what happens while they are in the air.
    fn move_items(&mut self, n: u32, meanwhile: impl FnOnce()) -> Result<(), Error> {
        let guard = self.lock.lock()?;
        let before = self.shelves;
        self.shelves[0] -= n;
        meanwhile();
        self.shelves[1] += n;
        if guard.health() != LockHealth::Held {
            self.shelves = before;
            return guard.release().and(Err(Error::LockLost));
        }
        self.committed.push(guard.fencing_token());
        guard.release()
    }
}

fn main() -> zklock::Result<()> {
    let started = Instant::now();

    // The test's set-up: a store of its own; a clone of the Client kept for the controls.
    let client = MemClient::isolated();
    let mut warehouse = Warehouse::new(&AnyClient::from(client.clone()))?;

    // The session is lost while the items are in the air: the move is undone.
    let outcome = warehouse.move_items(4, || {
        client.lose_holds();
    });
    assert_eq!(outcome, Err(Error::LockLost));
    assert_eq!(warehouse.shelves, [10, 0], "rolled back");
    assert!(warehouse.committed.is_empty());

    // The lost lock is free for another Client at once.
    let rival = MemClient::connect(client.store_name())?;
    assert!(MemMutex::new(&rival, "warehouse")?.try_lock()?.is_some());

    // Undisturbed, the move commits with a fencing token.
    warehouse.move_items(4, || {})?;
    assert_eq!(warehouse.shelves, [6, 4]);
    assert_eq!(warehouse.committed.len(), 1);

    let took = started.elapsed();
    println!("the rollback path was checked in {took:?}");
    Ok(())
}
