//! Two accounts locked together, all or nothing, with one deadline for both.
//! Uses `ZK_CONNECT` if set, else a throwaway ZooKeeper server.

use std::time::Duration;

use zklock::{Client, InterProcessMultiLock, InterProcessMutex};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (connect, _server) = zklock::testing::connect_string_or_start()?;
    let client = Client::connect(&connect)?;
    let other = Client::connect(&connect)?;
    let transfer = InterProcessMultiLock::new(
        &client,
        &["/zklock-demo/acct/alice", "/zklock-demo/acct/bob"],
    )?;
    // Someone else holds Bob's account for a while.
    let bob = InterProcessMutex::new(&other, "/zklock-demo/acct/bob")?;
    let held = bob.lock()?;
    let got = transfer.acquire_timeout(Duration::from_millis(500))?;
    println!("while Bob's account is busy: got both = {got} (Alice's lock was given back)");
    drop(held);
    let got = transfer.acquire_timeout(Duration::from_secs(10))?;
    println!("after it is free: got both = {got}");
    transfer.release()?;
    println!("released both, in reverse order");
    Ok(())
}
