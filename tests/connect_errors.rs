//! `connect()` says why it failed: the error chain names the cause.

mod common;

use std::error::Error as _;
use std::net::TcpListener;
use std::time::Duration;

use common::*;
use zklock::testing::TestingServer;
use zklock::zookeeper::Perms;
use zklock::{Acl, Client, Error};

/// The error's whole chain, as one line.
fn connect(connect: &str) -> Error {
    Client::builder(connect)
        .session_timeout(Duration::from_secs(4))
        .connection_timeout(Duration::from_secs(2))
        .connect()
        .expect_err("no ZooKeeper there")
}

#[test]
fn an_unused_port_is_named_as_refused() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let e = connect(&format!("127.0.0.1:{port}"));
    let text = chain(&e);
    eprintln!("{text}");
    assert!(matches!(e, Error::ConnectFailed { .. }), "{e:?}");
    assert!(e.source().is_some(), "no cause: {e:?}");
    assert!(text.contains(&port.to_string()), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    match &e {
        Error::ConnectFailed { cause, .. } => assert!(
            matches!(
                **cause,
                Error::Io {
                    kind: std::io::ErrorKind::ConnectionRefused,
                    ..
                }
            ),
            "{text}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unresolvable_host_is_named() {
    let e = connect("no-such-host.invalid:2181");
    let text = chain(&e);
    eprintln!("{text}");
    assert!(matches!(e, Error::ConnectFailed { .. }), "{e:?}");
    assert!(text.contains("no-such-host.invalid"), "{text}");
    assert!(e.source().is_some(), "no cause: {e:?}");
}

#[test]
fn a_namespace_without_the_right_to_create_it_is_named_as_no_auth() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let admin = Client::builder(&server.connect_string())
        .digest_auth("admin", "secret")
        .connect()
        .unwrap();
    // World may read /locked but not create under it.
    admin
        .create("/locked")
        .acl(vec![
            Acl::creator_all(),
            Acl::new(Perms::READ, "world", "anyone"),
        ])
        .call()
        .unwrap();
    let e = Client::builder(&server.connect_string())
        .namespace("locked/app")
        .connection_timeout(Duration::from_secs(3))
        .connect()
        .expect_err("no right to create the namespace");
    let text = chain(&e);
    eprintln!("{text}");
    match &e {
        Error::ConnectFailed { cause, .. } => {
            assert!(matches!(**cause, Error::NoAuth(_)), "{text}")
        }
        other => panic!("{other:?}"),
    }
    assert!(text.contains("/locked/app"), "{text}");
}

/// A server whose root only `admin` may change (world may read it), with `/app` made by
/// `admin` as `user`'s own when `with_app`: `user`'s digest allows it nothing outside `/app`.
fn locked_down_root(server: &TestingServer, with_app: bool) -> Client {
    let admin = Client::builder(&server.connect_string())
        .digest_auth("admin", "secret")
        .connect()
        .unwrap();
    if with_app {
        admin
            .create("/app")
            .acl(vec![
                Acl::digest("user", "pw", Perms::ALL),
                Acl::creator_all(),
            ])
            .call()
            .unwrap();
    }
    admin
        .set_acl("/", &[Acl::creator_all(), Acl::read_unsafe()])
        .unwrap();
    admin
}

fn user(server: &TestingServer) -> zklock::ClientBuilder {
    Client::builder(&server.connect_string())
        .digest_auth("user", "pw")
        .namespace("app")
        .connection_timeout(Duration::from_secs(3))
}

#[test]
fn a_client_with_rights_only_inside_its_namespace_connects_when_it_exists() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let admin = locked_down_root(&server, true);
    // Creating `/app` again would be refused (no CREATE on `/`): the namespace is probed first.
    let user = user(&server)
        .connect()
        .expect("connects into its namespace");
    let mutex = zklock::InterProcessMutex::new(&user, "/locks/job").unwrap();
    let guard = mutex.lock().unwrap();
    assert_eq!(admin.children("/app/locks/job").unwrap().len(), 1);
    guard.release().unwrap();
    // The user really may not create outside `/app`.
    let outside = Client::builder(&server.connect_string())
        .digest_auth("user", "pw")
        .connect()
        .unwrap();
    assert!(matches!(
        outside.create("/elsewhere").call(),
        Err(Error::NoAuth(_))
    ));
}

#[test]
fn a_missing_namespace_it_may_not_create_is_named_as_no_auth() {
    init_logging();
    let server = TestingServer::start().unwrap();
    let _admin = locked_down_root(&server, false);
    let e = user(&server)
        .connect()
        .expect_err("no right to create the namespace");
    let text = chain(&e);
    eprintln!("{text}");
    match &e {
        Error::ConnectFailed { cause, .. } => match &**cause {
            Error::NoAuth(path) => assert_eq!(path, "/app"),
            other => panic!("{other:?}: {text}"),
        },
        other => panic!("{other:?}"),
    }
    assert!(text.contains("NoAuth") && text.contains("/app"), "{text}");
}

#[test]
fn a_refused_port_fails_at_once_not_after_the_connection_timeout() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let started = std::time::Instant::now();
    let e = Client::builder(&format!("127.0.0.1:{port},127.0.0.1:{port}"))
        .connection_timeout(Duration::from_secs(300))
        .connect()
        .expect_err("nothing listens there");
    let took = started.elapsed();
    eprintln!("refused in {took:?}: {}", chain(&e));
    assert!(chain(&e).to_lowercase().contains("refused"), "{e:?}");
    // The bound is the connection timeout; failing at once means far below it.
    assert!(took < Duration::from_secs(150), "{took:?}");
}
