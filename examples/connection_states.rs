//! Connection states through real faults: a server restart (the session survives) and a session
//! expiry (Lost, then a new session). Uses `ZK_CONNECT` if set (then only watches states for 30 s),
//! else starts a throwaway ZooKeeper server.
//!
//! ```sh
//! scripts/demo.sh            # or: cargo run --features testing --example connection_states
//! ```

use std::time::{Duration, Instant};

use zklock::testing::{expire_session, TestingServer};
use zklock::{Client, CreateMode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let stamp = move || format!("{:>6.2}s", start.elapsed().as_secs_f64());
    let mut server = match std::env::var("ZK_CONNECT") {
        Ok(_) => None,
        Err(_) => {
            println!("{} starting a throwaway ZooKeeper server…", stamp());
            Some(TestingServer::start()?)
        }
    };
    let connect = match &server {
        Some(s) => s.connect_string(),
        None => std::env::var("ZK_CONNECT")?,
    };
    let client = Client::builder(&connect)
        .session_timeout(Duration::from_secs(10))
        .connect()?;
    client.on_connection_state(move |state| println!("{}   state: {state:?}", stamp()));
    println!(
        "{} connected to {connect}, session {:#x}",
        stamp(),
        client.session_id().unwrap_or(0)
    );
    let node = client
        .create("/zklock-demo/me-")
        .mode(CreateMode::EphemeralSequential)
        .parents_as_containers()
        .call()?;
    println!("{} created ephemeral {node}", stamp());

    let Some(server) = server.as_mut() else {
        std::thread::sleep(Duration::from_secs(30));
        return Ok(());
    };
    println!(
        "{} restarting the server (the session must survive)…",
        stamp()
    );
    server.restart()?;
    client.sync("/")?;
    println!(
        "{} back: session {:#x}, {node} exists: {}",
        stamp(),
        client.session_id().unwrap_or(0),
        client.exists(&node)?.is_some()
    );
    println!("{} expiring the session on the server…", stamp());
    expire_session(&client)?;
    while client.exists(&node).ok().flatten().is_some() || !client.is_connected() {
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "{} new session {:#x}; the old ephemeral is gone: {}",
        stamp(),
        client.session_id().unwrap_or(0),
        client.exists(&node)?.is_none()
    );
    client.close();
    Ok(())
}
