//! A lock on a secured ensemble: digest authentication, creator-only lock nodes under readable
//! parents, and a client with other credentials that can neither steal nor queue. Uses
//! `ZK_CONNECT` if set, else a throwaway ZooKeeper server.

use zklock::{Acl, AclProvider, Client, Error, InterProcessMutex, Revoker};

/// Lock nodes (`_c_…`) creator-only; the parents the recipes create readable by everyone.
struct CreatorOnlyLocks;

impl AclProvider for CreatorOnlyLocks {
    fn default_acl(&self) -> Vec<Acl> {
        vec![Acl::creator_all(), Acl::read_unsafe()]
    }

    fn acl_for_path(&self, path: &str) -> Vec<Acl> {
        if path
            .rsplit('/')
            .next()
            .is_some_and(|n| n.starts_with("_c_"))
        {
            vec![Acl::creator_all()]
        } else {
            self.default_acl()
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (connect, _server) = zklock::testing::connect_string_or_start()?;
    let app = Client::builder(&connect)
        .namespace("zklock-demo-secured")
        .digest_auth("app", "s3cret")
        .acl_provider(CreatorOnlyLocks)
        .connect()?;
    let mutex = InterProcessMutex::new(&app, "/locks/billing")?;
    let guard = mutex.lock()?;
    let node = mutex.lock_node().expect("held");
    println!("app holds {node} with ACL {:?}", app.acl(&node)?.0);

    let stranger = Client::builder(&connect)
        .namespace("zklock-demo-secured")
        .digest_auth("mallory", "guess")
        .connect()?;
    let theirs = InterProcessMutex::new(&stranger, "/locks/billing")?;
    println!(
        "the queue, as the stranger sees it: {:?}",
        theirs.participant_nodes()?
    );
    for (what, result) in [
        ("delete the holder's node", stranger.delete(&node)),
        (
            "ask it to revoke",
            Revoker::attempt_revoke(&stranger, &node),
        ),
        ("queue for the lock", theirs.acquire().map(drop)),
    ] {
        match result {
            Err(Error::NoAuth(path)) => println!("stranger may not {what}: NoAuth on {path}"),
            other => println!("stranger tried to {what}: {other:?}"),
        }
    }
    println!("the holder's lock is {:?}", mutex.health().expect("held"));
    guard.release()?;
    Ok(())
}
