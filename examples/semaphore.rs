//! Eight workers share three leases of a semaphore; raising a shared count lets more in.
//! Uses `ZK_CONNECT` if set, else a throwaway ZooKeeper server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use zklock::{Client, InterProcessSemaphoreV2, SharedCount};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (connect, _server) = zklock::testing::connect_string_or_start()?;
    let start = Instant::now();
    let client = Client::connect(&connect)?;
    let size = SharedCount::new(&client, "/zklock-demo/pool-size", 3)?;
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (client, inside) = (client.clone(), inside.clone());
            thread::spawn(move || -> zklock::Result<()> {
                let count = SharedCount::new(&client, "/zklock-demo/pool-size", 3)?;
                let pool = InterProcessSemaphoreV2::with_shared_count(
                    &client,
                    "/zklock-demo/pool",
                    &count,
                )?;
                let lease = pool.acquire()?;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                println!(
                    "{:>6.2}s worker {i} in ({now} inside)",
                    start.elapsed().as_secs_f64()
                );
                thread::sleep(Duration::from_millis(400));
                inside.fetch_sub(1, Ordering::SeqCst);
                lease.return_lease()
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(600));
    println!(
        "{:>6.2}s raising the pool from 3 to 5",
        start.elapsed().as_secs_f64()
    );
    size.set_count(5)?;
    for t in threads {
        t.join().expect("worker")?;
    }
    Ok(())
}
