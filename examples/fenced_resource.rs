//! A lock alone cannot stop a holder that paused (GC, swap, SIGSTOP) past its session: it wakes
//! up still "holding" a lock that someone else now holds. The fencing token can: the resource
//! remembers the highest token it accepted and refuses older ones. This is the pattern to copy.
//!
//! Uses `ZK_CONNECT` if set, else starts a throwaway ZooKeeper server.
//!
//! ```sh
//! cargo run --features testing --example fenced_resource
//! ```

use std::time::Duration;

use zklock::testing::{connect_string_or_start, expire_session, FencedRegister, WriteOutcome};
use zklock::{Client, InterProcessMutex};

const LOCK: &str = "/zklock-demo/fenced";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (connect, _server) = connect_string_or_start()?;
    // The protected resource: it checks every write's token.
    let register = FencedRegister::start()?;
    println!(
        "ZooKeeper at {connect}; fenced register at {}",
        register.addr()
    );

    let connect_client = || {
        Client::builder(&connect)
            .session_timeout(Duration::from_secs(10))
            .connect()
    };
    let (client_a, client_b) = (connect_client()?, connect_client()?);
    let (mut fence_a, mut fence_b) = (register.client()?, register.client()?);

    // A takes the lock and writes with its token.
    let mutex_a = InterProcessMutex::new(&client_a, LOCK)?;
    let guard_a = mutex_a.lock()?;
    let token_a = guard_a.fencing_token();
    fence_a.enter(token_a, "A")?;
    let outcome = fence_a.write(token_a, "A", "balance=100")?;
    println!("1. A holds the lock, token {token_a}; writes balance=100: {outcome:?}");

    // A pauses. While it is not looking, its session expires and its lock node goes.
    let session = expire_session(&client_a)?;
    println!("2. A pauses; its session {session:#x} expires");

    // B gets the lock and writes with its (higher) token.
    let mutex_b = InterProcessMutex::new(&client_b, LOCK)?;
    let guard_b = mutex_b
        .try_lock_for(Duration::from_secs(60))?
        .ok_or("B did not get the lock")?;
    let token_b = guard_b.fencing_token();
    fence_b.enter(token_b, "B")?;
    let outcome = fence_b.write(token_b, "B", "balance=50")?;
    println!("3. B holds the lock, token {token_b}; writes balance=50: {outcome:?}");

    // A wakes up, still holding its guard, and writes with its stale token.
    match fence_a.write(token_a, "A", "balance=0")? {
        WriteOutcome::Rejected { highest } => println!(
            "4. A wakes up and writes balance=0 with token {token_a}: refused (highest is {highest})"
        ),
        WriteOutcome::Accepted => return Err("the register accepted a stale token".into()),
    }
    println!(
        "   A's guard now says {:?}; the value is still {:?}",
        guard_a.health(),
        register.value()
    );
    fence_a.exit(token_a, "A")?;
    drop(guard_a);

    fence_b.exit(token_b, "B")?;
    guard_b.release()?;

    let report = register.check();
    println!("\n{report}");
    if !report.is_clean() {
        return Err("the fence log shows a violation".into());
    }
    Ok(())
}
