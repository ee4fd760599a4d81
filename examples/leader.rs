//! Leader election: three participants, each with its own Client, elect a leader with
//! `LeaderSelector`. The first leader works for a moment and steps down; the second one's
//! session is expired under it (as a long pause would do): its term is cancelled and the next
//! participant takes over. Every term prints its epoch, which rises from term to term: a
//! resource that keeps the highest epoch it has seen refuses a deposed leader's late writes.
//! Uses `ZK_CONNECT` if set, else a throwaway ZooKeeper server.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use zklock::{Client, LeaderSelector};

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

/// What a term did: (term number, participant, what).
type Event = (u32, &'static str, &'static str);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (connect, _server) = zklock::testing::connect_string_or_start()?;
    let path = "/zklock-demo/leader";
    let (tx, events) = crossbeam_channel::unbounded::<Event>();
    let terms = Arc::new(AtomicU32::new(0));
    let mut clients = Vec::new();
    let mut selectors = Vec::new();
    for name in NAMES {
        let client = Client::builder(&connect)
            .session_timeout(Duration::from_secs(10))
            .connect()?;
        let (tx, terms) = (tx.clone(), terms.clone());
        let selector = LeaderSelector::builder(&client, path)
            .id(name)
            .auto_requeue(true)
            .build(move |leadership| {
                let term = terms.fetch_add(1, Ordering::SeqCst) + 1;
                let epoch = leadership.fencing_token();
                println!("term {term}: {name} leads, epoch {epoch}");
                let _ = tx.send((term, name, "leads"));
                // Work in steps, making sure of the term before each one.
                for step in 1..=5 {
                    if leadership.wait_cancelled(Duration::from_millis(200)) {
                        println!(
                            "term {term}: {name}'s leadership was cancelled ({:?}); it stops",
                            leadership.health()
                        );
                        let _ = tx.send((term, name, "cancelled"));
                        return Ok(());
                    }
                    println!("term {term}: {name} writes step {step} with epoch {epoch}");
                }
                println!("term {term}: {name} steps down");
                let _ = tx.send((term, name, "stepped down"));
                Ok(())
            })?;
        selector.start()?;
        clients.push(client);
        selectors.push(selector);
    }
    let next = || events.recv_timeout(Duration::from_secs(30));
    let wait_for = |want: &str| -> Result<Event, Box<dyn std::error::Error>> {
        loop {
            let e = next()?;
            if e.2 == want {
                return Ok(e);
            }
        }
    };
    wait_for("stepped down")?;
    let (_, second, _) = wait_for("leads")?;
    std::thread::sleep(Duration::from_millis(300));
    println!("-- {second}'s session is expired --");
    let victim = NAMES
        .iter()
        .position(|n| *n == second)
        .expect("a participant");
    zklock::testing::expire_session(&clients[victim])?;
    // The deposed leader notices, and another leads in a new term.
    let (mut cancelled, mut took_over) = (false, false);
    while !(cancelled && took_over) {
        let (_, name, what) = next()?;
        cancelled |= name == second && what == "cancelled";
        took_over |= name != second && what == "leads";
    }
    println!("-- closing --");
    for s in &selectors {
        s.close();
    }
    for s in &selectors {
        s.close_timeout(Duration::from_secs(10));
    }
    Ok(())
}
