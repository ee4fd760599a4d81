//! The Client's blocking operations against a real server: retries, ACLs, containers, protection,
//! and bad input refused before any I/O.

mod common;

use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::{Acl, Client, CreateMode, Error, RetryNTimes};

#[test]
fn operations_round_trip() {
    let server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    assert_eq!(client.create("/a").data(b"x").call().unwrap(), "/a");
    let seq = client
        .create("/a/s-")
        .mode(CreateMode::PersistentSequential)
        .call()
        .unwrap();
    assert!(
        seq.starts_with("/a/s-") && seq.len() == "/a/s-".len() + 10,
        "{seq}"
    );
    assert_eq!(
        client.children("/a").unwrap(),
        [seq.trim_start_matches("/a/")]
    );
    let (data, stat) = client.data("/a").unwrap();
    assert_eq!(
        (data.as_slice(), stat.version, stat.num_children),
        (&b"x"[..], 0, 1)
    );
    let stat = client.set_data("/a", b"y").unwrap();
    assert_eq!(stat.version, 1);
    assert!(matches!(
        client.set_data_version("/a", b"z", 0),
        Err(Error::BadVersion(_))
    ));
    assert!(matches!(
        client.create("/a").call(),
        Err(Error::NodeExists(_))
    ));
    assert!(matches!(client.delete("/a"), Err(Error::NotEmpty(_))));
    assert!(matches!(client.data("/nope"), Err(Error::NoNode(_))));
    client.sync("/a").unwrap();
    client.delete(&seq).unwrap();
    client.delete_version("/a", 1).unwrap();
    assert_eq!(client.exists("/a").unwrap(), None);
    // Default data is the host's address, as in Curator.
    client.create("/d").call().unwrap();
    let (data, _) = client.data("/d").unwrap();
    assert!(String::from_utf8(data)
        .unwrap()
        .parse::<std::net::IpAddr>()
        .is_ok());
    client.delete_guaranteed("/d").unwrap();
    client.delete_guaranteed("/d").unwrap(); // already gone counts as deleted
}

#[test]
fn protected_create_has_curators_name() {
    let server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    let path = client
        .create("/locks/job/lock-")
        .mode(CreateMode::EphemeralSequential)
        .parents_as_containers()
        .protected()
        .call()
        .unwrap();
    let name = path.strip_prefix("/locks/job/").unwrap();
    assert!(name.starts_with("_c_"), "{name}");
    let (uuid, rest) = name[3..].split_at(36);
    assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{uuid}");
    assert!(
        rest.starts_with("-lock-") && rest.len() == "-lock-".len() + 10,
        "{rest}"
    );
    let (_, stat) = client.data(&path).unwrap();
    assert_eq!(Some(stat.ephemeral_owner), client.session_id());
}

#[test]
fn retry_succeeds_when_the_server_returns_within_the_budget() {
    let mut server = TestingServer::start().unwrap();
    let client = Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(20))
        .connection_timeout(Duration::from_secs(1))
        .retry_policy(RetryNTimes::new(1000, Duration::from_millis(100)).unwrap())
        .connect()
        .unwrap();
    client.create("/r").call().unwrap();
    server.stop().unwrap();
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        server.restart().unwrap();
        server
    });
    client
        .set_data("/r", b"after")
        .expect("retries should outlast the outage");
    let _server = restarter.join().unwrap();
    assert_eq!(client.data("/r").unwrap().0, b"after");
}

#[test]
fn retry_budget_runs_out_while_the_server_is_down() {
    let mut server = TestingServer::start().unwrap();
    let client = Client::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(20))
        .connection_timeout(Duration::from_millis(500))
        .retry_policy(RetryNTimes::new(2, Duration::from_millis(100)).unwrap())
        .connect()
        .unwrap();
    server.stop().unwrap();
    assert_eq!(client.exists("/x"), Err(Error::ConnectionLoss));
    // An operation deadline bounds the call too, whatever the policy allows.
    let client = Client::builder(&server.connect_string())
        .connection_timeout(Duration::from_millis(200))
        .operation_timeout(Duration::from_millis(700))
        .retry_policy(zklock::RetryForever::new(Duration::from_millis(50)).unwrap())
        .build()
        .unwrap();
    assert_eq!(client.exists("/x"), Err(Error::Timeout));
}

#[test]
fn creator_only_acl_keeps_other_clients_out() {
    let server = TestingServer::start().unwrap();
    let owner = Client::builder(&server.connect_string())
        .digest_auth("alice", "secret")
        .default_acl(vec![Acl::creator_all()])
        .connect()
        .unwrap();
    let stranger = Client::connect(&server.connect_string()).unwrap();
    owner.create("/secure").data(b"mine").call().unwrap();
    owner.create("/secure/child").call().unwrap();
    assert!(matches!(
        stranger.set_data("/secure", b"theirs"),
        Err(Error::NoAuth(_))
    ));
    assert!(matches!(
        stranger.delete("/secure/child"),
        Err(Error::NoAuth(_))
    ));
    assert!(matches!(stranger.data("/secure"), Err(Error::NoAuth(_))));
    owner.set_data("/secure", b"still mine").unwrap();
    owner.delete("/secure/child").unwrap();
    owner.delete("/secure").unwrap();
}

#[test]
fn container_parents_are_reaped_after_their_last_child() {
    let server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    let node = client
        .create("/c1/c2/node")
        .parents_as_containers()
        .call()
        .unwrap();
    assert!(client.exists("/c1/c2").unwrap().is_some());
    client.delete(&node).unwrap();
    wait_for("the server to reap the container parents", || {
        client.exists("/c1").unwrap().is_none()
    });
}

#[test]
fn namespace_is_created_and_paths_are_relative_to_it() {
    let server = TestingServer::start().unwrap();
    let ns = Client::builder(&server.connect_string())
        .namespace("app/one")
        .connect()
        .unwrap();
    let root = Client::connect(&server.connect_string()).unwrap();
    assert_eq!(ns.namespace(), Some("/app/one"));
    ns.create("/n").data(b"v").call().unwrap();
    assert_eq!(root.data("/app/one/n").unwrap().0, b"v");
    let (_, _, watch) = ns.data_watch("/n").unwrap();
    root.delete("/app/one/n").unwrap();
    assert_eq!(watch.wait_timeout(patience()).unwrap().path, "/n");
}

#[test]
fn children_watch_fires_on_a_new_child_and_refuses_a_missing_node() {
    let server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    assert!(matches!(client.children_watch("/w"), Err(Error::NoNode(_))));
    client.create("/w").call().unwrap();
    client.create("/w/a").call().unwrap();
    let (children, watch) = client.children_watch("/w").unwrap();
    assert_eq!(children, ["a"]);
    assert!(watch.try_event().is_none());
    client.set_data("/w/a", b"x").unwrap(); // a child's data is not the list
    client.create("/w/b").call().unwrap();
    let event = watch.wait_timeout(patience()).expect("the watch fires");
    assert_eq!(event.path, "/w");
    assert_eq!(
        event.kind,
        zklock::zookeeper::WatchEventKind::NodeChildrenChanged
    );
}

#[test]
fn bad_input_is_refused_before_any_io() {
    for bad in ["", " ", ",", "host:notaport", "a:1,,b:2", "host:1/chroot"] {
        let err = Client::builder(bad).build().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err:?}");
    }
    let b = || Client::builder("127.0.0.1:1");
    for err in [
        b().session_timeout(Duration::ZERO).build().unwrap_err(),
        b().connection_timeout(Duration::ZERO).build().unwrap_err(),
        b().operation_timeout(Duration::ZERO).build().unwrap_err(),
        b().namespace("../x").build().unwrap_err(),
    ] {
        assert!(
            matches!(err, Error::InvalidArgument(_) | Error::InvalidPath { .. }),
            "{err:?}"
        );
    }
    // No server at all: path and data checks still answer at once, with no connection needed.
    let offline = b()
        .connection_timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    for path in [
        "relative",
        "/trailing/",
        "/a/./b",
        "/a/../b",
        "/nul\0",
        "//",
        "",
    ] {
        let err = offline.exists(path).unwrap_err();
        assert!(
            matches!(err, Error::InvalidPath { .. }),
            "{path:?}: {err:?}"
        );
        let err = offline.create(path).call().unwrap_err();
        assert!(
            matches!(err, Error::InvalidPath { .. }),
            "{path:?}: {err:?}"
        );
    }
    let big = vec![0u8; 1024 * 1024 + 1];
    assert!(matches!(
        offline.create("/big").data(&big).call(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        offline.set_data("/big", &big),
        Err(Error::InvalidArgument(_))
    ));
    offline.close();
    assert_eq!(offline.exists("/x"), Err(Error::Closed));
}

#[test]
fn calls_on_a_closed_client_fail_with_closed() {
    let server = TestingServer::start().unwrap();
    let client = client(&server.connect_string(), Duration::from_secs(20));
    client
        .create("/e")
        .mode(CreateMode::Ephemeral)
        .call()
        .unwrap();
    let other = Client::connect(&server.connect_string()).unwrap();
    let clone = client.clone();
    client.close();
    client.close();
    assert!(clone.is_closed());
    assert_eq!(clone.exists("/e"), Err(Error::Closed));
    assert_eq!(clone.create("/f").call(), Err(Error::Closed));
    assert_eq!(clone.delete("/e"), Err(Error::Closed));
    assert!(matches!(clone.data_watch("/e"), Err(Error::Closed)));
    // Closing ended the session at once: its ephemeral node is gone.
    assert_eq!(other.exists("/e").unwrap(), None);
}

#[test]
fn a_missing_parent_the_caller_may_not_create_is_named_in_no_auth() {
    let server = TestingServer::start().unwrap();
    let owner = Client::builder(&server.connect_string())
        .digest_auth("alice", "secret")
        .connect()
        .unwrap();
    // Anyone may read and list /shut, only alice may create under it.
    owner
        .create("/shut")
        .acl(vec![Acl::creator_all(), Acl::read_unsafe()])
        .call()
        .unwrap();
    let stranger = client(&server.connect_string(), Duration::from_secs(20));
    // Sent with its missing parents: /shut answers NodeExists or NoAuth, /shut/a NoAuth.
    match stranger
        .create("/shut/a/node")
        .parents_as_containers()
        .call()
    {
        Err(Error::NoAuth(path)) => assert_eq!(path, "/shut/a"),
        other => panic!("{other:?}"),
    }
    // Under an existing parent the stranger may create in, a parent it may not create (the
    // pipelined create of /shut answers NoAuth) is no obstacle.
    owner
        .create("/shut/open")
        .acl(vec![Acl::open_unsafe()])
        .call()
        .unwrap();
    let node = stranger
        .create("/shut/open/node")
        .parents_as_containers()
        .call()
        .unwrap();
    assert_eq!(node, "/shut/open/node");
    assert_eq!(owner.children("/shut").unwrap(), ["open"]);
}
