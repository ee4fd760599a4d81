//! The floor: the lock protocol on `zookeeper-client` directly, without zklock — protected
//! create of an ephemeral-sequential node, list the children, watch the predecessor's deletion
//! (getData watch) and list again, delete to release. Each session lives on one thread that
//! drives both its wire client and the protocol (an executor run by that thread), so no request
//! crosses threads: the least a client built on this wire library can spend per acquisition.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_executor::Executor;
use zookeeper_client as zk;

use crate::{Res, SESSION_TIMEOUT, STALL};

struct Spawner(Arc<Executor<'static>>);

impl spawns::Spawn for Spawner {
    fn spawn(&self, task: spawns::Task) {
        self.0.spawn(Box::into_pin(task.future)).detach();
    }
}

/// Opens a session and runs `f` with it on the calling thread, which also drives the session.
pub fn with_session<T, F, Fut>(connect: &str, f: F) -> Res<T>
where
    F: FnOnce(zk::Client) -> Fut,
    Fut: Future<Output = Res<T>>,
{
    let executor = Arc::new(Executor::new());
    let spawner = Spawner(executor.clone());
    let _scope = spawns::enter(&spawner);
    async_io::block_on(executor.run(async {
        let client = zk::Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .connect(connect)
            .await?;
        let out = f(client).await;
        // The last handle is gone: the session task sends its close; let it go out.
        async_io::Timer::after(Duration::from_millis(20)).await;
        out
    }))
}

/// `path` and its missing ancestors, as persistent nodes.
pub async fn mkdirs(zk: &zk::Client, path: &str) -> Res<()> {
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    Ok(zk.mkdir(path, &options).await?)
}

/// Queues under `dir` and waits until first; returns our node.
pub async fn acquire(zk: &zk::Client, dir: &str) -> Res<String> {
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    let (_, seq) = zk.create(&prefix, &[], &options).await?;
    let node = format!("{prefix}{seq}");
    let ours = &node[dir.len() + 1..];
    loop {
        let mut children = zk.list_children(dir).await?;
        children.sort_by(|a, b| sequence(a).cmp(sequence(b)));
        let at = children
            .iter()
            .position(|c| c == ours)
            .ok_or("our node vanished")?;
        if at == 0 {
            return Ok(node);
        }
        match zk
            .get_and_watch_data(&format!("{dir}/{}", children[at - 1]))
            .await
        {
            Ok((_, _, watch)) => {
                // Bounded, as every wait of the bench: a stuck queue fails the run.
                let stalled = async {
                    async_io::Timer::after(STALL).await;
                    Err(format!("the floor's predecessor did not go in {STALL:?}"))
                };
                futures_lite::future::or(async { Ok(watch.changed().await) }, stalled).await?;
            }
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

pub async fn release(zk: &zk::Client, node: &str) -> Res<()> {
    Ok(zk.delete(node, None).await?)
}

fn sequence(name: &str) -> &str {
    &name[name.len().saturating_sub(10)..]
}
