//! Secured ensembles: ACL providers, digest identities, runtime authentication, and
//! locks that no client without the right credentials can take, delete or forge.

mod common;

use std::time::Duration;

use common::*;
use zklock::testing::{expire_session, TestingServer};
use zklock::zookeeper::Perms;
use zklock::{
    Acl, AclProvider, Client, ConnectionState, Error, InterProcessMutex, LockHealth, Revoker,
};

/// The recommended set-up: lock nodes creator-only, everything else (the lock's parents)
/// readable by all and the creator's otherwise.
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

fn builder(server: &TestingServer) -> zklock::ClientBuilder {
    Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connection_timeout(Duration::from_secs(30))
}

#[test]
fn the_provider_chooses_the_acl_of_lock_nodes_and_of_the_parents_created_for_them() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let owner = builder(&server)
        .digest_auth("owner", "pw")
        .namespace("ns")
        .acl_provider(CreatorOnlyLocks)
        .connect()
        .unwrap();
    let mutex = InterProcessMutex::new(&owner, "/locks/job").unwrap();
    let guard = mutex.lock().unwrap();
    let node = mutex.lock_node().unwrap();
    let me = Acl::digest("owner", "pw", Perms::ALL);
    assert_eq!(owner.acl(&node).unwrap().0, vec![me.clone()]);
    for parent in ["/locks", "/locks/job"] {
        assert_eq!(
            owner.acl(parent).unwrap().0,
            vec![me.clone(), Acl::read_unsafe()],
            "{parent}"
        );
    }
    // The namespace too (the provider sees it as the server does). Only a session with ADMIN
    // on a node sees its digest ids (others see `owner:x`).
    let root = builder(&server)
        .digest_auth("owner", "pw")
        .connect()
        .unwrap();
    assert_eq!(
        root.acl("/ns").unwrap().0,
        vec![me.clone(), Acl::read_unsafe()]
    );
    guard.release().unwrap();

    // A recipe's own provider wins over the Client's.
    let open = InterProcessMutex::new(&owner, "/open/job").unwrap();
    open.set_acl_provider(vec![Acl::open_unsafe()]);
    let guard = open.lock().unwrap();
    assert_eq!(
        owner.acl(&open.lock_node().unwrap()).unwrap().0,
        vec![Acl::open_unsafe()]
    );
    assert_eq!(owner.acl("/open").unwrap().0, vec![Acl::open_unsafe()]);
    guard.release().unwrap();
}

#[test]
fn strangers_cannot_delete_revoke_or_forge_a_held_lock_nor_queue_for_it() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let owner = builder(&server)
        .digest_auth("owner", "pw")
        .acl_provider(CreatorOnlyLocks)
        .connect()
        .unwrap();
    let mutex = InterProcessMutex::new(&owner, "/locks/job").unwrap();
    let revoked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = revoked.clone();
    mutex.make_revocable(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
    let health = mutex.health_events();
    let guard = mutex.lock().unwrap();
    let node = mutex.lock_node().unwrap();
    let (data_before, stat_before) = owner.data(&node).unwrap();

    let other = builder(&server)
        .digest_auth("other", "pw")
        .connect()
        .unwrap();
    let anonymous = builder(&server).connect().unwrap();
    for (who, client) in [
        ("other credentials", &other),
        ("no credentials", &anonymous),
    ] {
        let refused = |what: &str, r: zklock::Result<()>| {
            assert!(matches!(&r, Err(Error::NoAuth(_))), "{who}: {what}: {r:?}");
        };
        // The parents are readable: anyone can see the queue.
        assert_eq!(client.children("/locks/job").unwrap().len(), 1, "{who}");
        refused("delete", client.delete(&node));
        refused("guaranteed delete", client.delete_guaranteed(&node));
        refused("revoke", Revoker::attempt_revoke(client, &node));
        refused("set data", client.set_data(&node, b"forged").map(drop));
        refused("read data", client.data(&node).map(drop));
        refused(
            "change the ACL",
            client.set_acl(&node, &[Acl::open_unsafe()]).map(drop),
        );
        refused("delete the lock path", client.delete("/locks/job"));
        // The documented rule: only identities with CREATE on the lock path may queue; anyone
        // else is refused at once, with nothing left behind.
        let theirs = InterProcessMutex::new(client, "/locks/job").unwrap();
        match theirs.acquire_timeout(patience()) {
            Err(Error::NoAuth(path)) => assert!(path.starts_with("/locks/job/"), "{path}"),
            other => panic!("{who}: queueing: {other:?}"),
        }
        assert_eq!(client.children("/locks/job").unwrap().len(), 1, "{who}");
    }

    // The holder never noticed a thing.
    assert_eq!(mutex.health(), Some(LockHealth::Held));
    assert!(health.try_recv().is_err(), "health changed");
    assert!(!revoked.load(std::sync::atomic::Ordering::SeqCst));
    let (data_after, stat_after) = owner.data(&node).unwrap();
    assert_eq!(data_after, data_before);
    assert_eq!(stat_after.version, stat_before.version);
    assert!(mutex.is_owned_by_current_thread());

    // Someone with the owner's credentials may queue, and gets the lock after the holder.
    let teammate = builder(&server)
        .digest_auth("owner", "pw")
        .acl_provider(CreatorOnlyLocks)
        .connect()
        .unwrap();
    let waiter = std::thread::spawn(move || {
        let theirs = InterProcessMutex::new(&teammate, "/locks/job").unwrap();
        let g = theirs.lock().unwrap();
        g.release().unwrap();
    });
    wait_for("the teammate to queue", || {
        owner.children("/locks/job").unwrap().len() == 2
    });
    guard.release().unwrap();
    waiter.join().unwrap();
    // The lock path is a container: once empty the server may delete it.
    wait_for("the queue to empty", || {
        match owner.children("/locks/job") {
            Ok(children) => children.is_empty(),
            Err(Error::NoNode(_)) => true,
            Err(e) => panic!("{e}"),
        }
    });
}

#[test]
fn a_lock_node_nobody_else_may_read_keeps_its_health() {
    // Creator-only means not even READ for others; the holder's own keeper still reads it.
    init_logging();
    let server = TestingServer::start().unwrap();
    let owner = builder(&server)
        .digest_auth("owner", "pw")
        .default_acl(vec![Acl::creator_all()])
        .connect()
        .unwrap();
    let mutex = InterProcessMutex::new(&owner, "/private").unwrap();
    let guard = mutex.lock().unwrap();
    let anonymous = builder(&server).connect().unwrap();
    assert!(matches!(
        anonymous.children("/private"),
        Err(Error::NoAuth(_))
    ));
    assert_eq!(mutex.health(), Some(LockHealth::Held));
    guard.release().unwrap();
}

#[test]
fn added_authentication_is_kept_for_new_sessions() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let owner = builder(&server)
        .digest_auth("owner", "pw")
        .connect()
        .unwrap();
    owner
        .create("/owned")
        .acl(vec![Acl::creator_all()])
        .call()
        .unwrap();

    let late = builder(&server).connect().unwrap();
    assert!(matches!(late.children("/owned"), Err(Error::NoAuth(_))));
    // Bad input is refused before any I/O.
    assert!(matches!(
        late.add_auth("digest", b"no colon"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        late.add_auth("", b"a:b"),
        Err(Error::InvalidArgument(_))
    ));
    late.add_auth("digest", b"owner:pw").unwrap();
    late.children("/owned").unwrap();
    let mutex = InterProcessMutex::new(&late, "/owned/lock").unwrap();
    mutex.lock().unwrap().release().unwrap();

    // A new session (after expiry) authenticates the same way.
    let states = late.connection_states();
    let old = expire_session(&late).unwrap();
    expect_state(&states, ConnectionState::Lost);
    expect_state(&states, ConnectionState::Reconnected);
    assert_ne!(late.session_id(), Some(old));
    late.children("/owned").unwrap();
    mutex.lock().unwrap().release().unwrap();
}

#[test]
fn acl_arguments_are_checked_before_io() {
    let server = TestingServer::start().unwrap();
    let client = builder(&server).connect().unwrap();
    assert!(matches!(
        client.set_acl("/", &[]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.set_acl("no-slash", &[Acl::open_unsafe()]),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        builder(&server).default_acl(vec![]).build(),
        Err(Error::InvalidArgument(_))
    ));
    struct Empty;
    impl AclProvider for Empty {
        fn default_acl(&self) -> Vec<Acl> {
            Vec::new()
        }
    }
    assert!(matches!(
        builder(&server).acl_provider(Empty).build(),
        Err(Error::InvalidArgument(_))
    ));
}

/// `tests/java/CuratorAclMutex.java`.
const CURATOR_ACL_MUTEX: common::java::JavaProgram = common::java::JavaProgram {
    class: "CuratorAclMutex",
    recipes: "InterProcessMutex with an ACLProvider",
    scratch_prefix: "zklock-security-",
    stdout_tail: None,
};

#[test]
fn curator_with_the_same_digest_and_provider_shares_the_lock() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let java = common::java::Java::compile(&CURATOR_ACL_MUTEX);
    let connect = server.connect_string();
    let owner = builder(&server)
        .digest_auth("owner", "pw")
        .acl_provider(CreatorOnlyLocks)
        .connect()
        .unwrap();
    let stranger = builder(&server)
        .digest_auth("other", "pw")
        .connect()
        .unwrap();
    let me = Acl::digest("owner", "pw", Perms::ALL);

    // zklock holds; Curator queues behind it with the same identity.
    let mutex = InterProcessMutex::new(&owner, "/locks/shared").unwrap();
    let guard = mutex.lock().unwrap();
    let mut curator = java.spawn(
        "curator",
        &[&connect, "/locks/shared", "owner:pw", "curator"],
    );
    curator.expect_line("READY");
    wait_for("Curator to queue", || {
        owner.children("/locks/shared").unwrap().len() == 2
    });
    assert!(
        curator.fresh_lines().is_empty(),
        "Curator entered while zklock held"
    );
    guard.release().unwrap();
    let entered = curator.expect_line("ENTER");
    let node = entered.split(' ').nth(2).unwrap().to_owned();
    // Curator's node carries the same creator-only ACL as zklock's would.
    assert_eq!(owner.acl(&node).unwrap().0, vec![me.clone()]);
    assert!(matches!(stranger.delete(&node), Err(Error::NoAuth(_))));
    assert!(matches!(
        Revoker::attempt_revoke(&stranger, &node),
        Err(Error::NoAuth(_))
    ));
    // zklock queues behind Curator and gets the lock when it releases.
    assert!(mutex.try_lock_for(Duration::ZERO).unwrap().is_none());
    let waiter = {
        let owner = owner.clone();
        std::thread::spawn(move || {
            let m = InterProcessMutex::new(&owner, "/locks/shared").unwrap();
            let g = m.lock().unwrap();
            let node = m.lock_node().unwrap();
            g.release().unwrap();
            node
        })
    };
    wait_for("zklock to queue", || {
        owner.children("/locks/shared").unwrap().len() == 2
    });
    curator.send("release");
    curator.expect_line("DONE");
    let ours = waiter.join().unwrap();
    assert!(ours.starts_with("/locks/shared/_c_"));
}

#[test]
fn a_semaphores_own_provider_covers_its_lock_and_lease_nodes() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let owner = builder(&server)
        .digest_auth("owner", "pw")
        .connect()
        .unwrap();
    let semaphore = zklock::InterProcessSemaphoreV2::new(&owner, "/sem", 2).unwrap();
    semaphore.set_acl_provider(CreatorOnlyLocks);
    let lease = semaphore.acquire().unwrap();
    let me = Acl::digest("owner", "pw", Perms::ALL);
    let leases = owner.children("/sem/leases").unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(
        owner.acl(&format!("/sem/leases/{}", leases[0])).unwrap().0,
        vec![me.clone()]
    );
    for parent in ["/sem", "/sem/leases"] {
        assert_eq!(
            owner.acl(parent).unwrap().0,
            vec![me.clone(), Acl::read_unsafe()],
            "{parent}"
        );
    }
    let anonymous = builder(&server).connect().unwrap();
    let theirs = zklock::InterProcessSemaphoreV2::new(&anonymous, "/sem", 2).unwrap();
    assert!(matches!(
        theirs.acquire_timeout(patience()),
        Err(Error::NoAuth(_))
    ));
    semaphore.return_lease(lease).unwrap();
}

#[test]
fn a_leader_latch_takes_its_own_provider() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let owner = builder(&server)
        .digest_auth("owner", "pw")
        .connect()
        .unwrap();
    let latch = zklock::LeaderLatch::builder(&owner, "/leader")
        .id("one")
        .acl_provider(vec![Acl::creator_all(), Acl::read_unsafe()])
        .build()
        .unwrap();
    latch.start().unwrap();
    latch.await_leadership().unwrap();
    let node = latch.leader_node().unwrap();
    let me = Acl::digest("owner", "pw", Perms::ALL);
    assert_eq!(
        owner.acl(&node).unwrap().0,
        vec![me.clone(), Acl::read_unsafe()]
    );
    // Readable: another identity can see who leads.
    let anonymous = builder(&server).connect().unwrap();
    let theirs = zklock::LeaderLatch::new(&anonymous, "/leader").unwrap();
    assert_eq!(theirs.leader().unwrap().unwrap().id, "one");
    assert!(matches!(anonymous.delete(&node), Err(Error::NoAuth(_))));
    latch.close().unwrap();
}

#[test]
fn a_creator_acl_without_credentials_is_refused_before_io() {
    let server = TestingServer::start().unwrap();
    let anonymous = builder(&server)
        .default_acl(vec![Acl::creator_all()])
        .connect()
        .unwrap();
    match anonymous.create("/x").call() {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("no credentials"), "{why}"),
        other => panic!("{other:?}"),
    }
    let mutex = InterProcessMutex::new(&anonymous, "/locks/x").unwrap();
    assert!(matches!(
        mutex.acquire_timeout(patience()),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        anonymous.exists("/locks").unwrap(),
        None,
        "nothing was created"
    );
    // With credentials added at runtime it works.
    anonymous.add_auth("digest", b"late:pw").unwrap();
    anonymous.create("/x").call().unwrap();
}

/// Lock nodes readable by every identity that queues, writable only by their creator.
struct ReadableLocks(Vec<Acl>);

impl AclProvider for ReadableLocks {
    fn default_acl(&self) -> Vec<Acl> {
        vec![Acl::open_unsafe()]
    }

    fn acl_for_path(&self, path: &str) -> Vec<Acl> {
        if path
            .rsplit('/')
            .next()
            .is_some_and(|n| n.starts_with("_c_"))
        {
            self.0.clone()
        } else {
            self.default_acl()
        }
    }
}

/// What the ACL docs say of several identities: creator-only lock nodes make a waiter of
/// another identity fail with NoAuth (it cannot read the node ahead of it); a READ entry per
/// identity lets it queue, while the node stays the creator's to write.
#[test]
fn contenders_of_two_identities_need_lock_nodes_they_can_read() {
    let server = TestingServer::start().unwrap();
    fn connect(server: &TestingServer, user: &str, provider: impl AclProvider) -> Client {
        builder(server)
            .acl_provider(provider)
            .digest_auth(user, "pw")
            .connect()
            .unwrap()
    }
    let a = connect(&server, "a", CreatorOnlyLocks);
    let b = connect(&server, "b", CreatorOnlyLocks);
    let held = InterProcessMutex::new(&a, "/two/creator-only").unwrap();
    held.acquire().unwrap();
    let waiting = InterProcessMutex::new(&b, "/two/creator-only").unwrap();
    let err = waiting.try_lock_for(Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(&err, Error::NoAuth(node) if node.contains("_c_")),
        "{err:?}"
    );
    held.release().unwrap();

    let readable = || {
        ReadableLocks(vec![
            Acl::creator_all(),
            Acl::digest("a", "pw", Perms::READ),
            Acl::digest("b", "pw", Perms::READ),
        ])
    };
    let a = connect(&server, "a", readable());
    let b = connect(&server, "b", readable());
    let held = InterProcessMutex::new(&a, "/two/readable").unwrap();
    held.acquire().unwrap();
    let waiting = InterProcessMutex::new(&b, "/two/readable").unwrap();
    let node = held.lock_node().unwrap();
    // Readable, not writable: no revocation request or forged mark from the other identity.
    assert!(matches!(b.set_data(&node, b"x"), Err(Error::NoAuth(_))));
    std::thread::scope(|s| {
        let t = s.spawn(|| waiting.try_lock_for(patience()).unwrap().is_some());
        std::thread::sleep(Duration::from_millis(200));
        held.release().unwrap();
        assert!(t.join().unwrap(), "the other identity never got the lock");
    });
}
