//! Really expiring a Client's session, as Curator's `KillSession` does.

use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::zookeeper::client::Client;

/// Expires `client`'s current session on the server: a second connection joins the same session
/// (same id and password) and closes it, while `client`'s wire client is held still so that it
/// cannot take the session back first. The server ends the session and deletes its ephemeral
/// nodes; `client` sees its session expire, reports `Lost`, then opens a new one (`Reconnected`).
///
/// Returns the id of the session that was expired.
///
/// # Example
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = zklock::testing::TestingServer::start()?;
/// let client = zklock::Client::connect(&server.connect_string())?;
/// let old = zklock::testing::expire_session(&client)?;
/// # Ok(()) }
/// ```
pub fn expire_session(client: &Client) -> Result<i64> {
    let (hosts, session) = client
        .session_for_testing()
        .ok_or_else(|| Error::invalid("the client has no session"))?;
    let id = session.id().0;
    // While the joiner takes the session over, `client` must not reconnect and take it back.
    let frozen = client.freeze_io_for_testing();
    // The wire client spawns its session task: run it on a runtime of its own.
    let runtime = crate::zookeeper::client::Runtime::start()
        .map_err(|e| Error::ZooKeeper(format!("cannot start a thread: {e}")))?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    runtime.spawn(async move {
        let killer = zookeeper_client::Client::connector()
            .with_session(session)
            .with_session_timeout(Duration::from_secs(10))
            .connect(&hosts)
            .await;
        let killer = match killer {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!("expire_session: cannot join session: {e:?}");
                let _ = tx.send(Err(Error::from_zk(e, &hosts)));
                return;
            }
        };
        // Dropping the last handle sends CloseSession; wait until the server answered it.
        let mut states = killer.state_watcher();
        drop(killer);
        let closed = async {
            while !states.state().is_terminated() {
                states.changed().await;
            }
        };
        futures_lite::future::or(closed, async {
            async_io::Timer::after(Duration::from_secs(10)).await;
        })
        .await;
        let _ = tx.send(Ok(()));
    });
    let result = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or(Err(Error::Timeout));
    runtime.shutdown();
    drop(frozen);
    result?;
    Ok(id)
}
