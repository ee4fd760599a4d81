//! Cooperative revocation: a waiter asks the holder to let go, the holder's listener tells its
//! worker thread, which releases. Uses `ZK_CONNECT` if set, else a throwaway ZooKeeper server.

use std::thread;
use std::time::Duration;

use zklock::{Client, InterProcessMutex, Revoker};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (connect, _server) = zklock::testing::connect_string_or_start()?;
    let path = "/zklock-demo/report";
    let (asked_tx, asked_rx) = crossbeam_channel::unbounded();
    let (held_tx, held_rx) = crossbeam_channel::bounded(1);
    let holder = {
        let connect = connect.clone();
        thread::spawn(move || -> zklock::Result<()> {
            let client = Client::connect(&connect)?;
            let mutex = InterProcessMutex::new(&client, path)?;
            mutex.make_revocable(move || {
                println!("holder: asked to release");
                let _ = asked_tx.send(());
            });
            let guard = mutex.lock()?;
            println!("holder: holds the lock, working…");
            let _ = held_tx.send(());
            let _ = asked_rx.recv_timeout(Duration::from_secs(30));
            println!("holder: releasing");
            guard.release()
        })
    };
    held_rx.recv_timeout(Duration::from_secs(30))?;
    let client = Client::connect(&connect)?;
    let mutex = InterProcessMutex::new(&client, path)?;
    let holder_node = mutex.participant_nodes()?.remove(0);
    println!("waiter: revoking {holder_node}");
    Revoker::attempt_revoke(&client, &holder_node)?;
    let guard = mutex.lock()?;
    println!("waiter: got the lock");
    guard.release()?;
    holder.join().expect("holder")?;
    Ok(())
}
