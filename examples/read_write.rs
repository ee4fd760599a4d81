//! Readers share, a writer excludes them, and a writer downgrades to a reader without letting a
//! queued writer in. Uses `ZK_CONNECT` if set, else a throwaway ZooKeeper server.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use zklock::{Client, InterProcessReadWriteLock};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (connect, _server) = zklock::testing::connect_string_or_start()?;
    let start = Instant::now();
    let say = move |who: &str, what: &str| {
        println!("{:>6.2}s {who:<9} {what}", start.elapsed().as_secs_f64())
    };
    let path = "/zklock-demo/catalog";
    let mut threads = Vec::new();
    for i in 0..3 {
        let connect = connect.clone();
        threads.push(thread::spawn(move || -> zklock::Result<()> {
            let client = Client::connect(&connect)?;
            let rw = InterProcessReadWriteLock::new(&client, path)?;
            let name = format!("reader {i}");
            let guard = rw.read_lock().lock()?;
            say(&name, "reads (shared)");
            thread::sleep(Duration::from_millis(300));
            say(&name, "done");
            guard.release()
        }));
    }
    thread::sleep(Duration::from_millis(100));
    let client = Client::connect(&connect)?;
    let rw = Arc::new(InterProcessReadWriteLock::new(&client, path)?);
    let w = rw.write_lock().lock()?;
    say("writer", "writes (alone: the readers have finished)");
    let r = rw.read_lock().lock()?;
    say("writer", "downgrades: takes the read lock too");
    let late = {
        let connect = connect.clone();
        thread::spawn(move || -> zklock::Result<()> {
            let client = Client::connect(&connect)?;
            let rw = InterProcessReadWriteLock::new(&client, path)?;
            let g = rw.write_lock().lock()?;
            say(
                "writer 2",
                "writes (only after the downgraded read is released)",
            );
            g.release()
        })
    };
    thread::sleep(Duration::from_millis(200));
    w.release()?;
    say("writer", "released the write lock; still reading");
    thread::sleep(Duration::from_millis(300));
    say("writer", "releases the read lock");
    r.release()?;
    for t in threads {
        t.join().expect("reader")?;
    }
    late.join().expect("writer 2")?;
    Ok(())
}
