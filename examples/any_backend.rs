//! One program, any backend: the URL picks it.
//!
//! `cargo run --example any_backend --features testing,redis,postgres -- redis://127.0.0.1:6379`
//! (`zk://host:2181/chroot`, `postgres://user:password@host/db`); with no URL it starts a
//! throwaway ZooKeeper.
use zklock::Lock;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = match std::env::args().nth(1) {
        Some(url) => (url, None),
        None => {
            let (hosts, server) = zklock::testing::connect_string_or_start()?;
            (format!("zk://{hosts}"), server)
        }
    };
    let locks = zklock::connect(&url)?;
    let reports = locks.mutex("reports")?;
    let guard = reports.lock()?;
    println!(
        "{} lock held, token {}",
        locks.backend(),
        guard.fencing_token()
    );
    Ok(())
}
